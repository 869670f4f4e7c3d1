"""A pipeline service simulated stage by stage, with asynchronous hand-off between stages.

Requests arrive at the first stage as the service's workload says. Each stage then serves them with its own
servers, and hands each request on when the intent says it does: at its first output when the stage streams
(tokens, audio seconds, video frames), else when it is done; the hand-off's transfer time from the plan
(`PipelineStage.handoff`, when the plan has one) is added on the way; a stage fed by several (two encoders into
one LLM) starts when the last of them hands on. Stages feed forward only, so simulating them in order — each on
the arrival times the ones before it produced — is exact, and each stage sees the bursty,
correlated arrivals of a real pipeline rather than the Poisson process the planner assumed.

- LLM stages run through the engine simulator (`infra.bench.simulate`) on their plan entries, lengths drawn from
  the stage's own workload.
- Encoders, codecs and DiTs are timed by the stage model (`infra.perf.stages`, as the planner timed them) on
  their plan entries' devices, precision and sequence-parallel degree. A replica serves one request at a time,
  FIFO; requests reach replicas at random, as a Kubernetes Service spreads them (CPU stages: one shared queue).
  A stage whose first output comes early (a codec's first audio chunk) works in chunks of that size; when
  the stage before it streams, the chunks' input arrives spread over that stage's output, so the request may sit
  in this stage with nothing to do: that wait is the **bubble**. A stage that needs its whole input (an encoder,
  a DiT) starts when the last of it arrives, and the time from the first hand-off to then is its bubble.
- CPU stages are a pool of `cpu_cores` servers, `cpu_time` each.
- An LLM stage fed by a streaming stage cannot finish before its input has: its end is pushed to the upstream's
  end when that comes later, and the difference is its bubble (its KV slot held while it waits is not modelled).

A pipeline driven by N clients (a closed loop) sends each client's next request when its previous one ends; as
the stages run one after another, the send times come from the E2Es of the run before, repeated until they
settle (`_closed_loop`).

Per stage the run reports utilisation (busy time over servers x span), queueing and bubble; per request the
pipeline's TTFT (arrival to the last stage's first output), E2E (to the last stage's last output) and each
stage's first output from arrival, which verification judges against the pipeline's objectives, and each stage's
own first output and latency (without its bubble), judged against the budget the planner gave the stage.
"""

from __future__ import annotations

import heapq
import math
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from infra.bench.metrics import RequestRecord
from infra.bench.run import predicted
from infra.bench.simulate import MAX_ENGINES, plan_groups, plan_policy, service_load, simulate
from infra.bench.verdict import judge, judge_objective
from infra.bench.workload import Load, RequestSpec
from infra.catalog.loader import load_catalog
from infra.errors import CatalogError, InfraError, IntentError, Location, Problem
from infra.intent.models import StageWork
from infra.perf.calibration import lookup
from infra.perf.stages import chunks_of, stage_load, stage_timing


@dataclass
class StageRun:
    """One stage's part of a pipeline run; times are absolute seconds, NaN where a request never reached or
    failed in this stage."""

    name: str
    kind: str
    unit: str | None
    servers: int
    arrive: np.ndarray
    first: np.ndarray
    """First output handed on."""
    end: np.ndarray
    """Last output handed on (after any bubble)."""
    own_end: np.ndarray
    """When the stage's own work would have ended had its input all been there: `end` minus the bubble."""
    bubble: np.ndarray
    busy_s: float
    wait: np.ndarray | None = None
    """Queueing for a free server (not for LLM stages, whose queueing is inside their engines)."""
    errors: dict[int, str] = field(default_factory=dict)
    records: list[RequestRecord] | None = None
    """Stage-local records of an LLM stage (times from its arrival), for TPOT and ITL."""
    itl_pool: tuple[np.ndarray, np.ndarray] | None = None


@dataclass
class PipelineRun:
    service: str
    arrive: np.ndarray
    stages: list[StageRun]
    load: Load
    note: str | None = None
    """How a closed loop was simulated."""

    @property
    def span(self) -> float:
        ends = np.concatenate([s.end for s in self.stages])
        ends = ends[np.isfinite(ends)]
        return float(ends.max() - self.arrive.min()) if ends.size else 0.0

    @property
    def errors(self) -> dict[int, str]:
        out: dict[int, str] = {}
        for s in self.stages:
            for i, why in s.errors.items():
                out.setdefault(i, f"{s.name}: {why}")
        return out


