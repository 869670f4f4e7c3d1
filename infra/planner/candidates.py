"""Candidate replica shapes for each service, scored by the performance model.

A candidate is one way to run one replica of a service: a pool (and so a device and a price), a framework, a
precision and a parallel layout. It is kept only if it runs (shape checks and memory fit) and carries some load
while meeting every objective of the service; its capacity is that load (requests/s for an open loop, clients
for a closed one), its cost the pool's price times its devices.
"""

from __future__ import annotations

import dataclasses
import math
import weakref
from collections.abc import Callable, Generator
from dataclasses import dataclass, replace
from functools import cached_property, partial
from pathlib import Path
from typing import Any

from infra.catalog.schema import DeviceSpec, FrameworkSpec, ModelSpec
from infra.errors import InfraError
from infra.intent.models import LengthDistribution, Service
from infra.intent.profile import Pool
from infra.intent.resolve import ResolvedIntent, ResolvedService, pool_device_memory_gb
from infra.limits import read_jsonl
from infra.perf.arch import kv_precision_for
from infra.perf.calibration import band_for, doublings_past, lookup
from infra.perf.correction import Correction, UserCalibration
from infra.perf.estimate import (
    Compiled,
    Estimate,
    Pending,
    Probe,
    Search,
    build_workers,
    compile_deployment,
    max_rate_search,
    meets,
    missed,
    moe_latency_forms,
    overrun,
    run_searches,
    shape_problems,
    unpinned_ttft_s,
)
from infra.perf.heap import collector_paused
from infra.perf.serving import PERCENTILES, Prediction, lognormal_q, z_of
from infra.perf.shape import Deployment, Parallel, Role, Workload
from infra.perf.stages import StageEstimate
from infra.planner.routing import router_for


@dataclass(frozen=True)
class Candidate:
    """One replica shape of one service on one pool."""

    service: str
    pool: str
    device: str
    framework: str
    precision: str
    parallel: Parallel
    devices: int
    """Devices one replica occupies."""
    capacity: float
    """Load one replica carries within every objective: requests/s (open loop) or clients (closed loop)."""
    price_per_device_hour: float
    spot: bool
    zone: str
    estimate: Estimate | StageEstimate
    """The prediction at that capacity (a pipeline stage that is not an LLM has a stage estimate)."""
    decode_workers: int = 0
    """Disaggregated units: decode workers (each of layout `decode_parallel`, else `parallel`) per unit; 0 =
    aggregated."""
    prefill_workers: int = 1
    """Disaggregated units: prefill workers (each of layout `parallel`) per unit."""
    share: float = 1.0
    """Fraction of one device a replica takes when devices are shared through memory/core slices (HAMi)."""
    device_spec: DeviceSpec | None = None
    """The device as this replica sees it (a slice's share of its figures); None is the catalog's device."""
    memory_gb: float | None = None
    """Usable memory per device for this replica (the pool's allocatable figure, or a slice's share)."""
    decode_pool: str | None = None
    """Pool of the decode workers when they run on another pool (and device type) than the prefill worker."""
    decode_device: str | None = None
    decode_parallel: Parallel | None = None
    decode_price: float = 0.0
    """Price per device-hour of the decode pool."""

    @property
    def mode(self) -> str:
        return "disagg" if self.decode_workers else "agg"

    @property
    def calibrated(self) -> bool:
        """Whether its prediction rests on factors fitted to measurements of its framework on its device."""
        calibration = getattr(self.estimate, "calibration", None)
        return bool(calibration and calibration.calibrated)

    @property
    def measured(self) -> bool:
        """Whether its prediction rests on the user's own measurements of its model on its framework and device
        (a calibration's model or deployment level), rather than on what they say of the device or framework."""
        calibration = getattr(self.estimate, "calibration", None)
        return bool(calibration and getattr(calibration, "measured_level", "") in ("model", "deployment"))

    @property
    def frameworks(self) -> set[str]:
        """Frameworks the replica runs (several for a bundle of co-located stages)."""
        return {self.framework}

    @property
    def device_types(self) -> set[str]:
        return {self.device} | ({self.decode_device} if self.decode_device else set())

    @property
    def pools(self) -> list[str]:
        return [self.pool] + ([self.decode_pool] if self.decode_pool else [])

    def workers_on(self, pool: str) -> list[tuple[int, float, int]]:
        """(devices per worker, share of each device, workers) that one replica runs on `pool`."""
        prefill = self.prefill_workers if self.decode_workers else 1
        if self.decode_parallel is None:
            return [(self.parallel.devices, self.share, prefill + self.decode_workers)] if pool == self.pool else []
        return ([(self.parallel.devices, 1.0, prefill)] if pool == self.pool else []) + (
            [(self.decode_parallel.devices, 1.0, self.decode_workers)]
            if pool == (self.decode_pool or self.pool) else [])

    def devices_on(self, pool: str) -> float:
        return sum(d * share * k for d, share, k in self.workers_on(pool))

    def slots_on(self, pool: str) -> int:
        """Devices on `pool` in quarter devices, the unit pools are packed in."""
        return int(round(self.devices_on(pool) * SLOTS_PER_DEVICE))

    @property
    def consumption(self) -> float:
        """Devices' worth of capacity one replica takes (a fraction for a shared slice)."""
        return self.devices * self.share

    @property
    def cost_per_hour(self) -> float:
        if self.decode_pool is None:
            return self.consumption * self.price_per_device_hour
        return (self.devices_on(self.pool) * self.price_per_device_hour
                + self.devices_on(self.decode_pool) * self.decode_price)

    @cached_property
    def layout(self) -> str:
        # Cached (as `key`): a fleet's solve and plan ask for them millions of times, and they never change.
        if self.share < 1:
            return f"{self.parallel.label()}@{self.share:g}"
        if not self.decode_workers:
            return self.parallel.label()
        return pd_label(self.prefill_workers, self.parallel, self.decode_workers, self.decode_parallel,
                        self.decode_pool)

    @cached_property
    def key(self) -> str:
        return f"{self.service}/{self.pool}/{self.framework}/{self.precision}/{self.layout}"


def pd_label(prefill: int, prefill_layout: Parallel, decode: int, decode_layout: Parallel | None = None,
             decode_pool: str | None = None) -> str:
    """`P tp8 + 2xD tp8`, `2xP tp8 + 1xD tp1-ep8-dp8 on h20`: a disaggregated unit's workers and layouts."""
    return (f"{f'{prefill}x' if prefill > 1 else ''}P {prefill_layout.label()} + {decode}xD "
            f"{(decode_layout or prefill_layout).label()}" + (f" on {decode_pool}" if decode_pool else ""))


