"""Pipelines: a service whose requests pass through unlike stages (encoders, LLMs, codecs, diffusion transformers,
CPU preprocessing), each planned as a unit of its own — its own device type, layout and replica count — under
latency budgets carved out of the service's objectives.

Latency along the pipeline (a stage hands on as it produces when its hand-off unit is a token, an audio second
or a video frame, and only when it is done for images and whole requests; a stage consumes the stage before it,
or the stages its `after` names, and starts when the last of them hands on, so the stages form a tree into the
last one and every path from a stage with no input to stage k is a chain P):

    lead[i]   = first[i] if stage i streams its hand-off, else full[i]
    first output of stage k (from arrival) = max_P (sum_{i in P, i != k} lead[i] + first[k])
    last output of stage k                 = max_{j feeding k} max_P (sum_{i in P, i != j} lead[i] + full[j])
    the service's TTFT = first output of the last stage;  its E2E = last output of the last stage

where first[i] / full[i] are stage i's own first-output and full latencies. Every objective of the service (TTFT,
E2E) and of a stage (`first_output`, `latency`) is a maximum of such sums, so each sum must meet it; its target is
split over its terms in proportion to each term's latency unloaded on its fastest device (so a stage that needs 60%
of the time even alone gets 60% of the budget), and each stage takes the tightest share any objective gives it.
Summing percentiles bounds the percentile of the sum from above, so the split is conservative. TPOT and ITL
objectives apply to the last LLM stage. An LLM stage then becomes an ordinary service for the candidate search (with
TTFT = its first-output budget, E2E = its full budget); the other stages are scored by `infra.perf.stages`. Every
unit carries the service's full request rate; the service's budget bounds the sum of its units' costs. CPU stages
are sized in cores (work per second over a 70% utilisation target) rather than solved for, and placed on the
cheapest CPU pool of the profile that has the cores.

Hand-offs. A stage with a `handoff` moves its output to the next stage (`infra.perf.handoff`): the next stage
waits for the first unit's transfer when the stage streams, for the whole transfer otherwise. Every sum above that
crosses from stage i to stage i+1 carries that wait h[i] as a fixed term: the target less the hand-offs is split
over the stages. Before the replicas are placed the link is not known, so h[i] is the slowest link between any
pools the two stages may use (conservative); the plan's end-to-end prediction uses the links of the chosen pools.

Co-location. Two consecutive stages are placed together (same pool, replicas packed onto the same nodes, the
hand-off over the node's NVLink/HCCS or through one device) when the network hand-off takes more than
COLOCATE_SHARE of the budget the two stages share (their two shares of the tightest objective that spans them):
that much of the pair's time lost to the network shrinks both stages' budgets, and a replica's capacity falls
faster than its budget as the budget nears its unloaded latency, so the two stages need more replicas than the
packing constraint costs. Below it the network hand-off is cheaper than restricting placement. Co-location needs
a pool both stages may use whose node holds the smallest replica of each; without one, the pair stays apart, the
network hand-off is charged and the plan notes why.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

from infra.catalog.schema import DeviceSpec, FrameworkSpec, ModelSpec
from infra.errors import InfraError, IntentError, Problem
from infra.intent.models import Service, Stage, stage_consumers, stage_inputs
from infra.intent.profile import CpuPool, Pool
from infra.intent.resolve import ResolvedIntent, ResolvedService, model_ref, pool_device_memory_gb
from infra.perf.calibration import Calibration, lookup
from infra.perf.estimate import estimate
from infra.perf.handoff import STREAMING, Site, Transfer, network_link, node_link, slowest, transfer, units_per_request
from infra.perf.serving import z_of
from infra.perf.shape import Deployment, Parallel, Role, Workload
from infra.perf.stages import StageEstimate, StageLoad, stage_capacity, stage_latency, stage_load, stage_timing
from infra.planner.candidates import (
    MAX_NUM_SEQS,
    Candidate,
    Considered,
    _price,
    no_image,
    quirk_refusals,
    service_workload,
    tp_refusal,
    wanted_precisions,
)

CPU_UTILISATION = 0.7
SP_OPTIONS = (1, 2, 4, 8)
COLOCATE_SHARE = 0.10
"""Share of a stage pair's budget above which the network hand-off co-locates the pair (module docstring)."""


