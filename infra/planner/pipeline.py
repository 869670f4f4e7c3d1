"""Pipelines: a service whose requests pass through unlike stages (encoders, LLMs, codecs, diffusion transformers,
CPU preprocessing), each planned as a unit of its own — its own device type, layout and replica count — under
latency budgets carved out of the service's objectives.

Latency along the pipeline (stages in order; a stage hands on as it produces when its hand-off unit is a token,
an audio second or a video frame, and only when it is done for images and whole requests):

    lead[i]   = first[i] if stage i streams its hand-off, else full[i]
    first output of stage k (from arrival) = sum_{i<k} lead[i] + first[k]
    last output of stage k                 = max_{j<=k} (sum_{i<j} lead[i] + full[j])
    the service's TTFT = first output of the last stage;  its E2E = last output of the last stage

where first[i] / full[i] are stage i's own first-output and full latencies. Every objective of the service (TTFT,
E2E) and of a stage (`first_output`, `latency`) is a sum of such terms; its target is split over its terms in
proportion to each term's latency unloaded on its fastest device (so a stage that needs 60% of the time even alone
gets 60% of the budget), and each stage takes the tightest share any objective gives it. Summing percentiles bounds
the percentile of the sum from above, so the split is conservative. TPOT and ITL objectives apply to the last
LLM stage. An LLM stage then becomes an ordinary service for the candidate search (with TTFT = its first-output
budget, E2E = its full budget); the other stages are scored by `infra.perf.stages`. Every unit carries the
service's full request rate; the service's budget bounds the sum of its units' costs. CPU stages are sized in
cores (work per second over a 70% utilisation target) rather than solved for.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field, replace

from infra.catalog.schema import DeviceSpec, FrameworkSpec, ModelSpec
from infra.errors import InfraError, IntentError, Problem
from infra.intent.models import Service, Stage
from infra.intent.profile import Pool
from infra.intent.resolve import ResolvedIntent, ResolvedService, pool_device_memory_gb
from infra.perf.calibration import Calibration, lookup
from infra.perf.estimate import estimate
from infra.perf.serving import z_of
from infra.perf.shape import Deployment, Parallel, Role, Workload
from infra.perf.stages import StageEstimate, StageLoad, stage_capacity, stage_latency, stage_load, stage_timing
from infra.planner.candidates import (
    Candidate,
    Considered,
    Corrections,
    _price,
    enumerate_candidates,
    prune_dominated,
    service_workload,
)

STREAMING = {"token", "audio_second", "video_frame"}
CPU_UTILISATION = 0.7
SP_OPTIONS = (1, 2, 4, 8)


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
    """Its input streams in (the stage before hands on as it produces), so its chunks interleave with others'."""


def unit_name(service: str, stage: str) -> str:
    return f"{service}-{stage}"[:63].rstrip("-")


def _frameworks(rs: ResolvedService, kind: str) -> list[FrameworkSpec]:
    return [f for f in rs.frameworks if kind in f.kinds]


def _pools(resolved: ResolvedIntent, rs: ResolvedService) -> list[Pool]:
    svc = rs.service
    return [p for p in resolved.loaded.cluster.pools if resolved.pools[p.name].name in rs.devices
            and not (p.spot and svc.preferences.spot == "never")]


def _precision(stage: Stage, svc: Service, model: ModelSpec, device: DeviceSpec, fw: FrameworkSpec) -> list[str]:
    wanted = list(stage.precisions or svc.precisions) or [model.native_precision if model.native_precision in
                                                          device.precisions else "bf16"]
    return [p for p in wanted if p in device.precisions and p in fw.precisions]


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
        return {p: f"{v * 1000:.3f}ms" for p, v in d.items()}

    return Service.model_validate({
        "name": unit.name, "model": unit.stage.model, "precisions": list(unit.stage.precisions or svc.precisions),
        "workload": wl, "slo": {"ttft": ms(unit.first), "e2e": ms(unit.full), "tpot": ms(unit.tpot)},
        "availability": svc.availability.model_dump(mode="json"),
        "preferences": svc.preferences.model_dump(mode="json"),
    })


def _llm_unloaded(model: ModelSpec, rs: ResolvedService, stage: Stage, resolved: ResolvedIntent) -> tuple[float,
                                                                                                       float]:
    """(TTFT, E2E) of one request alone on the fastest allowed device, smallest layout that fits."""
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
                while tp <= pool.devices_per_node:
                    try:
                        e = estimate(Deployment(model.name, device.name, fw.name, precision, agg=Role(Parallel(tp=tp))),
                                     wl, resolved.catalog, device_memory_gb=pool_device_memory_gb(pool, device))
                    except InfraError:
                        tp *= 2
                        continue
                    p = e.prediction
                    best = min(best, (p.ttft["p50"], p.e2e["p50"]))
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


