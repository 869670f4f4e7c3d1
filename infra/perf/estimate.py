"""The performance model's front door: check a deployment's shape, then predict its metrics under a workload.

A shape that cannot work (tensor parallelism not dividing the heads, a precision the device lacks, weights that
do not fit) is an explanation, never a number. Every estimate says whether its efficiency factors were fitted on
this framework and device, and if not, where they were borrowed from and how far that is.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Generator, Sequence
from dataclasses import dataclass, field, replace
from functools import partial
from typing import Any

from infra.catalog.loader import Catalog
from infra.catalog.schema import DeviceSpec, FrameworkSpec, ModelSpec
from infra.errors import InfraError, Location, Problem
from infra.perf.arch import GB, NIC_GBS, MemoryFit, Worker, compile_worker, fabric, kv_precision_for, model_terms
from infra.perf.calibration import (
    Calibration,
    Factors,
    band_for,
    doublings_past,
    first_wave,
    lookup,
    measured_models,
    table,
    tails_at,
    ttft_at,
    unmeasured_regime,
)
from infra.perf.correction import NO_TAILS, Correction, scaled, with_tails, with_ttft
from infra.perf.heap import maker
from infra.perf.serving import (
    PERCENTILES,
    Prediction,
    batch_slots,
    closed_loop_agg,
    disagg,
    open_loop_agg,
    regula_falsi_steps,
)
from infra.perf.shape import Deployment, Parallel, Role, Workload
from infra.perf.vector import predict_open_agg, predict_open_disagg
from infra.perf.vector_closed import predict_closed_agg, predict_closed_disagg


class ShapeError(InfraError):
    """A deployment that cannot run as described."""


def runs_on(framework: FrameworkSpec, device: DeviceSpec) -> bool:
    return device.vendor in framework.vendors and (not framework.devices or device.name in framework.devices)


def shape_problems(model: ModelSpec, device: DeviceSpec, framework: FrameworkSpec, precision: str,
                   parallel: Parallel, role: str = "agg") -> list[str]:
    """Why this layout of this model cannot run on this device with this framework (empty when it can)."""
    out: list[str] = []
    where = "" if role == "agg" else f"{role}: "
    if not runs_on(framework, device):
        out.append(f"{framework.name} does not run on {device.name}")
    if precision not in device.precisions:
        out.append(f"{device.name} does not support {precision} (it supports {', '.join(device.precisions)})")
    if precision not in framework.precisions:
        out.append(f"{framework.name} does not serve {precision} weights")
    for name, value in (("tp", parallel.tp), ("pp", parallel.pp), ("ep", parallel.ep), ("moe_tp", parallel.moe_tp),
                        ("attention_dp", parallel.attention_dp)):
        if value < 1:
            out.append(f"{where}{name} must be at least 1 (got {value})")
    if out:
        return out
    if model.attention_heads % parallel.tp:
        out.append(f"{where}tp {parallel.tp} does not divide {model.name}'s {model.attention_heads} attention heads")
    elif model.mla is None and parallel.tp > model.kv_heads and parallel.tp % model.kv_heads:
        out.append(f"{where}tp {parallel.tp} is neither a divisor nor a multiple of {model.kv_heads} KV heads")
    elif model.mla is None and parallel.tp < model.kv_heads and model.kv_heads % parallel.tp:
        out.append(f"{where}tp {parallel.tp} does not divide {model.name}'s {model.kv_heads} KV heads")
    if parallel.pp > model.layers:
        out.append(f"{where}pp {parallel.pp} exceeds {model.name}'s {model.layers} layers")
    if model.moe is None:
        if parallel.ep > 1 or parallel.moe_tp > 1:
            out.append(f"{where}{model.name} has no experts; expert parallelism (ep/moe_tp) needs a MoE model")
    else:
        if parallel.ep > model.moe.experts:
            out.append(f"{where}ep {parallel.ep} exceeds {model.name}'s {model.moe.experts} experts")
        if model.moe.expert_ffn_size % parallel.moe_tp:
            out.append(f"{where}moe_tp {parallel.moe_tp} does not divide the expert FFN size "
                       f"{model.moe.expert_ffn_size}")
    features = set(framework.features)
    if parallel.ep > 1 and "expert_parallel" not in features:
        out.append(f"{framework.name} has no expert parallelism")
    if parallel.attention_dp > 1 and "attention_dp" not in features:
        out.append(f"{framework.name} has no attention data parallelism")
    if parallel.pp > 1 and "pipeline_parallel" not in features:
        out.append(f"{framework.name} has no pipeline parallelism")
    return out


def finite_ms(seconds: float) -> float | None:
    """Milliseconds for JSON; None (null) where the load never settles and the metric has no finite value, since
    JSON has no infinity."""
    return round(seconds * 1000, 4) if math.isfinite(seconds) else None


@dataclass(frozen=True)
class Estimate:
    """Predicted metrics of a deployment under a workload, with everything needed to trust or doubt them."""

    deployment: Deployment
    workload: Workload
    prediction: Prediction
    memory: dict[str, MemoryFit]
    calibration: Calibration
    devices: int
    """Devices the deployment occupies in total."""
    notes: list[str] = field(default_factory=list)
    workers: dict[str, Worker] = field(default_factory=dict, repr=False, compare=False)
    """The compiled workers the prediction was made with, per role."""

    def slots(self, role: str) -> int:
        """The batch the prediction let one attention group of `role` run (`serving.batch_slots`)."""
        return batch_slots(self.workers[role], self.deployment.roles()[role], self.workload)

    def to_json(self) -> dict[str, Any]:
        p = self.prediction
        ms = {k: {q: finite_ms(v) for q, v in getattr(p, k).items()} for k in ("ttft", "tpot", "itl", "e2e")}
        return {
            "model": self.deployment.model, "device": self.deployment.device, "framework": self.deployment.framework,
            "precision": self.deployment.precision, "mode": self.deployment.mode,
            "workload": {"isl": self.workload.isl, "osl": self.workload.osl,
                         "concurrency": self.workload.concurrency, "rate": self.workload.rate},
            **{f"{k}_ms": v for k, v in ms.items()},
            "throughput_rps": round(p.throughput_rps, 6), "output_tokens_per_s": round(p.output_tokens_per_s, 3),
            "batch_per_group": round(p.batch, 3), "load": round(p.load, 4) if math.isfinite(p.load) else None,
            "stable": p.stable,
            "workers": p.workers, "devices": self.devices,
            "memory": {r: {"weights_gb": round(m.weights_gb, 3), "kv_gb": round(m.kv_gb, 3),
                           "kv_tokens": m.kv_tokens} for r, m in self.memory.items()},
            "calibrated": self.calibration.calibrated, "calibration_source": self.calibration.source,
            "extrapolation_distance": self.calibration.distance,
            "measured_calibration": self.calibration.measured or None,
            "error_band": self.error_band(),
            "notes": self.notes + p.assumptions,
        }

    def error_band(self) -> dict[str, Any] | None:
        """Where a measurement of the mean TTFT and TPOT would fall, going by how far predictions calibrated on
        a user's measurements of this model or deployment fell from measurements (`calibrated_band`), else the
        model's own measurements (when fitted, on a calibrated framework and device) or held-out models'
        measurements; a device the factors were not fitted on adds error this does not hold. A workload past the
        longest measured prompt or answer widens it (`band_for`)."""
        band = band_for(self.deployment.mode, self.deployment.model, self.calibration.calibrated,
                        self.calibration.measured_level, self.calibration.vendor_measured,
                        doublings_past(self.workload.isl, self.workload.osl))
        p = self.prediction
        if band is None or not p.stable:
            return None
        out: dict[str, Any] = {"basis": band.basis, "quantiles": "p5..p95 of measured / predicted",
                               "held_for_a_left_out_model": {"ttft": band.held_ttft, "tpot": band.held_tpot}}
        for metric in ("ttft", "tpot"):
            mean = getattr(p, metric)["mean"]
            lo, hi = band.interval(metric, mean)
            if metric == "ttft" and self.calibration.unpinned_ttft_s:
                # Both forms of the fixed MoE latency (see the notes): the band around each.
                other = band.interval(metric, max(mean + self.calibration.unpinned_ttft_s, 0.0))
                lo, hi = min(lo, other[0]), max(hi, other[1])
                out["basis"] = f"{band.basis}; spanning both forms of the model's fixed MoE latency (see the notes)"
            out[f"{metric}_mean_ms"] = [round(lo * 1000, 4), round(hi * 1000, 4)]
        return out


_estimate = maker(Estimate)
"""`Estimate(*values)`, every field given: a batch of loads makes thousands."""


def _role_worker(model: ModelSpec, device: DeviceSpec, fw: FrameworkSpec, dep: Deployment, role_name: str,
                 role: Role, cal: Calibration, device_memory_gb: float | None) -> Worker:
    problems = shape_problems(model, device, fw, dep.precision, role.parallel, role_name)
    if problems:
        raise ShapeError([Problem(p, Location(path=f"deployment.{role_name}"),
                                  "change the layout, precision, device or framework") for p in problems])
    kv = kv_precision_for(dep.precision, dep.kv_precision, "fp8_kv_cache" in fw.features, device)
    worker = compile_worker(model, device, dep.precision, role.parallel, cal.factors, kv_precision=kv,
                            memory_utilization=dep.memory_utilization, max_num_tokens=role.max_num_tokens,
                            device_memory_gb=device_memory_gb, state_element_bytes=fw.linear_state_bytes)
    if not worker.memory.fits:
        raise ShapeError(Problem(f"{model.name} {dep.precision} {role.parallel.label()} on {device.name}: "
                                 f"{worker.memory.explain()}", Location(path=f"deployment.{role_name}"),
                                 "use more devices per replica (tp/pp/ep), a smaller precision, or a device "
                                 "with more memory"))
    return worker


def build_workers(dep: Deployment, catalog: Catalog, *, device_memory_gb: float | None = None,
                  factors: Factors | None = None, device_spec: DeviceSpec | None = None,
                  decode_memory_gb: float | None = None, link_gbs: float | None = None,
                  correction: Correction | None = None) -> tuple[dict[str, Worker], Calibration, float]:
    """Compile the workers of every role (checking shapes and memory), their calibration, and the bytes/s of the
    link that carries KV caches from prefill to decode workers. `device_spec` replaces the catalog's figures for
    the device (a slice of it, or a user's measured card). With a `decode_device`, decode workers run on it (with
    `decode_memory_gb` usable per device) and the KV cache crosses the network at `link_gbs` GB/s (a NIC's rate
    when not given). A `correction` from the user's measurements stretches every step (`infra.perf.correction`)
    and is recorded in the calibration returned, with its TTFT multiplier for `predict`."""
    model = catalog.model(dep.model)
    device = device_spec or catalog.device(dep.device)
    fw = catalog.framework(dep.framework)
    cal = Calibration(factors, True, "given") if factors is not None else lookup(fw.name, device,
                                                                                  fw.calibration_from)
    if correction is not None:
        cal = replace(cal, factors=scaled(cal.factors, correction.step), measured=correction.describe(),
                      ttft=correction.ttft, ttft_loads=correction.ttft_loads, tails=correction.tails,
                      tail_loads=correction.tail_loads, measured_level=correction.level)
    if dep.mode != "agg" and "pd_disaggregation" not in fw.features:
        raise ShapeError(Problem(f"{fw.name} does not support prefill/decode disaggregation",
                                 fix="use mode agg or another framework"))
    for dev in (device, *([catalog.device(dep.decode_device)] if dep.decode_device and dep.mode != "agg" else [])):
        quirk = dep.mode != "agg" and dev.feature_quirk(fw.name, "pd_disaggregation")
        if quirk:
            raise ShapeError(Problem(f"{fw.name} does not disaggregate prefill and decode on {dev.name}: "
                                     f"{quirk.description}", Location(path="deployment.mode"),
                                     "use mode agg on this device"))
    for dev in (device, *([catalog.device(dep.decode_device)] if dep.decode_device and dep.mode != "agg" else [])):
        if not runs_on(fw, dev):
            there = sorted(name for name, f in catalog.frameworks.items() if runs_on(f, dev))
            raise ShapeError(Problem(f"{fw.name} does not run on {dev.name}", Location(path="deployment.framework"),
                                     f"use a framework that does: {', '.join(there)}" if there else
                                     "no catalog framework runs on it; add one with --catalog DIR"))
    if dep.decode_device is None or dep.mode == "agg":
        workers = {name: _role_worker(model, device, fw, dep, name, role, cal, device_memory_gb)
                   for name, role in dep.roles().items()}
        net = fabric(device)
        within = dep.prefill.parallel.devices + dep.decode.parallel.devices <= net.devices
        link = net.link_bytes_s if within else (link_gbs or NIC_GBS) * GB
        return workers, cal, link
    other = catalog.device(dep.decode_device)
    decode_cal = Calibration(factors, True, "given") if factors is not None else lookup(fw.name, other,
                                                                                         fw.calibration_from)
    if correction is not None:
        decode_cal = replace(decode_cal, factors=scaled(decode_cal.factors, correction.step))
    workers = {"prefill": _role_worker(model, device, fw, dep, "prefill", dep.prefill, cal, device_memory_gb),
               "decode": _role_worker(model, other, fw, dep, "decode", dep.decode, decode_cal, decode_memory_gb)}
    both = Calibration(cal.factors, cal.calibrated and decode_cal.calibrated,
                       f"prefill {cal.source}, decode {decode_cal.source}", max(cal.distance, decode_cal.distance),
                       measured=cal.measured, ttft=cal.ttft, ttft_loads=cal.ttft_loads, tails=cal.tails,
                       tail_loads=cal.tail_loads, measured_level=cal.measured_level)
    return workers, both, (link_gbs or NIC_GBS) * GB


def predict(dep: Deployment, wl: Workload, workers: dict[str, Worker], link: float, ttft: float = 1.0) -> Prediction:
    """Serving-layer prediction from compiled workers; `ttft` multiplies its time to first token (a user's
    calibration, `Calibration.ttft`)."""
    return with_ttft(_predict(dep, wl, workers, link), ttft)


def _predict(dep: Deployment, wl: Workload, workers: dict[str, Worker], link: float) -> Prediction:
    if dep.mode == "agg":
        w = workers["agg"]
        if w.max_sequences(wl.isl + wl.osl) < 1:
            raise ShapeError(Problem(f"one request of {wl.isl + wl.osl:g} tokens needs "
                                     f"{w.kv_bytes(wl.isl + wl.osl) / GB:.2f} GB of KV cache per device but only "
                                     f"{w.memory.kv_gb:.2f} GB is left",
                                     fix="use more devices per replica or shorter requests"))
        return closed_loop_agg(w, dep.agg, wl) if wl.concurrency is not None else open_loop_agg(w, dep.agg, wl)
    if wl.concurrency is not None and wl.osl <= 1:
        raise ShapeError(Problem(f"with answers of {wl.osl:g} token the decode workers of a disaggregated deployment "
                                 "have nothing to do: a closed loop of such requests is its prefill alone",
                                 fix="serve them aggregated (--mode agg), or give answers of more than one token"))
    return disagg(workers["prefill"], workers["decode"], dep.prefill, dep.decode, wl, link)


LAYER_KINDS = (
    ("linear-attention or state-space layers", lambda m: m.attention.linear_attention_layers > 0),
    ("sparse attention", lambda m: m.attention.sparse_topk is not None),
    ("sliding-window layers", lambda m: m.attention.sliding_window_layers > 0),
    ("latent attention (MLA)", lambda m: m.mla is not None),
    ("routed experts", lambda m: m.moe is not None),
)
"""Kinds of layer the step times price with their own terms, and how to tell a model has them."""


def _notes(dep: Deployment, cal: Calibration, catalog: Catalog, forms: tuple[str, float, float] | None
           ) -> list[str]:
    """What an estimate extrapolates: factors borrowed from another framework or device, layers of a kind no
    measured model has (priced by the roofline at factors fitted on other layers; the error band does not cover
    them), collectives over a fabric no measured deployment used (PCIe), and a fixed MoE latency the
    measurements do not pin (`forms`, the model's `moe_latency_forms`)."""
    traded = f", at {cal.architecture}'s fitted share of peak" if cal.architecture else ""
    notes = [] if cal.calibrated else [f"not calibrated for {dep.framework} on {dep.device}: efficiency factors "
                                       f"{cal.source} (device distance {cal.distance:g}){traded}"]
    if cal.measured:
        notes.append(cal.measured)
    model = catalog.model(dep.model)
    measured = [catalog.models[name] for name in measured_models() if name in catalog.models]
    new = [kind for kind, has in LAYER_KINDS if has(model) and measured and not any(has(m) for m in measured)]
    if new:
        notes.append(f"{model.name} has {' and '.join(new)}, which no measured model has: their time is the "
                     "roofline at efficiency factors fitted on other layers, outside the error band's evidence")
    spread = max(max(r.parallel.tp, r.parallel.moe_tp, r.parallel.ep) for r in dep.roles().values())
    if spread > 1 and fabric(catalog.device(dep.device)).hops > 1 and not _pcie_measured(catalog):
        notes.append(f"{dep.device} has no scale-up fabric: its collectives cross the server's PCIe, which no measured "
                     "deployment did (priced at the link's speed with the fitted NVLink latency doubled, outside "
                     "the error band's evidence)")
    if forms is not None:
        why, packaged, other = forms
        notes.append(f"{model.name} {why}: the latency before its first token that grows with its routed parameters "
                     f"(`expert_latency_ms`, {packaged * 1e3:.0f} ms) is carried past the measurements; charged per "
                     "expert of each MoE layer, which holds out on them about as well, it would be "
                     f"{other * 1e3:.0f} ms" + ("; the error band spans both" if cal.unpinned_ttft_s else
                                                  "; your calibration's measurements of this model set its TTFT"))
    return notes


def moe_latency_forms(model: ModelSpec, catalog: Catalog, ms_per_b: float) -> tuple[str, float, float] | None:
    """(why, seconds, seconds in the other form) of a model's fixed MoE latency (`expert_latency_ms`, per billion
    routed parameters a token passes through) where the measurements do not pin it: the model routes more
    parameters per token than any measured MoE model, or its experts are shaped unlike theirs. Charged per expert
    of each MoE layer instead, the latency holds out on the measurements about as well
    (docs/concepts/performance-model.md); scaled to the packaged form on the measured models (a least-squares
    line through the origin), the two agree there within a factor of 0.9-1.6, and part where the experts are few
    and large (Mixtral) or many and small. None where the packaged form does not extrapolate and the two part no
    further than on a measured model."""
    routed, layers = routed_params_b(model), expert_layers_k(model)
    if not routed:
        return None
    measured = [catalog.models[name] for name in measured_models() if name in catalog.models]
    known = [(routed_params_b(m), expert_layers_k(m), m.name) for m in measured if m.moe is not None]
    if not known:
        return None
    per_k = sum(r * k for r, k, _ in known) / sum(k * k for _, k, _ in known)
    most = max(known)
    if routed > EXTRAPOLATED * most[0]:
        why = (f"routes {routed:.1f}B expert parameters per token, more than any measured model ({most[0]:.1f}B, "
               f"{most[2]})")
    else:
        ratios = [per_k * k / r for r, k, _ in known]
        if min(ratios) / EXTRAPOLATED <= per_k * layers / routed <= EXTRAPOLATED * max(ratios):
            return None
        terms = model_terms(model)
        why = (f"has {terms.experts} routed experts of {terms.expert_params / terms.moe_layers / 1e6:.0f}M parameters "
               f"({terms.active_experts} active) in each of {terms.moe_layers} MoE layers, a shape on which the two "
               "forms below part further than on any measured model")
    return why, routed * ms_per_b * 1e-3, per_k * layers * ms_per_b * 1e-3


def _pcie_measured(catalog: Catalog) -> bool:
    """Whether a device the packaged factors were fitted on has no scale-up fabric (its collectives crossed PCIe);
    true when there is no fit to tell."""
    names = table().get("devices") or {}
    found = [catalog.tables["devices"].find(name) for name in names]
    return not names or any(d is not None and fabric(d).hops > 1 for d in found)


EXTRAPOLATED = 1.1
"""How far past the measured models' routed parameters per token an estimate says it extrapolates (a few
percent past them is within what the fit saw)."""


def routed_params_b(model: ModelSpec) -> float:
    """Billions of routed-expert parameters one token passes through in the whole model (0 for a dense one)."""
    terms = model_terms(model)
    return terms.active_experts * terms.expert_params / 1e9


def expert_layers_k(model: ModelSpec) -> float:
    """Thousands of routed experts over the model's MoE layers (every expert of every MoE layer; 0 for a dense
    model)."""
    terms = model_terms(model)
    return terms.experts * terms.moe_layers / 1000


@dataclass(frozen=True)
class Compiled:
    """A deployment's workers compiled once (shapes checked, memory fitted, calibration looked up), to be
    predicted at as many loads as a search needs."""

    deployment: Deployment
    workers: dict[str, Worker]
    calibration: Calibration
    link: float
    """Bytes/s of the link that carries KV caches from prefill to decode workers."""
    notes: list[str]
    per_worker: tuple[tuple[str, int], ...] = field(init=False, repr=False, compare=False)
    """(role, devices of one of its workers): what an estimate's device count is made of, taken once."""
    uncorrected: bool = field(init=False, repr=False, compare=False)
    """Whether the calibration leaves the serving layer's predictions as they are (no TTFT multiplier or measured
    tails at any load): `corrected` then returns them untouched without looking up a load."""
    memory: dict[str, MemoryFit] = field(init=False, repr=False, compare=False)
    """Each role's memory fit, which every estimate of the deployment carries (one dict, shared)."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "per_worker", tuple((name, w.parallel.devices) for name, w in self.workers.items()))
        object.__setattr__(self, "memory", {name: w.memory for name, w in self.workers.items()})
        cal = self.calibration
        object.__setattr__(self, "uncorrected", cal.ttft == 1.0 and not cal.ttft_loads and cal.tails == NO_TAILS
                           and not cal.tail_loads)

    def at(self, load: Workload) -> Estimate:
        return self.estimate(load, self.predict(load))

    def with_first_wave(self, share: float | None) -> Compiled:
        """This deployment driven by a closed loop whose clients start at once, `share` of its requests in that
        first wave (`infra.perf.calibration.first_wave`); itself where the share is not known."""
        if share is None:
            return self
        return replace(self, workers={name: w.with_factors(first_wave(w.factors, name, share))
                                      for name, w in self.workers.items()})

    def serving(self, load: Workload) -> Compiled:
        """This deployment as it serves `load` for good, not as a benchmark starts it: a closed loop whose lengths
        vary (`Workload.dephased`) has no first wave, its clients long dephased (what `infra bench` judges past
        its first requests); one whose lengths all match keeps the share fitted to the measured loops, whose
        clients stay in step; an open loop has none to take."""
        return self.with_first_wave(0.0) if load.dephased else self

    def predict(self, load: Workload) -> Prediction:
        """The prediction alone: what a search compares with its objectives (the estimate is made of the one it
        keeps)."""
        return self.corrected(load, _predict(self.deployment, load, self.workers, self.link))

    def corrected(self, load: Workload, pred: Prediction) -> Prediction:
        """A serving-layer prediction at `load` with the user's calibration's TTFT multiplier at that load and
        its measured tails (unchanged without one)."""
        if self.uncorrected:
            return pred
        cal = self.calibration
        pred = with_ttft(pred, ttft_at(cal.ttft, cal.ttft_loads, load.concurrency, load.rate))
        return with_tails(pred, tails_at(cal.tails, cal.tail_loads, load.concurrency, load.rate), load.osl)

    def devices(self, pred: Prediction) -> int:
        """Devices the deployment occupies with the workers a prediction sized."""
        if len(self.per_worker) == 1:  # (aggregated: most of a batch's estimates)
            (name, n), = self.per_worker
            return n * pred.workers.get(name, 1)
        return sum(n * pred.workers.get(name, 1) for name, n in self.per_worker)

    def lightest_devices(self) -> int:
        """Devices the deployment occupies at its lightest load without predicting it: the workers its roles state,
        and one of each a prediction would size for the rate (a trickle needs no more)."""
        return sum(n * (getattr(self.deployment, name).workers or 1) for name, n in self.per_worker)

    def estimate(self, load: Workload, pred: Prediction, regime: list[str] | None = None) -> Estimate:
        """The estimate of a prediction made for this deployment at `load` (by `predict`, or many at once by
        `predictions`); `regime` is `unmeasured_regime` of the load's lengths, where the caller has it."""
        if regime is None:
            regime = unmeasured_regime(load.isl, load.osl)
        return _estimate(self.deployment, load, pred, self.memory, self.calibration, self.devices(pred),
                         self.notes + regime + over_admitted(self.deployment, self.workers, load, pred), self.workers)


OVER_ADMITTED_NEAR = 0.95
"""Share of the sequences the KV cache holds that a predicted batch reaches before an engine whose batch cap is
above them is taken to admit past them."""


def over_admitted(dep: Deployment, workers: dict[str, Worker], load: Workload, pred: Prediction) -> list[str]:
    """Where a role's batch cap lets an engine run more sequences than its KV cache holds at the load's context
    and the predicted batch fills what it holds: an engine admits a prompt by the blocks it needs now and
    preempts (recomputes) sequences as their answers grow, which the prediction, capped at what the cache holds,
    does not price. The simulator's such loops (Llama-3.1 8B and 70B on an H100, 8k-token prompts of CV 0.5,
    64 clients, a cap of 256 where the cache holds 45 and 49: `serving.batch_slots`) preempted about once per
    request and ran TPOT 1.8-2.0 times the prediction made at what it holds (TTFT alike); capped there, within
    3%."""
    out = []
    for name, role in dep.roles().items():
        if name == "prefill" or role.batch_cap is None:
            continue
        held = batch_slots(workers[name], replace(role, batch_cap=None), load)
        if role.batch_cap > held and pred.batch >= OVER_ADMITTED_NEAR * held:
            out.append(f"the {name} batch cap ({role.batch_cap}) is above the {held} sequences the KV cache holds "
                       f"at this workload's context, and the batch fills them: an engine admits past them and "
                       f"preempts (recomputes) sequences as their answers grow, which this prediction does not "
                       f"price (simulated such loops ran TPOT 1.8-2.0 times it); cap the batch at {held} "
                       f"(max_num_seqs) to run what it predicts")
    return out


def compile_deployment(dep: Deployment, catalog: Catalog, *, device_memory_gb: float | None = None,
                       factors: Factors | None = None, device_spec: DeviceSpec | None = None,
                       decode_memory_gb: float | None = None, link_gbs: float | None = None,
                       correction: Correction | None = None) -> Compiled:
    """`build_workers` with the notes an estimate carries; raises ShapeError when the deployment cannot run."""
    workers, cal, link = build_workers(dep, catalog, device_memory_gb=device_memory_gb, factors=factors,
                                       device_spec=device_spec, decode_memory_gb=decode_memory_gb,
                                       link_gbs=link_gbs, correction=correction)
    forms = moe_latency_forms(catalog.model(dep.model), catalog, cal.factors.expert_latency_ms)
    cal = replace(cal, unpinned_ttft_s=unpinned_ttft_s(forms, cal.measured_level))
    return Compiled(dep, workers, cal, link, _notes(dep, cal, catalog, forms))


def unpinned_ttft_s(forms: tuple[str, float, float] | None, measured_level: str) -> float:
    """`Calibration.unpinned_ttft_s` from a model's `moe_latency_forms`: 0 where it has none, or where the user's
    measurements of the model (or the deployment: `measured_level`) set its TTFT."""
    return 0.0 if forms is None or measured_level in ("model", "deployment") else forms[2] - forms[1]


def estimate(dep: Deployment, wl: Workload, catalog: Catalog, *, device_memory_gb: float | None = None,
             factors: Factors | None = None, device_spec: DeviceSpec | None = None,
             correction: Correction | None = None) -> Estimate:
    """Predict the metrics of `dep` serving `wl` (`Compiled.serving`); raises ShapeError when the deployment cannot
    run. `factors` replaces the calibrated efficiency factors (for fitting them); `device_spec` the device's
    figures; `correction` is what the user's measurements say of this deployment."""
    return compile_deployment(dep, catalog, device_memory_gb=device_memory_gb, factors=factors,
                              device_spec=device_spec, correction=correction).serving(wl).at(wl)


TRICKLE_RPS = 1e-3
"""The lowest request rate `max_rate` probes: a deployment that misses the objectives there misses them at any."""


def objective_value(pred: Prediction, metric: str, pct: str) -> float:
    """Seconds the prediction gives a (metric, percentile) objective. A percentile it does not carry is read
    between the two it carries around it (past p99.9, on from p99 and p99.9) as an exponential tail: linear in
    the log of the share of requests above it (p99.5 about three tenths of the way from p99 to p99.9); below the
    median, at the median."""
    values = getattr(pred, metric)
    value = values.get(pct)  # `mean` included: every prediction carries the mean of each metric
    if value is not None:
        return value
    tail = 1 - float(pct[1:]) / 100
    if tail <= 0:
        return math.inf  # every request: no latency with an unbounded tail holds them all
    known = [(1 - float(p[1:]) / 100, values[p]) for p in PERCENTILES]
    if tail >= known[0][0]:
        return known[0][1]
    k = next((i for i, (t, _) in enumerate(known) if t < tail), len(known) - 1)
    (t0, v0), (t1, v1) = known[k - 1], known[k]
    if not (math.isfinite(v0) and math.isfinite(v1)):
        return max(v0, v1)
    return v0 + (v1 - v0) * math.log(tail / t0) / math.log(t1 / t0)


def meets(pred: Prediction, slos: dict[tuple[str, str], float]) -> bool:
    """Whether every (metric, percentile) -> seconds objective holds."""
    return pred.stable and all(objective_value(pred, m, p) <= target for (m, p), target in slos.items())


def missed(pred: Prediction, slos: dict[tuple[str, str], float]) -> dict[str, float | None]:
    """The objectives a prediction misses, as `ttft_p99` -> its predicted seconds (None where the load never
    settles, which misses them all)."""
    return {f"{m}_{p}": objective_value(pred, m, p) if pred.stable else None
            for (m, p), target in sorted(slos.items()) if not pred.stable or objective_value(pred, m, p) > target}


def overrun(pred: Prediction, slos: dict[tuple[str, str], float]) -> float:
    """How far the worst objective runs over its target, as the log of their ratio (at most 0 while every one
    holds; inf where the load never settles): near saturation a queue's tail grows by orders of magnitude, and
    the log keeps an interpolation that closes in on the capacity on its feet."""
    if not pred.stable:
        return math.inf
    return max((math.log(max(objective_value(pred, m, p), 1e-12) / t) for (m, p), t in slos.items()), default=-1.0)


def max_rate(dep: Deployment, wl: Workload, slos: dict[tuple[str, str], float], catalog: Catalog,
             *, device_memory_gb: float | None = None, device_spec: DeviceSpec | None = None,
             decode_memory_gb: float | None = None, link_gbs: float | None = None,
             meeting: float | None = None, correction: Correction | None = None,
             compiled: Compiled | None = None) -> tuple[float, Estimate]:
    """Largest open-loop request rate whose prediction meets every objective (goodput capacity) and the estimate
    there, to 0.1%; (0, the estimate at `TRICKLE_RPS`) when even a trickle misses them, which says by how much.
    `meeting`: a rate known to meet them (the capacity of a burstier load), where the search starts. `compiled`:
    the deployment's workers when the caller has them already (else compiled from the other arguments)."""
    if compiled is None:
        compiled = compile_deployment(dep, catalog, device_memory_gb=device_memory_gb, device_spec=device_spec,
                                      decode_memory_gb=decode_memory_gb, link_gbs=link_gbs, correction=correction)
    return run_search(max_rate_search(compiled, wl, slos, meeting))


Probe = tuple[Compiled, Workload]
"""A load a search needs predicted, for a compiled deployment."""
Search = Generator[Probe, Prediction, Any]
"""A search that yields the probes it needs, is sent each one's prediction (or thrown the InfraError predicting
it raised) and returns its answer: many of them run together in `run_searches`, one alone in `run_search`."""


CAPACITY_REL = 1e-3
"""How finely `max_rate_search` closes in on a capacity: a planner sizes replicas from it, and a tenth of a percent
keeps an example's replica count where a coarser one would drop a capacity below a service's rate by a hair."""


def max_rate_search(compiled: Compiled, wl: Workload, slos: dict[tuple[str, str], float],
                    meeting: float | None = None) -> Generator[Probe, Prediction, tuple[float, Estimate]]:
    """`max_rate` of a compiled deployment, as a `Search`."""
    probes: dict[float, tuple[Workload, Prediction]] = {}

    def over(rate: float) -> Generator[Probe, Prediction, float]:
        load = wl.at_rate(rate)
        pred = yield compiled, load
        probes[rate] = load, pred
        return overrun(pred, slos)

    def at(rate: float) -> Estimate:
        return compiled.estimate(*probes[rate])

    lo = meeting or TRICKLE_RPS
    o_lo = yield from over(lo)
    if o_lo > 0:
        if meeting:
            return (yield from max_rate_search(compiled, wl, slos))
        return 0.0, at(lo)
    # The trickle's load, carried on in proportion, says where the deployment saturates: the capacity lies below
    # that (latency only grows on the way), and past it doubling finds it otherwise; from a rate known to meet
    # the objectives, steps of a quarter. Then close in to `CAPACITY_REL` on the worst objective's overrun.
    load = probes[lo][1].load
    grow = 1.25 if meeting else 2.0
    hi = lo * grow if meeting else max(lo / load if load > 0 else 0.0, lo * 8)
    while True:
        o_hi = yield from over(hi)
        if o_hi > 0 or hi > 1e7:
            break
        lo, o_lo, hi = hi, o_hi, hi * grow
    if o_hi <= 0:
        return hi, at(hi)
    steps = regula_falsi_steps(lo, o_lo, hi, o_hi, CAPACITY_REL, closing=True)
    try:
        x = next(steps)
        while True:
            x = steps.send((yield from over(x)))
    except StopIteration as done:
        lo = done.value[0]
    return lo, at(lo)


class Pending:
    """A result one search is finding that others need too: they yield it instead of a probe and are resumed (sent
    None) once its finder has called `resolve`, so that a result shared across searches is found once."""

    def __init__(self) -> None:
        self.done = False
        self._wake: list[Callable[[], None]] = []

    def when_done(self, wake: Callable[[], None]) -> None:
        if self.done:
            wake()
        else:
            self._wake.append(wake)

    def resolve(self) -> None:
        self.done = True
        wake, self._wake = self._wake, []
        for one in wake:
            one()


def run_search(search: Search) -> Any:
    """What one `Search` returns, its probes predicted one by one."""
    return run_searches([search], one_by_one=True)[0]


def run_searches(searches: Sequence[Search], finished: Callable[[int], None] | None = None,
                 one_by_one: bool = False) -> list[Any]:
    """What each `Search` returns, all run in lockstep: each round the probes they wait on are predicted together
    (`predictions`: in vector passes where there are enough), so that a fleet's capacity searches take a couple
    of hundred vector passes rather than hundreds of thousands of scalar predictions. Each search sees what it
    would see alone. `finished(i)` hears when search i has returned; `one_by_one` predicts each probe alone
    (`Compiled.predict`)."""
    out: list[Any] = [None] * len(searches)
    probes: dict[int, Probe] = {}
    ready: list[tuple[int, Callable[[], Any]]] = [(i, search.__next__) for i, search in enumerate(searches)]
    ready.reverse()  # taken from the end: the searches start in their order
    while ready or probes:
        while ready:
            i, step = ready.pop()
            try:
                got = step()
            except StopIteration as done:
                out[i] = done.value
                if finished is not None:
                    finished(i)
                continue
            if isinstance(got, Pending):
                got.when_done(partial(ready.append, (i, partial(searches[i].send, None))))
            else:
                probes[i] = got
        order = sorted(probes)
        found = (predictions([probes[i] for i in order]) if not one_by_one
                 else [_predict_one(*probes[i]) for i in order])
        probes.clear()
        for i, e in zip(reversed(order), reversed(found)):
            search = searches[i]
            ready.append((i, partial(search.throw, e) if isinstance(e, InfraError) else partial(search.send, e)))
    unfinished = [i for i, search in enumerate(searches) if search.gi_frame is not None]
    if unfinished:
        raise RuntimeError(f"searches {unfinished} wait on results no search is finding")
    return out


def _predict_one(compiled: Compiled, load: Workload) -> Prediction | InfraError:
    try:
        return compiled.predict(load)
    except InfraError as exc:
        return exc


def estimates(loads: Sequence[tuple[Compiled, Workload]]) -> list[Estimate | InfraError]:
    """`[compiled.at(load) for compiled, load in loads]`, each failure returned in its place (`predictions`)."""
    regimes: dict[tuple[float, float], list[str]] = {}
    out: list[Estimate | InfraError] = []
    for (one, wl), p in zip(loads, predictions(loads)):
        if isinstance(p, InfraError):
            out.append(p)
            continue
        lengths = wl.isl, wl.osl
        regime = regimes.get(lengths)
        if regime is None:
            regime = regimes[lengths] = unmeasured_regime(*lengths)
        out.append(one.estimate(wl, p, regime))
    return out


def predictions(loads: Sequence[tuple[Compiled, Workload]]) -> list[Prediction | InfraError]:
    """`[compiled.predict(load) for compiled, load in loads]`, each failure returned in its place (`predict_all`,
    then each one's calibration)."""
    raw = predict_all([(one.deployment, wl, one.workers, one.link) for one, wl in loads])
    return [p if one.uncorrected or isinstance(p, InfraError) else one.corrected(wl, p)
            for (one, wl), p in zip(loads, raw)]


Load = tuple[Deployment, Workload, dict[str, Worker], float]
"""A deployment, its workload, its compiled workers and the link of its KV-cache hand-off: what `_predict` takes."""


def predict_all(loads: Sequence[Load]) -> list[Prediction | InfraError]:
    """`[_predict(*load) for load in loads]`, each failure returned in its place: open and closed loops, aggregated
    and disaggregated, predicted together in vector passes (`infra.perf.vector`, `infra.perf.vector_closed`: the
    scalar model's results), each kind apart, where there are enough of a kind for it to pay; the rest, and the
    loads `_predict` refuses, one by one."""
    out: list[Prediction | InfraError | None] = [None] * len(loads)
    kinds: dict[Callable[..., list[Prediction]], tuple[list[int], list[tuple]]] = {}
    fits: dict[tuple[int, float], bool] = {}
    for i, load in enumerate(loads):
        got = _vector_case(*load, fits)
        if got is not None:
            at, cases = kinds.get(got[0]) or kinds.setdefault(got[0], ([], []))
            at.append(i)
            cases.append(got[1])
    for predict_many, (at, cases) in kinds.items():
        if len(cases) >= VECTOR_MIN:
            for i, pred in zip(at, predict_many(cases, exact=True)):
                out[i] = pred
    for i, load in enumerate(loads):
        if out[i] is None:
            try:
                out[i] = _predict(*load)
            except InfraError as exc:
                out[i] = exc
    return out  # type: ignore[return-value]


def _vector_case(dep: Deployment, wl: Workload, workers: dict[str, Worker], link: float,
                 fits: dict[tuple[int, float], bool]) -> tuple[Callable[..., list[Prediction]], tuple] | None:
    """The vector pass that predicts a load as `_predict` does, and the load as its case; None where `_predict`
    refuses the load (its error is raised one by one) or it is neither an open nor a closed loop. `fits` keeps
    whether one request of a length fits a worker's KV cache, by the worker's identity (alive, in the loads, while
    the dict is) and the length: a batch's loads repeat a few of each."""
    closed = wl.concurrency is not None
    if not closed and wl.rate is None:
        return None
    if dep.mode == "agg":
        w = workers["agg"]
        key = id(w), wl.isl + wl.osl
        one = fits.get(key)
        if one is None:
            one = fits[key] = w.max_sequences(key[1]) >= 1
        if not one:
            return None
        return (predict_closed_agg if closed else predict_open_agg), (w, dep.agg, wl)
    if closed and wl.osl <= 1:
        return None
    return ((predict_closed_disagg if closed else predict_open_disagg),
            (workers["prefill"], workers["decode"], dep.prefill, dep.decode, wl, link))


VECTOR_MIN = 32
"""Loads of a kind below which a vector pass costs more than predicting them one by one (numpy's cost per call)."""


__all__ = ["Compiled", "Estimate", "PERCENTILES", "Pending", "Probe", "Search", "ShapeError", "TRICKLE_RPS",
           "build_workers", "compile_deployment", "estimate", "estimates", "finite_ms", "max_rate", "max_rate_search",
           "meets", "missed", "moe_latency_forms", "objective_value", "overrun", "predict", "predict_all",
           "predictions", "run_search", "run_searches", "shape_problems", "unpinned_ttft_s"]