@dataclass
class Unit:
    """One stage of one pipeline service, as the planner sees it."""

    service: str
    """The pipeline service."""
    stage: Stage
    name: str
    """`<service>-<stage>`: the name the solver and the plan use."""
    model: ModelSpec | None
    first: dict[str, float] = field(default_factory=dict)
    """Budget on the stage's own first output: percentile -> seconds."""
    full: dict[str, float] = field(default_factory=dict)
    """Budget on the stage's own latency."""
    tpot: dict[str, float] = field(default_factory=dict)
    unloaded: tuple[float, float] = (0.0, 0.0)
    """(first, full) seconds alone on the fastest allowed device."""
    streams: bool = False
    """Hands on as it produces (so the next stage starts at this one's first output)."""
    load: StageLoad | None = None
    """Work per request of a stage that is not an LLM."""
    interleaved: bool = False
    """Its input streams in (the stages before hand on as they produce), so its chunks interleave with others'."""
    inputs: list[int] = field(default_factory=list)
    """Indices of the stages it consumes."""
    consumer: int | None = None
    """Index of the stage it hands on to (None for the last)."""
    fits: dict[str, int] = field(default_factory=dict)
    """Pool -> devices of the smallest replica of the stage that fits there (model stages)."""
    handoff: Transfer | None = None
    """The hand-off to the next stage as the budget split charged it."""
    network: Transfer | None = None
    """The same hand-off over the slowest network link between the two stages' pools."""
    colocate: bool = False
    """Placed together with the next stage."""
    note: str = ""
    """Why the hand-off to the next stage goes where it goes (for the plan's notes)."""


def stage_model_key(stage: Stage, model: ModelSpec, resolved: ResolvedIntent) -> str:
    """How later stages look a stage's model up: the path of the config.json it was read from (no catalog holds
    it under its name), else its catalog name."""
    return model_ref(stage.model, resolved.loaded.document.path.parent) or model.name


def unit_name(service: str, stage: str) -> str:
    return f"{service}-{stage}"[:63].rstrip("-")


def _frameworks(rs: ResolvedService, kind: str) -> list[FrameworkSpec]:
    return [f for f in rs.frameworks if kind in f.kinds]


def _pools(resolved: ResolvedIntent, rs: ResolvedService) -> list[Pool]:
    svc = rs.service
    return [p for p in resolved.loaded.cluster.pools if resolved.pools[p.name].name in rs.devices
            and not (p.spot and svc.preferences.spot == "never")]


def _precision(stage: Stage, svc: Service, model: ModelSpec, device: DeviceSpec, fw: FrameworkSpec) -> list[str]:
    served = device.precisions_for(fw.name)
    return [p for p in wanted_precisions(list(stage.precisions or svc.precisions), model, device, fw)
            if p in served and p in fw.precisions]


def stage_service(unit: Unit, rs: ResolvedService) -> Service:
    """An LLM stage as a service of its own: the pipeline's load, the stage's lengths, its latency budget."""
    svc = rs.service
    work = unit.stage.work
    wl = svc.workload.model_dump(mode="json", by_alias=True, exclude_none=True)
    for f in ("input_tokens", "output_tokens"):
        dist = getattr(work, f)
        if dist is not None:
            wl[f] = dist.model_dump(mode="json", by_alias=True, exclude_none=True, exclude_defaults=True)

    def ms(d: dict[str, float]) -> dict[str, str]:
        # A budget under the microsecond this states (an objective of 1e-300ms, or hand-offs that take all of
        # it) is stated as one microsecond, not rounded to 0ms, which no objective may be: no LLM stage meets it,
        # and the search says so as it says of any budget too tight.
        return {p: f"{max(v * 1000, 0.001):.3f}ms" for p, v in d.items()}

    return Service.model_validate({
        "name": unit.name, "model": unit.stage.model, "precisions": list(unit.stage.precisions or svc.precisions),
        "workload": wl, "slo": {"ttft": ms(unit.first), "e2e": ms(unit.full), "tpot": ms(unit.tpot)},
        "availability": svc.availability.model_dump(mode="json"),
        "preferences": svc.preferences.model_dump(mode="json"),
    })


