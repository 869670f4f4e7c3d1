"""Explanations of a plan: a template over its facts, or a model's rephrasing that is checked number by number.

A rephrasing that cites a figure the facts do not hold, or an endpoint that fails, gives the template instead,
with a note saying why; the user always gets an explanation.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from infra.agent.facts import _g, _layout, plan_facts, unsupported_numbers
from infra.agent.prompts import render
from infra.errors import EndpointError
from infra.planner.types import DeploymentPlan, load_plan


@dataclass(frozen=True)
class Explanation:
    text: str
    source: str
    """`template`, or `llm` when the model's wording passed the check."""
    note: str | None = None
    """Why the template was shown although a model was asked."""


def template_explanation(plan: DeploymentPlan) -> str:
    """The deterministic explanation: binding constraints, SLO margins, cost breakdown, alternatives."""
    return render("explanation.j2", name=plan.metadata.name, spec=plan.spec, g=_g, layout=_layout,
                  pct=lambda x: round(x * 100, 1)).rstrip() + "\n"


def llm_messages(plan: DeploymentPlan, question: str | None = None) -> list[dict[str, str]]:
    return [{"role": "system", "content": render("explain_system.j2", name=plan.metadata.name,
                                                 facts=plan_facts(plan), max_words=220)},
            {"role": "user", "content": render("explain_user.j2", question=question)}]


def checked_prose(plan: DeploymentPlan, prose: str | None) -> tuple[str | None, str | None]:
    """(prose, None) when every number in it is a fact of the plan, else (None, why not)."""
    if not prose or not prose.strip():
        return None, "the model gave an empty answer"
    bad = unsupported_numbers(prose, plan_facts(plan))
    if bad:
        shown = ", ".join(sorted(set(bad))[:5])
        return None, f"the model's wording cited {shown}, which the plan's facts do not hold"
    return prose.strip() + "\n", None


def explain(plan_path: str | Path, use_llm: bool = False) -> Explanation:
    """Explain a plan.yaml; with `use_llm`, a configured model rephrases it (checked against the facts)."""
    plan = load_plan(plan_path)
    template = template_explanation(plan)
    if not use_llm:
        return Explanation(template, "template")
    from infra.agent.settings import CONFIGURE_HINT, load_settings

    settings = load_settings()
    if settings is None:
        return Explanation(template, "template", f"no LLM endpoint is configured ({CONFIGURE_HINT}); showing the "
                                                 "template explanation")
    from infra.agent.client import LLMClient

    try:
        turn = LLMClient(settings).chat(llm_messages(plan))
    except EndpointError as exc:
        return Explanation(template, "template", f"{exc.problems[0].message}; showing the template explanation")
    prose, why = checked_prose(plan, turn.content)
    if prose is None:
        return Explanation(template, "template", f"{why}; showing the template explanation")
    return Explanation(prose, "llm")
