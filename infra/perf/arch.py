"""Memory fit and step times of one worker: a roofline per operator family plus communication.

`compile_worker` turns (model, device, precision, layout, efficiency factors) into per-device coefficients once;
`Worker.step` then prices an engine step (a decode batch plus prefill tokens) with a few dozen float operations,
which is what lets the planner score thousands of candidates per second.

Per device and per step, for each operator family the time is max(FLOPs / (peak x compute efficiency),
bytes / (bandwidth x memory efficiency)):
- dense linear layers (attention projections, dense FFN, shared experts, LM head): all their weights are read
  once per step, FLOPs grow with tokens;
- routed experts: only the experts some token picked are read (expected distinct experts of E local ones after N
  draws of k), FLOPs are k experts per token spread over the MoE group;
- attention: FLOPs grow with query tokens x context, bytes with the KV cache read by decode; prefill attention is
  compute-bound and decode attention memory-bound, so the two add under one attention-kernel efficiency; under
  DeepSeek Sparse Attention a query attends only the indexer's top-k tokens, while the indexer itself scores (and
  decode reads the small keys of) every cached token;
- norms and elementwise: a fixed number of passes over the hidden state;
- communication: tensor-parallel all-reduces (two per layer) and expert-parallel all-to-all (dispatch and
  combine per MoE layer) over NVLink/HCCS inside the scale-up domain (PCIe inside the server for cards without
  one), the NIC beyond it, each with a fixed latency from calibration (what makes a step at tp 8 cost more than
  an eighth of one at tp 1);
- a fixed engine overhead per step (scheduling, kernel launches) from calibration.
Pipeline stages run one after another for a token, so a step takes pp times a stage.
"""

from __future__ import annotations

import math
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field, fields
from typing import NamedTuple

from infra.catalog.hf import param_breakdown
from infra.catalog.schema import BYTES_PER_PARAM, DeviceSpec, ModelSpec
from infra.perf.calibration import Factors
from infra.perf.shape import Parallel

GB = 1e9
GIB_PER_GB = 2**30 / 1e9
"""Device memory figures are binary: an "80 GB" H100 holds 80 GiB (nvidia-smi shows 81559 MiB), a "141 GB" H200
141 GiB. Weights and caches are counted in decimal GB, so a device's figure converts once."""
RUNTIME_OVERHEAD_BYTES = 2.0e9
"""CUDA/CANN context, CUDA graphs, allocator slack: what vLLM and SGLang report outside weights and KV (1.5-3 GB)."""
ACTIVATION_PASSES = 24
"""Live activation buffers per token of the step budget, in hidden-size bf16 vectors (attention, FFN and sampling
scratch), which is where profiled peak activation memory lands for max_num_tokens = 8192."""
ELEMENTWISE_PASSES = 16
"""Reads and writes of the hidden state per layer by norms, residual adds, rotary embedding and activations."""
NIC_GBS = 50.0
"""Per-device scale-out bandwidth when a worker spans scale-up domains: one 400 Gb/s NIC per device."""
MOE_TILE_ROWS = 64
"""Rows of the tensor-core tile grouped-GEMM kernels use on most devices (64 or 128 with Hopper's and Blackwell's
warpgroup MMAs): an expert that one token picked still computes a tile of this many rows. Where the device's
peak FLOPs per byte of expert weight reach what such a tile asks (an 8-bit weight on H100: 295 FLOPs per byte
against 128), it costs nothing at small batches: the weight read still bounds the expert. Where they do not
(H20: 37 FLOPs per byte of a 16-bit weight against 64; a 4-bit weight on H200 or Ascend 910B), the engines' tuned
kernel configurations (vLLM's per-device fused-MoE tables, SGLang's) pick smaller row blocks, down to the matrix
unit's own (`MMA_MIN_ROWS`): `expert_tile_rows` is the largest tile that keeps the weight read binding, within those."""
MMA_MIN_ROWS = 16
"""Rows of the smallest matrix-unit tile (NVIDIA mma.sync m16n8k16, AMD MFMA 16x16, Ascend's 16x16x16 cube): no
accelerator kernel computes fewer, so an expert costs at least 16 rows of FLOPs (on H20 a 4-bit expert's tile
outruns its weight read by 1.6x)."""
CPU_TILE_ROWS = 1
"""CPU engines' expert kernels (oneDNN, llama.cpp) run one row per token: a CPU's ratio of peak FLOPs to bandwidth
(EPYC 9654: 32 FLOPs per byte) is under what a 64-row tile of 16-bit weights asks (64), so padding to accelerator
tiles would price small-batch MoE decode on CPUs as compute-bound, twice the weight read it is."""
COLLECTIVE_HOPS_ACROSS_NODES = 2
"""A collective that leaves the scale-up domain pays its fixed latency (the `collective_us` factor: launch,
synchronisation and the small-message latency of NCCL or the framework's custom all-reduce) this many times."""
PCIE_COLLECTIVE_HOPS = COLLECTIVE_HOPS_ACROSS_NODES
"""A collective among the PCIe devices of one server pays its fixed latency this many times, as one that leaves
the scale-up domain does: the fitted `collective_us` is measured over NVLink and holds launch and synchronisation
besides the link's own latency, which NCCL's tuning model puts 2.5 times higher over PCI (a ring step 1.0 us
against 0.4 us over NVLink, src/graph/tuning.cc hwLat, LL protocol), so the whole scales by less than that. No
measurement covers it; estimates on such devices say so (`infra.perf.estimate`)."""


