"""The pull request a reviewer judges in a minute: title, commit message and markdown body, all from plan facts.

Same inputs, same bytes: nothing here reads a clock, an environment variable or a path that is not given.
"""

from __future__ import annotations

import difflib
import json
from dataclasses import dataclass

from infra.gitops.facts import PlanDelta, plan_delta, roles
from infra.planner.types import Allocation, DeploymentPlan

INTENT_DIFF_LINES = 200
"""Longest intent diff shown inline; the rest is in the commit."""
FILE_ROWS = 150
"""Most files listed one by one (GitHub caps a body at 65536 characters); the totals always count them all."""
_METRIC = {"ttft": "TTFT", "tpot": "TPOT", "itl": "ITL", "e2e": "E2E"}


@dataclass(frozen=True)
class Record:
    """A text file kept next to the plan (intent, cluster profile), before and after."""

    name: str
    before: str | None
    after: str


def _money(x: float) -> str:
    return f"${x:,.2f}/h"


def _signed_money(x: float) -> str:
    return f"{'+' if x >= 0 else '-'}${abs(x):,.2f}/h"


def _num(x: float | None) -> str:
    return "—" if x is None else f"{x:g}"


def _pct(x: float | None) -> str:
    return "—" if x is None else f"{x * 100:.0f}%"


def _objective_label(key: str) -> str:
    metric, _, pct = key.rpartition("_")
    return f"{_METRIC.get(metric, metric.upper())} {pct}" if metric else key


def _devices(a: Allocation) -> str:
    per = f"{a.share:g} of a" if a.share else f"{a.devices_per_worker} x"
    if a.decode_parallel is not None:
        decode = a.role_view("decode", 1).devices_per_worker
        if not a.decode_pool:
            return (f"prefill {per} {a.device}, decode {decode} x {a.device} per worker ({a.devices:g} in all, "
                    f"pool {a.pool})")
        by = a.devices_by_type()
        return (f"prefill {per} {a.device} per worker ({by[a.device]:g} in all, pool {a.pool}); decode "
                f"{decode} x {a.decode_device} per worker ({by[a.decode_device or a.device]:g} in all, pool "
                f"{a.decode_pool})")
    return f"{per} {a.device} per worker ({a.devices:g} in all, pool {a.pool})"


def _workers(a: Allocation) -> str:
    return ", ".join(f"{n} {role}" for role, n in roles(a).items())


def summary_line(plan: DeploymentPlan) -> str:
    """`2 x RTX-4090, $0.58/h`: devices by type and the hourly cost."""
    devices: dict[str, float] = {}
    for svc in plan.spec.services:
        for a in svc.allocations:
            for dev, n in a.devices_by_type().items():
                devices[dev] = devices.get(dev, 0.0) + n
    used = " + ".join(f"{n:g} x {d}" for d, n in sorted(devices.items()))
    return f"{used}, {_money(plan.spec.cost.per_hour)}"


def title(plan: DeploymentPlan, cluster: str) -> str:
    return f"infra: deploy {plan.metadata.name} on {cluster} ({summary_line(plan)})"


def commit_message(plan: DeploymentPlan, cluster: str, previous: DeploymentPlan | None, command: str) -> str:
    """A conventional commit: `feat` for a first deployment, `chore` for a re-plan, with the cost change."""
    name = plan.metadata.name
    if previous is None:
        head = f"feat({name}): deploy on {cluster}: {summary_line(plan)}"
    else:
        head = (f"chore({name}): re-plan on {cluster}: {summary_line(plan)} "
                f"(was {_money(previous.spec.cost.per_hour)})")
    return (f"{head}\n\nReproduce: {command}\n\nPlan-Fingerprint: {plan.spec.fingerprint}\n"
            f"Catalog: {plan.spec.provenance.catalog}\n")


def _fence(text: str, lang: str) -> list[str]:
    longest, run = 0, 0
    for ch in text:
        run = run + 1 if ch == "`" else 0
        longest = max(longest, run)
    fence = "`" * max(3, longest + 1)
    return [f"{fence}{lang}", text.rstrip("\n"), fence]


