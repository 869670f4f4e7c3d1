"""Candidate replica shapes for each service, scored by the performance model.

A candidate is one way to run one replica of a service: a pool (and so a device and a price), a framework, a
precision and a parallel layout. It is kept only if it runs (shape checks and memory fit) and carries some load
while meeting every objective of the service; its capacity is that load (requests/s for an open loop, clients
for a closed one), its cost the pool's price times its devices.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Callable

from infra.catalog.schema import DeviceSpec, FrameworkSpec, ModelSpec
from infra.errors import InfraError
from infra.files import read_jsonl
from infra.intent.models import LengthDistribution, Service
from infra.intent.profile import Pool
from infra.intent.resolve import ResolvedIntent, ResolvedService, pool_device_memory_gb
from infra.perf.estimate import Estimate, build_workers, max_rate, meets, predict, shape_problems
from infra.perf.serving import z_of
from infra.perf.shape import Deployment, Parallel, Role, Workload


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
    estimate: Estimate
    """The prediction at that capacity."""
    decode_workers: int = 0
    """Disaggregated units: decode workers (each of layout `parallel`) per prefill worker; 0 = aggregated."""
    share: float = 1.0
    """Fraction of one device a replica takes when devices are shared through memory/core slices (HAMi)."""
    device_spec: DeviceSpec | None = None
    """The device as this replica sees it (a slice's share of its figures); None is the catalog's device."""
    memory_gb: float | None = None
    """Usable memory per device for this replica (the pool's allocatable figure, or a slice's share)."""

    @property
    def mode(self) -> str:
        return "disagg" if self.decode_workers else "agg"

    @property
    def consumption(self) -> float:
        """Devices' worth of capacity one replica takes (a fraction for a shared slice)."""
        return self.devices * self.share

    @property
    def slots(self) -> int:
        """`consumption` in quarter devices, the unit pools are packed in."""
        return int(round(self.consumption * SLOTS_PER_DEVICE))

    @property
    def cost_per_hour(self) -> float:
        return self.consumption * self.price_per_device_hour

    @property
    def layout(self) -> str:
        if self.share < 1:
            return f"{self.parallel.label()}@{self.share:g}"
        if not self.decode_workers:
            return self.parallel.label()
        return f"P {self.parallel.label()} + {self.decode_workers}xD {self.parallel.label()}"

    @property
    def key(self) -> str:
        return f"{self.service}/{self.pool}/{self.framework}/{self.precision}/{self.layout}"


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


def service_workload(svc: Service, base: Path) -> Workload:
    """The perf model's workload for a service at its peak."""
    w = svc.workload
    isl, isl_cv = _trace_field(w.input_tokens, base, "input_tokens") or length_stats(w.input_tokens)
    osl, osl_cv = _trace_field(w.output_tokens, base, "output_tokens") or length_stats(w.output_tokens)
    cv = {"poisson": 1.0, "constant": 0.0, "gamma": w.arrival.cv or 1.0}[w.arrival.process]
    return Workload(isl=max(isl, 1.0), osl=max(osl, 1.0), concurrency=w.concurrency,
                    rate=w.rate.peak_rps if w.rate is not None else None, arrival_cv=cv, isl_cv=isl_cv,
                    osl_cv=osl_cv, prefix_hit=w.prefix_sharing)


def objectives(svc: Service) -> dict[tuple[str, str], float]:
    return {(metric, pct): seconds for metric, pct, seconds in svc.slo.targets()}


def _tp_options(model: ModelSpec, pool: Pool, allow_multi: bool) -> list[Parallel]:
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
    shapes = list(dict.fromkeys(shapes))
    if allow_multi and pool.node_count > 1:
        for pp in (2, 4):
            if pp <= pool.node_count:
                base = pool.devices_per_node
                if model.moe is not None:
                    shapes.append(Parallel(tp=base, pp=pp, ep=base))
                shapes.append(Parallel(tp=base, pp=pp, moe_tp=base if model.moe is not None else 1))
    return list(dict.fromkeys(shapes))


def _precisions(svc: Service, model: ModelSpec, device: DeviceSpec, fw: FrameworkSpec) -> list[str]:
    if svc.precisions:
        wanted = list(svc.precisions)
    else:
        # Without a stated choice, serve the weights as published (or 16-bit where the device lacks that format).
        wanted = [model.native_precision if model.native_precision in device.precisions else "bf16"]
    return [p for p in wanted if p in device.precisions and p in fw.precisions]


def _capacity(dep: Deployment, wl: Workload, slo: dict[tuple[str, str], float], resolved: ResolvedIntent,
              pool: Pool, device: DeviceSpec, memory_gb: float | None = None) -> tuple[float, Estimate | None]:
    catalog = resolved.catalog
    assert catalog is not None
    mem = memory_gb if memory_gb is not None else pool_device_memory_gb(pool, device)
    if wl.rate is not None:
        return max_rate(dep, wl, slo, catalog, device_memory_gb=mem, device_spec=device)
    # Closed loop: the most clients one replica serves within the objectives (bisection over integers), with
    # the workers compiled once.
    workers, cal, link = build_workers(dep, catalog, device_memory_gb=mem, device_spec=device)

    def ok(n: int) -> Estimate | None:
        load = replace(wl, concurrency=n)
        pred = predict(dep, load, workers, link)
        if not meets(pred, slo):
            return None
        devices = sum(w.parallel.devices * pred.workers.get(name, 1) for name, w in workers.items())
        return Estimate(dep, load, pred, {name: w.memory for name, w in workers.items()}, cal, devices)

    first = ok(1)
    if first is None:
        return 0.0, None
    lo, hi, best = 1, 2, first
    while hi <= 1 << 16:
        e = ok(hi)
        if e is None:
            break
        lo, best, hi = hi, e, hi * 2
    while hi - lo > 1:
        mid = (lo + hi) // 2
        e = ok(mid)
        if e is None:
            hi = mid
        else:
            lo, best = mid, e
    return float(lo), best


SLOTS_PER_DEVICE = 4
SHARES = (0.25, 0.5)
"""Slices a device may be cut into for small models: halves and quarters pack whole devices exactly."""
DECODE_WORKERS = (1, 2, 4)
"""Decode workers per prefill worker in a disaggregated unit (the prefill:decode ratios tried)."""


def _deployments(rs: ResolvedService, svc: Service, device: DeviceSpec, fw: FrameworkSpec, precision: str,
                 par: Parallel, pool: Pool) -> list[tuple[Deployment, int]]:
    """The aggregated deployment of a layout and, where the intent and framework allow, its disaggregated units
    (one prefill worker and k decode workers of the same layout)."""
    assert rs.model is not None
    out: list[tuple[Deployment, int]] = []
    mode = svc.preferences.disaggregation
    if mode != "on":
        out.append((Deployment(rs.model.name, device.name, fw.name, precision, agg=Role(par)), 0))
    if mode != "off" and "pd_disaggregation" in fw.features:
        for k in DECODE_WORKERS:
            out.append((Deployment(rs.model.name, device.name, fw.name, precision, "disagg",
                                   prefill=Role(par, workers=1), decode=Role(par, workers=k)), k))
    return out


def prune_dominated(cands: list[Candidate]) -> tuple[list[Candidate], list[Candidate]]:
    """(kept, dropped): within one service, pool, framework and mode, a shape is dropped when another needs no
    more devices per replica and carries at least as much load per device; replicas of that one do the same job
    for no more money."""
    groups: dict[tuple[str, str, str, str], list[Candidate]] = {}
    for c in cands:
        groups.setdefault((c.service, c.pool, c.framework, c.mode), []).append(c)
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
            wl: Workload, slo: dict[tuple[str, str], float], resolved: ResolvedIntent, price: float, zone: str,
            seen: list[Considered]) -> list[Candidate]:
    """Replicas on a slice of one device: its memory share as the device's memory, and its core share (HAMi's
    compute limit) scaling the device's throughput; bandwidth is shared in the same proportion."""
    assert rs.model is not None
    out = []
    for share in SHARES:
        scaled = slice_device(device, share)
        dep = Deployment(rs.model.name, device.name, fw.name, precision, agg=Role(Parallel()))
        scored = _score(Considered(svc.name, pool.name, fw.name, precision, f"tp1@{share:g}", ""), dep, wl, slo,
                        resolved, pool, scaled, seen, memory_gb=pool_device_memory_gb(pool, device) * share,
                        longest=longest_request(svc))
        if scored is not None:
            out.append(Candidate(svc.name, pool.name, device.name, fw.name, precision, Parallel(), 1, scored[0],
                                 price, pool.spot, zone, scored[1], 0, share, scaled,
                                 pool_device_memory_gb(pool, device) * share))
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


