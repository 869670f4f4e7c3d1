"""Efficiency factors: how far below the roofline a framework runs on a device, fitted to measurements.

`benchmarks/calibrate.py` fits them to `silicon_calibration.csv` and writes `infra/perf/data/calibration.json`
(with the date, the data's fingerprint and the fit error). Lookups fall back, and say so: the exact
(framework, device) pair; else the same framework on the calibrated device closest in bandwidth and compute;
else the same device under any framework; else the pooled defaults. Frameworks that are vendor builds of another
(vllm-ascend, vllm-mlu, ...) borrow their parent's factors.
"""

from __future__ import annotations

import json
import math
import statistics
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, fields, replace
from functools import lru_cache
from importlib import resources
from typing import Any, TypeVar

import numpy as np

from infra.catalog.schema import DeviceSpec

MEM_CEILING = 0.92
"""Highest fraction of peak memory bandwidth a fit may credit an engine with."""


@dataclass(frozen=True)
class Factors:
    """Efficiency factors of one framework on one device."""

    gemm: float = 0.55
    """Achieved fraction of peak tensor FLOPs in GEMMs."""
    mem: float = 0.7
    """Achieved fraction of peak memory bandwidth, at most `MEM_CEILING`: HBM sustains about 90% of its spec sheet
    figure (an H100 SXM's STREAM triad and device-to-device copies reach 3.0-3.1 of its 3.35 TB/s, ECC on), so a fit
    that wants more is buying speed the memory does not have for something else."""
    attn: float = 0.5
    """Achieved fraction of the roofline in attention kernels (peak 16-bit FLOPs for prefill, bandwidth for the KV
    cache reads of decode)."""
    comm: float = 0.6
    """Achieved fraction of link bandwidth in collectives."""
    step_ms: float = 2.0
    """Fixed engine overhead per step (scheduler, sampling, launches)."""
    layer_us: float = 20.0
    """Fixed time every layer adds to a step, in microseconds: the launches and minimum durations of its dozen or so
    kernels, which a model with twice the layers pays twice however small the batch."""
    request_ms: float = 20.0
    """Fixed per-request latency before the first token (HTTP, tokenisation, admission)."""
    transfer_ms: float = 20.0
    """Fixed per-request cost of handing a request from prefill to decode workers (routing, KV-transfer setup)."""
    queue: float = 0.3
    """Closed loop: weight of the first, synchronised wave of prefills in the mean TTFT (0 = steady state only)."""
    moe_ns: float = 0.0
    """Routing, permutation and gather cost per token, per routed expert, per MoE layer, in nanoseconds: the part
    of a MoE layer that grows with tokens x experts rather than with FLOPs or weight bytes."""
    accept: float = 1.0
    """Tokens emitted per decode step (above 1 when the framework runs speculative decoding such as MTP)."""
    draft_tokens: float = 0.0
    """Draft tokens each decoding sequence verifies in a step beside its own under speculative decoding (MTP's
    layers, EAGLE's steps): the step computes them all, while reading the sequence's KV cache once."""
    recipe_accept: float = 1.0
    """Tokens per decode step of the measured disaggregated recipes that decode speculatively (multi-token
    prediction on their decode workers; `infra.perf.rows.RECIPES` says which); a row whose recipe the
    published configurations leave open takes its square root. Used only when replaying such measurements; a
    plan's own engines decode one token a step unless `accept` says so."""
    recipe_decode: float = 1.0
    """Speed of the measured disaggregated recipes' decode steps against the model's, whether or not they decode
    speculatively: what their engines do each step that the rows do not record (KV-transfer bookkeeping, their
    schedulers' settings) and that would otherwise bend the factors the aggregated rows share with them. Used only
    when replaying such measurements."""
    expert_latency_ms: float = 7.0
    """Fixed latency a request's prompt adds before its first token, in milliseconds per billion routed-expert
    parameters a token passes through (top-k experts x expert size x MoE layers: 20.4B for DeepSeek-R1, 14.2B for
    Qwen3-235B, 3.6B for gpt-oss-120b). Measured TTFTs of MoE models at low load carry a fixed part in those
    proportions (on TRT-LLM about 150, 100 and 25 ms; none for dense models), which one per-request overhead per
    framework cannot carry for every model."""
    expert_step_us: float = 2.0
    """Fixed time a step that carries prompt tokens spends per routed expert of each MoE layer, in microseconds:
    the part of that fixed cost that occupies the engine (and so slows the other sequences) rather than only
    delaying the request."""
    balance_steps: float = 0.0
    """Decode steps a new prompt is held, when every attention-DP rank is decoding, until each rank has a prompt to
    prefill in the same step (TRT-LLM's `attention_dp_config.enable_balance`, which gives up after `timeout_iters`,
    50 by default). 0 for engines that leave balancing off, as this product renders them."""
    recipe_balance_steps: float = 50.0
    """`balance_steps` of the measured TRT-LLM deployments with attention data parallelism: their TTFT carries it
    (none where a rank is idle, as the balancer releases prompts then) though the rows do not record it. Used only
    when replaying such measurements (`infra.perf.rows`); starts from TRT-LLM's `timeout_iters`."""
    poll_steps: float = 0.0
    """Decode steps a new request waits, while others decode, before the scheduler takes it in: an engine that polls
    for requests only every N steps (SGLang's `--scheduler-recv-interval N`) leaves a request that arrives at a
    random phase of that interval unseen for N/2 steps on average. 0 for engines that poll every step, as this
    product renders them."""
    recipe_poll: float = 0.5
    """Share of the receive interval a request waited in the measured SGLang deployments that poll every 10 or 30
    decode steps (the B200 recipes of the sweeps; `Case.recv_interval`): `poll_steps` = recipe_poll x interval
    when replaying them. Half the interval for arrivals at a random phase of it."""
    collective_us: float = 8.0
    """Fixed latency of one collective (all-reduce, or each half of an all-to-all) inside a scale-up domain, in
    microseconds: kernel launch, synchronisation and the small-message latency of NCCL or a custom all-reduce."""
    a2a_peer_us: float = 1.0
    """Latency each half of a MoE all-to-all adds per peer device, in microseconds: dispatch and combine kernels
    (NCCL send/recv pairs, DeepEP and TRT-LLM's one-sided NVLink/RDMA writes) signal and wait on every peer, so
    wide expert parallelism (32-72 devices) pays several times the latency of 4-8 devices at small batches."""

    BOUNDS = {
        "gemm": (0.05, 1.0), "mem": (0.1, MEM_CEILING), "attn": (0.02, 1.0), "comm": (0.05, 1.0),
        "step_ms": (0.0, 40.0), "layer_us": (0.0, 500.0), "request_ms": (0.0, 500.0), "transfer_ms": (0.0, 2000.0),
        "queue": (0.0, 1.0),
        "accept": (1.0, 3.0), "draft_tokens": (0.0, 8.0), "moe_ns": (0.0, 500.0), "collective_us": (1.0, 80.0),
        "a2a_peer_us": (0.0, 20.0), "expert_latency_ms": (0.0, 100.0), "expert_step_us": (0.0, 100.0),
        "recipe_accept": (1.0, 3.0), "recipe_decode": (0.3, 2.0), "balance_steps": (0.0, 200.0),
        "recipe_balance_steps": (0.0, 200.0), "poll_steps": (0.0, 500.0), "recipe_poll": (0.0, 3.0),
    }

    @classmethod
    def names(cls) -> list[str]:
        return [f.name for f in fields(cls)]

    def vector(self) -> list[float]:
        return [getattr(self, n) for n in self.names()]

    @classmethod
    def from_vector(cls, values: list[float]) -> Factors:
        return cls(**dict(zip(cls.names(), (float(v) for v in values))))

    def as_dict(self) -> dict[str, float]:
        return asdict(self)