def _pipeline(plan: Any, service: str) -> Any:
    names = [p.service for p in plan.spec.pipelines]
    if service not in names:
        raise IntentError(Problem(f"the plan has no pipeline {service!r}" + (
            f" (it has {', '.join(names)})" if names else ""), Location(path="spec.pipelines"),
            "give the name of a pipeline service"))
    return plan.spec.pipelines[names.index(service)]


def _entry(plan: Any, unit: str) -> Any:
    return next(s for s in plan.spec.services if s.name == unit)


def _handoff(stage: Any) -> tuple[float, float]:
    """(seconds to move the first unit, seconds to move all of it) to the next stage."""
    h = stage.handoff
    if h is None:
        return 0.0, 0.0
    return float(h.first_ms) / 1000, float(h.total_ms) / 1000


def _chunked(arrive: np.ndarray, ready: np.ndarray, servers: list[tuple[float, float]], first_fraction: float,
             spread: np.random.Generator | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray,
                                                                float]:
    """Requests served one at a time per server, FIFO by when their input is there.

    `arrive[i]` is when request i's first input reaches the stage, `ready[i]` when the last of it does.
    `servers[s]` = (work seconds, fixed seconds per request) on server s. A stage with `first_fraction` < 1
    works in 1 / first_fraction chunks, the first (with the fixed part) on arrival, the others as their input
    comes in evenly until `ready`; otherwise a request is one piece, started when all its input is there.
    A request stays on the server its first piece went to (the engine holds its state); between its pieces the
    server serves others. A request goes to the server that frees first (one shared queue, as the cores of one
    process) or, with `spread`, to a server drawn at random (replicas behind a Kubernetes Service, which
    kube-proxy picks at random, each with its own queue). Returns (first output, end, queueing, bubble, busy
    seconds) per request."""

    n = len(arrive)
    chunks = chunks_of(first_fraction)
    release = []
    for i in np.flatnonzero(np.isfinite(arrive)):
        a, r = float(arrive[i]), float(max(ready[i], arrive[i]))
        if chunks == 1:
            release.append((r, int(i), 0))
        else:
            release.extend((a + (r - a) * j / (chunks - 1), int(i), j) for j in range(chunks))
    release.sort()
    at_server = [0.0] * len(servers)
    free = [(0.0, s) for s in range(len(servers))]
    home = np.full(n, -1, dtype=np.int64)
    done = arrive.copy()
    first = np.full(n, np.nan)
    wait = np.zeros(n)
    bubble = np.zeros(n)
    busy = 0.0
    drawn = spread.integers(0, len(servers), size=n) if spread is not None else None
    for t, i, j in release:
        if j == 0 and drawn is not None:
            home[i] = drawn[i]
        elif j == 0:
            while True:
                when, s = heapq.heappop(free)
                if when == at_server[s]:
                    break
            home[i] = s
        s = int(home[i])
        work, fixed = servers[s]
        if chunks == 1:
            dur = work + fixed
        elif j == 0:
            dur = first_fraction * work + fixed
        else:
            dur = work * (1 - first_fraction) / (chunks - 1)
        prev = float(done[i]) if j else float(arrive[i])
        bubble[i] += max(0.0, t - prev)
        ready_at = max(t, prev)
        start = max(ready_at, at_server[s])
        wait[i] += start - ready_at
        done[i] = at_server[s] = start + dur
        busy += dur
        heapq.heappush(free, (at_server[s], s))
        if j == 0:
            first[i] = done[i]
    return first, np.where(np.isfinite(arrive), done, np.nan), wait, bubble, busy


def _servers_within(plan: Any, servers: int, where: tuple[str | int, ...]) -> None:
    """Refuse a stage served by more servers (cores, replicas) than one simulation holds."""

    if servers > MAX_ENGINES:
        raise IntentError(Problem(f"the stage runs on {servers:,} servers (cores or replicas), above the "
                                  f"{MAX_ENGINES:,} one simulation holds", plan.locate(where),
                                  "simulate a plan of fewer replicas or cores (re-plan the intent)"))


