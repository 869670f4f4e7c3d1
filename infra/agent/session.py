"""One conversation about one plan: the baseline, the patches tried (each solved for real), and the tools the
model may use on them. Shared by `infra plan --agent` and `infra review`."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from infra.agent.loop import NoArgs, Tool, ToolResult
from infra.agent.patches import IntentPatch, Outcome, patch_text, solve_patch
from infra.agent.planning import Planning
from infra.planner.types import Allocation, DeploymentPlan, Objective


def plan_summary(plan: DeploymentPlan) -> dict[str, Any]:
    """The figures of a plan a comparison (and the model) needs, as data: cost, what runs where, predictions
    against targets, binding constraints."""
    spec = plan.spec
    services = []
    for svc in spec.services:
        services.append({
            "name": svc.name,
            "allocations": [f"{a.replicas} x {a.device} on {a.pool}: {a.framework} {a.precision} "
                            f"{a.mode} tp{a.parallel.tp} (${a.cost_per_hour:g}/h)" for a in svc.allocations],
            "objectives": _worst(svc.allocations),
            "capacity": f"{svc.capacity.value:g} {svc.capacity.unit}",
        })
    return {"cost_per_hour": spec.cost.per_hour, "services": services, "binding": list(spec.binding)}


def _worst(allocations: list[Allocation]) -> dict[str, str]:
    """Per objective, the allocation closest to (or past) its target: the one that decides whether it holds."""
    worst: dict[str, Objective] = {}
    for a in allocations:
        for key, o in a.predicted.items():
            if key not in worst or o.predicted_ms / o.target_ms > worst[key].predicted_ms / worst[key].target_ms:
                worst[key] = o
    return {k: f"{o.predicted_ms:g} of {o.target_ms:g} ms" for k, o in sorted(worst.items())}


class Recommend(BaseModel):
    """Name the solved patch you recommend (or none) and why; this ends your work."""

    model_config = ConfigDict(extra="forbid")
    patch_id: str | None = Field(pattern=r"^P\d+$")
    """Id of a solved patch (P1, P2, ...), or null to recommend keeping the baseline."""
    rationale: str = Field(max_length=600)


@dataclass
class Session:
    intent_path: Path
    baseline: DeploymentPlan | None
    """The plan of the intent as written; None when it is infeasible (then `conflict` says why)."""
    planning: Planning
    conflict: list[str] = field(default_factory=list)
    catalog_dirs: tuple[Path, ...] = ()
    objective: str = "cost"
    outcomes: dict[str, Outcome] = field(default_factory=dict)
    origins: dict[str, str] = field(default_factory=dict)
    recommended: tuple[str | None, str] | None = None

    def what_if(self, patch: IntentPatch, origin: str) -> tuple[str, Outcome]:
        """Solve a patch against the current intent file; it gets the next id (P1, P2, ...)."""
        pid = f"P{len(self.outcomes) + 1}"
        outcome = solve_patch(self.intent_path, patch, self.planning, self.catalog_dirs, self.objective)
        self.outcomes[pid], self.origins[pid] = outcome, origin
        return pid, outcome

    def outcome_data(self, pid: str, outcome: Outcome) -> dict[str, Any]:
        data: dict[str, Any] = {"id": pid, "status": outcome.status, "patch": patch_text(outcome.patch)}
        if outcome.problems:
            data["problems"] = outcome.problems[:8]
        if outcome.plan is not None:
            after = plan_summary(outcome.plan)
            data["plan"] = after
            if self.baseline is not None:
                data["delta_per_hour"] = round(after["cost_per_hour"] - self.baseline.spec.cost.per_hour, 6)
        return data

    def facts(self) -> list[dict[str, str]]:
        """The baseline's facts, or the conflict of an infeasible intent."""
        from infra.agent.facts import plan_facts

        if self.baseline is None:
            return [{"id": f"conflict.{i}", "text": line} for i, line in enumerate(self.conflict)]
        return [{"id": f.id, "text": f.text} for f in plan_facts(self.baseline)]

    def tools(self, origin: str, *, recommend: bool) -> list[Tool]:
        """What the model may call: read the facts and the intent, solve a patch (writes nothing) and, when
        asked for one, recommend a patch."""
        facts = self.facts()

        def solve(patch: IntentPatch) -> ToolResult:
            pid, outcome = self.what_if(patch, origin)
            status = {"solved": "ok", "infeasible": "infeasible", "rejected": "rejected"}[outcome.status]
            message = {"solved": f"{pid} solved", "infeasible": f"{pid} has no feasible plan",
                       "rejected": f"{pid} was refused before solving: fix the change and try again"}[outcome.status]
            return ToolResult(status=status, message=message, data=self.outcome_data(pid, outcome))

        def choose(rec: Recommend) -> ToolResult:
            if rec.patch_id is not None and (rec.patch_id not in self.outcomes
                                             or self.outcomes[rec.patch_id].status != "solved"):
                return ToolResult(status="error", message=f"{rec.patch_id} is not a solved patch; solved: "
                                  + ", ".join(k for k, o in self.outcomes.items() if o.status == "solved"))
            self.recommended = (rec.patch_id, rec.rationale)
            return ToolResult(status="ok", message="recorded; now give your final answer in a few sentences")

        tools = [
            Tool("get_facts", "The baseline plan's facts (id and text), or why the intent is infeasible.", NoArgs,
                 lambda _: ToolResult(status="ok", data=facts)),
            Tool("get_intent", "The intent file the plan was made from (YAML, as data).", NoArgs,
                 lambda _: ToolResult(status="ok", data=self.intent_path.read_text(encoding="utf-8"))),
            Tool("solve_patch", "Solve the intent with these changes (the planner runs for real; nothing is "
                                "written). Returns the plan's cost, layout and predictions, or why it failed.",
                 IntentPatch, solve, solves=True),
        ]
        if recommend:
            tools.append(Tool("recommend", Recommend.__doc__ or "", Recommend, choose))
        return tools