def _llm_unloaded(model: ModelSpec, rs: ResolvedService, stage: Stage, resolved: ResolvedIntent,
                  fits: dict[str, int]) -> tuple[float, float]:
    """(TTFT, E2E) of one request alone on the fastest allowed device, smallest layout that fits; `fits` gets the
    devices of that layout per pool."""
    assert resolved.catalog is not None
    best = (math.inf, math.inf)
    base = resolved.loaded.document.path.parent
    probe = Unit(rs.service.name, stage, "probe", model)
    wl = service_workload(stage_service(probe, rs), base)
    wl = Workload(isl=wl.isl, osl=wl.osl, rate=1e-3)
    for pool in _pools(resolved, rs):
        device = resolved.pools[pool.name]
        for fw in (f for f in rs.frameworks if "llm" in f.kinds and device.vendor in f.vendors
                   and (not f.devices or device.name in f.devices)):
            for precision in _precision(stage, rs.service, model, device, fw):
                tp = 1
                while tp <= pool.devices_per_node and not tp_refusal(device, fw, Parallel(tp=tp)):
                    try:
                        e = estimate(Deployment(stage_model_key(stage, model, resolved), device.name, fw.name,
                                                precision, agg=Role(Parallel(tp=tp), MAX_NUM_SEQS)),
                                     wl, resolved.catalog, device_memory_gb=pool_device_memory_gb(pool, device))
                    except InfraError:
                        tp *= 2
                        continue
                    p = e.prediction
                    best = min(best, (p.ttft["p50"], p.e2e["p50"]))
                    fits[pool.name] = min(fits.get(pool.name, tp), tp)
                    break
    return best


def _stage_unloaded(unit: Unit, rs: ResolvedService, resolved: ResolvedIntent) -> tuple[float, float]:
    assert unit.model is not None and unit.load is not None
    load = unit.load
    best = (math.inf, math.inf)
    for pool in _pools(resolved, rs):
        device = resolved.pools[pool.name]
        for fw in _frameworks(rs, unit.model.kind):
            if device.vendor not in fw.vendors:
                continue
            for precision in _precision(unit.stage, rs.service, unit.model, device, fw):
                for sp in _sp_options(unit.model, pool):
                    t = stage_timing(unit.model, device, precision, sp, load, lookup("vllm", device).factors,
                                     pool_device_memory_gb(pool, device))
                    if t.fits:
                        best = min(best, (t.first_s, t.service_s))
                        unit.fits[pool.name] = min(unit.fits.get(pool.name, sp), sp)
    return best


def _sp_options(model: ModelSpec, pool: Pool) -> list[int]:
    if model.kind != "dit":
        return [1]
    return [sp for sp in SP_OPTIONS if sp <= pool.devices_per_node and pool.devices_per_node % sp == 0]


def _cpu_seconds(stage: Stage) -> float:
    return float(stage.work.cpu_time or 0.0)


def _check(units: list[Unit], rs: ResolvedService, resolved: ResolvedIntent) -> None:
    """Each stage's model is of the stage's kind, some allowed framework serves it, and its work is complete;
    problems point at the stage's lines."""
    doc = resolved.loaded.document
    si = next(i for i, s in enumerate(resolved.loaded.intent.spec.services) if s.name == rs.service.name)
    problems: list[Problem] = []
    for ti, u in enumerate(units):
        where = ("spec", "services", si, "pipeline", ti)
        if u.model is None:
            continue
        if u.model.kind != u.stage.kind:
            problems.append(Problem(f"stage {u.stage.name} is of kind {u.stage.kind} but {u.model.name} is a "
                                    f"{u.model.kind} model", doc.locate(where + ("kind",)),
                                    f"set kind: {u.model.kind}, or pick a {u.stage.kind} model"))
            continue
        if u.stage.kind == "llm":
            continue
        if not _frameworks(rs, u.stage.kind):
            problems.append(Problem(
                f"stage {u.stage.name} is a {u.stage.kind} stage, which none of the allowed frameworks serves",
                doc.locate(("spec", "services", si, "preferences", "frameworks")),
                "allow " + " or ".join(n for n, f in sorted(_catalog_frameworks(resolved).items())
                                       if u.stage.kind in f.kinds)))
            continue
        try:
            u.load = stage_load(u.model, u.stage.work)
        except InfraError as exc:
            problems += [Problem(f"stage {u.stage.name}: {p.message}", doc.locate(where + ("work",)), p.fix)
                         for p in exc.problems]
    if problems:
        raise IntentError(problems)