def first_wave(factors: Factors, role: str, share: float | None) -> Factors:
    """The factors of a worker measured by a closed loop whose clients all start at once, `share` of its requests
    in that first wave (the aggregated worker's `queue`, or the prefill worker's in a P/D loop); unchanged for a
    decode worker or where the share is not known."""
    return replace(factors, queue=share) if share is not None and role in ("agg", "prefill") else factors


SHARED_FACTORS = ("expert_latency_ms", "expert_step_us", "moe_ns", "queue")
"""Factors fitted once over every framework, never per framework: what routed experts cost per token, per prompt
step and per request. A framework's measurements hold one or two MoE models, so a value of its own would learn
those models' quirks rather than the framework, and an unseen MoE model would inherit them (leave-one-model-out
TTFT: median 48.9% -> 45.9%, p90 133.5% -> 113.4%). The first wave's share of a closed loop (`queue`) belongs to
the measuring client, not the framework: the sweep rows state theirs, and the few others of one framework would
otherwise set it for every plan on that framework."""

TtftLoads = tuple[tuple[str, float, float], ...]
"""(`concurrency` or `rate`, that load, the TTFT multiplier measured there) for each load a user's deployment was
measured at, in increasing load."""


T = TypeVar("T")
TailPair = tuple[tuple[float, float], tuple[float, float]]
"""TTFT's and TPOT's tail corrections: (share of the model's spread kept, spread added per standard-normal quantile
in means) each (`infra.perf.correction.spread_by`)."""
TailLoads = tuple[tuple[str, float, TailPair], ...]
"""(`concurrency` or `rate`, that load, the tail corrections measured there) for each load whose measurements
recorded percentiles, in increasing load."""


