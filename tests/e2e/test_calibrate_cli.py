"""The measurement loop as a user runs it: calibrate on measurement files of every kind, plan, estimate and
simulate with the calibration, and verify a plan against a served endpoint."""

from __future__ import annotations

import json
import os
import select
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from infra import api
from infra.errors import InfraError

from ..bench_servers import emulator, stop
from ..conftest import ROOT
from .test_cli import infra

RESULTS = ROOT / "tests" / "fixtures" / "results"
FLAGS = ("--model", "Llama-3.1-8B", "--device", "H100-SXM", "--framework", "vllm", "--tp", "1")
LOOP = """\
apiVersion: infra.dev/v1alpha1
kind: ServingIntent
metadata: {name: loop}
spec:
  cluster:
    profile: profile.yaml
  services:
    - name: chat
      model: meta-llama/Llama-3.1-8B-Instruct
      precisions: [bf16]
      workload:
        rate: {peak: 8/s, baseline: 2/s}
        input_tokens: {mean: 256, max: 512}
        output_tokens: {mean: 16, max: 32}
      slo:
        ttft: {p99: 1s}
        tpot: {p99: 40ms}
      preferences: {frameworks: [vllm]}
"""
PROFILE = """\
apiVersion: infra.dev/v1alpha1
kind: ClusterProfile
metadata: {name: lab}
spec:
  pools:
    - {name: h100, device: H100-SXM, nodes: 1, devices_per_node: 8, price: $3/h}
"""


@pytest.fixture
def loop(tmp_path: Path) -> Path:
    (tmp_path / "loop.yaml").write_text(LOOP)
    (tmp_path / "profile.yaml").write_text(PROFILE)
    return tmp_path


@pytest.mark.parametrize("name,fmt", [("vllm-bench.json", "vllm-bench"), ("sglang-bench.jsonl", "sglang-bench"),
                                      ("profile_export_genai_perf.json", "genai-perf"),
                                      ("profile_export_aiperf.json", "aiperf"),
                                      ("guidellm-benchmarks.json", "guidellm")])
def test_every_benchmark_format_calibrates_with_the_deployment_given(name: str, fmt: str):
    fields = {"model": "Llama-3.1-8B", "device": "H100-SXM", "framework": "vllm", "tp": 1}
    result = api.calibrate([RESULTS / name], deployment=fields)
    [source] = result.doc.sources
    assert source.format == fmt and source.points >= 1
    assert {n.level for n in result.doc.corrections} == {"device", "framework", "model", "deployment"}
    assert result.doc.error.prior.n == len(result.doc.points)


def test_calibrate_writes_a_deterministic_file_and_lists_what_it_skipped(tmp_path: Path):
    out = infra("calibrate", str(RESULTS / "silicon.csv"), "-o", str(tmp_path / "a.yaml"))
    assert out.returncode == 0, out.stderr
    assert "silicon.csv:9: unknown model 'no-such/model'" in out.stdout
    again = infra("calibrate", str(RESULTS / "silicon.csv"), "-o", str(tmp_path / "b.yaml"), "--name", "a")
    assert again.returncode == 0
    assert (tmp_path / "a.yaml").read_bytes() == (tmp_path / "b.yaml").read_bytes()
    doc = yaml.safe_load((tmp_path / "a.yaml").read_text())
    assert doc["kind"] == "Calibration" and doc["sources"][0]["format"] == "silicon-csv"
    assert doc["sources"][0]["skipped"] == ["tests/fixtures/results/silicon.csv:9: unknown model 'no-such/model'"] \
        or doc["sources"][0]["skipped"][0].endswith("silicon.csv:9: unknown model 'no-such/model'")
    # Seven points of two deployments: leave one out is scored, and the fit beats the prior on TPOT.
    assert doc["error"]["leave_one_out"]["n"] == 7
    assert doc["error"]["calibrated"]["tpot_median_ape"] < doc["error"]["prior"]["tpot_median_ape"]


