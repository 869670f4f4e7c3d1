"""The DeploymentPlan contract (`plan.yaml`): what the planner decided, why, and from what.

Only the planner creates a plan; rendering, verification and GitOps read it through `load_plan`, so the file is
validated in both directions (a plan that does not fit this model is never written, and a hand-edited one that
breaks it is refused with its line).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field
from pydantic import ValidationError as PydanticValidationError

from infra.errors import IntentError
from infra.intent.base import Name


class PlanModel(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, use_attribute_docstrings=True)


class Layout(PlanModel):
    """Parallel layout of one worker."""

    tp: int
    pp: int
    ep: int
    moe_tp: int
    attention_dp: int
    sp: int = 1
    """Sequence parallel degree (diffusion transformers)."""


class Objective(PlanModel):
    """One latency objective at one percentile, as predicted at the planned load."""

    target_ms: float
    predicted_ms: float
    margin: float
    """1 - predicted / target: the share of the target left unused (negative would mean missed)."""
    held_out: float | None = None
    """Share of the held-out measurements (models left out of the calibration fit) that came in within this margin
    of their prediction: how often a margin this size has held for a model the fit never saw. Read off the
    committed error band of the mode, between 5% and 95%; None where no band applies (E2E, pipeline stages, devices
    whose factors are borrowed)."""


class Engine(PlanModel):
    """Engine settings of one worker role, as the prediction assumed them; rendered into the engine's arguments."""

    max_num_seqs: int = Field(ge=1)
    """Most sequences one attention group runs at once (vLLM `--max-num-seqs`, SGLang `--max-running-requests`):
    a quarter above the batch the prediction holds at capacity, within what the KV cache holds at the mean
    request length."""
    max_num_batched_tokens: int = Field(ge=1)
    """Tokens one step may process (the chunked-prefill budget)."""
    max_model_len: int = Field(ge=1)
    """Longest request in tokens: the service's max_context (else the model's), never more than the KV cache
    holds, so the engine starts."""
    memory_utilization: float = Field(gt=0, le=1)
    """Fraction of device memory the engine may take (vLLM `--gpu-memory-utilization`)."""
    kv_cache_dtype: Literal["auto", "fp8"]
    """`fp8` halves the KV cache; `auto` keeps the model's dtype."""
    quantization: str | None = None
    """Weight precision when it differs from the published checkpoint's (e.g. `fp8` online quantisation)."""
    kv_cache_tokens: int = Field(ge=0)
    """Predicted KV-cache capacity per attention group, in tokens."""
    chunked_prefill: bool
    prefix_caching: bool