def load_key(concurrency: int | None, rate: float | None) -> tuple[str, float]:
    """A load as `TtftLoads` names it: (`concurrency`, clients) for a closed loop, else (`rate`, requests/s; 0 when
    none is given)."""
    return ("concurrency", float(concurrency)) if concurrency is not None else ("rate", float(rate or 0.0))


def _at_load(alone: T, loads: Sequence[tuple[str, float, T]], concurrency: int | None, rate: float | None,
             between: Callable[[float, T, T], T]) -> T:
    """What was measured at a load: where the deployment was measured at two or more loads of its kind (closed loop
    clients, or open loop rates), `between(w, below, above)` of the two around it, `w` the share of the way in log
    load, and the nearest one's beyond them; else `alone`, the level's one value."""
    kind, load = load_key(concurrency, rate)
    points = [(x, v) for k, x, v in loads if k == kind]
    if load <= 0 or len(points) < 2:
        return alone
    if load <= points[0][0]:
        return points[0][1]
    for (x0, v0), (x1, v1) in zip(points, points[1:]):
        if load <= x1:
            return between(math.log(load / x0) / math.log(x1 / x0), v0, v1)
    return points[-1][1]


def ttft_at(ttft: float, loads: TtftLoads, concurrency: int | None, rate: float | None) -> float:
    """The TTFT multiplier at a load (`_at_load`), interpolated in log load and log multiplier, so that a TTFT that
    grows with the load faster (or slower) than the model's keeps its measured shape."""
    return _at_load(ttft, loads, concurrency, rate,
                    lambda w, m0, m1: math.exp((1 - w) * math.log(m0) + w * math.log(m1)))


def _tails_between(w: float, t0: TailPair, t1: TailPair) -> TailPair:
    ttft, tpot = (((1 - w) * a[0] + w * b[0], (1 - w) * a[1] + w * b[1]) for a, b in zip(t0, t1))
    return ttft, tpot


def tails_at(tails: TailPair, loads: TailLoads, concurrency: int | None, rate: float | None) -> TailPair:
    """The tail corrections at a load (`_at_load`), each share and each added spread interpolated linearly in log
    load, so that a spread that narrows or widens with the load against the model's keeps its measured course."""
    return _at_load(tails, loads, concurrency, rate, _tails_between)