def _stage_servers(plan: Any, entry: Any, work: dict[str, Any], catalog: Any,
                   where: tuple[str | int, ...] = ()) -> tuple[list[tuple[float, float]], float]:
    """(work seconds, fixed seconds) per replica of a non-LLM stage, and the share of its work done at its first
    output — timed by the stage model, as the planner timed it. `where` is the stage's path in the plan, at which
    the stage model's problems with its work are told."""

    at = ("spec", "services", [s.name for s in plan.spec.services].index(entry.name))
    # A name the catalog lacks is told at the plan's line that gives it.
    lookups = [(catalog.model, entry.model or "", (*at, "model"))] + [
        (catalog.device, alloc.device, (*at, "allocations", a, "device")) for a, alloc in enumerate(entry.allocations)]
    for find, name, named_at in lookups:
        try:
            find(name)
        except CatalogError as exc:
            raise CatalogError([Problem(p.message, plan.locate(named_at), p.fix) for p in exc.problems]) from None
    model = catalog.model(entry.model or "")
    _servers_within(plan, sum(a.replicas for a in entry.allocations), (*where, "unit"))
    try:
        load = stage_load(model, StageWork.model_validate(work))
    except InfraError as exc:
        # The stage model names the field of the stage it needs (`work.audio`); in the plan that is this stage's.
        raise type(exc)([Problem(p.message, plan.locate((*where, *p.location.path.split("."))), p.fix)
                         for p in exc.problems]) from None
    servers = []
    for alloc in entry.allocations:
        device = catalog.device(alloc.device)
        factors = lookup("vllm", device).factors
        t = stage_timing(model, device, alloc.precision, alloc.parallel.sp, load, factors)
        servers += [(t.service_s - t.fixed_s, t.fixed_s)] * alloc.replicas
    return servers, load.first_fraction


LENGTH_DRAWS = 4096
"""An LLM stage's lengths are the first n of at least this many draws, so that a run of any size (and the
emulator, which cannot know how many requests will come) sees the same lengths in the same order."""


def stage_lengths(plan: Any, unit: str, n: int, seed: int, intent: Any = None,
                  plan_path: Any = None) -> list[RequestSpec]:
    """Prompt and output lengths of the first n requests to LLM stage `unit`, from its own workload."""

    load = service_load(plan, unit, requests=max(n, LENGTH_DRAWS), seed=seed, rate=1.0, intent=intent,
                        plan_path=plan_path)
    return load.requests[:n]


def _llm_stage(plan: Any, unit: str, arrive: np.ndarray, ready: np.ndarray, *, seed: int, catalog: Any,
               intent: Any, plan_path: Any) -> StageRun:

    n = len(arrive)
    lengths = stage_lengths(plan, unit, n, seed, intent=intent, plan_path=plan_path)
    live = np.flatnonzero(np.isfinite(arrive))
    order = live[np.argsort(arrive[live], kind="stable")]
    specs = []
    for k, i in enumerate(order):
        s = lengths[i]
        specs.append(RequestSpec(k, float(arrive[i]), s.input_tokens, s.output_tokens, s.prefix_group,
                                 s.prefix_tokens))
    groups = plan_groups(plan, unit, catalog)
    sim = simulate(groups, Load(specs, None, None, "pipeline"), router=plan_policy(plan, unit), seed=seed)
    first = np.full(n, np.nan)
    own = np.full(n, np.nan)
    errors: dict[int, str] = {}
    records = []
    for k, i in enumerate(order):
        r = sim.records[k]
        records.append(RequestRecord(int(i), r.t_sched, r.t_send, ttft=r.ttft, e2e=r.e2e, error=r.error,
                                     input_tokens=r.input_tokens, output_tokens=r.output_tokens))
        if not r.ok:
            errors[int(i)] = r.error or "failed"
            continue
        assert r.ttft is not None and r.e2e is not None
        first[i] = r.t_send + r.ttft
        own[i] = r.t_send + r.e2e
    end = np.fmax(own, np.where(np.isfinite(own), ready, np.nan))
    busy = sum(e.busy_s for e in sim.engines)
    return StageRun("", "llm", unit, len(sim.engines), arrive, first, end, own, end - own, busy, None, errors,
                    records, sim.itl_pool)


CLOSED_LOOP_ROUNDS = 6
"""Fixed-point steps from a pipeline's clients to the arrival times they produce."""


