"""Branches that join: two encoders side by side feeding one LLM are planned along each path into it, simulated
with the LLM starting when the slower encoder has handed on, and rendered with both as the LLM's inputs."""

from __future__ import annotations

import math

import numpy as np
import pytest

from infra import api
from infra.bench.pipeline import simulate_pipeline
from infra.planner.types import DeploymentPlan
from infra.render import render_tree
from infra.report.plan import plan_yaml

from ..conftest import ROOT

FAN_IN = ROOT / "tests" / "fixtures" / "pipelines" / "fan-in.yaml"


@pytest.fixture(scope="module")
def plan() -> DeploymentPlan:
    return api.plan(FAN_IN).plan


def test_each_path_into_the_llm_gets_the_whole_objective(plan):
    (pipe,) = plan.spec.pipelines
    assert [st.after for st in pipe.stages] == [[], [], ["vision", "audio"]]
    assert pipe.inputs() == [[], [], [0, 1]] and pipe.consumers() == [2, 2, None]
    budget = {st.name: st.budget_ms for st in pipe.stages}
    hop = {st.name: st.handoff.total_ms for st in pipe.stages if st.handoff}
    for encoder in ("vision", "audio"):
        # The encoder's latency, its hand-off and the LLM's first token share the 2 s objective on their path
        # (the plan shows each budget to four significant figures: up to half a millisecond off at 1-10 s).
        parts = (budget[encoder]["latency_p99"], hop[encoder], budget["llm"]["first_output_p99"])
        assert sum(parts) <= 2000 + sum(0.5 * 10.0 ** (math.floor(math.log10(v)) - 3) for v in parts)
    by = {s.stage: s for s in plan.spec.services if s.pipeline == "ask"}

    def predicted(stage: str, key: str) -> float:
        return max(a.predicted[key].predicted_ms for a in by[stage].allocations)

    slowest = max(predicted("vision", "latency_p99") + hop["vision"], predicted("audio", "latency_p99") + hop["audio"])
    assert pipe.objectives["ttft_p99"].predicted_ms == pytest.approx(slowest + predicted("llm", "ttft_p99"), rel=1e-3)


def test_the_llm_starts_when_the_slower_encoder_has_handed_on(plan):
    run = simulate_pipeline(plan, "ask", requests=300, seed=1, intent=FAN_IN)
    vision, audio, llm = run.stages
    hop = {st.name: st.handoff.total_ms / 1000 for st in plan.spec.pipelines[0].stages if st.handoff}
    expected = np.maximum(vision.end + hop["vision"], audio.end + hop["audio"])
    assert np.allclose(llm.arrive, expected)
    # Both encoders start at once, on the request's arrival.
    assert np.allclose(vision.arrive, run.arrive) and np.allclose(audio.arrive, run.arrive)


def test_the_llm_stage_config_names_both_inputs(plan, tmp_path):
    from ruamel.yaml import YAML

    from infra.validators import validate_tree

    from .test_validators_plan import write_files

    files = render_tree(plan).files
    text = files["ask-llm/base/configmap-ask-llm-stage.yaml"]
    cfg = YAML(typ="safe").load(YAML(typ="safe").load(text)["data"]["stage.yaml"])
    assert [i["stage"] for i in cfg["inputs"]] == ["vision", "audio"] and cfg["final_output"] is True
    for encoder in ("vision", "audio"):
        enc = YAML(typ="safe").load(YAML(typ="safe").load(
            files[f"ask-{encoder}/base/configmap-ask-{encoder}-stage.yaml"])["data"]["stage.yaml"])
        assert enc["inputs"] == [] and enc["output"]["stage"] == "llm"
    path = tmp_path / "plan.yaml"
    path.write_text(plan_yaml(plan))
    report = validate_tree(write_files(files, tmp_path / "m"), plan=path)
    assert report.errors == [], [str(f) for f in report.errors]
