"""A solution as the plan document: each service's allocations with their engines, placements, predictions at
the load the rendered router gives a replica and error bands; pipelines with their stages' sites, hand-offs and
latency along the path; the cluster, the pools' use, the binding constraints and the alternatives."""

from __future__ import annotations

import dataclasses
import math
from typing import Any

from infra.catalog.loader import Catalog
from infra.errors import InfraError, Location, Problem
from infra.intent.profile import Pool
from infra.intent.resolve import ResolvedIntent, ResolvedService, pool_device_memory_gb
from infra.perf.arch import kv_precision_for
from infra.perf.calibration import borrowed_band, calibrated_band, error_band
from infra.perf.estimate import Estimate, estimate, objective_value
from infra.perf.handoff import Site, Transfer, device_link, network_link, node_link, slowest, transfer
from infra.perf.serving import z_of
from infra.perf.stages import StageEstimate, stage_latency
from infra.planner.candidates import (
    MAX_NUM_SEQS,
    SLOTS_PER_DEVICE,
    Candidate,
    attainment_objectives,
    correction_for,
    held_objectives,
    objectives,
    service_router,
    service_workload,
)
from infra.planner.colocate import Bundle
from infra.planner.pipeline import (
    ANY_NODE,
    CpuPlacement,
    Unit,
    paths,
    site,
    stage_model_key,
)
from infra.planner.placement import Placement, PlacementError, place, workers_of
from infra.planner.routing import replica_loads
from infra.planner.solve import CAP_SCALE, Limits, Solution, solve
from infra.planner.types import Allocation

PREFILL_SEQS = 256
"""Prompts a prefill worker takes in at once at least (the step's token budget may ask more of short prompts)."""


def rounded(x: float, nd: int = 4) -> float:
    return float(f"{x:.{nd}g}") if x == x and abs(x) != float("inf") else x


def catalog_of(resolved: ResolvedIntent) -> Catalog:
    assert resolved.catalog is not None, "resolve() records the catalog it used"
    return resolved.catalog


def service_loads(resolved: ResolvedIntent, rs: ResolvedService, mine: list[Candidate],
                   sol: Solution) -> dict[str, Any]:
    """Candidate key -> the workload one of its replicas meets behind the rendered router."""
    wl = service_workload(rs.service, resolved.loaded.document.path.parent)
    spec = rs.service.workload
    wl = dataclasses.replace(wl, rate=float(spec.rate.peak_rps)) if spec.rate is not None else dataclasses.replace(
        wl, concurrency=int(spec.concurrency or 0))
    return replica_loads(service_router(resolved, rs.service.name, any(c.mode == "agg" for c in mine)), wl,
                         [(c.key, sol.replicas[c.key], c.capacity, c.mode == "agg") for c in mine])