class Fabric(NamedTuple):
    """The devices that exchange tensors over one link short of the NIC, the link's speed each way, and how many
    times a collective among them pays the fixed collective latency (a tuple: it is taken for every layout the
    planner compiles, and a frozen dataclass costs a few microseconds to build)."""

    devices: float
    link_bytes_s: float
    hops: float


def fabric(device: DeviceSpec) -> Fabric:
    """A device's fabric: its scale-up domain (NVLink, HCCS, Infinity Fabric ...), or, for a device with none
    (`domain_size` 1, PCIe cards), the PCIe of the server it sits in: the server's devices reach each other there,
    at the PCIe link's speed and latency, not over the NIC."""
    link = device.interconnect.bandwidth_gbs.value / 2 * GB
    domain = device.interconnect.domain_size.value
    per_node = device.devices_per_node.value
    if domain <= 1 and per_node > 1:
        return Fabric(float(per_node), link, float(PCIE_COLLECTIVE_HOPS))
    return Fabric(max(1.0, domain), link, 1.0)


def compute_precision(precision: str, device: DeviceSpec, activations: str | None = None) -> str:
    """The tensor-core format the GEMMs run in: native when the device has it; 4-bit weights without fp4 tensor
    cores are dequantised and computed in 16-bit (Marlin-style W4A16 kernels), as is weight-only int4. Weights
    quantized without their activations (`activations`, a checkpoint's `native_activations`) run in that format:
    8-bit activations only on devices whose tensor cores take microscaled operands (those with fp4), 16-bit
    elsewhere."""
    sixteen = "bf16" if "bf16" in device.tflops else "fp16"
    if activations == "fp8" and "fp4" in device.tflops and "fp8" in device.tflops:
        return "fp8"
    if activations is not None or (precision in ("int4", "fp4") and precision not in device.tflops):
        return sixteen
    if precision in device.tflops:
        return precision
    for alt in ("fp8", "bf16", "fp16"):
        if alt in device.tflops:
            return alt
    return next(iter(device.tflops))


def peak_tflops(device: DeviceSpec, fmt: str) -> float:
    fig = device.tflops.get(fmt) or device.tflops.get("bf16") or device.tflops.get("fp16")
    return fig.value if fig else max(f.value for f in device.tflops.values())


