"""Discrete-event simulation of a deployed service in virtual time: the embedded default of `infra bench`.

Requests (seeded, from the service's workload) go through a router to engines (`infra.bench.engine`), one per
attention group of every worker of every allocation. The router is the one the plan's manifests render
(`ServicePlan.routing`, `infra.planner.routing`): the endpoint picker's load-aware choice (least outstanding
requests per unit of planned capacity), an HTTPRoute's weighted random choice of allocation (then least requests
among its engines, as Envoy-based gateways balance by default), or a Service's even random choice of pod; any of
them may be asked for instead, to see what another router would do. Disaggregated allocations send a request to
a prefill engine, then, once its KV cache has crossed the link (`EngineModel.transfer_s`), to a decode engine of
the allocation (by the same policy behind the endpoint picker, else by least outstanding requests); the client
sees the first token when the decode side has it. Each engine's runs of identical decode steps are one event, cut
short when a request arrives in the middle, so the cost grows with batch changes rather than with tokens.

Results are the harness's own `RequestRecord`s with ITL pooled as (gap, occurrences), so every figure goes through
`infra.bench.metrics.summarize` like an HTTP measurement does.
"""

from __future__ import annotations

import bisect
import heapq
import random
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import numpy as np

from infra.bench.engine import Engine, EngineModel, SimRequest, engine_model, kv_seconds_per_token, plan_allocation
from infra.bench.metrics import RequestRecord
from infra.bench.workload import Load, RequestSpec, generate
from infra.errors import IntentError, Location, Problem
from infra.intent.models import Workload
from infra.perf.serving import batch_slots
from infra.perf.shape import Deployment
from infra.perf.shape import Workload as MeanLoad
from infra.planner.routing import policy, route_weights

Policy = Literal["least-loaded", "round-robin", "weighted", "random"]
POLICIES = ("least-loaded", "round-robin", "weighted", "random")
MAX_ENGINES = 100_000
"""Most engines (attention groups) one simulated service may run: each is a scheduler in memory, and 100,000 take
about 200 MB; a thousand replicas of eight data-parallel groups is a large fleet."""
_FOREVER = 1 << 40


@dataclass
class Group:
    """The engines of one allocation: entry engines (aggregated, or prefill) and, when disaggregated, decode
    engines; `weight` is the load share of one entry engine (the replica's planned capacity over its entries),
    `route` the allocation's weight in an HTTPRoute, `per_replica` its entry engines per replica (pod)."""

    entry: list[Engine]
    decode: list[Engine] = field(default_factory=list)
    weight: float = 1.0
    label: str = ""
    route: float = 1.0
    per_replica: int = 1


class Router:
    """Spreads requests over engines: `least-loaded`, least outstanding requests per unit of weight; `round-robin`,
    smooth weighted round-robin; `random`, a seeded random engine with probability in proportion to its weight;
    `weighted`, a seeded random group (allocation) in proportion to its `route` weight, then the least loaded of
    its engines (`owner` gives each engine's group). Ties go to the lowest index so runs repeat exactly."""

    def __init__(self, weights: list[float], policy: Policy = "least-loaded", *, owner: list[int] | None = None,
                 route: list[float] | None = None, seed: int = 0):
        if policy not in POLICIES:
            raise IntentError(Problem(f"unknown router policy {policy!r}", Location(path="router"),
                                      f"use one of {', '.join(POLICIES)}"))
        self.inv = [1.0 / max(w, 1e-12) for w in weights]
        self.weights = list(weights)
        self.policy = policy
        self.load = [0] * len(weights)
        self._credit = [0.0] * len(weights)
        self._total = float(sum(weights))
        self._rng = random.Random(seed)
        self._cum: list[float] = []
        self._members: list[list[int]] = []
        if policy == "random":
            self._cum = _cumulative(self.weights)
        elif policy == "weighted":
            owner = owner if owner is not None else [0] * len(weights)
            route = route if route is not None else [1.0] * (max(owner, default=0) + 1)
            members: list[list[int]] = [[] for _ in route]
            for i, g in enumerate(owner):
                members[g].append(i)
            # A group without engines gets nothing, whatever its route weight says.
            self._members = members
            self._cum = _cumulative([r if members[g] else 0.0 for g, r in enumerate(route)])
        if policy in ("random", "weighted") and (not self._cum or self._cum[-1] <= 0):
            raise IntentError(Problem("no engine has any route weight", Location(path="routing.weights"),
                                      "give at least one allocation a weight above 0"))

    def pick(self) -> int:
        """The engine for the next request (counted as outstanding there until `done`)."""
        if self.policy == "least-loaded":
            load, inv = self.load, self.inv
            best, score = 0, (load[0] + 1) * inv[0]
            for i in range(1, len(load)):
                s = (load[i] + 1) * inv[i]
                if s < score:
                    best, score = i, s
        elif self.policy == "random":
            best = _draw(self._cum, self._rng)
        elif self.policy == "weighted":
            members = self._members[_draw(self._cum, self._rng)]
            load = self.load
            best = members[0]
            for i in members[1:]:
                if load[i] < load[best]:
                    best = i
        else:
            credit = self._credit
            for i, w in enumerate(self.weights):
                credit[i] += w
            best = max(range(len(credit)), key=credit.__getitem__)
            credit[best] -= self._total
        self.load[best] += 1
        return best

    def done(self, i: int) -> None:
        self.load[i] -= 1


