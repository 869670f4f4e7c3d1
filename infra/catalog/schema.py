"""Typed shape of the catalog: models, devices and serving frameworks.

The catalog is data (packaged YAML under `infra/catalog/data/`, overlaid by a user's `--catalog DIR`). Field names
carry their unit (`memory_gb`, `memory_bandwidth_tbps`), so a number never travels without one. Device figures are
`Figure`s: a value with the URL it came from and how far to trust it, because peak figures for some accelerators
are secondary sources at best and the performance model must know which ones it leans on.
"""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, model_validator

Precision = Literal["fp32", "bf16", "fp16", "fp8", "int8", "int4", "fp4"]
"""Numeric formats: weights (and for fp8/int8/fp4 also activations) in that format. `int4` is weight-only (W4A16)."""

PRECISIONS: tuple[str, ...] = ("fp32", "bf16", "fp16", "fp8", "int8", "int4", "fp4")

BYTES_PER_PARAM: dict[str, float] = {
    "fp32": 4.0,
    "bf16": 2.0,
    "fp16": 2.0,
    "fp8": 1.0,
    "int8": 1.0,
    # int4/fp4 weights carry one scale per group of 16-128 values; 0.5625 B is the NVFP4 figure (4 bit + FP8 scale
    # per 16), within 3% of W4A16 with group 128 plus zero-points.
    "int4": 0.5625,
    "fp4": 0.5625,
}

Confidence = Literal["high", "medium", "low"]
Vendor = Literal[
    "nvidia", "amd", "huawei", "cambricon", "kunlunxin", "iluvatar", "metax", "hygon", "mthreads", "enflame", "cpu"
]
"""Who makes the device, as far as requesting it goes: one cluster convention (resource names) per vendor. `cpu` is
every x86 server CPU whatever its maker: a CPU device is requested as Kubernetes' own cores and memory, not through a
device plugin."""
ModelKind = Literal["llm", "vision_encoder", "audio_encoder", "codec", "dit"]
WorkUnit = Literal["token", "image", "audio_second", "video_frame", "denoise_step"]
Feature = Literal[
    "pd_disaggregation",
    "expert_parallel",
    "attention_dp",
    "pipeline_parallel",
    "multi_node",
    "chunked_prefill",
    "prefix_caching",
    "speculative_decoding",
    "fp8_kv_cache",
    "lora",
]

_URL = re.compile(r"^(https?|file)://\S+$")


class CatalogModel(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, use_attribute_docstrings=True)


def _check_url(value: str) -> str:
    if not _URL.match(value):
        raise ValueError(f"source {value!r} is not an http(s) URL; every catalog figure cites where it came from")
    return value


Url = Annotated[str, AfterValidator(_check_url)]


class Figure(CatalogModel):
    """A number with its provenance."""

    value: float = Field(ge=0)
    """The figure itself, in the unit its field name states."""
    source: Url
    """URL of the datasheet, documentation or publication the figure comes from."""
    confidence: Confidence
    """high: vendor datasheet; medium: reputable secondary source; low: estimate or conflicting sources."""
    note: str | None = None
    """Why the figure is what it is, when that is not obvious (variant, sparsity, derivation)."""


class Interconnect(CatalogModel):
    """The scale-up link between devices of one node (or super-node)."""

    kind: str
    """Link technology, e.g. nvlink4, nvlink5, hccs, infinity-fabric, mlu-link, pcie4, pcie5."""
    bandwidth_gbs: Figure
    """Per-device bandwidth in GB/s, bidirectional as vendors quote it."""
    domain_size: Figure
    """How many devices share one full-bandwidth domain (8 for an HGX board, 72 for an NVL72 rack)."""


class Quirk(CatalogModel):
    """A known limitation the planner must respect."""

    id: str
    """Stable identifier, e.g. `no-fp8`, `no-nvlink`, `tp-shapes`."""
    description: str
    """What goes wrong and when."""
    unsupported_precisions: list[Precision] = []
    """Precisions that do not run (or not usefully) on this device."""
    max_tp: int | None = None
    """Largest tensor-parallel size known to work, when smaller than the node."""
    unsupported_features: list[Feature] = []
    """Serving features of the framework that do not work on this device (e.g. prefill/decode disaggregation on a
    CPU), where the framework lists them for its other devices."""
    frameworks: list[str] = []
    """Frameworks the quirk applies to; empty means all."""
    source: Url
    """URL where the limitation is documented."""