def length_stats(dist: LengthDistribution | None) -> tuple[float, float]:
    """(mean, coefficient of variation) of a length distribution given by numbers (traces: `_trace_field`)."""
    if dist is None:
        return 1.0, 0.0
    if dist.fixed is not None:
        return float(dist.fixed), 0.0
    if dist.histogram is not None:
        lo, total, s1, s2 = 0.0, 0.0, 0.0, 0.0
        for bar in dist.histogram:
            mid = (lo + bar.le) / 2
            total += bar.weight
            s1 += bar.weight * mid
            s2 += bar.weight * mid * mid
            lo = bar.le
        mean = s1 / total
        return mean, math.sqrt(max(s2 / total - mean * mean, 0.0)) / mean if mean else 0.0
    pct = sorted(dist.percentiles.items(), key=lambda kv: float(kv[0][1:]))
    mean = float(dist.mean) if dist.mean is not None else None
    if pct:
        # Fit a lognormal through the highest percentile and the median (or mean): cv from its sigma.
        top_key, top = pct[-1]
        mid = dist.percentiles.get("p50") or mean or top
        z = z_of(top_key)
        sigma = math.log(max(top, 1.0) / max(mid, 1.0)) / z if z > 0 and top > mid else 0.0
        cv = math.sqrt(math.expm1(sigma * sigma))
        if mean is None:
            mean = mid * math.exp(sigma * sigma / 2)
        return mean, cv
    return float(mean or 1.0), 0.0


def _trace_field(dist: LengthDistribution | None, base: Path, field: str) -> tuple[float, float] | None:
    """(mean, coefficient of variation) of one field of a trace (checked when the intent was loaded)."""
    if dist is None or dist.trace is None:
        return None
    xs = [float(rec[field]) for _, rec in read_jsonl(base / dist.trace, "trace file")]
    mean = sum(xs) / len(xs)
    return mean, math.sqrt(sum((x - mean) ** 2 for x in xs) / len(xs)) / mean if mean else 0.0


def _clipped_quantiles(dist: LengthDistribution) -> tuple[tuple[str, float], ...]:
    """The percentiles, as multiples of the mean, that a length's `min` or `max` moves off the lognormal of
    `length_stats`: no request is longer than the max, so a TTFT percentile riding on a prompt at that percentile
    rides on the max where the lognormal's tail passes it (as the workload generator clips its draws)."""
    mean, cv = length_stats(dist)
    if cv <= 0 or dist.fixed is not None or (dist.max is None and dist.min is None):
        return ()
    lo, hi = float(dist.min or 1), float(dist.max) if dist.max is not None else math.inf
    out = []
    for p in PERCENTILES:
        q = lognormal_q(mean, cv, z_of(p))
        if not lo <= q <= hi:
            out.append((p, min(max(q, lo), hi) / mean))
    return tuple(out)


def length_quantiles(dist: LengthDistribution | None, base: Path, field: str) -> tuple[tuple[str, float], ...]:
    """Percentiles of a histogram or a trace as multiples of its mean (for other forms, which the lognormal of
    `length_stats` describes, those its min or max clip): a histogram's tail is where it is, not where a lognormal
    of the same mean and spread would put it."""
    if dist is None:
        return ()
    if dist.trace is not None:
        xs = sorted(float(rec[field]) for _, rec in read_jsonl(base / dist.trace, "trace file"))
        mean = sum(xs) / len(xs)
        # Nearest rank: the share of requests at or below the value is at least the percentile.
        return tuple((p, xs[min(len(xs) - 1, math.ceil(float(p[1:]) / 100 * len(xs)) - 1)] / mean)
                     for p in PERCENTILES) if mean else ()
    if dist.histogram is None:
        return _clipped_quantiles(dist)
    mean, _ = length_stats(dist)
    total = sum(b.weight for b in dist.histogram)
    out = []
    for p in PERCENTILES:
        want = float(p[1:]) / 100 * total
        lo, seen = 0.0, 0.0
        for bar in dist.histogram:
            if seen + bar.weight >= want:
                # Uniform within the bar, as the workload generator draws it.
                out.append((p, (lo + (want - seen) / bar.weight * (bar.le - lo)) / mean))
                break
            seen += bar.weight
            lo = bar.le
    return tuple(out)


def service_workload(svc: Service, base: Path) -> Workload:
    """The perf model's workload for a service at its peak."""
    w = svc.workload
    isl, isl_cv = _trace_field(w.input_tokens, base, "input_tokens") or length_stats(w.input_tokens)
    osl, osl_cv = _trace_field(w.output_tokens, base, "output_tokens") or length_stats(w.output_tokens)
    cv = {"poisson": 1.0, "constant": 0.0, "gamma": w.arrival.cv or 1.0}[w.arrival.process]
    return Workload(isl=max(isl, 1.0), osl=max(osl, 1.0), concurrency=w.concurrency,
                    rate=w.rate.peak_rps if w.rate is not None else None, arrival_cv=cv, isl_cv=isl_cv,
                    osl_cv=osl_cv, prefix_hit=w.prefix_sharing,
                    isl_quantiles=length_quantiles(w.input_tokens, base, "input_tokens"))


def service_router(resolved: ResolvedIntent, service: str, aggregated: bool = True) -> str:
    """The router the manifests render for `service` (`routing.router_for` on the cluster's custom resources); a
    pipeline's LLM stage is handed its requests through its Service."""
    crds = {k: v for k, v in resolved.loaded.cluster.conventions.crds.model_dump().items() if v}
    router = router_for(crds, True, aggregated)
    staged = service not in {r.service.name for r in resolved.services}
    return "service" if staged and router == "http-route" else router


def objectives(svc: Service) -> dict[tuple[str, str], float]:
    """The objectives the intent states, (metric, percentile or `mean`) -> seconds."""
    return {(metric, pct): seconds for metric, pct, seconds in svc.slo.targets()}


def attainment_objectives(svc: Service) -> dict[tuple[str, str], float]:
    """What `slo.attainment` asks, as percentile objectives: a request is good when each of its TTFT, TPOT and E2E
    is within the loosest percentile target of that metric (`bench.metrics.request_bounds`), so a share A of good
    requests holds when each of those k metrics stays within its bound at percentile 1 - (1 - A) / k (the union
    bound: it asks no correlation between the metrics). Those at or below a percentile the intent already holds
    to that bound are left out."""
    if svc.slo.attainment is None:
        return {}
    bounds: dict[str, tuple[float, float]] = {}
    for metric, pct, seconds in svc.slo.targets():
        if pct != "mean" and metric in ("ttft", "tpot", "e2e"):
            q = float(pct[1:])
            if metric not in bounds or seconds > bounds[metric][0] or (seconds == bounds[metric][0]
                                                                        and q > bounds[metric][1]):
                bounds[metric] = (seconds, q)
    if not bounds:
        return {}
    # Hundredths of a percent, rounded up: the objective is never looser than the attainment asks; finer where
    # hundredths would round up to p100, which no unbounded latency holds (99.99% over three metrics: p99.997).
    exact = 100 - (1 - svc.slo.attainment) * 100 / len(bounds)
    digits = 2
    while (want := math.ceil(exact * 10 ** digits - 1e-6) / 10 ** digits) >= 100 and digits < 9:
        digits += 1
    return {(metric, f"p{want:g}"): seconds for metric, (seconds, q) in sorted(bounds.items()) if want > q}


def held_objectives(svc: Service) -> dict[tuple[str, str], float]:
    """Every objective a plan holds each replica to: the stated ones and what the attainment asks."""
    return {**objectives(svc), **attainment_objectives(svc)}