def _cumulative(weights: list[float]) -> list[float]:
    out, total = [], 0.0
    for w in weights:
        total += max(w, 0.0)
        out.append(total)
    return out


def _draw(cum: list[float], rng: random.Random) -> int:
    """Index i with probability weight[i] / total (a zero weight is never drawn)."""
    return min(bisect.bisect_right(cum, rng.random() * cum[-1]), len(cum) - 1)


def front_router(groups: list[Group], policy: Policy, seed: int = 0) -> tuple[Router, dict[int, Router]]:
    """The router over the groups' entry engines (in group order) and, per disaggregated group, the router over its
    decode engines. `random` weighs each entry engine as an even share of its pod (what a Service's kube-proxy
    does); the others weigh it by its planned capacity. Decode engines behind an HTTPRoute or a Service are
    chosen by the least outstanding requests: the P/D router inside the allocation sees their load."""
    weights: list[float] = []
    owner: list[int] = []
    for g, grp in enumerate(groups):
        for _ in grp.entry:
            weights.append(1.0 / max(grp.per_replica, 1) if policy == "random" else grp.weight)
            owner.append(g)
    front = Router(weights, policy, owner=owner, route=[grp.route for grp in groups], seed=seed)
    inner: Policy = "least-loaded" if policy in ("random", "weighted") else policy
    back = {g: Router([1.0] * len(grp.decode), inner) for g, grp in enumerate(groups) if grp.decode}
    return front, back


@dataclass
class EngineStats:
    name: str
    role: str
    steps: int
    busy_s: float
    preemptions: int


@dataclass
class SimResult:
    """What a simulated run measured."""

    records: list[RequestRecord]
    itl_pool: tuple[np.ndarray, np.ndarray]
    """(gap seconds, occurrences) over every request's successive tokens."""
    group: np.ndarray
    """Index of the group (allocation) that served each request."""
    cached_tokens: np.ndarray
    """Prompt tokens each request found in the prefix cache."""
    engines: list[EngineStats]
    groups: list[str]
    load: Load
    wall_s: float
    """Real seconds the simulation took."""
    preemptions: int = 0
    truncated: int = 0
    """Requests whose output was cut at the engine's max_model_len."""