def test_bad_measurement_files_are_one_line_errors(tmp_path: Path):
    out = infra("calibrate", str(RESULTS / "vllm-bench.json"))
    assert out.returncode == 1 and len(out.stderr.strip().splitlines()) == 1
    assert "vllm-bench.json" in out.stderr and "vllm-bench result does not record the device" in out.stderr
    odd = tmp_path / "odd.json"
    odd.write_text(json.dumps({"hello": 1}))
    out = infra("calibrate", str(odd), *FLAGS)
    assert out.returncode == 1 and len(out.stderr.strip().splitlines()) == 1 and "odd.json" in out.stderr
    out = infra("calibrate", str(RESULTS / "vllm-bench-no-ttft.json"), *FLAGS)
    assert out.returncode == 1 and "mean_ttft_ms" in out.stderr
    out = infra("calibrate", str(tmp_path / "missing.json"), *FLAGS)
    assert out.returncode == 1 and "not found" in out.stderr
    bad_cal = tmp_path / "cal.yaml"
    bad_cal.write_text("apiVersion: infra.dev/v1alpha1\nkind: Calibration\nmetadata: {name: x}\n")
    out = infra("estimate", "--model", "Llama-3.1-8B", "--device", "H100-SXM", "--isl", "1k", "--osl", "100",
                "--concurrency", "4", "--calibration", str(bad_cal))
    assert out.returncode == 1 and len(out.stderr.strip().splitlines()) == 1 and "cal.yaml" in out.stderr


def test_a_saved_run_calibrates_plans_estimates_and_simulations(loop: Path):
    assert infra("plan", str(loop / "loop.yaml"), "-o", str(loop / "out"), "--no-verify").returncode == 0
    plan = loop / "out" / "plan.yaml"
    run = loop / "run.jsonl"
    assert infra("bench", "--simulate", str(plan), "--requests", "300", "--save", str(run)).returncode == 0
    out = infra("calibrate", str(run), "-o", str(loop / "cal.yaml"))
    assert out.returncode == 0, out.stderr
    cal = yaml.safe_load((loop / "cal.yaml").read_text())
    # The simulator runs the model's own engines: the measurement agrees with the prior to a few percent.
    assert cal["error"]["prior"]["tpot_median_ape"] < 0.15

    bare = json.loads(infra("plan", str(loop / "loop.yaml"), "--no-verify", "--json").stdout)
    got = infra("plan", str(loop / "loop.yaml"), "--no-verify", "--json", "--calibration", str(loop / "cal.yaml"))
    assert got.returncode == 0, got.stderr
    calibrated = json.loads(got.stdout)
    assert calibrated["spec"]["fingerprint"] != bare["spec"]["fingerprint"]
    measured = calibrated["spec"]["provenance"]["calibration"]["measured"]
    assert measured["points"] == 1 and len(measured["sha256"]) == 64
    [alloc] = calibrated["spec"]["services"][0]["allocations"]
    assert alloc["measured"].startswith("calibrated on 1 measured load point(s)")
    assert "measured" not in bare["spec"]["services"][0]["allocations"][0]

    # The profile can name the calibration instead; the plan is the same.
    (loop / "profile.yaml").write_text(PROFILE.replace("spec:\n", "spec:\n  calibration: cal.yaml\n"))
    via_profile = json.loads(infra("plan", str(loop / "loop.yaml"), "--no-verify", "--json").stdout)
    assert via_profile["spec"]["services"] == calibrated["spec"]["services"]
    assert via_profile["spec"]["fingerprint"] == calibrated["spec"]["fingerprint"]
    (loop / "profile.yaml").write_text(PROFILE.replace("spec:\n", "spec:\n  calibration: nowhere.yaml\n"))
    missing = infra("plan", str(loop / "loop.yaml"), "--no-verify")
    assert missing.returncode == 1 and "profile.yaml:" in missing.stderr and "nowhere.yaml" in missing.stderr

    est = infra("estimate", "--model", "Llama-3.1-8B", "--device", "H100-SXM", "--isl", "256", "--osl", "16",
                "--rate", "8/s", "--batch", str(alloc["engines"]["agg"]["max_num_seqs"]), "--json", "--calibration",
                str(loop / "cal.yaml"))
    assert est.returncode == 0, est.stderr
    assert json.loads(est.stdout)["measured_calibration"].startswith("calibrated on 1 measured")
    sim = infra("bench", "--simulate", str(plan), "--requests", "100", "--json", "--calibration",
                str(loop / "cal.yaml"))
    assert sim.returncode in (0, 3), sim.stderr