def _predicted(resolved: ResolvedIntent, rs: ResolvedService, cand: Candidate, wl: Any) -> dict[str, Any]:
    """Metrics of one replica under `wl`, what the rendered router gives it, against the service's objectives."""
    assert isinstance(cand.estimate, Estimate)
    est = estimate(cand.estimate.deployment, wl, catalog_of(resolved), device_memory_gb=cand.memory_gb,
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
        out[f"{metric}_{pct}"] = {"target_ms": rounded(target * 1000), "predicted_ms": rounded(got * 1000),
                                  "margin": rounded(1 - got / target, 3)}
        # The band was measured on means; a percentile's error is taken to scale the same way.
        if band is not None and metric in ("ttft", "tpot", "itl") and 0 < got < float("inf"):
            held = band.held("ttft" if metric == "ttft" else "tpot", target / got)
            out[f"{metric}_{pct}"]["held_out"] = round(held, 2)
    return out


def binding_constraints(resolved: ResolvedIntent, cands: list[Candidate], sol: Solution, limits: Limits) -> list[str]:
    out = []
    used = {c.key: c for c in cands if c.key in sol.replicas}
    by_pool = sol.devices_by_pool(cands)
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


def placed_nodes(placements: dict[str, Placement]) -> dict[str, dict[str, int]]:
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
        "devices": n * c.consumption, "capacity_per_replica": rounded(c.capacity),
        "load_per_replica": rounded(load), "cost_per_hour": rounded(n * c.cost_per_hour, 6),
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
        "demand": {"value": rounded(demand), "unit": unit},
        "required": {"value": rounded(limits.demand.get(name, demand * (1 + rs.service.availability.headroom))),
                     "unit": unit},
        "capacity": {"value": rounded(capacity), "unit": unit},
        "headroom": rounded(capacity / demand - 1 if demand else 0.0, 3),
        "served": rounded(min(1.0, capacity / demand) if demand else 1.0, 4), "allocations": allocs,
        "cost_per_hour": rounded(cost, 6),
    }
    if wl.rate is not None and demand:
        tok = service_workload(rs.service, resolved.loaded.document.path.parent)
        entry["cost_per_million_tokens"] = rounded(cost / (demand * 3600 * (tok.isl + tok.osl)) * 1e6, 4)
        entry["cost_per_request"] = rounded(cost / (demand * 3600), 4)
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
    loads = service_loads(resolved, rs, mine, sol) if capacity else {}
    for c in mine:
        load = served * c.capacity / capacity if capacity else 0.0
        routed = loads.get(c.key)
        if routed is not None:
            load = routed.rate if routed.rate is not None else float(routed.concurrency)
        allocs.append(_allocation(resolved, c, sol.replicas[c.key], load, placed, _engines(resolved, rs, c),
                                  _predicted(resolved, rs, c, routed) if routed is not None else {}))
    assert rs.model is not None
    return _entry(resolved, rs, s, mine, sol, limits, allocs, capacity,
                  {f"{m}_{q}": rounded(v * 1000, 6) for (m, q), v in sorted(objectives(rs.service).items())},
                  {"model": rs.model_key, "model_id": rs.model.hf_id, **extra,
                   **({"attainment": rs.service.slo.attainment,
                       "attainment_objectives": {f"{m}_{q}": rounded(v * 1000, 6) for (m, q), v in
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
            predicted[key] = {"target_ms": rounded(target * 1000), "predicted_ms": rounded(got * 1000),
                              "margin": rounded(1 - got / target, 3)}
        allocs.append(_allocation(resolved, c, sol.replicas[c.key], load, placed, {}, predicted))
    return _entry(resolved, rs, unit.name, mine, sol, limits, allocs, capacity,
                  {k: rounded(v * 1000, 6) for k, v in sorted(targets.items())},
                  {"model": stage_model_key(unit.stage, unit.model, resolved), "model_id": unit.model.hf_id,
                   "pipeline": rs.service.name,
                   "stage": unit.stage.name, "kind": unit.model.kind})


def _arrival_cv(rs: ResolvedService) -> float:
    arrival = rs.service.workload.arrival
    return {"poisson": 1.0, "constant": 0.0, "gamma": arrival.cv or 1.0}[arrival.process]


def allocations(resolved: ResolvedIntent, cands: list[Candidate], sol: Solution, limits: Limits,
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


def pipeline_sections(resolved: ResolvedIntent, pipelines: dict[str, list[Unit]], entries: list[dict[str, Any]],
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
                hop = {"handoff": {"link": t.link.kind, "bandwidth_gbs": rounded(t.link.bandwidth_gbs),
                                   "first_ms": rounded(t.first_s * 1000), "total_ms": rounded(t.total_s * 1000)},
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
                                   "cost_per_hour": rounded(placed.cost_per_hour, 6)}
                                  if placed.pool is not None else {}),
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
                           "budget_ms": {**{f"first_output_{p}": rounded(v * 1000) for p, v in sorted(u.first.items())},
                                         **{f"latency_{p}": rounded(v * 1000) for p, v in sorted(u.full.items())}},
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
                objectives_out[key] = {"target_ms": rounded(target * 1000), "predicted_ms": rounded(got * 1000),
                                       "margin": rounded(1 - got / target, 3)}
        cost = sum(by_name[u.name]["cost_per_hour"] for u in units if u.name in by_name)
        cost += sum(cpu[u.name].cost_per_hour for u in units if u.name in cpu)
        out.append({"service": rs.service.name, "stages": stages, "objectives": objectives_out,
                    "cost_per_hour": rounded(cost, 6),
                    **({"cost_per_request": rounded(cost / (peak * 3600), 4)} if wl.rate is not None and peak else {}),
                    **({"notes": notes} if notes else {})})
    return out


def pool_busy(services: list[dict[str, Any]], pool: str) -> dict[str, float]:
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
    return {"busy_at_peak": rounded(num / den, 4)} if den else {}


def node_placements(pools: dict[str, Pool], cands: list[Candidate], sol: Solution) -> dict[str, Placement]:
    """Where the solution's workers go, per pool it uses."""
    out: dict[str, Placement] = {}
    chosen = [c for c in cands if c.key in sol.replicas]
    for name, pool in sorted(pools.items()):
        workers = [w for c in chosen if name in c.pools
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
    catalog = catalog_of(resolved)
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
            **({} if name == "prefill" else {"batch_at_capacity": rounded(c.estimate.prediction.batch, 3)}),
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


def cluster_section(resolved: ResolvedIntent) -> dict[str, Any]:
    """The profile's conventions and pools as the plan carries them."""
    cluster = resolved.loaded.cluster
    conv = cluster.conventions
    pools = []
    for p in cluster.pools:
        device = resolved.pools[p.name]
        res = resolved.device_resources[device.vendor]
        pools.append({
            "name": p.name, "device": device.name, "vendor": device.vendor, "nodes": p.node_count,
            "devices_per_node": p.devices_per_node, "device_memory_gb": rounded(pool_device_memory_gb(p, device), 6),
            "node_selector": dict(sorted(p.node_selector.items())),
            "node_names": [n.name for n in p.nodes] if isinstance(p.nodes, list) else [],
            "zone": p.zone, "switch": p.topology.switch, "scale_up_domain": p.topology.scale_up_domain,
            "nics": [{"name": n.name, "kind": n.kind, "bandwidth_gbps": rounded(n.bandwidth * 8, 6),
                      "pcie_root": n.pcie_root} for n in p.nics],
            # HAMi names some resources per chip (huawei.com/Ascend{chip}): the plan carries the pool's own names.
            "resources": {k: v.replace("{chip}", device.name.removeprefix("Ascend-")) if isinstance(v, str) else v
                          for k, v in res.model_dump(mode="json", exclude_none=True).items()},
            "spot": p.spot, "multi_node": p.multi_node,
        })
    cpu_pools = [{
        "name": p.name, "nodes": p.node_count, "cores_per_node": p.cpu.cores,
        "usable_cores_per_node": p.cpu.usable_cores, "memory_gb_per_node": rounded(p.cpu.memory / 1e9, 6),
        "price_per_node_hour": rounded(p.price, 6), "node_selector": dict(sorted(p.node_selector.items())),
        "node_names": [n.name for n in p.nodes] if isinstance(p.nodes, list) else [],
        "zone": p.zone, "switch": p.topology.switch,
        "nics": [{"name": n.name, "kind": n.kind, "bandwidth_gbps": rounded(n.bandwidth * 8, 6),
                  "pcie_root": n.pcie_root} for n in p.nics],
        "spot": p.spot,
    } for p in cluster.cpu_pools]
    return {"name": resolved.loaded.profile_name, "namespace": conv.namespace, "scheduler": conv.scheduler,
            "crds": {k: v for k, v in sorted(conv.crds.model_dump().items()) if v},
            "model_cache": conv.model_cache, "pools": pools, **({"cpu_pools": cpu_pools} if cpu_pools else {}),
            **({"monitoring_labels": dict(sorted(conv.monitoring_labels.items()))} if conv.monitoring_labels else {})}


def _devices_label(c: Candidate) -> str:
    return c.device if not c.decode_device else f"{c.device}+{c.decode_device}"


def _beyond_the_pools(cands: list[Candidate], exclude: set[str], limits: Limits) -> bool:
    """Whether the shapes not excluded cannot carry every service's demand in the devices of the pools they run
    on, each service on its fewest devices per unit of capacity: a relaxation of the solver's model (the same
    capacities rounded down and demands up, the same device slots, those pools' limits summed), so that when
    this holds, the solver finds no plan either."""
    fewest: dict[str, float] = {}
    pools: set[str] = set()
    for c in cands:
        cap = math.floor(c.capacity * CAP_SCALE + 1e-9)
        if c.key in exclude or cap <= 0:
            continue
        pools.update(c.pools)
        per = sum(c.slots_on(p) for p in c.pools) / cap
        if per < fewest.get(c.service, math.inf):
            fewest[c.service] = per
    need = 0.0
    for s, demand in limits.demand.items():
        if demand > 0:
            if s not in fewest:
                return True
            need += math.ceil(demand * CAP_SCALE - 1e-9) * fewest[s]
    return need > sum(limits.pool_devices[p] for p in pools) * SLOTS_PER_DEVICE * (1 + 1e-9)


def alternatives_of(cands: list[Candidate], sol: Solution, limits: Limits, top: int) -> list[dict[str, Any]]:
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
        if _beyond_the_pools(cands, exclude, limits):
            continue  # no plan: the solver need not take each service's part, and then the joint model, to say so
        alt = solve(cands, limits, exclude=exclude, time_limit_s=5.0, core=False)
        if alt.status not in ("OPTIMAL", "FEASIBLE"):
            continue
        used = [c for c in cands if c.key in alt.replicas]
        out.append({
            "label": label, "cost_per_hour": rounded(alt.cost_per_hour, 6),
            "delta_per_hour": rounded(alt.cost_per_hour - sol.cost_per_hour, 6),
            "uses": sorted({f"{alt.replicas[c.key]} x {_devices_label(c)} {c.framework} {c.precision} {c.layout}"
                            for c in used}),
        })
    return out