def _catalog_frameworks(resolved: ResolvedIntent) -> dict[str, FrameworkSpec]:
    assert resolved.catalog is not None
    return resolved.catalog.frameworks


def plan_units(rs: ResolvedService, resolved: ResolvedIntent, apart: frozenset[str] = frozenset()) -> list[Unit]:
    """The stages of a pipeline service with their latency budgets; stages named in `apart` (unit names) are not
    co-located with the next stage whatever their hand-off costs."""
    svc = rs.service
    assert svc.pipeline is not None
    units = [Unit(svc.name, st, unit_name(svc.name, st.name), rs.stages.get(st.name),
                  streams=st.handoff is not None and st.handoff.unit in STREAMING) for st in svc.pipeline]
    _check(units, rs, resolved)
    inputs = stage_inputs([st.name for st in svc.pipeline], [st.after for st in svc.pipeline])
    for u, ins, out in zip(units, inputs, stage_consumers(inputs)):
        u.inputs, u.consumer = ins, out
        u.interleaved = bool(ins) and all(units[i].streams for i in ins)
    for u in units:
        if u.stage.kind == "cpu":
            u.unloaded = (_cpu_seconds(u.stage), _cpu_seconds(u.stage))
        elif u.stage.kind == "llm":
            assert u.model is not None
            u.unloaded = _llm_unloaded(u.model, rs, u.stage, resolved, u.fits)
        else:
            u.unloaded = _stage_unloaded(u, rs, resolved)
    # Objectives as sums of (unit index, "first" | "full") terms with a percentile and a target.
    objectives: list[tuple[list[tuple[int, str]], str, float]] = []

    def lead(i: int) -> tuple[int, str]:
        return (i, "first" if units[i].streams else "full")

    n = len(units) - 1
    # A stage starts when the last of its inputs hands on: every path into it is a sum of its own.
    for p, v in svc.slo.ttft.items():
        objectives += [([lead(i) for i in path[:-1]] + [(n, "first")], p, v) for path in paths(units, n)]
    for p, v in svc.slo.e2e.items():
        # The last output leaves no earlier than any stage finishes: one sum per stage and path into it.
        for k in range(n + 1):
            objectives += [([lead(i) for i in path[:-1]] + [(k, "full")], p, v) for path in paths(units, k)]
    for k, u in enumerate(units):
        for p, v in u.stage.slo.first_output.items():
            objectives += [([lead(i) for i in path[:-1]] + [(k, "first")], p, v) for path in paths(units, k)]
        for p, v in u.stage.slo.latency.items():
            objectives.append(([(k, "full")], p, v))
    _handoffs(units, rs, resolved, si=next(i for i, s in enumerate(resolved.loaded.intent.spec.services)
                                          if s.name == svc.name))
    # First without hand-offs, for the budgets stage pairs share; then with what each hand-off costs.
    pairs = _split(units, objectives, {})
    for i, u in enumerate(units):
        if u.network is not None and u.consumer is not None:
            _decide(u, units[u.consumer], pairs.get(i, math.inf), resolved, u.name in apart)
    _split(units, objectives, {i: u.handoff.charged(u.streams) for i, u in enumerate(units) if u.handoff})
    llms = [u for u in units if u.stage.kind == "llm"]
    if llms:
        llms[-1].tpot = dict(svc.slo.tpot)
    return units


def _split(units: list[Unit], objectives: list[tuple[list[tuple[int, str]], str, float]],
           charge: dict[int, float]) -> dict[int, float]:
    """Set every stage's budgets: each objective's target, less the hand-offs its sum crosses, split over its
    terms in proportion to their unloaded latencies. Returns, per hand-off (by the index of the stage that hands
    on), the least budget the two stages on either side of it get from one objective."""
    for u in units:
        u.first, u.full = {}, {}
    pairs: dict[int, float] = {}
    for terms, p, target in objectives:
        crossed = [i for i, _ in terms[:-1]]  # a sum runs over stages 0..k in order: it crosses each hand-off
        left = max(target - sum(charge.get(i, 0.0) for i in crossed), 1e-6)
        alone = [units[i].unloaded[0 if what == "first" else 1] for i, what in terms]
        total = sum(alone)
        shares = [left * (t / total) if total > 0 and math.isfinite(total) else left / len(terms) for t in alone]
        for (i, what), share in zip(terms, shares):
            if units[i].stage.kind == "cpu":
                continue
            budget = units[i].first if what == "first" else units[i].full
            budget[p] = min(budget.get(p, math.inf), share)
        for j, i in enumerate(crossed):
            pairs[i] = min(pairs.get(i, math.inf), shares[j] + shares[j + 1])
    return pairs


