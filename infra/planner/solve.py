"""Choose replica counts: a CP-SAT model over the scored candidates.

Formulation (all services jointly, one inventory):

    variables   n[c] in 0..U[c]     replicas of candidate c (a service x pool x framework x precision x layout)
                z[s, zone] in {0,1} service s has a replica in zone
    demand      sum_{c of s} cap[c] * n[c] >= D[s]                 for every service s      [literal demand:s]
    replicas    sum_{c of s} n[c] >= min_replicas[s]                                        [literal replicas:s]
    even split  for a service behind a plain Service (`routing`: every pod the same share, whatever its
                capacity), each shape c it uses holds that share: u[c] in {0,1}, n[c] = 0 unless u[c], and
                u[c] => cap[c] * sum_{c' of s of c's mode} n[c'] >= D[s] (aggregated replicas and P/D units
                apart: one mode holds behind such a router); P/D units likewise behind any router but the
                endpoint picker, which renders them a plain Service                          [literal demand:s]
    one mode    behind a router that feeds prefill/decode units only when no aggregated replica is beside them
                (anything but the inference gateway's endpoint picker): a[s] in {0,1}, n[aggregated c] = 0
                unless a[s], n[prefill/decode c] = 0 if a[s]                                  [literal demand:s]
    zones       z[s, zone] <= sum_{c of s in zone} n[c];  sum_zone z[s, zone] >= zones[s]   [literal zones:s]
                and, for zones[s] > 1, for every zone y the service has a candidate in:
                sum_{c of s, zone(c) labelled and != y} cap[c] * n[c] >= K[s]                 [literal zones:s]
                (K: `zone_keep`, the capacity that must survive losing any one zone; pools without a zone label
                could be in the lost zone, so they count for no survivor)
    inventory   sum_{c on pool p} slots[c] * n[c] <= 4 * devices[p]   for every pool p       [literal pool:p]
                (slots are quarter devices: a whole-device replica of k devices takes 4k, a HAMi slice 1 or 2)
    nodes       only for pools whose nodes differ in size: y[p, g, q] nodes of size group g running pattern q
                (a maximal combination of worker sizes that fits the node), sum_q y[p, g, q] <= nodes in g;
                for each worker size k: workers of size k <= sum_{g, q} q[k] * y[p, g, q]; slices fill
                ceil(quarters / 4) devices of size 1; multi-node workers take whole nodes   [literal pool:p]
    budget/h    sum_{c of s} cost[c] * n[c] <= B_h[s]   (and over all services, the total)   [literal budget:s]
    $/Mtok      sum cost[c] n[c] <= B_tok[s] * tokens_per_hour[s] / 1e6                      [literal budget:s]
    $/request   sum cost[c] n[c] <= B_req[s] * requests_per_hour[s]                         [literal budget:s]
    objective   lexicographic: first minimise sum cost[c] n[c]; then, with cost held at that optimum, maximise
                sum_c n[c] * cap[c] / D[service of c] (the most capacity above demand: SLO margin).
                Or, for a fixed inventory (`--objective goodput`): demand becomes soft, served[s] in 0..1000
                thousandths with served[s] * D[s] <= 1000 * sum cap[c] n[c]; maximise sum_s served[s], then
                minimise cost at that goodput.

Capacities are scaled to integers (milli-requests/s or clients x 1000) and costs to tenths of a cent per hour.
Replicas of a layout that divides a node's devices pack exactly into nodes (a node holds devices_per_node / tp of
them); multi-node layouts take whole nodes; halves and quarters of devices pack into whole devices; so the slot
count per pool is the exact packing constraint.
Every constraint group is switched by an assumption literal; when the model is infeasible, CP-SAT's sufficient
assumptions name the groups in conflict, which are mapped back to the intent's fields and lines. The solver runs
single-threaded with a fixed seed and a deterministic time budget, so the same inputs give the same plan.
"""

from __future__ import annotations

import math
import weakref
from collections import OrderedDict
from dataclasses import dataclass, field, replace
from typing import Any

from ortools.sat.python import cp_model

from infra.intent.resolve import ResolvedIntent
from infra.planner.candidates import SLOTS_PER_DEVICE, Candidate, service_router
from infra.planner.placement import node_groups, patterns, uniform

CAP_SCALE = 1000
COST_SCALE = 1000  # tenths of a cent