def closed_arrivals(clients: int, e2e: np.ndarray) -> np.ndarray:
    """Send times of `clients` clients with no think time, request i going to client i mod clients, each sent
    when the client's previous request's E2E (`e2e`, per request) has passed."""
    out = np.zeros(len(e2e))
    for c in range(min(clients, len(e2e))):
        mine = np.arange(c, len(e2e), clients)
        out[mine[1:]] = np.cumsum(e2e[mine[:-1]])
    return out


def _closed_loop(plan: Any, service: str, clients: int, *, requests: int, seed: int, catalog: Any,
                 intent: Any, plan_path: Any) -> PipelineRun:
    """A closed loop, stage by stage: each client's next request leaves when its last one's E2E has passed. The
    E2Es come from the previous step's run (first: the mean E2E of a lone request through the pipeline), mixed
    geometrically with the step before so that the steps settle; a request that failed holds its client for the
    mean E2E."""
    lone = simulate_pipeline(plan, service, requests=1, seed=seed, rate=1.0, catalog=catalog, intent=intent,
                             plan_path=plan_path)
    start = float(np.nan_to_num(lone.stages[-1].end - lone.arrive, nan=1.0)[0])
    e2e = np.full(requests, max(start, 1e-3))
    run = None
    for _ in range(CLOSED_LOOP_ROUNDS):
        run = simulate_pipeline(plan, service, requests=requests, seed=seed, clients=clients, catalog=catalog,
                                intent=intent, plan_path=plan_path, arrivals=closed_arrivals(clients, e2e))
        got = run.stages[-1].end - run.arrive
        got = np.where(np.isfinite(got), got, np.nanmean(got) if np.isfinite(got).any() else e2e)
        e2e = np.sqrt(e2e * np.maximum(got, 1e-6))
    assert run is not None
    span = float(run.arrive.max() - run.arrive.min())
    run.note = (f"{clients} clients in a closed loop: each request sent when its client's previous one ended in "
                f"the run before ({CLOSED_LOOP_ROUNDS} steps to settle); "
                f"{(len(run.arrive) - 1) / span:.4g} requests/s" if span > 0 else f"{clients} clients")
    return run


def simulate_pipeline(plan: Any, service: str, *, requests: int = 2000, seed: int = 0, rate: float | None = None,
                      clients: int | None = None, catalog: Any = None, intent: Any = None,
                      plan_path: Any = None, arrivals: np.ndarray | None = None) -> PipelineRun:
    """Run `requests` requests of pipeline `service` through its stages (at its peak rate, or `rate`, or sent at
    `arrivals`; a pipeline driven by clients, or given `clients`, runs as a closed loop: `_closed_loop`)."""

    catalog = catalog or load_catalog()
    pipe = _pipeline(plan, service)
    units = [st.unit for st in pipe.stages if st.unit is not None]
    if not units:
        raise IntentError(Problem(f"pipeline {service} has no stage on accelerators to simulate",
                                  Location(path="spec.pipelines"), "plan a pipeline with a model stage"))
    entry0 = _entry(plan, units[0])
    if arrivals is None and rate is None and (clients is not None or entry0.demand.unit == "clients"):
        return _closed_loop(plan, service, clients or max(1, round(entry0.demand.value)), requests=requests,
                            seed=seed, catalog=catalog, intent=intent, plan_path=plan_path)
    if arrivals is not None:
        drawn = service_load(plan, units[0], requests=requests, seed=seed, rate=1.0, intent=intent,
                             plan_path=plan_path)
        load = Load([replace(r, at=float(t)) for r, t in zip(drawn.requests, arrivals)], None, clients, "closed")
    else:
        load = service_load(plan, units[0], requests=requests, seed=seed, rate=rate, intent=intent,
                            plan_path=plan_path)
    arrive0 = np.array([s.at if s.at is not None else 0.0 for s in load.requests])
    runs: list[StageRun] = []
    handed: list[tuple[np.ndarray, np.ndarray]] = []
    """Per stage: when its output starts reaching the stage it feeds, and when the last of it does."""
    for k, (st, ins) in enumerate(zip(pipe.stages, pipe.inputs())):
        # A stage starts when the last of its inputs has started to arrive, and has all its input when the last
        # has arrived; a request lost in any input is lost here (NaN).
        arrive = np.max([handed[i][0] for i in ins], axis=0) if ins else arrive0.copy()
        ready = np.max([handed[i][1] for i in ins], axis=0) if ins else arrive0.copy()
        where = ("spec", "pipelines", [p.service for p in plan.spec.pipelines].index(service), "stages", k)
        if st.kind != "llm" and not st.work:
            raise IntentError(Problem(f"stage {st.name} of pipeline {service} records no work per request, which "
                                      "its timing needs", plan.locate(where),
                                      "re-plan the intent with this version of infra"))
        if st.kind == "llm":
            assert st.unit is not None
            run = _llm_stage(plan, st.unit, arrive, ready, seed=seed + 1 + k, catalog=catalog, intent=intent,
                             plan_path=plan_path)
        else:
            if st.kind == "cpu":
                seconds = float(_cpu_time(st.work))
                _servers_within(plan, int(st.cpu_cores or 1), (*where, "cpu_cores"))
                servers = [(seconds, 0.0)] * int(st.cpu_cores or 1)
                fraction = 1.0
            else:
                assert st.unit is not None
                servers, fraction = _stage_servers(plan, _entry(plan, st.unit), st.work, catalog, where)
            first, end, wait, bubble, busy = _chunked(
                arrive, ready, servers, fraction, None if st.kind == "cpu" else np.random.default_rng(seed + 101 + k))
            run = StageRun("", st.kind, st.unit, len(servers), arrive, first, end, end - bubble, bubble, busy,
                           wait)
        run.name = st.name
        runs.append(run)
        lead, tail = _handoff(st)
        handed.append((run.first + lead, run.end + lead) if st.streams else (run.end + tail, run.end + tail))
    return PipelineRun(service, arrive0, runs, load)


