"""The measurement loop on a real engine: plan a CPU pool, measure the served model at two loads, calibrate,
predict a third load it never measured, and verify the plan end to end (measure, judge, calibrate, re-plan)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from infra import api
from infra.catalog.hf import model_from_hf_config

pytestmark = pytest.mark.engine

CPU = "EPYC-9654"
"""The catalog's CPU device the pool declares. The CI machine's two vCPUs are far slower than a socket of it: the
prior's figures are off by that much, and closing that gap is what the loop is for."""
ISL = OSL = 64
BOUND = 0.35
"""How far (relative) the calibrated prediction of the mean TPOT at a load no measurement saw may be from what is
measured there: the calibration corrects the level at two loads, the model carries the shape between them, and
two shared vCPUs add run-to-run noise of 10-20%."""
INTENT = """\
apiVersion: infra.dev/v1alpha1
kind: ServingIntent
metadata: {{name: cpu-loop}}
spec:
  cluster:
    pools:
      - {{name: cpu, device: {device}, nodes: 1, devices_per_node: 1, price: $0.10/h}}
  services:
    - name: tiny
      model: tiny
      precisions: [fp32]
      workload:
        concurrency: 4
        input_tokens: {isl}
        output_tokens: {osl}
      slo:
        ttft: {{p99: 60s}}
        tpot: {{p99: 10s}}
      preferences: {{frameworks: [vllm]}}
"""


def infra(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "infra", *args], capture_output=True, text=True, timeout=900)


def _measure(url: str, plan: Path, clients: int, save: Path) -> dict:
    out = infra("bench", "--endpoint", url, "--model", "tiny", "--plan", str(plan), "--concurrency", str(clients),
                "--requests", str(4 * clients + 8), "--input-tokens", str(ISL), "--output-tokens", str(OSL),
                "--save", str(save), "--json")
    assert out.returncode in (0, 3), out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1])


def _catalog(tiny_model: Path, where: Path) -> Path:
    """A catalog overlay holding the served model as a catalog entry (read from its config.json), so that the
    plan, the saved runs and the calibration all name it `tiny`."""
    (where / "models").mkdir(parents=True)
    spec = model_from_hf_config(tiny_model / "config.json")
    (where / "models" / "tiny.yaml").write_text(yaml.safe_dump(spec.model_dump(mode="json", exclude_none=True)))
    return where


def test_plan_measure_calibrate_predict_and_verify_on_a_real_engine(vllm_server, tiny_model, tmp_path):
    catalog = str(_catalog(tiny_model, tmp_path / "catalog"))
    intent = tmp_path / "loop.yaml"
    intent.write_text(INTENT.format(device=CPU, isl=ISL, osl=OSL))
    planned = infra("plan", str(intent), "-o", str(tmp_path / "out"), "--no-verify", "--catalog", catalog)
    assert planned.returncode == 0, planned.stderr
    plan = tmp_path / "out" / "plan.yaml"
    [alloc] = yaml.safe_load(plan.read_text())["spec"]["services"][0]["allocations"]
    assert alloc["device"] == CPU and alloc["framework"] == "vllm"

    _measure(vllm_server, plan, 1, tmp_path / "one.jsonl")
    _measure(vllm_server, plan, 6, tmp_path / "six.jsonl")
    cal = tmp_path / "cal.yaml"
    fitted = infra("calibrate", str(tmp_path / "one.jsonl"), str(tmp_path / "six.jsonl"), "-o", str(cal),
                   "--catalog", catalog)
    assert fitted.returncode == 0, fitted.stderr
    doc = yaml.safe_load(cal.read_text())
    assert [s["format"] for s in doc["sources"]] == ["infra-bench", "infra-bench"]
    assert doc["error"]["calibrated"]["tpot_median_ape"] < doc["error"]["prior"]["tpot_median_ape"]

    def predicted_and_measured(attempt: int) -> tuple[float, float]:
        est = api.estimate({"model": "tiny", "device": CPU, "framework": "vllm", "precision": alloc["precision"],
                            "isl": ISL, "osl": OSL, "concurrency": 3, "batch": alloc["engines"]["agg"]["max_num_seqs"]},
                           (Path(catalog),), calibration=cal)
        assert est["measured_calibration"].startswith("calibrated on 2 measured load point(s)")
        # Each attempt saves its own run: bench never replaces an earlier measurement without --force.
        got = _measure(vllm_server, plan, 3, tmp_path / f"three-{attempt}.jsonl")
        return est["tpot_ms"]["mean"], got["tpot_ms"]["mean"]

    predicted, measured = predicted_and_measured(1)
    if abs(predicted / measured - 1) > BOUND:
        predicted, measured = predicted_and_measured(2)  # shared cores are noisy: once more before it counts
    assert abs(predicted / measured - 1) <= BOUND, (predicted, measured)

    verified = infra("verify", str(plan), "--endpoint", vllm_server, "--model", "tiny", "--requests", "16",
                     "--write", str(tmp_path / "v"), "--catalog", catalog)
    assert verified.returncode in (0, 3), verified.stderr
    assert "tiny:" in verified.stdout and "measured" in verified.stdout
    replanned = yaml.safe_load((tmp_path / "v" / "plan" / "plan.yaml").read_text())
    assert replanned["spec"]["provenance"]["calibration"]["measured"]["points"] == 1
    [again] = replanned["spec"]["services"][0]["allocations"]
    assert again["measured"].startswith("calibrated on 1 measured load point(s) of 1 deployment(s) (this deployment")