def site(pool: Pool | CpuPool) -> Site:
    """Where a pool's nodes sit, for hand-off links."""
    return Site(pool.name, pool.zone, pool.topology.switch, tuple(pool.nics))


ANY_NODE = Site("any node", None, None, ())
"""A CPU stage with no CPU pool in the profile runs on some node of the cluster."""


def unit_sites(u: Unit, rs: ResolvedService, resolved: ResolvedIntent) -> list[Site]:
    """Where a stage's replicas may run: the pools its smallest replica fits (CPU stages: the CPU pools)."""
    if u.stage.kind == "cpu":
        return [site(p) for p in cpu_pools_for(rs, resolved)] or [ANY_NODE]
    return [site(p) for p in _pools(resolved, rs) if p.name in u.fits] or [site(p) for p in _pools(resolved, rs)]


def cpu_pools_for(rs: ResolvedService, resolved: ResolvedIntent) -> list[CpuPool]:
    return [p for p in resolved.loaded.cluster.cpu_pools if not (p.spot and rs.service.preferences.spot == "never")]


def _handoffs(units: list[Unit], rs: ResolvedService, resolved: ResolvedIntent, si: int) -> None:
    """Each declared hand-off over the slowest network link between the two stages' pools."""
    doc = resolved.loaded.document
    base = doc.path.parent
    problems: list[Problem] = []
    for i, u in enumerate(units):
        h = u.stage.handoff
        if h is None or u.consumer is None:
            continue
        out_tokens = None
        if u.stage.kind == "llm":
            out_tokens = service_workload(stage_service(u, rs), base).osl
        elif u.stage.kind == "cpu" and h.unit == "token":
            out_tokens = service_workload(rs.service, base).isl
        try:
            n = units_per_request(h.unit, u.stage.work, output_tokens=out_tokens,
                                  stage_tokens=u.load.tokens if u.load is not None else None)
        except InfraError as exc:
            problems += [Problem(f"stage {u.stage.name}: {p.message}",
                                 doc.locate(("spec", "services", si, "pipeline", i, "handoff")), p.fix)
                         for p in exc.problems]
            continue
        nxt = units[u.consumer]
        tries = [transfer(network_link(a, b), float(h.size), n) for a in unit_sites(u, rs, resolved)
                 for b in unit_sites(nxt, rs, resolved)]
        u.network = u.handoff = slowest(tries, u.streams)
    if problems:
        raise IntentError(problems)


def _decide(u: Unit, nxt: Unit, pair_budget: float, resolved: ResolvedIntent, apart: bool = False) -> None:
    """Co-locate a stage with the next one when its network hand-off costs more than COLOCATE_SHARE of the pair's
    budget and some pool holds both (and `apart` does not say an earlier search found no shapes that fit one node
    together); record why either way."""
    assert u.network is not None
    net = u.network.charged(u.streams)
    share = net / pair_budget if pair_budget > 0 else math.inf
    where = f"{u.stage.name} -> {nxt.stage.name}"
    said = (f"{where}: {u.network.units:g} x {u.network.unit_bytes / 1e6:.3g} MB over {u.network.link.via} takes "
            f"{net * 1000:.3g} ms, {share:.1%} of the pair's {pair_budget * 1000:.4g} ms")
    if share <= COLOCATE_SHARE:
        u.note = f"{said}: over the network (co-location pays above {COLOCATE_SHARE:.0%})"
        return
    why = ("no replica shapes of the two stages that meet their budgets fit one node together" if apart
           else _colocation_blocked(u, nxt, resolved))
    if why:
        u.note = f"{said}: co-location wanted but impossible ({why}); the network hand-off is charged"
        return
    common = [p for p in resolved.loaded.cluster.pools if p.name in u.fits and p.name in nxt.fits
              and u.fits[p.name] + nxt.fits[p.name] <= p.devices_per_node]
    inside = slowest([transfer(node_link(resolved.pools[p.name]), u.network.unit_bytes, u.network.units)
                      for p in common], u.streams)
    u.colocate = True
    u.handoff = inside
    u.note = (f"{said}: co-located on one node ({inside.link.via}, {inside.charged(u.streams) * 1000:.3g} ms; "
              f"saves {(net - inside.charged(u.streams)) * 1000:.3g} ms)")