def _cpu_time(work: dict[str, Any]) -> float:

    return float(StageWork.model_validate(work).cpu_time or 0.0)


STAGE_METRICS = {"first_output": "ttft", "latency": "e2e"}
"""A non-LLM stage's budget keys and the request metric each is measured as (from the stage's own arrival)."""


def _ms(values: np.ndarray) -> dict[str, float]:
    v = values[np.isfinite(values)]
    if not v.size:
        return {}
    return {"mean": float(f"{v.mean() * 1000:.4g}"), "p99": float(f"{np.percentile(v, 99) * 1000:.4g}")}


@dataclass
class PipelineVerdict:
    """The verdicts of one pipeline run: each stage's on its own budget, and the pipeline's end to end."""

    units: dict[str, Any]
    """Unit (plan service entry) -> `Verdict` on its objectives, measured inside the pipeline."""
    overall: str
    objectives: list[Any]
    failed: int
    stages: list[dict[str, Any]]
    notes: list[str]


def judge_pipeline(plan: Any, run: PipelineRun, seed: int = 0) -> PipelineVerdict:
    """Judge a pipeline run: each unit on its budget (stage-local times), the pipeline on its objectives (from
    arrival), and each stage's utilisation, queueing and bubble."""

    pipe = _pipeline(plan, run.service)
    units: dict[str, Any] = {}
    for st in run.stages:
        if st.unit is None:
            continue
        entry = _entry(plan, st.unit)
        if st.records is not None:
            units[st.unit] = judge(st.records, entry.objectives, itl_pool=st.itl_pool, predicted=predicted(entry),
                                   seed=seed)
            continue
        records = []
        for i in range(len(st.arrive)):
            if not math.isfinite(st.arrive[i]):
                continue
            if i in st.errors or not math.isfinite(st.own_end[i]):
                records.append(RequestRecord(i, float(st.arrive[i]), float(st.arrive[i]), error="failed upstream"))
                continue
            records.append(RequestRecord(i, float(st.arrive[i]), float(st.arrive[i]),
                                         ttft=float(st.first[i] - st.arrive[i]),
                                         e2e=float(st.own_end[i] - st.arrive[i]), output_tokens=1))
        rename = {f"{STAGE_METRICS[m]}_{p}": key for key in entry.objectives
                  for m, _, p in [key.rpartition("_")] if m in STAGE_METRICS}
        mapped = {k: entry.objectives[v] for k, v in rename.items()}
        pred = {k: predicted(entry)[v] for k, v in rename.items() if v in predicted(entry)}
        verdict = judge(records, mapped, predicted=pred, seed=seed)
        units[st.unit] = replace(verdict, objectives=[replace(o, key=rename[o.key]) for o in verdict.objectives])
    errors = run.errors
    n = len(run.arrive)
    by_name = {st.name: st for st in run.stages}
    last = run.stages[-1]

    def from_arrival(times: np.ndarray) -> np.ndarray:
        out = (times - run.arrive) * 1000
        out[[i for i in range(n) if i in errors or not math.isfinite(out[i])]] = math.inf
        return out

    objectives = []
    for j, (key, obj) in enumerate(sorted(pipe.objectives.items())):
        metric, _, _ = key.rpartition("_")
        if metric == "ttft":
            values = from_arrival(last.first)
        elif metric == "e2e":
            values = from_arrival(last.end)
        elif metric.endswith("_first_output") and metric[: -len("_first_output")] in by_name:
            values = from_arrival(by_name[metric[: -len("_first_output")]].first)
        else:
            continue
        # judge_objective reads only the percentile from the key.
        o = judge_objective(f"e2e_{key.rpartition('_')[2]}", obj.target_ms, values, seed=seed + j,
                            predicted_ms=obj.predicted_ms)
        objectives.append(replace(o, key=key))
    outcomes = {o.verdict for o in objectives} | {v.overall for v in units.values()}
    overall = "fail" if "fail" in outcomes else "inconclusive" if "inconclusive" in outcomes else "pass"
    span = run.span
    stages = []
    for st in run.stages:
        live = np.isfinite(st.own_end)
        inside = float(np.nansum(st.end[live] - st.arrive[live]))
        stats: dict[str, Any] = {"name": st.name, "kind": st.kind, "servers": st.servers,
                                 "utilisation": float(f"{st.busy_s / (st.servers * span):.4g}") if span else 0.0,
                                 "bubble_ms": _ms(st.bubble[live]),
                                 "bubble_share": float(f"{float(st.bubble[live].sum()) / inside:.4g}")
                                 if inside > 0 else 0.0}
        if st.wait is not None:
            stats["wait_ms"] = _ms(st.wait[live])
        stages.append(stats)
    notes = [run.note] if run.note else []
    if errors:
        kinds: dict[str, int] = {}
        for why in errors.values():
            kinds[why] = kinds.get(why, 0) + 1
        notes.append(f"{len(errors)} of {n} requests failed ("
                     + "; ".join(f"{k}: {v}" for k, v in sorted(kinds.items())) + ")")
    return PipelineVerdict(units, overall, objectives, len(errors), stages, notes)


