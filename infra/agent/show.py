"""Side-by-side views of the baseline plan and the patches tried, for the terminal."""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.table import Table
from rich.text import Text

from infra.agent.patches import Outcome, patch_text
from infra.agent.session import plan_summary
from infra.planner.types import DeploymentPlan


def _column(summary: dict[str, Any] | None, names: list[str], keys: dict[str, list[str]], base_cost: float | None,
            outcome: Outcome | None) -> list[str]:
    if summary is None:
        assert outcome is not None
        return [outcome.status, "no plan (reasons below)"] + [""] * (len(_rows(names, keys)) - 2)
    cells = ["solved" if outcome else "baseline", f"${summary['cost_per_hour']:g}/h"
             + (f" ({summary['cost_per_hour'] - base_cost:+.4g})" if outcome and base_cost is not None else "")]
    by_name = {s["name"]: s for s in summary["services"]}
    for name in names:
        s = by_name.get(name)
        cells.append("\n".join(s["allocations"]) if s else "")
        for key in keys[name]:
            cells.append(s["objectives"].get(key, "") if s else "")
    cells.append("\n".join(summary["binding"]) or "none")
    return cells


def _rows(names: list[str], keys: dict[str, list[str]]) -> list[str]:
    rows = ["status", "cost"]
    for name in names:
        rows.append(f"{name}: runs on")
        rows += [f"{name}: {k} predicted" for k in keys[name]]
    return rows + ["binding"]


def comparison(baseline: DeploymentPlan | None, outcomes: dict[str, Outcome]) -> Table:
    """The baseline and each patch's outcome in columns: cost, layout, predictions, binding constraints."""
    plans = [baseline] if baseline is not None else []
    plans += [o.plan for o in outcomes.values() if o.plan is not None]
    summaries = [plan_summary(p) for p in plans]
    names = sorted({s["name"] for summary in summaries for s in summary["services"]})
    keys = {n: sorted({k for summary in summaries for s in summary["services"] if s["name"] == n
                       for k in s["objectives"]}) for n in names}
    table = Table(title="baseline and proposed changes (each solved by the planner)", title_justify="left",
                  show_lines=True)
    table.add_column("")
    table.add_column("baseline")
    base = plan_summary(baseline) if baseline is not None else None
    base_cost = base["cost_per_hour"] if base else None
    if base is None:
        columns = [["infeasible", "no plan"] + [""] * (len(_rows(names, keys)) - 2)]
    else:
        columns = [_column(base, names, keys, None, None)]
    for pid, outcome in outcomes.items():
        table.add_column(Text(f"{pid}: {patch_text(outcome.patch)}"), overflow="fold")
        summary = plan_summary(outcome.plan) if outcome.plan is not None else None
        columns.append(_column(summary, names, keys, base_cost, outcome))
    for i, label in enumerate(_rows(names, keys)):
        # Cells carry text from the model and the intent: shown as written, never read as markup.
        table.add_row(label, *[Text(col[i]) for col in columns])
    return table


def print_outcome(console: Console, pid: str, outcome: Outcome, baseline: DeploymentPlan | None) -> None:
    console.print(comparison(baseline, {pid: outcome}))
    if outcome.status != "solved":
        for problem in outcome.problems:
            console.print(f"  {problem}", markup=False)