class Unplannable(CatalogModel):
    """Why a device cannot be deployed with what the packaged catalog knows: no engine image from the vendor's or
    the engine's official registry is pinned for it. The planner refuses the device with this reason while no
    framework entry pins an image for it; a `--catalog` overlay giving one (frameworks/<name>.yaml, `images:
    {<device>: <registry>/<image>:<tag>}`) makes it plannable."""

    reason: str
    """What is missing and where the vendor ships its engines instead (SDK tarball, build-it-yourself, internal
    registry), in one sentence."""
    source: Url
    """Where the vendor or engine documents how its image is obtained."""


class CpuSpec(CatalogModel):
    """What a CPU device (one socket) is made of, beyond the figures every device has: how many cores pods get with
    it and which instruction sets the engine's kernels use."""

    cores: Figure
    """Physical cores of one socket: the engine binds one compute thread to each."""
    threads: Figure
    """Hardware threads of one socket (two per core with SMT, as these parts ship and cloud instances run): what
    Kubernetes counts as CPUs, so what a pod holding the whole socket requests."""
    isa: list[str]
    """Instruction-set flags the serving kernels use, as `lscpu` spells them (e.g. avx512_bf16, amx_bf16)."""


class DeviceSpec(CatalogModel):
    """An accelerator (or a CPU socket) as the performance model and planner see it."""

    name: str
    """Canonical name, e.g. `H100-SXM`, `Ascend-910B3`."""
    aliases: list[str] = []
    """Other spellings that resolve to this device (case-insensitive), e.g. `h100_sxm`, `H100 SXM5 80GB`."""
    vendor: Vendor
    """Maker; selects the cluster convention (resource names) used to request the device."""
    architecture: str
    """Micro-architecture or generation, e.g. hopper, blackwell, cdna3, davinci-v2."""
    memory_gb: Figure
    """Device memory in GB (10^9 bytes) as marketed."""
    memory_bandwidth_tbps: Figure
    """Peak memory bandwidth in TB/s."""
    tflops: dict[Precision, Figure]
    """Dense (non-sparse) peak tensor throughput per precision in TFLOPS (TOPS for int8). A precision absent here
    has no hardware support."""
    interconnect: Interconnect
    """The intra-node link."""
    devices_per_node: Figure
    """Typical devices in one server."""
    media_engines: dict[str, Figure] = {}
    """Hardware video/image/audio engines by kind (nvdec, nvjpg, dvpp...), as counts per device."""
    quirks: list[Quirk] = []
    """Known limitations."""
    reference_price_per_hour: Figure
    """Reference on-demand price in USD per device-hour; a cluster profile's own price overrides it."""
    tdp_watts: Figure | None = None
    """Board power."""
    cpu: CpuSpec | None = None
    """Cores and instruction sets, for CPU devices (vendor `cpu`, one socket each); unset for accelerators."""
    unplannable: Unplannable | None = None
    """Set where no official registry publishes a pinned engine image for the device: why, and where to look."""

    @model_validator(mode="after")
    def _cpu_for_cpus(self) -> DeviceSpec:
        if (self.vendor == "cpu") != (self.cpu is not None):
            raise ValueError(f"vendor {self.vendor} {'needs' if self.vendor == 'cpu' else 'takes no'} a `cpu` "
                             "section: CPU devices (vendor cpu) state their cores and threads, accelerators do not")
        return self

    @property
    def precisions(self) -> list[str]:
        """Precisions the device serves, minus those a quirk rules out: what it computes natively, plus 4-bit
        weights (int4, and fp4 without fp4 tensor cores) dequantised to 16-bit wherever 16-bit runs, as the Marlin
        kernels of vLLM and SGLang do on Ampere and Hopper."""
        unsupported = {p for q in self.quirks for p in q.unsupported_precisions if not q.frameworks}
        native = set(self.tflops)
        if native & {"bf16", "fp16"}:
            native.update(("int4", "fp4"))
        return [p for p in PRECISIONS if p in native and p not in unsupported]

    def precision_quirk(self, framework: str, precision: str) -> Quirk | None:
        """The quirk that rules a precision out under one framework (a quirk scoped to it, or to all)."""
        return next((q for q in self.quirks if precision in q.unsupported_precisions
                     and (not q.frameworks or framework in q.frameworks)), None)

    def precisions_for(self, framework: str) -> list[str]:
        """Precisions the device serves under one framework: `precisions` less those its quirks rule out."""
        return [p for p in self.precisions if self.precision_quirk(framework, p) is None]

    def feature_quirk(self, framework: str, feature: str) -> Quirk | None:
        """The quirk that rules a serving feature out on this device under one framework (scoped to it, or to all)."""
        return next((q for q in self.quirks if feature in q.unsupported_features
                     and (not q.frameworks or framework in q.frameworks)), None)

    def tp_limit(self, framework: str) -> Quirk | None:
        """The quirk with the smallest `max_tp` that applies to a framework on this device, if any."""
        limits = [q for q in self.quirks if q.max_tp is not None and (not q.frameworks or framework in q.frameworks)]
        return min(limits, key=lambda q: (q.max_tp, q.id)) if limits else None


