"""How a plan is shown: plan.yaml (the contract), report.md (for reviewers) and the terminal summary."""

from __future__ import annotations

import io
from collections import Counter
from typing import Any

from rich.console import Console
from rich.table import Table
from ruamel.yaml import YAML

from infra.perf.shape import Parallel
from infra.planner.candidates import Considered, pd_label
from infra.planner.types import Allocation, DeploymentPlan, Layout, PipelinePlan, PlanSpec, PoolUse


def dump_yaml(data: Any) -> str:
    """YAML of plain data as infra writes its files: block style, keys in the data's order, lines unwrapped."""
    yaml = YAML(typ="safe", pure=True)
    yaml.default_flow_style = False
    yaml.sort_base_mapping_type_on_output = False
    yaml.width = 4096
    buf = io.StringIO()
    yaml.dump(data, buf)
    return buf.getvalue()


def plan_yaml(plan: DeploymentPlan) -> str:
    """plan.yaml's text."""
    return dump_yaml(plan.document())


def _words(par: Layout) -> str:
    return (f"tp{par.tp}" + (f" pp{par.pp}" if par.pp > 1 else "") + (f" ep{par.ep}" if par.ep > 1 else "")
            + (f" dp{par.attention_dp}" if par.attention_dp > 1 else "") + (f" sp{par.sp}" if par.sp > 1 else ""))


def _layout(a: Allocation) -> str:
    layout = _words(a.parallel)
    p = a.prefill_workers or 1
    prefill = f"{p} prefill worker{'s' if p > 1 else ''}"
    if a.decode_pool and a.decode_parallel is not None:
        return (f"{prefill} of {layout} + {a.decode_workers} decode workers of "
                f"{_words(a.decode_parallel)} on {a.decode_device} in pool {a.decode_pool}")
    if a.decode_parallel is not None:
        return f"{prefill} of {layout} + {a.decode_workers} decode workers of {_words(a.decode_parallel)}"
    if a.mode == "disagg":
        return f"{p} prefill + {a.decode_workers} decode workers of {layout}"
    if a.share is not None:
        return f"{layout} on {a.share:g} of a device"
    return layout


def _alloc_line(a: Allocation) -> str:
    where = (", ".join(f"{n} x{k}" for n, k in a.placement.items()) if a.placement
             else f"{a.nodes_used} node{'s' if a.nodes_used != 1 else ''}")
    return (f"{a.replicas} x {a.device} ({_layout(a)}, {a.framework}, {a.precision}) in pool "
            f"{a.pool} ({where}): {a.devices:g} device{'s' if a.devices != 1 else ''}, ${a.cost_per_hour:.2f}/h")


def rationale(plan: DeploymentPlan) -> str:
    spec = plan.spec
    parts = []
    for svc in spec.services:
        allocs = "; ".join(_alloc_line(a) for a in svc.allocations)
        margins = [f"{k} {v.predicted_ms:g}ms of {v.target_ms:g}ms" for a in svc.allocations[:1]
                   for k, v in a.predicted.items()]
        share = "" if svc.served >= 1 else f" (serving {svc.served:.0%} of it within the objectives)"
        if svc.confidence is not None:
            share += (f", planned for its objectives to hold with {svc.confidence:.0%} confidence against the "
                      "performance model's error band")
        parts.append(f"Service {svc.name} ({svc.model}) needs {svc.demand.value:g} {svc.demand.unit}"
                     f"{share}; the cheapest way found is {allocs}, with {svc.headroom:.0%} headroom"
                     + (f" and predicted {', '.join(margins)}" if margins else "") + ".")
    if spec.alternatives:
        best = min(spec.alternatives, key=lambda a: a.delta_per_hour)
        parts.append(f"The next best of another kind ({best.label}) costs ${best.delta_per_hour:+.2f}/h more.")
    if spec.binding:
        parts.append("Binding: " + "; ".join(spec.binding) + ".")
    return " ".join(parts)


def _parallel(layout: Layout) -> Parallel:
    return Parallel(**layout.model_dump())


def _shape(a: Allocation) -> str:
    """The layout label the candidates table uses for an allocation."""
    label = _parallel(a.parallel).label()
    if a.share:
        return f"{label}@{a.share:g}"
    if a.mode == "disagg":
        decode = _parallel(a.decode_parallel) if a.decode_parallel is not None else None
        return pd_label(a.prefill_workers or 1, _parallel(a.parallel), a.decode_workers or 1, decode, a.decode_pool)
    return label