@dataclass(frozen=True)
class Solution:
    """Replica counts per candidate and what the solver said."""

    status: str
    replicas: dict[str, int]
    """Candidate key -> replicas (only those used)."""
    cost_per_hour: float
    objective: float
    bound: float
    gap: float
    core: list[str] = field(default_factory=list)
    """Constraint groups in conflict, when infeasible (e.g. `demand:chat`, `budget:total`, `pool:h100-a`)."""

    def devices_by_pool(self, cands: list[Candidate]) -> dict[str, float]:
        """Devices the chosen replicas take on each pool (a P/D unit across two pools counts on both)."""
        out: dict[str, float] = {}
        for c in cands:
            n = self.replicas.get(c.key, 0)
            for p in c.pools:
                # A pool only unchosen shapes run on is there too, at 0.
                out[p] = out.get(p, 0.0) + c.devices_on(p) * n if n else out.get(p, 0.0)
        return out

    def cost_by_pool(self, cands: list[Candidate]) -> dict[str, float]:
        """What the chosen replicas cost per hour on each pool (a P/D unit's decode workers on their own pool)."""
        out: dict[str, float] = {}
        for c in cands:
            n = self.replicas.get(c.key, 0)
            if not n:
                continue
            out[c.pool] = out.get(c.pool, 0.0) + c.devices_on(c.pool) * c.price_per_device_hour * n
            if c.decode_pool:
                out[c.decode_pool] = out.get(c.decode_pool, 0.0) + c.devices_on(c.decode_pool) * c.decode_price * n
        return out


@dataclass(frozen=True)
class Limits:
    """Per-service demand and limits, and global ones; the planner fills it from the intent (relaxations edit it)."""

    demand: dict[str, float]
    min_replicas: dict[str, int]
    zones: dict[str, int]
    budget_hour: dict[str, float | None]
    pool_devices: dict[str, int]
    total_budget_hour: float | None = None
    pool_nodes: dict[str, tuple[int, tuple[tuple[int, int], ...]]] = field(default_factory=dict)
    """Pools whose nodes differ in size: devices_per_node and (devices, nodes) per size group."""
    parent: dict[str, str] = field(default_factory=dict)
    """Pipeline stage unit -> its service (whose budget covers the units); plain services map to themselves."""
    fixed: dict[str, float] = field(default_factory=dict)
    """Service -> $/h it spends outside the solve (CPU stages on CPU pools), already taken off its budget and the
    total budget above."""
    zone_keep: dict[str, float] = field(default_factory=dict)
    """Service -> capacity (demand units) its replicas outside any one zone must hold (`zone_share`); absent or 0:
    only the spread over `zones` is required."""
    even: frozenset[str] = frozenset()
    """Services (units) whose aggregated replicas each get the same share of the load, whatever their capacity:
    those behind a plain Service."""
    one_mode: frozenset[str] = frozenset()
    """Services (units) whose router sends no requests to prefill/decode units beside aggregated replicas."""


def zone_share(zones: int) -> float:
    """Share of peak demand that must survive the loss of any one zone for `availability.zones` = `zones`: what an
    even spread of the peak over the zones leaves, (zones - 1) / zones. A spread met by a token replica would
    leave the other zones nothing to fail over to; requiring the whole peak in every N - 1 zones would multiply the
    fleet by N / (N - 1), which the intent does not ask for (headroom is where it says so)."""
    return (zones - 1) / zones if zones > 1 else 0.0