class MoESpec(CatalogModel):
    """Mixture-of-experts layout."""

    experts: int = Field(gt=0)
    """Routed experts per MoE layer."""
    active_experts: int = Field(gt=0)
    """Routed experts each token is sent to (top-k)."""
    shared_experts: int = Field(default=0, ge=0)
    """Always-active shared experts per MoE layer."""
    expert_ffn_size: int = Field(gt=0)
    """Intermediate size of one expert's FFN."""
    dense_layers: int = Field(default=0, ge=0)
    """Leading layers with a dense FFN instead of experts (e.g. 3 in DeepSeek-V3)."""

    @model_validator(mode="after")
    def _active_le_experts(self) -> MoESpec:
        if self.active_experts > self.experts:
            raise ValueError(f"active_experts {self.active_experts} exceeds experts {self.experts}")
        return self


class MLASpec(CatalogModel):
    """Multi-head latent attention (DeepSeek-V2/V3 style): the KV cache holds a compressed latent per token."""

    kv_lora_rank: int = Field(gt=0)
    """Rank of the compressed KV latent (512 in DeepSeek-V3)."""
    q_lora_rank: int | None = None
    """Rank of the compressed query, if any."""
    qk_rope_head_dim: int = Field(gt=0)
    """Rotary part of each head's query/key (cached alongside the latent)."""
    qk_nope_head_dim: int = Field(gt=0)
    """Non-rotary part of each head's query/key."""
    v_head_dim: int = Field(gt=0)
    """Value head dimension."""


class AttentionLayout(CatalogModel):
    """Which layers keep a full KV cache and which do not."""

    sliding_window: int | None = None
    """Window length of sliding-window layers, in tokens."""
    sliding_window_layers: int = Field(default=0, ge=0)
    """Layers that use the sliding window (their KV cache is bounded by it)."""
    linear_attention_layers: int = Field(default=0, ge=0)
    """Layers with linear attention / state-space mixing (a fixed-size state, no per-token KV)."""
    linear_key_heads: int = Field(default=0, ge=0)
    """Key heads of the linear-attention layers (config `linear_num_key_heads`)."""
    linear_value_heads: int = Field(default=0, ge=0)
    """Value heads of the linear-attention layers; each keeps a key_dim x value_dim recurrent state per sequence
    (config `linear_num_value_heads`). 0 when unknown: the state is then not counted."""
    linear_key_dim: int = Field(default=128, ge=1)
    linear_value_dim: int = Field(default=128, ge=1)
    linear_conv_kernel: int = Field(default=4, ge=1)
    """Width of the short convolution before the linear attention: it keeps kernel - 1 past inputs per sequence."""
    sparse_topk: int | None = Field(default=None, ge=1)
    """DeepSeek Sparse Attention (config `index_topk`): a lightning indexer scores every cached token and each query
    attends only the top this-many, so attention work stops growing with context there; None for dense attention."""
    indexer_heads: int = Field(default=0, ge=0)
    """Heads of the sparse-attention indexer (config `index_n_heads`)."""
    indexer_head_dim: int = Field(default=128, ge=1)
    """Width of the indexer's keys (config `index_head_dim`), cached per token and layer in FP8 with one FP32 scale
    per 128."""