def simulate(groups: list[Group], load: Load, *, router: Policy = "least-loaded", seed: int = 0) -> SimResult:
    """Run `load` through the engines of `groups` until every request has finished or failed; `seed` drives the
    router's random choices."""
    t0 = time.perf_counter()
    specs = load.requests
    n = len(specs)
    engines: list[Engine] = []
    owner: list[int] = []
    entry_idx: list[list[int]] = []
    decode_idx: list[list[int]] = []
    for g, grp in enumerate(groups):
        ids = []
        for e in grp.entry:
            ids.append(len(engines))
            engines.append(e)
            owner.append(g)
        entry_idx.append(ids)
        dids = []
        for e in grp.decode:
            dids.append(len(engines))
            engines.append(e)
            owner.append(g)
        decode_idx.append(dids)
    entries = [i for ids in entry_idx for i in ids]
    front, back = front_router(groups, router, seed)

    t_send = np.zeros(n)
    first = np.full(n, np.nan)
    end = np.full(n, np.nan)
    out_tok = np.zeros(n, dtype=np.int64)
    served_by = np.full(n, -1, dtype=np.int64)
    cached = np.zeros(n, dtype=np.int64)
    errors: dict[int, str] = {}
    gap_v: list[float] = []
    gap_w: list[int] = []
    version = [0] * len(engines)

    heap: list[tuple[float, int, int, int, Any]] = []
    counter = 0
    ENQUEUE, STEP, HANDOFF, SEND = 0, 1, 2, 3

    def push(t: float, kind: int, a: int, b: Any) -> None:
        nonlocal counter
        counter += 1
        heapq.heappush(heap, (t, counter, kind, a, b))

    def start(i: int, now: float) -> None:
        plan = engines[i].begin(now, _FOREVER)
        if plan is not None:
            version[i] += 1
            push(plan.end, STEP, i, version[i])

    def send(idx: int, now: float) -> None:
        spec = specs[idx]
        t_send[idx] = now
        k = front.pick()
        i = entries[k]
        served_by[idx] = owner[i]
        req = SimRequest(idx, spec.input_tokens, spec.output_tokens, spec.prefix_group, spec.prefix_tokens)
        req.context = req.entry = k
        why = engines[i].rejects(req)
        if why is not None:
            fail(idx, why, now)
            front.done(k)
            return
        push(now + engines[i].model.request_s, ENQUEUE, i, req)

    def enqueue(i: int, req: SimRequest, now: float) -> None:
        e = engines[i]
        e.add(req, now)
        plan = e.in_flight
        if plan is None:
            start(i, now)
        elif plan.steps > 1:
            before = plan.end
            after = e.cut(now)
            if after != before:
                version[i] += 1
                push(after, STEP, i, version[i])

    # Closed loop: each client sends its next request when the last one returns.
    closed = load.concurrency is not None
    next_closed = 0

    def follow(now: float) -> None:
        nonlocal next_closed
        if closed and next_closed < n:
            j = next_closed
            next_closed += 1
            push(now, SEND, j, None)

    def fail(idx: int, why: str, now: float) -> None:
        errors[idx] = f"rejected: {why}"
        end[idx] = now
        follow(now)

    arrivals: list[float] = []
    if closed:
        for _ in range(min(load.concurrency or 0, n)):
            follow(0.0)
    else:
        arrivals = [s.at if s.at is not None else 0.0 for s in specs]
    a = 0
    while True:
        if a < len(arrivals) and (not heap or arrivals[a] <= heap[0][0]):
            send(a, arrivals[a])
            a += 1
            continue
        if not heap:
            break
        now, _, kind, i, b = heapq.heappop(heap)
        if kind == ENQUEUE:
            enqueue(i, b, now)
            continue
        if kind == SEND:
            send(i, now)
            continue
        if kind == HANDOFF:
            g = owner[i]
            k = back[g].pick()
            j = decode_idx[g][k]
            why = engines[j].rejects(b)
            if why is not None:
                back[g].done(k)
                front.done(b.entry)
                fail(b.id, why, now)
                continue
            b.context = k
            b.last_token = now
            enqueue(j, b, now)
            continue
        if b != version[i]:
            continue
        e = engines[i]
        res = e.finish()
        if res.gaps:
            gap_v.append(res.step_s)
            gap_w.append(res.gaps)
        for _req, gap in res.resumed:
            gap_v.append(gap)
            gap_w.append(1)
        role = e.role
        for req in res.first:
            if role != "prefill":
                first[req.id] = req.first_token
        for req in res.done:
            idx = req.id
            if role == "prefill":
                cached[idx] = req.cached_tokens
                t_hand = now + e.model.transfer_s(req.input_tokens)
                if req.output_tokens <= 1:
                    front.done(req.entry)
                    first[idx] = end[idx] = t_hand
                    out_tok[idx] = req.generated
                    follow(t_hand)
                else:
                    first[idx] = t_hand
                    push(t_hand, HANDOFF, i, req)
                continue
            if role == "decode":
                back[owner[i]].done(req.context)
                front.done(req.entry)
            else:
                front.done(req.entry)
                cached[idx] = req.cached_tokens
            end[idx] = now
            out_tok[idx] = req.generated
            follow(now)
        start(i, now)

    records = []
    for idx, spec in enumerate(specs):
        if idx in errors:
            records.append(RequestRecord(idx, float(t_send[idx]), float(t_send[idx]), input_tokens=spec.input_tokens,
                                         error=errors[idx]))
            continue
        ts = float(t_send[idx])
        records.append(RequestRecord(idx, ts, ts, ttft=float(first[idx]) - ts, e2e=float(end[idx]) - ts,
                                     input_tokens=spec.input_tokens, output_tokens=int(out_tok[idx])))
    stats = [EngineStats(e.name, e.role, e.steps, e.busy_s, e.preemptions) for e in engines]
    truncated = sum(1 for r, s in zip(records, specs) if r.ok and r.output_tokens < s.output_tokens)
    return SimResult(records, (np.asarray(gap_v, dtype=float), np.asarray(gap_w, dtype=float)), served_by, cached,
                     stats, [grp.label for grp in groups], load, time.perf_counter() - t0,
                     sum(s.preemptions for s in stats), truncated)