def limits_from(resolved: ResolvedIntent, tokens_per_request: dict[str, float],
                units: dict[str, list[str]] | None = None) -> Limits:
    """Demand and caps as the intent states them; $/Mtok and $/request budgets become $/h at peak. `units` names
    the solved units of each pipeline service (each carries the service's whole demand)."""
    intent = resolved.loaded.intent
    units = units or {}
    demand, min_r, zones, budget, parent, keep = {}, {}, {}, {}, {}, {}
    even, one_mode = set(), set()
    for rs in resolved.services:
        svc = rs.service
        wl = svc.workload
        peak = float(wl.rate.peak_rps if wl.rate is not None else wl.concurrency)
        for name in units.get(svc.name, [svc.name]):
            demand[name] = peak * (1 + svc.availability.headroom)
            min_r[name] = svc.availability.min_replicas
            zones[name] = svc.availability.zones
            if svc.availability.zones > 1:
                keep[name] = peak * zone_share(svc.availability.zones)
            if name != svc.name:
                parent[name] = svc.name
            router = service_router(resolved, name)
            if router == "service":
                even.add(name)
            if router != "inference-pool":
                one_mode.add(name)
        caps = []
        if svc.budget.per_hour is not None:
            caps.append(svc.budget.per_hour)
        if wl.rate is not None:
            per_hour = wl.rate.peak_rps * 3600
            if svc.budget.per_million_tokens is not None:
                caps.append(svc.budget.per_million_tokens * per_hour * tokens_per_request[svc.name] / 1e6)
            if svc.budget.per_request is not None:
                caps.append(svc.budget.per_request * per_hour)
        budget[svc.name] = min(caps) if caps else None
    return Limits(demand, min_r, zones, budget,
                  {p.name: p.device_count for p in resolved.loaded.cluster.pools},
                  intent.spec.budget.per_hour,
                  {p.name: (p.devices_per_node, tuple((g.devices, len(g.names)) for g in node_groups(p)))
                   for p in resolved.loaded.cluster.pools if not uniform(p)}, parent, zone_keep=keep,
                  even=frozenset(even), one_mode=frozenset(one_mode))


def solve(candidates: list[Candidate], limits: Limits, *, time_limit_s: float = 20.0,
          extra_devices: dict[str, int] | None = None, exclude: set[str] | None = None,
          active: set[str] | None = None, objective: str = "cost", core: bool = True) -> Solution:
    """Cheapest replica counts that meet every limit; `extra_devices` adds devices to pools and `exclude` drops
    candidates (both for relaxations and alternatives); `active`, when given, enforces only those constraint
    groups (for shrinking a conflict). `objective` "goodput" serves as much of each service's demand as the
    inventory and budgets allow (fractions of demand, summed), then spends the least for it.

    Services are tied together only by the pools they share and the total budget. Each service (with the other
    units of its pipeline, which share its budget) is solved on its own first; when the parts together fit the
    pools and the total budget, no joint plan can cost less (each part is the cheapest it can be with the whole
    inventory to itself) and their margins are each the most at that cost, so theirs is the joint optimum,
    found in models a few hundred times smaller. Otherwise the joint model decides. `core` False: a caller that
    needs only whether a plan exists (alternatives) is told INFEASIBLE as soon as one part alone has none, with
    that part's conflict rather than the whole model's."""
    exclude = exclude or set()
    cands = [c for c in candidates if c.key not in exclude]
    parts = sorted({limits.parent.get(s, s) for s in limits.demand})
    if len(parts) > 1 and active is None:
        apart = _solve_apart(parts, cands, limits, time_limit_s, extra_devices, objective, core)
        if apart is not None:
            return apart
    return _solve_joint(cands, limits, time_limit_s, extra_devices, active, objective)


def _solve_apart(parts: list[str], cands: list[Candidate], limits: Limits, time_limit_s: float,
                 extra_devices: dict[str, int] | None, objective: str, core: bool = True) -> Solution | None:
    """The joint optimum from each part's own (see `solve`), or None when a part has no plan or the parts
    together overrun a pool or the total budget. Pools whose nodes differ in size are packed jointly. Without
    `core`, a part proven to have no plan is the answer (INFEASIBLE, with that part's conflict)."""
    scale = 1000 if objective == "goodput" else COST_SCALE
    used: dict[str, int] = {}
    best = bound = 0.0
    optimal = True
    # Each part's services and candidates gathered in one pass, in their order (not one pass per part).
    part_services: dict[str, set[str]] = {}
    for s in limits.demand:
        part_services.setdefault(limits.parent.get(s, s), set()).add(s)
    part_cands: dict[str, list[Candidate]] = {}
    for c in cands:
        part_cands.setdefault(limits.parent.get(c.service, c.service), []).append(c)
    for part in parts:
        services = part_services.get(part, set())
        mine = [c for c in part_cands.get(part, []) if c.service in services]
        sub = replace(limits, demand={s: d for s, d in limits.demand.items() if s in services},
                      min_replicas={s: v for s, v in limits.min_replicas.items() if s in services},
                      zones={s: v for s, v in limits.zones.items() if s in services},
                      zone_keep={s: v for s, v in limits.zone_keep.items() if s in services},
                      even=limits.even & services, one_mode=limits.one_mode & services,
                      budget_hour={s: v for s, v in limits.budget_hour.items() if s == part},
                      total_budget_hour=None)
        sol = _part(mine, sub, services, time_limit_s, extra_devices, objective)
        if sol.status == "INFEASIBLE" and not core:
            return sol  # no plan for this part with the whole inventory to itself: none for all of them
        if sol.status not in ("OPTIMAL", "FEASIBLE"):
            return None
        optimal = optimal and sol.status == "OPTIMAL"
        used.update(sol.replicas)
        best += round(sol.objective * scale)
        bound += sol.bound * scale
    chosen = [c for c in cands if c.key in used]
    for p, total in limits.pool_devices.items():
        slots = sum(c.slots_on(p) * used[c.key] for c in chosen if p in c.pools)
        if slots and (p in limits.pool_nodes
                      or slots > (total + (extra_devices or {}).get(p, 0)) * SLOTS_PER_DEVICE):
            return None
    if limits.total_budget_hour is not None and sum(int(round(c.cost_per_hour * COST_SCALE)) * used[c.key]
                                                   for c in chosen) > int(limits.total_budget_hour * COST_SCALE):
        return None
    cost = sum(c.cost_per_hour * used[c.key] for c in chosen)
    gap = 0.0 if optimal else abs(best - bound) / max(abs(best), 1e-9)
    return Solution("OPTIMAL" if optimal else "FEASIBLE", dict(sorted(used.items())), round(cost, 6), best / scale,
                    (best if optimal else bound) / scale, gap)


