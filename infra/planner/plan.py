"""From an intent to a DeploymentPlan: the search for every service's shapes (`infra.planner.pipeline`), the
CP-SAT solve, re-sizing until every chosen replica holds behind its rendered router, and the plan document
(`infra.planner.assemble`: predictions at the planned load, binding constraints, alternatives); for an infeasible
intent, the conflict and the cheapest relaxations (`infra.planner.explain`), each solved for real.

The plan is plain data (dicts of str/int/float/list) so that it serialises to the same bytes for the same inputs.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from collections.abc import Callable
from typing import Any

from infra.errors import InfeasibleError, InfraError, Location, Problem
from infra.intent.resolve import ResolvedIntent, ResolvedService
from infra.perf.calibration import table as calibration_table
from infra.perf.estimate import Estimate, estimate, max_rate, meets
from infra.perf.handoff import ASSUMPTIONS as HANDOFF_ASSUMPTIONS
from infra.perf.heap import collector_paused
from infra.planner.assemble import (
    allocations,
    alternatives_of,
    binding_constraints,
    catalog_of,
    cluster_section,
    node_placements,
    pipeline_sections,
    placed_nodes,
    pool_busy,
    rounded,
    service_loads,
)
from infra.planner.candidates import (
    Candidate,
    Considered,
    Corrections,
    correction_for,
    held_objectives,
    service_workload,
)
from infra.planner.colocate import Bundle, member_nodes, unbundle
from infra.planner.explain import core_problems, relaxations
from infra.planner.pipeline import (
    CpuPlacement,
    Unit,
    place_cpu,
    solved_units,
)
from infra.planner.search import search
from infra.planner.solve import Limits, Solution, limits_from, minimal_conflict, solve
from infra.planner.types import DeploymentPlan

PLAN_VERSION = "infra.dev/v1alpha1"


def fingerprint(resolved: ResolvedIntent) -> str:
    """The plan's `spec.fingerprint` for a resolved intent: sha256 over the intent, its cluster, the catalog and
    the calibration data. A plan whose fingerprint differs was made from other inputs."""
    blob = json.dumps({
        "intent": resolved.loaded.intent.model_dump(mode="json", by_alias=True, exclude=None if
                                                    resolved.loaded.intent.spec.cluster.cpu_pools
                                                    else {"spec": {"cluster": {"cpu_pools"}}}),
        # A profile without CPU pools keeps the fingerprint it had before profiles could declare them.
        # The calibration is fingerprinted by its content (`measured`), not its path.
        "cluster": resolved.loaded.cluster.model_dump(mode="json", by_alias=True,
                                                      exclude={"calibration"} if resolved.loaded.cluster.cpu_pools
                                                      else {"cpu_pools", "calibration"}),
        "catalog": catalog_of(resolved).fingerprint(),
        "calibration": calibration_table().get("data_sha256", ""),
        # Without a user's calibration the fingerprint stays what it was before plans could take one.
        **({"measured": resolved.calibration.sha256} if resolved.calibration is not None else {}),
    }, sort_keys=True)
    return "sha256:" + hashlib.sha256(blob.encode()).hexdigest()


def _measured(resolved: ResolvedIntent) -> dict[str, Any]:
    """The user's calibration behind a plan, for its provenance (nothing when it rests on the prior alone)."""
    cal = resolved.calibration
    if cal is None:
        return {}
    return {"measured": {"name": cal.doc.metadata.name, "path": cal.path, "sha256": cal.sha256,
                         "points": len(cal.doc.points)}}


def _tokens_per_request(resolved: ResolvedIntent) -> dict[str, float]:
    base = resolved.loaded.document.path.parent
    out = {}
    for rs in resolved.services:
        wl = service_workload(rs.service, base)
        out[rs.service.name] = wl.isl + wl.osl
    return out


MAX_RESIZES = 8
"""Rounds of lowering the capacity of replicas whose predictions miss at the load the rendered router gives them
(each round only lowers capacities or drops shapes, so the rounds end; a plan still missing then is refused)."""