def plan_groups(plan: Any, service: str, catalog: Any = None, calibration: Any = None,
                workload: Any = None) -> list[Group]:
    """One group per allocation of the service: every attention group of every worker of every replica (their
    engines corrected by the user's `calibration` for a run of `workload`, see `engine_model`)."""

    svc, _ = plan_allocation(plan, service, 0)
    engines = 0
    for a, alloc in enumerate(svc.allocations):
        per_p, per_d = _attention_groups(alloc)
        engines += alloc.replicas * (per_p + per_d)
        if engines > MAX_ENGINES:
            index = [s.name for s in plan.spec.services].index(service)
            raise IntentError(Problem(
                f"service {service} runs {engines:,} engines up to this allocation (replicas x workers x "
                f"attention_dp), above the {MAX_ENGINES:,} one simulation holds",
                plan.locate(("spec", "services", index, "allocations", a, "replicas")),
                "simulate a plan of fewer replicas (re-plan the intent), or measure the deployment itself with "
                "--endpoint"))
    groups = []
    weights = _route_weights(svc)
    for a, alloc in enumerate(svc.allocations):
        route = float(weights.get(f"a{a}", 0))
        roles = sorted(alloc.engines)
        models = {role: engine_model(plan, service, a, role, catalog, calibration, workload) for role in roles}
        label = f"{alloc.device}/{alloc.framework}/{alloc.mode}#{a}"
        per_p, per_d = _attention_groups(alloc)
        if alloc.mode == "disagg":
            entry = [Engine(models["prefill"], "prefill", f"{label}/r{r}/p{w}") for r in range(alloc.replicas)
                     for w in range(per_p)]
            decode = [Engine(models["decode"], "decode", f"{label}/r{r}/d{w}") for r in range(alloc.replicas)
                      for w in range(per_d)]
            groups.append(Group(entry, decode, alloc.capacity_per_replica / per_p, label, route, per_p))
        else:
            entry = [Engine(models["agg"], "agg", f"{label}/r{r}/g{w}") for r in range(alloc.replicas)
                     for w in range(per_p)]
            groups.append(Group(entry, [], alloc.capacity_per_replica / per_p, label, route, per_p))
    return groups


def deployment_group(dep: Deployment, workers: dict[str, Any], link: float, load: MeanLoad) -> Group:
    """The engines of one deployment of the performance model (`infra.perf.estimate.build_workers`'s `workers` and
    `link`) under `load`: one per attention group of every worker, stepping at its worker's prices, holding the
    batch the prediction lets it run (`batch_slots`, what a plan renders as max_num_seqs) within its role's token
    budget, a prefill engine's KV cache crossing `link` bytes/s. How a measured deployment is replayed."""

    def engines(role: str) -> list[Engine]:
        w, spec = workers[role], getattr(dep, role)
        model = EngineModel.from_worker(
            w, max_num_seqs=max(1, batch_slots(w, spec, load)), max_num_batched_tokens=spec.max_num_tokens,
            kv_tokens=w.memory.kv_tokens,
            kv_bytes_per_token_s=kv_seconds_per_token(w, link) if role == "prefill" else 0.0)
        count = (spec.workers or 1) * w.parallel.attention_dp
        return [Engine(model, role, f"{role}{i}") for i in range(count)]  # type: ignore[arg-type]

    if dep.mode == "agg":
        return Group(engines("agg"), label=f"{dep.device}/{dep.framework}/agg")
    return Group(engines("prefill"), engines("decode"), label=f"{dep.device}/{dep.framework}/disagg")