def _summary(plan: DeploymentPlan) -> list[str]:
    keys = sorted({k for s in plan.spec.services for a in s.allocations for k in a.predicted})
    head = ["Service", "Model", "Devices", "Engine", "Replicas", "$/h"] + [
        f"{_objective_label(k)} (margin)" for k in keys]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for svc in plan.spec.services:
        for a in svc.allocations:
            cells = [svc.name, svc.model_id or svc.model or "—", _devices(a),
                     f"{a.framework} {a.precision} {a.mode} tp{a.parallel.tp}"
                     + (f" pp{a.parallel.pp}" if a.parallel.pp > 1 else "")
                     + (f" ep{a.parallel.ep}" if a.parallel.ep > 1 else ""),
                     _workers(a), f"{a.cost_per_hour:,.2f}"]
            for k in keys:
                o = a.predicted.get(k)
                cells.append("—" if o is None else f"{o.predicted_ms:g} of {o.target_ms:g} ms ({_pct(o.margin)})")
            lines.append("| " + " | ".join(cells) + " |")
    return lines


def _verification(plan: DeploymentPlan) -> str:
    v = plan.spec.verification
    if v is None:
        return "not verified (the plan carries no verification results)"
    return (f"{v.verdict} ({v.method}, {v.requests} requests per service, plan of round {v.plan_round} of "
            f"{len(v.rounds)})")


def _delta_section(delta: PlanDelta, base: str) -> list[str]:
    out = []
    diff = delta.cost_after - delta.cost_before
    rel = f", {diff / delta.cost_before:+.1%}" if delta.cost_before else ""
    out.append(f"- Cost: {_money(delta.cost_before)} → {_money(delta.cost_after)} ({_signed_money(diff)}{rel})")
    if not (delta.workers or delta.devices or delta.margins):
        out.append(f"- Replicas, devices and SLO margins: as on `{base}`")
        return out
    for label, changes, fmt in (("Replicas (workers per device and role)", delta.workers, _num),
                                ("Devices", delta.devices, _num),
                                ("SLO margin (closest allocation)", delta.margins, _pct)):
        if not changes:
            continue
        out += ["", f"{label}:", "", "| Service | What | Before | After | Change |", "|---|---|---|---|---|"]
        for c in changes:
            change = (f"{c.delta * 100:+.0f} pts" if fmt is _pct else f"{c.delta:+g}")
            out.append(f"| {c.service} | {_objective_label(c.what) if fmt is _pct else c.what} | {fmt(c.before)} | "
                       f"{fmt(c.after)} | {change} |")
    return out


def _record_diff(records: list[Record]) -> list[str]:
    out = []
    for r in records:
        if r.before == r.after:
            out.append(f"- `{r.name}`: unchanged")
            continue
        lines = list(difflib.unified_diff((r.before or "").splitlines(), r.after.splitlines(),
                                          f"a/{r.name}" if r.before is not None else "/dev/null", f"b/{r.name}",
                                          lineterm=""))
        shown = lines[:INTENT_DIFF_LINES]
        more = len(lines) - len(shown)
        out.append(f"- `{r.name}`: {'new' if r.before is None else 'changed'}")
        out += ["", *_fence("\n".join(shown), "diff")]
        if more:
            out.append(f"({more} more lines in the commit)")
        out.append("")
    while out and out[-1] == "":
        out.pop()
    return out


def _files(changes: dict[str, tuple[str, int, int]]) -> list[str]:
    if not changes:
        return ["No file changes."]
    names = {"A": "added", "M": "changed", "D": "removed"}
    counts = {k: sum(1 for s, _, _ in changes.values() if s == k) for k in names}
    plus = sum(a for _, a, _ in changes.values())
    minus = sum(r for _, _, r in changes.values())
    out = [", ".join(f"{counts[k]} {v}" for k, v in names.items()) + f" (+{plus} / -{minus} lines)", "",
           "| File | Status | + | - |", "|---|---|---|---|"]
    for path, (status, added, removed) in sorted(changes.items())[:FILE_ROWS]:
        out.append(f"| `{path}` | {names.get(status, status)} | {added} | {removed} |")
    if len(changes) > FILE_ROWS:
        out.append(f"| {len(changes) - FILE_ROWS} more files | | | |")
    return out