@dataclass
class PipelineBench:
    """`infra bench --simulate PLAN --service PIPELINE`: a pipeline run and its verdicts."""

    service: str
    load: dict[str, Any]
    verdict: PipelineVerdict
    span_s: float

    def to_json(self) -> dict[str, Any]:
        v = self.verdict
        return {"source": "simulation", "pipeline": self.service, "load": self.load,
                "duration_s": round(self.span_s, 3),
                "verdict": {"overall": v.overall, "objectives": [o.to_json() for o in v.objectives],
                            "failed": v.failed, "notes": list(v.notes)},
                "stages": v.stages, "units": {u: x.to_json() for u, x in sorted(v.units.items())}}


def bench_pipeline(plan: Any, service: str, *, requests: int, seed: int = 0, rate: float | None = None,
                   clients: int | None = None, catalog: Any = None, intent: Any = None,
                   plan_path: Any = None) -> PipelineBench:
    """Simulate pipeline `service` of a plan and judge it."""
    run = simulate_pipeline(plan, service, requests=requests, seed=seed, rate=rate, clients=clients,
                            catalog=catalog, intent=intent, plan_path=plan_path)
    load = {"requests": requests, "seed": seed, "arrival": run.load.arrival,
            **({"rate_rps": run.load.rate} if run.load.rate is not None else {}),
            **({"concurrency": run.load.concurrency} if run.load.concurrency is not None else {})}
    return PipelineBench(service, load, judge_pipeline(plan, run, seed=seed), run.span)


__all__ = ["PipelineBench", "PipelineRun", "PipelineVerdict", "StageRun", "bench_pipeline", "judge_pipeline",
           "simulate_pipeline"]