def _routed(resolved: ResolvedIntent, services: list[ResolvedService], cands: list[Candidate],
            sol: Solution) -> dict[str, Candidate]:
    """Shapes to change before the plan holds behind the router its manifests render: chosen replicas whose
    predictions miss an objective at the load that router gives them, each with the capacity it has there. A
    replica's capacity is searched behind the rendered router as if the service ran that shape alone
    (`candidates._search`), and the solve keeps an even split's shapes to those that hold its share and P/D units
    apart from aggregated replicas where only the endpoint picker feeds both (`solve`); what is left to check is
    what depends on the replica counts: a gateway that splits at random by weight thins a bursty stream only part
    way, and the clients of a closed loop land on pods at random."""
    catalog = catalog_of(resolved)
    out: dict[str, Candidate] = {}
    chosen: dict[str, list[Candidate]] = {}
    for c in cands:
        if c.key in sol.replicas and isinstance(c.estimate, Estimate) and c.decode_pool is None:
            chosen.setdefault(c.service, []).append(c)
    for rs in services:
        if rs.model is None:
            continue
        mine = chosen.get(rs.service.name, [])
        if not mine or not sum(c.capacity * sol.replicas[c.key] for c in mine):
            continue
        loads = service_loads(resolved, rs, mine, sol)
        slo = held_objectives(rs.service)
        for c in mine:
            assert isinstance(c.estimate, Estimate)
            wl, dep = loads[c.key], c.estimate.deployment
            measured = correction_for(resolved, dep, wl)
            est = estimate(dep, wl, catalog, device_memory_gb=c.memory_gb, device_spec=c.device_spec,
                           correction=measured)
            if meets(est.prediction, slo):
                continue
            if wl.rate is not None:
                cap, at = max_rate(dep, wl, slo, catalog, device_memory_gb=c.memory_gb, device_spec=c.device_spec,
                                   correction=measured)
            else:
                # The busiest pod holds more clients than the replica's share: it is worth that much less.
                assert wl.concurrency is not None
                cap, at = (c.capacity * c.capacity / wl.concurrency if wl.concurrency > c.capacity
                           else c.capacity - 1), est
            if cap < c.capacity:
                out[c.key] = dataclasses.replace(c, capacity=cap, estimate=at)
    return out


def _hold_routing(resolved: ResolvedIntent, services: list[ResolvedService], cands: list[Candidate],
                  limits: Limits, sol: Solution, objective: str, strict: bool = True) -> tuple[list[Candidate],
                                                                                           Solution]:
    """The candidates and solution once every chosen replica holds its objectives behind the rendered router
    (`_routed`, solved again after each change); `strict` refuses a plan still missing after `MAX_RESIZES`."""
    for round_ in range(MAX_RESIZES + 1):
        resized = _routed(resolved, services, cands, sol) if sol.status in ("OPTIMAL", "FEASIBLE") else {}
        if not resized:
            break
        if round_ == MAX_RESIZES:
            if not strict:
                break
            raise InfraError(Problem(
                "the chosen replicas still miss their objectives at the load the rendered router gives them after "
                f"{MAX_RESIZES} rounds of re-sizing ({', '.join(sorted(resized))})",
                Location(str(resolved.loaded.document.path), 1, 1),
                "install the Gateway API Inference Extension (load-aware routing) and list it in the profile's "
                "conventions.crds, or report this plan"))
        cands = [c2 for c in cands if (c2 := resized.get(c.key, c)).capacity > 0]
        sol = solve(cands, limits, objective=objective)
    return cands, sol


def _less_cpu(limits: Limits, cpu: dict[str, CpuPlacement], pipelines: dict[str, list[Unit]]) -> Limits:
    """Budgets left for the solved units once the CPU stages' nodes are paid for."""
    spent = {s: sum(cpu[u.name].cost_per_hour for u in us if u.name in cpu) for s, us in pipelines.items()}
    if not any(spent.values()):
        return limits
    budget = {s: (v - spent.get(s, 0.0) if v is not None else None) for s, v in limits.budget_hour.items()}
    total = (limits.total_budget_hour - sum(spent.values()) if limits.total_budget_hour is not None else None)
    return dataclasses.replace(limits, budget_hour=budget, total_budget_hour=total,
                               fixed={s: v for s, v in sorted(spent.items()) if v})


def build_plan(resolved: ResolvedIntent, *, top: int = 3, objective: str = "cost",
               progress: Callable[[int, int], None] | None = None, corrections: Corrections | None = None,
               explain: bool = True) -> tuple[DeploymentPlan, list[Considered]]:
    """Solve the intent: the DeploymentPlan, and every shape considered. Raises InfeasibleError.
    `objective` is "cost" (cheapest plan meeting all demand) or "goodput" (serve the most of it with what there
    is, then cheapest). `corrections` tighten objectives in scoring (from verifying an earlier plan); without
    `explain` an infeasible intent is reported without searching for relaxations."""
    # The solves and the plan's assembly make many objects in no cycle too, beside a heap the scoring filled.
    with collector_paused():
        return _build_plan(resolved, top, objective, progress, corrections, explain)