def _considered_table(considered: list[Considered], chosen: set[tuple[str, str, str, str, str]]) -> list[str]:
    lines = ["## Candidates considered", "", "| service | pool | framework | precision | layout | outcome |",
             "|---|---|---|---|---|---|"]
    for c in considered:
        key = (c.service, c.pool, c.framework, c.precision, c.parallel)
        mark = " (chosen)" if c.outcome == "candidate" and key in chosen else ""
        lines.append(f"| {c.service} | {c.pool} | {c.framework} | {c.precision} | {c.parallel} | "
                     f"{c.outcome}{mark} |")
    return lines


def infeasible_markdown(name: str, problems: list[Any], considered: list[Considered],
                        stale: str | None = None) -> str:
    """The report of an intent with no plan; `stale` names what an earlier run left next to it (kept, never
    deleted), which must not be mistaken for this intent's answer."""
    lines = [f"# No feasible plan: {name}", ""]
    if stale:
        lines += [f"**Left in this directory by an earlier run, not an answer to this intent (do not apply): "
                  f"{stale}.**", ""]
    lines += ["## Conflict and relaxations", ""]
    lines += [f"- {p}" for p in problems]
    lines += [""] + _considered_table(considered, set())
    return "\n".join(lines) + "\n"


def _pipeline_lines(pipe: PipelinePlan) -> list[str]:
    """A pipeline end to end: its stages in order with what feeds each and their budgets, and its objectives
    summed along it (along the slowest path where branches join)."""
    lines = [f"## Pipeline {pipe.service}", "",
             f"${pipe.cost_per_hour:.2f}/h" + (f", ${pipe.cost_per_request:.4f} per request"
                                               if pipe.cost_per_request is not None else "") + ".", "",
             "| stage | kind | input from | planned as | hands on | hand-off | budget |",
             "|---|---|---|---|---|---|---|"]
    for i, st in enumerate(pipe.stages):
        after = st.after
        inputs = ", ".join(after) if after else "the request" if after is not None or i == 0 else \
            pipe.stages[i - 1].name
        planned = f"{st.cpu_cores} CPU cores" if st.cpu_cores else st.unit or ""
        if st.pool:
            planned += f" on {st.nodes} node{'s' if st.nodes != 1 else ''} of {st.pool}" + (
                f" (${st.cost_per_hour:.2f}/h)" if st.cost_per_hour is not None else "")
        h = st.handoff
        hand = (f"{h.link} link, {h.bandwidth_gbs:g} GB/s: first {h.first_ms:g} ms, all {h.total_ms:g} ms"
                + (f"; co-located with {st.colocated_with}" if st.colocated_with else "")) if h else ""
        budget = ", ".join(f"{k} {v:g} ms" for k, v in st.budget_ms.items())
        lines.append(f"| {st.name} | {st.kind} | {inputs} | {planned} | "
                     f"{'as produced' if st.streams else 'when done'} | {hand} | {budget} |")
    lines += ["", "| objective | target | predicted along the pipeline | margin |", "|---|---|---|---|"]
    for k, v in pipe.objectives.items():
        lines.append(f"| {k} | {v.target_ms:g} ms | {v.predicted_ms:g} ms | {v.margin:.0%} |")
    if pipe.notes:
        lines += ["", "Hand-offs and placement:", ""] + [f"- {n}" for n in pipe.notes]
    return lines + [""]


def _pools_lines(pools: list[PoolUse]) -> list[str]:
    """Devices the plan takes per pool: how many, how much of them slices leave empty, and how busy the demand
    keeps them at peak."""
    if not pools:
        return []
    lines = ["## Devices used", "", "| pool | device | devices | nodes | allocated | idle | busy at peak |",
             "|---|---|---:|---:|---:|---:|---:|"]
    for p in pools:
        busy = f"{p.busy_at_peak:.0%}" if p.busy_at_peak is not None else "-"
        lines.append(f"| {p.pool} | {p.device} | {p.devices} | {p.nodes} | {p.allocated:g} | "
                     f"{p.idle_fraction:.0%} | {busy} |")
    partly = [(p.pool, d) for p in pools for d in p.partly_idle]
    if partly:
        lines += ["", "Devices slices leave partly empty: " + ", ".join(
            f"{pool} {d.node} device {d.device} ({d.idle_fraction:.0%} idle)" for pool, d in partly)]
    return lines + ["", "Idle is the share of the devices used that no replica holds; busy at peak is the peak "
                    "load over the capacity the replicas on those devices carry within the objectives.", ""]