_PARTS: OrderedDict[tuple[Any, ...], list[tuple[frozenset[int], tuple[weakref.ref, ...], Solution]]] = OrderedDict()
PARTS_KEPT = 4096
"""Limits under which `_part` keeps the solutions it found, the most recently used: a fleet's plan solves every
part again for each alternative and relaxation it tries, and most parts come out the same each time."""


def _part(mine: list[Candidate], sub: Limits, services: set[str], time_limit_s: float,
          extra_devices: dict[str, int] | None, objective: str) -> Solution:
    """`_solve_joint` of one part, reusing an optimum found under the same limits (what the model reads of them)
    for candidates that include these (the very objects, while they live: held by weak references, so that a
    finished plan's candidates are not kept) when it uses none of the others: dropping shapes a plan does not use
    leaves it the cheapest."""
    key = (time_limit_s, objective, tuple(sorted((extra_devices or {}).items())),
           *(tuple(sorted(getattr(sub, f).items())) for f in ("demand", "min_replicas", "zones", "zone_keep",
                                                               "budget_hour", "pool_devices", "pool_nodes")),
           tuple(sorted((u, sub.parent[u]) for u in services if u in sub.parent)), sub.total_budget_hour,
           tuple(sorted(sub.even)), tuple(sorted(sub.one_mode)))
    ids = frozenset(map(id, mine))
    keys = {c.key for c in mine}
    found = [entry for entry in _PARTS.get(key, []) if all(ref() is not None for ref in entry[1])]
    for held, _, sol in found:
        if ids <= held and sol.status == "OPTIMAL" and keys.issuperset(sol.replicas):
            _PARTS.move_to_end(key)
            return sol
    sol = _solve_joint(mine, sub, time_limit_s, extra_devices, None, objective)
    _PARTS[key] = [*found[-3:], (ids, tuple(map(weakref.ref, mine)), sol)]
    _PARTS.move_to_end(key)
    if len(_PARTS) > PARTS_KEPT:
        _PARTS.popitem(last=False)
    return sol


class _Model(cp_model.CpModel):
    """A CP-SAT model without the pre-PEP 8 aliases (`AddBoolOr` for `add_bool_or`, ...) OR-Tools binds onto every
    instance: sixty-odd closures over the model's own bound methods, found by a walk of `dir()` that takes a
    hundred times as long as the rest of making a model, and a reference cycle each that only the cyclic
    collector frees (some 770,000 objects over a 500-service plan's part solves). This module calls the PEP 8
    names only."""

    def _add_pre_pep8_methods(self) -> None:
        pass


