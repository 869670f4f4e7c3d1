"""`infra plan --agent`: the model proposes intent patches in a bounded tool loop, the planner solves each, the
user sees them next to the baseline and accepts one (or none) at a prompt, or in advance with `--yes`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from rich.console import Console

from infra.agent.loop import LoopResult
from infra.agent.planning import Planned, Planning
from infra.agent.session import Session
from infra.errors import EndpointError
from infra.planner.types import DeploymentPlan


@dataclass
class AgentOutcome:
    session: Session
    loop: LoopResult
    accepted: str | None
    replanned: Planned | None = None
    """The `infra.api.PlanResult` of the patched intent, when a patch was accepted."""


def run_plan_agent(intent_path: Path, baseline: DeploymentPlan | None, conflict: list[str], *,
                   planning: Planning, goal: str | None, yes: bool, output: Path | None, console: Console,
                   ask: Callable[[str], str | None], catalog_dirs: tuple[Path, ...] = (),
                   objective: str = "cost") -> AgentOutcome:
    """Run the loop, show every solved patch side by side with the baseline, and apply the one the user
    accepts: the intent file is rewritten and, with `output`, planned again with the change in its provenance."""
    from infra.agent.client import LLMClient
    from infra.agent.facts import plan_facts
    from infra.agent.loop import run_loop
    from infra.agent.patches import accept
    from infra.agent.prompts import prompt_sha256, render
    from infra.agent.settings import require_settings
    from infra.agent.show import comparison

    settings = require_settings()
    if not settings.capabilities.tools:
        raise EndpointError("the LLM endpoint is configured without tool calls (capabilities.tools: false), which "
                            "plan --agent needs — To fix: use a server and model with tool calling (vLLM: "
                            "--enable-auto-tool-choice and a --tool-call-parser; llama.cpp: --jinja)")
    client = LLMClient(settings)
    session = Session(intent_path, baseline, planning, conflict, catalog_dirs, objective)
    facts = plan_facts(baseline) if baseline is not None else []
    system = render("plan_agent_system.j2", facts=facts, conflict=conflict,
                    max_solver_calls=settings.budgets.max_solver_calls)
    user = render("plan_agent_user.j2", goal=goal, conflict=conflict)
    origin = f"llm: {client.label}"
    loop = run_loop(client, [{"role": "system", "content": system}, {"role": "user", "content": user}],
                    session.tools(origin, recommend=True))
    result = AgentOutcome(session, loop, None)
    if loop.answer:
        console.print(f"model: {loop.answer}", markup=False, highlight=False)
    if loop.stopped:
        console.print(f"stopped: {loop.stopped}")
    if not session.outcomes:
        console.print("the model proposed no change; the plan stays as it is")
        return result
    console.print(comparison(baseline, session.outcomes))
    for pid, outcome in session.outcomes.items():
        if outcome.status != "solved":
            console.print(f"{pid} {outcome.status}: " + "; ".join(outcome.problems[:2]), markup=False)
    solved = [pid for pid, o in session.outcomes.items() if o.status == "solved"]
    if not solved:
        console.print("no proposed change solved; the plan stays as it is")
        return result
    recommended = session.recommended[0] if session.recommended else None
    if recommended:
        console.print(f"recommended: {recommended} ({session.recommended[1]})", markup=False)
    if yes:
        if recommended is None:
            console.print("--yes: the model recommended no patch, so nothing is changed")
            return result
        choice = recommended
    else:
        default = recommended or "none"
        answer = ask(f"Apply which change to {intent_path}? ({', '.join(solved)} or none) [{default}]: ")
        if answer is None:
            console.print("no answer (the input ended); nothing changed")
            return result
        choice = answer.strip() or default
        if choice.lower() in ("none", "n", "no"):
            console.print("nothing changed")
            return result
        if choice not in solved:
            console.print(f"{choice!r} is not a solved change; nothing changed", markup=False)
            return result
    previous = ([c.model_dump(mode="json", exclude_none=True) for c in baseline.spec.provenance.changes]
                if baseline is not None else [])
    result.replanned = accept(intent_path, session.outcomes[choice], output, planning=planning, proposed_by=origin,
                              accepted_by="user (--yes)" if yes else "user", previous=previous,
                              prompt_sha256=prompt_sha256(system, user), catalog_dirs=catalog_dirs,
                              objective=objective)
    result.accepted = choice
    cost = result.replanned.plan.spec.cost.per_hour
    console.print(f"applied {choice} to {intent_path}; the plan of the changed intent costs ${cost:g}/h",
                  markup=False)
    for path in result.replanned.written:
        console.print(f"wrote {path}", markup=False)
    return result
