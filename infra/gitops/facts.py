"""What a reviewer compares between two plans: cost, replicas per role, devices, and SLO margins.

Facts are read from the plan as written (`DeploymentPlan`); deltas are differences of those figures, never new
predictions.
"""

from __future__ import annotations

from dataclasses import dataclass

from infra.planner.types import Allocation, DeploymentPlan


def roles(a: Allocation) -> dict[str, int]:
    """Workers per role of an allocation: `agg` replicas, or prefill and decode workers of its P/D units."""
    if a.mode == "disagg":
        return {"prefill": a.replicas * (a.prefill_workers or 1), "decode": a.replicas * (a.decode_workers or 1)}
    return {"agg": a.replicas}


@dataclass(frozen=True)
class ServiceFacts:
    """One service's figures, summed over its allocations."""

    cost_per_hour: float
    workers: dict[tuple[str, str], int]
    """(device, role) -> workers."""
    devices: dict[str, float]
    """Device -> devices (fractions for slices)."""
    margins: dict[str, float]
    """Objective -> the smallest margin over the service's allocations (the one closest to its target)."""


def service_facts(plan: DeploymentPlan) -> dict[str, ServiceFacts]:
    out = {}
    for svc in plan.spec.services:
        workers: dict[tuple[str, str], int] = {}
        devices: dict[str, float] = {}
        margins: dict[str, float] = {}
        for a in svc.allocations:
            for role, n in roles(a).items():
                dev = a.role_device(role)
                workers[(dev, role)] = workers.get((dev, role), 0) + n
            for dev, count in a.devices_by_type().items():
                devices[dev] = devices.get(dev, 0.0) + count
            for key, obj in a.predicted.items():
                margins[key] = min(margins.get(key, obj.margin), obj.margin)
        out[svc.name] = ServiceFacts(svc.cost_per_hour, workers, devices, margins)
    return out


@dataclass(frozen=True)
class Change:
    """One figure before and after (None where the plan does not have it)."""

    service: str
    what: str
    before: float | None
    after: float | None

    @property
    def delta(self) -> float:
        return (self.after or 0.0) - (self.before or 0.0)


@dataclass(frozen=True)
class PlanDelta:
    cost_before: float
    cost_after: float
    workers: list[Change]
    devices: list[Change]
    margins: list[Change]
    """Only figures that differ are listed."""


def plan_delta(before: DeploymentPlan, after: DeploymentPlan) -> PlanDelta:
    """The changes from the plan on the base branch to the new one."""
    old, new = service_facts(before), service_facts(after)
    workers, devices, margins = [], [], []
    for name in sorted(set(old) | set(new)):
        o, n = old.get(name), new.get(name)
        for key in sorted(set(o.workers if o else {}) | set(n.workers if n else {})):
            b, a = (o.workers.get(key) if o else None), (n.workers.get(key) if n else None)
            if b != a:
                workers.append(Change(name, f"{key[0]} {key[1]}", b, a))
        for dev in sorted(set(o.devices if o else {}) | set(n.devices if n else {})):
            b, a = (o.devices.get(dev) if o else None), (n.devices.get(dev) if n else None)
            if b != a:
                devices.append(Change(name, dev, b, a))
        for key in sorted(set(o.margins if o else {}) | set(n.margins if n else {})):
            b, a = (o.margins.get(key) if o else None), (n.margins.get(key) if n else None)
            if b != a:
                margins.append(Change(name, key, b, a))
    return PlanDelta(before.spec.cost.per_hour, after.spec.cost.per_hour, workers, devices, margins)
