"""The load client and `infra bench --endpoint` against `infra emulate` started as a real server."""

from __future__ import annotations

import json
import subprocess
import sys

import httpx
import pytest

from infra import api

from ..bench_servers import emulator

TTFT_MS, ITL_MS = 60.0, 10.0


@pytest.fixture(scope="module")
def fixed():
    with emulator("--ttft-ms", str(TTFT_MS), "--itl-ms", str(ITL_MS)) as url:
        yield url


@pytest.fixture(scope="module")
def faulty():
    with emulator("--ttft-ms", "5", "--itl-ms", "2", "--error-rate", "0.25", "--disconnect-rate", "0.25",
                  "--seed", "3") as url:
        yield url


def infra(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "infra", *args], capture_output=True, text=True, timeout=120)


def _requests_served(url: str) -> float:
    text = httpx.get(url.removesuffix("/v1") + "/metrics").text
    return sum(float(line.split()[-1]) for line in text.splitlines()
               if line.startswith("vllm:request_success_total{"))


def test_fixed_timing_is_measured(fixed):
    r = api.bench_endpoint(fixed, concurrency=4, requests=24, input_tokens=32, output_tokens=8, warmup=4)
    s = r.summary
    # What was sent before the clients' first requests had all ended is the start-up's warm-up, not judged.
    judged = 24 - r.bench.load["warm_up"]
    assert 4 <= r.bench.load["warm_up"] <= 12 and any("warm-up" in n for n in r.bench.notes or [])
    assert s.completed == judged and s.failed == 0 and s.approximate_tokens == 0
    assert all(rec.output_tokens == 8 and rec.input_tokens == 32 for rec in r.run.records)
    # The client cannot see a token before the server sends it; scheduling delays on a busy 2-core machine are
    # tens of ms at worst, far below what counting the role-only chunk as a token would do (TTFT near 0).
    assert TTFT_MS <= s.metrics["ttft"].mean < TTFT_MS + 40
    assert ITL_MS * 0.8 < s.metrics["tpot"].mean < ITL_MS * 1.5
    assert ITL_MS * 0.8 < s.metrics["itl"].get("p50") < ITL_MS * 1.5
    assert s.metrics["itl"].n == judged * 7
    e2e = TTFT_MS + 7 * ITL_MS
    assert e2e <= s.metrics["e2e"].mean < e2e + 50


def test_closed_loop_holds_its_clients_and_open_loop_follows_arrivals(fixed):
    closed = api.bench_endpoint(fixed, concurrency=2, requests=8, output_tokens=4, warmup=0)
    assert closed.run.load.arrival == "closed" and _max_in_flight(closed.run.records) <= 2
    opened = api.bench_endpoint(fixed, rate=200.0, requests=12, output_tokens=4, warmup=0, seed=1)
    assert opened.run.load.arrival == "poisson"
    assert _max_in_flight(opened.run.records) > 2  # arrivals do not wait for answers
    planned = [spec.at for spec in opened.run.load.requests]
    for rec, at in zip(opened.run.records, planned):
        assert rec.t_sched - opened.run.records[0].t_sched == pytest.approx(at, abs=1e-9)
        assert 0 <= rec.t_send - rec.t_sched < 0.05  # client_queue: no slot limit was reached


def _max_in_flight(records) -> int:
    events = sorted([(r.t_send, 1) for r in records] + [(r.end, -1) for r in records])
    depth = best = 0
    for _, d in events:
        depth += d
        best = max(best, depth)
    return best


def test_warmup_requests_are_sent_but_not_measured(fixed):
    before = _requests_served(fixed)
    r = api.bench_endpoint(fixed, concurrency=2, requests=5, output_tokens=2, warmup=3)
    assert len(r.run.records) == 5 and len(r.run.warmup) == 3
    assert all(rec.index >= 0 for rec in r.run.records) and all(w.index < 0 for w in r.run.warmup)
    assert _requests_served(fixed) - before == 8


def test_injected_faults_are_failures_that_count_against_the_objectives(faulty):
    r = api.bench_endpoint(faulty, concurrency=4, requests=40, output_tokens=8, warmup=0, slo="e2e_p50=10s")
    s = r.summary
    assert s.failed > 0 and s.completed + s.failed == 40 - r.bench.load.get("warm_up", 0)
    assert s.failed == sum(1 for rec in r.run.records if not rec.ok)  # failures in the start-up count too
    # A stream cut before its first token is "empty", after it "truncated".
    assert set(s.errors) <= {"http_500", "truncated", "empty"} and "http_500" in s.errors and "truncated" in s.errors
    assert s.attainment == pytest.approx(s.completed / (s.completed + s.failed))
    assert s.good == s.completed