class Allocation(PlanModel):
    """Replicas of one shape on one pool."""

    pool: str
    device: str
    framework: str
    precision: str
    mode: Literal["agg", "disagg"]
    parallel: Layout
    prefill_workers: int | None = None
    decode_workers: int | None = None
    decode_pool: str | None = None
    """Pool of the decode workers when it is not `pool` (prefill and decode on different device types)."""
    decode_device: str | None = None
    decode_parallel: Layout | None = None
    """Layout of each decode worker when it differs from `parallel`."""
    share: float | None = None
    """Fraction of a device per replica when devices are sliced (HAMi)."""
    devices_per_worker: int = Field(ge=1)
    """Devices one worker (one engine instance) spans: tp x attention_dp (or moe_tp x ep) x pp."""
    nodes_per_worker: int = Field(ge=1)
    """Nodes one worker spans; above 1 the worker is a leader with followers (LeaderWorkerSet)."""
    engines: dict[str, Engine]
    """Role (`agg`, or `prefill` and `decode`) -> engine settings."""
    nodes_used: int = Field(ge=1)
    """Nodes the allocation's workers occupy (shared with other allocations where they fit together)."""
    placement: dict[str, int] | None = None
    """Node -> workers, when the profile lists its nodes by name."""
    replicas: int = Field(ge=1)
    devices_per_replica: float
    devices: float
    capacity_per_replica: float
    load_per_replica: float
    cost_per_hour: float
    predicted: dict[str, Objective]
    """Objective key (`ttft_p99`) -> prediction at this allocation's share of the peak load."""
    calibrated: bool
    calibration_source: str
    measured: str | None = None
    """What the user's calibration corrected in these figures (the level matched, its measured points and their
    dates); absent where they rest on the packaged prior alone."""

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
        """The allocation as the workers of one role see it: for decode workers on another pool (prefill and decode
        on different device types), that pool, device and layout; otherwise the allocation itself."""
        if role != "decode" or self.decode_pool is None or self.decode_parallel is None:
            return self
        d = self.decode_parallel
        devices = max(d.tp * d.attention_dp, d.moe_tp * d.ep) * d.pp * d.sp
        return self.model_copy(update={"pool": self.decode_pool, "device": self.decode_device or self.device,
                                       "parallel": d, "devices_per_worker": devices,
                                       "nodes_per_worker": -(-devices // devices_per_node)})


class Quantity(PlanModel):
    value: float
    unit: str


class ServicePlan(PlanModel):
    """What one service gets."""

    name: Name
    """The service's name (a pipeline's stage: `<pipeline>-<stage>`); it names its directory of manifests."""
    model: str | None
    model_id: str | None = None
    """Hugging Face repository the engines load (the catalog's `hf_id`, or the quantized re-upload the intent names),
    served under the service's name."""
    pipeline: str | None = None
    """For a stage of a pipeline: the pipeline service (this entry is named `<pipeline>-<stage>`)."""
    stage: str | None = None
    kind: str | None = None
    """The stage's kind: llm, vision_encoder, audio_encoder, codec or dit."""

    @property
    def runs_llm_engine(self) -> bool:
        """Served by an LLM engine (rendered and validated as such); the other stages of a pipeline (encoders,
        codecs, diffusion transformers) run on vLLM-Omni from a stage config."""
        return self.kind in (None, "llm")
    objectives: dict[str, float] = {}
    """Objective key (`ttft_p99`) -> target in milliseconds, from the intent."""
    confidence: float | None = None
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
    headroom: float
    served: float
    """Share of the peak demand the plan carries within the objectives (below 1 only for the goodput
    objective)."""
    allocations: list[Allocation]
    cost_per_hour: float
    cost_per_million_tokens: float | None = None
    cost_per_request: float | None = None


class Handoff(PlanModel):
    """How a stage's output reaches the next stage's replicas (`infra.perf.handoff`)."""

    link: Literal["device", "node", "switch", "zone"]
    """The path: one device, one node (or NVLink/HCCS domain), the zone's network, or across zones."""
    bandwidth_gbs: float
    """GB/s one transfer gets on that link."""
    first_ms: float
    """Time to move the stage's first output unit to the next stage."""
    total_ms: float
    """Time to move all of one request's output to the next stage."""


class PipelineStage(PlanModel):
    name: str
    kind: str
    after: list[str] | None = None
    """The stages whose output this one consumes (unset: the stage listed before it; empty: none)."""
    unit: str | None = None
    """The service entry that plans this stage (none for CPU stages)."""
    streams: bool
    """Hands its output on as it produces it (the next stage starts at its first output)."""
    budget_ms: dict[str, float] = {}
    """The share of the pipeline's objectives this stage was planned against."""
    cpu_cores: int | None = None
    """Cores a CPU stage needs at peak."""
    work: dict[str, Any] = {}
    """The stage's work per request as the intent writes it (validates as `infra.intent.models.StageWork`), so
    that verification can time the stage from the plan alone."""
    pool: str | None = None
    """CPU pool a CPU stage runs on (one of `spec.cluster.cpu_pools`); unset when the profile has none and the
    cores are requested on any node."""
    nodes: int | None = None
    """Nodes of `pool` the CPU stage takes: its cores over the usable cores of one node, rounded up."""
    cost_per_hour: float | None = None
    """What a CPU stage's nodes cost (model stages are priced in their service entries)."""
    handoff: Handoff | None = None
    """The hand-off to the next stage as planned (absent for the last stage and stages that declare none)."""
    colocated_with: str | None = None
    """The next stage's name when the two are placed on the same nodes (their replicas packed together)."""
    image: str | None = None
    """Container image of a CPU stage (its preprocessing server); without one no workload is rendered for it."""
    command: list[str] | None = None
    """Command of that container (the image's entrypoint when unset)."""
    port: int | None = None
    """Port that container takes the stage's input on."""


class PipelinePlan(PlanModel):
    """A pipeline end to end."""

    service: str
    stages: list[PipelineStage]
    objectives: dict[str, Objective]
    """The service's objectives (and stages' first-output objectives) with the stages' predictions summed along
    the pipeline."""
    cost_per_hour: float
    """Every stage's cost, CPU stages included."""
    cost_per_request: float | None = None
    notes: list[str] = []
    """Hand-off and co-location decisions, and where co-location was wanted but impossible."""

    def inputs(self) -> list[list[int]]:
        """Per stage, the indices of the stages it consumes."""
        from infra.intent.models import stage_inputs

        return stage_inputs([st.name for st in self.stages], [st.after for st in self.stages])

    def consumers(self) -> list[int | None]:
        """Per stage, the index of the stage it hands on to (None for the last)."""
        from infra.intent.models import stage_consumers

        return stage_consumers(self.inputs())


class Solver(PlanModel):
    engine: Literal["cp-sat"]
    objective: Literal["cost", "goodput"]
    status: str
    gap: float
    candidates: int
    considered: int


class Cost(PlanModel):
    per_hour: float
    by_pool: dict[str, float]


class PartlyIdle(PlanModel):
    node: str
    device: int
    """Index of the device on its node."""
    idle_fraction: float


class PoolUse(PlanModel):
    """How much of a pool the plan takes."""

    pool: str
    device: str
    devices: int
    """Devices holding at least one worker or slice."""
    nodes: int
    allocated: float
    """Device-equivalents allocated to replicas (slices count their share)."""
    idle_fraction: float
    """Share of the devices used that no replica holds (parts of devices left over by slices)."""
    partly_idle: list[PartlyIdle] = []
    """Every device used that slices leave partly empty, with its idle share; the other devices used are wholly
    allocated."""
    busy_at_peak: float | None = None
    """Load at peak over the capacity allocated on this pool's devices (device-weighted): the share of what the
    pool's replicas can carry within the objectives that the peak demand uses."""


class Alternative(PlanModel):
    """The best plan of another kind (other device, framework, or serving mode)."""

    label: str
    cost_per_hour: float
    delta_per_hour: float
    uses: list[str]


class PoolResources(PlanModel):
    """How pods of this pool request devices: the cluster's resource names for the pool's vendor."""

    count: str
    shared_count: str | None = None
    memory: str | None = None
    memory_unit: int | None = None
    """Bytes per unit of `memory`."""
    cores: str | None = None


class PoolNic(PlanModel):
    name: str
    kind: str
    bandwidth_gbps: float
    pcie_root: str | None = None


class ClusterPool(PlanModel):
    """One pool of the cluster profile, with what rendering and validation need to place pods on it."""

    name: str
    device: str
    vendor: str
    nodes: int
    devices_per_node: int
    device_memory_gb: float
    """Memory per device the scheduler hands out (the pool's allocatable figure, else the catalog's)."""
    node_selector: dict[str, str] = {}
    node_names: list[str] = []
    """Nodes listed by name in the profile (empty when the pool gives a count)."""
    zone: str | None = None
    switch: str | None = None
    scale_up_domain: str | None = None
    nics: list[PoolNic] = []
    resources: PoolResources
    spot: bool = False
    multi_node: bool = True


class ClusterCpuPool(PlanModel):
    """A pool of nodes without accelerators, where the CPU stages of pipelines run."""

    name: str
    nodes: int
    cores_per_node: int
    usable_cores_per_node: int
    """Cores per node less those reserved for the system."""
    memory_gb_per_node: float
    price_per_node_hour: float
    node_selector: dict[str, str] = {}
    node_names: list[str] = []
    zone: str | None = None
    switch: str | None = None
    nics: list[PoolNic] = []
    spot: bool = False


class ClusterPlan(PlanModel):
    """The cluster the plan is for: the profile's conventions and pools, so that a plan renders on its own."""

    name: Name
    """The cluster profile's name; it names each service's overlay directory."""
    namespace: str
    scheduler: str
    crds: dict[str, str] = {}
    """Installed custom resources (profile key, e.g. `leaderworkerset`) -> served API version."""
    model_cache: str | None = None
    """PersistentVolumeClaim with model weights."""
    pools: list[ClusterPool]
    cpu_pools: list[ClusterCpuPool] = []
    """The profile's pools of CPU-only nodes (for the CPU stages of pipelines)."""


class MeasuredCalibration(PlanModel):
    """The user's calibration a plan was made with (`infra calibrate`)."""

    name: str
    path: str
    """The file as given."""
    sha256: str
    points: int
    """Measured load points it learned from."""


class Calibration(PlanModel):
    fitted: str | None
    data_sha256: str | None
    measured: MeasuredCalibration | None = None
    """The user's calibration on top of the packaged one, when the plan was made with one."""


class Change(PlanModel):
    """One accepted change to the intent this plan was made from."""

    path: str
    """Field of the intent, e.g. `spec.services[0].slo.ttft.p99`."""
    before: Any = None
    """Value before the change (absent when the field was not written)."""
    after: Any
    proposed_by: str
    """`user`, or the language model that proposed it (`llm: MODEL at HOST`)."""
    accepted_by: Literal["user", "user (--yes)"]
    """Who accepted it: at a confirmation prompt, or in advance with `--yes`."""
    rationale: str | None = None
    """Why it was proposed, as the proposer put it."""
    prompt_sha256: str | None = None
    """Fingerprint of the prompts behind a model's proposal."""


class Provenance(PlanModel):
    intent: str
    """The intent file as given to `infra plan`."""
    catalog: str
    calibration: Calibration
    changes: list[Change] = []
    """Accepted changes to the intent behind this plan, oldest first (absent for a plan of an intent as
    written)."""


class VerifiedObjective(PlanModel):
    """One objective as verification measured it."""

    key: str
    target_ms: float
    predicted_ms: float | None = None
    """What the plan predicted (the slowest allocation's prediction at its planned load)."""
    measured_ms: float | None = None
    """The measured percentile; None when there was no sample or failed requests put it beyond any value."""
    measured_ms_note: str | None = None
    """Why `measured_ms` is null although there were samples (failed requests reach the percentile)."""
    ci_ms: list[float | None] | None = None
    """95% bootstrap interval of the measured percentile (None for an unbounded end)."""
    ci_ms_note: str | None = None
    """Why an end of `ci_ms` is null."""
    n: int
    verdict: Literal["pass", "fail", "inconclusive"]
    reason: str


class VerifiedService(PlanModel):
    service: str
    verdict: Literal["pass", "fail", "inconclusive"]
    objectives: list[VerifiedObjective]
    attainment: float
    """Requests meeting every bound at once, over all requests (failed ones included)."""
    goodput_rps: float
    failed: int
    notes: list[str] = []


class VerifiedStage(PlanModel):
    """One stage of a pipeline as the simulation ran it."""

    name: str
    kind: str
    servers: int
    """What serves it in parallel: engines (LLM stages), replicas (encoders, codecs, DiTs) or cores (CPU)."""
    utilisation: float
    """Busy time over servers x the run's span."""
    wait_ms: dict[str, float] = {}
    """Time a request queues for a free server before its work starts (mean, p99); for LLM stages the queueing
    is inside the stage's TTFT."""
    bubble_ms: dict[str, float]
    """Time a request spends in this stage waiting on the stage before it for more input (mean, p99)."""
    bubble_share: float
    """Bubble time over all the time requests spend in this stage."""


class VerifiedPipeline(PlanModel):
    """A pipeline simulated end to end: its objectives from arrival to the last stage, and each stage's load."""

    service: str
    verdict: Literal["pass", "fail", "inconclusive"]
    objectives: list[VerifiedObjective]
    failed: int
    """Requests that failed in some stage."""
    stages: list[VerifiedStage]
    notes: list[str] = []


class Correction(PlanModel):
    """How one objective was tightened for scoring in the next round: target x scale."""

    service: str
    objective: str
    scale: float
    measured_over_predicted: float | None = None


class VerificationRound(PlanModel):
    round: int
    verdict: Literal["pass", "fail", "inconclusive"]
    services: list[VerifiedService]
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
    seed: int
    requests: int
    """Requests simulated per service and round."""
    plan_round: int
    """The round whose plan this is: the first that did not fail, else the one that missed least."""
    verdict: Literal["pass", "fail", "inconclusive"]
    """That round's verdict."""
    rounds: list[VerificationRound]


class PlanSpec(PlanModel):
    fingerprint: str
    """sha256 over the intent, cluster, catalog and calibration: the same fingerprint means the same inputs."""
    solver: Solver
    cluster: ClusterPlan
    cost: Cost
    services: list[ServicePlan]
    pipelines: list[PipelinePlan] = []
    pools_used: list[PoolUse] = []
    binding: list[str]
    """Constraints the plan runs up against (full pools, budgets nearly spent, minimum replicas, zones)."""
    alternatives: list[Alternative]
    assumptions: list[str]
    provenance: Provenance
    verification: Verification | None = None


class Metadata(PlanModel):
    name: Name
    """The intent's name."""


class DeploymentPlan(PlanModel):
    """A solved intent (`kind: DeploymentPlan`)."""

    api_version: Literal["infra.dev/v1alpha1"] = Field(alias="apiVersion")
    kind: Literal["DeploymentPlan"]
    metadata: Metadata
    spec: PlanSpec


def load_plan(path: str | Path) -> DeploymentPlan:
    """Read and validate a plan.yaml; problems name the file, line and field."""
    from infra.intent.loader import problems_from_pydantic
    from infra.intent.yamlio import load_yaml, read_text

    text = read_text(Path(path), "plan")
    data, smap = load_yaml(text, str(path))
    try:
        return DeploymentPlan.model_validate(data)
    except PydanticValidationError as exc:
        raise IntentError(problems_from_pydantic(exc, DeploymentPlan, data, smap)) from None