def _score(record: Considered, dep: Deployment, wl: Workload, slo: dict[tuple[str, str], float],
           resolved: ResolvedIntent, pool: Pool, device: DeviceSpec, seen: list[Considered],
           memory_gb: float | None = None, longest: int | None = None) -> tuple[float, Estimate] | None:
    """(capacity, estimate) of one deployment, or None; either way the outcome is recorded in `seen`. A shape
    whose KV cache cannot hold the longest request is dropped too."""
    try:
        cap, est = _capacity(dep, wl, slo, resolved, pool, device, memory_gb=memory_gb)
    except InfraError as exc:
        seen.append(dataclasses.replace(record, outcome=exc.problems[0].message))
        return None
    if cap <= 0 or est is None:
        seen.append(dataclasses.replace(record, outcome="misses the objectives even at the lightest load"))
        return None
    if longest:
        for role, mem in est.memory.items():
            need = longest * mem.kv_bytes_per_token / 1e9
            if need > mem.kv_gb:
                seen.append(dataclasses.replace(record, outcome=(
                    f"the longest request ({longest} tokens) needs {need:.1f} GB of KV cache per device, "
                    f"{role} workers have {mem.kv_gb:.1f} GB")))
                return None
    seen.append(dataclasses.replace(record, outcome="candidate"))
    return cap, est


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