def _solve_joint(cands: list[Candidate], limits: Limits, time_limit_s: float, extra_devices: dict[str, int] | None,
                 active: set[str] | None, objective: str) -> Solution:
    """The whole model over `cands` (see the module's docstring)."""
    m = _Model()
    pool_slots = {p: (n + (extra_devices or {}).get(p, 0)) * SLOTS_PER_DEVICE for p, n in limits.pool_devices.items()}
    n = {}
    uppers: dict[str, int] = {}
    for c in cands:
        # No cheapest plan needs more replicas of one shape than carry the whole demand plus the availability
        # minimums; the pools' limits stay in their own (switchable) constraints.
        upper = math.ceil(limits.demand[c.service] / c.capacity) + max(limits.min_replicas[c.service],
                                                                       limits.zones[c.service])
        uppers[c.key] = upper
        n[c.key] = m.new_int_var(0, upper, f"n[{c.key}]")
    lits: dict[str, cp_model.IntVar] = {}

    def lit(name: str):
        if name not in lits:
            lits[name] = m.new_bool_var(name)
        return lits[name]

    services = sorted(limits.demand)
    cost_terms = {s: [] for s in services}
    cap_terms = {s: [] for s in services}
    for c in cands:
        cost_terms[c.service].append(int(round(c.cost_per_hour * COST_SCALE)) * n[c.key])
        # Capacity rounds down and demand up, so that scaling to integers never lets a plan fall short.
        cap_terms[c.service].append(math.floor(c.capacity * CAP_SCALE + 1e-9) * n[c.key])
    served = {}
    by_service: dict[str, list[Candidate]] = {s: [] for s in services}
    for c in cands:
        by_service[c.service].append(c)
    for s in services:
        mine = by_service[s]
        need = math.ceil(limits.demand[s] * CAP_SCALE - 1e-9)
        if objective == "goodput":
            # Served share of demand in thousandths: bounded by what the chosen replicas carry.
            served[s] = m.new_int_var(0, 1000, f"served[{s}]")
            m.add(served[s] * need <= 1000 * sum(cap_terms[s]))
            _routed_split(m, s, mine, n, uppers, need, served[s] * need, limits, [])
        else:
            m.add(sum(cap_terms[s]) >= need).only_enforce_if(lit(f"demand:{s}"))
            _routed_split(m, s, mine, n, uppers, need, 1000 * need, limits, [lit(f"demand:{s}")])
        m.add(sum(n[c.key] for c in mine) >= limits.min_replicas[s]).only_enforce_if(lit(f"replicas:{s}"))
        if limits.zones[s] > 1:
            zs = sorted({c.zone for c in mine if c.zone != "-"})  # a pool without a zone label proves no spread
            zvars = []
            for z in zs:
                zv = m.new_bool_var(f"z[{s},{z}]")
                m.add(zv <= sum(n[c.key] for c in mine if c.zone == z))
                zvars.append(zv)
            m.add(sum(zvars) >= limits.zones[s]).only_enforce_if(lit(f"zones:{s}"))
            keep = math.ceil(limits.zone_keep.get(s, 0.0) * CAP_SCALE - 1e-9)
            if keep > 0:
                # Capacity, not presence: whichever zone is lost, the others still carry `keep`.
                for z in zs:
                    survivors = [math.floor(c.capacity * CAP_SCALE + 1e-9) * n[c.key] for c in mine
                                 if c.zone not in (z, "-")]
                    if survivors:
                        m.add(sum(survivors) >= keep).only_enforce_if(lit(f"zones:{s}"))
                    else:
                        m.add(lit(f"zones:{s}") == 0)
    for s, cap in sorted(limits.budget_hour.items()):
        if cap is not None:
            terms = [t for u in services if limits.parent.get(u, u) == s for t in cost_terms[u]]
            if terms:
                m.add(sum(terms) <= int(cap * COST_SCALE)).only_enforce_if(lit(f"budget:{s}"))
    for p, total in sorted(pool_slots.items()):
        on = [c for c in cands if p in c.pools]
        if on:
            m.add(sum(c.slots_on(p) * n[c.key] for c in on) <= total).only_enforce_if(lit(f"pool:{p}"))
            if p in limits.pool_nodes:
                _node_patterns(m, p, on, n, limits, (extra_devices or {}).get(p, 0), lit(f"pool:{p}"))
    all_cost = sum(t for s in services for t in cost_terms[s])
    if limits.total_budget_hour is not None:
        m.add(all_cost <= int(limits.total_budget_hour * COST_SCALE)).only_enforce_if(lit("budget:total"))
    m.add_assumptions([lits[k] for k in sorted(lits) if active is None or k in active])
    # Lexicographic. Cost objective: least cost first; then, at that cost, the most capacity above demand (each
    # replica's capacity in thousandths of its service's demand), which is the SLO margin, and between shapes of
    # equal margin the one whose prediction is calibrated (a borrowed one has no measured error band). Goodput
    # objective: the most demand served first; then the least cost for it.
    goodput = sum(served.values())
    if objective == "goodput":
        m.maximize(goodput)
    else:
        m.minimize(all_cost)
    small = len(cands) <= SMALL_MODEL
    solver = _solver(time_limit_s, small)
    status = solver.solve(m)
    name = solver.status_name(status)
    if status in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        best = int(round(solver.objective_value))
        gap = (abs(solver.objective_value - solver.best_objective_bound) / max(abs(solver.objective_value), 1e-9)
               if status == cp_model.FEASIBLE else 0.0)
        bound = solver.best_objective_bound
        first = {c.key: int(solver.value(n[c.key])) for c in cands}
        coef = {c.key: 2 * int(round(1000 * c.capacity / max(limits.demand[c.service], 1e-9))) + c.calibrated
                for c in cands}
        m.clear_objective()
        if objective == "goodput":
            m.add(goodput >= best)
            m.minimize(all_cost)
        else:
            m.add(all_cost <= best)
            measured = [c for c in cands if c.measured]
            if measured:
                # At the least cost, replicas whose figures the user measured come before shapes the measurements
                # say less of: a shape corrected only through its device or framework keeps more of the prior's
                # optimism, and would otherwise win the margin below for that reason alone.
                m.maximize(sum(n[c.key] for c in measured))
                for c in cands:
                    m.add_hint(n[c.key], first[c.key])
                pick = _solver(max(time_limit_s / 4, 1.0), small)
                if pick.solve(m) in (cp_model.OPTIMAL, cp_model.FEASIBLE):
                    m.add(sum(n[c.key] for c in measured) >= int(round(pick.objective_value)))
                m.clear_objective()
                m.clear_hints()
            m.maximize(sum(coef[c.key] * n[c.key] for c in cands))
        for c in cands:
            m.add_hint(n[c.key], first[c.key])
        second = _solver(max(time_limit_s / 4, 1.0), small)
        status2 = second.solve(m)
        values = ({k: int(second.value(v)) for k, v in n.items()}
                  if status2 in (cp_model.OPTIMAL, cp_model.FEASIBLE) else first)
        used = {k: v for k, v in values.items() if v > 0}
        cost = sum(c.cost_per_hour * used.get(c.key, 0) for c in cands)
        scale = 1000 if objective == "goodput" else COST_SCALE
        return Solution(name, dict(sorted(used.items())), round(cost, 6), best / scale, bound / scale, gap)
    core = []
    if status == cp_model.INFEASIBLE:
        index = {v.index: k for k, v in lits.items()}
        core = sorted(index[i] for i in solver.sufficient_assumptions_for_infeasibility())
        if not core:
            core = sorted(k for k in lits if active is None or k in active)
    return Solution(name, {}, 0.0, 0.0, 0.0, 0.0, core)


