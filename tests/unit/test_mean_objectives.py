"""Mean objectives (`ttft: {mean: 300ms}`), as AIConfigurator and Dynamo state them: loaded, predicted, judged."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
import yaml

from infra import api
from infra.bench.metrics import RequestRecord, good, parse_objective
from infra.bench.verdict import judge_objective, mean_ci
from infra.catalog.metrics import MIN_MEAN
from infra.errors import InfraError

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def _intent(tmp_path: Path, slo: str, example: str = "chat-mixed-fleet.yaml",
            was: str = "ttft: {p50: 300ms, p99: 1.5s}") -> Path:
    text = (EXAMPLES / example).read_text()
    assert was in text
    path = tmp_path / "examples" / "mean.yaml"
    path.parent.mkdir()
    (tmp_path / "examples" / "profiles").symlink_to(EXAMPLES / "profiles")
    path.write_text(text.replace(was, slo))
    return path


def test_a_mean_objective_loads_orders_first_and_names_itself(tmp_path):
    intent = api.load_intent(_intent(tmp_path, "ttft: {p99: 1.5s, mean: 400ms}"))
    targets = intent.services[0].service.slo.targets()
    assert [(m, p) for m, p, _ in targets if m == "ttft"] == [("ttft", "mean"), ("ttft", "p99")]
    assert parse_objective("tpot_mean") == ("tpot", "mean")


def test_a_statistic_that_is_neither_is_refused_at_its_line(tmp_path):
    with pytest.raises(InfraError) as exc:
        api.load_intent(_intent(tmp_path, "ttft: {avg: 400ms}"))
    text = str(exc.value)
    assert "mean.yaml:" in text and "'avg' is neither mean nor a percentile" in text


def test_a_mean_is_planned_against_the_predicted_mean_and_verified(tmp_path):
    result = api.plan(_intent(tmp_path, "ttft: {mean: 400ms, p99: 1.5s}"), tmp_path / "out", verify=True)
    for alloc in result.plan.document()["spec"]["services"][0]["allocations"]:
        assert alloc["predicted"]["ttft_mean"]["predicted_ms"] <= 400
    written = yaml.safe_load((tmp_path / "out" / "plan.yaml").read_text())
    [svc] = written["spec"]["verification"]["rounds"][-1]["services"]
    [mean] = [o for o in svc["objectives"] if o["key"] == "ttft_mean"]
    assert mean["verdict"] == "pass" and mean["ci_ms"][0] <= mean["measured_ms"] <= mean["ci_ms"][1] <= 400


def test_a_mean_is_judged_on_its_interval_and_needs_enough_samples():
    rng = np.random.default_rng(0)
    values = rng.exponential(100.0, 2000)
    assert judge_objective("ttft_mean", 120.0, values).verdict == "pass"
    assert judge_objective("ttft_mean", 80.0, values).verdict == "fail"
    assert judge_objective("ttft_mean", 100.5, values).verdict == "inconclusive"  # target inside the interval
    few = judge_objective("ttft_mean", 1000.0, values[:MIN_MEAN - 1])
    assert few.verdict == "inconclusive" and f"at least {MIN_MEAN}" in few.reason
    # Far beyond on a handful of samples is still a certain miss.
    assert judge_objective("ttft_mean", 1.0, values[:5]).verdict == "fail"


def test_a_failed_request_makes_the_mean_infinite_and_the_objective_fail():
    point, low, high, n = mean_ci(np.array([10.0, 20.0, math.inf]))
    assert (point, low, high, n) == (math.inf, math.inf, math.inf, 3)
    assert judge_objective("e2e_mean", 1e6, np.array([10.0] * 40 + [math.inf])).verdict == "fail"


def test_a_mean_bounds_no_single_request():
    slow = RequestRecord(0, 0.0, 0.0, ttft=5.0, e2e=6.0, input_tokens=10, output_tokens=4)
    assert good(slow, {"ttft_mean": 100.0})
    assert not good(slow, {"ttft_p99": 100.0})


def test_a_pipelines_objective_stays_a_percentile(tmp_path):
    with pytest.raises(InfraError) as exc:
        api.load_intent(_intent(tmp_path, "e2e: {mean: 20s}", "omni-speech.yaml", "e2e: {p99: 30s}"))
    assert "slo.e2e.mean: a pipeline's objectives are percentiles" in str(exc.value)