def _build_plan(resolved: ResolvedIntent, top: int, objective: str, progress: Callable[[int, int], None] | None,
                corrections: Corrections | None, explain: bool) -> tuple[DeploymentPlan, list[Considered]]:
    cands, considered, expanded, pipelines = search(resolved, progress=progress, corrections=corrections)
    limits = limits_from(resolved, _tokens_per_request(resolved),
                         {s: solved_units(us) for s, us in pipelines.items()})
    cpu = place_cpu(resolved, pipelines)
    limits = _less_cpu(limits, cpu, pipelines)
    sol = solve(cands, limits, objective=objective)
    if sol.status in ("OPTIMAL", "FEASIBLE"):
        cands, sol = _hold_routing(resolved, expanded, cands, limits, sol, objective)
    else:
        # What a budget must allow is what the plan costs once its replicas hold behind their router.
        unbounded = dataclasses.replace(limits, budget_hour={k: None for k in limits.budget_hour},
                                        total_budget_hour=None)
        free = solve(cands, unbounded, objective=objective)
        if free.status in ("OPTIMAL", "FEASIBLE"):
            cands, _ = _hold_routing(resolved, expanded, cands, unbounded, free, objective, strict=False)
            sol = solve(cands, limits, objective=objective)
    if sol.status not in ("OPTIMAL", "FEASIBLE") and not explain:
        raise InfeasibleError(Problem("no deployment meets the corrected objectives",
                                      Location(str(resolved.loaded.document.path), 1, 1),
                                      "loosen the objectives, raise the budget or add devices"))
    if sol.status not in ("OPTIMAL", "FEASIBLE"):
        core = sol.core or [f"demand:{s}" for s in sorted(limits.demand)]
        no_cands = [s for s in sorted(limits.demand) if not any(c.service == s for c in cands)]
        core = sorted(set(minimal_conflict(cands, limits, core)) | {f"demand:{s}" for s in no_cands})
        # A service with no usable shape at all is the whole story for that service.
        core = [k for k in core if k.partition(":")[2] not in no_cands or k.startswith("demand:")]
        relax = relaxations(resolved, cands, limits, core, considered)
        conflict = core_problems(resolved, core, relax, cands, considered, limits) or [
            Problem("no deployment satisfies the intent", Location(str(resolved.loaded.document.path), 1, 1),
                    "loosen the objectives, raise the budget or add devices")]
        error = InfeasibleError(conflict + relax)
        error.considered = considered  # type: ignore[attr-defined]
        raise error
    placements = node_placements({p.name: p for p in resolved.loaded.cluster.pools}, cands, sol)
    allocated = sol.devices_by_pool(cands)
    chosen = [c for c in cands if isinstance(c, Bundle) and c.key in sol.replicas]
    stage_sol, stage_cands = unbundle(sol, cands)
    placed = member_nodes(placed_nodes(placements), cands, sol)
    services = allocations(resolved, stage_cands, stage_sol, limits, placed, expanded, pipelines)
    cpu_cost = {p.pool.name: 0.0 for p in cpu.values() if p.pool is not None}
    for p in cpu.values():
        if p.pool is not None:
            cpu_cost[p.pool.name] += p.cost_per_hour
    plan = {
        "apiVersion": PLAN_VERSION,
        "kind": "DeploymentPlan",
        "metadata": {"name": resolved.loaded.intent.metadata.name},
        "spec": {
            "fingerprint": fingerprint(resolved),
            "solver": {"engine": "cp-sat", "objective": objective, "status": sol.status, "gap": rounded(sol.gap, 4),
                       "candidates": len(cands), "considered": len(considered)},
            "cluster": cluster_section(resolved),
            "cost": {"per_hour": rounded(sol.cost_per_hour + sum(cpu_cost.values()), 6),
                     "by_pool": {p: rounded(v, 6) for p, v in sorted({**stage_sol.cost_by_pool(stage_cands),
                                                                 **cpu_cost}.items())}},
            "services": services,
            **({"pipelines": pipeline_sections(resolved, pipelines, services, chosen, cpu)} if pipelines else {}),
            "pools_used": [{
                "pool": name, "device": resolved.pools[name].name, "devices": pl.devices_used,
                "nodes": len({n for nodes in pl.nodes.values() for n in nodes}),
                "allocated": rounded(allocated[name], 6),
                "idle_fraction": rounded(pl.quarters_idle / (4 * pl.devices_used), 4) if pl.devices_used else 0.0,
                **({"partly_idle": [{"node": n, "device": d, "idle_fraction": q / 4} for n, d, q in pl.partly_idle]}
                   if pl.partly_idle else {}),
                **pool_busy(services, name),
            } for name, pl in sorted(placements.items())],
            "binding": binding_constraints(resolved, cands, sol, limits),
            "alternatives": alternatives_of(cands, sol, limits, top),
            "assumptions": [
                "disaggregated units pair one prefill worker with 1, 2 or 4 decode workers of the same layout "
                "on one pool",
                "capacity per replica is the largest load whose predicted percentiles meet every objective",
                "a device slice (fractional sharing) gets that share of the device's memory, compute and "
                "bandwidth",
                *([HANDOFF_ASSUMPTIONS] if any(u.network for us in pipelines.values() for u in us) else []),
                *(["a CPU stage without a CPU pool requests its cores on any node and is not priced"]
                  if any(p.pool is None for p in cpu.values()) else []),
            ],
            "provenance": {"intent": str(resolved.loaded.document.path), "catalog": catalog_of(resolved).fingerprint(),
                           "calibration": {"fitted": calibration_table().get("fitted"),
                                           "data_sha256": calibration_table().get("data_sha256"),
                                           **_measured(resolved)}},
        },
    }
    # The contract is checked before anything is written: a plan that does not fit DeploymentPlan is a bug here.
    return DeploymentPlan.model_validate(plan), considered