def test_timeouts_and_missing_usage_with_bundled_chunks():
    with emulator("--ttft-ms", "1", "--itl-ms", "1", "--stall-ms", "3000", "--stall-rate", "1") as url:
        r = api.bench_endpoint(url, concurrency=2, requests=2, output_tokens=4, warmup=0, timeout_s=0.5)
        assert r.summary.failed == 2 and r.summary.errors == {"timeout": 2}
    with emulator("--ttft-ms", "1", "--itl-ms", "1", "--tokens-per-chunk", "4", "--no-usage") as url:
        r = api.bench_endpoint(url, concurrency=2, requests=4, output_tokens=16, warmup=0)
        assert r.summary.completed == 4 and r.summary.approximate_tokens == 4
        assert all(rec.output_tokens == 4 and len(rec.itl) == 3 for rec in r.run.records)  # chunks, not tokens


def test_cli_json_last_line_and_exit_codes(fixed, tmp_path):
    common = ("bench", "--endpoint", fixed, "--concurrency", "4", "--requests", "48", "--output-tokens", "4",
              "--json")
    ok = infra(*common, "--slo", "ttft_p50=5s,tpot_p50=1s", "--save", str(tmp_path / "run.jsonl"),
               "--markdown", str(tmp_path / "report.md"))
    assert ok.returncode == 0, ok.stderr
    data = json.loads(ok.stdout.strip().splitlines()[-1])
    assert data["completed"] == 48 - data["load"]["warm_up"] and data["failed"] == 0 and data["duration_s"] > 0
    assert data["goodput_rps"] > 0
    for metric in ("ttft_ms", "tpot_ms", "itl_ms", "e2e_ms"):
        assert {"mean", "p50", "p90", "p99"} <= set(data[metric])
    assert data["verdict"]["overall"] == "pass" and data["model"] == "emulated" and data["source"] == fixed
    saved = [json.loads(line) for line in (tmp_path / "run.jsonl").read_text().splitlines()]
    assert sum(1 for x in saved if x["kind"] == "request") == 48 and saved[-1]["kind"] == "summary"
    report = (tmp_path / "report.md").read_text()
    assert "**Verdict: pass**" in report
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        assert "_No plots: plots need matplotlib" in report
    else:
        for png in ("report-latency-cdf.png", "report-throughput.png"):
            assert f"]({png})" in report and (tmp_path / png).read_bytes().startswith(b"\x89PNG")
    fail = infra(*common, "--slo", "tpot_p50=0.01ms")
    assert fail.returncode == 3 and json.loads(fail.stdout.strip().splitlines()[-1])["verdict"]["overall"] == "fail"
    bad = infra(*common, "--api", "grpc")
    assert bad.returncode == 1 and "--api" in bad.stderr and "Traceback" not in bad.stderr
    both = infra(*common, "--simulate", str(tmp_path / "plan.yaml"))
    assert both.returncode == 1 and "not both" in both.stderr


def test_unreachable_endpoint_is_one_line_naming_the_url():
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    url = f"http://127.0.0.1:{port}/v1"
    out = infra("bench", "--endpoint", url, "--requests", "1")
    assert out.returncode == 1 and "Traceback" not in out.stderr
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and url in lines[0] and "To fix" in lines[0]


def test_emulator_metrics_agree_with_the_client(fixed):
    r = api.bench_endpoint(fixed, concurrency=2, requests=6, output_tokens=5, warmup=1)
    server = r.run.server  # the emulator's /metrics, scraped before and after the measured requests
    assert server["ttft"]["n"] == 6 and server["itl"]["n"] == 6 * 4 and server["e2e"]["n"] == 6
    assert abs(r.summary.metrics["ttft"].mean - server["ttft"]["mean_ms"]) < 40
    assert abs(r.summary.metrics["itl"].mean - server["itl"]["mean_ms"]) < 8


