"""The intent language: what a user wants served, how much load, how fast, at what cost, on what.

A `ServingIntent` holds one or more services sharing one inventory (a cluster profile). Each service is either a
single model or a `pipeline` of stages (omni-modal models: encoders, an autoregressive LLM, a codec, a diffusion
transformer). Quantities are written readably and stored in canonical units (`infra.intent.units`). Checks that
need only the file live here; checks against the catalog (unknown model, a model that fits no device) are in
`infra.intent.resolve`.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, ValidationInfo, field_validator, model_validator

from infra.catalog.schema import ModelKind, Precision
from infra.intent.base import (API_VERSION, Metadata, Name, Percentile, Statistic, Strict, percentile_value,
                               require_unique, statistic_order)
from infra.intent.profile import ClusterProfileSpec, Conventions, CpuPool, Pool
from infra.intent.units import Bytes, Count, Duration, Fraction, Money, MoneyPerHour, MoneyPerMTok, Rate

def _scalar_to(field: str, value: Any) -> Any:
    """Lets a scalar stand for `{field: scalar}`."""
    if isinstance(value, (str, int, float)) and not isinstance(value, bool):
        return {field: value}
    return value


MAX_CLIENTS = 10_000_000
"""Closed-loop clients one workload may state (ten times a busy public endpoint's concurrent streams)."""

MAX_REPLICAS = 100_000
"""Replicas or zones an availability requirement may ask for: as many as nodes a pool may hold."""

MAX_MEDIA_ITEMS = 1_000_000
"""Images, frames or diffusion steps per request: a 10-hour video at 25 frames a second is 900,000 frames."""


class HistogramBin(Strict):
    """One bar of a length histogram: `weight` of the requests have at most `le` tokens (and more than the
    previous bar's `le`)."""

    le: Count
    """Upper bound of the bar, in tokens (inclusive)."""
    weight: float = Field(gt=0, le=1e12, allow_inf_nan=False)
    """Relative weight of the bar; weights need not sum to 1."""


class LengthDistribution(Strict):
    """Token lengths of requests: one fixed length, a mean with percentiles, a histogram, or a trace file.

    Written as `2k` (fixed), `{mean: 2k, p50: 1.5k, p99: 12k, max: 32k}`, `{histogram: [{le: 512, weight: 3}, ...]}`
    or `{trace: requests.jsonl}`.
    """

    model_config = Strict.model_config | {
        "json_schema_extra": {"patternProperties": {"^[pP]\\d{1,2}(\\.\\d+)?$": {
            "anyOf": [{"type": "integer", "minimum": 0}, {"type": "string"}],
            "description": "Percentile of the length, e.g. p99: 12k."}}}
    }

    fixed: Count | None = None
    """Every request has exactly this many tokens."""
    mean: Count | None = None
    """Mean length."""
    percentiles: dict[Percentile, Count] = {}
    """Length percentiles; written inline as `p50: 1.5k`, `p99: 12k`."""
    min: Count | None = None
    """Shortest length."""
    max: Count | None = None
    """Longest length (requests are truncated to it)."""
    histogram: list[HistogramBin] | None = None
    """Length histogram, bars in increasing `le`."""
    trace: str | None = None
    """JSONL file of recorded requests (`input_tokens`, `output_tokens`, optional `timestamp` per line), relative
    to the intent file."""

    @model_validator(mode="before")
    @classmethod
    def _inline(cls, value: Any) -> Any:
        if isinstance(value, (str, int, float)) and not isinstance(value, bool):
            return {"fixed": value}
        if isinstance(value, dict):
            pct = {k: v for k, v in value.items() if isinstance(k, str) and k[:1] in "pP" and k[1:2].isdigit()}
            if pct:
                rest = {k: v for k, v in value.items() if k not in pct}
                rest["percentiles"] = {**rest.get("percentiles", {}), **pct}
                return rest
        return value

    @model_validator(mode="after")
    def _one_form(self) -> LengthDistribution:
        forms = [name for name, present in (
            ("fixed", self.fixed is not None),
            ("mean/percentiles", self.mean is not None or bool(self.percentiles)),
            ("histogram", self.histogram is not None),
            ("trace", self.trace is not None),
        ) if present]
        if len(forms) != 1:
            raise ValueError(
                "give exactly one of: a fixed length, mean and/or percentiles, a histogram, or a trace"
                + (f" (found {', '.join(forms)})" if forms else "")
            )
        for name, value in (("fixed", self.fixed), ("mean", self.mean), ("max", self.max),
                            *sorted(self.percentiles.items())):
            if value is not None and value < 1:
                raise ValueError(f"{name} is {value} tokens; a request has at least 1 token")
        if self.histogram is not None:
            bounds = [b.le for b in self.histogram]
            if bounds != sorted(set(bounds)):
                raise ValueError(f"histogram bars must have increasing `le` bounds, got {bounds}")
        ordered = sorted(self.percentiles.items(), key=lambda kv: percentile_value(kv[0]))
        for (ka, va), (kb, vb) in zip(ordered, ordered[1:]):
            if vb < va:
                raise ValueError(f"{kb} ({vb}) is below {ka} ({va}); a higher percentile cannot be shorter")
        top = max([v for _, v in ordered] + [self.mean or 0])
        if self.max is not None and top > self.max:
            raise ValueError(f"max ({self.max}) is below a percentile or the mean ({top}); raise max")
        if self.min is not None and self.max is not None and self.min > self.max:
            raise ValueError(f"min ({self.min}) is above max ({self.max})")
        return self


MAX_CV = 100.0
"""Largest coefficient of variation an arrival or length distribution may state: past it a lognormal's quantiles
overflow, and no measured distribution comes near it."""


class Arrival(Strict):
    """How requests arrive in an open loop."""

    process: Literal["poisson", "gamma", "constant"] = "poisson"
    """poisson: independent arrivals; gamma: burstier (cv > 1) or smoother (cv < 1) than Poisson; constant: evenly
    spaced."""
    cv: float | None = Field(default=None, gt=0, le=MAX_CV, allow_inf_nan=False)
    """Coefficient of variation of inter-arrival times, for gamma (1 = Poisson)."""

    @model_validator(mode="before")
    @classmethod
    def _from_scalar(cls, value: Any) -> Any:
        return _scalar_to("process", value)

    @model_validator(mode="after")
    def _cv_matches(self) -> Arrival:
        if self.process == "gamma" and self.cv is None:
            raise ValueError("a gamma arrival process needs its burstiness: add cv (e.g. cv: 2)")
        if self.process != "gamma" and self.cv is not None:
            raise ValueError("cv applies to gamma arrivals only; remove cv or set process: gamma")
        return self


class RatePoint(Strict):
    """The request rate from a time of day on."""

    at: str = Field(pattern=r"^([01]\d|2[0-3]):[0-5]\d$")
    """Time of day, `HH:MM` (24h, cluster time zone)."""
    rate: Rate
    """Request rate from then on."""


class RateSpec(Strict):
    """Request rate: a peak (and baseline), or a daily profile. `rate: 40/s` is short for `{peak: 40/s}`."""

    peak: Rate | None = None
    """Highest sustained request rate to plan for."""
    baseline: Rate | None = None
    """Lowest rate (autoscaling floor); defaults to the peak."""
    daily: list[RatePoint] | None = None
    """Rate over a day, as steps; peak and baseline are its maximum and minimum."""

    @model_validator(mode="before")
    @classmethod
    def _from_scalar(cls, value: Any) -> Any:
        return _scalar_to("peak", value)

    @model_validator(mode="after")
    def _consistent(self) -> RateSpec:
        if self.daily is not None:
            if self.peak is not None or self.baseline is not None:
                raise ValueError("give either peak/baseline or a daily profile, not both")
            if not self.daily:
                raise ValueError("daily profile is empty; add at least one {at, rate} step")
            times = [p.at for p in self.daily]
            if times != sorted(set(times)):
                raise ValueError(f"daily steps must be in increasing time order without repeats, got {times}")
        elif self.peak is None:
            raise ValueError("a rate needs a peak (e.g. rate: {peak: 40/s, baseline: 10/s}) or a daily profile")
        if self.peak_rps <= 0:
            raise ValueError("the peak rate is zero, so there is nothing to serve; set peak to the highest "
                             "request rate to plan for, e.g. peak: 40/s")
        if self.baseline is not None and self.peak is not None and self.baseline > self.peak:
            raise ValueError(f"baseline ({self.baseline:g}/s) is above peak ({self.peak:g}/s); swap them")
        return self

    @property
    def peak_rps(self) -> float:
        return self.peak if self.peak is not None else max(p.rate for p in self.daily or [])

    @property
    def baseline_rps(self) -> float:
        if self.daily is not None:
            return min(p.rate for p in self.daily)
        return self.baseline if self.baseline is not None else self.peak_rps


class Workload(Strict):
    """The load a service must carry: an open loop (`rate`) or a closed loop (`concurrency`)."""

    rate: RateSpec | None = None
    """Request rate (open loop)."""
    concurrency: int | None = Field(default=None, ge=1, le=MAX_CLIENTS)
    """Fixed number of clients each waiting for its reply before sending the next (closed loop)."""
    arrival: Arrival = Arrival()
    """Arrival process of the open loop; `arrival: poisson` is short for `{process: poisson}`."""
    input_tokens: LengthDistribution | None = None
    """Prompt length per request (required for single-model services)."""
    output_tokens: LengthDistribution | None = None
    """Generated tokens per request (required for single-model services)."""
    prefix_sharing: Fraction = 0.0
    """Fraction of prompt tokens shared with earlier requests (system prompts, chat history), reusable from a
    prefix cache."""

    @field_validator("prefix_sharing")
    @classmethod
    def _computes_something(cls, value: float) -> float:
        if value >= 1:
            raise ValueError(f"prefix_sharing {value:.0%} leaves no prompt token to compute; every request computes "
                             "at least its own last tokens, so give a share below 100%, e.g. 90%")
        return value

    @model_validator(mode="after")
    def _loop(self) -> Workload:
        if (self.rate is None) == (self.concurrency is None):
            raise ValueError("give either rate (open loop) or concurrency (closed loop), exactly one")
        return self


class Slo(Strict):
    """Latency objectives per request, each at one or more percentiles or the mean, e.g.
    `ttft: {p50: 200ms, p99: 500ms}` or `tpot: {mean: 30ms}`. A mean bounds the average over requests; it is not a
    bound on any one request, so it does not enter attainment."""

    ttft: dict[Statistic, Duration] = {}
    """Time to first token: request sent to first token received."""
    tpot: dict[Statistic, Duration] = {}
    """Time per output token after the first: (E2E - TTFT) / (output tokens - 1)."""
    itl: dict[Statistic, Duration] = {}
    """Inter-token latency: each gap between successive tokens."""
    e2e: dict[Statistic, Duration] = {}
    """End to end: request sent to last token received."""
    attainment: Fraction | None = None
    """Fraction of requests that must meet every objective at once (goodput); unset checks each percentile on
    its own."""
    confidence: Fraction | None = None
    """Plan so that each objective of an LLM service holds with this probability (0.5 to 0.95) given the
    performance model's own error: a target is divided by the measured / predicted ratio at this quantile of the
    committed error band (the model's in-sample band when the calibration fitted it, else the band of models it
    never saw), never loosened. Unset plans to the prediction itself."""

    @field_validator("attainment")
    @classmethod
    def _someone(cls, value: float | None) -> float | None:
        if value is not None and value <= 0:
            raise ValueError("attainment 0% asks nothing of any request; give the share of requests that must "
                             "meet every objective, e.g. 99%")
        return value

    @field_validator("confidence")
    @classmethod
    def _resolvable(cls, value: float | None) -> float | None:
        if value is not None and not 0.5 <= value <= 0.95:
            raise ValueError(f"confidence {value:g} is outside 0.5..0.95, the quantiles the error band records")
        return value

    @field_validator("ttft", "tpot", "itl", "e2e", mode="before")
    @classmethod
    def _mapping(cls, value: Any, info) -> Any:
        if not isinstance(value, dict):
            raise ValueError(
                f"{info.field_name} needs a percentile or the mean, e.g. `{info.field_name}: {{p99: {value}}}` or "
                f"`{info.field_name}: {{mean: {value}}}`"
            )
        return value

    @field_validator("ttft", "tpot", "itl", "e2e")
    @classmethod
    def _ordered(cls, value: dict[str, float], info) -> dict[str, float]:
        metric = info.field_name
        for k, v in value.items():
            if v <= 0:
                raise ValueError(f"{metric}.{k} is {_ms(v)}; no request is that fast, give a time above zero")
        ordered = sorted(((k, v) for k, v in value.items() if k != "mean"), key=lambda kv: percentile_value(kv[0]))
        for (ka, va), (kb, vb) in zip(ordered, ordered[1:]):
            if vb < va:
                raise ValueError(
                    f"{metric}.{kb} ({_ms(vb)}) is below {metric}.{ka} ({_ms(va)}): a higher percentile "
                    f"cannot be faster; raise {kb} or lower {ka}"
                )
        return value

    @model_validator(mode="after")
    def _coherent(self) -> Slo:
        if self.e2e:
            longest = max(self.e2e.values())
            for metric in ("tpot", "itl", "ttft"):
                for k, v in getattr(self, metric).items():
                    if v > longest:
                        raise ValueError(
                            f"{metric}.{k} ({_ms(v)}) exceeds every e2e target (largest {_ms(longest)}): a part of "
                            f"a request cannot take longer than the whole; lower {metric}.{k} or raise e2e"
                        )
        return self

    def targets(self) -> list[tuple[str, str, float]]:
        """Every objective as (metric, percentile or `mean`, seconds), in a stable order."""
        out = []
        for metric in ("ttft", "tpot", "itl", "e2e"):
            for k, v in sorted(getattr(self, metric).items(), key=lambda kv: statistic_order(kv[0])):
                out.append((metric, k, v))
        return out


def _ms(seconds: float) -> str:
    return f"{seconds * 1000:g}ms" if seconds < 1 else f"{seconds:g}s"


class Budget(Strict):
    """Spending limits; each is optional and all given ones must hold."""

    per_hour: MoneyPerHour | None = None
    """Total cost per hour at peak, e.g. `$50/h`."""
    per_million_tokens: MoneyPerMTok | None = None
    """Cost per million tokens (input + output) at peak, e.g. `$0.40/Mtok`."""
    per_request: Money | None = None
    """Cost per request at peak, e.g. `$0.002`."""


class Availability(Strict):
    """Redundancy."""

    min_replicas: int = Field(default=1, ge=1, le=MAX_REPLICAS)
    """Fewest serving replicas at any time (per role, for disaggregated deployments)."""
    zones: int = Field(default=1, ge=1, le=MAX_REPLICAS)
    """Spread replicas across at least this many zones."""
    headroom: Fraction = 0.0
    """Spare capacity to keep above peak demand (e.g. 20%): room for bursts beyond the arrival model and for a
    replica being lost or restarted."""


class Preferences(Strict):
    """Choices the planner would otherwise make freely."""

    frameworks: list[str] = []
    """Serving frameworks allowed (catalog names, e.g. vllm, sglang); empty allows every suitable one."""
    devices: list[str] = []
    """Device types allowed (catalog names); empty allows every pool of the inventory."""
    disaggregation: Literal["auto", "on", "off"] = "auto"
    """Prefill/decode disaggregation: let the planner decide, require it, or forbid it."""
    fractional_sharing: bool = False
    """Allow several small replicas to share one device through memory/core slices (HAMi)."""
    spot: Literal["never", "allow", "prefer"] = "never"
    """Use spot/preemptible pools: never, when cheaper, or first."""
    multi_node: bool = True
    """Allow one replica to span several nodes."""

    @field_validator("disaggregation", mode="before")
    @classmethod
    def _bool_disagg(cls, value: Any) -> Any:
        return {True: "on", False: "off"}.get(value, value) if isinstance(value, bool) else value

    @field_validator("spot", mode="before")
    @classmethod
    def _bool_spot(cls, value: Any) -> Any:
        return {True: "allow", False: "never"}.get(value, value) if isinstance(value, bool) else value


class Handoff(Strict):
    """What a stage hands to the next one."""

    unit: Literal["token", "image", "audio_second", "video_frame", "request"]
    """Per what the data is produced."""
    size: Bytes
    """Bytes per unit, e.g. a hidden state per token is hidden_size x 2 bytes."""


class StageWork(Strict):
    """Work one request brings to a stage."""

    input_tokens: LengthDistribution | None = None
    """Prompt tokens (LLM stages; defaults to the service's workload)."""
    output_tokens: LengthDistribution | None = None
    """Generated tokens (LLM stages; defaults to the service's workload)."""
    images: float | None = Field(default=None, gt=0, le=MAX_MEDIA_ITEMS, allow_inf_nan=False)
    """Images per request (vision encoders)."""
    audio: Duration | None = Field(default=None, gt=0)
    """Audio per request, in or out (audio encoders, codecs), e.g. 12s; more than zero."""
    video_frames: int | None = Field(default=None, gt=0, le=MAX_MEDIA_ITEMS)
    """Frames generated or read per request (DiT, video encoders)."""
    resolution: str | None = Field(default=None, pattern=r"^[1-9]\d{0,5}x[1-9]\d{0,5}$")
    """Frame or image size `WIDTHxHEIGHT`, e.g. 1280x720."""
    denoise_steps: int | None = Field(default=None, gt=0, le=MAX_MEDIA_ITEMS)
    """Diffusion steps per request (DiT)."""
    cpu_time: Duration | None = Field(default=None, gt=0)
    """CPU time per request (preprocessing stages), e.g. 40ms; more than zero."""


class StageSlo(Strict):
    """Objectives of one stage."""

    first_output: dict[Percentile, Duration] = {}
    """Request arrival to this stage's first output (e.g. first audio chunk)."""
    latency: dict[Percentile, Duration] = {}
    """Time a request spends in this stage."""


class Stage(Strict):
    """One stage of a pipeline: its own model, device, parallelism and replicas."""

    name: Name
    """Stage name, unique in the pipeline."""
    kind: ModelKind | Literal["cpu"]
    """llm, vision_encoder, audio_encoder, codec, dit, or cpu (preprocessing on CPU nodes)."""
    model: str | None = None
    """Catalog model for the stage (not for cpu stages)."""
    after: list[str] | None = None
    """Stages whose output this one consumes (all of it before it can finish); defaults to the stage listed before
    it. `after: []` starts a branch: two encoders side by side, each with no input, both named in the `after` of
    the LLM they feed. Every stage but the last hands on to exactly one later stage; the last is the output."""
    work: StageWork = StageWork()
    """Work per request."""
    handoff: Handoff | None = None
    """Data passed to the next stage."""
    precisions: list[Precision] = []
    """Allowed precisions; empty allows the service's."""
    slo: StageSlo = StageSlo()
    """Per-stage objectives."""
    image: str | None = None
    """Container image that runs a CPU stage (its preprocessing server), e.g. `registry.example.com/prep:1.4`;
    without one, its manifests hold only its stage config and validation warns."""
    command: list[str] | None = None
    """Command of a CPU stage's container (the image's entrypoint when unset)."""
    port: int | None = Field(default=None, ge=1, le=65535)
    """Port a CPU stage's container takes its input on."""

    @model_validator(mode="after")
    def _work_fits_kind(self) -> Stage:
        need = {
            "cpu": ("cpu_time",), "codec": ("audio",), "audio_encoder": ("audio",), "vision_encoder": ("images",),
            "dit": ("video_frames", "denoise_steps"), "llm": (),
        }[self.kind]
        missing = [f for f in need if getattr(self.work, f) is None]
        if missing:
            raise ValueError(f"a {self.kind} stage needs work.{' and work.'.join(missing)}")
        if self.kind == "cpu" and self.model is not None:
            raise ValueError("a cpu stage runs no model; remove model")
        if self.kind != "cpu" and (self.image or self.command or self.port):
            raise ValueError(f"image, command and port are for cpu stages; a {self.kind} stage runs the engine "
                             "its framework names; remove them")
        if self.kind != "cpu" and self.model is None:
            raise ValueError(f"a {self.kind} stage needs a model")
        return self


def stage_inputs(names: list[str], after: list[list[str] | None]) -> list[list[int]]:
    """For each stage of a pipeline (names in order, each stage's `after`), the indices of the stages it consumes:
    those named in `after`, or the stage listed before it when `after` is unset."""
    where = {n: i for i, n in enumerate(names)}
    return [([i - 1] if i else []) if a is None else [where[n] for n in a if n in where] for i, a in enumerate(after)]


def stage_consumers(inputs: list[list[int]]) -> list[int | None]:
    """For each stage, the stage that consumes it (the first, if an invalid pipeline names several), or None."""
    out: list[int | None] = [None] * len(inputs)
    for j in reversed(range(len(inputs))):
        for i in inputs[j]:
            out[i] = j
    return out


class Service(Strict):
    """One served endpoint: a model (or pipeline), its load, objectives, budget and preferences."""

    name: Name
    """Service name; becomes the Kubernetes Service and served model name."""
    model: str | None = None
    """Catalog name, Hugging Face id (e.g. `Qwen/Qwen3-32B`), or a path to a `config.json`. A quantized re-upload
    (e.g. `nvidia/Qwen3-32B-NVFP4`) is served as written, in the precision its format suffix names."""
    pipeline: list[Stage] | None = None
    """Stages of an omni-modal model, instead of `model`."""
    precisions: list[Precision] = []
    """Weight precisions allowed (e.g. [fp8, bf16]); empty allows any the device and framework support."""
    max_context: Count | None = None
    """Longest prompt + output to accept (the engine's max model length); defaults to the model's."""

    @field_validator("max_context")
    @classmethod
    def _some_context(cls, value: int | None) -> int | None:
        if value is not None and value < 2:
            raise ValueError(f"max_context {value} holds no prompt and answer; give at least 2 tokens, or leave it "
                             "out for the model's own")
        return value
    workload: Workload
    """Load."""
    slo: Slo = Slo()
    """Latency objectives."""
    budget: Budget = Budget()
    """Spending limits of this service."""
    availability: Availability = Availability()
    """Replicas and zones."""
    preferences: Preferences = Preferences()
    """Frameworks, devices, disaggregation, sharing, spot."""

    @model_validator(mode="after")
    def _model_or_pipeline(self) -> Service:
        if (self.model is None) == (self.pipeline is None):
            raise ValueError("give either model or pipeline, exactly one")
        if self.model is not None and (self.workload.input_tokens is None or self.workload.output_tokens is None):
            raise ValueError("workload needs input_tokens and output_tokens (e.g. input_tokens: {mean: 2k})")
        if self.pipeline is not None and not self.pipeline:
            raise ValueError("pipeline is empty; list at least one stage")
        if self.pipeline is not None:
            means = [f"slo.{m}.mean" for m in ("ttft", "tpot", "itl", "e2e") if "mean" in getattr(self.slo, m)]
            if means:
                # Stages share a pipeline's budget by the tails of their latencies; a mean has no tail to share.
                raise ValueError(f"{', '.join(means)}: a pipeline's objectives are percentiles, which its stages "
                                 "split between them; write e.g. e2e: {p50: ...} instead of a mean")
        return self


class ClusterSource(Strict):
    """The inventory: a cluster profile file, or pools written inline."""

    profile: str | None = None
    """Path of a ClusterProfile file, relative to this intent."""
    pools: list[Pool] | None = None
    """Pools written inline (same format as a profile's `spec.pools`)."""
    conventions: Conventions | None = None
    """Conventions written inline (with inline pools)."""
    cpu_pools: list[CpuPool] = []
    """CPU pools written inline (with inline pools; same format as a profile's `spec.cpu_pools`)."""

    @model_validator(mode="after")
    def _one(self) -> ClusterSource:
        if (self.profile is None) == (self.pools is None):
            raise ValueError("give either profile (a file) or pools (inline), exactly one")
        if self.profile is not None and self.conventions is not None:
            raise ValueError("conventions are given inline but a profile is referenced; move them into the profile")
        if self.profile is not None and self.cpu_pools:
            raise ValueError("cpu_pools are given inline but a profile is referenced; move them into the profile")
        return self

    @field_validator("pools")
    @classmethod
    def _pools(cls, pools: list[Pool] | None) -> list[Pool] | None:
        if pools is not None:
            if not pools:
                raise ValueError("pools is empty; list at least one pool")
            require_unique([p.name for p in pools], "pool")
        return pools

    @field_validator("cpu_pools")
    @classmethod
    def _cpu_pools(cls, cpu_pools: list[CpuPool], info: ValidationInfo) -> list[CpuPool]:
        require_unique([p.name for p in info.data.get("pools") or []] + [p.name for p in cpu_pools], "pool")
        return cpu_pools

    def inline_spec(self) -> ClusterProfileSpec | None:
        if self.pools is None:
            return None
        return ClusterProfileSpec(pools=self.pools, cpu_pools=self.cpu_pools,
                                  conventions=self.conventions or Conventions())


class IntentSpec(Strict):
    """What to serve, and on what."""

    cluster: ClusterSource
    """Inventory the services share."""
    services: list[Service] = Field(min_length=1)
    """Services, planned jointly over the inventory."""
    budget: Budget = Budget()
    """Limits on all services together."""



class ServingIntent(Strict):
    """A serving intent (`kind: ServingIntent`)."""

    api_version: Literal[API_VERSION] = Field(alias="apiVersion")  # type: ignore[valid-type]
    """Always `infra.dev/v1alpha1`."""
    kind: Literal["ServingIntent"]
    """Always `ServingIntent`."""
    metadata: Metadata
    """Name, description, labels."""
    spec: IntentSpec
    """Services and inventory."""