def _routed_split(m: cp_model.CpModel, s: str, mine: list[Candidate], n: dict[str, cp_model.IntVar],
                  uppers: dict[str, int], need: int, served: cp_model.LinearExprT, limits: Limits,
                  enforce: list[cp_model.IntVar]) -> None:
    """The even split and one-mode constraints of service `s` (see the module's docstring): what its router gives
    each replica is what the replica's capacity was searched for. `need` is its demand and `served` the load it
    is planned to serve, both in thousandths of a request/s or client, `served` a thousand times over."""
    agg = [c for c in mine if c.mode == "agg"]
    split = [c for c in mine if c.mode != "agg"]
    if s in limits.one_mode and agg and split:
        a = m.new_bool_var(f"a[{s}]")
        for c in agg:
            m.add(n[c.key] == 0).only_enforce_if(~a)
        for c in split:
            m.add(n[c.key] == 0).only_enforce_if(a)
    if need <= 0:
        return
    # A plain Service gives every pod it selects the same share: each aggregated replica, and each prefill/decode
    # unit (whose entry pods it selects as one replica), as the simulator's `random` router does. P/D units are
    # behind one wherever the router is not the endpoint picker (`routing.router_for`: only it knows the roles).
    for kind, even in ((agg, s in limits.even), (split, s in limits.one_mode)):
        if not even or len(kind) < 2:
            continue
        pods = sum(n[c.key] for c in kind)
        for c in kind:
            # A shape whose capacity carries the demand alone holds any even share of it.
            if math.floor(c.capacity * CAP_SCALE + 1e-9) >= need:
                continue
            u = m.new_bool_var(f"u[{c.key}]")
            m.add(n[c.key] <= uppers[c.key] * u)
            m.add(1000 * math.floor(c.capacity * CAP_SCALE + 1e-9) * pods >= served).only_enforce_if([u, *enforce])