SCALE_UP_WIDTHS = 4
"""Doublings of a node's devices tried for one worker spread over a scale-up domain (NVL72 trays, super-nodes)."""


def _tp_options(model: ModelSpec, pool: Pool, allow_multi: bool, device: DeviceSpec | None = None,
                fw: FrameworkSpec | None = None) -> list[Parallel]:
    """Layouts of one worker on `pool`: tensor parallelism over a node's devices (with the experts split by
    expert or tensor parallelism); for a MoE model whose framework runs attention data parallelism, attention
    groups over the node with the experts spread over all of them (the wide-EP layout DeepSeek-class models are
    served with); across nodes, pipeline stages of a node each, or, where the pool's nodes share a scale-up domain
    (`topology.scale_up_domain`) wider than a node, one tensor- or expert-parallel group over several nodes."""
    attention_dp = fw is not None and "attention_dp" in fw.features
    # Attention groups over several nodes start as one tensor-parallel world where DP attention splits the TP
    # ranks (SGLang, TensorRT-LLM); engines that run each group as its own core (vLLM) need per-rank flags.
    wide_dp = attention_dp and fw is not None and fw.cli is not None and fw.cli.tensor_parallel(1, 2) == 2
    out = []
    tp = 1
    while tp <= pool.devices_per_node:
        if pool.devices_per_node % tp == 0:
            out.append(tp)
        tp *= 2
    shapes = []
    for t in out:
        if model.moe is not None:
            shapes.append(Parallel(tp=t, ep=t))
        shapes.append(Parallel(tp=t, moe_tp=t if model.moe is not None else 1))
        if model.moe is not None and attention_dp and t > 1:
            shapes.append(Parallel(tp=1, ep=t, attention_dp=t))
    shapes = list(dict.fromkeys(shapes))
    if allow_multi and pool.node_count > 1:
        for pp in (2, 4):
            if pp <= pool.node_count:
                base = pool.devices_per_node
                if model.moe is not None:
                    shapes.append(Parallel(tp=base, pp=pp, ep=base))
                shapes.append(Parallel(tp=base, pp=pp, moe_tp=base if model.moe is not None else 1))
        domain = device.interconnect.domain_size.value if device is not None else 0
        if pool.topology.scale_up_domain and domain > pool.devices_per_node:
            width = pool.devices_per_node * 2
            for _ in range(SCALE_UP_WIDTHS):
                if width > min(domain, pool.device_count):
                    break
                if model.moe is not None:
                    shapes.append(Parallel(tp=width, ep=width))
                    if wide_dp:
                        shapes.append(Parallel(tp=1, ep=width, attention_dp=width))
                else:
                    shapes.append(Parallel(tp=width))
                width *= 2
    return list(dict.fromkeys(shapes))


def wanted_precisions(stated: list[str], model: ModelSpec, device: DeviceSpec, fw: FrameworkSpec) -> list[str]:
    """The precisions to try: those stated, else the weights as published (or 16-bit where the device, under
    this framework, lacks that format: bf16, else fp16)."""
    if stated:
        return list(stated)
    served = device.precisions_for(fw.name)
    if model.native_precision in served:
        return [model.native_precision]
    return ["bf16" if "bf16" in served or "fp16" not in served else "fp16"]


def _precisions(svc: Service, model: ModelSpec, device: DeviceSpec, fw: FrameworkSpec) -> list[str]:
    served = device.precisions_for(fw.name)
    return [p for p in wanted_precisions(list(svc.precisions), model, device, fw) if p in served
            and p in fw.precisions]


def quirk_refusals(stated: list[str], model: ModelSpec, device: DeviceSpec, fw: FrameworkSpec) -> list[tuple[str,
                                                                                                           str]]:
    """(precision, why) for each precision a device quirk refuses under this framework among those the service
    states, or the published one when it states none."""
    wanted = list(stated) or [model.native_precision]
    out = []
    for p in wanted:
        q = device.precision_quirk(fw.name, p)
        if q is not None and p in fw.precisions:
            out.append((p, f"{fw.name} on {device.name}: {p} not supported (quirk {q.id})"))
    return out


def tp_refusal(device: DeviceSpec, fw: FrameworkSpec, par: Parallel) -> str:
    """Why a layout's tensor parallelism exceeds what a quirk says works ('' when it does not)."""
    q = device.tp_limit(fw.name)
    if q is None or q.max_tp is None or par.tp <= q.max_tp:
        return ""
    return f"{fw.name} on {device.name}: tp{par.tp} above the largest TP known to work, {q.max_tp} (quirk {q.id})"


def correction_for(resolved: ResolvedIntent, dep: Deployment, wl: Workload) -> Correction | None:
    """What the user's calibration (when the intent is planned with one) says of a deployment under a workload."""
    cal: UserCalibration | None = resolved.calibration
    return None if cal is None else cal.correction(dep, wl)


class _Key:
    """A key of `Scores`, hashed once: its shapes are nested dataclasses whose hash Python recomputes field by
    field on every lookup, and a search looks its key up several times."""

    __slots__ = ("value", "_hash")

    def __init__(self, value: tuple[Any, ...]) -> None:
        self.value = value
        self._hash = hash(value)

    def __hash__(self) -> int:
        return self._hash

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _Key) and self._hash == other._hash and self.value == other.value


class Scores:
    """What scoring one intent's shapes has found, shared across its pools and services and the searches a plan
    runs again (relaxations, re-plans after verification): each distinct deployment compiled once, on each
    distinct device and memory, and each distinct (compiled deployment, workload, objectives, pool size) scored
    once. Pools of one device type and services of one model and workload score the same shapes."""

    def __init__(self) -> None:
        self.compiled: dict[_Key, Compiled | InfraError] = {}
        self.capacity: dict[_Key, tuple[float, Estimate] | InfraError | Pending] = {}
        self.slices: dict[tuple[int, float], DeviceSpec] = {}


_SCORES: dict[int, tuple[weakref.ref, Scores]] = {}


def scores_of(resolved: ResolvedIntent) -> Scores:
    """The scores of one resolved intent, kept while it lives."""
    key = id(resolved)
    hit = _SCORES.get(key)
    if hit is not None and hit[0]() is resolved:
        return hit[1]
    scores = Scores()
    _SCORES[key] = (weakref.ref(resolved, lambda _, key=key: _SCORES.pop(key, None)), scores)
    return scores


def _compiled(scores: Scores, key: _Key, build: Callable[[], Compiled]) -> Compiled:
    """The compiled deployment under `key`, built once; a shape that cannot run fails the same way each time."""
    hit = scores.compiled.get(key)
    if hit is None:
        try:
            hit = build()
        except InfraError as exc:
            hit = exc
        scores.compiled[key] = hit
    if isinstance(hit, InfraError):
        raise hit
    return hit