@dataclass(frozen=True)
class Calibration:
    """Factors for one (framework, device), and how they were found."""

    factors: Factors
    calibrated: bool
    source: str
    """`fit:<framework>/<device>`, or how the factors were borrowed."""
    distance: float = 0.0
    """How far the device is from the one the factors were fitted on (0 = same); log-ratio of bandwidth and FLOPs."""
    architecture: str = ""
    """The device architecture whose fitted multipliers replaced the lender's (`borrow`); empty when none did."""
    measured: str = ""
    """The user's calibration that corrects these factors, in words (`infra.perf.correction.Correction.describe`);
    empty where the figures rest on the packaged prior alone."""
    ttft: float = 1.0
    """Multiplier of predicted TTFT from the user's calibration (their step correction is already in `factors`)."""
    ttft_loads: TtftLoads = ()
    """The calibration's TTFT multiplier at each load its deployment was measured at (`ttft_at`)."""
    tails: TailPair = ((1.0, 0.0), (1.0, 0.0))
    """What the user's measured percentiles make of the model's TTFT and TPOT spread
    (`infra.perf.correction.with_tails`)."""
    tail_loads: TailLoads = ()
    """Those at each load they were measured at (`tails_at`)."""
    measured_level: str = ""
    """The level of the user's calibration that matched (`infra.perf.correction.LEVELS`), empty when none did."""
    vendor_measured: bool = True
    """Whether any measurement the factors were fitted to ran on a device of this device's vendor; when none did,
    the factors carry `VENDOR_DERATE` and the error band its uncertainty (`borrowed_band`)."""
    unpinned_ttft_s: float = 0.0
    """Seconds the other form of the model's fixed MoE latency, which holds out on the measurements about as well
    as the packaged one, adds to every TTFT (negative: takes from it), where the measurements do not pin which
    holds for this model (`infra.perf.estimate.moe_latency_forms`); 0 where they do, or where the user's
    measurements of this model set its TTFT. The error band spans both forms, and so does the margin a plan at a
    confidence keeps."""


@lru_cache(maxsize=1)
def _table() -> dict[str, Any]:
    path = resources.files("infra.perf") / "data" / "calibration.json"
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return {"groups": {}, "devices": {}, "pooled": {}}


@lru_cache(maxsize=1)
def _groups() -> dict[str, Factors]:
    return {k: Factors(**g["factors"]) for k, g in _table().get("groups", {}).items()}


def table() -> dict[str, Any]:
    """The committed calibration data (read-only)."""
    return _table()


BAND_QUANTILES = tuple(k / 20 for k in range(1, 20))
"""Quantiles an error band records (p5, p10 .. p95): its edges are the outer two, and the rest say how often a
given margin held."""


def band_key(quantile: float) -> str:
    """How a band names a quantile: `p5` for 0.05."""
    return f"p{round(100 * quantile)}"


def _q(name: str) -> float:
    return float(name[1:]) / 100


@dataclass(frozen=True)
class ErrorBand:
    """How far measurements landed from their predictions, for one serving mode: quantiles of measured / predicted
    over the held-out rows of the leave-one-model-out fit, or over one calibrated model's own rows. The band runs
    from the p5 to the p95 ratio; `held_ttft` / `held_tpot` say how often such a held-out band held for a model
    left out of it."""

    mode: str
    rows: int
    ttft: dict[str, float]
    """Ratio quantiles `p5` .. `p95`."""
    tpot: dict[str, float]
    held_ttft: float | None
    """Share of a left-out model's measurements inside the band the other models' rows gave (None for a model's
    own in-sample band, or with one model)."""
    held_tpot: float | None
    basis: str
    """Where the ratios come from, in words."""

    def interval(self, metric: str, predicted: float) -> tuple[float, float]:
        """(low, high) around a predicted mean: the p5 and p95 ratios."""
        ratios = getattr(self, metric)
        return predicted * ratios[band_key(BAND_QUANTILES[0])], predicted * ratios[band_key(BAND_QUANTILES[-1])]

    def ratio(self, metric: str, quantile: float) -> float:
        """Measured / predicted at a quantile (0.05..0.95) of the band."""
        points = sorted((_q(k), v) for k, v in getattr(self, metric).items())
        return float(np.interp(quantile, [q for q, _ in points], [v for _, v in points]))

    def held(self, metric: str, ratio: float) -> float:
        """Share of the held-out measurements that came in at most `ratio` times their prediction: how often a
        prediction `target / predicted` below a target would have kept to it. Read off the recorded quantiles,
        so it is known between 5% and 95% and clipped there."""
        points = sorted((v, _q(k)) for k, v in getattr(self, metric).items())
        return float(np.interp(ratio, [v for v, _ in points], [q for _, q in points]))


def measured_models() -> list[str]:
    """Models whose measurements the factors were fitted to (each has its own in-sample band)."""
    return sorted(_table().get("fitted_bands") or {})