def test_verify_measures_calibrates_and_replans_against_a_served_endpoint(loop: Path):
    assert infra("plan", str(loop / "loop.yaml"), "-o", str(loop / "out"), "--no-verify").returncode == 0
    plan = loop / "out" / "plan.yaml"
    predicted = yaml.safe_load(plan.read_text())["spec"]["services"][0]["allocations"][0]["predicted"]
    # An endpoint five times slower per token than the model predicts: TPOT p99 over its 40 ms objective.
    with emulator("--ttft-ms", "150", "--itl-ms", "45") as url:
        out = infra("verify", str(plan), "--endpoint", url, "--requests", "24", "--write", str(loop / "v"),
                    cwd=loop)
        assert out.returncode in (0, 3), out.stderr
        assert "TPOT p99 measured" in out.stdout
        assert predicted["tpot_p99"]["predicted_ms"] < 20
        measured = api.bench_endpoint(url, rate=4.0, requests=24, plan=plan, warmup=0).bench
    for name in ("measurements/peak.jsonl", "measurements/baseline.jsonl", "calibration.yaml", "plan/plan.yaml"):
        assert (loop / "v" / name).exists(), name
    cal = yaml.safe_load((loop / "v" / "calibration.yaml").read_text())
    assert cal["error"]["calibrated"]["tpot_median_ape"] < cal["error"]["prior"]["tpot_median_ape"] / 4
    # A load it did not measure (4/s between the baseline and the peak), predicted with the calibration.
    est = api.estimate({"model": "Llama-3.1-8B", "device": "H100-SXM", "framework": "vllm", "precision": "bf16",
                        "isl": 256, "osl": 16, "rate": "4/s", "batch": 256},
                       calibration=loop / "v" / "calibration.yaml")
    tpot = measured.summary.to_json()["tpot_ms"]["mean"]
    assert est["tpot_ms"]["mean"] == pytest.approx(tpot, rel=0.25)
    replanned = yaml.safe_load((loop / "v" / "plan" / "plan.yaml").read_text())
    assert replanned["spec"]["provenance"]["calibration"]["measured"]["points"] == 2


def test_verify_of_an_unreachable_endpoint_is_one_line(loop: Path):
    assert infra("plan", str(loop / "loop.yaml"), "-o", str(loop / "out"), "--no-verify").returncode == 0
    out = infra("verify", str(loop / "out" / "plan.yaml"), "--endpoint", "http://127.0.0.1:9/v1", "--requests", "2")
    assert out.returncode == 1 and len(out.stderr.strip().splitlines()) == 1


def test_calibrate_refuses_a_service_of_several_allocations(tmp_path: Path):
    api.plan(ROOT / "examples" / "chat-mixed-fleet.yaml", tmp_path, verify=False)
    with pytest.raises(InfraError) as exc:
        api.calibrate([RESULTS / "vllm-bench.json"], plan=tmp_path / "plan.yaml")
    assert "allocations" in str(exc.value.problems[0])


def test_a_pull_request_says_which_figures_rest_on_the_measurements(tmp_path: Path):
    from ..gitrepo import make_repos

    _, clone = make_repos(tmp_path)
    cal = ROOT / "examples" / "calibrations" / "chat-h100.yaml"
    out = infra("pr", str(ROOT / "examples" / "measured-chat.yaml"), "--repo", str(clone), "--no-verify",
                "--calibration", str(cal), "--json")
    assert out.returncode == 0, out.stderr
    body = json.loads(out.stdout)["body"]
    assert "- Your measurements: calibration `chat-h100` (2 measured load points" in body
    assert "chat on H100-SXM: calibrated on 2 measured load point(s) of 1 deployment(s) (this deployment" in body
    assert f"--calibration {cal}" in body