def test_emulator_times_tokens_with_the_plans_engine_model(tmp_path):
    """The emulator steps the plan's engines in real time; measured over HTTP, it agrees with the simulator's
    virtual-time run of the same load (the closed loop's two sources of measurements)."""
    from ..conftest import EXAMPLES

    api.plan(EXAMPLES / "chat-mixed-fleet.yaml", tmp_path)
    plan = tmp_path / "plan.yaml"
    load = {"concurrency": 4, "requests": 24, "input_tokens": 256, "output_tokens": 24}
    with emulator(str(plan)) as url:
        r = api.bench_endpoint(url, plan=plan, warmup=1, **load)
    s = r.summary
    assert s.completed == 24 - r.bench.load["warm_up"] and all(rec.output_tokens == 24 for rec in r.run.records)
    assert r.run.model == "chat" and r.objectives  # the plan's objectives are judged
    # Its prompts share prefixes as the intent says, and the emulated engines' prefix caches find them.
    assert r.bench.load["prefix_hit"] > 0.05
    sim = api.bench(simulate=plan, **load).summary
    assert abs(s.metrics["tpot"].mean - sim.metrics["tpot"].mean) <= 0.15 * sim.metrics["tpot"].mean
    assert abs(s.metrics["ttft"].mean - sim.metrics["ttft"].mean) <= 30 + 0.25 * sim.metrics["ttft"].mean


def test_a_loading_server_fails_every_request():
    with emulator("--ttft-ms", "1", "--itl-ms", "1", "--slow-start", "60") as url:
        assert httpx.get(url.removesuffix("/v1") + "/health").status_code == 503
        r = api.bench_endpoint(url, model="emulated", concurrency=2, requests=3, output_tokens=2, warmup=0)
    assert r.summary.failed == 3 and r.summary.errors == {"http_503": 3}


def test_a_measured_run_saves_the_case_calibration_reads(tmp_path):
    """--save against an endpoint writes the single allocation's estimate case with what was measured: the line
    `benchmarks/calibrate.py --extra` fits the performance model to."""
    from infra.catalog.loader import load_catalog
    from infra.perf.rows import measured_cases

    from ..conftest import EXAMPLES

    api.plan(EXAMPLES / "small-model-shared.yaml", tmp_path, verify=False)
    plan = tmp_path / "plan.yaml"
    with emulator(str(plan)) as url:
        out = infra("bench", "--endpoint", url, "--plan", str(plan), "--concurrency", "2", "--requests", "8",
                    "--input-tokens", "128", "--output-tokens", "8", "--save", str(tmp_path / "run.jsonl"), "--json")
    assert out.returncode == 0, out.stderr
    saved = [json.loads(line) for line in (tmp_path / "run.jsonl").read_text().splitlines()]
    assert saved[-1]["load"]["warm_up"] >= 2  # the verdict judged what followed the start-up
    # The emulated engines keep no prefix cache, and their /metrics counters say so: the run measured none.
    assert saved[-1]["load"]["prefix_hit"] == 0.0 and any("prefix cache held 0.0%" in n for n in saved[-1]["notes"])
    [case] = measured_cases(tmp_path / "run.jsonl", load_catalog())
    assert case.workload.concurrency == 2 and case.workload.isl == 128 and case.workload.osl == 8
    # Clients whose lengths all match stay in step: the case is the whole run, with its first wave.
    every = [x for x in saved if x["kind"] == "request"]
    assert len(every) == 8 and case.wave == pytest.approx(2 / 8)
    assert case.ttft_ms == pytest.approx(sum(x["ttft_ms"] for x in every) / 8, rel=1e-3)
    assert case.tpot_ms == pytest.approx(sum(x["tpot_ms"] for x in every) / 8, rel=1e-3)


def test_the_completions_api(fixed):
    r = api.bench_endpoint(fixed, api="completions", concurrency=2, requests=4, input_tokens=16, output_tokens=3,
                           warmup=0)
    assert r.summary.completed == 4 and all(rec.output_tokens == 3 and rec.input_tokens == 16
                                            for rec in r.run.records)
    assert r.summary.metrics["ttft"].mean >= TTFT_MS


def test_a_users_file_at_save_or_markdown_is_refused_before_any_request(fixed, tmp_path):
    notes = tmp_path / "report.md"
    notes.write_text("my own notes\n")
    runs = tmp_path / "run.jsonl"
    runs.write_text("{}\n")
    served = _requests_served(fixed)
    common = ("bench", "--endpoint", fixed, "--concurrency", "2", "--requests", "4", "--output-tokens", "2",
              "--warmup", "0", "--json")
    for flag, path in (("--markdown", notes), ("--save", runs)):
        refused = infra(*common, flag, str(path))
        assert refused.returncode == 1 and str(path) in refused.stderr and "--force" in refused.stderr
        assert "Traceback" not in refused.stderr
    assert _requests_served(fixed) == served  # refused before measuring: nothing was sent
    assert notes.read_text() == "my own notes\n" and runs.read_text() == "{}\n"
    forced = infra(*common, "--markdown", str(notes), "--save", str(runs), "--force")
    assert forced.returncode == 0, forced.stderr
    assert "**Verdict:" in notes.read_text() and runs.read_text().count('"kind": "request"') == 4