class WorkShape(CatalogModel):
    """How a non-text stage's work (images, audio seconds, video frames) becomes the tokens its transformer runs
    on, for encoders, codecs and diffusion transformers."""

    tokens_per_second: float | None = Field(default=None, gt=0)
    """Tokens per audio second (audio encoders after their convolution front end; codec frames)."""
    pixels_per_token: int | None = Field(default=None, gt=0)
    """Side of the square of pixels one token covers (a ViT patch; a DiT's VAE compression times its patch)."""
    frames_per_token: int = Field(default=1, ge=1)
    """Video frames folded into one latent frame (a causal video VAE keeps the first frame on its own)."""
    passes_per_step: int = Field(default=1, ge=1)
    """Forward passes per denoising step (2 with classifier-free guidance)."""


class ModelSpec(CatalogModel):
    """A model (or one stage of an omni-modal pipeline) as the performance model sees it."""

    name: str
    """Canonical short name, e.g. `Llama-3.1-70B`."""
    hf_id: str
    """Hugging Face repository id, e.g. `meta-llama/Llama-3.1-70B-Instruct`; resolves to this entry."""
    aliases: list[str] = []
    """Other ids and spellings that resolve here (case-insensitive)."""
    family: str
    """Model family, e.g. llama, qwen3, deepseek-v3."""
    kind: ModelKind = "llm"
    """What the model does in a pipeline: an autoregressive LLM, an encoder, an audio codec or a diffusion
    transformer."""
    work_unit: WorkUnit = "token"
    """The unit of work it is scheduled by."""
    layers: int = Field(gt=0)
    """Transformer blocks."""
    hidden_size: int = Field(gt=0)
    """Model (residual stream) width."""
    attention_heads: int = Field(gt=0)
    """Query heads."""
    kv_heads: int = Field(gt=0)
    """Key/value heads (GQA groups; equals attention_heads for MHA)."""
    head_dim: int = Field(gt=0)
    """Per-head dimension."""
    ffn_size: int = Field(gt=0)
    """Intermediate size of the dense FFN (of the dense layers, for MoE models)."""
    vocab_size: int = Field(gt=0)
    """Vocabulary size."""
    max_context: int = Field(gt=0)
    """Longest supported context in tokens."""
    moe: MoESpec | None = None
    """Expert layout, for mixture-of-experts models."""
    mla: MLASpec | None = None
    """Latent-attention layout, for MLA models."""
    attention: AttentionLayout = AttentionLayout()
    """Sliding-window and linear-attention layers."""
    work: WorkShape | None = None
    """Tokens per unit of work, for stages that are not fed text (encoders, codecs, diffusion transformers)."""
    params_total_b: float = Field(gt=0)
    """Total parameters in billions."""
    params_active_b: float = Field(gt=0)
    """Parameters used per token in billions (equals total for dense models)."""
    native_precision: Precision = "bf16"
    """Precision the weights are published in."""
    native_activations: Literal["bf16", "fp8"] | None = None
    """Format the GEMMs of the native checkpoint take their activations in, where its fp4 weights are quantized
    without them: gpt-oss's MXFP4 experts run with MXFP8 activations on devices with microscaled (fp4) tensor cores
    and with BF16 ones elsewhere. None: the activations are quantized with the weights (NVFP4, FP8; `int4` is
    W4A16 by definition), so GEMMs run in the weights' format where the device has it."""
    source: Url
    """URL of the model's config.json or model card."""
    confidence: Confidence = "high"
    """high: read from the published config; medium/low: derived or reported."""
    note: str | None = None
    """Anything the numbers alone do not say."""

    @model_validator(mode="after")
    def _consistent(self) -> ModelSpec:
        if self.attention_heads % self.kv_heads:
            raise ValueError(
                f"attention_heads {self.attention_heads} is not a multiple of kv_heads {self.kv_heads}"
            )
        if self.params_active_b > self.params_total_b:
            raise ValueError(
                f"params_active_b {self.params_active_b} exceeds params_total_b {self.params_total_b}"
            )
        mixing = self.attention.sliding_window_layers + self.attention.linear_attention_layers
        if mixing > self.layers:
            raise ValueError(f"sliding-window plus linear-attention layers ({mixing}) exceed layers {self.layers}")
        if self.native_activations and self.native_precision != "fp4":
            raise ValueError(f"native_activations applies to fp4 weights quantized alone, not native_precision "
                             f"{self.native_precision}: remove it")
        return self