@dataclass
class MemoryFit:
    """Where a worker's device memory goes, per device (not frozen for the reason `Worker` gives)."""

    device_gb: float
    """The device's memory figure as published (GiB)."""
    usable_gb: float
    """What the engine may use, in decimal GB like the weights and caches."""
    weights_gb: float
    activations_gb: float
    kv_gb: float
    kv_bytes_per_token: float
    """KV bytes per token per device for layers whose cache grows with the sequence."""
    kv_tokens: int
    """Tokens of KV cache per attention group (what vLLM reports as KV cache capacity)."""

    @property
    def fits(self) -> bool:
        return self.kv_gb > 0

    def explain(self) -> str:
        if self.fits:
            return (f"fits: {self.weights_gb:.1f} GB weights + {self.activations_gb:.1f} GB activations and runtime "
                    f"of {self.usable_gb:.1f} GB usable leaves {self.kv_gb:.1f} GB for {self.kv_tokens} KV tokens")
        return (f"does not fit: {self.weights_gb:.1f} GB weights + {self.activations_gb:.1f} GB activations and "
                f"runtime per device exceed the {self.usable_gb:.1f} GB usable of {self.device_gb:.0f} GiB by "
                f"{-self.kv_gb:.1f} GB")


@dataclass(eq=False)
class Worker:
    """Per-device coefficients of one worker layout, ready for fast step pricing. Not changed once built (take
    another with `with_factors`, or `dataclasses.replace` for other fields); not a frozen dataclass because a
    frozen one takes three times as long to build, and the planner builds one per candidate layout."""

    parallel: Parallel
    factors: Factors
    memory: MemoryFit
    flops_s: float
    attn_flops_s: float
    bw_bytes_s: float
    collective_hops: float
    dense_bytes: float
    dense_flops_per_token: float
    logit_flops_per_token: float
    expert_bytes_local: float
    expert_flops_per_row: float
    """FLOPs of one token's pass through one local expert (all MoE layers of the stage), per device."""
    experts: int
    experts_local: float
    moe_layers_per_stage: float
    active_experts: int
    attn_flops_per_qk: float
    """Decode attention FLOPs per (query token x context token) per device, summed over full-attention layers."""
    swa_flops_per_qk: float
    prefill_qk_scale: float
    """Prefill attention FLOPs per (query x context) over decode's. MLA models attend in two forms: decode in the
    absorbed form over the 576-wide latent (little data to move, more FLOPs), prefill in the decompressed
    multi-head form over 192-wide keys and 128-wide values (fewer FLOPs), as vLLM, SGLang and TRT-LLM do; 1 for
    every other attention."""
    window: float
    sparse_topk: float
    """Cached tokens each query attends under sparse attention (1e18 for dense attention)."""
    indexer_flops_per_qk: float
    """Sparse-attention indexer FLOPs per (query token x cached token) per device, at the attention kernels' rate."""
    kv_index_per_token: float
    """Indexer key bytes per token per device (part of `kv_full_per_token`), read for every cached token."""
    kv_full_per_token: float
    kv_swa_per_token: float
    elem_bytes_per_token: float
    ar_per_step: float
    ar_s_per_token: float
    """Seconds one token adds to one all-reduce at full link efficiency (NVLink part plus NIC part)."""
    a2a_per_step: float
    a2a_s_per_token: float
    """Seconds one token adds to one MoE dispatch + combine at full link efficiency."""
    a2a_peers: int
    """Devices each device exchanges tokens with in a MoE all-to-all (ep - 1)."""
    pp: int
    stage_layers: float

    state_bytes: float
    """Fixed per-sequence state on one device: the recurrent state and convolution inputs of linear-attention
    layers, whatever the context length."""
    tile_rows: float = MOE_TILE_ROWS
    """Rows an expert's GEMM computes at least (`expert_tile_rows` of the device, `CPU_TILE_ROWS` on CPUs)."""
    step: Callable[..., float] = field(init=False, repr=False)
    """step(decode, context, prefill=0, prefill_context=0): seconds for one engine step of one attention group,
    `decode` sequences at mean `context` tokens plus `prefill` new tokens whose queries see `prefill_context`
    tokens on average (under speculative decoding each decoding sequence carries its draft tokens too); built
    for this worker by `_stepper`."""
    step_terms: dict[str, float] = field(init=False, repr=False)
    """The coefficients `step` closes over, by name."""

    def __post_init__(self) -> None:
        # `step` runs for every candidate the planner scores, millions of times for a fleet: the products of
        # coefficients and efficiency factors are taken once per worker (a `replace` with other factors takes them
        # again), and the step is a closure over them that leaves out the terms this worker does not have
        # (`step_terms`: those coefficients by name).
        f = self.factors
        mem_s = self.bw_bytes_s * f.mem
        self.__dict__["_step_fixed"] = f.step_ms * 1e-3 + self.pp * self.stage_layers * f.layer_us * 1e-6
        self.__dict__["step"], self.__dict__["step_terms"] = _stepper(self, mem_s)

    def with_factors(self, factors: Factors) -> Worker:
        """This layout with other efficiency factors: `dataclasses.replace(self, factors=factors)` without its
        field-by-field walk, a quarter of a calibration fit's time when every measured worker was rebound so at
        every evaluation."""
        other = object.__new__(Worker)
        other.__dict__.update({name: self.__dict__[name] for name in _WORKER_FIELDS})
        other.factors = factors
        other.__post_init__()
        return other

    def fixed_step_s(self) -> float:
        """Seconds of a step that do not depend on its tokens: the engine's per-step overhead and every layer's."""
        return self._step_fixed

    def kv_bytes(self, context: float) -> float:
        """KV cache and linear-attention state of one sequence of `context` tokens on one device."""
        return (self.kv_full_per_token * context + self.kv_swa_per_token * min(context, self.window)
                + self.state_bytes)

    def max_sequences(self, context: float, spread: float = 0.0) -> int:
        """Sequences of this length that fit the KV cache of one attention group; with `spread`, those n whose
        contexts, `context` each on average, fit it with `spread` tokens more per square root of n (the headroom
        the spread of their sum asks)."""
        per = self.kv_bytes(context)
        if per <= 0:
            return 1 << 30
        room = self.memory.kv_gb * GB
        grow = spread * (self.kv_full_per_token + (self.kv_swa_per_token if context < self.window else 0.0))
        if grow <= 0 or room <= 0:
            return int(room / per)
        root = (math.sqrt(grow * grow + 4 * per * room) - grow) / (2 * per)
        return int(root * root)

    def request_s(self) -> float:
        """Fixed latency before a request's first token: the framework's per-request overhead plus the part that
        grows with the parameters of the routed experts a token passes through."""
        f = self.factors
        return f.request_ms * 1e-3 + self.routed_params_b() * f.expert_latency_ms * 1e-3

    def routed_params_b(self) -> float:
        """Billions of routed-expert parameters one token passes through in the whole model (its active experts in
        every MoE layer; shared experts and dense layers not counted)."""
        return self.active_experts * self.expert_flops_per_row * self.parallel.moe_tp * self.pp / 2 / 1e9

    def token_time(self, decode: float, context: float, prefill: float = 0.0, prefill_context: float = 0.0) -> float:
        """Seconds per output token of each decoding sequence: a step, over the tokens a step emits."""
        return self.step(decode, context, prefill, prefill_context) / self.factors.accept