def error_band(mode: str, model: str | None = None) -> ErrorBand | None:
    """The committed error band for a serving mode: the model's own in-sample band when the calibration fitted
    enough of its measurements in that mode, else the held-out band of the leave-one-model-out fit; None when
    the calibration was written without one."""
    data = _table()
    own = (data.get("fitted_bands") or {}).get(model or "", {}).get(mode)
    if own:
        basis = (f"in-sample, {own['n']} {mode} rows of {model}'s own measurements in {data.get('data')} "
                 f"(fitted {data.get('fitted')})")
        return ErrorBand(mode, own["n"], own["ttft"], own["tpot"], None, None, basis)
    band = (data.get("error_bands") or {}).get(mode)
    if not band:
        return None
    basis = f"leave-one-model-out, {band['n']} {mode} rows of {data.get('data')} (fitted {data.get('fitted')})"
    held = band.get("held") or {}
    return ErrorBand(mode, band["n"], band["ttft"], band["tpot"], held.get("ttft"), held.get("tpot"), basis)


@lru_cache(maxsize=1)
def _closed_loop() -> dict[str, Any]:
    path = resources.files("infra.perf") / "data" / "closed_loop.json"
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return {}


CALIBRATED_BASIS = {"deployment": "after calibrating on one load of the same deployment and workload",
                    "model": "after calibrating on one load sweep of the same model, on its other sweeps"}
"""What a calibrated band measured (`benchmarks/closed_loop.py`: its per_sweep and per_model scoring)."""


def calibrated_band(mode: str, level: str) -> ErrorBand | None:
    """How far measurements landed from predictions corrected by a user's calibration at `level` (`deployment` or
    `model`; the broader levels narrow nothing), measured by `benchmarks/closed_loop.py --write` on the data the
    packaged prior was fitted to; None when it was not measured for this prior, level or mode."""
    data = _closed_loop()
    if not data or data.get("data_sha256") != _table().get("data_sha256"):
        return None
    band = (data.get("bands") or {}).get(level, {}).get(mode)
    if not band or level not in CALIBRATED_BASIS:
        return None
    basis = (f"{CALIBRATED_BASIS[level]}: {band['n']} {mode} rows of {data.get('data')} ({data.get('prior_fit')} "
             "prior)")
    held = band.get("held") or {}
    return ErrorBand(mode, band["n"], band["ttft"], band["tpot"], held.get("ttft"), held.get("tpot"), basis)


VENDOR_DERATE = {"gemm": 0.75, "mem": 0.85, "attn": 0.75}
"""Share of a borrowed NVIDIA device's efficiency assumed on a device of a vendor no measurement covers (`borrow`):
vendor stacks beyond CUDA reach a smaller share of peak in every public comparison, so the point estimate takes the
conservative side. It is a guess of the gap's size, not a measurement of it, so its band (`borrowed_band`) takes its
own size as the spread of its error, one standard deviation in log space either way: compute-bound TTFT by the
GEMM derate, bandwidth-bound TPOT by the memory one."""
VENDOR_SIGMA = {"ttft": math.log(1 / VENDOR_DERATE["gemm"]), "tpot": math.log(1 / VENDOR_DERATE["mem"])}


def measured_vendors() -> set[str]:
    """Vendors of the devices the packaged factors were fitted on (a calibration written before devices recorded
    their vendor was fitted on NVIDIA measurements alone)."""
    return {d.get("vendor", "nvidia") for d in (_table().get("devices") or {}).values()}


def _widened(ratios: dict[str, float], sigma: float) -> dict[str, float]:
    """Ratio quantiles with an independent lognormal error of `sigma` added: each quantile's distance from the
    median (in logs) combined with sigma x its normal quantile in quadrature, on its own side of the median."""
    mid = math.log(ratios[band_key(0.5)])
    out = {}
    for key, value in ratios.items():
        z = statistics.NormalDist().inv_cdf(_q(key))
        gap = math.log(value) - mid
        out[key] = round(math.exp(mid + math.copysign(math.hypot(gap, z * sigma), z or gap)), 4)
    return out


