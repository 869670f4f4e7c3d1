"""Stages of a pipeline that do not decode token by token: vision and audio encoders, audio codecs, diffusion
transformers, and CPU preprocessing.

A request to such a stage is a fixed amount of work: `passes` forward passes over `tokens` tokens, from the stage's
work in the intent (images at a resolution, audio seconds, video frames and denoising steps) and the model's
`WorkShape` (tokens per audio second, pixels per token, frames per latent frame, passes per step). A pass is timed
as a roofline over the replica's devices: GEMM FLOPs (2 x active parameters per token) and attention FLOPs
(4 x layers x tokens x span x width, the span bounded by a window on windowed layers) at the calibrated GEMM and
attention efficiency of the device, against the weights read once per pass; a replica of `sp` devices splits the
tokens of a pass (sequence parallel, as xDiT and vLLM-Omni do) and pays two all-to-alls of the activations per
layer over the scale-up link. Requests are served one at a time per replica (encoders and codecs are short, a DiT
pass saturates the device), so a replica is a G/D/1 queue: Kingman's mean wait with an exponential tail gives the
percentiles. A streaming stage (a codec turning audio seconds out as they come) delivers its first output after
`FIRST_CHUNK_S` seconds of audio. No measurements of these stages exist in the calibration data: every estimate
from here says so.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from infra.catalog.schema import BYTES_PER_PARAM, DeviceSpec, ModelSpec
from infra.errors import InfraError, Location, Problem
from infra.intent.models import StageWork
from infra.perf.arch import GIB_PER_GB
from infra.perf.calibration import Calibration, Factors
from infra.perf.serving import PERCENTILES, _kingman_wait, bisect_holds

FIRST_CHUNK_S = 1.0
"""Audio seconds a streaming codec produces before its first output is handed on."""
ACTIVATION_BYTES = 2
MEMORY_UTILIZATION = 0.9


@dataclass(frozen=True)
class StageLoad:
    """The work of one request to a stage."""

    tokens: int
    """Tokens in one forward pass."""
    passes: int
    """Forward passes per request."""
    first_fraction: float
    """Share of the work done when the first output leaves (1 unless the stage streams)."""
    describe: str


def _pixels(resolution: str | None, what: str) -> tuple[int, int]:
    if resolution is None:
        raise InfraError(Problem(f"a {what} stage needs the resolution of its input",
                                 Location(path="work.resolution"), "add work.resolution, e.g. 1280x720"))
    w, h = (int(x) for x in resolution.lower().split("x"))
    return w, h


def stage_load(model: ModelSpec, work: StageWork) -> StageLoad:
    """Tokens and passes of one request, from the stage's work and the model's tokens per unit of work."""
    shape = model.work
    missing = Problem(f"the catalog does not say how {model.name} turns its input into tokens",
                      Location(path="model"), f"add `work:` (tokens_per_second or pixels_per_token) to the catalog "
                                              f"entry of {model.name} with --catalog")
    if model.kind in ("audio_encoder", "codec"):
        if shape is None or shape.tokens_per_second is None:
            raise InfraError(missing)
        if work.audio is None:
            raise InfraError(Problem(f"a {model.kind} stage needs the audio seconds per request",
                                     Location(path="work.audio"), "add work.audio, e.g. 8s"))
        tokens = max(1, math.ceil(work.audio * shape.tokens_per_second))
        first = min(1.0, FIRST_CHUNK_S / work.audio) if model.kind == "codec" else 1.0
        return StageLoad(tokens, 1, first, f"{work.audio:g} s of audio = {tokens} tokens")
    if model.kind == "vision_encoder":
        if shape is None or shape.pixels_per_token is None:
            raise InfraError(missing)
        w, h = _pixels(work.resolution, "vision encoder")
        images = work.images or 1
        per_image = round(w / shape.pixels_per_token) * round(h / shape.pixels_per_token)
        tokens = max(1, math.ceil(images * per_image))
        return StageLoad(tokens, 1, 1.0, f"{images:g} images of {w}x{h} = {tokens} patches")
    if model.kind == "dit":
        if shape is None or shape.pixels_per_token is None:
            raise InfraError(missing)
        w, h = _pixels(work.resolution, "diffusion")
        frames = work.video_frames or 1
        latent_frames = 1 + (frames - 1) // shape.frames_per_token
        tokens = latent_frames * math.ceil(h / shape.pixels_per_token) * math.ceil(w / shape.pixels_per_token)
        steps = work.denoise_steps or 1
        return StageLoad(tokens, steps * shape.passes_per_step, 1.0,
                         f"{frames} frames of {w}x{h} = {tokens} latent tokens x {steps} steps "
                         f"x {shape.passes_per_step} passes")
    raise InfraError(Problem(f"{model.name} is a {model.kind} model; this stage model covers encoders, codecs and "
                             "diffusion transformers", Location(path="kind"), "plan LLM stages as kind llm"))


@dataclass(frozen=True)
class StageTiming:
    """One request on one replica of `sp` devices, alone."""

    service_s: float
    first_s: float
    weights_gb: float
    """Per device (sequence parallel keeps a full copy on each)."""
    usable_gb: float
    fixed_s: float = 0.0
    """The engine's fixed time per request, inside `service_s` and `first_s`."""
    first_fraction: float = 1.0
    """Share of the work done at the first output (below 1: the stage works in chunks of that size)."""

    @property
    def fits(self) -> bool:
        return self.weights_gb + 1.0 <= self.usable_gb

    @property
    def chunks(self) -> int:
        return chunks_of(self.first_fraction)