_WORKER_FIELDS = tuple(f.name for f in fields(Worker) if f.init)
"""What a Worker is built from; the rest (its step and what caches keep on it) follows from these."""


def _stepper(w: Worker, mem_s: float) -> tuple[Callable[..., float], dict[str, float]]:
    """`Worker.step` for one worker. Per device and step: the dense layers (all their weights read, FLOPs
    growing with tokens), the routed experts (the distinct experts some token picked, each a GEMM over its rows,
    a tensor-core tile at least), attention (FLOPs from queries x context under sparse or sliding-window limits;
    decoding reads each sequence's KV cache (under sparse attention the indexer's keys of every token, the
    latents of the top-k only) and linear-attention state, and writes that state back), elementwise passes and
    collectives; pipeline stages in turn. Terms the worker lacks (zero coefficients) are left out, which changes
    no result: they would add exact zeros. Returned with the coefficients it closes over, by name (what
    `infra.perf.vector` prices many steps at once with)."""
    f = w.factors
    gemm_s, attn_flops_s, bw, attn_eff = w.flops_s * f.gemm, w.attn_flops_s, w.bw_bytes_s, f.attn
    width_k, dense_fl, logit_fl, dense_read = 1.0 + f.draft_tokens, w.dense_flops_per_token, \
        w.logit_flops_per_token, w.dense_bytes / mem_s
    experts, experts_local, active, dp = w.experts, w.experts_local, w.active_experts, w.parallel.attention_dp
    miss = math.log1p(-active / experts) if experts else 0.0
    expert_fl, expert_bytes = w.expert_flops_per_row, w.expert_bytes_local
    moe_token = active * w.moe_layers_per_stage * f.moe_ns * 1e-9
    expert_step = experts * w.moe_layers_per_stage * f.expert_step_us * 1e-6
    tile = w.tile_rows
    qk_scale, topk, window = w.prefill_qk_scale, w.sparse_topk, w.window
    sparse = topk < 1e18
    attn_qk, swa_qk, index_qk = w.attn_flops_per_qk, w.swa_flops_per_qk, w.indexer_flops_per_qk
    kv_index, kv_swa, state = w.kv_index_per_token, w.kv_swa_per_token, w.state_bytes
    kv_main = w.kv_full_per_token - kv_index
    elem = w.elem_bytes_per_token / mem_s
    ar = w.ar_per_step
    ar_fixed = ar * f.collective_us * 1e-6 * w.collective_hops
    ar_token = ar * w.ar_s_per_token / f.comm
    a2a = w.a2a_per_step
    a2a_fixed = a2a * 2 * (f.collective_us * 1e-6 * w.collective_hops + w.a2a_peers * f.a2a_peer_us * 1e-6)
    a2a_token = a2a * w.a2a_s_per_token / f.comm
    pp, fixed = w.pp, w._step_fixed

    def step(decode: float, context: float, prefill: float = 0.0, prefill_context: float = 0.0) -> float:
        width = decode * width_k
        tokens = width + prefill
        lin = (tokens * dense_fl + width * logit_fl) / gemm_s
        if lin < dense_read:
            lin = dense_read
        moe = 0.0
        if experts:
            group_tokens = tokens * dp
            touched = experts_local * -math.expm1(group_tokens * miss)
            rows = group_tokens * active * experts_local / experts
            if rows < touched * tile:
                rows = touched * tile
            moe = rows * expert_fl / gemm_s
            if moe < touched * expert_bytes / mem_s:
                moe = touched * expert_bytes / mem_s
            moe += tokens * moe_token
            if prefill > 0:
                moe += expert_step
        pf = prefill * qk_scale
        if sparse:
            qk = width * min(context, topk) + pf * min(prefill_context, topk)
            read = kv_main * min(context, topk)
        else:
            qk = width * context + pf * prefill_context
            read = kv_main * context
        flops = qk * attn_qk
        if swa_qk:
            flops += (width * min(context, window) + pf * min(prefill_context, window)) * swa_qk
        if index_qk:
            flops += (width * context + prefill * prefill_context) * index_qk
        if kv_index:
            read += kv_index * context
        if kv_swa:
            read += kv_swa * min(context, window)
        if state:
            read += state
            read += state
        attn = (flops / attn_flops_s + decode * read / bw) / attn_eff
        comm = 0.0
        if ar:
            comm += ar_fixed + tokens * ar_token
        if a2a:
            comm += a2a_fixed + tokens * a2a_token
        return pp * (lin + moe + attn + tokens * elem + comm) + fixed

    terms = dict(width_k=width_k, dense_fl=dense_fl, logit_fl=logit_fl, gemm_s=gemm_s, dense_read=dense_read,
                 experts=experts, experts_local=experts_local, active=active, dp=dp, miss=miss, expert_fl=expert_fl,
                 expert_bytes=expert_bytes, mem_s=mem_s, moe_token=moe_token, expert_step=expert_step, tile=tile,
                 qk_scale=qk_scale, topk=topk, window=window, attn_qk=attn_qk, swa_qk=swa_qk, index_qk=index_qk,
                 kv_index=kv_index, kv_main=kv_main, kv_swa=kv_swa, state=state, attn_flops_s=attn_flops_s, bw=bw,
                 attn_eff=attn_eff, ar_fixed=ar_fixed, ar_token=ar_token, a2a_fixed=a2a_fixed, a2a_token=a2a_token,
                 elem=elem, pp=pp, fixed=fixed)
    return step, terms