def _colocation_blocked(u: Unit, nxt: Unit, resolved: ResolvedIntent) -> str:
    """Why two stages cannot share nodes ('' when they can)."""
    if "cpu" in (u.stage.kind, nxt.stage.kind):
        return "a CPU stage runs on CPU nodes"
    both = sorted(set(u.fits) & set(nxt.fits))
    if not both:
        return (f"{u.stage.name} runs on {', '.join(sorted(u.fits)) or 'no pool'} and {nxt.stage.name} on "
                f"{', '.join(sorted(nxt.fits)) or 'no pool'}: no pool holds both")
    pools = {p.name: p for p in resolved.loaded.cluster.pools}
    if not any(u.fits[p] + nxt.fits[p] <= pools[p].devices_per_node for p in both):
        return "; ".join(f"pool {p}: {u.fits[p]} + {nxt.fits[p]} devices exceed a node of "
                         f"{pools[p].devices_per_node}" for p in both)
    return ""


def stage_candidates(unit: Unit, rs: ResolvedService, resolved: ResolvedIntent, arrival_cv: float,
                     seen: list[Considered]) -> list[Candidate]:
    """Replica shapes of a non-LLM stage that meet its budgets, scored by `infra.perf.stages`."""
    assert unit.model is not None and unit.load is not None
    load = unit.load
    out = []
    wanted = tuple(sorted(set(unit.first) | set(unit.full), key=lambda p: z_of(p)))
    for pool in _pools(resolved, rs):
        device = resolved.pools[pool.name]
        zone = pool.zone or "-"
        for fw in _frameworks(rs, unit.model.kind):
            if device.vendor not in fw.vendors or (fw.devices and device.name not in fw.devices):
                continue
            if not fw.image_for(device.name, device.vendor)[1]:
                seen.append(Considered(unit.name, pool.name, fw.name, "-", "-", no_image(fw, device)))
                continue
            for precision, why in quirk_refusals(list(unit.stage.precisions or rs.service.precisions), unit.model,
                                                 device, fw):
                seen.append(Considered(unit.name, pool.name, fw.name, precision, "-", why))
            for precision in _precision(unit.stage, rs.service, unit.model, device, fw):
                cal = lookup("vllm", device)
                for sp in _sp_options(unit.model, pool):
                    par = Parallel(sp=sp)
                    record = Considered(unit.name, pool.name, fw.name, precision, par.label(), "")
                    t = stage_timing(unit.model, device, precision, sp, load, cal.factors,
                                     pool_device_memory_gb(pool, device))
                    if not t.fits:
                        seen.append(replace(record, outcome=(
                            f"{unit.model.name} {precision} needs {t.weights_gb:.1f} GB of weights per device, "
                            f"{t.usable_gb:.1f} GB usable")))
                        continue
                    cap = stage_capacity(t, arrival_cv, unit.first, unit.full, unit.interleaved)
                    if cap <= 0:
                        seen.append(replace(record, outcome=(
                            f"misses its budget even alone ({t.first_s * 1000:.0f} ms to first output, "
                            f"{t.service_s * 1000:.0f} ms in all)")))
                        continue
                    first, full, _ = stage_latency(t, cap, arrival_cv, wanted or ("p50",), unit.interleaved)
                    seen.append(replace(record, outcome="candidate"))
                    est = StageEstimate(load, t, cap, first, full, Calibration(
                        cal.factors, False, f"stage model, efficiency borrowed from {cal.source}", cal.distance))
                    out.append(Candidate(unit.name, pool.name, device.name, fw.name, precision, par, par.devices,
                                         cap, _price(pool, device), pool.spot, zone, est))  # type: ignore[arg-type]
    return out


def cpu_cores(unit: Unit, peak_rps: float) -> int:
    """Cores a CPU stage needs at peak, at the utilisation that keeps its queue short."""
    return max(1, math.ceil(peak_rps * _cpu_seconds(unit.stage) / CPU_UTILISATION))