def _node_patterns(m: cp_model.CpModel, pool: str, on: list[Candidate], n: dict[str, cp_model.IntVar],
                   limits: Limits, extra: int, enforce: cp_model.IntVar) -> None:
    """Exact packing of workers onto nodes of different sizes (the pattern formulation of bin packing)."""
    per_node, groups = limits.pool_nodes[pool]
    if extra:
        groups = groups + ((per_node, -(-extra // per_node)),)
    # (candidate, devices per worker, share, workers per replica) of every kind of worker on this pool.
    kinds = [(c, d, share, k) for c in on for d, share, k in c.workers_on(pool)]
    single = [x for x in kinds if x[1] <= per_node]
    multi = [x for x in kinds if x[1] > per_node]
    slices = [x for x in single if x[2] < 1]
    sizes = sorted({d for _, d, share, _ in single if share >= 1} | ({1} if slices else set()), reverse=True)
    cover: dict[int, list] = {k: [] for k in sizes}
    whole: list = []
    for gi, (devices, count) in enumerate(groups):
        ys = []
        for qi, pattern in enumerate(patterns(devices, sizes) if sizes else []):
            y = m.new_int_var(0, count, f"y[{pool},{gi},{qi}]")
            ys.append(y)
            for k, times in zip(sizes, pattern):
                if times:
                    cover[k].append(times * y)
        if multi and devices >= per_node:
            y = m.new_int_var(0, count, f"y[{pool},{gi},whole]")
            ys.append(y)
            whole.append(y)
        if ys:
            m.add(sum(ys) <= count)
    for size in sizes:
        need = [k * n[c.key] for c, d, share, k in single if share >= 1 and d == size]
        if size == 1 and slices:
            sliced = m.new_int_var(0, sum(d * c for d, c in groups), f"sliced[{pool}]")
            m.add(SLOTS_PER_DEVICE * sliced >= sum(int(round(share * SLOTS_PER_DEVICE)) * k * n[c.key]
                                                   for c, _, share, k in slices)).only_enforce_if(enforce)
            need.append(sliced)
        m.add(sum(need) <= sum(cover[size])).only_enforce_if(enforce)
    if multi:
        m.add(sum(k * -(-d // per_node) * n[c.key] for c, d, _, k in multi) <= sum(whole)).only_enforce_if(enforce)


SMALL_MODEL = 300
"""Candidates up to which a model is solved without presolve and probing (`_solver`)."""


def _solver(seconds: float, small: bool = False) -> cp_model.CpSolver:
    """Single worker, fixed seed and a deterministic time budget: the same model gives the same answer. A `small`
    model (one service's part of a fleet, a few dozen replica counts) skips presolve and probing: they pay on
    the joint model of a large inventory, but on a part they were 45% of its solving time (the 50-service case of
    `benchmarks/plan_scale.py`, same plans)."""
    solver = cp_model.CpSolver()
    solver.parameters.num_workers = 1
    solver.parameters.random_seed = 0
    solver.parameters.max_deterministic_time = seconds
    # The covering structure (capacity >= demand, devices <= pool) is LP-friendly; a fuller linearisation
    # gives the single worker the bounds it needs on large inventories.
    solver.parameters.linearization_level = 2
    if small:
        solver.parameters.cp_model_presolve = False
        solver.parameters.cp_model_probing_level = 0
    return solver


def minimal_conflict(candidates: list[Candidate], limits: Limits, core: list[str]) -> list[str]:
    """Shrink a conflict to a minimal one: drop each group whose removal leaves the rest still infeasible."""
    kept = list(core)
    for item in list(core):
        trial = [k for k in kept if k != item]
        if not trial:
            break
        if solve(candidates, limits, active=set(trial), time_limit_s=5.0).status == "INFEASIBLE":
            kept = trial
    return kept