def kv_precision_for(precision: str, kv_precision: str | None, fp8_kv: bool, device: DeviceSpec) -> str:
    if kv_precision:
        return kv_precision
    if precision in ("fp8", "fp4", "int4", "int8") and fp8_kv and "fp8" in device.tflops:
        return "fp8"
    return "bf16"


@dataclass(frozen=True)
class ModelTerms:
    """What `compile_worker` takes from a model whatever the device, precision and layout: parameter counts scaled
    to the published total, attention widths and layer kinds. Taken once per model (`model_terms`): the planner
    compiles the same model for every device and layout it scores."""

    layers: int
    moe_layers: int
    experts: int
    active_experts: int
    hidden: int
    heads: int
    kv_heads: int
    head_dim: int
    attn_params: float
    """Attention parameters of all layers."""
    dense_params: float
    """Dense FFN parameters of the dense layers plus shared experts of the MoE layers."""
    embed_half: float
    """One of the input embedding and the LM head."""
    expert_params: float
    """One routed expert's parameters summed over the MoE layers."""
    kv_width: float
    """Cached elements per token per layer under MLA (the latent plus the rope key, the same on every rank); 0 for
    other attention, whose cache follows the KV heads a rank holds."""
    d_qk: float
    d_v: float
    prefill_qk_scale: float
    swa_layers: int
    full_layers: int
    linear_layers: int
    window: float
    state_recurrent: float
    """Elements of one sequence's recurrent state in one linear-attention layer."""
    state_conv_bytes: float
    """Bytes of one sequence's convolution inputs in one linear-attention layer."""
    index_bytes: float
    """Sparse-attention indexer key bytes per token over all full-attention layers (0 for dense attention)."""
    index_qk: float
    """Indexer FLOPs per (query x cached token) over all full-attention layers, at the bf16 rate."""
    sparse_topk: float


