"""`infra plan --verify` and `infra bench --simulate` as a user runs them: files, JSON, exit codes."""

from __future__ import annotations

import json

import pytest
from ruamel.yaml import YAML

from ..conftest import ROOT
from .test_cli import infra

SMALL = ROOT / "examples" / "small-model-shared.yaml"


@pytest.fixture(scope="module")
def planned(tmp_path_factory):
    out = tmp_path_factory.mktemp("plan")
    run = infra("plan", str(SMALL), "-o", str(out))
    assert run.returncode == 0, run.stderr
    return out, run


def test_plan_verifies_by_default_and_records_the_round(planned):
    out, run = planned
    assert "verification round 1 (simulation" in run.stdout
    spec = YAML(typ="safe").load((out / "plan.yaml").read_text())["spec"]
    v = spec["verification"]
    assert v["method"] == "simulation" and v["requests"] == 2000 and v["seed"] == 0 and v["plan_round"] == 1
    objectives = v["rounds"][0]["services"][0]["objectives"]
    assert {o["key"] for o in objectives} == set(spec["services"][0]["objectives"])
    for o in objectives:
        assert o["measured_ms"] > 0 and o["predicted_ms"] > 0 and len(o["ci_ms"]) == 2 and o["n"] >= 2000
        assert o["verdict"] in ("pass", "inconclusive")
    assert "## Verification" in (out / "report.md").read_text()


def test_no_verify_skips_it(tmp_path):
    run = infra("plan", str(SMALL), "-o", str(tmp_path), "--no-verify")
    assert run.returncode == 0, run.stderr
    assert "verification" not in YAML(typ="safe").load((tmp_path / "plan.yaml").read_text())["spec"]


def test_bench_simulate_json_and_save(planned, tmp_path):
    out, _ = planned
    save = tmp_path / "run.jsonl"
    run = infra("bench", "--simulate", str(out / "plan.yaml"), "--json", "--requests", "1200", "--seed", "3",
                "--save", str(save))
    assert run.returncode == 0, run.stderr
    data = json.loads(run.stdout.strip().splitlines()[-1])
    assert data["completed"] == 1200 and data["failed"] == 0 and data["duration_s"] > 0 and data["goodput_rps"] > 0
    for m in ("ttft_ms", "tpot_ms", "itl_ms", "e2e_ms"):
        assert all(data[m][k] > 0 for k in ("mean", "p50", "p90", "p99"))
    assert data["verdict"]["overall"] == "pass"
    lines = [json.loads(line) for line in save.read_text().splitlines()]
    kinds = [line["kind"] for line in lines]
    assert kinds.count("request") == 1200 and "case" in kinds and kinds[-1] == "summary"
    # Each allocation's case line keeps its requests' percentiles, which a calibration fits its tails on.
    case = next(line for line in lines if line["kind"] == "case")
    for metric in ("ttft_ms", "tpot_ms"):
        pcts = case["percentiles"][metric]
        assert list(pcts) == ["p50", "p90", "p95", "p99"] and pcts["p50"] <= pcts["p99"]
        assert pcts["p50"] > 0.5 * case[metric]


def test_bench_fails_with_exit_3_on_an_objective_it_misses(planned, tmp_path):
    out, _ = planned
    yaml = YAML(typ="safe")
    plan = yaml.load((out / "plan.yaml").read_text())
    plan["spec"]["services"][0]["objectives"]["tpot_p99"] = 1.0
    bad = tmp_path / "plan.yaml"
    with bad.open("w") as fh:
        yaml.dump(plan, fh)
    run = infra("bench", "--simulate", str(bad), "--requests", "1000", "--rate", "2/s", "--output-tokens", "64")
    assert run.returncode == 3, run.stderr
    assert "verdict: FAIL" in run.stdout and "TPOT" in run.stdout and "2 req/s" in run.stdout


def test_bench_needs_a_source():
    run = infra("bench")
    assert run.returncode == 1 and "--simulate" in run.stderr and "To fix" in run.stderr


def test_plan_exits_3_when_verification_cannot_pass(tmp_path):
    """Prompts as long as max_context leave no room for an answer: the engines reject them, which no re-plan
    fixes; the plan is still written with its verification, and the exit code says it failed."""
    intent = SMALL.read_text().replace("profiles/edge-small-gpus.yaml",
                                       str(ROOT / "examples" / "profiles" / "edge-small-gpus.yaml"))
    intent = intent.replace("input_tokens: {mean: 2.5k, max: 6k}", "input_tokens: {fixed: 8k}")
    path = tmp_path / "intent.yaml"
    path.write_text(intent)
    run = infra("plan", str(path), "-o", str(tmp_path / "out"))
    assert run.returncode == 3, run.stdout + run.stderr
    assert "re-planning cannot fix that" in run.stdout
    v = YAML(typ="safe").load((tmp_path / "out" / "plan.yaml").read_text())["spec"]["verification"]
    assert v["verdict"] == "fail" and v["rounds"][0]["services"][0]["failed"] == 2000