def test_verifying_a_calibrated_plan_adds_to_its_measurements(tmp_path: Path):
    """The plan of examples/measured-chat.yaml rests on two saved runs; verifying it calibrates on those and the
    new ones together (run from the repository root, where the calibration's file paths resolve)."""
    out_dir = tmp_path / "out"
    planned = infra("plan", "examples/measured-chat.yaml", "-o", str(out_dir), "--no-verify", cwd=ROOT)
    assert planned.returncode == 0, planned.stderr
    with emulator("--ttft-ms", "120", "--itl-ms", "30") as url:
        out = infra("verify", str(out_dir / "plan.yaml"), "--endpoint", url, "--requests", "16", "--write",
                    str(tmp_path / "v"), cwd=ROOT)
    assert out.returncode == 0, out.stderr
    assert "calibrated together with 2 earlier measurement file(s)" in out.stdout
    doc = yaml.safe_load((tmp_path / "v" / "calibration.yaml").read_text())
    assert len(doc["sources"]) == 4 and len(doc["points"]) == 4



@pytest.mark.parametrize("key,value,word", [("mean_ttft_ms", 1e308, "ttft_ms"), ("mean_tpot_ms", 1e-300, "tpot_ms"),
                                            ("total_input_tokens", 1e15, "isl")])
def test_implausible_measurements_are_refused_at_their_place(tmp_path: Path, key: str, value: float, word: str):
    data = json.loads((RESULTS / "vllm-bench.json").read_text())
    data[key] = value
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(data))
    with pytest.raises(InfraError) as exc:
        api.calibrate([bad], deployment={"model": "Llama-3.1-8B", "device": "H100-SXM"})
    text = str(exc.value.problems[0])
    assert str(bad) in text and f"{word} " in text and "not a plausible measurement" in text


def test_a_calibrated_plan_says_what_each_allocations_figures_rest_on(tmp_path: Path):
    out = infra("plan", "examples/measured-chat.yaml", "--no-verify", "-o", str(tmp_path), cwd=ROOT)
    assert out.returncode == 0, out.stderr
    assert "chat on H100-SXM: calibrated on 2 measured load point(s) of 1 deployment(s) (this deployment" in out.stdout
    report = (tmp_path / "report.md").read_text()
    assert "| ^ calibrated on 2 measured load point(s)" in report and "after calibrating on one load" in report
    bare = infra("plan", "examples/small-model-shared.yaml", "--no-verify", cwd=ROOT)
    assert bare.returncode == 0 and "rest on" not in bare.stdout and "measured load point" not in bare.stdout


def test_verify_fails_a_deployment_whose_requests_fail(loop: Path):
    assert infra("plan", str(loop / "loop.yaml"), "-o", str(loop / "out"), "--no-verify").returncode == 0
    with emulator("--ttft-ms", "20", "--itl-ms", "2", "--error-rate", "0.5", "--seed", "3") as url:
        out = infra("verify", str(loop / "out" / "plan.yaml"), "--endpoint", url, "--requests", "20")
    assert out.returncode == 3, out.stdout + out.stderr
    assert "requests failed (more than 1%)" in out.stdout and "verification failed" in out.stdout


def test_the_agents_plans_take_the_calibration_the_user_planned_with(loop: Path):
    """`plan --agent --calibration` and `review` of a calibrated plan solve every proposed change with the same
    calibration, so a what-if is compared on the same footing as the plan."""
    cal = ROOT / "examples" / "calibrations" / "chat-h100.yaml"
    solved = api._planning(cal).plan(loop / "loop.yaml")
    assert solved.plan.document()["spec"]["provenance"]["calibration"]["measured"]["name"] == "chat-h100"
    bare = api._planning(None).plan(loop / "loop.yaml")
    assert "measured" not in bare.plan.document()["spec"]["provenance"]["calibration"]


def test_one_allocation_of_a_service_of_several_is_measured_and_calibrated_on_its_own(tmp_path: Path):
    api.plan(ROOT / "examples" / "chat-mixed-fleet.yaml", tmp_path / "out", verify=False)
    plan = tmp_path / "out" / "plan.yaml"
    allocs = yaml.safe_load(plan.read_text())["spec"]["services"][0]["allocations"]
    assert len(allocs) > 1
    refused = infra("calibrate", str(RESULTS / "vllm-bench.json"), "--plan", str(plan))
    assert refused.returncode == 1 and "--allocation N" in refused.stderr
    # The allocation carrying the most of the load: measured at its share (a token one takes minutes per request).
    index = max(range(len(allocs)), key=lambda i: allocs[i]["load_per_replica"] * allocs[i]["replicas"])
    alloc = allocs[index]
    share = alloc["load_per_replica"] * alloc["replicas"]
    with emulator("--ttft-ms", "40", "--itl-ms", "4") as url:
        out = infra("verify", str(plan), "--endpoint", url, "--allocation", str(index), "--requests", "12",
                    "--write", str(tmp_path / "v"), "--json")
    assert out.returncode in (0, 3), out.stderr
    result = json.loads(out.stdout)
    assert result["runs"][0]["planned_load"] == f"{share:g}/s" and result["runs"][0]["load"]["rate_rps"] == share
    point = result["calibration"]["points"][0]
    assert point["deployment"].startswith(f"Llama-3.1-70B/{alloc['framework']}/{alloc['device']}/")