def _provenance(plan: DeploymentPlan) -> list[str]:
    spec = plan.spec
    s = spec.solver
    prov = spec.provenance
    out = [(f"- Solver: {s.engine}, objective {s.objective}, status {s.status}, gap {s.gap:g}; "
           f"{s.candidates} candidate shapes, {s.considered} considered"),
           f"- Plan fingerprint: `{spec.fingerprint}`",
           f"- Catalog: `{prov.catalog}`; calibration fitted {prov.calibration.fitted or 'never'}"
           + (f", data sha256 `{prov.calibration.data_sha256}`" if prov.calibration.data_sha256 else ""),
           f"- Intent: `{prov.intent}`"]
    uncalibrated = sorted({f"{a.framework}/{a.device} ({a.calibration_source})" for svc in spec.services
                           for a in svc.allocations if not a.calibrated})
    if uncalibrated:
        out.append("- Not calibrated on this device: " + ", ".join(uncalibrated))
    measured = prov.calibration.measured
    if measured is not None:
        out.append(f"- Your measurements: calibration `{measured.name}` ({measured.points} measured load points, "
                   f"sha256 `{measured.sha256[:12]}`)")
        out += [f"  - {svc.name} on {a.device}: {a.measured}" for svc in spec.services for a in svc.allocations
                if a.measured]
    if spec.binding:
        out.append("- Binding: " + "; ".join(spec.binding))
    # Anything else the plan records about where it came from (e.g. an LLM-proposed change and who accepted it).
    known = {"intent", "catalog", "calibration"}
    for key, value in sorted(prov.model_dump(mode="json").items()):
        if key not in known:
            out.append(f"- {key}: {json.dumps(value, sort_keys=True)}")
    if not any(k not in known for k in prov.model_dump()):
        out.append("- Proposed changes: none recorded (no LLM-proposed change in this plan)")
    return out


def pr_body(plan: DeploymentPlan, *, cluster: str, base: str, previous: DeploymentPlan | None,
            previous_error: str | None, records: list[Record], files: dict[str, tuple[str, int, int]],
            command: str, notes: tuple[str, ...] | list[str] = ()) -> str:
    """The markdown body: summary, change against `base`, intent diff, manifest files (and rendering notes),
    provenance, reproduce."""
    spec = plan.spec
    out = [f"## {plan.metadata.name} on {cluster}: {summary_line(plan)}", ""]
    out += _summary(plan)
    out += ["", f"Total {_money(spec.cost.per_hour)} · verification: {_verification(plan)}"]
    if spec.alternatives:
        best = min(spec.alternatives, key=lambda a: (a.delta_per_hour, a.label))
        out.append(f"Next best of another kind: {best.label} at {_signed_money(best.delta_per_hour)}")
    out += ["", f"### Against the plan on `{base}`", ""]
    if previous_error:
        out.append(f"The plan on `{base}` could not be read ({previous_error}); no comparison.")
    elif previous is None:
        out.append(f"First deployment: `{base}` has no plan for {plan.metadata.name}.")
    else:
        out += _delta_section(plan_delta(previous, plan), base)
    out += ["", "### Intent", ""] + _record_diff(records)
    out += ["", "### Manifests", ""] + _files(files)
    if notes:
        out += ["", "To act on before merging:", ""] + [f"- {n}" for n in notes]
    out += ["", "### Provenance", ""] + _provenance(plan)
    out += ["", "### Reproduce", ""] + _fence(command, "sh")
    out += ["", f"<!-- infra:plan-fingerprint {spec.fingerprint} -->"]
    return "\n".join(line.rstrip() for line in out).rstrip("\n") + "\n"
