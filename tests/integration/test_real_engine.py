"""The harness against a real engine (vLLM on the CPU, tiny random model): only properties that hold on a noisy
shared machine, never absolute latencies. A comparison that fails is measured once more before it counts."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from infra import api

pytestmark = pytest.mark.engine

OSL = 64
ISL = 64


def bench(url: str, **kw):
    kw.setdefault("input_tokens", ISL)
    kw.setdefault("output_tokens", OSL)
    kw.setdefault("warmup", 1)
    return api.bench_endpoint(url, model="tiny", **kw)


def _complete(result, requests: int) -> None:
    s = result.summary
    assert s.completed == requests and s.failed == 0, s.errors
    assert s.approximate_tokens == 0  # vLLM streams usage
    for r in result.run.records:
        assert r.output_tokens == result.run.load.requests[r.index].output_tokens
        assert 0 < r.ttft <= r.e2e and r.tpot > 0


def _twice(check):
    """Run a measurement-and-compare once more when it fails the first time (shared cores are noisy)."""
    try:
        return check()
    except AssertionError:
        return check()


def test_closed_loop_throughput_grows_with_concurrency(vllm_server):
    def check():
        one = bench(vllm_server, concurrency=1, requests=12)
        four = bench(vllm_server, concurrency=4, requests=16)
        _complete(one, 12)
        _complete(four, 16)
        assert four.summary.output_token_throughput >= 1.5 * one.summary.output_token_throughput
        return one, four

    _twice(check)


def test_open_loop_at_two_poisson_rates(vllm_server):
    def check():
        slow = bench(vllm_server, rate=1.0, requests=16, seed=1)
        fast = bench(vllm_server, rate=4.0, requests=16, seed=2)
        for r in (slow, fast):
            _complete(r, 16)
            assert r.run.load.arrival == "poisson"
        assert fast.summary.request_throughput > slow.summary.request_throughput

    _twice(check)


def test_client_and_engine_metrics_agree(vllm_server):
    def check():
        r = bench(vllm_server, concurrency=2, requests=12)
        _complete(r, 12)
        server, s = r.run.server, r.summary
        assert server["ttft"]["n"] == 12 and server["e2e"]["n"] == 12
        assert abs(s.metrics["ttft"].mean - server["ttft"]["mean_ms"]) < 25 + 0.1 * server["ttft"]["mean_ms"]
        assert abs(s.metrics["itl"].mean - server["itl"]["mean_ms"]) <= 0.15 * server["itl"]["mean_ms"]
        assert abs(s.metrics["e2e"].mean - server["e2e"]["mean_ms"]) < 25 + 0.05 * server["e2e"]["mean_ms"]

    _twice(check)


def test_generous_slo_passes_and_impossible_one_fails(vllm_server):
    def infra(slo: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "infra", "bench", "--endpoint", vllm_server, "--model", "tiny",
                               "--concurrency", "4", "--requests", "24", "--output-tokens", "16", "--slo", slo,
                               "--json"], capture_output=True, text=True, timeout=300)

    # p50 objectives: 24 requests leave enough samples beyond the median for a verdict either way.
    ok = infra("ttft_p50=60000,tpot_p50=10000,e2e_p50=120000")
    assert ok.returncode == 0, ok.stderr
    assert json.loads(ok.stdout.strip().splitlines()[-1])["verdict"]["overall"] == "pass"
    bad = infra("tpot_p50=0.1")
    assert bad.returncode == 3, bad.stderr
    assert json.loads(bad.stdout.strip().splitlines()[-1])["verdict"]["overall"] == "fail"