EngineSetting = Literal[
    "served_model_name", "host", "port", "tensor_parallel", "pipeline_parallel", "data_parallel", "expert_parallel",
    "max_num_seqs", "max_num_batched_tokens", "max_model_len", "memory_utilization", "kv_cache_dtype",
    "quantization", "chunked_prefill", "prefix_caching", "nnodes", "node_rank", "master_addr", "dist_init_addr",
    "headless", "kv_transfer_config", "disaggregation_mode", "disaggregation_transfer_backend", "model",
    "device_ids", "device", "attention_dp", "omni", "ulysses_degree", "metrics",
]
"""What a plan decides for an engine, by name. `metrics` is on for every engine infra launches: an engine that
exports its Prometheus series only when told to (SGLang's `--enable-metrics`) states how in its catalog entry, so
that the objective alerts, `infra observe` and autoscaling on its running requests find the series they read."""


class EngineConfigFile(CatalogModel):
    """A file the engine reads its settings from: where it lives, how it is named on the command line, and where
    each setting goes inside it."""

    path: str
    """Absolute path the engine reads, e.g. `/etc/trtllm/extra-llm-api-options.yaml`."""
    flag: str | None = None
    """Flag that names the file; unset when the engine reads `path` by itself."""
    format: Literal["yaml", "json"] = "yaml"
    keys: dict[EngineSetting, str]
    """Setting -> dotted path in the file (a number indexes a list), e.g. `kv_cache_dtype: kv_cache_config.dtype`."""
    fixed: dict[str, str | int | float | bool] = {}
    """Dotted path -> value written whatever the plan (what the engine needs for the plan's settings to work,
    e.g. MindIE's `ServerConfig.allowAllZeroIpListening: true` to listen on 0.0.0.0)."""
    merge: bool = False
    """The file holds only the plan's settings and is merged into the image's own default file at start (engines
    whose file has many more keys than a plan decides)."""
    source: Url
    """URL of the engine's documentation of the file."""