def _measured(spec: PlanSpec) -> bool:
    """Whether the plan was made with a user's calibration (then every allocation says what its figures rest on)."""
    return spec.provenance.calibration.measured is not None


_PRIOR_ALONE = "the packaged prior alone: no measurement of yours matches"


def plan_markdown(plan: DeploymentPlan, considered: list[Considered]) -> str:
    spec = plan.spec
    lines = [f"# Deployment plan: {plan.metadata.name}", "",
             f"Total **${spec.cost.per_hour:.2f}/h**; solver {spec.solver.status} "
             f"(gap {spec.solver.gap:g}) over {spec.solver.candidates} candidates of "
             f"{spec.solver.considered} shapes considered. Input fingerprint `{spec.fingerprint}`.", "",
             rationale(plan), ""]
    for svc in spec.services:
        lines += [f"## {svc.name}", "",
                  "| allocation | objective | target | predicted | margin | held on unseen models |",
                  "|---|---|---|---|---|---|"]
        for a in svc.allocations:
            for k, v in a.predicted.items():
                held = "—" if v.held_out is None else f"{v.held_out:.0%}"
                lines.append(f"| {_alloc_line(a)} | {k} | {v.target_ms:g} ms | {v.predicted_ms:g} ms | "
                             f"{v.margin:.0%} | {held} |")
            if not a.calibrated:
                lines.append(f"| ^ not calibrated on this device ({a.calibration_source}) | | | | | |")
            if _measured(spec):
                lines.append(f"| ^ {a.measured or _PRIOR_ALONE} | | | | | |")
        lines.append("")
    if any(v.held_out is not None for svc in spec.services for a in svc.allocations for v in a.predicted.values()):
        lines += ["*Held on unseen models*: the share of measurements of models left out of the calibration fit that "
                  "came in within this margin of their prediction."
                  + (" Where your calibration matched the model or the deployment, the share of the calibration "
                     "set's measurements within that margin after calibrating on one load of the same deployment "
                     "(or one sweep of the same model)." if _measured(spec) else ""), ""]
    for pipe in spec.pipelines:
        lines += _pipeline_lines(pipe)
    lines += _pools_lines(spec.pools_used)
    if spec.alternatives:
        lines += ["## Alternatives", "", "| alternative | $/h | delta | uses |", "|---|---|---|---|"]
        for alt in spec.alternatives:
            lines.append(f"| {alt.label} | {alt.cost_per_hour:.2f} | {alt.delta_per_hour:+.2f} | "
                         f"{'; '.join(alt.uses)} |")
        lines.append("")
    chosen = {(s.name, a.pool, a.framework, a.precision, _shape(a)) for s in spec.services for a in s.allocations}
    lines += _considered_table(considered, chosen)
    lines += ["", "## Assumptions", ""] + [f"- {a}" for a in spec.assumptions]
    return "\n".join(lines) + "\n"


def print_plan(console: Console, plan: DeploymentPlan, considered: list[Considered], written: list[Any]) -> None:
    spec = plan.spec
    t = Table(title=f"plan {plan.metadata.name}: ${spec.cost.per_hour:.2f}/h ({spec.solver.status})",
              title_justify="left")
    for col in ("service", "replicas", "device, layout", "engine", "$/h", "predicted / target"):
        t.add_column(col, justify="right" if col in ("replicas", "$/h") else "left")
    for svc in spec.services:
        for a in svc.allocations:
            # One objective a line keeps the table within an ordinary terminal however many objectives there are.
            obj = "\n".join(f"{k} {v.predicted_ms:g}/{v.target_ms:g}ms" for k, v in a.predicted.items())
            # The pool tells apart allocations of one service that differ only in where they run (zones).
            t.add_row(svc.name, str(a.replicas), f"{a.device} {_layout(a)}\npool {a.pool}",
                      f"{a.framework} {a.precision}", f"{a.cost_per_hour:.2f}", obj)
    console.print(t)
    counts = Counter(c.outcome if c.outcome == "candidate" else "dropped" for c in considered)
    console.print(f"{counts['candidate']} candidates scored, {counts['dropped']} shapes dropped "
                  "(see report.md for each and why)")
    console.print(rationale(plan))
    if _measured(spec):
        for svc in spec.services:
            for a in svc.allocations:
                console.print(f"{svc.name} on {a.device}: {a.measured or _PRIOR_ALONE}")
    for path in written:
        console.print(f"wrote {path}")