TAIL_REQUESTS = 120
"""Requests per measured load: p90 needs 100 (ten beyond it) before a calibration fits a tail on it."""
SPREAD_BOUND = 0.12
"""How far the calibrated TPOT p90's ratio to its mean at the unmeasured load may be from the measured ratio: the
measured ratio moves by 0.1 or so run to run (1.2-1.5 over these loads)."""
# The p90 itself is held to the mean's bound (BOUND): its error is the mean's and the spread's, and the engine's mean
# TPOT need not follow the model's course between the loads. On two shared vCPUs it has run 14.1 / 11.3 / 12.4 ms at
# 2 / 4 / 6 clients (the model's rises with the load: the calibrated mean at 4 some 13% high) and, in another run,
# about 16 / 12.5 / 16 ms (29% high, the p90's ratio to its mean 3% from the measured one): a bound on the p90 tighter
# than the mean's failed on the mean's noise, not on the spread this test is about.


def test_measured_tails_carry_to_a_load_between_the_measured_ones(vllm_server, tiny_model, tmp_path):
    """The model has a closed loop's TPOT flat (p90 = mean); the engine's p90 runs 5-50% above its mean, more
    with more clients (steps that carry the other clients' prompts). Calibrated on the percentiles of two loads,
    the estimate at a third takes that spread, where calibrated means alone leave the model's."""
    catalog = str(_catalog(tiny_model, tmp_path / "catalog"))
    intent = tmp_path / "loop.yaml"
    intent.write_text(INTENT.format(device=CPU, isl=ISL, osl=OSL // 2))
    planned = infra("plan", str(intent), "-o", str(tmp_path / "out"), "--no-verify", "--catalog", catalog)
    assert planned.returncode == 0, planned.stderr
    plan = tmp_path / "out" / "plan.yaml"
    [alloc] = yaml.safe_load(plan.read_text())["spec"]["services"][0]["allocations"]

    def measure(clients: int, save: Path) -> dict:
        out = infra("bench", "--endpoint", vllm_server, "--model", "tiny", "--plan", str(plan), "--concurrency",
                    str(clients), "--requests", str(TAIL_REQUESTS), "--input-tokens", str(ISL), "--output-tokens",
                    str(OSL // 2), "--save", str(save), "--json")
        assert out.returncode in (0, 3), out.stderr
        return json.loads(out.stdout.strip().splitlines()[-1])

    measure(2, tmp_path / "two.jsonl")
    measure(6, tmp_path / "six.jsonl")
    cal = tmp_path / "cal.yaml"
    fitted = infra("calibrate", str(tmp_path / "two.jsonl"), str(tmp_path / "six.jsonl"), "-o", str(cal),
                   "--catalog", catalog)
    assert fitted.returncode == 0, fitted.stderr
    doc = yaml.safe_load(cal.read_text())
    [node] = [n for n in doc["corrections"] if n["level"] == "deployment"]
    assert node["tails"]["tpot"]["add"] > 0 and {t["percentile"] for p in doc["points"] for t in p["tails"]} == {"p90"}
    est = api.estimate({"model": "tiny", "device": CPU, "framework": "vllm", "precision": alloc["precision"],
                        "isl": ISL, "osl": OSL // 2, "concurrency": 4,
                        "batch": alloc["engines"]["agg"]["max_num_seqs"]}, (Path(catalog),), calibration=cal)

    def errors(attempt: int) -> tuple[float, float, float]:
        """(the p90's error, the error of the p90's ratio to the mean: with the measured tails, with the model's
        flat spread)."""
        got = measure(4, tmp_path / f"four-{attempt}.jsonl")["tpot_ms"]
        measured, predicted = got["p90"] / got["mean"], est["tpot_ms"]["p90"] / est["tpot_ms"]["mean"]
        return abs(est["tpot_ms"]["p90"] / got["p90"] - 1), abs(predicted / measured - 1), abs(1 / measured - 1)

    def judged(got: tuple[float, float, float]) -> bool:
        p90, tails, flat = got
        return p90 <= BOUND and tails <= SPREAD_BOUND and tails < flat

    got = errors(1)
    if not judged(got):
        got = errors(2)  # shared cores are noisy: once more before it counts
    assert judged(got), (got, est["tpot_ms"])


def test_observe_reads_what_a_real_engine_served(vllm_server, tiny_model, tmp_path):
    """`infra observe` on vLLM's own /metrics while a client sends it traffic: the window's means are the client's
    (the engine's TTFT starts at arrival, the client's at send: a few percent apart)."""
    catalog = str(_catalog(tiny_model, tmp_path / "catalog"))
    load = subprocess.Popen([sys.executable, "-m", "infra", "bench", "--endpoint", vllm_server, "--model", "tiny",
                             "--concurrency", "4", "--requests", "100", "--input-tokens", str(ISL),
                             "--output-tokens", str(OSL // 2), "--json"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        observed = infra("observe", vllm_server, "--duration", "20", "-o", str(tmp_path / "observed.jsonl"),
                         "--model", "tiny", "--device", CPU, "--framework", "vllm", "--precision", "fp32",
                         "--catalog", catalog, "--json")
    finally:
        out, err = load.communicate(timeout=900)
    assert observed.returncode == 0, observed.stderr
    got, client = json.loads(observed.stdout), json.loads(out.strip().splitlines()[-1])
    assert got["requests"] >= 30 and got["osl"] == pytest.approx(OSL // 2, rel=0.1)
    for metric in ("ttft_ms", "tpot_ms"):
        assert got[metric] == pytest.approx(client[metric]["mean"], rel=0.2), (metric, got, client[metric])
    fitted = infra("calibrate", str(tmp_path / "observed.jsonl"), "-o", str(tmp_path / "cal.yaml"),
                   "--catalog", catalog)
    assert fitted.returncode == 0, fitted.stderr