def chunks_of(first_fraction: float) -> int:
    """Pieces a request's work is done in when its first output comes after `first_fraction` of it."""
    return max(1, round(1 / first_fraction)) if first_fraction < 1 else 1


def stage_timing(model: ModelSpec, device: DeviceSpec, precision: str, sp: int, load: StageLoad,
                 factors: Factors, device_memory_gb: float | None = None) -> StageTiming:
    """Time of one request on a replica of `sp` devices: passes x (compute or weight reads, whichever is slower,
    plus the all-to-alls of sequence parallelism) plus the engine's fixed overheads."""
    flops_peak = device.tflops.get(precision, device.tflops.get("bf16", next(iter(device.tflops.values())))).value
    flops_16 = device.tflops.get("bf16", device.tflops.get("fp16")) or device.tflops[precision]
    bw = device.memory_bandwidth_tbps.value * 1e12
    t = load.tokens
    gemm = 2 * model.params_active_b * 1e9 * t
    full_layers = model.layers - model.attention.sliding_window_layers
    span_window = min(t, model.attention.sliding_window or t)
    width = model.attention_heads * model.head_dim
    attn = 4 * t * width * (full_layers * t + model.attention.sliding_window_layers * span_window)
    compute = (gemm / (flops_peak * 1e12 * factors.gemm) + attn / (flops_16.value * 1e12 * factors.attn)) / sp
    weights = model.params_total_b * 1e9 * BYTES_PER_PARAM[precision]
    reads = weights / (bw * factors.mem)
    comm = 0.0
    if sp > 1:
        link = device.interconnect.bandwidth_gbs.value / 2 * 1e9 * factors.comm
        comm = model.layers * 2 * (t * model.hidden_size * ACTIVATION_BYTES) * (sp - 1) / sp / sp / link
    per_pass = max(compute, reads) + comm + factors.step_ms / 1000
    service = load.passes * per_pass + factors.request_ms / 1000
    memory = device_memory_gb if device_memory_gb is not None else device.memory_gb.value
    return StageTiming(service, load.passes * per_pass * load.first_fraction + factors.request_ms / 1000,
                       weights / 1e9, memory * GIB_PER_GB * MEMORY_UTILIZATION, factors.request_ms / 1000,
                       load.first_fraction)


def stage_latency(timing: StageTiming, rate: float, arrival_cv: float, percentiles: tuple[str, ...] = PERCENTILES,
                  interleaved: bool = False) -> tuple[dict[str, float], dict[str, float], bool]:
    """(first output, full latency) in seconds, mean and percentiles, of a replica serving `rate` requests/s, and
    whether it keeps up. The wait is Kingman's mean with an exponential tail (P(wait > 0) = utilisation).

    `interleaved`: the stage's input streams in (the stage before it hands on as it produces), so a chunked stage's
    pieces of different requests interleave and a first piece queues behind pieces, not behind whole requests:
    its wait is Kingman's over the pieces (same utilisation, the pieces' mean and spread of service time)."""
    rho = rate * timing.service_s
    if rho >= 1:
        inf = {"mean": math.inf, **{p: math.inf for p in percentiles}}
        return inf, inf, False
    wait = _kingman_wait(rho, timing.service_s, arrival_cv, 0.0) if rho > 0 else 0.0
    first_wait = wait
    c = timing.chunks
    if interleaved and c > 1 and rho > 0:
        work = timing.service_s - timing.fixed_s
        head, rest = timing.first_fraction * work + timing.fixed_s, work * (1 - timing.first_fraction) / (c - 1)
        mean = timing.service_s / c
        cs = math.sqrt(max(0.0, (head * head + (c - 1) * rest * rest) / c / (mean * mean) - 1))
        first_wait = _kingman_wait(rho, mean, arrival_cv, cs)

    def at(w: float, p: str) -> float:
        tail = 1 - float(p[1:]) / 100
        return (w / rho) * math.log(rho / tail) if rho > tail else 0.0

    first = {"mean": timing.first_s + first_wait, **{p: timing.first_s + at(first_wait, p) for p in percentiles}}
    full = {"mean": timing.service_s + wait, **{p: timing.service_s + at(wait, p) for p in percentiles}}
    return first, full, True


def stage_capacity(timing: StageTiming, arrival_cv: float, first_targets: dict[str, float],
                   full_targets: dict[str, float], interleaved: bool = False) -> float:
    """The most requests/s one replica serves with every percentile target met (0 when none), by bisection."""

    wanted = tuple(sorted(set(first_targets) | set(full_targets)))

    def ok(rate: float) -> bool:
        first, full, stable = stage_latency(timing, rate, arrival_cv, wanted, interleaved)
        return stable and all(first[p] <= v for p, v in first_targets.items()) and all(
            full[p] <= v for p, v in full_targets.items())

    hi = 1 / timing.service_s
    if not ok(hi * 1e-6):
        return 0.0
    return bisect_holds(ok, hi, 1e-12)[0]


@dataclass(frozen=True)
class StageEstimate:
    """A non-LLM stage replica's prediction at its capacity."""

    load: StageLoad
    timing: StageTiming
    rate: float
    first: dict[str, float]
    full: dict[str, float]
    calibration: Calibration
    """Never calibrated: no stage of this kind is in the measurements; the efficiency factors are borrowed."""