def paths(units: list[Unit], k: int) -> list[list[int]]:
    """Every path of stages from a stage with no input to stage k, in order."""
    if not units[k].inputs:
        return [[k]]
    return [path + [k] for i in units[k].inputs for path in paths(units, i)]


def groups(units: list[Unit]) -> list[list[Unit]]:
    """Stages to co-locate, in groups joined by their hand-offs (each stage that co-locates with the stage it
    feeds, and that one), each group in pipeline order."""
    root = list(range(len(units)))

    def find(i: int) -> int:
        while root[i] != i:
            i = root[i]
        return i

    for i, u in enumerate(units):
        if u.colocate and u.consumer is not None:
            root[find(i)] = find(u.consumer)
    members: dict[int, list[Unit]] = {}
    for i, u in enumerate(units):
        members.setdefault(find(i), []).append(u)
    return [run for _, run in sorted(members.items(), key=lambda kv: units.index(kv[1][0])) if len(run) > 1]


def group_name(run: list[Unit]) -> str:
    """The solver's name for a co-located run: `<first unit>+<stage>+...`."""
    return "+".join([run[0].name] + [u.stage.name for u in run[1:]])


def expand(resolved: ResolvedIntent,
           apart: frozenset[str] = frozenset()) -> tuple[list[ResolvedService], dict[str, list[Unit]]]:
    """Services to search: plain ones as they are, and each LLM stage of a pipeline as a service of its own; and
    every pipeline's units, by service (stages in `apart` not co-located)."""
    services: list[ResolvedService] = []
    pipelines: dict[str, list[Unit]] = {}
    for rs in resolved.services:
        if rs.model is not None:
            services.append(rs)
            continue
        units = plan_units(rs, resolved, apart)
        pipelines[rs.service.name] = units
        for u in units:
            if u.stage.kind == "llm" and u.model is not None:
                services.append(ResolvedService(stage_service(u, rs), u.model, {}, [
                    f for f in rs.frameworks if "llm" in f.kinds], rs.devices,
                    model_ref(u.stage.model, resolved.loaded.document.path.parent)))
    return services, pipelines


def solved_units(units: list[Unit]) -> list[str]:
    """The names the solver plans a pipeline's stages under: co-located runs as one, the other model stages
    each on their own (CPU stages are not solved)."""
    runs = groups(units)
    inside = {u.name for run in runs for u in run}
    return [group_name(run) for run in runs] + [u.name for u in units if u.name not in inside and
                                                u.stage.kind != "cpu"]


@dataclass(frozen=True)
class CpuPlacement:
    """Where a CPU stage runs and what it costs."""

    cores: int
    pool: CpuPool | None
    nodes: int
    cost_per_hour: float
    note: str = ""


def place_cpu(resolved: ResolvedIntent, pipelines: dict[str, list[Unit]]) -> dict[str, CpuPlacement]:
    """Each CPU stage on the cheapest CPU pool with enough free nodes (nodes = its cores over a node's usable
    cores, rounded up), stages taken in the intent's order; without a CPU pool, its cores on any node."""
    free = {p.name: p.node_count for p in resolved.loaded.cluster.cpu_pools}
    out: dict[str, CpuPlacement] = {}
    for rs in resolved.services:
        wl = rs.service.workload
        peak = float(wl.rate.peak_rps if wl.rate is not None else wl.concurrency)
        for u in pipelines.get(rs.service.name, []):
            if u.stage.kind != "cpu":
                continue
            cores = cpu_cores(u, peak * (1 + rs.service.availability.headroom))
            fit = [p for p in cpu_pools_for(rs, resolved) if -(-cores // p.cpu.usable_cores) <= free[p.name]]
            options = sorted(((-(-cores // p.cpu.usable_cores) * p.price, p.name, p) for p in fit),
                             key=lambda t: (t[0], t[1]))
            if not options:
                why = ("the profile has no CPU pool" if not resolved.loaded.cluster.cpu_pools
                       else f"no CPU pool has {cores} cores free")
                out[u.name] = CpuPlacement(cores, None, 0, 0.0, f"{u.stage.name}: {cores} cores requested on any "
                                                                 f"node ({why}), not priced")
                continue
            cost, _, pool = options[0]
            nodes = -(-cores // pool.cpu.usable_cores)
            free[pool.name] -= nodes
            out[u.name] = CpuPlacement(cores, pool, nodes, cost)
    return out
