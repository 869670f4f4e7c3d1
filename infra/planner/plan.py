"""From an intent to a DeploymentPlan: candidates, the CP-SAT solve, predictions at the planned load, binding
constraints, alternatives of another kind, and, for an infeasible intent, the conflict and the cheapest
relaxations, each solved for real.

The plan is plain data (dicts of str/int/float/list) so that it serialises to the same bytes for the same inputs.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
from collections.abc import Callable
from typing import Any

from infra.catalog.loader import Catalog
from infra.errors import InfeasibleError, InfraError, Location, Problem
from infra.intent.models import Service
from infra.intent.profile import Pool
from infra.intent.resolve import ResolvedIntent, ResolvedService, pool_device_memory_gb
from infra.perf.arch import kv_precision_for
from infra.perf.calibration import borrowed_band, calibrated_band, error_band
from infra.perf.calibration import table as calibration_table
from infra.perf.estimate import Estimate, estimate, max_rate, meets, objective_value
from infra.perf.handoff import ASSUMPTIONS as HANDOFF_ASSUMPTIONS
from infra.perf.handoff import Site, Transfer, device_link, network_link, node_link, slowest, transfer
from infra.perf.serving import z_of
from infra.perf.stages import StageEstimate, stage_latency
from infra.planner.candidates import (
    DOMINATED,
    MAX_NUM_SEQS,
    NO_IMAGE,
    Candidate,
    Considered,
    Corrections,
    attainment_objectives,
    correction_for,
    held_objectives,
    millis,
    objectives,
    service_router,
    service_workload,
)
from infra.planner.colocate import Bundle, member_nodes, unbundle
from infra.planner.pipeline import (
    ANY_NODE,
    CpuPlacement,
    Unit,
    paths,
    place_cpu,
    search,
    site,
    solved_units,
    stage_model_key,
)
from infra.planner.placement import Placement, PlacementError, place, workers_of
from infra.planner.routing import replica_loads
from infra.planner.solve import Limits, Solution, limits_from, minimal_conflict, solve
from infra.planner.types import Allocation, DeploymentPlan

PLAN_VERSION = "infra.dev/v1alpha1"
SLO_STEPS = (1.25, 1.5, 2.0, 3.0, 5.0, 10.0, 20.0, 50.0)
"""How far objectives are loosened, in turn, to find the smallest relaxation that makes an intent feasible."""
PREFILL_SEQS = 256
"""Prompts a prefill worker takes in at once at least (the step's token budget may ask more of short prompts)."""


def _r(x: float, nd: int = 4) -> float:
    return float(f"{x:.{nd}g}") if x == x and abs(x) != float("inf") else x


def _catalog(resolved: ResolvedIntent) -> Catalog:
    assert resolved.catalog is not None, "resolve() records the catalog it used"
    return resolved.catalog


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
        "catalog": _catalog(resolved).fingerprint(),
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


def _replica_loads(resolved: ResolvedIntent, rs: ResolvedService, mine: list[Candidate],
                   sol: Solution) -> dict[str, Any]:
    """Candidate key -> the workload one of its replicas meets behind the rendered router."""
    wl = service_workload(rs.service, resolved.loaded.document.path.parent)
    spec = rs.service.workload
    wl = dataclasses.replace(wl, rate=float(spec.rate.peak_rps)) if spec.rate is not None else dataclasses.replace(
        wl, concurrency=int(spec.concurrency or 0))
    return replica_loads(service_router(resolved, rs.service.name, any(c.mode == "agg" for c in mine)), wl,
                         [(c.key, sol.replicas[c.key], c.capacity, c.mode == "agg") for c in mine])


def _routed(resolved: ResolvedIntent, services: list[ResolvedService], cands: list[Candidate],
            sol: Solution) -> dict[str, Candidate]:
    """Shapes to change before the plan holds behind the router its manifests render: chosen replicas whose
    predictions miss an objective at the load that router gives them, each with the capacity it has there. A
    replica's capacity is searched behind the rendered router as if the service ran that shape alone
    (`candidates._search`), and the solve keeps an even split's shapes to those that hold its share and P/D units
    apart from aggregated replicas where only the endpoint picker feeds both (`solve`); what is left to check is
    what depends on the replica counts: a gateway that splits at random by weight thins a bursty stream only part
    way, and the clients of a closed loop land on pods at random."""
    catalog = _catalog(resolved)
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
        loads = _replica_loads(resolved, rs, mine, sol)
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


def _predicted(resolved: ResolvedIntent, rs: ResolvedService, cand: Candidate, wl: Any) -> dict[str, Any]:
    """Metrics of one replica under `wl`, what the rendered router gives it, against the service's objectives."""
    assert isinstance(cand.estimate, Estimate)
    est = estimate(cand.estimate.deployment, wl, _catalog(resolved), device_memory_gb=cand.memory_gb,
                   device_spec=cand.device_spec, correction=correction_for(resolved, cand.estimate.deployment, wl))
    out = {}
    # A user's calibration of this model or deployment brings its own band; borrowed factors add an error the
    # held-out band never saw, which the band of borrowed factors measures (None where the calibration has none:
    # no figure rather than a flattering one).
    level = est.calibration.measured_level
    band = (calibrated_band(est.deployment.mode, level) if level else None) or (
        error_band(est.deployment.mode) if est.calibration.calibrated else
        borrowed_band(est.deployment.mode, est.calibration.vendor_measured))
    for (metric, pct), target in sorted(held_objectives(rs.service).items()):
        got = objective_value(est.prediction, metric, pct)
        out[f"{metric}_{pct}"] = {"target_ms": _r(target * 1000), "predicted_ms": _r(got * 1000),
                                  "margin": _r(1 - got / target, 3)}
        # The band was measured on means; a percentile's error is taken to scale the same way.
        if band is not None and metric in ("ttft", "tpot", "itl") and 0 < got < float("inf"):
            held = band.held("ttft" if metric == "ttft" else "tpot", target / got)
            out[f"{metric}_{pct}"]["held_out"] = round(held, 2)
    return out


def _devices_by_pool(cands: list[Candidate], replicas: dict[str, int]) -> dict[str, float]:
    """Devices the chosen replicas take on each pool (a P/D unit across two pools counts on both)."""
    out: dict[str, float] = {}
    for c in cands:
        for p in c.pools:
            out[p] = out.get(p, 0.0) + c.devices_on(p) * replicas.get(c.key, 0)
    return out


def _cost_by_pool(cands: list[Candidate], replicas: dict[str, int]) -> dict[str, float]:
    out: dict[str, float] = {}
    for c in cands:
        n = replicas.get(c.key, 0)
        if not n:
            continue
        out[c.pool] = out.get(c.pool, 0.0) + c.devices_on(c.pool) * c.price_per_device_hour * n
        if c.decode_pool:
            out[c.decode_pool] = out.get(c.decode_pool, 0.0) + c.devices_on(c.decode_pool) * c.decode_price * n
    return out


def _binding(resolved: ResolvedIntent, cands: list[Candidate], sol: Solution, limits: Limits) -> list[str]:
    out = []
    used = {c.key: c for c in cands if c.key in sol.replicas}
    by_pool = _devices_by_pool(cands, sol.replicas)
    for pool, total in sorted(limits.pool_devices.items()):
        taken = by_pool.get(pool, 0.0)
        if taken and taken >= total:
            out.append(f"inventory: pool {pool} fully used ({taken:g}/{total} devices)")
    for s, cap in sorted(limits.budget_hour.items()):
        if cap is None:
            continue
        cost = sum(c.cost_per_hour * sol.replicas[k] for k, c in used.items() if limits.parent.get(c.service,
                                                                                                  c.service) == s)
        if cost >= 0.97 * cap:
            fixed = limits.fixed.get(s, 0.0)
            out.append(f"budget: service {s} at ${cost + fixed:.2f}/h of ${cap + fixed:.2f}/h")
    if limits.total_budget_hour is not None and sol.cost_per_hour >= 0.97 * limits.total_budget_hour:
        fixed = sum(limits.fixed.values())
        out.append(f"budget: total at ${sol.cost_per_hour + fixed:.2f}/h of ${limits.total_budget_hour + fixed:.2f}/h")
    for s, z in sorted(limits.zones.items()):
        zones = {c.zone for k, c in used.items() if c.service == s}
        if z > 1 and len(zones) == z:
            out.append(f"availability: service {s} spread over exactly its {z} zones ({', '.join(sorted(zones))})")
    for s, n in sorted(limits.min_replicas.items()):
        if n > 1 and sum(sol.replicas[k] for k, c in used.items() if c.service == s) == n:
            out.append(f"availability: service {s} at its minimum of {n} replicas")
    return out


def _placed(placements: dict[str, Placement]) -> dict[str, dict[str, int]]:
    placed: dict[str, dict[str, int]] = {}
    for pl in placements.values():
        for k, v in pl.nodes.items():
            placed[k] = {**placed.get(k, {}), **v}
    return placed


def _allocation(resolved: ResolvedIntent, c: Candidate, n: int, load: float, placed: dict[str, dict[str, int]],
                engines: dict[str, Any], predicted: dict[str, Any]) -> dict[str, Any]:
    pool = next(p for p in resolved.loaded.cluster.pools if p.name == c.pool)
    return {
        "pool": c.pool, "device": c.device, "framework": c.framework, "precision": c.precision,
        "mode": c.mode, "parallel": dataclasses.asdict(c.parallel),
        **({"prefill_workers": c.prefill_workers, "decode_workers": c.decode_workers} if c.decode_workers else {}),
        **({"decode_pool": c.decode_pool, "decode_device": c.decode_device} if c.decode_pool else {}),
        **({"decode_parallel": dataclasses.asdict(c.decode_parallel)} if c.decode_parallel else {}),
        **({"share": c.share} if c.share < 1 else {}),
        "devices_per_worker": c.parallel.devices, "nodes_per_worker": -(-c.parallel.devices // pool.devices_per_node),
        "engines": engines,
        "nodes_used": len(placed[c.key]),
        **({"placement": placed[c.key]} if isinstance(pool.nodes, list) else {}),
        "replicas": n, "devices_per_replica": c.consumption,
        "devices": n * c.consumption, "capacity_per_replica": _r(c.capacity),
        "load_per_replica": _r(load), "cost_per_hour": _r(n * c.cost_per_hour, 6),
        "predicted": predicted,
        "calibrated": c.estimate.calibration.calibrated,
        "calibration_source": c.estimate.calibration.source,
        **({"measured": c.estimate.calibration.measured} if c.estimate.calibration.measured else {}),
    }


def _entry(resolved: ResolvedIntent, rs: ResolvedService, name: str, mine: list[Candidate], sol: Solution,
           limits: Limits, allocs: list[dict[str, Any]], capacity: float, objectives_ms: dict[str, float],
           extra: dict[str, Any]) -> dict[str, Any]:
    """One service (or pipeline stage) of the plan."""
    wl = rs.service.workload
    demand = float(wl.rate.peak_rps if wl.rate is not None else wl.concurrency)
    cost = sum(c.cost_per_hour * sol.replicas[c.key] for c in mine)
    unit = "requests/s" if wl.rate is not None else "clients"
    entry: dict[str, Any] = {
        "name": name, **extra,
        "objectives": objectives_ms,
        "availability": rs.service.availability.model_dump(mode="json", by_alias=True),
        "workload": wl.model_dump(mode="json", by_alias=True, exclude_none=True, exclude_defaults=True),
        "demand": {"value": _r(demand), "unit": unit},
        "required": {"value": _r(limits.demand.get(name, demand * (1 + rs.service.availability.headroom))),
                     "unit": unit},
        "capacity": {"value": _r(capacity), "unit": unit},
        "headroom": _r(capacity / demand - 1 if demand else 0.0, 3),
        "served": _r(min(1.0, capacity / demand) if demand else 1.0, 4), "allocations": allocs,
        "cost_per_hour": _r(cost, 6),
    }
    if wl.rate is not None and demand:
        tok = service_workload(rs.service, resolved.loaded.document.path.parent)
        entry["cost_per_million_tokens"] = _r(cost / (demand * 3600 * (tok.isl + tok.osl)) * 1e6, 4)
        entry["cost_per_request"] = _r(cost / (demand * 3600), 4)
    return entry


def _llm_entry(resolved: ResolvedIntent, rs: ResolvedService, cands: list[Candidate], sol: Solution, limits: Limits,
               placed: dict[str, dict[str, int]], extra: dict[str, Any]) -> dict[str, Any]:
    s = rs.service.name
    mine = sorted((c for c in cands if c.service == s and c.key in sol.replicas), key=lambda c: c.key)
    capacity = sum(c.capacity * sol.replicas[c.key] for c in mine)
    wl = rs.service.workload
    demand = float(wl.rate.peak_rps if wl.rate is not None else wl.concurrency)
    served = min(demand, capacity)
    allocs = []
    loads = _replica_loads(resolved, rs, mine, sol) if capacity else {}
    for c in mine:
        load = served * c.capacity / capacity if capacity else 0.0
        routed = loads.get(c.key)
        if routed is not None:
            load = routed.rate if routed.rate is not None else float(routed.concurrency)
        allocs.append(_allocation(resolved, c, sol.replicas[c.key], load, placed, _engines(resolved, rs, c),
                                  _predicted(resolved, rs, c, routed) if routed is not None else {}))
    assert rs.model is not None
    return _entry(resolved, rs, s, mine, sol, limits, allocs, capacity,
                  {f"{m}_{q}": _r(v * 1000, 6) for (m, q), v in sorted(objectives(rs.service).items())},
                  {"model": rs.model_key, "model_id": rs.model.hf_id, **extra,
                   **({"attainment": rs.service.slo.attainment,
                       "attainment_objectives": {f"{m}_{q}": _r(v * 1000, 6) for (m, q), v in
                                                 sorted(attainment_objectives(rs.service).items())}}
                      if rs.service.slo.attainment is not None else {}),
                   **({"confidence": rs.service.slo.confidence} if rs.service.slo.confidence is not None else {})})


def _stage_entry(resolved: ResolvedIntent, rs: ResolvedService, unit: Unit, cands: list[Candidate], sol: Solution,
                 limits: Limits, placed: dict[str, dict[str, int]]) -> dict[str, Any]:
    """A pipeline stage that is not an LLM: its replicas and its latencies against its budget."""
    assert unit.model is not None
    mine = sorted((c for c in cands if c.service == unit.name and c.key in sol.replicas), key=lambda c: c.key)
    capacity = sum(c.capacity * sol.replicas[c.key] for c in mine)
    wl = rs.service.workload
    demand = float(wl.rate.peak_rps if wl.rate is not None else wl.concurrency)
    served = min(demand, capacity)
    targets = {**{f"first_output_{p}": v for p, v in unit.first.items()},
               **{f"latency_{p}": v for p, v in unit.full.items()}}
    allocs = []
    for c in mine:
        load = served * c.capacity / capacity if capacity else 0.0
        est = c.estimate
        assert isinstance(est, StageEstimate)
        first, full, _ = stage_latency(est.timing, load, _arrival_cv(rs), tuple(sorted(
            set(unit.first) | set(unit.full), key=z_of)) or ("p50",), unit.interleaved)
        predicted = {}
        for key, target in sorted(targets.items()):
            got = (first if key.startswith("first_output") else full)[key.rpartition("_")[2]]
            predicted[key] = {"target_ms": _r(target * 1000), "predicted_ms": _r(got * 1000),
                              "margin": _r(1 - got / target, 3)}
        allocs.append(_allocation(resolved, c, sol.replicas[c.key], load, placed, {}, predicted))
    return _entry(resolved, rs, unit.name, mine, sol, limits, allocs, capacity,
                  {k: _r(v * 1000, 6) for k, v in sorted(targets.items())},
                  {"model": stage_model_key(unit.stage, unit.model, resolved), "model_id": unit.model.hf_id,
                   "pipeline": rs.service.name,
                   "stage": unit.stage.name, "kind": unit.model.kind})


def _arrival_cv(rs: ResolvedService) -> float:
    arrival = rs.service.workload.arrival
    return {"poisson": 1.0, "constant": 0.0, "gamma": arrival.cv or 1.0}[arrival.process]


def _allocations(resolved: ResolvedIntent, cands: list[Candidate], sol: Solution, limits: Limits,
                 placed: dict[str, dict[str, int]], services: list[ResolvedService],
                 pipelines: dict[str, list[Unit]]) -> list[dict[str, Any]]:
    by_name = {rs.service.name: rs for rs in services}
    cands = [c for c in cands if c.key in sol.replicas]  # the chosen shapes: each entry picks its own from them
    out = []
    for rs in resolved.services:
        if rs.service.name not in pipelines:
            out.append(_llm_entry(resolved, rs, cands, sol, limits, placed, {}))
            continue
        for u in pipelines[rs.service.name]:
            if u.stage.kind == "llm":
                out.append(_llm_entry(resolved, by_name[u.name], cands, sol, limits, placed,
                                      {"pipeline": rs.service.name, "stage": u.stage.name, "kind": "llm"}))
            elif u.stage.kind != "cpu":
                out.append(_stage_entry(resolved, rs, u, cands, sol, limits, placed))
    return out


def _reach(units: list[Unit], own: list[tuple[dict[str, float], dict[str, float]]], hops: list[float], k: int,
           p: str, end: int) -> float | None:
    """Arrival to stage k's first (`end` 0) or last (1) output at percentile p: along the slowest path into it,
    the stages before it in turn (their first output when they stream, else their whole latency) and their
    hand-offs, then stage k itself."""
    best: float | None = None
    for path in paths(units, k):
        total = 0.0
        for i in path:
            part = own[i][end if i == k else (0 if units[i].streams else 1)]
            if p not in part:
                return None
            total += part[p] + (hops[i] if i != k else 0.0)
        best = total if best is None else max(best, total)
    return best


def _along(units: list[Unit], own: list[tuple[dict[str, float], dict[str, float]]], hops: list[float], k: int,
           what: str, p: str) -> float | None:
    """Arrival to stage k's first output (`what` "first") or last output ("full"); the last output comes no
    earlier than any stage that feeds it finishes."""
    if what == "first":
        return _reach(units, own, hops, k, p, 0)
    feeding = {i for path in paths(units, k) for i in path}
    ends = [_reach(units, own, hops, j, p, 1) for j in sorted(feeding)]
    return None if any(e is None for e in ends) else max(e for e in ends if e is not None)


def _work(u: Unit) -> dict[str, Any]:
    return u.stage.work.model_dump(mode="json", by_alias=True, exclude_none=True, exclude_defaults=True)


def _handoff(resolved: ResolvedIntent, u: Unit, sites: tuple[list[Site], list[Site]],
             together: list[Bundle]) -> Transfer:
    """The hand-off from stage u to the next as planned: inside the bundles' device or node when the two are
    co-located, else over the slowest network link between the pools their replicas use."""
    net = u.network
    assert net is not None
    if together:
        links = [device_link(resolved.pools[b.pool]) if b.in_one_device else node_link(resolved.pools[b.pool])
                 for b in together]
    else:
        links = [network_link(a, b) for a in sites[0] for b in sites[1]]
    return slowest([transfer(link, net.unit_bytes, net.units) for link in links], u.streams)


def _stage_sites(resolved: ResolvedIntent, u: Unit, entry: dict[str, Any] | None,
                 cpu: dict[str, CpuPlacement]) -> list[Site]:
    if u.stage.kind == "cpu":
        placed = cpu[u.name].pool
        return [site(placed)] if placed is not None else [ANY_NODE]
    pools = {p.name: p for p in resolved.loaded.cluster.pools}
    names = sorted({n for a in (entry or {}).get("allocations", []) for n in (a["pool"], a.get("decode_pool")) if n})
    return [site(pools[n]) for n in names]


def _pipelines(resolved: ResolvedIntent, pipelines: dict[str, list[Unit]], entries: list[dict[str, Any]],
               chosen: list[Bundle], cpu: dict[str, CpuPlacement]) -> list[dict[str, Any]]:
    """Each pipeline end to end: its stages' latencies at the planned load and their hand-offs summed along the
    pipeline against the service's and the stages' own objectives, its CPU stages in cores on their pool, and its
    cost per request."""
    out = []
    by_name = {e["name"]: e for e in entries}
    for rs in resolved.services:
        units = pipelines.get(rs.service.name)
        if not units:
            continue
        wl = rs.service.workload
        peak = float(wl.rate.peak_rps if wl.rate is not None else wl.concurrency)
        stages, own, hops, notes = [], [], [], []
        sites = [_stage_sites(resolved, u, by_name.get(u.name), cpu) for u in units]
        for k, u in enumerate(units):
            hop: dict[str, Any] = {}
            hops.append(0.0)
            after = {"after": [units[i].stage.name for i in u.inputs]}
            if u.network is not None and u.consumer is not None:
                nxt = units[u.consumer]
                pair = {u.name, nxt.name}
                together = [b for b in chosen if pair <= {m.service for m, _ in b.members}]
                t = _handoff(resolved, u, (sites[k], sites[u.consumer]), together)
                hops[k] = t.charged(u.streams)
                hop = {"handoff": {"link": t.link.kind, "bandwidth_gbs": _r(t.link.bandwidth_gbs),
                                   "first_ms": _r(t.first_s * 1000), "total_ms": _r(t.total_s * 1000)},
                       **({"colocated_with": nxt.stage.name} if together else {})}
                notes.append(u.note)
            if u.stage.kind == "cpu":
                t = float(u.stage.work.cpu_time or 0.0)
                own.append(({"p50": t, "p90": t, "p99": t, "p99.9": t}, {"p50": t, "p90": t, "p99": t, "p99.9": t}))
                placed = cpu[u.name]
                runs = {k: v for k, v in (("image", u.stage.image), ("command", u.stage.command),
                                          ("port", u.stage.port)) if v is not None}
                stages.append({"name": u.stage.name, "kind": "cpu", **after, "streams": u.streams,
                               "cpu_cores": placed.cores, **runs,
                               **({"pool": placed.pool.name, "nodes": placed.nodes,
                                   "cost_per_hour": _r(placed.cost_per_hour, 6)} if placed.pool is not None else {}),
                               "work": _work(u), **hop})
                if placed.note:
                    notes.append(placed.note)
                continue
            entry = by_name[u.name]
            first: dict[str, float] = {}
            full: dict[str, float] = {}
            for a in entry["allocations"]:
                for key, v in a["predicted"].items():
                    metric, _, pct = key.rpartition("_")
                    into = first if metric in ("ttft", "first_output") else full if metric in ("e2e", "latency") \
                        else None
                    if into is not None:
                        into[pct] = max(into.get(pct, 0.0), v["predicted_ms"] / 1000)
            own.append((first, full))
            stages.append({"name": u.stage.name, "kind": u.stage.kind, **after, "unit": u.name, "streams": u.streams,
                           "budget_ms": {**{f"first_output_{p}": _r(v * 1000) for p, v in sorted(u.first.items())},
                                         **{f"latency_{p}": _r(v * 1000) for p, v in sorted(u.full.items())}},
                           "work": _work(u), **hop})
        objectives_out = {}

        n = len(units) - 1
        checks = [(f"ttft_{p}", n, "first", p, v) for p, v in rs.service.slo.ttft.items()]
        checks += [(f"e2e_{p}", n, "full", p, v) for p, v in rs.service.slo.e2e.items()]
        checks += [(f"{u.stage.name}_first_output_{p}", k, "first", p, v)
                   for k, u in enumerate(units) for p, v in u.stage.slo.first_output.items()]
        for key, k, what, p, target in checks:
            got = _along(units, own, hops, k, what, p)
            if got is not None:
                objectives_out[key] = {"target_ms": _r(target * 1000), "predicted_ms": _r(got * 1000),
                                       "margin": _r(1 - got / target, 3)}
        cost = sum(by_name[u.name]["cost_per_hour"] for u in units if u.name in by_name)
        cost += sum(cpu[u.name].cost_per_hour for u in units if u.name in cpu)
        out.append({"service": rs.service.name, "stages": stages, "objectives": objectives_out,
                    "cost_per_hour": _r(cost, 6),
                    **({"cost_per_request": _r(cost / (peak * 3600), 4)} if wl.rate is not None and peak else {}),
                    **({"notes": notes} if notes else {})})
    return out


def _busy(services: list[dict[str, Any]], pool: str) -> dict[str, float]:
    """The pool's devices' load at peak over what they can carry within the objectives, device-weighted: how much
    of the allocated capacity the demand uses (the rest is headroom, replicas kept for availability, or the
    rounding up to whole replicas)."""
    num = den = 0.0
    for svc in services:
        for a in svc["allocations"]:
            on = Allocation.model_validate(a).devices_on(pool)
            if on and a["capacity_per_replica"]:
                num += on * a["load_per_replica"] / a["capacity_per_replica"]
                den += on
    return {"busy_at_peak": _r(num / den, 4)} if den else {}


def _placement(pools: dict[str, Pool], cands: list[Candidate], sol: Solution) -> dict[str, Placement]:
    """Where the solution's workers go, per pool it uses."""
    out: dict[str, Placement] = {}
    for name, pool in sorted(pools.items()):
        workers = [w for c in cands if name in c.pools and c.key in sol.replicas
                   for d, share, k in c.workers_on(name)
                   for w in workers_of(c.key, d, share, k, sol.replicas[c.key], pool.devices_per_node)]
        if not workers:
            continue
        try:
            out[name] = place(pool, workers)
        except PlacementError as exc:
            raise InfraError(Problem(f"the chosen replicas do not fit the nodes of pool {name}: {exc}",
                                     Location(path=f"pools.{name}"),
                                     "list the pool's nodes with their device counts, or report this plan")) from None
    return out


def _engines(resolved: ResolvedIntent, rs: ResolvedService, c: Candidate) -> dict[str, dict[str, Any]]:
    """Engine settings per role, from the deployment the candidate was scored with."""
    assert rs.model is not None and isinstance(c.estimate, Estimate)
    catalog = _catalog(resolved)
    fw = catalog.framework(c.framework)
    device = c.device_spec or catalog.device(c.device)
    dep = c.estimate.deployment
    wl = c.estimate.workload
    kv = kv_precision_for(dep.precision, dep.kv_precision, "fp8_kv_cache" in fw.features, device)
    context = min(rs.service.max_context or rs.model.max_context, rs.model.max_context)
    out = {}
    for name, role in dep.roles().items():
        kv_tokens = c.estimate.memory[name].kv_tokens
        if name == "prefill":
            # A prefill worker holds a sequence only while it computes its prompt: enough for a step's token
            # budget of prompts, as the prefill model assumes, within what its KV cache holds.
            seqs = min(max(PREFILL_SEQS, math.ceil(role.max_num_tokens / max(1.0, wl.isl))),
                       kv_tokens // max(1, round(wl.isl)), MAX_NUM_SEQS)
        else:
            # The batch the prediction assumed: a smaller cap queues requests the prediction never queued.
            seqs = c.estimate.slots(name)
        out[name] = {
            "max_num_seqs": max(1, seqs),
            **({} if name == "prefill" else {"batch_at_capacity": _r(c.estimate.prediction.batch, 3)}),
            "max_num_batched_tokens": role.max_num_tokens,
            "max_model_len": max(1, min(context, kv_tokens)),
            "memory_utilization": dep.memory_utilization,
            "kv_cache_dtype": "fp8" if kv == "fp8" else "auto",
            **({"quantization": dep.precision} if dep.precision != rs.model.native_precision else {}),
            "kv_cache_tokens": kv_tokens,
            "chunked_prefill": "chunked_prefill" in fw.features,
            "prefix_caching": "prefix_caching" in fw.features,
        }
    return out


def _cluster(resolved: ResolvedIntent) -> dict[str, Any]:
    """The profile's conventions and pools as the plan carries them."""
    cluster = resolved.loaded.cluster
    conv = cluster.conventions
    pools = []
    for p in cluster.pools:
        device = resolved.pools[p.name]
        res = resolved.device_resources[device.vendor]
        pools.append({
            "name": p.name, "device": device.name, "vendor": device.vendor, "nodes": p.node_count,
            "devices_per_node": p.devices_per_node, "device_memory_gb": _r(pool_device_memory_gb(p, device), 6),
            "node_selector": dict(sorted(p.node_selector.items())),
            "node_names": [n.name for n in p.nodes] if isinstance(p.nodes, list) else [],
            "zone": p.zone, "switch": p.topology.switch, "scale_up_domain": p.topology.scale_up_domain,
            "nics": [{"name": n.name, "kind": n.kind, "bandwidth_gbps": _r(n.bandwidth * 8, 6),
                      "pcie_root": n.pcie_root} for n in p.nics],
            # HAMi names some resources per chip (huawei.com/Ascend{chip}): the plan carries the pool's own names.
            "resources": {k: v.replace("{chip}", device.name.removeprefix("Ascend-")) if isinstance(v, str) else v
                          for k, v in res.model_dump(mode="json", exclude_none=True).items()},
            "spot": p.spot, "multi_node": p.multi_node,
        })
    cpu_pools = [{
        "name": p.name, "nodes": p.node_count, "cores_per_node": p.cpu.cores,
        "usable_cores_per_node": p.cpu.usable_cores, "memory_gb_per_node": _r(p.cpu.memory / 1e9, 6),
        "price_per_node_hour": _r(p.price, 6), "node_selector": dict(sorted(p.node_selector.items())),
        "node_names": [n.name for n in p.nodes] if isinstance(p.nodes, list) else [],
        "zone": p.zone, "switch": p.topology.switch,
        "nics": [{"name": n.name, "kind": n.kind, "bandwidth_gbps": _r(n.bandwidth * 8, 6),
                  "pcie_root": n.pcie_root} for n in p.nics],
        "spot": p.spot,
    } for p in cluster.cpu_pools]
    return {"name": resolved.loaded.profile_name, "namespace": conv.namespace, "scheduler": conv.scheduler,
            "crds": {k: v for k, v in sorted(conv.crds.model_dump().items()) if v},
            "model_cache": conv.model_cache, "pools": pools, **({"cpu_pools": cpu_pools} if cpu_pools else {})}


def _devices_label(c: Candidate) -> str:
    return c.device if not c.decode_device else f"{c.device}+{c.decode_device}"


def _alternatives(cands: list[Candidate], sol: Solution, limits: Limits, top: int) -> list[dict[str, Any]]:
    """Best plans that use another device type or another framework than the chosen one, with cost deltas."""
    chosen = [c for c in cands if c.key in sol.replicas]
    devices = {d for c in chosen for d in c.device_types}
    frameworks = {f for c in chosen for f in c.frameworks}
    modes = {c.mode for c in chosen}
    out = []
    tried = set()
    for label, keep in (
        *((f"only {d}", lambda c, d=d: c.device_types == {d})
          for d in sorted({d for c in cands for d in c.device_types} - devices)),
        *((f"without {d}", lambda c, d=d: d not in c.device_types) for d in sorted(devices)),
        *((f"only {f}", lambda c, f=f: c.frameworks == {f})
          for f in sorted({f for c in cands for f in c.frameworks} - frameworks)),
        *((f"{m} only", lambda c, m=m: c.mode == m) for m in sorted({c.mode for c in cands} - modes)),
        *((("prefill and decode on one device type", lambda c: c.decode_pool is None),)
          if any(c.decode_pool for c in chosen) else ()),
    ):
        if len(out) >= top:
            break
        exclude = {c.key for c in cands if not keep(c)}
        frozen = frozenset(exclude)
        if frozen in tried or len(exclude) == len(cands):
            continue
        tried.add(frozen)
        alt = solve(cands, limits, exclude=exclude, time_limit_s=5.0, core=False)
        if alt.status not in ("OPTIMAL", "FEASIBLE"):
            continue
        used = [c for c in cands if c.key in alt.replicas]
        out.append({
            "label": label, "cost_per_hour": _r(alt.cost_per_hour, 6),
            "delta_per_hour": _r(alt.cost_per_hour - sol.cost_per_hour, 6),
            "uses": sorted({f"{alt.replicas[c.key]} x {_devices_label(c)} {c.framework} {c.precision} {c.layout}"
                            for c in used}),
        })
    return out


def _span(seconds: float) -> str:
    """A target as an intent writes it: `450ms`, `7.5s`."""
    return f"{seconds * 1000:.0f}ms" if seconds < 1 else f"{seconds:.3g}s"


STAGE_METRICS = {"e2e": "latency", "ttft": "first_output"}
"""The names a pipeline stage's budgets give the service's objectives: its whole latency, its first output."""


def _loosen_alone(resolved: ResolvedIntent, service: str, svc: Service, cands: list[Candidate], limits: Limits,
                  considered: list[Considered]) -> list[str]:
    """For each objective of `svc` on its own, the smallest step of SLO_STEPS that makes the intent feasible
    with every other objective and limit as written, checked by a search and a solve (feasibility only grows with
    the step, so a bisection over the steps); a pipeline's objective moves every stage's budget with it. Where
    shapes of `service` (the service or the stage in conflict) miss objectives even at their lightest load, only
    those the closest shape misses are tried: loosening any other cannot bring it in."""
    units = sorted(u for u in limits.demand if limits.parent.get(u, u) == svc.name)
    others = [c for c in cands if c.service not in units]
    closest = _closest(considered, service)
    missed = {k for k, _, _ in closest.misses} if closest else set()
    out = []
    for metric, pct, target in svc.slo.targets():
        keys = frozenset({f"{metric}_{pct}", f"{STAGE_METRICS.get(metric, metric)}_{pct}"})
        if missed and not keys & missed:
            continue

        def cost_at(scale: float, keys: frozenset[str] = keys) -> float | None:
            fix = Corrections({u: {k: scale for k in sorted(keys)} for u in units})
            mine = [c for c in search(resolved, corrections=fix)[0] if c.service in units]
            trial = solve(others + mine, limits, time_limit_s=5.0) if mine else None
            return trial.cost_per_hour if trial and trial.status in ("OPTIMAL", "FEASIBLE") else None

        lo, hi = -1, len(SLO_STEPS) - 1
        cost = cost_at(SLO_STEPS[hi])
        if cost is None:
            continue
        while hi - lo > 1:
            mid = (lo + hi) // 2
            trial_cost = cost_at(SLO_STEPS[mid])
            if trial_cost is None:
                lo = mid
            else:
                hi, cost = mid, trial_cost
        # Then between the two steps, to a target as one would write it (two significant figures, rounded up).
        below, scale = (SLO_STEPS[lo] if lo >= 0 else 1.0), SLO_STEPS[hi]
        for _ in range(3):
            mid = _round_up(target * math.sqrt(below * scale)) / target
            if not below < mid < scale:
                break
            trial_cost = cost_at(mid)
            if trial_cost is None:
                below = mid
            else:
                scale, cost = mid, trial_cost
        out.append(f"feasible with service {svc.name}'s {metric} {pct} at {_span(target * scale)} instead of "
                   f"{_span(target)}, the other objectives as written (${cost:.2f}/h)")
    return out


def _round_up(seconds: float) -> float:
    """Up to two significant figures: 0.2345 -> 0.24."""
    step = 10 ** (math.floor(math.log10(seconds)) - 1)
    return math.ceil(seconds / step - 1e-9) * step


def _relaxations(resolved: ResolvedIntent, cands: list[Candidate], limits: Limits, core: list[str],
                 considered: list[Considered]) -> list[Problem]:
    """The cheapest change to each conflicting limit that makes the intent feasible, each checked by a solve and
    placed at the line it would change. For objectives: each one alone where loosening it alone is enough, else
    all of a service's together."""
    doc = resolved.loaded.document
    names = [r.service.name for r in resolved.services]
    out: list[Problem] = []
    unbounded = dataclasses.replace(limits, budget_hour={k: None for k in limits.budget_hour},
                                    total_budget_hour=None)
    free = solve(cands, unbounded, time_limit_s=5.0) if cands else None
    if any(k.startswith("budget:") for k in core) and free and free.status in ("OPTIMAL", "FEASIBLE"):
        if limits.total_budget_hour is not None and "budget:total" in core:
            fixed = sum(limits.fixed.values())
            out.append(Problem(f"feasible with a total budget of ${free.cost_per_hour + fixed:.2f}/h instead of "
                               f"${limits.total_budget_hour + fixed:.2f}/h",
                               doc.locate(("spec", "budget", "per_hour")),
                               f"set per_hour: ${free.cost_per_hour + fixed:.2f}/h"))
        for k in core:
            if k.startswith("budget:") and k != "budget:total":
                s = k.split(":", 1)[1]
                fixed = limits.fixed.get(s, 0.0)
                cost = fixed + sum(c.cost_per_hour * free.replicas.get(c.key, 0) for c in cands
                                   if limits.parent.get(c.service, c.service) == s)
                out.append(Problem(f"feasible with service {s}'s budget at ${cost:.2f}/h instead of "
                                   f"${(limits.budget_hour[s] or 0.0) + fixed:.2f}/h",
                                   doc.locate(("spec", "services", names.index(s), "budget")),
                                   f"allow ${cost:.2f}/h (per_hour, or the $/Mtok or $/request equivalent)"))
    if any(k.startswith(("pool:", "demand:", "zones:", "replicas:")) for k in core) and cands:
        grown = solve(cands, limits, extra_devices=_room(cands, limits), time_limit_s=5.0)
        if grown.status in ("OPTIMAL", "FEASIBLE"):
            need = {p: math.ceil(v) for p, v in _devices_by_pool(cands, grown.replicas).items()}
            cdoc = resolved.loaded.cluster_document()
            for i, pool in enumerate(resolved.loaded.cluster.pools):
                n = need.get(pool.name, 0)
                if n > limits.pool_devices[pool.name]:
                    dev = resolved.pools[pool.name].name
                    out.append(Problem(f"feasible with {n - limits.pool_devices[pool.name]} more {dev} in pool "
                                       f"{pool.name} (${grown.cost_per_hour:.2f}/h in all)",
                                       cdoc.locate(resolved.loaded.cluster_path() + ("pools", i, "nodes")),
                                       f"add nodes to pool {pool.name}"))
    for s in sorted(limits.demand):
        if f"demand:{s}" in core or not any(c.service == s for c in cands):
            owner = limits.parent.get(s, s)
            svc = next(r.service for r in resolved.services if r.service.name == owner)
            where = doc.locate(("spec", "services", names.index(owner), "slo"))
            alone = _loosen_alone(resolved, s, svc, cands, limits, considered)
            if alone:
                out += [Problem(text, where, "loosen that objective; each line alone is enough") for text in alone]
                continue
            fallback: Problem | None = None
            for scale in SLO_STEPS:
                relaxed = search(resolved, slo_scale=scale)[0]
                relaxed = [c for c in relaxed if c.service == s]
                if not relaxed:
                    continue
                parts = "; ".join(f"{m} {p} {_span(v * scale)} instead of {_span(v)}" for m, p, v in svc.slo.targets())
                # Checked jointly: the other services keep their candidates and every limit stays as written.
                pool = [c for c in cands if c.service != s] + relaxed
                trial = solve(pool, limits, time_limit_s=5.0)
                if trial.status in ("OPTIMAL", "FEASIBLE"):
                    out.append(Problem(f"feasible with service {s}'s objectives loosened x{scale:g}: {parts} "
                                       f"(${trial.cost_per_hour:.2f}/h)", where,
                                       "loosen the objectives that matter least to users"))
                    fallback = None
                    break
                if fallback is None:
                    paid = solve(pool, unbounded, extra_devices=_room(pool, limits), time_limit_s=5.0)
                    if paid.status in ("OPTIMAL", "FEASIBLE"):
                        more = _extra_devices(resolved, pool, paid, limits)
                        fallback = Problem(f"feasible with service {s}'s objectives loosened x{scale:g}: {parts}; "
                                           + (f"{more}; " if more else "")
                                           + f"and a budget of ${paid.cost_per_hour:.2f}/h", where,
                                           "loosen the objectives, add the devices and raise the budget together")
            if fallback is not None:
                out.append(fallback)
    out += _lower_confidence(resolved, cands, limits)
    return out


ATTAINMENT_STEPS = (0.005, 0.01, 0.02, 0.05, 0.1)
"""How far an attainment is lowered, in turn, to find the highest at which an infeasible intent fits."""


def _lower_confidence(resolved: ResolvedIntent, cands: list[Candidate], limits: Limits) -> list[Problem]:
    """For each service planned at a confidence or an attainment: the highest one (confidence in steps of 5%,
    attainment by `ATTAINMENT_STEPS`, down to none) at which the intent is feasible with every other limit as
    written, checked by a solve."""
    doc = resolved.loaded.document
    out: list[Problem] = []
    for i, rs in enumerate(resolved.services):
        name = rs.service.name
        for field in ("confidence", "attainment"):
            asked = getattr(rs.service.slo, field)
            if asked is None:
                continue
            steps: list[float | None] = (
                [k / 100 for k in range(round(asked * 100) - 5, 49, -5)] if field == "confidence"
                else [round(asked - d, 4) for d in ATTAINMENT_STEPS if asked - d >= 0.5])
            for lower in steps + [None]:
                svc = rs.service.model_copy(update={"slo": rs.service.slo.model_copy(update={field: lower})})
                trial_intent = dataclasses.replace(resolved, services=[
                    dataclasses.replace(r, service=svc) if r is rs else r for r in resolved.services])
                mine = [c for c in search(trial_intent)[0] if limits.parent.get(c.service, c.service) == name]
                others = [c for c in cands if limits.parent.get(c.service, c.service) != name]
                trial = solve(others + mine, limits, time_limit_s=5.0)
                if trial.status not in ("OPTIMAL", "FEASIBLE"):
                    continue
                if field == "confidence":
                    at = f"{lower:.0%} confidence" if lower is not None else "the bare predictions (no confidence)"
                    what = f"objectives planned at {at} instead of {asked:.0%}"
                else:
                    at = f"{lower:.1%}" if lower is not None else "none (each percentile on its own)"
                    what = f"attainment at {at} instead of {asked:.1%}"
                out.append(Problem(f"feasible with service {name}'s {what} (${trial.cost_per_hour:.2f}/h)",
                                   doc.locate(("spec", "services", i, "slo", field)),
                                   f"set {field}: {lower:.{0 if field == 'confidence' else 1}%}" if lower is not None
                                   else f"remove {field}"))
                break
    return out


def _room(cands: list[Candidate], limits: Limits) -> dict[str, int]:
    """Devices to add to each pool so that any one candidate alone could carry its service's whole demand."""
    room: dict[str, int] = {}
    for c in cands:
        need = math.ceil((math.ceil(limits.demand[c.service] / c.capacity) + limits.min_replicas[c.service])
                         * c.consumption)
        for p in c.pools:
            room[p] = min(max(room.get(p, 0), need), 1_000_000)
    return room


def _extra_devices(resolved: ResolvedIntent, cands: list[Candidate], sol: Solution, limits: Limits) -> str:
    need = {p: math.ceil(v) for p, v in _devices_by_pool(cands, sol.replicas).items()}
    return ", ".join(f"{n - limits.pool_devices[p]} more {resolved.pools[p].name} in pool {p}"
                     for p, n in sorted(need.items()) if n > limits.pool_devices[p])


_CORE_WORDS = {
    "demand": ("serve {v}", ("workload", "rate")),
    "budget": ("stay within its budget", ("budget",)),
    "replicas": ("keep its minimum replicas", ("availability", "min_replicas")),
    "zones": ("spread across its zones", ("availability", "zones")),
}


def _core_problems(resolved: ResolvedIntent, core: list[str], relax: list[Problem], cands: list[Candidate],
                   considered: list[Considered], limits: Limits) -> list[Problem]:
    doc = resolved.loaded.document
    names = [r.service.name for r in resolved.services]
    problems = []
    fix = ("relax one of them as the 'feasible with' lines below say" if relax
           else "loosen the objectives, raise the budget or add devices")
    for item in core:
        kind, _, target = item.partition(":")
        if kind == "pool":
            cdoc = resolved.loaded.cluster_document()
            idx = next(i for i, p in enumerate(resolved.loaded.cluster.pools) if p.name == target)
            loc = cdoc.locate(resolved.loaded.cluster_path() + ("pools", idx, "nodes"))
            problems.append(Problem(f"pool {target} has too few devices for what the services need", loc, fix))
        elif kind == "budget" and target == "total":
            problems.append(Problem("the total budget is too small", doc.locate(("spec", "budget", "per_hour")), fix))
        elif limits.parent.get(target, target) in names:
            owner = limits.parent.get(target, target)
            si = names.index(owner)
            svc = resolved.services[si].service
            words, path = _CORE_WORDS.get(kind, (kind, ()))
            if target != owner:
                stage = target[len(owner) + 1:].split("+")[0]  # a co-located run is named by its first stage
                if kind == "demand" and not any(c.service == target for c in cands):
                    ti = next(i for i, st in enumerate(svc.pipeline or []) if st.name == stage)
                    where = doc.locate(("spec", "services", si, "pipeline", ti))
                    refused = _refused(resolved, considered, f"{owner}-{stage}", f"stage {stage} of service {owner}")
                    if refused is not None:
                        problems.append(_refusal(resolved, refused, where))
                        continue
                    problems.append(Problem(
                        f"no replica shape of stage {stage} of service {owner} meets its share of the objectives "
                        f"at any load ({sum(1 for c in considered if c.service == f'{owner}-{stage}')} shapes "
                        "tried; with -o DIR, DIR/report.md lists each and why)", where, fix))
                    continue
                target = f"{owner} (stage {stage})"
            elif kind == "demand" and not any(c.service == target for c in cands):
                refused = _refused(resolved, considered, target, f"service {target}")
                if refused is not None:
                    problems.append(_refusal(resolved, refused, doc.locate(("spec", "services", si, "model"))))
                    continue
                tried = sum(1 for c in considered if c.service == target)
                problems.append(Problem(f"no replica shape of service {target} meets its objectives at any load "
                                        f"({tried} shapes tried; with -o DIR, DIR/report.md lists each and why)"
                                        f"{_closest_miss(considered, target)}",
                                        doc.locate(("spec", "services", si, "slo")), fix))
                continue
            if kind == "demand":
                wl = svc.workload
                what = f"{wl.rate.peak_rps:g} requests/s" if wl.rate is not None else f"{wl.concurrency} clients"
                words = words.format(v=what) + " within its objectives"
                path = ("workload", "rate") if wl.rate is not None else ("workload", "concurrency")
            problems.append(Problem(f"service {target} cannot {words} together with the other constraints",
                                    doc.locate(("spec", "services", si) + path), fix))
    return problems


REFUSALS_SHOWN = 3
"""Distinct refusal reasons a headline names before it points at the report for the rest."""


def _refused(resolved: ResolvedIntent, considered: list[Considered], service: str,
             label: str) -> tuple[str, str, str | None] | None:
    """(message, fix, pool) when no shape of a service (or pipeline stage) got as far as its objectives: each was
    refused for what it is (no released image, a model that does not fit, a quirk of the device, a model no
    catalog holds). Those reasons are then the whole story, and loosening the objectives cannot help; `pool` names
    the first pool of the profile at fault when the cause is the device's (no image), else None. None when any
    shape was weighed against the objectives."""
    mine = [c for c in considered if c.service == service]
    if not mine or any(c.misses or c.outcome in ("candidate", DOMINATED) for c in mine):
        return None
    count: dict[str, int] = {}
    for c in mine:
        count[c.outcome] = count.get(c.outcome, 0) + 1
    reasons = sorted(count, key=lambda r: (-count[r], r))
    shown = "; ".join(f"{r} ({count[r]} shape{'s' if count[r] > 1 else ''})" for r in reasons[:REFUSALS_SHOWN])
    if len(reasons) > REFUSALS_SHOWN:
        shown += f"; and {len(reasons) - REFUSALS_SHOWN} other reason(s) (with -o DIR, DIR/report.md lists each)"
    if all(NO_IMAGE in r for r in reasons):
        # One cause: no engine allowed on these devices has a released image to roll out. Said per device, with
        # the catalog's reason where it marks the device unplannable.
        engines: dict[str, list[str]] = {}
        specs = {}
        for c in mine:
            dev = resolved.pools.get(c.pool)
            if dev is not None:
                specs[dev.name] = dev
                fws = engines.setdefault(dev.name, [])
                fws += [] if c.framework in fws else [c.framework]
        parts = []
        for name, fws in sorted(engines.items()):
            why = specs[name].unplannable
            parts.append(f"no engine allowed on {name} has an image pinned to a release ({', '.join(sorted(fws))})"
                         + (f": {why.reason} ({why.source})" if why is not None else ""))
        example = min(engines) if engines else "<device>"
        return (f"{label} cannot be deployed: {'; '.join(parts)}",
                f"pin an engine image for {', '.join(sorted(engines)) or 'the device'} in a --catalog overlay "
                f"(frameworks/<framework>.yaml: `images: {{{example}: <registry>/<image>:<tag>}}`), or allow a pool "
                "whose device has one (`infra catalog frameworks`); loosening the objectives cannot help",
                next((p.name for p in resolved.loaded.cluster.pools if p.name in {c.pool for c in mine}), None))
    head = (f"every replica shape of {label} was refused for one reason: {shown}" if len(reasons) == 1 else
            f"every replica shape of {label} was refused before its objectives were weighed: {shown}")
    fix = ("remove what each reason names (allow a device, precision or framework that can serve the model, or give "
           "a model the catalog or its config.json describes); loosening the objectives cannot help, no shape got as "
           "far as them")
    return head, fix, None


def _refusal(resolved: ResolvedIntent, refused: tuple[str, str, str | None], where: Location) -> Problem:
    """A refusal placed at the pool whose device is at fault (its `device` line in the profile), else `where`."""
    message, fix, pool = refused
    if pool is not None:
        idx = next(i for i, p in enumerate(resolved.loaded.cluster.pools) if p.name == pool)
        where = resolved.loaded.cluster_document().locate(resolved.loaded.cluster_path() + ("pools", idx, "device"))
    return Problem(message, where, fix)


def _closest(considered: list[Considered], service: str) -> Considered | None:
    """Of a service's shapes that miss its objectives even at their lightest load, the one whose worst miss
    (prediction over target) is smallest."""
    near = [c for c in considered if c.service == service and c.misses]
    return min(near, key=lambda c: max(math.inf if v is None else v / t for _, v, t in c.misses)) if near else None


def _closest_miss(considered: list[Considered], service: str) -> str:
    """What the shape that came closest to a service's objectives predicts for them at its lightest load: how far
    the objectives would have to move for any shape to serve it."""
    best = _closest(considered, service)
    if best is None:
        return ""
    what = ", ".join(f"{k} {millis(v)} against {millis(t)}" for k, v, t in best.misses if v is not None)
    if not what:
        return ""
    return (f"; the closest, {best.parallel} with {best.framework} {best.precision} on pool {best.pool}, predicts "
            f"{what} at its lightest load")


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
               explain: bool = True) -> tuple[dict[str, Any], list[Considered]]:
    """Solve the intent; a DeploymentPlan as data, and every shape considered. Raises InfeasibleError.
    `objective` is "cost" (cheapest plan meeting all demand) or "goodput" (serve the most of it with what there
    is, then cheapest). `corrections` tighten objectives in scoring (from verifying an earlier plan); without
    `explain` an infeasible intent is reported without searching for relaxations."""
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
        relax = _relaxations(resolved, cands, limits, core, considered)
        conflict = _core_problems(resolved, core, relax, cands, considered, limits) or [
            Problem("no deployment satisfies the intent", Location(str(resolved.loaded.document.path), 1, 1),
                    "loosen the objectives, raise the budget or add devices")]
        error = InfeasibleError(conflict + relax)
        error.considered = considered  # type: ignore[attr-defined]
        raise error
    placements = _placement({p.name: p for p in resolved.loaded.cluster.pools}, cands, sol)
    chosen = [c for c in cands if isinstance(c, Bundle) and c.key in sol.replicas]
    stage_sol, stage_cands = unbundle(sol, cands)
    placed = member_nodes(_placed(placements), cands, sol)
    services = _allocations(resolved, stage_cands, stage_sol, limits, placed, expanded, pipelines)
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
            "solver": {"engine": "cp-sat", "objective": objective, "status": sol.status, "gap": _r(sol.gap, 4),
                       "candidates": len(cands), "considered": len(considered)},
            "cluster": _cluster(resolved),
            "cost": {"per_hour": _r(sol.cost_per_hour + sum(cpu_cost.values()), 6),
                     "by_pool": {p: _r(v, 6) for p, v in sorted({**_cost_by_pool(stage_cands, stage_sol.replicas),
                                                                 **cpu_cost}.items())}},
            "services": services,
            **({"pipelines": _pipelines(resolved, pipelines, services, chosen, cpu)} if pipelines else {}),
            "pools_used": [{
                "pool": name, "device": resolved.pools[name].name, "devices": pl.devices_used,
                "nodes": len({n for nodes in pl.nodes.values() for n in nodes}),
                "allocated": _r(_devices_by_pool(cands, sol.replicas)[name], 6),
                "idle_fraction": _r(pl.quarters_idle / (4 * pl.devices_used), 4) if pl.devices_used else 0.0,
                **({"partly_idle": [{"node": n, "device": d, "idle_fraction": q / 4} for n, d, q in pl.partly_idle]}
                   if pl.partly_idle else {}),
                **_busy(services, name),
            } for name, pl in sorted(placements.items())],
            "binding": _binding(resolved, cands, sol, limits),
            "alternatives": _alternatives(cands, sol, limits, top),
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
            "provenance": {"intent": str(resolved.loaded.document.path), "catalog": _catalog(resolved).fingerprint(),
                           "calibration": {"fitted": calibration_table().get("fitted"),
                                           "data_sha256": calibration_table().get("data_sha256"),
                                           **_measured(resolved)}},
        },
    }
    # The contract is checked before anything is written: a plan that does not fit DeploymentPlan is a bug here.
    typed = DeploymentPlan.model_validate(plan)
    return typed.model_dump(mode="json", by_alias=True, exclude_none=True), considered