@dataclass(frozen=True)
class Corrections:
    """What measuring a plan taught: per service, objective key (`ttft_p99`) -> the factor its target is
    multiplied by when scoring candidates (below 1 tightens it where the measured metric ran over the target)."""

    objective_scale: dict[str, dict[str, float]] = dataclasses.field(default_factory=dict)

    def scale(self, service: str, metric: str, pct: str) -> float:
        return self.objective_scale.get(service, {}).get(f"{metric}_{pct}", 1.0)


def enumerate_candidates(resolved: ResolvedIntent, slo_scale: float = 1.0,
                         progress: Callable[[int, int], None] | None = None,
                         corrections: Corrections | None = None) -> tuple[list[Candidate], list[Considered]]:
    """Every runnable, useful replica shape of every service, and the record of what was dropped and why.
    `slo_scale` multiplies every objective (used to find how far an objective must relax); `progress(done,
    total)` is told after each service; `corrections` tighten objectives per service from verification."""
    base = resolved.loaded.document.path.parent
    out: list[Candidate] = []
    seen: list[Considered] = []
    for done, rs in enumerate(resolved.services):
        if progress is not None:
            progress(done, len(resolved.services))
        svc = rs.service
        if rs.model is None:
            raise InfraError(f"service {svc.name!r} is a pipeline; planning pipelines is not available in this "
                             "version — To fix: plan each stage's model as its own service for now")
        wl = service_workload(svc, base)
        fix = corrections or Corrections()
        slo = {k: v * slo_scale * fix.scale(svc.name, *k) for k, v in objectives(svc).items()}
        for pool in resolved.loaded.cluster.pools:
            device = resolved.pools[pool.name]
            if device.name not in rs.devices or (pool.spot and svc.preferences.spot == "never"):
                continue
            price = pool.price if pool.price is not None else device.reference_price_per_hour.value
            zone = pool.zone or "-"
            for fw in rs.frameworks:
                if device.vendor not in fw.vendors or (fw.devices and device.name not in fw.devices):
                    continue
                for precision in _precisions(svc, rs.model, device, fw):
                    allow_multi = (pool.multi_node and svc.preferences.multi_node and "multi_node" in fw.features)
                    for par in _tp_options(rs.model, pool, allow_multi):
                        label = par.label()
                        why = shape_problems(rs.model, device, fw, precision, par)
                        if why:
                            seen.append(Considered(svc.name, pool.name, fw.name, precision, label, why[0]))
                            continue
                        if par.devices > pool.device_count:
                            seen.append(Considered(svc.name, pool.name, fw.name, precision, label,
                                                   f"needs {par.devices} devices, pool has {pool.device_count}"))
                            continue
                        if par == Parallel() and _can_share(resolved, svc, device):
                            out += _shared(rs, svc, device, fw, precision, pool, wl, slo, resolved, price, zone,
                                           seen)
                        for dep, workers in _deployments(rs, svc, device, fw, precision, par, pool):
                            devices = par.devices * (1 + workers)
                            shown = label if not workers else f"P {label} + {workers}xD {label}"
                            if devices > pool.device_count:
                                seen.append(Considered(svc.name, pool.name, fw.name, precision, shown,
                                                       f"needs {devices} devices, pool has {pool.device_count}"))
                                continue
                            scored = _score(Considered(svc.name, pool.name, fw.name, precision, shown, ""), dep,
                                            wl, slo, resolved, pool, device, seen, longest=longest_request(svc))
                            if scored is not None:
                                out.append(Candidate(svc.name, pool.name, device.name, fw.name, precision, par,
                                                     devices, scored[0], price, pool.spot, zone, scored[1],
                                                     workers, memory_gb=pool_device_memory_gb(pool, device)))
    if progress is not None:
        progress(len(resolved.services), len(resolved.services))
    kept, dropped = prune_dominated(out)
    gone = {c.key for c in dropped}
    seen = [dataclasses.replace(x, outcome="dominated by a shape with fewer devices and more load per device")
            if x.outcome == "candidate" and f"{x.service}/{x.pool}/{x.framework}/{x.precision}/{x.parallel}" in gone
            else x for x in seen]
    return kept, seen