def _stderr_on_a_terminal(*args: str, cwd: Path) -> tuple[int, str]:
    """Run infra with its stderr on a pseudo-terminal (stdout a pipe): the exit status and what the terminal got."""
    import os
    import pty
    import subprocess
    import sys
    import threading

    master, slave = pty.openpty()
    proc = subprocess.Popen([sys.executable, "-m", "infra", *args], stdout=subprocess.PIPE, stderr=slave, cwd=cwd,
                            env={**os.environ, "TERM": "xterm-256color", "COLUMNS": "120"})
    os.close(slave)
    chunks: list[bytes] = []

    def drain() -> None:  # the child blocks once the terminal's buffer is full
        while True:
            try:
                data = os.read(master, 4096)
            except OSError:
                return
            if not data:
                return
            chunks.append(data)

    reader = threading.Thread(target=drain, daemon=True)
    reader.start()
    proc.communicate(timeout=120)
    reader.join(timeout=10)
    os.close(master)
    return proc.returncode, b"".join(chunks).decode("utf-8", "replace")


def test_verify_shows_its_progress_on_a_terminal_and_never_with_json(loop: Path):
    assert infra("plan", str(loop / "loop.yaml"), "-o", str(loop / "out"), "--no-verify").returncode == 0
    plan = str(loop / "out" / "plan.yaml")
    with emulator("--ttft-ms", "20", "--itl-ms", "5") as url:
        code, seen = _stderr_on_a_terminal("verify", plan, "--endpoint", url, "--requests", "12", cwd=loop)
        assert code in (0, 3), seen
        assert "peak load, requests" in seen and "baseline load, requests" in seen and "/12" in seen
        code, seen = _stderr_on_a_terminal("verify", plan, "--endpoint", url, "--requests", "12", "--json", cwd=loop)
        assert code in (0, 3), seen
        assert "load, requests" not in seen