def borrowed_band(mode: str, vendor_measured: bool = True) -> ErrorBand | None:
    """The error band of factors borrowed for a device no measurement fitted: quantiles of measured / predicted
    over the rows of each device architecture predicted with factors the other architectures' rows gave
    (`benchmarks/calibrate.py --loao`), which holds the bias and spread of carrying factors across devices that a
    held-out model's band never saw; for a vendor no measurement covers, widened by `VENDOR_DERATE`'s own
    uncertainty. None when the calibration was written without it."""
    data = _table()
    band = (data.get("borrowed_bands") or {}).get(mode)
    if not band:
        return None
    basis = (f"leave-one-architecture-out, {band['n']} {mode} rows of {data.get('data')} predicted with factors "
             f"borrowed from other architectures (fitted {data.get('fitted')})")
    ttft, tpot = band["ttft"], band["tpot"]
    if not vendor_measured:
        ttft, tpot = _widened(ttft, VENDOR_SIGMA["ttft"]), _widened(tpot, VENDOR_SIGMA["tpot"])
        basis += "; widened by the uncertainty of the derate for a vendor no measurement covers"
    held = band.get("held") or {}
    return ErrorBand(mode, band["n"], ttft, tpot, held.get("ttft"), held.get("tpot"), basis)


def _past_measured(isl: float, osl: float) -> list[tuple[str, float, float]]:
    """(what, mean tokens, longest measured) of a workload's prompts and answers longer than any fitted row ran
    (`measured_ranges`)."""
    ranges = _table().get("measured_ranges") or {}
    out = []
    for name, value, what in (("isl", isl, "prompts"), ("osl", osl, "answers")):
        top = (ranges.get(name) or [None, None])[1]
        if top and value > top:
            out.append((what, value, top))
    return out


def unmeasured_regime(isl: float, osl: float) -> list[str]:
    """What a workload asks beyond the measurements the factors were fitted to: prompts or answers longer than any
    fitted row ran, where the attention and KV-cache terms grow past what the fit saw. The error band widens for
    it (`doublings_past`); empty within the ranges."""
    widened = bool(_table().get("extrapolation"))
    return [f"{what} of {value:,.0f} tokens on average are longer than any the calibration measured ({top:,.0f}): "
            "their attention and KV-cache time is the roofline's, " + (
                "and the error band is widened by what carrying the factors to longer prompts added" if widened
                else "beyond the error band's evidence") for what, value, top in _past_measured(isl, osl)]


def doublings_past(isl: float, osl: float) -> float:
    """How many doublings past the longest measured prompt (or answer) a workload's mean asks: 0 within the
    measured ranges."""
    return max((math.log2(value / top) for _, value, top in _past_measured(isl, osl)), default=0.0)


def extrapolation_sigma(mode: str) -> dict[str, float] | None:
    """Per doubling of the prompt past the longest fitted one, the lognormal spread that carrying the factors
    there added to their error (`benchmarks/calibrate.py --lolo`: fitted without the 8k-token prompts and scored on
    them, against the fit that saw them): None when the calibration was written without it. Answers past the
    longest measured take the same figure, the nearest evidence there is for a longer context."""
    block = ((_table().get("extrapolation") or {}).get("modes") or {}).get(mode)
    return block["sigma_per_doubling"] if block else None


def band_for(mode: str, model: str, calibrated: bool, measured_level: str = "",
             vendor_measured: bool = True, doublings: float = 0.0) -> ErrorBand | None:
    """The error band of an estimate: the narrower band of a user's calibration where it matched this model on
    this framework and device, or the exact deployment (`measured_level`), else the model's own in-sample band
    when the packaged factors were fitted on this pair (`calibrated`), else, for factors borrowed from another
    device, the band of borrowed factors (wider again for a vendor never measured), else the held-out one. A
    packaged band widens for a workload `doublings` past the longest measured prompt or answer
    (`doublings_past`, `extrapolation_sigma`)."""
    band = calibrated_band(mode, measured_level) if measured_level else None
    if band is not None:
        return band
    band = borrowed_band(mode, vendor_measured) if not calibrated else None
    band = band or error_band(mode, model if calibrated else None)
    sigma = extrapolation_sigma(mode) if doublings > 0 else None
    if band is None or sigma is None:
        return band
    return ErrorBand(band.mode, band.rows, _widened(band.ttft, sigma["ttft"] * doublings),
                     _widened(band.tpot, sigma["tpot"] * doublings), band.held_ttft, band.held_tpot,
                     f"{band.basis}; widened for a workload {2 ** doublings:.2g}x the longest measured, by what "
                     "carrying the factors to longer prompts added")