def _capacity(dep: Deployment, wl: Workload, slo: dict[tuple[str, str], float], resolved: ResolvedIntent,
              pool: Pool, device: DeviceSpec, memory_gb: float | None = None,
              decode_pool: Pool | None = None, worth: float = 0.0,
              even: bool = False) -> Generator[Probe, Prediction, tuple[float | None, Estimate]]:
    """A `Search` for (the most load one replica serves within the objectives, the estimate there); (0, the
    estimate at the lightest load) when even that misses them. With `worth`, the load this shape must carry to be
    worth more than one already scored: (None, the estimate at that load) when the objectives already fail there
    (at the smoothest stream the pool's replicas could share), so that its capacity lies below it and the full
    search is not needed (nor the lightest load's, which would say whether it misses them even there); the
    predictions grow with the load (`benchmarks/monotone.py`), which the full search relies on as well. `even`:
    the service's requests are split evenly at random over its pods (a plain Service, `infra.planner.routing`),
    not by a load-aware picker."""
    catalog = resolved.catalog
    assert catalog is not None
    mem = memory_gb if memory_gb is not None else pool_device_memory_gb(pool, device)
    cross: dict[str, float | None] = {}
    if decode_pool is not None:
        cross = {"decode_memory_gb": pool_device_memory_gb(decode_pool, resolved.pools[decode_pool.name]),
                 "link_gbs": network_gbs(pool, decode_pool)}
    measured = correction_for(resolved, dep, wl)
    scores = scores_of(resolved)
    shape = (dep, id(device), mem, tuple(cross.values()), measured)
    room = pool.node_count * pool.devices_per_node
    key = _Key((shape, wl, tuple(sorted(slo.items())), room, even))
    while isinstance(hit := scores.capacity.get(key), Pending):
        yield hit  # another search is finding it: its answer is this one's, unless it found its shape dominated
    if isinstance(hit, InfraError):
        raise hit
    if hit is not None:
        return hit
    finding = scores.capacity[key] = Pending()
    try:
        compiled = _compiled(scores, _Key((shape, wl.dephased)), lambda: compile_deployment(
            dep, catalog, device_memory_gb=mem, device_spec=device, correction=measured, **cross).serving(wl))
        found = yield from _find_capacity(compiled, wl, slo, room, worth, even)
        if found[0] is not None:  # a dominated shape is so only against its own service's others
            scores.capacity[key] = found  # type: ignore[assignment]
        return found
    except InfraError as exc:
        scores.capacity[key] = exc
        raise
    finally:
        if scores.capacity.get(key) is finding:
            del scores.capacity[key]
        finding.resolve()


def _find_capacity(compiled: Compiled, wl: Workload, slo: dict[tuple[str, str], float], room: int, worth: float,
                   even: bool) -> Generator[Probe, Prediction, tuple[float | None, Estimate]]:
    """`_capacity` of a shape no search has scored yet."""
    if worth <= 0:
        return (yield from _search(compiled, wl, slo, room, even))
    # The load it must carry is asked first: most shapes a smaller one outdoes fail there and need no more. One
    # that would miss its objectives even at the lightest load fails there too, and is as dominated.
    if wl.rate is not None:
        smoothest = room // max(compiled.lightest_devices(), 1) if wl.arrival_cv > 0 else 1
        # An even random split smooths nothing; its stream is at its smoothest over many pods (cv -> 1).
        worth_load = (replace(wl, rate=worth, arrival_cv=min(wl.arrival_cv, 1.0), peers=1) if even
                      else replace(wl, rate=worth, peers=max(smoothest, wl.peers)))
        probe = yield compiled, worth_load
        if overrun(probe, slo) > 0:
            return None, compiled.estimate(worth_load, probe)
    else:
        worth_load = replace(wl, concurrency=math.ceil(worth))
        probe = yield compiled, worth_load
        if not meets(probe, slo):
            return None, compiled.estimate(worth_load, probe)
    return (yield from _search(compiled, wl, slo, room, even))