class EngineCli(CatalogModel):
    """How the engine's OpenAI-compatible server is launched and how it spells each setting a plan decides, so that
    rendering writes the arguments and validation reads them back the same way."""

    command: list[str]
    """Launcher, e.g. `[vllm, serve]`."""
    model_flag: str | None = None
    """Flag that takes the model; unset passes the model as the first argument after the command."""
    flags: dict[EngineSetting, str]
    """Setting -> flag, e.g. `tensor_parallel: --tensor-parallel-size`. A setting not listed is not passed."""
    switches: list[EngineSetting] = []
    """Settings whose flag takes no value (given when the setting is on, e.g. vLLM `--enable-expert-parallel`)."""
    values: dict[EngineSetting, dict[str, str]] = {}
    """Plan value -> engine spelling where they differ, e.g. `kv_cache_dtype: {fp8: fp8_e4m3}`. For
    `kv_transfer_config` the keys are the roles (`prefill`, `decode`) and the value is the connector's JSON, in
    which `${prefill_tp}`, `${prefill_dp}`, `${decode_tp}` and `${decode_dp}` stand for the plan's layout of each
    role (tensor-parallel size, attention data-parallel groups) where the connector must know both sides."""
    negations: dict[EngineSetting, str] = {}
    """Flag given when a switch setting is off, e.g. `prefix_caching: --no-enable-prefix-caching`; a switch
    without one is simply left out when off."""
    config_file: EngineConfigFile | None = None
    """Settings the engine reads from a file rather than from flags (rendered into a ConfigMap)."""
    dp_totals: list[EngineSetting] = []
    """Settings the engine takes as totals over a worker's data-parallel attention groups and divides among them
    (SGLang with --enable-dp-attention gives each group --chunked-prefill-size and --max-running-requests over
    --dp-size); the plan's values are per group, so these are passed times the groups (`given`)."""
    port: int = Field(default=8000, ge=1, le=65535)
    """Port the OpenAI-compatible server listens on (passed with the `port` flag when the engine has one)."""
    health_path: str | None = "/health"
    """HTTP path that answers 200 once the engine serves; unset probes the port with TCP."""
    running_metric: str | None = None
    """Prometheus gauge of requests running on one engine, which autoscaling targets."""
    pod_ip_env: list[Annotated[str, Field(pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")]] = []
    """Environment variables the KV-transfer connector of a prefill or decode worker reads its pod's IP from, each
    set from the pod's `status.podIP` on the roles `kv_transfer_config` names: vLLM's NixlConnector binds its side
    channel to `VLLM_NIXL_SIDE_CHANNEL_HOST` (else localhost, which the other pod cannot reach); vllm-ascend's
    Mooncake transfer binds HCCL to `HCCL_IF_IP`, as its Kubernetes P/D guide sets it."""
    source: Url
    """URL of the engine's documentation of these arguments."""

    def tensor_parallel(self, tp: int, attention_dp: int) -> int:
        """The tensor-parallel size the engine is given for a worker of `tp` x `attention_dp` attention groups: an
        engine whose data-parallel attention splits its tensor-parallel ranks (an `attention_dp` switch: SGLang
        --enable-dp-attention, TensorRT-LLM enable_attention_dp) counts every device of the worker; one that runs
        each attention group as its own engine core (vLLM --data-parallel-size) counts one group's."""
        stated = set(self.flags) | set(self.config_file.keys if self.config_file is not None else {})
        return tp * attention_dp if attention_dp > 1 and "attention_dp" in stated else tp

    def given(self, setting: EngineSetting, per_group: Any, attention_dp: int) -> Any:
        """What the engine is given for a setting the plan sets per attention group: the plan's value, or for one
        the engine divides among its data-parallel attention groups (`dp_totals`), that value times the groups,
        so that each group runs the batch and step budget the plan priced."""
        if per_group is None or attention_dp <= 1 or setting not in self.dp_totals:
            return per_group
        return per_group * attention_dp

    @property
    def kv_transfer(self) -> bool:
        """Whether the engine states how prefill and decode workers hand the KV cache over: a disaggregation flag
        or config-file key, or a `kv_transfer_config` flag with a connector for both roles. Without one, rendered
        prefill and decode workers could not exchange a request's KV cache."""
        stated = set(self.flags) | set(self.config_file.keys if self.config_file is not None else {})
        if stated & {"disaggregation_mode", "disaggregation_transfer_backend"}:
            return True
        return "kv_transfer_config" in stated and {"prefill", "decode"} <= set(self.values.get("kv_transfer_config",
                                                                                                 {}))


KV_TRANSFER_SETTINGS = ("kv_transfer_config", "disaggregation_mode", "disaggregation_transfer_backend")
"""Engine settings through which prefill and decode workers are told how to move the KV cache."""


class EngineEnv(CatalogModel):
    """Environment an engine needs on one kind of device, for settings it takes from the environment rather than
    from flags (vLLM's CPU backend sizes its KV cache and binds its threads this way)."""

    kv_cache_gib: str | None = None
    """Variable that takes the KV cache size of each rank in GiB (vLLM CPU: `VLLM_CPU_KVCACHE_SPACE`); rendering
    sizes it from the plan's memory."""
    fixed: dict[str, str] = {}
    """Variables set whatever the plan (e.g. `VLLM_CPU_OMP_THREADS_BIND: auto`)."""
    source: Url
    """URL of the engine's documentation of these variables."""


class FrameworkSpec(CatalogModel):
    """A serving engine and what it supports."""

    name: str
    """Canonical name, e.g. `vllm`, `sglang`, `trtllm`, `vllm-ascend`, `mindie`, `lmdeploy`."""
    aliases: list[str] = []
    """Other spellings, e.g. `tensorrt-llm`."""
    display_name: str
    """Human name, e.g. `TensorRT-LLM`."""
    version: str
    """Reference version the support data describes."""
    image: str
    """Default container image for this version."""
    images: dict[str, str] = {}
    """Image per device (catalog name) or vendor where it differs from `image` (e.g. the ROCm build for `amd`);
    a device entry wins over its vendor's."""
    vendors: list[Vendor]
    """Device makers the engine runs on."""
    devices: list[str] = []
    """If set, the only devices (catalog names, of any of its vendors) the engine supports; empty means every
    device of its vendors."""
    precisions: list[Precision]
    """Weight precisions the engine serves."""
    features: list[Feature]
    """Serving features available."""
    source: Url
    """URL of the documentation the support data comes from."""
    note: str | None = None
    """Caveats (plugin versions, experimental support)."""
    cli: EngineCli | None = None
    """Launch command and argument spelling; unset for engines configured by a file rather than by flags."""
    linear_state_bytes: float = Field(default=2.0, gt=0)
    """Bytes per element of the recurrent state of linear-attention layers as the engine keeps it by default
    (the model's 16-bit dtype, or fp32 where the engine chooses accuracy)."""
    kinds: list[ModelKind] = ["llm"]
    """Kinds of model (pipeline stage) the engine serves."""
    metrics: Literal["vllm", "sglang"] | None = None
    """The family of Prometheus series its engine counts requests in (`infra.catalog.metrics`): `vllm` for vLLM and
    its vendor builds, `sglang`; unset where it exports neither, and then no objective rules are rendered for its
    pods."""
    calibration_from: str | None = None
    """The engine (catalog name) whose measured efficiency factors this one borrows on a device no measurement
    fitted it on, before any other engine's: a vendor build of vLLM takes vLLM's. Unset: its own, where fitted."""
    checkpoints: dict[str, str] = {}
    """Hugging Face repository a plan names -> the repository this engine loads instead, where the engine reads
    another format of the same weights (vLLM-Omni loads Wan2.1 from its Diffusers conversion)."""
    env: dict[str, EngineEnv] = {}
    """Environment per device (catalog name) or vendor where the engine needs one (e.g. `cpu`: vLLM's CPU backend);
    a device entry wins over its vendor's."""

    def env_for(self, device: str, vendor: str) -> EngineEnv | None:
        """The environment the engine needs on a device: its own entry in `env`, else its vendor's."""
        return self.env.get(device) or self.env.get(vendor)

    @property
    def launches_multi_node(self) -> bool:
        """Whether its launcher can start one engine over several nodes: it has the feature and the flags that
        tell each node its rank and where to find the first."""
        flags = set(self.cli.flags) if self.cli is not None else set()
        return ("multi_node" in self.features and {"nnodes", "node_rank"} <= flags
                and bool(flags & {"master_addr", "dist_init_addr"}))

    def image_for(self, device: str, vendor: str) -> tuple[str, bool]:
        """(image, pinned) for a device: its own entry in `images`, else its vendor's, else `image` when the vendor
        is the framework's first. Pinned means a release tag or digest, never `latest` (nor no tag)."""
        default = self.image if self.vendors and self.vendors[0] == vendor else ""
        image = self.images.get(device) or self.images.get(vendor) or default
        last = image.rsplit("/", 1)[-1]
        tag = image.split("@", 1)[1] if "@" in image else (last.split(":", 1)[1] if ":" in last else "")
        return image, bool(tag) and "latest" not in tag