_TERMS: dict[int, tuple[weakref.ref, ModelTerms]] = {}


def model_terms(model: ModelSpec) -> ModelTerms:
    """The model's terms, taken once per model object (catalog models are frozen)."""
    key = id(model)
    hit = _TERMS.get(key)
    if hit is not None and hit[0]() is model:
        return hit[1]
    moe, mla, la = model.moe, model.mla, model.attention
    parts = param_breakdown(layers=model.layers, hidden=model.hidden_size, heads=model.attention_heads,
                            kv_heads=model.kv_heads, head_dim=model.head_dim, ffn=model.ffn_size,
                            vocab=model.vocab_size, tied=False, moe=moe, mla=mla)
    layers = model.layers
    dense_layers = moe.dense_layers if moe else layers
    moe_layers = layers - dense_layers if moe else 0
    experts = moe.experts if moe else 0
    computed_total = (layers * parts["attn"] + dense_layers * parts["dense_ffn"] + parts["embed"]
                      + moe_layers * (parts["shared"] + parts["router"] + experts * parts["expert"]))
    # The catalog's published total is the authority; shapes miss biases, norms and vision towers.
    scale = model.params_total_b * 1e9 / computed_total if computed_total else 1.0
    if mla is not None:
        kv_width = d_qk = float(mla.kv_lora_rank + mla.qk_rope_head_dim)
        d_v = float(mla.kv_lora_rank)
        prefill_qk_scale = (mla.qk_nope_head_dim + mla.qk_rope_head_dim + mla.v_head_dim) / (d_qk + d_v)
    else:
        kv_width, d_qk, d_v, prefill_qk_scale = 0.0, float(model.head_dim), float(model.head_dim), 1.0
    swa_layers, linear_layers = la.sliding_window_layers, la.linear_attention_layers
    full_layers = layers - swa_layers - linear_layers
    terms = ModelTerms(
        layers=layers, moe_layers=moe_layers, experts=experts, active_experts=moe.active_experts if moe else 0,
        hidden=model.hidden_size, heads=model.attention_heads, kv_heads=model.kv_heads, head_dim=model.head_dim,
        attn_params=layers * parts["attn"] * scale,
        dense_params=(dense_layers * parts["dense_ffn"] + moe_layers * parts["shared"]) * scale,
        embed_half=parts["embed"] / 2 * scale, expert_params=moe_layers * parts["expert"] * scale,
        kv_width=kv_width, d_qk=d_qk, d_v=d_v, prefill_qk_scale=prefill_qk_scale,
        swa_layers=swa_layers, full_layers=full_layers, linear_layers=linear_layers,
        window=float(la.sliding_window or 0) if swa_layers else 0.0,
        state_recurrent=float(la.linear_value_heads * la.linear_key_dim * la.linear_value_dim),
        state_conv_bytes=float((la.linear_conv_kernel - 1) * (2 * la.linear_key_heads * la.linear_key_dim
                                                              + la.linear_value_heads * la.linear_value_dim) * 2),
        # The sparse-attention indexer is replicated on every tensor-parallel rank (vLLM and SGLang build it from
        # replicated linears) and scores in FP8: its keys (plus an FP32 scale per 128) are cached on every rank.
        index_bytes=full_layers * (la.indexer_head_dim + 4 * math.ceil(la.indexer_head_dim / 128))
        if la.sparse_topk else 0.0,
        index_qk=2 * la.indexer_heads * la.indexer_head_dim * full_layers if la.sparse_topk else 0.0,
        sparse_topk=float(la.sparse_topk or 1e18),
    )
    _TERMS[key] = (weakref.ref(model, lambda _, key=key: _TERMS.pop(key, None)), terms)
    return terms