def _search(compiled: Compiled, wl: Workload, slo: dict[tuple[str, str], float], room: int,
            even: bool = False) -> Generator[Probe, Prediction, tuple[float, Estimate]]:
    """The full capacity search of `_capacity`, on a pool of `room` devices."""
    if wl.rate is not None:
        cap, est = yield from max_rate_search(compiled, wl, slo)
        if even:
            # Split evenly at random over n pods, each meets a thinned stream (cv^2 = c^2 / n + 1 - 1 / n,
            # `routing.replica_loads`), smoothed by no picker: sized at the pods that capacity needs.
            n = min(math.ceil(wl.rate / cap), room // max(est.devices, 1)) if cap > 0 else 0
            if n > 1 and wl.arrival_cv != 1.0:
                cv = math.sqrt(wl.arrival_cv ** 2 / n + 1 - 1 / n)
                cap, est = yield from max_rate_search(compiled, replace(wl, arrival_cv=cv), slo)
            return cap, est
        # The service's requests reach n replicas through the load-aware router a plan renders (the inference
        # gateway's endpoint picker; the simulator's least-loaded router): each meets a smoother stream
        # than the whole, and holds more of it. Sized at the replicas the smoother capacity needs (fewer, so
        # less smoothing) and the pool can hold; a plan that ends with fewer (sharing the service with another
        # shape) says so in its predictions, which take the replicas it has.
        replicas = room // max(est.devices, 1)
        n = min(math.ceil(wl.rate / cap), replicas) if cap > 0 else 0
        if n > 1 and wl.arrival_cv > 0:
            smooth, e = yield from max_rate_search(compiled, replace(wl, peers=n), slo, meeting=cap)
            m = min(math.ceil(wl.rate / smooth), replicas)
            if m < n:
                smooth, e = yield from max_rate_search(compiled, replace(wl, peers=m), slo, meeting=cap)
            if smooth > cap:
                cap, est = smooth, e
        return cap, est
    # Closed loop: the most clients one replica serves within the objectives (bisection over integers).

    def ok(n: int) -> Generator[Probe, Prediction, Estimate | None]:
        load = replace(wl, concurrency=n)
        pred = yield compiled, load
        return compiled.estimate(load, pred) if meets(pred, slo) else None

    one = replace(wl, concurrency=1)
    first = compiled.estimate(one, (yield compiled, one))
    if not meets(first.prediction, slo):
        return 0.0, first
    lo, hi, best = 1, 2, first
    while hi <= 1 << 16:
        e = yield from ok(hi)
        if e is None:
            break
        lo, best, hi = hi, e, hi * 2
    while hi - lo > 1:
        mid = (lo + hi) // 2
        e = yield from ok(mid)
        if e is None:
            hi = mid
        else:
            lo, best = mid, e
    return float(lo), best


MAX_NUM_SEQS = 1024
"""The most sequences a planned engine batches (max_num_seqs), the ceiling vLLM itself picks on large-memory
GPUs. Every scored role carries it as its batch cap, so predictions assume the batch the engine will run."""
SLOTS_PER_DEVICE = 4
SHARES = (0.25, 0.5)
"""Slices a device may be cut into for small models: halves and quarters pack whole devices exactly."""
DECODE_WORKERS = (1, 2, 4)
"""Decode workers per prefill worker in a unit across device types (the prefill:decode ratios tried there)."""
PD_RATIOS = ((1, 1), (1, 2), (1, 4), (2, 1), (4, 1))
"""(prefill, decode) workers of a disaggregated unit on one pool: decode-heavy units for long answers,
prefill-heavy ones (tried only for `PREFILL_HEAVY` workloads) for long prompts and short answers."""
PREFILL_HEAVY = 8.0
"""Prompt tokens to compute per output token from which units with more prefill than decode workers are tried:
a decode token costs one step of the batch, a prompt token a share of a chunk, so below it one prefill worker
keeps up with a decode worker and the extra shapes would only be scored to be dominated."""
PREFILL_POOLS = 1
"""Prefill pools tried for prefill/decode units across device types: the one with the most compute per dollar."""


def _deployments(rs: ResolvedService, svc: Service, device: DeviceSpec, fw: FrameworkSpec, precision: str,
                 par: Parallel, wl: Workload) -> list[tuple[Deployment, int, int]]:
    """(deployment, prefill workers, decode workers): the aggregated deployment of a layout (0, 0) and, where the
    intent and framework allow, its disaggregated units: prefill workers of the layout and decode workers of it or
    of `decode_layouts`, in each of `PD_RATIOS`."""
    assert rs.model is not None
    out: list[tuple[Deployment, int, int]] = []
    mode = svc.preferences.disaggregation
    if mode != "on":
        out.append((Deployment(rs.model_key, device.name, fw.name, precision, agg=Role(par, MAX_NUM_SEQS)), 0, 0))
    # A device quirk can rule disaggregation out for a framework that has it elsewhere (vLLM's CPU backend).
    if mode != "off" and renders_pd(fw) and not device.feature_quirk(fw.name, "pd_disaggregation"):
        heavy = wl.isl * (1 - wl.prefix_hit) >= PREFILL_HEAVY * wl.osl
        for decode in decode_layouts(rs.model, fw, par):
            for p, k in (r for r in PD_RATIOS if heavy or r[0] <= r[1]):
                out.append((Deployment(rs.model_key, device.name, fw.name, precision, "disagg",
                                       prefill=Role(par, MAX_NUM_SEQS, workers=p),
                                       decode=Role(decode, MAX_NUM_SEQS, workers=k)), p, k))
    return out


def decode_layouts(model: ModelSpec, fw: FrameworkSpec, prefill: Parallel) -> list[Parallel]:
    """Layouts of the decode workers paired with a prefill worker of layout `prefill`: the same, and for a MoE
    model on a framework with attention data parallelism, attention groups over the same devices with the experts
    spread over all of them (decode is bound by reading the KV cache and the experts, which that layout spreads
    without replicating attention; prefill is bound by compute, which tensor parallelism splits)."""
    out = [prefill]
    width = prefill.devices // prefill.pp
    if (model.moe is not None and "attention_dp" in fw.features and prefill.attention_dp == 1 and prefill.pp == 1
            and prefill.sp == 1 and width > 1):
        out.append(Parallel(tp=1, ep=width, attention_dp=width))
    return out


def renders_pd(fw: FrameworkSpec) -> bool:
    """Whether prefill/decode units of a framework can be deployed as planned: it disaggregates, and its catalog
    cli states how the two hand the KV cache over (a connector or disaggregation setting), which the rendered
    workers then carry. An engine disaggregated only by a controller infra does not render (MindIE Motor) is
    planned aggregated."""
    return "pd_disaggregation" in fw.features and fw.cli is not None and fw.cli.kv_transfer


def network_gbs(a: Pool, b: Pool) -> float | None:
    """GB/s between nodes of two pools: the slower of their fastest NICs; None when either lists none."""
    if not a.nics or not b.nics:
        return None
    return min(max(n.bandwidth for n in a.nics), max(n.bandwidth for n in b.nics))


def _smallest_layouts(rs: ResolvedService, device: DeviceSpec, fw: FrameworkSpec, precision: str, pool: Pool,
                      resolved: ResolvedIntent) -> list[Parallel]:
    """The two smallest single-node layouts of the model on a pool whose weights fit: the smallest may leave
    too little room for the KV cache."""
    assert rs.model is not None and resolved.catalog is not None
    out = []
    for par in _tp_options(rs.model, pool, False):
        if tp_refusal(device, fw, par) or shape_problems(rs.model, device, fw, precision, par):
            continue
        try:
            build_workers(Deployment(rs.model_key, device.name, fw.name, precision, agg=Role(par)),
                          resolved.catalog, device_memory_gb=pool_device_memory_gb(pool, device))
        except InfraError:
            continue
        out.append(par)
        if len(out) == 2:
            break
    return out


def _cross_pool(rs: ResolvedService, svc: Service, wl: Workload, slo: dict[tuple[str, str], float],
                resolved: ResolvedIntent) -> Generator[Probe, Prediction, tuple[list[Considered], list[Candidate]]]:
    """A `Search` for (the records, the candidates) of disaggregated units whose prefill worker runs on one pool
    and decode workers on another pool of another device type (compute-rich prefill, bandwidth-rich decode), in
    one zone and under one switch where the profile names switches, with the KV cache crossing the network
    between them."""
    assert rs.model is not None
    seen: list[Considered] = []
    if svc.preferences.disaggregation == "off":
        return seen, []
    pools = [p for p in resolved.loaded.cluster.pools if resolved.pools[p.name].name in rs.devices
             and not (p.spot and svc.preferences.spot == "never")]
    out: list[Candidate] = []
    # Prefill wants compute: the pool with the most FLOPs per dollar is tried for it.
    def flops_per_dollar(p: Pool) -> float:
        d = resolved.pools[p.name]
        return _per_dollar(max(f.value for f in d.tflops.values()), _price(p, d))

    for a in sorted(pools, key=lambda p: (-flops_per_dollar(p), p.name))[:PREFILL_POOLS]:
        da = resolved.pools[a.name]
        partners = []
        for b in pools:
            db = resolved.pools[b.name]
            if da.name == db.name or (a.zone or "-") != (b.zone or "-"):
                continue
            if a.topology.switch and b.topology.switch and a.topology.switch != b.topology.switch:
                # KV caches would cross the spine at every request: P/D groups stay under one switch.
                seen.append(Considered(svc.name, a.name, "-", "-", f"P on {a.name} + D on {b.name}",
                                       f"pools {a.name} and {b.name} sit under different switches "
                                       f"({a.topology.switch}, {b.topology.switch})"))
                continue
            # Prefill is compute-bound and decode bandwidth-bound: pair only a card with more compute per
            # byte of bandwidth for prefill with one that has less ...
            if (max(f.value for f in da.tflops.values()) / da.memory_bandwidth_tbps.value
                    <= max(f.value for f in db.tflops.values()) / db.memory_bandwidth_tbps.value):
                continue
            # ... and only when decode bandwidth is cheaper there; otherwise a unit on one pool does better.
            if (_per_dollar(db.memory_bandwidth_tbps.value, _price(b, db))
                    <= _per_dollar(da.memory_bandwidth_tbps.value, _price(a, da))):
                continue
            partners.append(b)
        # The decode pool with the cheapest bandwidth that runs the model; the others would cost more per token.
        partners.sort(key=lambda b: (-_per_dollar(resolved.pools[b.name].memory_bandwidth_tbps.value,
                                                  _price(b, resolved.pools[b.name])), b.name))
        for b in partners:
            found = yield from _cross_units(rs, svc, wl, slo, resolved, seen, a, b)
            if found:
                out += found
                break
    return seen, out


def _cross_units(rs: ResolvedService, svc: Service, wl: Workload, slo: dict[tuple[str, str], float],
                 resolved: ResolvedIntent, seen: list[Considered], a: Pool,
                 b: Pool) -> Generator[Probe, Prediction, list[Candidate]]:
    """A `Search` for the scored P/D units of prefill on pool `a` and decode on pool `b`, their records added to
    `seen`."""
    assert rs.model is not None
    da, db = resolved.pools[a.name], resolved.pools[b.name]
    out: list[Candidate] = []
    for fw in rs.frameworks:
        if not renders_pd(fw) or "llm" not in fw.kinds or not all(
                d.vendor in fw.vendors and (not fw.devices or d.name in fw.devices)
                and fw.image_for(d.name, d.vendor)[1] and not d.feature_quirk(fw.name, "pd_disaggregation")
                for d in (da, db)):
            continue
        for precision in _precisions(svc, rs.model, da, fw):
            if precision not in db.precisions:
                continue
            kv_a = kv_precision_for(precision, None, "fp8_kv_cache" in fw.features, da)
            if kv_precision_for(precision, None, "fp8_kv_cache" in fw.features, db) != kv_a:
                continue  # the KV cache must keep its format across the two device types
            for pa in _smallest_layouts(rs, da, fw, precision, a, resolved):
                for pb in _smallest_layouts(rs, db, fw, precision, b, resolved):
                    for k in DECODE_WORKERS:
                        dep = Deployment(rs.model_key, da.name, fw.name, precision, "disagg",
                                         prefill=Role(pa, MAX_NUM_SEQS, workers=1),
                                         decode=Role(pb, MAX_NUM_SEQS, workers=k),
                                         decode_device=db.name, kv_precision=kv_a)
                        label = pd_label(1, pa, k, pb, b.name)
                        if pa.devices > a.device_count or k * pb.devices > b.device_count:
                            continue
                        record, scored = yield from _score(
                            Considered(svc.name, a.name, fw.name, precision, label, ""), dep, wl, slo, resolved, a,
                            da, longest=longest_request(svc), decode_pool=b, confidence=svc.slo.confidence)
                        seen.append(record)
                        if scored is None:
                            continue
                        out.append(Candidate(
                            svc.name, a.name, da.name, fw.name, precision, pa, pa.devices + k * pb.devices,
                            scored[0], _price(a, da), a.spot or b.spot, a.zone or "-", scored[1], k,
                            memory_gb=pool_device_memory_gb(a, da), decode_pool=b.name,
                            decode_device=db.name, decode_parallel=pb, decode_price=_price(b, db)))
    return out


def _price(pool: Pool, device: DeviceSpec) -> float:
    return pool.price if pool.price is not None else device.reference_price_per_hour.value


def _per_dollar(value: float, price: float) -> float:
    """What a dollar an hour buys of `value`; a pool priced at $0/h (owned, already paid for) gives it for nothing,
    so it ranks above every priced one."""
    return value / price if price > 0 else math.inf


def prune_dominated(cands: list[Candidate]) -> tuple[list[Candidate], list[Candidate]]:
    """(kept, dropped): within one service, pool, framework and mode, a shape is dropped when another needs no
    more devices per replica and carries at least as much load per device; replicas of that one do the same job
    for no more money."""
    groups: dict[tuple[str, str, str, str, str], list[Candidate]] = {}
    for c in cands:
        groups.setdefault((c.service, c.pool, c.decode_pool or "", c.framework, c.mode), []).append(c)
    kept, dropped = [], []
    for group in groups.values():
        for c in group:
            eff = c.capacity / c.consumption
            if any(d is not c and d.consumption <= c.consumption and d.capacity / d.consumption >= eff
                   and (d.consumption < c.consumption or d.capacity / d.consumption > eff or d.key < c.key)
                   for d in group):
                dropped.append(c)
            else:
                kept.append(c)
    return kept, dropped


def _can_share(resolved: ResolvedIntent, svc: Service, device: DeviceSpec) -> bool:
    res = resolved.device_resources.get(device.vendor)
    return svc.preferences.fractional_sharing and res is not None and res.memory is not None


def slice_device(device: DeviceSpec, share: float) -> DeviceSpec:
    """The device as a slice of `share` of it sees it: that share of its compute and memory bandwidth."""
    return device.model_copy(update={
        "memory_bandwidth_tbps": device.memory_bandwidth_tbps.model_copy(
            update={"value": device.memory_bandwidth_tbps.value * share}),
        "tflops": {k: f.model_copy(update={"value": f.value * share}) for k, f in device.tflops.items()},
    })


def _shared(rs: ResolvedService, svc: Service, device: DeviceSpec, fw: FrameworkSpec, precision: str, pool: Pool,
            resolved: ResolvedIntent, price: float, zone: str) -> list[_Job]:
    """Replicas on a slice of one device: its memory share as the device's memory, and its core share (HAMi's
    compute limit) scaling the device's throughput; bandwidth is shared in the same proportion."""
    assert rs.model is not None
    slices = scores_of(resolved).slices
    out = []
    for share in SHARES:
        # One slice object per device and share, so that pools of the device share its scores.
        scaled = slices.get((id(device), share)) or slices.setdefault((id(device), share),
                                                                   slice_device(device, share))
        memory = pool_device_memory_gb(pool, device) * share
        make = partial(Candidate, svc.name, pool.name, device.name, fw.name, precision, Parallel(), 1,
                       price_per_device_hour=price, spot=pool.spot, zone=zone, decode_workers=0, share=share,
                       device_spec=scaled, memory_gb=memory)
        out.append(_Job(Considered(svc.name, pool.name, fw.name, precision, f"tp1@{share:g}", ""),
                        Deployment(rs.model_key, device.name, fw.name, precision, agg=Role(Parallel(), MAX_NUM_SEQS)),
                        pool, scaled, (pool.name, fw.name, "agg"), share, make, memory))
    return out


def longest_request(svc: Service) -> int | None:
    """Tokens of the longest request a replica must hold: max_context, else the largest input plus output."""
    if svc.max_context is not None:
        return svc.max_context
    w = svc.workload
    if w.input_tokens is None or w.output_tokens is None:
        return None
    ends = []
    for dist in (w.input_tokens, w.output_tokens):
        top = dist.max or dist.fixed or (dist.histogram[-1].le if dist.histogram else None)
        if top is None:
            return None
        ends.append(top)
    return sum(ends)


def confident(slo: dict[tuple[str, str], float], dep: Deployment, confidence: float | None,
              calibrated: bool, measured_level: str = "", vendor_measured: bool = True, doublings: float = 0.0,
              unpinned_s: float = 0.0) -> dict[tuple[str, str], float]:
    """The objectives a prediction must meet for the measurement to meet `slo` with `confidence`: each target over
    the deployment's error band ratio (measured / predicted) at that quantile, TPOT's for ITL and the larger of
    the two for E2E; a ratio below 1 (the model over-predicting) never loosens a target. The model's own
    in-sample band counts only where its factors were fitted on this framework and device; a user's calibration
    that matched the model or the deployment (`measured_level`) brings its own, narrower band; factors borrowed
    for a device no measurement fitted bring the wider band of borrowed factors (wider again for a vendor none
    covers, `vendor_measured`), so a plan at a confidence keeps the margin such a device needs; and a workload
    `doublings` past the longest measured prompt or answer widens the packaged band (`band_for`). Where the model's
    fixed MoE latency could be `unpinned_s` longer in the form of it the measurements do not rule out
    (`Calibration.unpinned_ttft_s`), TTFT and E2E targets keep that much more (at any confidence)."""
    if confidence is None:
        return slo
    band = band_for(dep.mode, dep.model, calibrated, measured_level, vendor_measured, doublings)
    ratio = {m: max(1.0, band.ratio(m, confidence)) if band is not None else 1.0 for m in ("ttft", "tpot")}
    ratio["itl"], ratio["e2e"] = ratio["tpot"], max(ratio.values())
    margin = max(unpinned_s, 0.0)
    return {(metric, pct): target / ratio[metric] - (margin if metric in ("ttft", "e2e") else 0.0)
            for (metric, pct), target in slo.items()}


def millis(seconds: float) -> str:
    """Seconds as milliseconds for a message, e.g. `72.6 ms`."""
    return f"{seconds * 1000:,.1f} ms"


DOMINATED = "dominated by a shape with fewer devices and more load per device"

NO_IMAGE = "has no image pinned to a release for"
"""The refusal of a framework that names no released image for a device (nothing to roll out)."""


def no_image(fw: FrameworkSpec, device: DeviceSpec) -> str:
    """Why a framework cannot be planned on a device for want of an image: with the catalog's reason where the
    device is marked unplannable (no official registry publishes one)."""
    why = f"{fw.name} {NO_IMAGE} {device.name}"
    return f"{why} ({device.unplannable.reason})" if device.unplannable is not None else why


def _score(record: Considered, dep: Deployment, wl: Workload, slo: dict[tuple[str, str], float],
           resolved: ResolvedIntent, pool: Pool, device: DeviceSpec, memory_gb: float | None = None,
           longest: int | None = None, decode_pool: Pool | None = None, confidence: float | None = None,
           worth: float = 0.0,
           even: bool = False) -> Generator[Probe, Prediction, tuple[Considered, tuple[float, Estimate] | None]]:
    """A `Search` for (the record with its outcome, (capacity, estimate) or None). A shape whose KV cache cannot
    hold the longest request is dropped too. With a `confidence`, the objectives are tightened by the deployment's
    error band first. With `worth` (see `_capacity`), a shape whose capacity lies below it is dominated."""
    asked = slo
    if confidence is not None:
        measured = correction_for(resolved, dep, wl)
        cal = lookup(dep.framework, device, resolved.catalog.framework(dep.framework).calibration_from)
        level = measured.level if measured else ""
        forms = moe_latency_forms(resolved.catalog.model(dep.model), resolved.catalog, cal.factors.expert_latency_ms)
        unpinned = unpinned_ttft_s(forms, level)
        slo = confident(slo, dep, confidence, cal.calibrated, level, cal.vendor_measured,
                        doublings_past(wl.isl, wl.osl), unpinned)
    try:
        cap, est = yield from _capacity(dep, wl, slo, resolved, pool, device, memory_gb=memory_gb,
                                        decode_pool=decode_pool, worth=worth, even=even)
    except InfraError as exc:
        return dataclasses.replace(record, outcome=exc.problems[0].message), None
    if cap is not None and cap <= 0:
        targets = {f"{m}_{p}": t for (m, p), t in slo.items()}
        misses = tuple((k, v, targets[k]) for k, v in missed(est.prediction, slo).items())
        light = "1 client" if est.workload.concurrency is not None else f"{est.workload.rate:g} requests/s"
        what = "; ".join(f"{k} {millis(t)} (predicted {'unstable' if v is None else millis(v)})"
                         for k, v, t in misses)
        margin = "; targets narrowed by the error band for the attainment asked" if slo != asked else ""
        return dataclasses.replace(record, outcome=f"misses {what} even at the lightest load ({light}){margin}",
                                   misses=misses), None
    if longest:
        for role, mem in est.memory.items():
            need = longest * mem.kv_bytes_per_token / 1e9
            if need > mem.kv_gb:
                return dataclasses.replace(record, outcome=(
                    f"the longest request ({longest} tokens) needs {need:.1f} GB of KV cache per device, "
                    f"{role} workers have {mem.kv_gb:.1f} GB")), None
    if cap is None:
        return dataclasses.replace(record, outcome=DOMINATED), None
    return dataclasses.replace(record, outcome="candidate"), (cap, est)


@dataclass
class _Job:
    """A shape of one service waiting to be scored, and how its candidate is made once it is."""

    record: Considered
    dep: Deployment
    pool: Pool
    device: DeviceSpec
    group: tuple[str, str, str]
    """(pool, framework, mode): where `prune_dominated` compares shapes."""
    consumption: float
    make: Callable[..., Candidate]
    """The candidate given its `capacity` and `estimate`."""
    memory_gb: float | None = None


def _score_jobs(jobs: list[_Job], wl: Workload, slo: dict[tuple[str, str], float], resolved: ResolvedIntent,
                longest: int | None, confidence: float | None, even: bool = False,
                units_even: bool = False) -> list[Generator[Probe, Prediction, list[tuple[int, Considered,
                                                                                   Candidate | None]]]]:
    """The `Search`es that score one service's shapes, one per group, each returning (job index, record,
    candidate) for its jobs. In each group the smallest shape comes first: a shape must carry more load per device
    than every smaller one scored before it, else `prune_dominated` drops it, so a probe at that load is asked
    first and the full search runs only when it holds. `even` / `units_even`: the router splits the requests
    evenly at random over aggregated replicas / prefill/decode units."""
    groups: dict[tuple[str, str, str], list[int]] = {}
    for i in sorted(range(len(jobs)), key=lambda i: (jobs[i].group, jobs[i].consumption, i)):
        groups.setdefault(jobs[i].group, []).append(i)

    def group(order: list[int]) -> Generator[Probe, Prediction, list[tuple[int, Considered, Candidate | None]]]:
        top = 0.0
        out = []
        for i in order:
            job = jobs[i]
            record, scored = yield from _score(job.record, job.dep, wl, slo, resolved, job.pool, job.device,
                                               memory_gb=job.memory_gb, longest=longest, confidence=confidence,
                                               worth=top * job.consumption,
                                               even=even if job.dep.mode == "agg" else units_even)
            cand = job.make(capacity=scored[0], estimate=scored[1]) if scored is not None else None
            if cand is not None:
                top = max(top, cand.capacity / cand.consumption)
            out.append((i, record, cand))
        return out

    return [group(order) for order in groups.values()]


@dataclass(frozen=True)
class Considered:
    """A shape that was looked at, kept or not, for the candidates table."""

    service: str
    pool: str
    framework: str
    precision: str
    parallel: str
    outcome: str
    """`candidate`, or why it was dropped."""
    misses: tuple[tuple[str, float | None, float], ...] = ()
    """For a shape that misses its objectives even at the lightest load: (objective, predicted seconds or None
    when that load never settles, target seconds) of each it misses."""


@dataclass(frozen=True)
class Corrections:
    """What measuring a plan taught: per service, objective key (`ttft_p99`) -> the factor its target is
    multiplied by when scoring candidates (below 1 tightens it where the measured metric ran over the target)."""

    objective_scale: dict[str, dict[str, float]] = dataclasses.field(default_factory=dict)

    def scale(self, service: str, metric: str, pct: str) -> float:
        return self.objective_scale.get(service, {}).get(f"{metric}_{pct}", 1.0)


def enumerate_candidates(resolved: ResolvedIntent, slo_scale: float = 1.0,
                         progress: Callable[[int, int], None] | None = None,
                         corrections: Corrections | None = None,
                         services: list[ResolvedService] | None = None) -> tuple[list[Candidate],
                                                                                 list[Considered]]:
    """Every runnable, useful replica shape of every service, and the record of what was dropped and why.
    `slo_scale` multiplies every objective (used to find how far an objective must relax); `progress(done,
    total)` is told after each service; `corrections` tighten objectives per service from verification;
    `services` replaces the intent's services (pipelines expanded into their stages)."""
    with collector_paused():  # a fleet's scoring keeps its estimates alive while it makes more (infra.perf.heap)
        return _enumerate(resolved, slo_scale, progress, corrections,
                          resolved.services if services is None else services)


def _enumerate(resolved: ResolvedIntent, slo_scale: float, progress: Callable[[int, int], None] | None,
               corrections: Corrections | None, services: list[ResolvedService]) -> tuple[list[Candidate],
                                                                                          list[Considered]]:
    base = resolved.loaded.document.path.parent
    # Every service's shapes are laid out first, then all of them scored together (`run_searches`: each round of
    # their capacity searches predicted in one vector pass), then the records gathered in the services' order.
    laid: list[tuple[list[Considered | _Job], int, int]] = []
    """Per service: its refusals and shapes in their place, and where its searches start and end in `lanes`."""
    lanes: list[Search] = []
    for rs in services:
        svc = rs.service
        if rs.model is None:
            raise InfraError(f"service {svc.name!r} is a pipeline; expand it into its stages first "
                             "(infra.planner.search.search)")
        wl = service_workload(svc, base)
        fix = corrections or Corrections()
        slo = {k: v * slo_scale * fix.scale(svc.name, *k) for k, v in held_objectives(svc).items()}
        items: list[Considered | _Job] = []
        for pool in resolved.loaded.cluster.pools:
            device = resolved.pools[pool.name]
            if device.name not in rs.devices or (pool.spot and svc.preferences.spot == "never"):
                continue
            price = _price(pool, device)
            zone = pool.zone or "-"
            memory = pool_device_memory_gb(pool, device)
            for fw in rs.frameworks:
                if (device.vendor not in fw.vendors or (fw.devices and device.name not in fw.devices)
                        or "llm" not in fw.kinds):
                    continue
                if not fw.image_for(device.name, device.vendor)[1]:
                    # A plan is only as good as its deployment: no released image, nothing to roll out.
                    items.append(Considered(svc.name, pool.name, fw.name, "-", "-", no_image(fw, device)))
                    continue
                for precision, why in quirk_refusals(list(svc.precisions), rs.model, device, fw):
                    items.append(Considered(svc.name, pool.name, fw.name, precision, "-", why))
                for precision in _precisions(svc, rs.model, device, fw):
                    allow_multi = pool.multi_node and svc.preferences.multi_node and fw.launches_multi_node
                    for par in _tp_options(rs.model, pool, allow_multi, device, fw):
                        label = par.label()
                        refused = tp_refusal(device, fw, par)
                        why = [refused] if refused else shape_problems(rs.model, device, fw, precision, par)
                        if why:
                            items.append(Considered(svc.name, pool.name, fw.name, precision, label, why[0]))
                            continue
                        if par.devices > pool.device_count:
                            items.append(Considered(svc.name, pool.name, fw.name, precision, label,
                                                    f"needs {par.devices} devices, pool has {pool.device_count}"))
                            continue
                        if par == Parallel() and _can_share(resolved, svc, device):
                            items += _shared(rs, svc, device, fw, precision, pool, resolved, price, zone)
                        for dep, prefill, workers in _deployments(rs, svc, device, fw, precision, par, wl):
                            decode = dep.decode.parallel if workers and dep.decode.parallel != par else None
                            devices = max(prefill, 1) * par.devices + workers * (decode or par).devices
                            shown = label if not workers else pd_label(prefill, par, workers, decode)
                            if devices > pool.device_count:
                                items.append(Considered(svc.name, pool.name, fw.name, precision, shown,
                                                        f"needs {devices} devices, pool has {pool.device_count}"))
                                continue

                            make = partial(Candidate, svc.name, pool.name, device.name, fw.name, precision, par,
                                           devices, price_per_device_hour=price, spot=pool.spot, zone=zone,
                                           decode_workers=workers, memory_gb=memory, decode_parallel=decode,
                                           prefill_workers=max(prefill, 1))
                            items.append(_Job(Considered(svc.name, pool.name, fw.name, precision, shown, ""), dep,
                                              pool, device, (pool.name, fw.name, "disagg" if workers else "agg"),
                                              float(devices), make))
        jobs = [x for x in items if isinstance(x, _Job)]
        router = service_router(resolved, svc.name)
        first = len(lanes)
        lanes += _score_jobs(jobs, wl, slo, resolved, longest_request(svc), svc.slo.confidence,
                             router == "service", router != "inference-pool")
        lanes.append(_cross_pool(rs, svc, wl, slo, resolved))
        laid.append((items, first, len(lanes)))
    owner = [k for k, (_, first, end) in enumerate(laid) for _ in range(first, end)]
    left = [end - first for _, first, end in laid]
    done = 0

    def finished(lane: int) -> None:
        nonlocal done
        left[owner[lane]] -= 1
        if not left[owner[lane]] and progress is not None:
            done += 1
            progress(done, len(services))

    if progress is not None:
        progress(0, len(services))
    results = run_searches(lanes, finished)
    out: list[Candidate] = []
    seen: list[Considered] = []
    for items, first, end in laid:
        scored = {i: (record, cand) for group in results[first:end - 1] for i, record, cand in group}
        jobs_seen = 0
        for x in items:
            if isinstance(x, Considered):
                seen.append(x)
                continue
            record, cand = scored[jobs_seen]
            jobs_seen += 1
            seen.append(record)
            if cand is not None:
                out.append(cand)
        cross_seen, cross = results[end - 1]
        seen += cross_seen
        out += cross
    kept, dropped = prune_dominated(out)
    gone = {c.key for c in dropped}
    seen = [dataclasses.replace(x, outcome=DOMINATED)
            if x.outcome == "candidate" and f"{x.service}/{x.pool}/{x.framework}/{x.precision}/{x.parallel}" in gone
            else x for x in seen]
    return kept, seen
