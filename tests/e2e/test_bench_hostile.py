"""`infra bench --endpoint` against servers that fail, lie or stall, started by the tests themselves: a run that
failed must never pass or pass for inconclusive, its JSON stays strict, and every run ends."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from infra import api
from infra.bench.client import ClientOptions
from infra.bench.endpoint import bench_endpoint, plan_load
from infra.report.bench import endpoint_json

from ..bench_servers import emulator

Reply = Callable[[int, dict[str, Any]], tuple[int, list[bytes]]]
"""(request number from 0, request body) -> (HTTP status, body pieces)."""


def infra(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "infra", *args], capture_output=True, text=True, timeout=60)


def strict(text: str) -> dict[str, Any]:
    """The last line of stdout as strict JSON: Infinity and NaN are refused."""
    def refuse(constant: str) -> None:
        raise ValueError(f"{constant} in JSON")

    return json.loads(text.strip().splitlines()[-1], parse_constant=refuse)


def _event(obj: dict[str, Any]) -> bytes:
    return b"data: " + json.dumps(obj).encode() + b"\n\n"


def good_stream(usage: dict[str, Any] | None = None) -> Reply:
    """A well-formed answer of max_tokens one-token chunks, with `usage` (or honest counts) at the end."""
    def reply(n: int, body: dict[str, Any]) -> tuple[int, list[bytes]]:
        tokens = int(body.get("max_tokens") or 4)
        chunks = [_event({"choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}]})]
        chunks += [_event({"choices": [{"index": 0, "delta": {"content": " x"},
                                        "finish_reason": "length" if i == tokens - 1 else None}]})
                   for i in range(tokens)]
        counts = usage or {"prompt_tokens": len(body["messages"][0]["content"].split()), "completion_tokens": tokens}
        return 200, chunks + [_event({"choices": [], "usage": counts}), b"data: [DONE]\n\n"]

    return reply


def status(code: int) -> Reply:
    return lambda n, body: (code, [json.dumps({"error": {"message": f"scripted {code}"}}).encode()])


def malformed(n: int, body: dict[str, Any]) -> tuple[int, list[bytes]]:
    return 200, [b"data: {this is not json\n\n", b"data: [DONE]\n\n"]


def every_third_fails(n: int, body: dict[str, Any]) -> tuple[int, list[bytes]]:
    """Requests 1, 4, 7, ... answer HTTP 500: 13 of 40."""
    return status(500)(n, body) if n % 3 == 1 else good_stream()(n, body)


@contextmanager
def server(reply: Reply, metrics: Callable[[int], str] | None = None, models: Any = None,
           trickle_s: float = 0.0) -> Iterator[str]:
    """A real HTTP server on a free loopback port that answers chat completions with `reply`, /metrics with
    `metrics(scrape number)` when given, and /v1/models with `models` (a list of one model unless given), one
    byte every `trickle_s` when that is set; yields its /v1."""
    listed = {"object": "list", "data": [{"id": "hostile", "object": "model"}]} if models is None else models
    count = iter(range(10**9))
    scrapes = iter(range(10**9))
    lock = threading.Lock()

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: Any) -> None:
            pass

        def do_GET(self) -> None:
            if self.path.endswith("/metrics") and metrics is not None:
                self._send(200, [metrics(next(scrapes)).encode()])
                return
            body = json.dumps(listed).encode()
            self._send(200, [body[i:i + 1] for i in range(len(body))] if trickle_s else [body])

        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"{}")
            with lock:
                n = next(count)
            self._send(*reply(n, body))

        def _send(self, code: int, pieces: list[bytes]) -> None:
            self.send_response(code)
            stream = code == 200 and self.command == "POST"
            self.send_header("Content-Type", "text/event-stream" if stream else "application/json")
            self.end_headers()
            for piece in pieces:
                try:
                    self.wfile.write(piece)
                    self.wfile.flush()
                except OSError:
                    return  # the client gave up
                time.sleep(trickle_s if self.command == "GET" else 0.0)

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    httpd.daemon_threads = True
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}/v1"
    finally:
        httpd.shutdown()
        httpd.server_close()


RUN = ("--requests", "10", "--concurrency", "2", "--output-tokens", "4")


def test_every_request_failing_fails_the_run():
    with emulator("--ttft-ms", "20", "--itl-ms", "5", "--error-rate", "1") as url:
        out = infra("bench", "--endpoint", url, *RUN)
    assert out.returncode == 3, out.stdout + out.stderr
    assert "verdict: FAIL" in out.stdout and "failed requests (http_500 10)" in out.stdout


@pytest.mark.parametrize("reply, kind", [(status(501), "http_501"), (malformed, "bad_sse")])
def test_a_server_that_always_errs_or_garbles_fails_with_its_failures_counted(reply, kind):
    with server(reply) as url:
        out = infra("bench", "--endpoint", url, *RUN, "--json")
    assert out.returncode == 3, out.stderr
    v = strict(out.stdout)["verdict"]
    assert v["overall"] == "fail" and v["failed_verdict"] == "fail" and v["failed_kinds"] == {kind: 10}


def test_a_p99_certainly_missed_fails_and_its_json_is_strict():
    with server(every_third_fails) as url:
        out = infra("bench", "--endpoint", url, "--requests", "40", "--concurrency", "2", "--output-tokens", "4",
                    "--warmup", "0", "--slo", "ttft_p99=1s", "--json")
        shown = infra("--wide", "bench", "--endpoint", url, "--requests", "40", "--concurrency", "2",
                      "--output-tokens", "4", "--warmup", "0", "--slo", "ttft_p99=1s")
    assert out.returncode == 3, out.stderr
    data = strict(out.stdout)
    v = data["verdict"]
    assert v["failed_kinds"] == {"http_500": 13} and data["failed"] == 13
    [o] = v["objectives"]
    assert o["verdict"] == "fail" and o["measured_ms"] is None and "failed requests" in o["measured_ms_note"]
    assert o["ci_ms"] == [None, None] and o["ci_ms_note"]
    assert shown.returncode == 3 and "inf (inf .. inf)" in shown.stdout and "verdict: FAIL" in shown.stdout


def test_an_allowance_of_every_request_lets_a_failing_run_through():
    with emulator("--ttft-ms", "1", "--itl-ms", "1", "--error-rate", "1") as url:
        out = infra("bench", "--endpoint", url, *RUN, "--max-failed", "100%", "--json")
    assert out.returncode == 0, out.stderr
    v = strict(out.stdout)["verdict"]
    assert v["failed_verdict"] == "pass" and v["overall"] == "inconclusive" and v["max_failed"] == 1.0


def test_usage_counts_that_cannot_be_counts_are_not_averaged():
    with server(good_stream({"prompt_tokens": -1, "completion_tokens": -7})) as url:
        r = api.bench_endpoint(url, concurrency=2, requests=4, input_tokens=16, output_tokens=3, warmup=0)
    data = json.loads(json.dumps(endpoint_json(r)))
    assert data["input_tokens_mean"] == 16.0 and data["output_tokens_mean"] == 3.0
    assert all(rec.bad_usage for rec in r.run.records) and r.summary.approximate_tokens == 4
    assert any("cannot be token counts" in n and "prompt_tokens -1" in n for n in data["notes"])


def _poisoned_metrics(scrape: int) -> str:
    """vLLM's TTFT histogram whose second scrape sums to NaN over an infinite count."""
    name = "vllm:time_to_first_token_seconds"
    total, count = ("0.5", "10") if scrape == 0 else ("NaN", "+Inf")
    return (f"# TYPE {name} histogram\n{name}_bucket{{le=\"+Inf\"}} {count}\n{name}_count {count}\n"
            f"{name}_sum {total}\n")