def _device_distance(a: dict[str, Any], b: DeviceSpec) -> float:
    p = device_point(b)
    return abs(math.log(a["bw"] / p["bw"])) + abs(math.log(a["bf16"] / p["bf16"]))


def device_point(device: DeviceSpec) -> dict[str, Any]:
    """What `borrow` compares devices by (memory bandwidth and 16-bit peak), their architecture and vendor."""
    peak = device.tflops.get("bf16") or device.tflops.get("fp16") or next(iter(device.tflops.values()))
    return {"bw": device.memory_bandwidth_tbps.value, "bf16": peak.value, "architecture": device.architecture,
            "vendor": device.vendor}


def borrow(framework: str, device: DeviceSpec, groups: dict[str, Factors], devices: dict[str, dict[str, Any]],
           scales: dict[str, dict[str, float]] | None = None,
           calibration_from: str | None = None) -> tuple[str, Factors, float, str] | None:
    """Factors for a (framework, device) pair no measurement fitted, taken from the fitted `groups`: the same
    framework (or the one its catalog entry borrows from, `calibration_from`) on the closest measured device, else
    any framework on this device, else
    the closest of all; derated off NVIDIA. Where the fit found multipliers per device architecture (`scales`), the
    borrowed factors trade the lender's for the borrower's, as a framework's kernels reach the share of peak of the
    generation they run on (for a generation the fit did not see, the frameworks' own, a multiplier of 1). Returns
    the group borrowed from, its factors, the device distance and the fitted architecture traded to (empty when
    none was); None when nothing was fitted."""
    fw_eff = calibration_from or framework
    candidates = [k for k in groups if k.split("/")[0] == fw_eff]
    if not candidates:
        candidates = [k for k in groups if k.split("/")[1] == device.name]
    if not candidates:
        candidates = list(groups)
    if not candidates or not devices:
        return None
    best = min(candidates, key=lambda k: (_device_distance(devices[k.split("/")[1]], device), k))
    dist = _device_distance(devices[best.split("/")[1]], device)
    borrowed = groups[best]
    lender_arch = devices[best.split("/")[1]].get("architecture", "")
    lender = scales.get(lender_arch, {}) if scales else {}
    mine = scales.get(device.architecture, {}) if scales and lender_arch != device.architecture else {}
    fitted_arch = bool(mine)
    if lender_arch != device.architecture and not mine:
        # A generation no fit covers takes the frameworks' own share of peak, not the lender generation's: scored
        # with each architecture left out in turn, TTFT median/p90 34.6/90.6% -> 33.0/85.2% (TPOT 18.3/52.5% ->
        # 18.4/53.1%) against keeping the lender's multipliers.
        mine = dict.fromkeys(lender, 1.0)
    trade = {n: min(Factors.BOUNDS[n][1], getattr(borrowed, n) * mine[n] / lender[n])
             for n in mine if n in lender and lender[n] > 0}
    if trade:
        borrowed = replace(borrowed, **trade)
    if device.vendor not in {d.get("vendor", "nvidia") for d in devices.values()}:
        # Vendor stacks beyond the measured one reach a smaller share of peak in every public comparison; until
        # measured, take the conservative side rather than the optimistic one (`VENDOR_DERATE`).
        borrowed = replace(borrowed, **{n: getattr(borrowed, n) * v for n, v in VENDOR_DERATE.items()})
    return best, borrowed, dist, device.architecture if trade and fitted_arch else ""


def lookup(framework: str, device: DeviceSpec, calibration_from: str | None = None) -> Calibration:
    """Factors for a framework on a device, exact when fitted, otherwise borrowed and marked so (first from the
    engine the framework's catalog entry names in `calibration_from`)."""
    data = _table()
    groups = _groups()
    key = f"{framework}/{device.name}"
    if key in groups:
        return Calibration(groups[key], True, f"fit:{key}")
    vendor = device.vendor in measured_vendors()
    got = borrow(framework, device, groups, data.get("devices", {}), data.get("architecture_scales"), calibration_from)
    if got is not None:
        best, borrowed, dist, arch = got
        return Calibration(borrowed, False, f"borrowed:{best}", round(dist, 3), arch, vendor_measured=vendor)
    pooled = data.get("pooled") or {}
    return Calibration(Factors(**pooled) if pooled else Factors(), False, "defaults", float("inf"),
                       vendor_measured=vendor)
