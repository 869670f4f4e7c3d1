"""The DeploymentPlan contract (`plan.yaml`): what the planner decided, why, and from what.

Only the planner creates a plan; rendering, verification and GitOps read it through `load_plan`, so the file is
validated in both directions (a plan that does not fit this model is never written, and a hand-edited one that
breaks it is refused with its line).

Every number is finite and bounded by what a cluster physically holds (the bounds below, each said in its field's
description): a plan edited to ask for four billion attention groups or an exabyte-long step is refused at load,
with its file, line and field, before a simulator or renderer sizes anything by it. The parts a plan copies from
its intent (a service's `workload` and `availability`, a stage's `work`) validate as the intent's models do, and
the names one part gives another (a stage's `unit`, the pools) must exist and be unique.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    PrivateAttr,
    SerializerFunctionWrapHandler,
    field_validator,
    model_serializer,
    model_validator,
)
from pydantic import ValidationError as PydanticValidationError

from infra.catalog.schema import Vendor
from infra.errors import IntentError, Location, Problem
from infra.intent.base import LabelKey, LabelValue, Name, ResourceName, Subdomain, percentile_value, require_unique
from infra.intent.loader import problems_from_pydantic
from infra.intent.models import MAX_CLIENTS, Availability, StageWork, Workload, stage_consumers, stage_inputs
from infra.intent.profile import MAX_DEVICES_PER_NODE, MAX_NODES
from infra.intent.units import MAX_BANDWIDTH_GBS, MAX_EXACT, MAX_MONEY_PER_HOUR, MAX_SECONDS, MIN_RATE_RPS
from infra.intent.yamlio import dotted, load_yaml, read_text
from infra.limits import shown
from infra.planner.routing import fill_routing

MAX_DEGREE = MAX_DEVICES_PER_NODE
"""Largest parallel degree (tp, pp, ep, moe_tp, attention_dp, sp) and workers of a role per replica: 1024, the most
devices a node may state; no model has more heads, layers or experts to split among more."""
MAX_WORKER_DEVICES = 65_536
"""Most devices one worker (one engine instance) may span: 64 racks of 1024; the largest served deployments span
a few hundred."""
MAX_DEVICES = MAX_NODES * MAX_DEVICES_PER_NODE
"""Most devices (or device-equivalents) a pool, and so an allocation, may hold: its nodes times their devices."""
MAX_STEP_TOKENS = 2 ** 31 - 1
"""Most tokens in a request or an engine step: engines count them in 32-bit integers."""
MAX_SEQS = 2 ** 20
"""Most sequences one engine batches at once (a million; engines run hundreds)."""
MAX_KV_TOKENS = 2 ** 40
"""Most tokens a KV cache may hold (a trillion: petabytes of cache)."""
MAX_MS = MAX_SECONDS * 1000
"""Longest time a plan states, in milliseconds: a year, as the intent's durations."""
MAX_LOAD = float(MAX_CLIENTS)
"""Largest load (requests/s or concurrent clients) a plan states: the intent's most clients, above its most rate."""
MAX_COST_PER_HOUR = MAX_DEVICES * MAX_MONEY_PER_HOUR
"""Most dollars an hour a plan states: every device a pool may hold at the highest price a profile may state."""
MAX_RATIO = 1e12
"""Largest measured ratio (utilisation, measured over predicted, a correction's scale) a plan states: beyond it
a figure is garbage."""


_METRICS = ("ttft", "tpot", "itl", "e2e", "first_output", "latency")
"""Metrics a plan's objective keys name: the intent's, and a pipeline stage's first output and latency."""
_PERCENTILE = re.compile(r"p\d{1,2}(\.\d+)?")


def _objective_targets(value: dict[str, float], stages: bool = False) -> dict[str, float]:
    """Objective key -> target in milliseconds, each key `<metric>_<percentile>` or `<metric>_mean` (`stages`:
    also `<stage>_first_output_<percentile>`, as a pipeline's objectives) and each target above 0, at most a
    year."""
    for key, target in value.items():
        head, _, pct = key.rpartition("_")
        known = head in _METRICS or (stages and head.endswith("_first_output") and len(head) > len("_first_output"))
        statistic = pct == "mean" or (_PERCENTILE.fullmatch(pct) and 0 < percentile_value(pct) < 100)
        if not known or not statistic:
            raise ValueError(f"objective {shown(key)} is not <metric>_<percentile> or <metric>_mean; name one of "
                             f"{', '.join(_METRICS)} and a percentile, e.g. ttft_p99, or re-plan the intent")
        if not 0 < target <= MAX_MS:
            raise ValueError(f"{key}: target {target:g} ms is not above 0 and at most a year; re-plan the intent")
    return value


class PlanModel(BaseModel):
    # allow_inf_nan=False: every float of a plan is finite (a plan is YAML a person may edit: `.nan`, `.inf` and
    # numbers past 1e308 are refused at load).
    model_config = ConfigDict(extra="forbid", frozen=True, use_attribute_docstrings=True, allow_inf_nan=False)


class Layout(PlanModel):
    """Parallel layout of one worker. Every degree is from 1 to 1024 (`MAX_DEGREE`)."""

    tp: int = Field(ge=1, le=MAX_DEGREE)
    """Tensor parallel degree (1 to 1024)."""
    pp: int = Field(ge=1, le=MAX_DEGREE)
    """Pipeline parallel degree (1 to 1024)."""
    ep: int = Field(ge=1, le=MAX_DEGREE)
    """Expert parallel degree (1 to 1024)."""
    moe_tp: int = Field(ge=1, le=MAX_DEGREE)
    """Tensor parallel degree inside each expert (1 to 1024)."""
    attention_dp: int = Field(ge=1, le=MAX_DEGREE)
    """Attention data parallel groups of the worker, each its own engine (1 to 1024)."""
    sp: int = Field(default=1, ge=1, le=MAX_DEGREE)
    """Sequence parallel degree (diffusion transformers; 1 to 1024)."""


