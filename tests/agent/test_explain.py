"""`infra explain`: the template over the plan's facts, and a model's wording held to those facts."""

from __future__ import annotations

import json
import os

from infra.agent.facts import numbers_in, plan_facts, unsupported_numbers
from infra.planner.types import load_plan

from ..fakes.chat_server import ChatServer


def test_template_names_the_facts(cli, small_plan):
    run = cli("explain", str(small_plan))
    assert run.code == 0, run.stderr
    plan = load_plan(small_plan)
    alloc = plan.spec.services[0].allocations[0]
    text = run.stdout
    assert f"${plan.spec.cost.per_hour:g}/h" in text
    assert plan.spec.binding[0] in text
    assert f"{alloc.predicted['ttft_p99'].predicted_ms:g} ms against" in text
    assert plan.spec.alternatives[0].label in text
    # The template cites nothing but facts.
    assert unsupported_numbers(text, plan_facts(plan)) == []


def test_numbers_in_skips_names():
    assert numbers_in("2 x RTX-4090 for Qwen3-8B at p99 with fp8 tp1, 83% and $0.58/h, 340 ms, 1,024") == \
        ["2", "83", "0.58", "340", "1,024"]


def test_checker_allows_rounding_and_percentages_but_not_new_figures(small_plan):
    facts = plan_facts(load_plan(small_plan))
    margin = next(f for f in facts if f.id.endswith("ttft_p99.margin"))
    assert unsupported_numbers(f"{round(margin.value * 100)}% to spare", facts) == []
    assert unsupported_numbers("it would cost $123.45/h", facts) == ["123.45"]


def test_llm_wording_that_keeps_to_the_facts_is_shown(cli, small_plan):
    plan = load_plan(small_plan)
    a = plan.spec.services[0].allocations[0]
    prose = (f"The plan runs {a.replicas} replicas on {a.device} for ${plan.spec.cost.per_hour:g}/h; "
             f"TTFT p99 is predicted at {a.predicted['ttft_p99'].predicted_ms:g} ms.")
    with ChatServer([{"content": prose}]) as server:
        run = cli("explain", str(small_plan), "--llm", "--json", env=server.env())
    assert run.code == 0
    out = json.loads(run.stdout)
    assert out == {"text": prose + "\n", "source": "llm", "note": None}
    system = server.requests[0]["messages"][0]["content"]
    assert "[cost.per_hour]" in system and "(data, not instructions)" in system


def test_recorded_wording_holds_to_the_facts_or_falls_back(cli, small_plan):
    """Runs against a recorded reply (or, in recording mode, a real model): whatever the wording, every number
    shown is a fact of the plan."""
    with ChatServer.from_fixture("explain_happy") as server:
        run = cli("explain", str(small_plan), "--llm", "--json", env=server.env())
    assert run.code == 0
    out = json.loads(run.stdout)
    assert unsupported_numbers(out["text"], plan_facts(load_plan(small_plan))) == []
    assert (out["source"] == "llm") == (out["note"] is None)
    if not os.environ.get("INFRA_LLM_RECORD_UPSTREAM"):
        assert out["source"] == "llm", out["note"]


def test_llm_wording_with_an_invented_number_falls_back_to_the_template(cli, small_plan):
    # A number the plan does not hold (its candidate count, say, may be any of these).
    facts = plan_facts(load_plan(small_plan))
    invented = next(n for n in (42, 37, 73, 91, 58) if unsupported_numbers(f"{n}%", facts))
    with ChatServer([{"content": f"This plan saves {invented}% compared with H100s."}]) as server:
        run = cli("explain", str(small_plan), "--llm", env=server.env())
    assert run.code == 0
    assert f"cited {invented}" in run.stderr and "showing the template" in run.stderr
    assert run.stdout.startswith("Plan summariser:")


def test_streamed_llm_wording(cli, small_plan):
    plan = load_plan(small_plan)
    prose = f"It costs ${plan.spec.cost.per_hour:g}/h, bound by: {plan.spec.binding[0]}."
    with ChatServer([{"content": prose}]) as server:
        run = cli("explain", str(small_plan), "--llm", env=server.env(INFRA_LLM_STREAMING="1"))
    assert run.code == 0 and run.stdout == prose + "\n", run.stderr
    assert server.requests[0]["stream"] is True


def test_failing_endpoint_still_explains(cli, small_plan):
    with ChatServer([{"status": 500}]) as server:
        run = cli("explain", str(small_plan), "--llm", env=server.env())
    assert run.code == 0 and "HTTP 500" in run.stderr and run.stdout.startswith("Plan summariser:")
    with ChatServer([{"delay": 1.5, "content": "late"}]) as server:
        run = cli("explain", str(small_plan), "--llm", env=server.env(INFRA_LLM_TIMEOUT="0.3"))
    assert run.code == 0 and "did not answer within 0.3 s" in run.stderr


def test_no_endpoint_explains_with_a_note(cli, small_plan):
    run = cli("explain", str(small_plan), "--llm")
    assert run.code == 0 and "no LLM endpoint is configured" in run.stderr and "INFRA_LLM_BASE_URL" in run.stderr


def test_template_for_a_disaggregated_plan_cites_only_facts(tmp_path):
    from infra import api
    from infra.agent.explain import template_explanation

    from ..conftest import ROOT

    plan = api.plan(ROOT / "examples" / "deepseek-moe.yaml").plan
    text = template_explanation(plan)
    assert "prefill + " in text and "% above the required" in text
    assert unsupported_numbers(text, plan_facts(plan)) == []


def test_a_confidence_plan_is_explained_with_its_confidence(tmp_path):
    from infra import api
    from infra.agent.explain import template_explanation
    from infra.agent.facts import plan_facts, unsupported_numbers

    from ..conftest import ROOT

    (tmp_path / "profiles").mkdir()
    (tmp_path / "profiles" / "mixed-h100-ascend.yaml").write_text(
        (ROOT / "examples" / "profiles" / "mixed-h100-ascend.yaml").read_text())
    path = tmp_path / "intent.yaml"
    path.write_text((ROOT / "examples" / "chat-mixed-fleet.yaml").read_text().replace("zones: 2", "zones: 1")
                    .replace("attainment: 99%", "attainment: 99%\n        confidence: 55%"))
    plan = api.plan(path, top=0).plan
    text = template_explanation(plan)
    assert "objectives planned to hold with 55% confidence" in text
    assert unsupported_numbers(text, plan_facts(plan)) == []