def _attention_groups(alloc: Any) -> tuple[int, int]:
    """(engines of the entry role, of the decode role) in one replica of an allocation: a worker runs one engine
    per attention group, and a disaggregated unit's decode workers have their own layout's groups."""
    dp = alloc.parallel.attention_dp
    if alloc.mode != "disagg":
        return dp, 0
    decode_dp = alloc.decode_parallel.attention_dp if alloc.decode_parallel is not None else dp
    return (alloc.prefill_workers or 1) * dp, (alloc.decode_workers or 1) * decode_dp


def _route_weights(svc: Any) -> dict[str, int]:
    """The HTTPRoute weights of a service's allocations: the plan's, or (for a plan routed otherwise, simulated
    with --router weighted) those an HTTPRoute would carry."""

    if svc.routing.weights:
        return dict(svc.routing.weights)
    return route_weights([a.model_dump(mode="json") for a in svc.allocations])


def plan_policy(plan: Any, service: str) -> Policy:
    """The router policy of what the plan's manifests render for the service (`ServicePlan.routing`)."""

    svc, _ = plan_allocation(plan, service, 0)
    return policy(svc.routing.router)  # type: ignore[return-value]


def service_load(plan: Any, service: str, *, requests: int, seed: int = 0, rate: float | None = None,
                 concurrency: int | None = None, input_tokens: int | None = None, output_tokens: int | None = None,
                 intent: str | Path | None = None, plan_path: str | Path | None = None) -> Load:
    """The requests of a run: the service's workload as the plan records it (its peak), or the given load."""
    from pydantic import ValidationError as PydanticValidationError


    svc, _ = plan_allocation(plan, service, 0)
    try:
        workload = Workload.model_validate(svc.workload)
    except PydanticValidationError as exc:
        # `load_plan` refuses such a plan with each problem's line; this is a plan made in memory.
        first = exc.errors(include_url=False)[0]
        index = [s.name for s in plan.spec.services].index(service)
        raise IntentError(Problem(f"the plan's workload does not validate: {first['msg']}",
                                  plan.locate(("spec", "services", index, "workload", *first["loc"])),
                                  "re-plan the intent, or give --rate/--concurrency and token lengths")) from None
    base = _intent_dir(plan, intent, plan_path, workload)
    return generate(workload, requests=requests, seed=seed, base=base, rate=rate, concurrency=concurrency,
                    input_tokens=input_tokens, output_tokens=output_tokens)


def _intent_dir(plan: Any, intent: str | Path | None, plan_path: str | Path | None, workload: Any) -> Path:
    """Where trace paths in the workload are relative to: the intent's directory."""
    given = Path(intent) if intent is not None else Path(plan.spec.provenance.intent)
    traced = [d.trace for d in (workload.input_tokens, workload.output_tokens) if d is not None and d.trace]
    if not traced:
        return given.parent
    for base in (given.parent, *([Path(plan_path).parent / given.parent] if plan_path else [])):
        if all((base / t).exists() for t in traced):
            return base
    raise IntentError(Problem(f"trace {traced[0]} of the plan's workload not found next to the intent {given}",
                              plan.locate(("spec", "provenance", "intent")),
                              "give --intent with the intent file the plan was made from"))


def simulate_plan(plan: Any, service: str, *, requests: int = 2000, seed: int = 0, router: Policy | None = None,
                  catalog: Any = None, load: Load | None = None, calibration: Any = None,
                  **load_args: Any) -> SimResult:
    """Simulate a service of a DeploymentPlan under its workload (or `load`, or the overrides in `load_args`:
    rate, concurrency, input_tokens, output_tokens, intent, plan_path), routed as its manifests route (or by
    `router`); with the user's `calibration`, its engines corrected by it."""
    if load is None:
        load = service_load(plan, service, requests=requests, seed=seed, **load_args)
    mean = None
    if calibration is not None and load.requests:
        n = len(load.requests)
        mean = MeanLoad(isl=max(1.0, sum(r.input_tokens for r in load.requests) / n),
                        osl=max(1.0, sum(r.output_tokens for r in load.requests) / n),
                        concurrency=load.concurrency, rate=None if load.concurrency else (load.rate or 1.0))
    return simulate(plan_groups(plan, service, catalog, calibration, mean), load,
                    router=router or plan_policy(plan, service), seed=seed)


__all__ = [
    "POLICIES",
    "Group",
    "RequestSpec",
    "Router",
    "SimResult",
    "front_router",
    "plan_groups",
    "plan_policy",
    "service_load",
    "simulate",
    "simulate_plan",
]