class Objective(PlanModel):
    """One latency objective at one percentile, as predicted at the planned load."""

    target_ms: float = Field(gt=0, le=MAX_MS)
    """The objective's target (above 0, at most a year)."""
    predicted_ms: float = Field(ge=0)
    """The prediction at the planned load (finite, 0 or more)."""
    margin: float = Field(le=1)
    """1 - predicted / target: the share of the target left unused (negative would mean missed; finite, at most
    1)."""
    held_out: float | None = Field(default=None, ge=0, le=1)
    """Share of the held-out measurements (models left out of the calibration fit) that came in within this margin
    of their prediction: how often a margin this size has held for a model the fit never saw. Read off the
    committed error band of the mode, between 5% and 95%; None where no band applies (E2E, pipeline stages, devices
    whose factors are borrowed)."""


class Engine(PlanModel):
    """Engine settings of one worker role, as the prediction assumed them; rendered into the engine's arguments."""

    max_num_seqs: int = Field(ge=1, le=MAX_SEQS)
    """Most sequences one attention group runs at once (vLLM `--max-num-seqs`, SGLang `--max-running-requests`):
    the batch the prediction let it run, which is what the KV cache holds at the context a request keeps resident,
    at most 1024; a prefill worker's holds a step's token budget of prompts, at least 256 (1 to 2^20)."""
    batch_at_capacity: float | None = Field(default=None, ge=0, le=MAX_SEQS)
    """Sequences one attention group runs on average at the replica's capacity, as predicted (decoding and
    aggregated roles): an autoscaler's target is this at the planned share of capacity."""
    max_num_batched_tokens: int = Field(ge=1, le=MAX_STEP_TOKENS)
    """Tokens one step may process (the chunked-prefill budget; 1 to 2^31 - 1)."""
    max_model_len: int = Field(ge=1, le=MAX_STEP_TOKENS)
    """Longest request in tokens: the service's max_context (else the model's), never more than the KV cache
    holds, so the engine starts (1 to 2^31 - 1)."""
    memory_utilization: float = Field(gt=0, le=1)
    """Fraction of device memory the engine may take (vLLM `--gpu-memory-utilization`)."""
    kv_cache_dtype: Literal["auto", "fp8"]
    """`fp8` halves the KV cache; `auto` keeps the model's dtype."""
    quantization: str | None = None
    """Weight precision when it differs from the published checkpoint's (e.g. `fp8` online quantisation)."""
    kv_cache_tokens: int = Field(ge=1, le=MAX_KV_TOKENS)
    """Predicted KV-cache capacity per attention group, in tokens (1 to 2^40)."""
    chunked_prefill: bool
    """Whether prompts are prefilled in chunks of the step's token budget beside decoding sequences."""
    prefix_caching: bool
    """Whether the engine reuses the KV cache of prompt prefixes it has seen (the workload's prefix sharing)."""


