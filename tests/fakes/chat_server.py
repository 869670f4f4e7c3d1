"""A real HTTP server on loopback that speaks the chat-completions protocol with scripted replies.

Each POST /v1/chat/completions takes the next reply of the script, answered as JSON or, when the request asks
to stream, as server-sent events. A reply is a dict: `content`, `tool_calls` ([{name, arguments}], arguments a
dict or a raw string), `refusal`, `finish_reason`, `status` (an HTTP error), `delay` (seconds before answering).
Every request body is kept in `requests`.

Recording: with INFRA_LLM_RECORD_UPSTREAM=<base url of a real endpoint> (and INFRA_LLM_RECORD_MODEL, and
INFRA_LLM_RECORD_API_KEY if it needs one), a server made by `from_fixture` forwards each request there instead
and, when it stops, rewrites the fixture with the replies it got.
"""

from __future__ import annotations

import json
import os
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Self

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "llm"


def _completion(reply: dict[str, Any], model: str, n: int) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": reply.get("content"),
                               "refusal": reply.get("refusal")}
    calls = _calls(reply)
    if calls:
        message["tool_calls"] = calls
    finish = reply.get("finish_reason") or ("tool_calls" if calls else "stop")
    return {"id": f"chatcmpl-{n}", "object": "chat.completion", "created": 1_700_000_000 + n, "model": model,
            "choices": [{"index": 0, "message": message, "finish_reason": finish, "logprobs": None}],
            "usage": {"prompt_tokens": 10, "completion_tokens": 10, "total_tokens": 20}}


def _calls(reply: dict[str, Any]) -> list[dict[str, Any]]:
    out = []
    for i, call in enumerate(reply.get("tool_calls") or []):
        args = call.get("arguments", {})
        out.append({"id": call.get("id", f"call_{i}"), "type": "function",
                    "function": {"name": call["name"],
                                 "arguments": args if isinstance(args, str) else json.dumps(args)}})
    return out


def _chunks(reply: dict[str, Any], model: str, n: int) -> list[dict[str, Any]]:
    base = {"id": f"chatcmpl-{n}", "object": "chat.completion.chunk", "created": 1_700_000_000 + n, "model": model}
    out = [{**base, "choices": [{"index": 0, "delta": {"role": "assistant"}, "finish_reason": None}]}]
    text = reply.get("content") or ""
    for i in range(0, len(text), 16):  # several deltas, as servers send them
        out.append({**base, "choices": [{"index": 0, "delta": {"content": text[i:i + 16]}, "finish_reason": None}]})
    if reply.get("refusal"):
        out.append({**base, "choices": [{"index": 0, "delta": {"refusal": reply["refusal"]}, "finish_reason": None}]})
    for i, call in enumerate(_calls(reply)):
        args = call["function"]["arguments"]
        half = len(args) // 2
        out.append({**base, "choices": [{"index": 0, "finish_reason": None, "delta": {"tool_calls": [
            {"index": i, "id": call["id"], "type": "function",
             "function": {"name": call["function"]["name"], "arguments": args[:half]}}]}}]})
        out.append({**base, "choices": [{"index": 0, "finish_reason": None, "delta": {"tool_calls": [
            {"index": i, "function": {"arguments": args[half:]}}]}}]})
    finish = reply.get("finish_reason") or ("tool_calls" if reply.get("tool_calls") else "stop")
    out.append({**base, "choices": [{"index": 0, "delta": {}, "finish_reason": finish}]})
    return out


def reply_from_completion(body: dict[str, Any]) -> dict[str, Any]:
    """A scripted reply that reproduces a real server's completion (for recording)."""
    msg = body["choices"][0]["message"]
    reply: dict[str, Any] = {k: msg[k] for k in ("content", "refusal") if msg.get(k)}
    if msg.get("tool_calls"):
        reply["tool_calls"] = [{"id": c["id"], "name": c["function"]["name"],
                                "arguments": c["function"]["arguments"]} for c in msg["tool_calls"]]
    if body["choices"][0].get("finish_reason") not in (None, "stop", "tool_calls"):
        reply["finish_reason"] = body["choices"][0]["finish_reason"]
    return reply