def test_observe_measures_a_deployment_on_its_own_traffic_and_calibrate_reads_it(tmp_path: Path):
    """A live engine (the emulator) serves traffic someone else sends; observe scrapes its /metrics over a window
    and writes the measurement that calibrate fits."""
    out = tmp_path / "observed.jsonl"
    with emulator("--ttft-ms", "120", "--itl-ms", "20") as url:
        load = subprocess.Popen([sys.executable, "-m", "infra", "bench", "--endpoint", url, "--rate", "20/s",
                                 "--requests", "200", "--input-tokens", "128", "--output-tokens", "16"],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            run = infra("observe", url, "--duration", "6", "-o", str(out), "--model", "Llama-3.1-8B",
                        "--device", "H100-SXM", "--framework", "vllm", "--json")
        finally:
            load.wait(timeout=120)
    assert run.returncode == 0, run.stderr
    got = json.loads(run.stdout)
    assert got["requests"] >= 30 and got["rate_rps"] > 5
    # The emulator's figures: 120 ms to the first token, then 20 ms a token.
    assert got["ttft_ms"] == pytest.approx(120, rel=0.15) and got["tpot_ms"] == pytest.approx(20, rel=0.15)
    assert got["isl"] == pytest.approx(128, rel=0.1) and got["osl"] == pytest.approx(16, rel=0.1)
    # Against what the performance model predicts at the window's load (the packaged prior: no plan was given).
    [window] = got["windows"]
    assert got["predicted_with"] is None and window["predicted"]["ttft_ms"] > 0 and window["predicted"]["tpot_ms"] > 0
    fitted = infra("calibrate", str(out), "-o", str(tmp_path / "cal.yaml"))
    assert fitted.returncode == 0, fitted.stderr
    doc = yaml.safe_load((tmp_path / "cal.yaml").read_text())
    assert doc["sources"][0]["format"] == "infra-observe" and doc["points"][0]["rate"] == pytest.approx(
        got["rate_rps"], rel=1e-3)
    # Nothing is written for a window in which nothing finished, and the error says so.
    with emulator("--ttft-ms", "120", "--itl-ms", "20") as idle:
        empty = infra("observe", idle, "--duration", "0.5", "-o", str(tmp_path / "none.jsonl"), "--model",
                      "Llama-3.1-8B", "--device", "H100-SXM")
    assert empty.returncode == 1 and "0 request(s) finished" in empty.stderr
    assert not (tmp_path / "none.jsonl").exists()


def _logged(server: subprocess.Popen, text: str, client: subprocess.Popen, timeout: float = 60.0) -> bool:
    """Whether the server logs a line holding `text` (it logs each request once served) while the client runs."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and client.poll() is None and server.stdout:
        if select.select([server.stdout], [], [], 0.5)[0] and text in server.stdout.readline():
            return True
    return False


def test_observe_refuses_what_is_not_an_engine_s_metrics(tmp_path: Path):
    """A page that is not Prometheus text, metrics without vLLM's request histograms, a page too large to be one,
    and two scrapes answered by different processes: one-line errors, no file."""
    served = tmp_path / "site"
    served.mkdir()
    server = subprocess.Popen([sys.executable, "-m", "http.server", "0", "--bind", "127.0.0.1", "--directory",
                               str(served)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                              env={**os.environ, "PYTHONUNBUFFERED": "1"})
    try:
        line = server.stdout.readline() if server.stdout else ""
        port = int(line.split("port ")[1].split()[0])
        for text, why in (("<html><body>hello</body></html>\n", "not Prometheus text"),
                          ("some_metric 1\n", "no vllm:time_to_first_token_seconds"),
                          ("# " + "x" * (65 << 20) + "\n", "answered more than 64 MiB")):
            (served / "metrics").write_text(text)
            out = tmp_path / "observed.jsonl"
            run = infra("observe", f"http://127.0.0.1:{port}", "--duration", "0.1", "-o", str(out), "--model",
                        "Llama-3.1-8B", "--device", "H100-SXM")
            assert run.returncode == 1 and why in run.stderr and "Traceback" not in run.stderr, run.stderr
            assert len(run.stderr.strip().splitlines()) == 1 and not out.exists()
        # Another process answers the second scrape (a restart, or a Service's other pod).
        page = served / "restart" / "metrics"
        page.parent.mkdir()
        page.write_text("# TYPE process_start_time_seconds gauge\nprocess_start_time_seconds 1000\n")
        run = subprocess.Popen([sys.executable, "-m", "infra", "observe", f"http://127.0.0.1:{port}/restart",
                                "--duration", "2", "-o", str(out), *FLAGS[:4]], stderr=subprocess.PIPE, text=True)
        assert _logged(server, "GET /restart/metrics", run), "observe never scraped the page"
        # Replaced, not rewritten: the server may still be sending the first scrape from the file it opened.
        (page.parent / "next").write_text("# TYPE process_start_time_seconds gauge\nprocess_start_time_seconds 2000\n")
        (page.parent / "next").replace(page)
        _, err = run.communicate(timeout=60)
        assert run.returncode == 1 and "reached different engine processes" in err, err
        assert len(err.strip().splitlines()) == 1 and not out.exists()
    finally:
        stop(server, 10)


def test_observe_refuses_an_engine_s_view_of_a_disaggregated_deployment(tmp_path: Path):
    """A prefill/decode deployment's engines each serve part of a request: their own metrics do not measure what
    the plan predicts, which is said before the window is waited out."""
    pd = {"model": "Llama-3.1-8B", "device": "H100-SXM", "framework": "vllm", "mode": "disagg", "prefill": {"tp": 1},
          "decode": {"tp": 1}}
    with emulator("--ttft-ms", "50", "--itl-ms", "10") as url:
        with pytest.raises(InfraError, match="see part of each request of a disaggregated deployment"):
            api.observe(url, 3600.0, tmp_path / "o.jsonl", deployment=pd)
    assert not (tmp_path / "o.jsonl").exists()


def test_observe_says_when_every_window_is_far_below_the_plan_s_peak(tmp_path: Path):
    """A quiet window calibrates a quiet load: observing a plan's deployment at a third of the peak it was sized
    for says that the peak's figures are carried there by the model."""
    planned = api.plan(ROOT / "examples" / "measured-chat.yaml", tmp_path / "out", verify=False)
    peak = next(s for s in planned.plan.spec.services if s.name == "chat").workload["rate"]["peak"]
    with emulator("--ttft-ms", "50", "--itl-ms", "5") as url:
        load = subprocess.Popen([sys.executable, "-m", "infra", "bench", "--endpoint", url, "--rate", "3/s",
                                 "--requests", "60", "--input-tokens", "64", "--output-tokens", "8"],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            result = api.observe(url, 14.0, tmp_path / "quiet.jsonl", plan=tmp_path / "out" / "plan.yaml")
        finally:
            load.wait(timeout=120)
    assert str(peak) == "8/s" and result.observation.rate < 4
    assert any("of the 8/s peak the plan sized for" in note for note in result.observation.notes)
    # Predicted at the window's load with the calibration the plan was made with, which is still there.
    assert result.basis.endswith("chat-h100.yaml") and result.predicted[0] is not None


def test_a_closed_loops_first_wave_is_its_clients_share_of_the_requests(tmp_path: Path):
    """`infra bench` starts every client at once and measures that first wave with the rest: 32 clients over 64
    requests put half of them in it, over 640 a twentieth. The prior of each saved point takes that share (not the
    share fitted for clients whose request count is unknown), so it follows the simulated engines' TTFT at both;
    `infra estimate --requests` predicts the same."""
    fleet = ROOT / "examples" / "chat-mixed-fleet.yaml"
    assert infra("plan", str(fleet), "-o", str(tmp_path / "out"), "--no-verify").returncode == 0
    runs = []
    for n in (64, 640):
        runs.append(tmp_path / f"c32-n{n}.jsonl")
        assert infra("bench", "--simulate", str(tmp_path / "out" / "plan.yaml"), "--concurrency", "32", "--requests",
                     str(n), "--input-tokens", "2000", "--output-tokens", "200", "--save", str(runs[-1])
                     ).returncode in (0, 3)
    out = infra("calibrate", *map(str, runs), "-o", str(tmp_path / "cal.yaml"))
    assert out.returncode == 0, out.stderr
    points = yaml.safe_load((tmp_path / "cal.yaml").read_text())["points"]
    by_run = {n: [p for p in points if f"-n{n}.jsonl" in p["source"]] for n in (64, 640)}
    assert all(len(v) == 2 for v in by_run.values())  # one point per allocation
    for p in points:
        assert p["prior"]["ttft_ms"] == pytest.approx(p["measured"]["ttft_ms"], rel=0.25), p

    def ratio(kind: str) -> float:
        return sum(p[kind]["ttft_ms"] for p in by_run[64]) / sum(p[kind]["ttft_ms"] for p in by_run[640])

    assert ratio("measured") > 1.8 and ratio("prior") == pytest.approx(ratio("measured"), rel=0.25)

    # `infra estimate` of a saved point's case with its request count is the calibration's prior of that point.
    lines = [json.loads(line) for line in runs[0].read_text().splitlines()]
    [first, *_] = [o for o in lines if o["kind"] == "case"]
    [point] = [p for p in by_run[64] if p["source"].endswith(f":{lines.index(first) + 1}")]
    case = {**first["case"], "requests": first["requests"]}
    assert api.estimate(case)["ttft_ms"]["mean"] == pytest.approx(
        point["prior"]["ttft_ms"], rel=1e-3)
    assert api.estimate(first["case"])["ttft_ms"]["mean"] != pytest.approx(point["prior"]["ttft_ms"], rel=0.05)
    refused = infra("estimate", "--model", "Llama-3.1-8B", "--device", "H100-SXM", "--isl", "256", "--osl", "16",
                    "--rate", "2/s", "--requests", "10")
    assert refused.returncode == 1 and "requests" in refused.stderr and "concurrency" in refused.stderr