def test_a_servers_non_finite_metrics_count_as_not_exported():
    with server(good_stream(), _poisoned_metrics) as url:
        out = infra("bench", "--endpoint", url, "--requests", "3", "--output-tokens", "2", "--json")
    assert out.returncode == 0, out.stderr
    assert strict(out.stdout)["server"] == {}


@pytest.mark.parametrize("models", [[1, 2], {"data": 5}, {"data": [{"id": 7}]}])
def test_a_model_list_that_is_not_one_is_a_one_line_error(models):
    with server(good_stream(), models=models) as url:
        out = infra("bench", "--endpoint", url, "--requests", "1")
    assert out.returncode == 1 and "Traceback" not in out.stderr
    [line] = out.stderr.strip().splitlines()
    assert "lists no model" in line and "--model" in line


def test_a_server_that_trickles_its_model_list_is_given_up_on_at_the_timeout():
    """One byte every 0.2 s never trips a per-read timeout of 0.5 s; the whole answer is bounded instead."""
    with server(good_stream(), trickle_s=0.2) as url:
        start = time.perf_counter()
        out = infra("bench", "--endpoint", url, "--requests", "1", "--timeout", "0.5")
        took = time.perf_counter() - start
    assert out.returncode == 1 and "did not answer within 0.5 s" in out.stderr and took < 8


def test_an_absurd_rate_is_refused_at_once():
    with server(good_stream()) as url:
        start = time.perf_counter()
        out = infra("bench", "--endpoint", url, "--rate", "1e-300/s", "--requests", "2")
    assert out.returncode == 1 and "Traceback" not in out.stderr and time.perf_counter() - start < 30
    [line] = out.stderr.strip().splitlines()
    assert "--rate" in line and "To fix" in line


def test_a_run_without_duration_stops_at_its_time_bound_and_says_so():
    """Three requests a hundred seconds apart under a half-second bound: one is sent, the run ends and notes it."""
    load = plan_load(None, concurrency=None, rate=0.01, requests=3, duration_s=None, input_tokens=4,
                     output_tokens=2)
    with server(good_stream()) as url:
        start = time.perf_counter()
        r = bench_endpoint(ClientOptions(url=url, max_wall_s=0.5), load, None)
        took = time.perf_counter() - start
        timed = bench_endpoint(ClientOptions(url=url, duration_s=0.3), load, None)
    assert took < 10 and len(r.run.records) == 1 and r.summary.completed == 1
    assert any("sent 1 of 3 planned requests" in n and "0.5 s bound" in n for n in r.bench.notes)
    assert any("--duration 0.3 s" in n for n in timed.bench.notes)


@pytest.mark.parametrize("args, flag", [
    (("--port", "70000"), "--port"),
    (("--ttft-ms", "nan", "--itl-ms", "1"), "--ttft-ms"),
    (("--ttft-ms", "1", "--itl-ms", "-2"), "--itl-ms"),
    (("--error-rate", "1.5"), "--error-rate"),
    (("--tokens-per-chunk", "0"), "--tokens-per-chunk"),
    (("--ttft-ms", "1", "--itl-ms", "1", "--metrics", "tgi"), "--metrics"),
])
def test_emulate_refuses_bad_settings_in_one_line(args, flag):
    out = infra("emulate", *args)
    assert out.returncode == 1 and "Traceback" not in out.stderr
    [line] = out.stderr.strip().splitlines()
    assert line.startswith(f"error: {flag}:") and "To fix" in line