def plan_units(rs: ResolvedService, resolved: ResolvedIntent) -> list[Unit]:
    """The stages of a pipeline service with their latency budgets."""
    svc = rs.service
    assert svc.pipeline is not None
    units = [Unit(svc.name, st, unit_name(svc.name, st.name), rs.stages.get(st.name),
                  streams=st.handoff is not None and st.handoff.unit in STREAMING) for st in svc.pipeline]
    _check(units, rs, resolved)
    for before, u in zip(units, units[1:]):
        u.interleaved = before.streams
    for u in units:
        if u.stage.kind == "cpu":
            u.unloaded = (_cpu_seconds(u.stage), _cpu_seconds(u.stage))
        elif u.stage.kind == "llm":
            assert u.model is not None
            u.unloaded = _llm_unloaded(u.model, rs, u.stage, resolved)
        else:
            u.unloaded = _stage_unloaded(u, rs, resolved)
    # Objectives as sums of (unit index, "first" | "full") terms with a percentile and a target.
    objectives: list[tuple[list[tuple[int, str]], str, float]] = []

    def lead(i: int) -> tuple[int, str]:
        return (i, "first" if units[i].streams else "full")

    n = len(units) - 1
    for p, v in svc.slo.ttft.items():
        objectives.append(([lead(i) for i in range(n)] + [(n, "first")], p, v))
    for p, v in svc.slo.e2e.items():
        # The last output leaves no earlier than any stage finishes: one sum per stage.
        for k in range(n + 1):
            objectives.append(([lead(i) for i in range(k)] + [(k, "full")], p, v))
    for k, u in enumerate(units):
        for p, v in u.stage.slo.first_output.items():
            objectives.append(([lead(i) for i in range(k)] + [(k, "first")], p, v))
        for p, v in u.stage.slo.latency.items():
            objectives.append(([(k, "full")], p, v))
    for terms, p, target in objectives:
        alone = [units[i].unloaded[0 if what == "first" else 1] for i, what in terms]
        total = sum(alone)
        for (i, what), t in zip(terms, alone):
            if units[i].stage.kind == "cpu":
                continue
            share = target * (t / total) if total > 0 and math.isfinite(total) else target / len(terms)
            budget = units[i].first if what == "first" else units[i].full
            budget[p] = min(budget.get(p, math.inf), share)
    llms = [u for u in units if u.stage.kind == "llm"]
    if llms:
        llms[-1].tpot = dict(svc.slo.tpot)
    return units


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
            if (device.vendor not in fw.vendors or (fw.devices and device.name not in fw.devices)
                    or not fw.image_for(device.name, device.vendor)[1]):
                continue
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


def search(resolved: ResolvedIntent, slo_scale: float = 1.0, progress: Callable[[int, int], None] | None = None,
           corrections: Corrections | None = None) -> tuple[list[Candidate], list[Considered], list[ResolvedService], dict[str, list[Unit]]]:
    """Candidates of every service and pipeline stage (pipelines expanded into units), what was considered, the
    services searched (LLM stages as services of their own) and the pipelines' units."""
    services, pipelines = expand(resolved)
    cands, seen = enumerate_candidates(resolved, slo_scale=slo_scale, progress=progress, services=services,
                                       corrections=corrections)
    extra: list[Candidate] = []
    for rs in resolved.services:
        for u in pipelines.get(rs.service.name, []):
            if u.stage.kind in ("llm", "cpu"):
                continue
            fix = corrections or Corrections()
            if slo_scale != 1.0 or fix.objective_scale.get(u.name):
                u = replace(u, first={p: v * slo_scale * fix.scale(u.name, "first_output", p)
                                      for p, v in u.first.items()},
                            full={p: v * slo_scale * fix.scale(u.name, "latency", p) for p, v in u.full.items()})
            cv = {"poisson": 1.0, "constant": 0.0, "gamma": rs.service.workload.arrival.cv or 1.0}[
                rs.service.workload.arrival.process]
            extra += stage_candidates(u, rs, resolved, cv, seen)
    kept, _ = prune_dominated(extra)
    return cands + kept, seen, services, pipelines


def expand(resolved: ResolvedIntent) -> tuple[list[ResolvedService], dict[str, list[Unit]]]:
    """Services to search: plain ones as they are, and each LLM stage of a pipeline as a service of its own; and
    every pipeline's units, by service."""
    services: list[ResolvedService] = []
    pipelines: dict[str, list[Unit]] = {}
    for rs in resolved.services:
        if rs.model is not None:
            services.append(rs)
            continue
        units = plan_units(rs, resolved)
        pipelines[rs.service.name] = units
        for u in units:
            if u.stage.kind == "llm" and u.model is not None:
                services.append(ResolvedService(stage_service(u, rs), u.model, {}, [
                    f for f in rs.frameworks if "llm" in f.kinds], rs.devices))
    return services, pipelines