class Allocation(PlanModel):
    """Replicas of one shape on one pool."""

    pool: str
    """The cluster pool the replicas run on (the prefill workers' pool of a disaggregated unit)."""
    device: str
    """Catalog name of the pool's device."""
    framework: str
    """Catalog name of the serving framework."""
    precision: str
    """Weight precision the engine serves, e.g. fp8."""
    mode: Literal["agg", "disagg"]
    """`agg`: prefill and decode in the same engines; `disagg`: separate prefill and decode workers."""
    parallel: Layout
    """How one worker splits the model over its devices (tensor, pipeline, expert parallel sizes)."""
    prefill_workers: int | None = Field(default=None, ge=1, le=MAX_DEGREE)
    """Prefill workers of one disaggregated replica (1 to 1024)."""
    decode_workers: int | None = Field(default=None, ge=1, le=MAX_DEGREE)
    """Decode workers of one disaggregated replica (1 to 1024)."""
    decode_pool: str | None = None
    """Pool of the decode workers when it is not `pool` (prefill and decode on different device types)."""
    decode_device: str | None = None
    """Device of the decode workers when they run on another pool's device (disaggregated only)."""
    decode_parallel: Layout | None = None
    """Layout of each decode worker when it differs from `parallel`."""
    share: float | None = Field(default=None, gt=0, le=1)
    """Fraction of a device per replica when devices are sliced (HAMi; above 0, at most 1)."""
    devices_per_worker: int = Field(ge=1, le=MAX_WORKER_DEVICES)
    """Devices one worker (one engine instance) spans: tp x attention_dp (or moe_tp x ep) x pp (1 to 65,536)."""
    nodes_per_worker: int = Field(ge=1, le=MAX_WORKER_DEVICES)
    """Nodes one worker spans; above 1 the worker is a leader with followers (LeaderWorkerSet; 1 to 65,536)."""
    engines: dict[str, Engine]
    """Role (`agg`, or `prefill` and `decode`) -> engine settings."""
    nodes_used: int = Field(ge=1, le=2 * MAX_NODES)
    """Nodes the allocation's workers occupy (shared with other allocations where they fit together; at most
    those of its two pools)."""
    placement: dict[str, int] | None = None
    """Node -> workers, when the profile lists its nodes by name (1 to `MAX_DEVICES` workers a node)."""
    replicas: int = Field(ge=1, le=MAX_DEVICES)
    """Replicas of this shape (1 to `MAX_DEVICES`, a replica per device of the largest pool)."""
    devices_per_replica: float = Field(gt=0, le=MAX_DEVICES)
    """Devices (or device-equivalents, when sliced) one replica takes (above 0, at most a pool's devices)."""
    devices: float = Field(gt=0, le=2 * MAX_DEVICES)
    """Devices the allocation takes (above 0, at most those of its two pools)."""
    capacity_per_replica: float = Field(ge=MIN_RATE_RPS, le=MAX_LOAD)
    """Load one replica carries within the objectives, in the service's demand unit (at least a request a year,
    the least rate an intent states, at most 1e7)."""
    load_per_replica: float = Field(ge=0, le=MAX_LOAD)
    """Load one replica gets at the peak, in the service's demand unit (0 to 1e7)."""
    cost_per_hour: float = Field(ge=0, le=2 * MAX_COST_PER_HOUR)
    """Dollars an hour (0 for owned devices priced at $0/h; at most `MAX_COST_PER_HOUR` of each of its two
    pools)."""
    predicted: dict[str, Objective]
    """Objective key (`ttft_p99`) -> prediction at this allocation's share of the peak load."""
    calibrated: bool
    """Whether the performance model's factors were fitted on this framework and device (else borrowed)."""
    calibration_source: str
    """Where the factors came from: `fit:FRAMEWORK/DEVICE`, `borrowed:...`, or a user's calibration."""
    measured: str | None = None
    """What the user's calibration corrected in these figures (the level matched, its measured points and their
    dates); absent where they rest on the packaged prior alone."""

    @field_validator("placement")
    @classmethod
    def _placement(cls, value: dict[str, int] | None) -> dict[str, int] | None:
        for node, workers in (value or {}).items():
            if not 1 <= workers <= MAX_DEVICES:
                raise ValueError(f"node {shown(node)}: {workers} workers is not from 1 to {MAX_DEVICES:,}; re-plan "
                                 "the intent")
        return value

    def role_device(self, role: str) -> str:
        """The device a role's workers run on."""
        return self.decode_device if role == "decode" and self.decode_device else self.device

    def _decode_apart(self) -> float:
        """Devices of decode workers on another pool (0 when prefill and decode share the pool)."""
        if self.decode_pool is None or self.decode_parallel is None:
            return 0.0
        d = self.decode_parallel
        return self.replicas * (self.decode_workers or 0) * max(d.tp * d.attention_dp, d.moe_tp * d.ep) * d.pp * d.sp

    def devices_by_type(self) -> dict[str, float]:
        """Devices the allocation takes, per device type (prefill and decode on different types count apart)."""
        if self.decode_device is None or self.decode_parallel is None:
            return {self.device: self.devices}
        decode = self._decode_apart()
        return {self.device: self.devices - decode, self.decode_device: decode}

    def devices_on(self, pool: str) -> float:
        """Devices the allocation takes on one pool."""
        decode = self._decode_apart()
        return (self.devices - decode if self.pool == pool else 0.0) + (decode if self.decode_pool == pool else 0.0)

    def role_view(self, role: str, devices_per_node: int) -> Allocation:
        """The allocation as the workers of one role see it: for decode workers of their own layout (on another
        pool and device type, or beside the prefill worker), that pool, device and layout; otherwise the
        allocation itself."""
        if role != "decode" or self.decode_parallel is None:
            return self
        d = self.decode_parallel
        devices = max(d.tp * d.attention_dp, d.moe_tp * d.ep) * d.pp * d.sp
        return self.model_copy(update={"pool": self.decode_pool or self.pool,
                                       "device": self.decode_device or self.device,
                                       "parallel": d, "devices_per_worker": devices,
                                       "nodes_per_worker": -(-devices // devices_per_node)})


class Quantity(PlanModel):
    value: float = Field(ge=0)
    """The load (finite, 0 or more)."""
    unit: str
    """Unit of `value`, e.g. requests/s."""


class Routing(PlanModel):
    """How the service's requests reach its allocations (`infra.planner.routing`): the router its manifests
    render and the simulator routes with."""

    router: Literal["inference-pool", "http-route", "service"]
    """`inference-pool`: the Inference Extension's endpoint picker (load-aware); `http-route`: a Gateway API
    HTTPRoute over one Service per allocation, split by `weights`; `service`: one ClusterIP Service, even over
    pods."""
    weights: dict[str, int] | None = None
    """For `http-route`: allocation id (`a0`) -> its backendRef weight (relative; 0 to 1,000,000), the
    allocation's planned share of the load in ten-thousandths."""

    @field_validator("weights")
    @classmethod
    def _weights(cls, value: dict[str, int] | None) -> dict[str, int] | None:
        if value is None:
            return None
        for key, w in value.items():
            if not re.fullmatch(r"a\d{1,4}", key):
                raise ValueError(f"{key!r} is not an allocation id (a0, a1, ...)")
            if not 0 <= w <= 1_000_000:
                raise ValueError(f"weight {w} of {key} is outside 0 to 1,000,000 (Gateway API backendRef weight)")
        return dict(sorted(value.items(), key=lambda kv: int(kv[0][1:])))


class ServicePlan(PlanModel):
    """What one service gets."""

    name: Name
    """The service's name (a pipeline's stage: `<pipeline>-<stage>`); it names its directory of manifests."""
    model: str | None
    """The model served (Hugging Face id or catalog name); None for a pipeline's entry."""
    model_id: str | None = None
    """Hugging Face repository the engines load (the catalog's `hf_id`, or the quantized re-upload the intent names),
    served under the service's name."""
    pipeline: str | None = None
    """For a stage of a pipeline: the pipeline service (this entry is named `<pipeline>-<stage>`)."""
    stage: str | None = None
    """The pipeline stage this entry plans, for a model stage planned as a service of its own."""
    kind: str | None = None
    """The stage's kind: llm, vision_encoder, audio_encoder, codec or dit."""

    @property
    def runs_llm_engine(self) -> bool:
        """Served by an LLM engine (rendered and validated as such); the other stages of a pipeline (encoders,
        codecs, diffusion transformers) run on vLLM-Omni from a stage config."""
        return self.kind in (None, "llm")
    objectives: dict[str, float] = {}
    """Objective key (`ttft_p99`: a metric, `_`, a percentile) -> target in milliseconds, from the intent (above
    0, at most a year)."""
    attainment: float | None = Field(default=None, gt=0, le=1)
    """The intent's `slo.attainment`: the share of requests that must be within each metric's loosest percentile
    target at once; planned as `attainment_objectives` and judged when the plan is verified or benchmarked."""
    attainment_objectives: dict[str, float] = {}
    """What the attainment asks of each replica, as percentile objectives (key -> target ms): each metric with a
    per-request bound held to it at percentile 1 - (1 - attainment) / (metrics bounded); predicted in each
    allocation and judged by verification like the stated objectives."""
    confidence: float | None = Field(default=None, gt=0, lt=1)
    """The intent's `slo.confidence`: each objective was planned to hold with this probability given the
    performance model's error band (the predictions meet the targets over the band's ratio at that quantile)."""
    availability: dict[str, Any] = {}
    """The intent's availability (min_replicas, zones, headroom) as written there."""
    workload: dict[str, Any] = {}
    """The intent's workload for this service, as written there (readable quantities; trace paths relative to
    the intent), so that verification drives the same load the plan was made for."""
    demand: Quantity
    """Peak load from the intent."""
    required: Quantity
    """Capacity the plan had to provide: demand plus the intent's headroom."""
    capacity: Quantity
    """Requests per second the allocations carry together within the objectives."""
    headroom: float = Field(ge=-1)
    """Capacity over the peak demand, less 1 (finite, at least -1)."""
    served: float = Field(ge=0, le=1)
    """Share of the peak demand the plan carries within the objectives (below 1 only for the goodput
    objective)."""
    allocations: list[Allocation]
    """Groups of identical replicas, one per shape chosen (device, framework, layout)."""
    cost_per_hour: float = Field(ge=0)
    """Dollars an hour (finite, 0 or more)."""
    cost_per_million_tokens: float | None = Field(default=None, ge=0)
    """Dollars per million output tokens at the peak (finite, 0 or more)."""
    cost_per_request: float | None = Field(default=None, ge=0)
    """Dollars per request at the peak (finite, 0 or more)."""
    routing: Routing
    """The router in front of the allocations; a plan that states none gets the one its cluster's custom
    resources give (`infra.planner.routing.fill_routing`)."""

    @field_validator("objectives", "attainment_objectives")
    @classmethod
    def _objectives(cls, value: dict[str, float]) -> dict[str, float]:
        return _objective_targets(value)


class Handoff(PlanModel):
    """How a stage's output reaches the next stage's replicas (`infra.perf.handoff`)."""

    link: Literal["device", "node", "switch", "zone"]
    """The path: one device, one node (or NVLink/HCCS domain), the zone's network, or across zones."""
    bandwidth_gbs: float = Field(gt=0, le=MAX_BANDWIDTH_GBS)
    """GB/s one transfer gets on that link (above 0, at most 1e6)."""
    first_ms: float = Field(ge=0)
    """Time to move the stage's first output unit to the next stage (finite, 0 or more)."""
    total_ms: float = Field(ge=0)
    """Time to move all of one request's output to the next stage (finite, 0 or more)."""


class PipelineStage(PlanModel):
    name: str
    """The stage's name in the intent."""
    kind: str
    """The stage's kind: llm, vision_encoder, audio_encoder, codec, dit or cpu."""
    after: list[str] | None = None
    """The stages whose output this one consumes (unset: the stage listed before it; empty: none)."""
    unit: str | None = None
    """The service entry that plans this stage (none for CPU stages)."""
    streams: bool
    """Hands its output on as it produces it (the next stage starts at its first output)."""
    budget_ms: dict[str, float] = {}
    """The share of the pipeline's objectives this stage was planned against (each above 0, at most a year)."""
    cpu_cores: int | None = Field(default=None, ge=1, le=MAX_EXACT)
    """Cores a CPU stage needs at peak (1 to 2^53)."""
    work: dict[str, Any] = {}
    """The stage's work per request as the intent writes it (validates as `infra.intent.models.StageWork`), so
    that verification can time the stage from the plan alone."""
    pool: str | None = None
    """CPU pool a CPU stage runs on (one of `spec.cluster.cpu_pools`); unset when the profile has none and the
    cores are requested on any node."""
    nodes: int | None = Field(default=None, ge=1, le=MAX_EXACT)
    """Nodes of `pool` the CPU stage takes: its cores over the usable cores of one node, rounded up (1 to
    2^53)."""
    cost_per_hour: float | None = Field(default=None, ge=0)
    """What a CPU stage's nodes cost (model stages are priced in their service entries; finite, 0 or more)."""
    handoff: Handoff | None = None
    """The hand-off to the next stage as planned (absent for the last stage and stages that declare none)."""
    colocated_with: str | None = None
    """The next stage's name when the two are placed on the same nodes (their replicas packed together)."""
    image: str | None = None
    """Container image of a CPU stage (its preprocessing server); without one no workload is rendered for it."""
    command: list[str] | None = None
    """Command of that container (the image's entrypoint when unset)."""
    port: int | None = Field(default=None, ge=1, le=65535)
    """Port that container takes the stage's input on (1 to 65535)."""

    @field_validator("budget_ms")
    @classmethod
    def _budgets(cls, value: dict[str, float]) -> dict[str, float]:
        return _objective_targets(value)


class PipelinePlan(PlanModel):
    """A pipeline end to end."""

    service: str
    """The intent's service the pipeline serves."""
    stages: list[PipelineStage]
    """The stages in pipeline order, each with where it runs and its predicted latency."""
    objectives: dict[str, Objective]
    """The service's objectives (and stages' first-output objectives) with the stages' predictions summed along
    the pipeline."""
    cost_per_hour: float = Field(ge=0)
    """Every stage's cost, CPU stages included (finite, 0 or more)."""
    cost_per_request: float | None = Field(default=None, ge=0)
    """Dollars per request at the peak (finite, 0 or more)."""

    @field_validator("objectives")
    @classmethod
    def _objectives(cls, value: dict[str, Objective]) -> dict[str, Objective]:
        _objective_targets({k: v.target_ms for k, v in value.items()}, stages=True)
        return value
    notes: list[str] = []
    """Hand-off and co-location decisions, and where co-location was wanted but impossible."""

    def inputs(self) -> list[list[int]]:
        """Per stage, the indices of the stages it consumes."""

        return stage_inputs([st.name for st in self.stages], [st.after for st in self.stages])

    def consumers(self) -> list[int | None]:
        """Per stage, the index of the stage it hands on to (None for the last)."""

        return stage_consumers(self.inputs())


class Solver(PlanModel):
    engine: Literal["cp-sat"]
    """The constraint solver (OR-Tools CP-SAT)."""
    objective: Literal["cost", "goodput"]
    """`cost`: the cheapest plan meeting all demand; `goodput`: the most demand served, then the cheapest."""
    status: str
    """The solver's status: OPTIMAL or FEASIBLE."""
    gap: float = Field(ge=0)
    """Relative gap between the plan's cost and the solver's bound (0 when optimal; finite)."""
    candidates: int = Field(ge=0, le=MAX_EXACT)
    """Replica shapes the solver chose among (0 to 2^53)."""
    considered: int = Field(ge=0, le=MAX_EXACT)
    """Shapes enumerated before pruning (0 to 2^53)."""


class Cost(PlanModel):
    per_hour: float = Field(ge=0)
    """Dollars an hour of the whole plan (finite, 0 or more)."""
    by_pool: dict[str, float]
    """Pool -> dollars an hour (each finite, 0 or more)."""

    @field_validator("by_pool")
    @classmethod
    def _by_pool(cls, value: dict[str, float]) -> dict[str, float]:
        for pool, cost in value.items():
            if cost < 0:
                raise ValueError(f"{shown(pool)}: {cost:g} $/h is below 0; re-plan the intent")
        return value


class PartlyIdle(PlanModel):
    node: str
    """The node's name (or its index in the pool)."""
    device: int = Field(ge=0, lt=MAX_DEVICES_PER_NODE)
    """Index of the device on its node (0 to 1023)."""
    idle_fraction: float = Field(ge=0, le=1)
    """Share of the device no replica holds (0 to 1)."""


class PoolUse(PlanModel):
    """How much of a pool the plan takes."""

    pool: str
    """The cluster pool."""
    device: str
    """Catalog name of the pool's device."""
    devices: int = Field(ge=0, le=MAX_DEVICES)
    """Devices holding at least one worker or slice (at most a pool's devices)."""
    nodes: int = Field(ge=0, le=MAX_NODES)
    """Nodes holding them (at most 100,000)."""
    allocated: float = Field(ge=0, le=MAX_DEVICES)
    """Device-equivalents allocated to replicas (slices count their share)."""
    idle_fraction: float = Field(ge=0, le=1)
    """Share of the devices used that no replica holds (parts of devices left over by slices; 0 to 1)."""
    partly_idle: list[PartlyIdle] = []
    """Every device used that slices leave partly empty, with its idle share; the other devices used are wholly
    allocated."""
    busy_at_peak: float | None = Field(default=None, ge=0)
    """Load at peak over the capacity allocated on this pool's devices (device-weighted): the share of what the
    pool's replicas can carry within the objectives that the peak demand uses."""


class Alternative(PlanModel):
    """The best plan of another kind (other device, framework, or serving mode)."""

    label: str
    """What kind of plan it is, e.g. `disagg only` or `H20 only`."""
    cost_per_hour: float = Field(ge=0)
    """Dollars an hour (finite, 0 or more)."""
    delta_per_hour: float
    """Dollars an hour more than the chosen plan (finite)."""
    uses: list[str]
    """Its replicas, as `N x DEVICES FRAMEWORK PRECISION LAYOUT`."""


class PoolResources(PlanModel):
    """How pods of this pool request devices: the cluster's resource names for the pool's vendor (Kubernetes
    resource names, as the profile's conventions)."""

    count: ResourceName | Literal[""]
    """Resource for whole devices; empty for CPU devices."""
    shared_count: ResourceName | None = None
    """Resource for a shared slice when it differs from `count` (e.g. `metax-tech.com/sgpu`)."""
    memory: ResourceName | None = None
    """Resource for a memory slice, e.g. `nvidia.com/gpumem`; absent means no fractional sharing."""
    memory_unit: int | None = Field(default=None, ge=1, le=MAX_EXACT)
    """Bytes per unit of `memory` (1 to 2^53)."""
    cores: ResourceName | None = None
    """Resource for a compute share in percent, e.g. `nvidia.com/gpucores`."""


class PoolNic(PlanModel):
    name: str
    """Interface or RDMA device name as the node reports it, e.g. `mlx5_0`."""
    kind: str
    """Transport: infiniband, roce, ethernet or efa."""
    bandwidth_gbps: float = Field(gt=0, le=8 * MAX_BANDWIDTH_GBS)
    """Gb/s (above 0, at most 8e6)."""
    pcie_root: str | None = None
    """PCIe root complex the NIC hangs off, to pair it with the device on the same root."""


class ClusterPool(PlanModel):
    """One pool of the cluster profile, with what rendering and validation need to place pods on it."""

    name: Name
    """The pool's name in the cluster profile."""
    device: str
    """Catalog name of the pool's device."""
    vendor: Vendor
    """The device's vendor, as the catalog names it."""
    nodes: int = Field(ge=1, le=MAX_NODES)
    """Nodes of the pool (1 to 100,000, as a profile)."""
    devices_per_node: int = Field(ge=1, le=MAX_DEVICES_PER_NODE)
    """Devices per node (1 to 1024, as a profile)."""
    device_memory_gb: float = Field(gt=0, le=MAX_EXACT)
    """Memory per device the scheduler hands out (the pool's allocatable figure, else the catalog's; above 0)."""
    node_selector: dict[LabelKey, LabelValue] = {}
    """Labels that select the pool's nodes (Kubernetes label keys and values, as the profile)."""
    node_names: list[Subdomain] = []
    """Nodes listed by name in the profile (empty when the pool gives a count)."""
    zone: LabelValue | None = None
    """The pool's zone (topology.kubernetes.io/zone), when the profile gives one."""
    switch: LabelValue | None = None
    """The network switch the pool's nodes hang off, when the profile gives one."""
    scale_up_domain: LabelValue | None = None
    """The scale-up domain (an NVL72 rack, a super-node) the pool's nodes share, when given."""
    nics: list[PoolNic] = []
    """The nodes' network interfaces."""
    resources: PoolResources
    """The Kubernetes resource names pods of this pool request devices by."""
    spot: bool = False
    """Whether the nodes are spot (preemptible) capacity."""
    multi_node: bool = True
    """Whether one replica may span several nodes of this pool."""


class ClusterCpuPool(PlanModel):
    """A pool of nodes without accelerators, where the CPU stages of pipelines run."""

    name: Name
    """The pool's name in the cluster profile."""
    nodes: int = Field(ge=1, le=MAX_NODES)
    """Nodes of the pool (1 to 100,000, as a profile)."""
    cores_per_node: int = Field(ge=1, le=1_000_000)
    """Cores per node (1 to a million, as a profile)."""
    usable_cores_per_node: int = Field(ge=0, le=1_000_000)
    """Cores per node less those reserved for the system."""
    memory_gb_per_node: float = Field(ge=0, le=MAX_EXACT)
    """Memory per node in GB."""
    price_per_node_hour: float = Field(ge=0, le=MAX_MONEY_PER_HOUR)
    """Dollars an hour per node (0 to $1e6, as a profile)."""
    node_selector: dict[LabelKey, LabelValue] = {}
    """Node labels that select the pool's nodes."""
    node_names: list[Subdomain] = []
    """The pool's nodes by name, when the profile lists them."""
    zone: LabelValue | None = None
    """The pool's zone, when the profile gives one."""
    switch: LabelValue | None = None
    """The network switch the pool's nodes hang off, when the profile gives one."""
    nics: list[PoolNic] = []
    """The nodes' network interfaces."""
    spot: bool = False
    """Whether the nodes are spot (preemptible) capacity."""


class ClusterPlan(PlanModel):
    """The cluster the plan is for: the profile's conventions and pools, so that a plan renders on its own."""

    name: Name
    """The cluster profile's name; it names each service's overlay directory."""
    namespace: Name
    """The Kubernetes namespace the manifests go to."""
    scheduler: Subdomain
    """The scheduler pods name (default-scheduler, volcano, ...)."""
    crds: dict[str, str] = {}
    """Installed custom resources (profile key, e.g. `leaderworkerset`) -> served API version."""
    model_cache: Subdomain | None = None
    """PersistentVolumeClaim with model weights."""
    monitoring_labels: dict[LabelKey, LabelValue] | None = None
    """Labels the Prometheus Operator's selectors look for on the rules and monitors rendered for each service."""
    pools: list[ClusterPool]
    """The cluster's device pools as the plan used them."""
    cpu_pools: list[ClusterCpuPool] = []
    """The profile's pools of CPU-only nodes (for the CPU stages of pipelines)."""

    @model_validator(mode="after")
    def _unique_pools(self) -> ClusterPlan:
        require_unique([p.name for p in self.pools] + [p.name for p in self.cpu_pools], "pool")
        return self


class MeasuredCalibration(PlanModel):
    """The user's calibration a plan was made with (`infra calibrate`)."""

    name: str
    """The calibration's metadata.name."""
    path: str
    """The file as given."""
    sha256: str
    """Fingerprint of the calibration file's content."""
    points: int = Field(ge=0, le=MAX_EXACT)
    """Measured load points it learned from."""


class Calibration(PlanModel):
    fitted: str | None
    """When the packaged calibration was fitted (absent when never)."""
    data_sha256: str | None
    """Fingerprint of the measurements the packaged calibration was fitted on."""
    measured: MeasuredCalibration | None = None
    """The user's calibration on top of the packaged one, when the plan was made with one."""


class Change(PlanModel):
    """One accepted change to the intent this plan was made from."""

    path: str
    """Field of the intent, e.g. `spec.services[0].slo.ttft.p99`."""
    before: Any = None
    """Value before the change (absent when the field was not written)."""
    after: Any
    """Value after the change."""
    proposed_by: str
    """`user`, or the language model that proposed it (`llm: MODEL at HOST`)."""
    accepted_by: Literal["user", "user (--yes)"]
    """Who accepted it: at a confirmation prompt, or in advance with `--yes`."""
    rationale: str | None = None
    """Why it was proposed, as the proposer put it."""
    prompt_sha256: str | None = None
    """Fingerprint of the prompts behind a model's proposal."""

    @model_serializer(mode="wrap")
    def _after_even_when_none(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        # A plan leaves out what has no value, but a change that removed one says so: `after` is required.
        data = handler(self)
        if "after" in data:
            return data
        return {name: data[name] if name != "after" else None for name in type(self).model_fields
                if name in data or name == "after"}


class Provenance(PlanModel):
    intent: str
    """The intent file as given to `infra plan`."""
    catalog: str
    """Fingerprint of the catalog the plan was made with."""
    calibration: Calibration
    """The calibration behind every prediction: the packaged one and a user's, if any."""
    changes: list[Change] = []
    """Accepted changes to the intent behind this plan, oldest first (absent for a plan of an intent as
    written)."""


class VerifiedObjective(PlanModel):
    """One objective as verification measured it."""

    key: str
    """The objective, as `METRIC_PERCENTILE` (e.g. ttft_p99)."""
    target_ms: float = Field(gt=0, le=MAX_MS)
    """The objective's target (above 0, at most a year)."""
    predicted_ms: float | None = Field(default=None, ge=0)
    """What the plan predicted (the slowest allocation's prediction at its planned load; finite)."""
    measured_ms: float | None = Field(default=None, ge=0)
    """The measured percentile; None when there was no sample or failed requests put it beyond any value."""
    measured_ms_note: str | None = None
    """Why `measured_ms` is null although there were samples (failed requests reach the percentile)."""
    ci_ms: list[float | None] | None = Field(default=None, max_length=2)
    """95% bootstrap interval of the measured percentile (None for an unbounded end)."""
    ci_ms_note: str | None = None
    """Why an end of `ci_ms` is null."""
    n: int = Field(ge=0, le=MAX_EXACT)
    """Samples measured."""
    verdict: Literal["pass", "fail", "inconclusive"]
    """pass, fail, or inconclusive (too few samples to tell)."""
    reason: str
    """Why the verdict, in words."""


class VerifiedService(PlanModel):
    service: str
    """The service verified."""
    verdict: Literal["pass", "fail", "inconclusive"]
    """pass when every objective passed, fail when one failed, else inconclusive."""
    objectives: list[VerifiedObjective]
    """Each objective as measured."""
    attainment: float = Field(ge=0, le=1)
    """Requests within each metric's loosest percentile target at once, over all requests (failed ones
    included)."""
    attainment_target: float | None = Field(default=None, gt=0, le=1)
    """The intent's attainment, when it states one."""
    attainment_ci: list[float] | None = Field(default=None, min_length=2, max_length=2)
    """95% Wilson interval of the attainment."""
    attainment_verdict: Literal["pass", "fail", "inconclusive"] | None = None
    """pass: the interval lies at or above the target; fail: wholly below it; inconclusive: it holds the target."""
    goodput_rps: float = Field(ge=0, le=MAX_LOAD)
    """Requests a second meeting every bound."""
    failed: int = Field(ge=0, le=MAX_EXACT)
    """Requests that failed."""
    notes: list[str] = []
    """What the measurement could not show or left out."""


class VerifiedStage(PlanModel):
    """One stage of a pipeline as the simulation ran it."""

    name: str
    """The stage's name."""
    kind: str
    """The stage's kind."""
    servers: int = Field(ge=0, le=MAX_EXACT)
    """What serves it in parallel: engines (LLM stages), replicas (encoders, codecs, DiTs) or cores (CPU)."""
    utilisation: float = Field(ge=0, le=MAX_RATIO)
    """Busy time over servers x the run's span."""
    wait_ms: dict[str, float] = {}
    """Time a request queues for a free server before its work starts (mean, p99); for LLM stages the queueing
    is inside the stage's TTFT."""
    bubble_ms: dict[str, float]
    """Time a request spends in this stage waiting on the stage before it for more input (mean, p99)."""

    @field_validator("wait_ms", "bubble_ms")
    @classmethod
    def _times(cls, value: dict[str, float]) -> dict[str, float]:
        for key, ms in value.items():
            if ms < 0:
                raise ValueError(f"{shown(key)}: {ms:g} ms is below 0; re-plan the intent")
        return value
    bubble_share: float = Field(ge=0, le=1)
    """Bubble time over all the time requests spend in this stage (0 to 1)."""


class VerifiedPipeline(PlanModel):
    """A pipeline simulated end to end: its objectives from arrival to the last stage, and each stage's load."""

    service: str
    """The pipeline's service."""
    verdict: Literal["pass", "fail", "inconclusive"]
    """pass when every objective passed, fail when one failed, else inconclusive."""
    objectives: list[VerifiedObjective]
    """The pipeline's objectives as measured end to end."""
    failed: int = Field(ge=0, le=MAX_EXACT)
    """Requests that failed in some stage."""
    stages: list[VerifiedStage]
    """Each stage as measured."""
    notes: list[str] = []
    """What the measurement could not show or left out."""


class Correction(PlanModel):
    """How one objective was tightened for scoring in the next round: target x scale."""

    service: str
    """The service whose objective was tightened."""
    objective: str
    """The objective tightened, as `METRIC_PERCENTILE`."""
    scale: float = Field(gt=0, le=MAX_RATIO)
    """Factor on the target (above 0)."""
    measured_over_predicted: float | None = Field(default=None, ge=0, le=MAX_RATIO)
    """How far the measurement exceeded the prediction (absent when not measured)."""


class VerificationRound(PlanModel):
    round: int = Field(ge=0, le=MAX_EXACT)
    """The round's number, from 1."""
    verdict: Literal["pass", "fail", "inconclusive"]
    """pass, fail or inconclusive, over every service of the round."""
    services: list[VerifiedService]
    """Each service as the round measured it."""
    corrections: list[Correction] = []
    """Corrections derived from this round and used to plan the next one."""
    pipelines: list[VerifiedPipeline] = []
    """Pipelines end to end (their stages are judged among `services` on their own budgets)."""
    skipped: list[str] = []
    """Services not simulated, and why."""
    outcome: str | None = None
    """Why the loop stopped after this round, when it stopped short of a pass."""


class Verification(PlanModel):
    """The chosen plan simulated under the intent's peak workload, and the re-planning rounds it took."""

    method: Literal["simulation"]
    """How the plan was measured: simulation of its replicas under the intent's workload."""
    seed: int
    """The simulation's seed (`--seed`, any integer)."""
    requests: int = Field(ge=1, le=MAX_EXACT)
    """Requests simulated per service and round."""
    plan_round: int = Field(ge=0, le=MAX_EXACT)
    """The round whose plan this is: the first that did not fail, else the one that missed least."""
    verdict: Literal["pass", "fail", "inconclusive"]
    """That round's verdict."""
    rounds: list[VerificationRound]
    """Each round of measuring and re-planning, in order."""


class PlanSpec(PlanModel):
    fingerprint: str
    """sha256 over the intent, cluster, catalog and calibration: the same fingerprint means the same inputs."""
    solver: Solver
    """What the solver did."""
    cluster: ClusterPlan
    """The cluster the plan is for, as the profile gave it."""
    cost: Cost
    """What the plan costs an hour, in total and by pool."""
    services: list[ServicePlan] = Field(min_length=1)
    """Every service of the intent (a pipeline's stages each as one), at least one."""
    pipelines: list[PipelinePlan] = []
    """The pipelines of stages, each with its stages' sites and latency."""
    pools_used: list[PoolUse] = []
    """Each pool the plan uses: devices, nodes, and how much of them stays idle."""
    binding: list[str]
    """Constraints the plan runs up against (full pools, budgets nearly spent, minimum replicas, zones)."""
    alternatives: list[Alternative]
    """The best plans of other kinds, cheapest first."""
    assumptions: list[str]
    """What the predictions assume, in words."""
    provenance: Provenance
    """What the plan was made from: the intent, the catalog, the calibration, accepted changes."""
    verification: Verification | None = None
    """How the plan was verified, when it was."""


class Metadata(PlanModel):
    name: Name
    """The intent's name."""


class DeploymentPlan(PlanModel):
    """A solved intent (`kind: DeploymentPlan`)."""

    api_version: Literal["infra.dev/v1alpha1"] = Field(alias="apiVersion")
    """The plan format's version: infra.dev/v1alpha1."""
    kind: Literal["DeploymentPlan"]
    """Always DeploymentPlan."""
    metadata: Metadata
    """The plan's name (the intent's)."""
    spec: PlanSpec
    """The plan."""
    _source: Any = PrivateAttr(default=None)
    """The source map of the file `load_plan` read the plan from (None for a plan made in memory)."""

    @model_validator(mode="before")
    @classmethod
    def _routing(cls, data: Any) -> Any:

        return fill_routing(data)

    def with_spec(self, **fields: Any) -> DeploymentPlan:
        """The plan with these fields of its spec replaced (validated values: a section the plan is given later,
        such as its verification or its provenance's changes)."""
        return self.model_copy(update={"spec": self.spec.model_copy(update=fields)})

    def document(self) -> dict[str, Any]:
        """The plan as plan.yaml holds it: JSON types, the file's key names, fields without a value left out."""
        return self.model_dump(mode="json", by_alias=True, exclude_none=True)

    def locate(self, path: tuple[str | int, ...]) -> Location:
        """Where a field of the plan is: file, line and column when it was read from a file, else its path."""
        if self._source is not None:
            return self._source.locate(path)

        return Location(path=dotted(path))


def load_plan(path: str | Path) -> DeploymentPlan:
    """Read and validate a plan.yaml; problems name the file, line and field."""

    text = read_text(Path(path), "plan")
    data, smap = load_yaml(text, str(path))
    try:
        plan = DeploymentPlan.model_validate(data)
    except PydanticValidationError as exc:
        raise IntentError(problems_from_pydantic(exc, DeploymentPlan, data, smap)) from None
    problems = _copies_and_references(plan, data, smap)
    if problems:
        raise IntentError(problems)
    plan._source = smap
    return plan


def allocation_problems(plan: DeploymentPlan, locate: Any) -> list[Problem]:
    """Allocations whose parts contradict each other: a pool the cluster lacks, engines that are not the mode's
    roles, a disaggregated allocation without its workers, devices that do not split over the worker's nodes.
    `locate(path)` gives the Location of a field path."""
    problems: list[Problem] = []
    pools = {p.name for p in plan.spec.cluster.pools}
    for si, svc in enumerate(plan.spec.services):
        for ai, a in enumerate(svc.allocations):
            aw = ("spec", "services", si, "allocations", ai)
            for field_name in ("pool", "decode_pool"):
                name = getattr(a, field_name)
                if name is not None and name not in pools:
                    problems.append(Problem(f"allocation uses pool {shown(name)}, which is not in spec.cluster.pools "
                                            f"({', '.join(sorted(pools))})", locate((*aw, field_name)),
                                            "name a pool listed under spec.cluster.pools, or re-plan"))
            roles = sorted(a.engines)
            want = ["agg"] if a.mode == "agg" else ["decode", "prefill"]
            if svc.runs_llm_engine and roles != want:
                problems.append(Problem(f"mode {a.mode} needs engines for {', '.join(want)}, found "
                                        f"{', '.join(shown(r) for r in roles) or 'none'}", locate((*aw, "engines")),
                                        "give one engine entry per role, or re-plan"))
            if a.mode == "disagg" and not (a.prefill_workers and a.decode_workers):
                problems.append(Problem("a disaggregated allocation needs prefill_workers and decode_workers",
                                        locate(aw), "set both to 1 or more, or re-plan"))
            if a.devices_per_worker % a.nodes_per_worker:
                problems.append(Problem(f"devices_per_worker {a.devices_per_worker} does not split evenly over "
                                        f"nodes_per_worker {a.nodes_per_worker}", locate((*aw, "devices_per_worker")),
                                        "make devices_per_worker a multiple of nodes_per_worker, or re-plan"))
        problems += _routing_problems(svc, ("spec", "services", si, "routing"), locate)
    return problems


def _routing_problems(svc: ServicePlan, where: tuple[str | int, ...], locate: Any) -> list[Problem]:
    """Route weights that name no aggregated allocation (an HTTPRoute sends requests only to those), or that
    give none any requests, or that a router other than an HTTPRoute would ignore."""
    r = svc.routing
    weights = r.weights or {}
    if r.router != "http-route":
        if r.weights is not None:
            return [Problem(f"routing.weights apply to an http-route, not to router {r.router}",
                            locate((*where, "weights")), "remove the weights, or re-plan")]
        return []
    ids = [f"a{i}" for i, a in enumerate(svc.allocations) if a.mode == "agg"]
    out = [Problem(f"routing.weights name {shown(key)}, which is no aggregated allocation of the service "
                   f"({', '.join(ids) or 'none'})", locate((*where, "weights", key)),
                   "weigh only the service's aggregated allocations, or re-plan")
           for key in weights if key not in ids]
    if not any(weights.get(key, 0) for key in ids):
        out.append(Problem("routing.weights give no allocation any requests", locate((*where, "weights")),
                           "give at least one aggregated allocation a weight above 0, or re-plan"))
    return out


def _copies_and_references(plan: DeploymentPlan, data: dict[str, Any], smap: Any) -> list[Problem]:
    """What the plan copies from its intent, validated as the intent's models (a service's workload and
    availability, a stage's work), and the services its pipeline stages name; each problem located in the plan
    file."""

    def copied(model: type[BaseModel], value: dict[str, Any], path: tuple[str | int, ...]) -> list[Problem]:
        try:
            model.model_validate(value)
            return []
        except PydanticValidationError as exc:
            return problems_from_pydantic(exc, model, value, smap.within(path))

    problems: list[Problem] = []
    for i, svc in enumerate(plan.spec.services):
        if svc.workload:
            problems += copied(Workload, svc.workload, ("spec", "services", i, "workload"))
        if svc.availability:
            problems += copied(Availability, svc.availability, ("spec", "services", i, "availability"))
    problems += allocation_problems(plan, smap.locate)
    services = [s.name for s in plan.spec.services]
    for i, pipe in enumerate(plan.spec.pipelines):
        for j, stage in enumerate(pipe.stages):
            where = ("spec", "pipelines", i, "stages", j)
            if stage.work:
                problems += copied(StageWork, stage.work, (*where, "work"))
            if stage.unit is None and stage.kind != "cpu":
                problems.append(Problem(
                    f"stage {shown(stage.name)} ({shown(stage.kind)}) names no unit, the service entry that plans it",
                    smap.locate(where), "add `unit: <pipeline>-<stage>`, or re-plan the intent"))
            elif stage.unit is not None and stage.unit not in services:
                problems.append(Problem(
                    f"stage {shown(stage.name)} is served by {shown(stage.unit)}, which is none of the plan's "
                    "services", smap.locate((*where, "unit")),
                    "name the service entry that plans the stage (`<pipeline>-<stage>`), or re-plan the intent"))
    return problems
