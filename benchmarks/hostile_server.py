"""A hostile OpenAI-compatible server for `benchmarks/fuzz.py`: what `infra bench --endpoint` must survive.

Every request's answer is chosen from its URL, `/c/<seed>/<case>/v1/...`, so that case `case` of a fuzz run gets
the same misbehaviour whatever ran before it. Most answers are well-formed streams with one thing wrong: an HTTP
error, a malformed or truncated event stream, wrong types or absurd token counts in `usage`, deep nesting, huge
lines, invalid UTF-8, stalls past the client's timeout, a connection closed mid-stream; `/v1/models` and
`/metrics` are broken the same ways. The server runs in a thread of the fuzz driver; the cases run
`infra bench --endpoint` against it from the worker processes.
"""

from __future__ import annotations

import json
import random
import re
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

PATH = re.compile(r"^/c/(\d+)/(\d+)(/.*)$")
MODEL = "fuzz-model"
STALL_S = 4.0
"""Longer than the `--timeout` the client cases pass (2 s): a stalled stream must end as a timeout."""


def _chunk(content: Any = "tok", *, role: bool = False, usage: Any = None, finish: Any = None) -> dict[str, Any]:
    delta: dict[str, Any] = {"role": "assistant"} if role else {"content": content}
    event: dict[str, Any] = {"id": "x", "object": "chat.completion.chunk", "model": MODEL,
                             "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}
    if usage is not None:
        event = {"id": "x", "object": "chat.completion.chunk", "model": MODEL, "choices": [], "usage": usage}
    return event


def _events(tokens: int, usage: Any) -> list[Any]:
    return ([_chunk(role=True)] + [_chunk() for _ in range(tokens)] + [_chunk(None, finish="length")]
            + [_chunk(usage=usage)])


def _data(event: Any) -> bytes:
    return b"data: " + (event if isinstance(event, bytes) else json.dumps(event).encode()) + b"\n\n"


def _deep(depth: int) -> bytes:
    return b'{"choices":' + b"[" * depth + b"]" * depth + b"}"


USAGES: list[Any] = [
    {"prompt_tokens": -1, "completion_tokens": 4}, {"prompt_tokens": 10, "completion_tokens": -5},
    {"prompt_tokens": 10**30, "completion_tokens": 4}, {"prompt_tokens": 1e308, "completion_tokens": 1e-300},
    {"prompt_tokens": "ten", "completion_tokens": [4]}, {"prompt_tokens": None, "completion_tokens": None},
    {"prompt_tokens": True, "completion_tokens": {"n": 4}}, "usage", 5, [], {"completion_tokens": 2**70},
]


def _stream(rng: random.Random, tokens: int) -> tuple[list[bytes], str]:
    """SSE body parts and what is wrong with them."""
    kind = rng.choice(["usage", "json", "choices", "content", "done", "lines", "bytes", "many", "error", "deep",
                       "nan", "ok"])
    usage: Any = {"prompt_tokens": 32, "completion_tokens": tokens, "total_tokens": 32 + tokens}
    if kind == "usage":
        usage = rng.choice(USAGES)
        return [_data(e) for e in _events(tokens, usage)] + [b"data: [DONE]\n\n"], f"usage {usage!r}"[:80]
    events: list[Any] = _events(tokens, usage)
    what = kind
    if kind == "json":
        bad = rng.choice([b"{", b"{'a': 1}", b"null", b"[]", b"\"text\"", b"1e999", b"{\"choices\": 1}"])
        events.insert(rng.randrange(1, len(events)), bad)
        what = f"json {bad!r}"
    elif kind == "choices":
        bad = rng.choice([None, 1, "x", [None], [{"delta": None}], [{"delta": {"content": 5}}], [{}], {"0": {}}])
        event = {"object": "chat.completion.chunk", "choices": bad}
        events.insert(rng.randrange(1, len(events)), json.dumps(event).encode())
        what = f"choices {bad!r}"
    elif kind == "content":
        bad = rng.choice([5, ["a"], {"t": 1}, True, "x" * 1_000_000, "\ud800", "\x00"])
        events.insert(rng.randrange(1, len(events)), _chunk(bad))
        what = f"content {type(bad).__name__}"
    elif kind == "done":
        cut = rng.randrange(0, len(events))
        parts = [_data(e) for e in events[:cut]] + [b"data: [DONE]\n\n"] * rng.choice([0, 1, 3])
        return parts, f"stream cut after {cut} events"
    elif kind == "lines":
        style = rng.choice(["crlf", "nospace", "comments", "nodata", "blank"])
        parts = [_data(e) for e in events] + [b"data: [DONE]\n\n"]
        if style == "crlf":
            parts = [p.replace(b"\n", b"\r\n") for p in parts]
        elif style == "nospace":
            parts = [p.replace(b"data: ", b"data:") for p in parts]
        elif style == "comments":
            parts = [b": keep-alive\n\n" + p for p in parts]
        elif style == "nodata":
            parts = [p.replace(b"data: ", b"event: ") for p in parts]
        else:
            parts = [b"\n\n\n" + p for p in parts]
        return parts, f"lines {style}"
    elif kind == "bytes":
        bad = rng.choice([b"data: \xff\xfe\x00\n\n", b"data: " + b"x" * 3_000_000 + b"\n\n", b"\x00" * 1000])
        parts = [_data(e) for e in events] + [b"data: [DONE]\n\n"]
        parts.insert(rng.randrange(1, len(parts)), bad)
        return parts, f"bytes {bad[:12]!r} ({len(bad)} B)"
    elif kind == "many":
        events = [_chunk(role=True)] + [_chunk("") for _ in range(20_000)] + events[1:]
        what = "20,000 empty deltas"
    elif kind == "error":
        events.insert(rng.randrange(1, len(events)), {"error": {"message": "overloaded", "code": 503}})
        what = "error event mid-stream"
    elif kind == "deep":
        events.insert(rng.randrange(1, len(events)), _deep(rng.choice([1000, 100_000])))
        what = "deeply nested event"
    elif kind == "nan":
        events.insert(rng.randrange(1, len(events)), b'{"choices":[{"delta":{"content":"a"}}],"usage":'
                                                     b'{"prompt_tokens":NaN,"completion_tokens":Infinity}}')
        what = "NaN and Infinity in usage"
    return [_data(e) for e in events] + [b"data: [DONE]\n\n"], what


def answer(seed: int, case: int, path: str, n: int) -> tuple[int, dict[str, str], list[bytes], float, bool]:
    """(status, headers, body parts, seconds to stall before the body, close mid-body) for request `n` of a case."""
    rng = random.Random(f"{seed}/{case}/{path}")
    sse = {"Content-Type": "text/event-stream"}
    if path.endswith("/models"):
        # Mostly right, so that most cases reach the chat stream, the part with the most to get wrong.
        if rng.random() < 0.85:
            return 200, {"Content-Type": "application/json"}, [json.dumps({"data": [{"id": MODEL}]}).encode()], \
                0.0, False
        body = rng.choice([{"data": 5}, {"data": []}, {"data": [{"id": 7}]}, {"data": [{"id": "m" * 100_000}]},
                           [], "x"])
        raw = _deep(100_000) if rng.random() < 0.2 else json.dumps(body).encode()
        return rng.choice([200, 200, 404, 500]), {"Content-Type": "application/json"}, [raw], 0.0, False
    if path.endswith("/metrics"):
        text = rng.choice([b"vllm:num_requests_running 1\n", b"vllm:time_to_first_token_seconds_sum NaN\n",
                           b"vllm:time_to_first_token_seconds_count -1\n", b"\xff\xfe" * 1000,
                           b"x{" * 50_000, b"vllm:e2e_request_latency_seconds_sum 1e999\n"])
        return 200, {"Content-Type": "text/plain"}, [text], 0.0, False
    status = rng.choice([200] * 12 + [500, 429, 404, 401, 413, 503])
    if status != 200:
        body = rng.choice([b'{"error": {"message": "no"}}', b"", b"\xff" * 10, b"<html>" + b"x" * 100_000])
        return status, {"Content-Type": "application/json"}, [body], 0.0, False
    tokens = rng.choice([0, 1, 4, 4, 4])
    parts, _ = _stream(rng, tokens)
    # Request n of the case: the first request of a case may differ from the later ones only in timing.
    stall = STALL_S if rng.random() < 0.08 and n % 2 == 0 else 0.0
    close = rng.random() < 0.08
    if rng.random() < 0.1:
        sse = rng.choice([{"Content-Type": "application/json"}, {"Content-Type": "text/html"}, {}])
    return 200, sse, parts, stall, close


def describe(seed: int, case: int) -> str:
    """What the chat answers of case `case` get wrong (for the fuzz report)."""
    rng = random.Random(f"{seed}/{case}//v1/chat/completions")
    status = rng.choice([200] * 12 + [500, 429, 404, 401, 413, 503])
    if status != 200:
        return f"HTTP {status}"
    tokens = rng.choice([0, 1, 4, 4, 4])
    return f"{tokens} tokens, {_stream(rng, tokens)[1]}"


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.0"  # the body ends when the connection closes: a cut stream is just a shorter one
    counts: dict[tuple[int, int], int] = {}
    lock = threading.Lock()

    def log_message(self, *args: Any) -> None:
        pass

    def _serve(self) -> None:
        m = PATH.match(self.path)
        length = int(self.headers.get("Content-Length") or 0)
        if length:
            self.rfile.read(min(length, 1 << 20))
        if not m:
            self.send_error(404)
            return
        seed, case, rest = int(m.group(1)), int(m.group(2)), m.group(3)
        with self.lock:
            n = self.counts.get((seed, case), 0)
            self.counts[(seed, case)] = n + 1
        status, headers, parts, stall, close = answer(seed, case, rest, n)
        try:
            self.send_response(status)
            for k, v in headers.items():
                self.send_header(k, v)
            self.end_headers()
            if stall:
                time.sleep(stall)
            for i, part in enumerate(parts):
                if close and i == len(parts) // 2:
                    break
                self.wfile.write(part)
            self.wfile.flush()
        except OSError:
            pass  # the client gave up (its timeout): that is one of the things being tested

    do_GET = _serve
    do_POST = _serve


def start() -> tuple[str, Callable[[], None]]:
    """Start the server on a free local port; (base URL, stop)."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()

    def stop() -> None:
        server.shutdown()
        server.server_close()

    return f"http://127.0.0.1:{server.server_address[1]}", stop