def expert_tile_rows(flops_per_param_s: float, bytes_s: float) -> float:
    """Rows a tuned grouped GEMM pads an expert to on an accelerator computing `flops_per_param_s` (peak FLOPs x
    bytes per weight) and reading `bytes_s`: the rows at which a tile's FLOPs (2 per weight and row) take as long
    as reading its weights, within [`MMA_MIN_ROWS`, `MOE_TILE_ROWS`]. Any tile up to that many rows prices the same
    (the read binds), so the engine's choice among powers of two need not be modelled."""
    return min(MOE_TILE_ROWS, max(MMA_MIN_ROWS, flops_per_param_s / (2 * bytes_s)))


def compile_worker(model: ModelSpec, device: DeviceSpec, precision: str, parallel: Parallel, factors: Factors,
                   *, kv_precision: str = "bf16", memory_utilization: float = 0.9, max_num_tokens: int = 8192,
                   device_memory_gb: float | None = None, state_element_bytes: float = 2.0) -> Worker:
    """Per-device coefficients for `model` on `device` laid out as `parallel` (shape checks are the caller's)."""
    tp, pp, ep, moe_tp = parallel.tp, parallel.pp, parallel.ep, parallel.moe_tp
    m = model_terms(model)
    moe = m.experts > 0
    layers, moe_layers, experts = m.layers, m.moe_layers, m.experts

    tflops = device.tflops
    w = BYTES_PER_PARAM.get(precision, 2.0)
    w_attn = w if precision not in ("fp4", "int4") else (1.0 if "fp8" in tflops else 2.0)
    fmt = compute_precision(precision, device,
                            model.native_activations if precision == model.native_precision else None)

    attn_params = m.attn_params / (tp * pp)
    dense_params = m.dense_params / (tp * pp)
    lm_head = m.embed_half / tp
    dense_bytes = attn_params * w_attn + dense_params * w + lm_head * 2.0
    expert_params_local = m.expert_params / (moe_tp * pp) if moe else 0.0
    experts_local = experts / ep if moe else 0.0
    weights = dense_bytes + lm_head * 2.0 + experts_local * expert_params_local * w

    kv_b = 1.0 if kv_precision in ("fp8", "int8") else 2.0
    per_layer = m.kv_width * kv_b if m.kv_width else 2 * max(m.kv_heads / tp, 1.0) * m.head_dim * kv_b
    kv_swa = m.swa_layers * per_layer / pp
    kv_index = m.index_bytes / pp
    kv_full = m.full_layers * per_layer / pp + kv_index
    state = m.linear_layers / pp * (m.state_recurrent * state_element_bytes + m.state_conv_bytes) / tp
    bf16 = peak_tflops(device, "bf16")
    fp8_speedup = peak_tflops(device, "fp8") / bf16 if "fp8" in tflops else 1.0
    index_qk = m.index_qk / pp / fp8_speedup
    heads_dev = m.heads / tp
    attn_qk = 2 * heads_dev * (m.d_qk + m.d_v) * m.full_layers / pp
    swa_qk = 2 * heads_dev * (m.d_qk + m.d_v) * m.swa_layers / pp

    device_gb = device_memory_gb if device_memory_gb is not None else device.memory_gb.value
    usable = device_gb * GIB_PER_GB * memory_utilization
    activations = (max_num_tokens * m.hidden * 2 * ACTIVATION_PASSES / max(tp, 1)
                   + RUNTIME_OVERHEAD_BYTES) / GB
    kv_gb = usable - weights / GB - activations
    kv_tokens = int(kv_gb * GB / (kv_full + kv_swa)) if kv_gb > 0 and (kv_full + kv_swa) > 0 else 0
    memory = MemoryFit(device_gb, usable, weights / GB, activations, kv_gb, kv_full + kv_swa, max(kv_tokens, 0))

    # Collectives are hierarchical (NCCL, HCCL): inside a scale-up domain over NVLink/HCCS (PCIe cards: inside
    # their server), and across domains only the 1/g share each device owns goes over its NIC.
    net = fabric(device)
    domain, scale_up = net.devices, net.link_bytes_s
    nic = NIC_GBS * GB
    group = max(tp, moe_tp)
    local = min(group, domain)
    nodes = math.ceil(group / domain)
    ar_s = 2 * (local - 1) / local * m.hidden * 2 / scale_up if local > 1 else 0.0
    if nodes > 1:
        ar_s += 2 * (nodes - 1) / nodes * m.hidden * 2 / (local * nic)
    ar_per_step = 2 * layers / pp if group > 1 else 0.0
    # Expert parallelism sends each token to the devices holding its experts (dispatch in fp8, combine in 16-bit);
    # with k experts over ep devices a token reaches (ep - 1)(1 - (1 - 1/ep)^k) other devices on average, the
    # share outside the token's domain over the NIC. Expert tensor parallelism needs no all-to-all: its reduction
    # rides on the tensor-parallel all-reduce.
    a2a_per_step = moe_layers / pp if moe and ep > 1 else 0.0
    a2a_s = 0.0
    if moe and ep > 1:
        remote = (ep - 1) * (1 - (1 - 1 / ep) ** m.active_experts)
        in_domain = (min(ep, domain) - 1) / (ep - 1)
        a2a_s = remote * m.hidden * 3 * (in_domain / scale_up + (1 - in_domain) / nic)
    within = parallel.devices <= domain
    return Worker(
        parallel=parallel, factors=factors, memory=memory,
        flops_s=peak_tflops(device, fmt) * 1e12, attn_flops_s=bf16 * 1e12,
        bw_bytes_s=device.memory_bandwidth_tbps.value * 1e12,
        collective_hops=net.hops if within else float(max(COLLECTIVE_HOPS_ACROSS_NODES, net.hops)),
        dense_bytes=dense_bytes,
        dense_flops_per_token=2 * (attn_params + dense_params),
        logit_flops_per_token=2 * lm_head,
        expert_bytes_local=expert_params_local * w,
        expert_flops_per_row=2 * expert_params_local,
        experts=experts, experts_local=experts_local, moe_layers_per_stage=moe_layers / pp,
        active_experts=m.active_experts, attn_flops_per_qk=attn_qk, swa_flops_per_qk=swa_qk,
        prefill_qk_scale=m.prefill_qk_scale, window=m.window or 1e18,
        sparse_topk=m.sparse_topk, indexer_flops_per_qk=index_qk, kv_index_per_token=kv_index,
        kv_full_per_token=kv_full, kv_swa_per_token=kv_swa, state_bytes=state,
        elem_bytes_per_token=ELEMENTWISE_PASSES * m.hidden * 2 * layers / pp,
        ar_per_step=ar_per_step, ar_s_per_token=ar_s, a2a_per_step=a2a_per_step, a2a_s_per_token=a2a_s,
        a2a_peers=ep - 1 if moe else 0,
        pp=pp, stage_layers=layers / pp,
        tile_rows=(CPU_TILE_ROWS if device.vendor == "cpu" else
                   expert_tile_rows(peak_tflops(device, fmt) * 1e12 * w, device.memory_bandwidth_tbps.value * 1e12)),
    )