class ChatServer:
    """Start with `with ChatServer(replies) as server:`; `server.base_url` ends in /v1."""

    def __init__(self, replies: list[dict[str, Any]], *, upstream: str | None = None, record_to: Path | None = None):
        self.replies = list(replies)
        self.requests: list[dict[str, Any]] = []
        self.headers: list[dict[str, str]] = []
        self.upstream = upstream
        self.record_to = record_to
        self.recorded: list[dict[str, Any]] = []
        self._lock = threading.Lock()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @classmethod
    def from_fixture(cls, name: str) -> ChatServer:
        path = FIXTURES / f"{name}.json"
        upstream = os.environ.get("INFRA_LLM_RECORD_UPSTREAM")
        if upstream:
            return cls([], upstream=upstream, record_to=path)
        return cls(json.loads(path.read_text())["replies"])

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}/v1"

    def env(self, **extra: str) -> dict[str, str]:
        """Environment variables that point `infra` at this server, with short timeouts and no retries."""
        return {"INFRA_LLM_BASE_URL": self.base_url, "INFRA_LLM_MODEL": "scripted", "INFRA_LLM_TIMEOUT": "5",
                "INFRA_LLM_MAX_RETRIES": "0", **extra}

    def __enter__(self) -> Self:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()
        if self.record_to is not None and self.recorded:
            self.record_to.write_text(json.dumps({"replies": self.recorded}, indent=2, sort_keys=True) + "\n")

    def _next(self, body: dict[str, Any]) -> dict[str, Any]:
        with self._lock:
            self.requests.append(body)
            if self.upstream:
                return self._forward(body)
            if not self.replies:
                return {"status": 500, "message": "the script has no more replies"}
            return self.replies.pop(0)

    def _forward(self, body: dict[str, Any]) -> dict[str, Any]:
        import httpx

        headers = {}
        if os.environ.get("INFRA_LLM_RECORD_API_KEY"):
            headers["Authorization"] = f"Bearer {os.environ['INFRA_LLM_RECORD_API_KEY']}"
        sent = {**body, "stream": False, "model": os.environ.get("INFRA_LLM_RECORD_MODEL", body.get("model"))}
        resp = httpx.post(self.upstream.rstrip("/") + "/chat/completions", json=sent, headers=headers, timeout=300)
        resp.raise_for_status()
        reply = reply_from_completion(resp.json())
        self.recorded.append(reply)
        return reply

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def _json(self, status: int, body: dict[str, Any]) -> None:
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self) -> None:
                if self.path.rstrip("/").endswith("/models"):
                    self._json(200, {"object": "list", "data": [{"id": "scripted", "object": "model",
                                                                 "created": 0, "owned_by": "tests"}]})
                else:
                    self._json(404, {"error": {"message": "not found"}})

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = json.loads(self.rfile.read(length) or b"{}")
                server.headers.append({k.lower(): v for k, v in self.headers.items()})
                if not self.path.rstrip("/").endswith("/chat/completions"):
                    self._json(404, {"error": {"message": "not found"}})
                    return
                reply = server._next(body)
                if reply.get("delay"):
                    time.sleep(reply["delay"])
                if reply.get("status"):
                    try:
                        self._json(reply["status"], {"error": {"message": reply.get("message", "scripted error"),
                                                               "type": "server_error"}})
                    except OSError:
                        pass  # the client gave up waiting
                    return
                n = len(server.requests)
                model = body.get("model", "scripted")
                try:
                    if body.get("stream"):
                        self.send_response(200)
                        self.send_header("Content-Type", "text/event-stream")
                        self.end_headers()
                        for chunk in _chunks(reply, model, n):
                            self.wfile.write(f"data: {json.dumps(chunk)}\n\n".encode())
                        self.wfile.write(b"data: [DONE]\n\n")
                    else:
                        self._json(200, _completion(reply, model, n))
                except OSError:
                    pass

        return Handler
