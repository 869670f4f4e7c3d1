"""The harness against a real engine (vLLM on the CPU, tiny random model): only properties that hold on a noisy
shared machine, never absolute latencies. A comparison that fails is measured once more before it counts."""

from __future__ import annotations

import json
import math
import subprocess
import sys

import pytest

from infra import api
from infra.bench.metrics import summarize

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
    # A closed loop's verdict leaves out what was sent before its clients' first requests had all ended.
    assert s.completed == requests - result.bench.load.get("warm_up", 0) and s.failed == 0, s.errors
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
        # The server saw every request, the start-up's too.
        server, s = r.run.server, summarize(r.run.records)
        assert server["ttft"]["n"] == 12 and server["e2e"]["n"] == 12
        assert abs(s.metrics["ttft"].mean - server["ttft"]["mean_ms"]) < 25 + 0.1 * server["ttft"]["mean_ms"]
        assert abs(s.metrics["itl"].mean - server["itl"]["mean_ms"]) <= 0.15 * server["itl"]["mean_ms"]
        assert abs(s.metrics["e2e"].mean - server["e2e"]["mean_ms"]) < 25 + 0.05 * server["e2e"]["mean_ms"]

    _twice(check)


def test_generous_slo_passes_and_impossible_one_fails(vllm_server):
    def infra(slo: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "infra", "bench", "--endpoint", vllm_server, "--model", "tiny",
                               "--concurrency", "4", "--requests", "48", "--output-tokens", "16", "--slo", slo,
                               "--json"], capture_output=True, text=True, timeout=300)

    # p50 objectives: 48 requests, less the start-up's, leave enough samples beyond the median for a verdict
    # either way.
    ok = infra("ttft_p50=60s,tpot_p50=10s,e2e_p50=120s")
    assert ok.returncode == 0, ok.stderr
    assert json.loads(ok.stdout.strip().splitlines()[-1])["verdict"]["overall"] == "pass"
    bad = infra("tpot_p50=0.1ms")
    assert bad.returncode == 3, bad.stderr
    assert json.loads(bad.stdout.strip().splitlines()[-1])["verdict"]["overall"] == "fail"


CPU_DEVICE = """\
name: cpu-2vcpu
vendor: amd
architecture: zen4-cpu
memory_gb: {value: 23, source: "%(src)s", confidence: low, note: "memory of the CI machine"}
memory_bandwidth_tbps: {value: 0.02, source: "%(src)s", confidence: low, note: "two vCPUs' share; a guess"}
tflops:
  fp32: {value: 0.2, source: "%(src)s", confidence: low, note: "two cores of AVX-512 FMA; a guess"}
  bf16: {value: 0.2, source: "%(src)s", confidence: low, note: "as fp32"}
interconnect:
  kind: pcie4
  bandwidth_gbs: {value: 10, source: "%(src)s", confidence: low}
  domain_size: {value: 1, source: "%(src)s", confidence: low}
devices_per_node: {value: 1, source: "%(src)s", confidence: low}
reference_price_per_hour: {value: 0.05, source: "%(src)s", confidence: low}
""" % {"src": "https://www.amd.com/en/products/processors/server/epyc.html"}


def test_one_recalibration_step_moves_the_prediction_toward_the_measurement(vllm_server, tiny_model, tmp_path):
    """Measure the engine, save the measurement as a `case` line (the format `infra bench --save` writes and
    `infra.perf.cases.read_measured` reads), and take one fitting step of the performance model's efficiency
    factors from their looked-up values: the prediction must end closer to what was measured."""
    from scipy.optimize import least_squares

    from infra.catalog.loader import load_catalog
    from infra.perf.calibration import Factors, lookup
    from infra.perf.rows import compiled, measured_cases

    r = bench(vllm_server, concurrency=1, requests=8)
    _complete(r, 8)
    s = r.summary
    (tmp_path / "catalog" / "devices").mkdir(parents=True)
    (tmp_path / "catalog" / "devices" / "cpu.yaml").write_text(CPU_DEVICE)
    catalog = load_catalog([tmp_path / "catalog"])
    isl = round(sum(rec.input_tokens for rec in r.run.records) / len(r.run.records))
    line = {"kind": "case", "source": r.run.url, "service": "tiny", "label": "vllm-cpu", "requests": s.completed,
            "case": {"model": str(tiny_model / "config.json"), "device": "cpu-2vcpu", "framework": "vllm",
                     "precision": "fp32", "isl": isl, "osl": OSL, "concurrency": 1, "batch": 8, "workers": 1},
            "ttft_ms": s.metrics["ttft"].mean, "tpot_ms": s.metrics["tpot"].mean}
    (tmp_path / "run.jsonl").write_text(json.dumps(line) + "\n")
    [case] = measured_cases(tmp_path / "run.jsonl", catalog)
    predict = compiled(case, catalog)
    assert not isinstance(predict, str), predict

    names = ("gemm", "mem", "step_ms", "request_ms")
    start = lookup("vllm", catalog.device("cpu-2vcpu")).factors
    lo = [Factors.BOUNDS[n][0] for n in names]
    hi = [Factors.BOUNDS[n][1] for n in names]

    def factors(x) -> Factors:
        values = {n: min(max(float(v), a), b) for n, v, a, b in zip(names, x, lo, hi)}
        return Factors(**{**start.as_dict(), **values})

    def log_errors(f: Factors) -> list[float]:
        ttft, tpot = predict(f)
        return [math.log(ttft / case.ttft_ms), math.log(tpot / case.tpot_ms)]

    before = log_errors(start)
    step = least_squares(lambda x: log_errors(factors(x)), [getattr(start, n) for n in names], bounds=(lo, hi),
                         max_nfev=len(names) + 2, diff_step=1e-3)
    after = log_errors(factors(step.x))
    assert sum(e * e for e in after) < sum(e * e for e in before), (before, after)
    assert abs(after[1]) <= abs(before[1]) + 1e-9, (before, after)  # TPOT no further from the measurement
