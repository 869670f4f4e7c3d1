"""Roofline sanity of the performance model: how many of its predictions fall outside what physics allows.

    python benchmarks/sanity.py [--json] [--quick]

For every catalog LLM on every catalog device some LLM engine runs on (vLLM where it runs, else the vendor's build),
at the smallest tensor-parallel size whose weights fit and the next one that also does (experts spread whole over
the devices where that size cannot split them), prompts of 128, 1k, 4k,
16k and 64k tokens (where the model's context holds them) with answers of 128 and 1k tokens, and 1, 8, 64 and the
most clients the model's KV cache holds, the closed-loop estimate `infra estimate` gives (the deployment built from
its case, priced by `infra.perf.estimate`) is held against bounds derived here from the catalog's figures alone:

- prefill: a prompt cannot be prefilled faster than its FLOPs (matmul parameters x 2 x tokens, causal attention
  over the pairs each layer sees) at peak compute, nor faster than reading the weights it touches (the experts
  its tokens pick) and writing its KV cache at peak bandwidth; TTFT at any load is at least that. With one client
  it should also be at most K_PREFILL times that, plus K_COMM times its tensor-parallel all-reduces (and
  expert-parallel all-to-all, where experts are spread whole over the devices) at link speed, plus a fixed
  allowance (request handling, launches and collective latencies per layer, two more per MoE layer under expert
  parallelism);
- decode: a step cannot be faster than reading the dense weights, the experts its batch picks and the KV cache
  of its sequences (nor than its FLOPs) at peak; TPOT at the model's mean decode batch is at least that, and at
  most K_DECODE times it plus a per-step allowance plus the share of other clients' prefills riding in its steps;
- throughput: output tokens/s at b clients cannot beat b sequences stepping at the decode bound, nor a request's
  whole FLOPs at peak compute;
- KV capacity: the sequences the model says fit at prompt + answer tokens cannot exceed the device memory left
  by the weights over one sequence's cache, and should not fall below KV_LOW_SHARE of what is left after the
  engine's usual reserve (KV_RESERVE_SHARE of memory plus KV_RESERVE_BYTES per device).

Work and bytes the engines replicate over tensor-parallel ranks count once per rank, as the engines (and the model)
lay them out: KV heads when tp exceeds them, the MLA latent, the sparse-attention indexer's keys and scores. Peak
rates are the catalog's spec-sheet figures (dense tensor FLOPS at the format the GEMMs run in, HBM bandwidth), so
a lower bound is one no engine can beat, not one engines reach.

Prints, per model family and device vendor, the share of points outside the bounds, the worst offenders (one per
model and check) and the totals; `--json` prints one object instead (`points`, `below_roofline`, `above_plausible`,
`kv_out_of_bounds`, `worst`, `seconds`, and the breakdowns). `--quick` runs a small subset in a few seconds.
A point below a lower bound is physically impossible; one above the plausible bound is slower than any production
engine runs, which may be the model or the allowance: the report gives both the prediction and the bound.

`--measured CSV` (rows in the silicon_calibration.csv format) holds the bounds against real engines first: each
aggregated row measured with at most `MEASURED_CLIENTS` clients, its mean TTFT and TPOT against the same bounds
for its layout, the TTFT ceiling allowing every other client's prompt ahead of it (a closed loop's worst case, as
its first wave is) and the step in flight, the TPOT floor a step per decoded token (or per token and draft
token, where the row's recipe decoded speculatively). A bound that measured engines break is the bound's fault,
not the model's; `--json` adds `measured`.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import time
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from infra.catalog.hf import count_params, param_breakdown  # noqa: E402
from infra.catalog.loader import Catalog, load_catalog  # noqa: E402
from infra.catalog.schema import BYTES_PER_PARAM, DeviceSpec, FrameworkSpec, ModelSpec  # noqa: E402
from infra.errors import InfraError  # noqa: E402
from infra.perf.arch import kv_precision_for  # noqa: E402
from infra.perf.cases import EstimateCase  # noqa: E402
from infra.perf.estimate import Compiled, compile_deployment, runs_on  # noqa: E402
from infra.perf.rows import load_rows, to_case  # noqa: E402

PROMPTS = (128, 1024, 4096, 16384, 65536)
OUTPUTS = (128, 1024)
BATCHES = (1, 8, 64)
"""Clients of the closed loop; the most the model's KV cache holds at prompt + answer is added to these."""
TP_SIZES = (1, 2, 4, 8, 16, 32, 64)
"""Tensor-parallel sizes tried, with every divisor of the model's attention heads up to the largest of them
(Llama-4's 40 heads split 40 ways, not 16)."""
FRAMEWORKS = ("vllm", "vllm-ascend", "vllm-mlu", "vllm-kunlun", "vllm-metax", "vllm-fl", "sglang", "lmdeploy",
              "trtllm", "mindie")
"""Engine per device, first that runs there: upstream vLLM, else the vendor's vLLM build, else any."""
FALLBACK_PRECISIONS = ("bf16", "fp16")
"""Precisions tried, in turn, where the engine does not serve the one a model is published in."""

K_PREFILL = 8.0
"""Plausible prefill ceiling over the roofline: no production engine runs a prompt of 128+ tokens below ~12% of
its compute (or, for short prompts, bandwidth) roofline; measured vLLM/SGLang prefills reach 40-70% MFU."""
K_DECODE = 5.0
"""Plausible decode ceiling over the roofline: decode kernels stream weights and KV at 50-80% of HBM bandwidth even
at batch 1; below 20% an engine would be dominated by something this allowance should name."""
TTFT_FIXED_S = 0.050
"""Per-request time outside the prefill itself: HTTP, tokenisation, admission, sampling, detokenisation."""
MOE_REQUEST_LAYER_S = 2.5e-3
"""Per MoE layer, once per request: what engines measurably add to a MoE model's first token beyond
`TTFT_FIXED_S` (prefill runs uncaptured, and expert-parallel dispatch such as DeepEP's normal mode has the host
wait for per-expert token counts in every MoE layer, which its README notes rules out CUDA graphs). Measured, not
derived: DeepSeek-R1 and Qwen3-235B-A22B at up to `MEASURED_CLIENTS` clients on SGLang, TensorRT-LLM and vLLM take
a median 0.8-2.4 ms per MoE layer more than the ceiling without it, per engine and device (`--measured` prints the
figures); dense models' rows sit at 0.4-0.6 of that ceiling. The largest such median, rounded up."""
STEP_FIXED_S = 0.005
"""Per-step time outside the kernels: scheduling, input preparation, sampling (vLLM V1 and SGLang: 0.5-3 ms)."""
LAYER_S = 50e-6
"""Per layer and step: a dozen kernel launches and their minimum durations, uncaptured (prefill runs eagerly)."""
TP_COLLECTIVE_S = 30e-6
"""Per all-reduce (two per layer) inside a scale-up domain: NCCL's small-message latency is 10-30 us."""
CROSS_NODE_COLLECTIVE_S = 150e-6
"""Per all-reduce (two per layer) once tensor parallelism leaves the scale-up domain: RDMA round trips."""
K_COMM = 3.0
"""Plausible ceiling on tensor-parallel all-reduce time over its bytes at link speed: NCCL/HCCL rings reach 60-85%
of the link for the megabyte messages of a prefill; a third is already poor."""
NIC_GBS = 50.0
"""Per-device scale-out link, GB/s each way, once tensor parallelism leaves the server: one 400 Gb/s NIC. Not a
catalog figure, so it enters only the plausible ceiling, never a lower bound."""
CHUNK_TOKENS = 8192
"""Prompt tokens per engine step (the estimate's default max_num_tokens): a longer prompt pays the per-step and
per-layer allowances once per chunk."""
KV_OVER_TOLERANCE = 0.02
"""Relative slack on the KV-capacity ceiling: device figures are rounded, the model's accounting is per device."""
KV_LOW_SHARE = 0.3
"""A KV capacity under this share of what the memory left after the engine's reserve holds needs a reason."""
KV_RESERVE_SHARE = 0.10
"""Memory an engine leaves unused by default (vLLM's gpu_memory_utilization 0.9)."""
KV_RESERVE_BYTES = 4e9
"""Per device: CUDA/CANN context, CUDA graphs, activation and sampling buffers (vLLM reports 2-5 GB)."""
WORST = 10
MEASURED_CLIENTS = 4
"""Clients up to which a measured row is held against the single-request bounds (with the others' prompts allowed
ahead): beyond, queueing is most of its TTFT."""


# ---------------------------------------------------------------------------------------------------------------
# Bounds from first principles


def causal_pairs(tokens: float, window: float = math.inf) -> float:
    """(query, key) pairs causal attention computes over a prompt of `tokens`: query i sees min(i, window) keys."""
    if tokens <= window:
        return tokens * (tokens + 1) / 2
    return window * (window + 1) / 2 + (tokens - window) * window


def mean_capped(start: float, count: float, cap: float) -> float:
    """Mean of min(start + j, cap) over j = 0 .. count - 1: the context a windowed (or top-k) layer attends to,
    averaged over a request's decode steps. A closed form, since min() is concave and its value at the mean
    context would overstate the mean (a lower bound must not)."""
    n = max(int(count), 1)
    if start + n - 1 <= cap:
        return start + (n - 1) / 2
    if start >= cap:
        return cap
    below = math.ceil(cap - start)  # the steps j < below are those with start + j < cap
    total = below * start + below * (below - 1) / 2 + (n - below) * cap
    return total / n


@dataclass(frozen=True)
class Physics:
    """One replica (tp devices) of one model, precision and KV format on one device, reduced to what bounds its
    speed: peak rates summed over its devices, bytes and FLOPs per token. Everything is a replica total."""

    tp: int
    flops: float
    """Peak dense tensor FLOP/s of the replica in the format its GEMMs run in."""
    attn_flops: float
    """Peak FLOP/s for attention (16-bit, or 8-bit where the KV cache is)."""
    index_flops: float
    """Peak FLOP/s for a sparse-attention indexer (8-bit where the device has it)."""
    bandwidth: float
    """Peak memory bandwidth of the replica, B/s."""
    memory: float
    """Device memory of the replica, bytes."""
    weight_bytes: float
    """All weights at the precision's bytes per parameter (the fewest a checkpoint in that format can take)."""
    bytes_per_param: float
    body_params: float
    """Matmul parameters one token passes through, less the embedding (a row gather) and the LM head."""
    lm_head_params: float
    """LM-head parameters: logits are computed for the last prompt token and every decoded token only."""
    dense_params: float
    """Matmul parameters every step reads whatever its tokens pick: `body_params` less the routed experts."""
    expert_params: float
    """Parameters of one routed expert summed over the MoE layers (0 for a dense model)."""
    experts: int
    active_experts: int
    layers: int
    attn_pair_flops: float
    """FLOPs per (query, key) pair summed over the full-attention layers (QK^T and PV, every query head)."""
    decode_pair_flops: float
    """The same for a decoding query: under MLA the absorbed form (every head against the cached latent), which
    needs no decompression of the cache; the decompressed form's cheaper pairs cost an up-projection of every
    cached token per step, dearer still. Equal to `attn_pair_flops` elsewhere."""
    swa_pair_flops: float
    """The same over the sliding-window layers."""
    window: float
    sparse_topk: float
    """Keys each query attends under sparse attention (inf for dense attention)."""
    index_pair_flops: float
    """Sparse-attention indexer FLOPs per (query, cached token) pair over its layers and every rank: the engines
    build the indexer from replicated linears, so each tensor-parallel rank scores every pair itself."""
    kv_full: float
    """KV bytes per token of the full-attention layers as the engines store it (replicated where they do)."""
    kv_index: float
    """Indexer key bytes per token (sparse attention), read for every cached token."""
    kv_swa: float
    """KV bytes per token of the sliding-window layers (held for the window only)."""
    state: float
    """Fixed bytes per sequence of linear-attention layers (recurrent state and convolution inputs)."""
    per_layer_s: float = 0.0
    """Launch and collective-latency allowance per layer and step (part of the plausible ceiling only)."""
    moe_request_s: float = 0.0
    """Per-request allowance of the MoE layers (`MOE_REQUEST_LAYER_S` each; part of the plausible ceiling only)."""
    comm_s_per_token: float = 0.0
    """Seconds one token's tensor-parallel all-reduces (two per layer, ring, 16-bit) take at link speed (part of the
    plausible ceiling only: the NIC speed beyond a server is an assumption, not a catalog figure)."""

    def touched(self, tokens: float) -> float:
        """Distinct routed experts per MoE layer that `tokens` tokens pick, each picking `active_experts` of
        `experts` evenly (what load balancing trains routers towards): E (1 - (1 - k/E)^n), at least k."""
        if not self.experts:
            return 0.0
        n = max(tokens, 1.0)
        return self.experts * -math.expm1(n * math.log1p(-self.active_experts / self.experts))

    def prefill_parts(self, prompt: float) -> tuple[float, float]:
        """(compute seconds, memory seconds) of prefilling one prompt of `prompt` tokens at peak."""
        gemm = (2 * self.body_params * prompt + 2 * self.lm_head_params) / self.flops
        attn = (causal_pairs(prompt, self.sparse_topk) * self.attn_pair_flops
                + causal_pairs(prompt, self.window) * self.swa_pair_flops) / self.attn_flops
        index = causal_pairs(prompt) * self.index_pair_flops / self.index_flops
        read = (self.dense_params + self.lm_head_params + self.touched(prompt) * self.expert_params) \
            * self.bytes_per_param
        write = prompt * (self.kv_full + self.kv_index) + min(prompt, self.window) * self.kv_swa + self.state
        return gemm + attn + index, (read + write) / self.bandwidth

    def prefill_s(self, prompt: float) -> float:
        """Lower bound on the seconds to prefill a prompt: the larger of compute and memory time."""
        return max(self.prefill_parts(prompt))

    def decode_seq_compute_s(self, prompt: float, output: float) -> float:
        """Compute seconds one sequence adds to a decode step, averaged over its decode steps."""
        ctx_topk = mean_capped(prompt, output - 1, self.sparse_topk)
        ctx_swa = mean_capped(prompt, output - 1, self.window)
        ctx = mean_capped(prompt, output - 1, math.inf)
        return (2 * (self.body_params + self.lm_head_params) / self.flops
                + (ctx_topk * self.decode_pair_flops + ctx_swa * self.swa_pair_flops) / self.attn_flops
                + ctx * self.index_pair_flops / self.index_flops)

    def decode_s(self, batch: float, prompt: float, output: float) -> float:
        """Lower bound on the seconds of one decode step of `batch` sequences, averaged over a request's decode
        (context from prompt to prompt + output - 2): the larger of reading the dense weights, the experts the
        batch picks and every sequence's cache (linear-attention state read and written back), and its FLOPs."""
        b = max(batch, 1.0)
        ctx = mean_capped(prompt, output - 1, math.inf)
        kv = (self.kv_full * mean_capped(prompt, output - 1, self.sparse_topk) + self.kv_index * ctx
              + self.kv_swa * mean_capped(prompt, output - 1, self.window) + 2 * self.state)
        weights = (self.dense_params + self.lm_head_params + self.touched(b) * self.expert_params) \
            * self.bytes_per_param
        return max((weights + b * kv) / self.bandwidth, b * self.decode_seq_compute_s(prompt, output))

    def seq_bytes(self, context: float) -> float:
        """Cache bytes of one sequence of `context` tokens."""
        return (self.kv_full + self.kv_index) * context + self.kv_swa * min(context, self.window) + self.state

    def kv_capacity(self, context: float, reserve: bool = False) -> float:
        """Sequences of `context` tokens whose caches fit beside the weights (after the engine's usual reserve
        when `reserve`)."""
        memory = self.memory * (1 - KV_RESERVE_SHARE) - self.tp * KV_RESERVE_BYTES if reserve else self.memory
        return max(memory - self.weight_bytes, 0.0) / self.seq_bytes(context)

    def ttft_ceiling(self, prompt: float) -> float:
        """Slowest plausible TTFT of one client with nothing queued."""
        chunks = math.ceil(prompt / CHUNK_TOKENS)
        return (K_PREFILL * self.prefill_s(prompt) + K_COMM * prompt * self.comm_s_per_token + TTFT_FIXED_S
                + self.moe_request_s + chunks * self.layers * self.per_layer_s)

    def tpot_ceiling(self, clients: float, prompt: float, output: float) -> float:
        """Slowest plausible TPOT with `clients` in a closed loop: K_DECODE x the decode step at that batch plus
        the per-step allowance, and the other clients' prefills that ride in the steps of this one's decode (each
        client comes back at most once while it decodes, so at most clients - 1 prompts over output - 1 steps)."""
        chunks = math.ceil(prompt / CHUNK_TOKENS)
        step = STEP_FIXED_S + self.layers * self.per_layer_s
        others = (clients - 1) / max(output - 1, 1)
        prefill = K_PREFILL * self.prefill_s(prompt) + K_COMM * prompt * self.comm_s_per_token + chunks * step
        return (K_DECODE * self.decode_s(clients, prompt, output) + K_COMM * clients * self.comm_s_per_token + step
                + others * prefill)

    def tokens_ceiling(self, clients: float, prompt: float, output: float) -> float:
        """Most output tokens/s `clients` clients can get: every one decoding in every step at the decode bound
        (its first token comes from the prefill, hence output / (output - 1)), and no more requests than the
        replica's compute finishes (a prompt's FLOPs and those of its decode steps at peak)."""
        decode = clients / self.decode_s(clients, prompt, output) * output / max(output - 1, 1)
        request = self.prefill_parts(prompt)[0] + (output - 1) * self.decode_seq_compute_s(prompt, output)
        return min(decode, output / request)


def gemm_peak(device: DeviceSpec, precision: str) -> float:
    """Peak TFLOPS of the format the GEMMs can run in: the weights' own where the device has tensor cores for it,
    except weight-only int4, whose activations (like fp4's without fp4 tensor cores) stay 16-bit."""
    sixteen = device.tflops.get("bf16") or device.tflops.get("fp16")
    if precision in device.tflops and precision != "int4":
        return device.tflops[precision].value
    return sixteen.value if sixteen else max(f.value for f in device.tflops.values())


def _params(model: ModelSpec) -> dict[str, float]:
    """Matmul parameters of a model from the catalog's counts, checked against its layer shapes.

    The catalog's parameter counts include the embedding (a gather, no FLOPs) and sometimes a vision tower the text
    never passes through; the shapes miss biases and norms, and describe hybrid or pruned layer stacks only
    roughly. A lower bound must not overstate the work, so the smaller of the two is taken. Tied embeddings are
    inferred from which count the shapes match."""
    shape = dict(layers=model.layers, hidden=model.hidden_size, heads=model.attention_heads,
                 kv_heads=model.kv_heads, head_dim=model.head_dim, ffn=model.ffn_size, vocab=model.vocab_size,
                 moe=model.moe, mla=model.mla)
    untied, tied = count_params(**shape, tied=False), count_params(**shape, tied=True)
    is_tied = abs(tied[0] - model.params_total_b) < abs(untied[0] - model.params_total_b)
    shape_total, shape_active = (tied if is_tied else untied)
    embed = float(model.vocab_size * model.hidden_size)
    embeddings = embed * (1 if is_tied else 2)
    body = min(model.params_active_b * 1e9, shape_active * 1e9) - embeddings
    expert = 0.0
    if model.moe is not None:
        parts = param_breakdown(**shape, tied=is_tied)
        scale = min(1.0, model.params_total_b / shape_total)
        expert = parts["expert"] * (model.layers - model.moe.dense_layers) * scale
    dense = max(body - (model.moe.active_experts if model.moe else 0) * expert, 0.0)
    return {"body": max(body, 0.0), "lm_head": embed, "dense": dense, "expert": expert}


def physics(model: ModelSpec, device: DeviceSpec, framework: FrameworkSpec, precision: str, tp: int,
            ep: int = 1) -> Physics:
    """The bounds' inputs for a replica of `tp` devices (routed experts spread whole over `ep` of them). The KV
    cache format is the deployment's (8-bit where the weights are 8-bit or less and the engine and device support
    it, as `infra estimate` deploys it)."""
    kv = kv_precision_for(precision, None, "fp8_kv_cache" in framework.features, device)
    kv_b = 1.0 if kv in ("fp8", "int8") else 2.0
    p = _params(model)
    la = model.attention
    full_layers = model.layers - la.sliding_window_layers - la.linear_attention_layers
    if model.mla is not None:
        # The latent has no heads to split: every tensor-parallel rank caches all of it.
        per_layer = (model.mla.kv_lora_rank + model.mla.qk_rope_head_dim) * kv_b * tp
        d_qk = model.mla.qk_nope_head_dim + model.mla.qk_rope_head_dim
        d_v = model.mla.v_head_dim
    else:
        # A rank holds at least one KV head: past kv_heads ranks, heads are replicated.
        per_layer = 2 * model.head_dim * max(model.kv_heads, tp) * kv_b
        d_qk = d_v = model.head_dim
    # The decompressed form of MLA (192-wide keys, 128-wide values per head) is its cheapest in FLOPs for a prompt,
    # whose own tokens are decompressed anyway; a decoding query is cheapest against the latent itself.
    pair = 2 * model.attention_heads * (d_qk + d_v)
    decode_pair = (2 * model.attention_heads * (2 * model.mla.kv_lora_rank + model.mla.qk_rope_head_dim)
                   if model.mla is not None else pair)
    sparse = la.sparse_topk is not None
    index_key = la.indexer_head_dim + 4 * math.ceil(la.indexer_head_dim / 128)  # fp8 keys, fp32 scale per 128
    state = la.linear_attention_layers * (
        la.linear_value_heads * la.linear_key_dim * la.linear_value_dim * framework.linear_state_bytes
        + (la.linear_conv_kernel - 1) * (2 * la.linear_key_heads * la.linear_key_dim
                                         + la.linear_value_heads * la.linear_value_dim) * 2)
    sixteen = (device.tflops.get("bf16") or device.tflops.get("fp16") or max(device.tflops.values(),
                                                                              key=lambda f: f.value)).value
    fp8 = device.tflops["fp8"].value if "fp8" in device.tflops else sixteen
    # Inside a server the devices talk over the scale-up link (NVLink, HCCS, or PCIe where the domain is one
    # device); beyond it over the NIC.
    in_server = tp <= max(device.interconnect.domain_size.value, device.devices_per_node.value)
    scale_up = device.interconnect.bandwidth_gbs.value / 2  # the catalog quotes both directions
    link = scale_up if in_server else min(scale_up, NIC_GBS)
    collective = 0.0 if tp == 1 else (TP_COLLECTIVE_S if in_server else CROSS_NODE_COLLECTIVE_S)
    comm = 2 * model.layers * 2 * (tp - 1) / tp * model.hidden_size * 2 / (link * 1e9)
    moe_layers = moe_layer_count(model) if ep > 1 else 0
    if moe_layers:
        # Expert parallelism sends each token to the devices holding the experts it picked (8-bit out, 16-bit back):
        # k picks over ep devices reach (ep - 1)(1 - (1 - 1/ep)^k) others on average, in each MoE layer.
        remote = (ep - 1) * (1 - (1 - 1 / ep) ** model.moe.active_experts)
        comm += moe_layers * remote * model.hidden_size * 3 / (link * 1e9)
    bpp = BYTES_PER_PARAM[precision]
    return Physics(
        tp=tp, flops=tp * gemm_peak(device, precision) * 1e12,
        attn_flops=tp * (max(sixteen, fp8) if kv_b == 1 else sixteen) * 1e12, index_flops=tp * fp8 * 1e12,
        bandwidth=tp * device.memory_bandwidth_tbps.value * 1e12, memory=tp * device.memory_gb.value * 2**30,
        weight_bytes=model.params_total_b * 1e9 * bpp, bytes_per_param=bpp,
        body_params=p["body"], lm_head_params=p["lm_head"], dense_params=p["dense"], expert_params=p["expert"],
        experts=model.moe.experts if model.moe else 0, active_experts=model.moe.active_experts if model.moe else 0,
        layers=model.layers, attn_pair_flops=pair * full_layers,
        decode_pair_flops=decode_pair * full_layers, swa_pair_flops=pair * la.sliding_window_layers,
        window=float(la.sliding_window) if la.sliding_window_layers and la.sliding_window else math.inf,
        sparse_topk=float(la.sparse_topk) if sparse else math.inf,
        index_pair_flops=2 * la.indexer_heads * la.indexer_head_dim * full_layers * tp if sparse else 0.0,
        kv_full=per_layer * full_layers, kv_index=index_key * full_layers * tp if sparse else 0.0,
        kv_swa=per_layer * la.sliding_window_layers, state=float(state),
        per_layer_s=LAYER_S + 2 * collective * (1 + moe_layers / model.layers), comm_s_per_token=comm,
        moe_request_s=MOE_REQUEST_LAYER_S * moe_layer_count(model),
    )


def moe_layer_count(model: ModelSpec) -> int:
    """Layers with routed experts (0 for a dense model)."""
    return model.layers - model.moe.dense_layers if model.moe is not None else 0


# ---------------------------------------------------------------------------------------------------------------
# The grid and the checks


def family(model: ModelSpec) -> str:
    if model.mla is not None:
        return "MLA"
    if model.attention.linear_attention_layers:
        return "hybrid (linear attention)"
    if model.moe is not None:
        return "MoE"
    return "dense large (>=30B)" if model.params_total_b >= 30 else "dense small (<30B)"


def framework_for(device: DeviceSpec, catalog: Catalog) -> FrameworkSpec | None:
    for name in FRAMEWORKS:
        fw = catalog.frameworks.get(name)
        if fw is not None and "llm" in fw.kinds and runs_on(fw, device):
            return fw
    return None


@dataclass
class Layout:
    model: ModelSpec
    device: DeviceSpec
    framework: FrameworkSpec
    precision: str
    tp: int
    ep: int
    compiled: Compiled
    phys: Physics

    def case(self, isl: int, osl: int, clients: int) -> EstimateCase:
        return EstimateCase(model=self.model.name, device=self.device.name, framework=self.framework.name,
                            precision=self.precision, tp=self.tp, ep=self.ep, isl=isl, osl=osl, concurrency=clients)

    def label(self) -> str:
        return f"{self.framework.name} {self.precision} tp{self.tp}" + (f" ep{self.ep}" if self.ep > 1 else "")


def layouts(model: ModelSpec, device: DeviceSpec, catalog: Catalog) -> tuple[list[Layout], str]:
    """The smallest tensor-parallel layout whose weights fit and the next larger one that does, as `infra
    estimate` builds them (its default precision: the published one where the device and engine take it, else
    bf16); ([], why) when none does. A MoE model whose experts a tensor-parallel size cannot split (Llama-4's
    8192-wide experts 40 ways) spreads them whole over the same devices instead (expert parallelism, as vLLM's
    --enable-expert-parallel does)."""
    fw = framework_for(device, catalog)
    if fw is None:
        return [], "no engine"
    limit = device.tp_limit(fw.name)
    why = "weights fit no layout"
    for precision in (None, *FALLBACK_PRECISIONS):
        found: list[Layout] = []
        sizes = sorted(set(TP_SIZES) | {t for t in range(1, max(TP_SIZES) + 1) if model.attention_heads % t == 0})
        for tp in sizes:
            if limit is not None and limit.max_tp is not None and tp > limit.max_tp:
                break
            built = None
            for ep in (1, tp) if model.moe is not None and 1 < tp <= model.moe.experts else (1,):
                case = EstimateCase(model=model.name, device=device.name, framework=fw.name, precision=precision,
                                    tp=tp, ep=ep, isl=1, osl=1, concurrency=1)
                try:
                    dep = case.deployment(catalog)
                    built = (ep, dep, compile_deployment(dep, catalog))
                    break
                except InfraError as exc:
                    why = str(exc.problems[0])
            if built is None:
                continue
            ep, dep, compiled = built
            found.append(Layout(model, device, fw, dep.precision, tp, ep, compiled,
                                physics(model, device, fw, dep.precision, tp, ep)))
            if len(found) == 2:
                break
        if found:
            return found, ""
    return [], why


@dataclass
class Violation:
    kind: str
    """below_roofline, above_plausible or kv_out_of_bounds."""
    metric: str
    model: str
    family: str
    vendor: str
    device: str
    layout: str
    isl: int
    osl: int
    clients: int | None
    predicted: float
    bound: float
    ratio: float
    """How far outside, >= 1: bound / predicted below a lower bound, predicted / bound above an upper one."""
    unit: str

    def as_dict(self) -> dict[str, Any]:
        return {k: (round(v, 6) if isinstance(v, float) else v) for k, v in self.__dict__.items()}

    def line(self) -> str:
        clients = "" if self.clients is None else f" c{self.clients}"
        op = "<" if self.kind == "below_roofline" or self.metric == "kv_low" else ">"
        return (f"{self.model} on {self.device} {self.layout} isl {self.isl} osl {self.osl}{clients}: "
                f"{self.metric} {_fmt(self.predicted, self.unit)} {op} bound {_fmt(self.bound, self.unit)} "
                f"(x{self.ratio:.2f}, {self.kind})")


def _fmt(value: float, unit: str) -> str:
    if unit == "s":
        return f"{value * 1e3:.3g} ms"
    if unit == "tok/s":
        return f"{value:,.0f} tok/s"
    return f"{value:,.0f} seqs"


def bounds(phys: Physics, isl: int, osl: int, clients: int, batch: float) -> dict[str, float]:
    """The bounds of one closed-loop point: `batch` is the mean decode batch the prediction runs at (a step holds
    at least one sequence, and a bigger one cannot be faster). The TTFT ceiling holds for one client only (more
    queue behind each other's prefills)."""
    out = {"ttft_lo": phys.prefill_s(isl), "tpot_lo": phys.decode_s(max(batch, 1.0), isl, osl),
           "tokens_hi": phys.tokens_ceiling(clients, isl, osl), "tpot_hi": phys.tpot_ceiling(clients, isl, osl)}
    if clients == 1:
        out["ttft_hi"] = phys.ttft_ceiling(isl)
    return out


def check_point(b: dict[str, float], ttft: float, tpot: float, tokens_s: float
                ) -> list[tuple[str, str, float, float, float, str]]:
    """(kind, metric, predicted, bound, ratio, unit) of every bound in `b` (from `bounds`) that a prediction
    breaks: `ttft` and `tpot` means in seconds, `tokens_s` output tokens/s."""
    out = []
    if ttft < b["ttft_lo"]:
        out.append(("below_roofline", "ttft", ttft, b["ttft_lo"], b["ttft_lo"] / ttft, "s"))
    if tpot < b["tpot_lo"]:
        out.append(("below_roofline", "tpot", tpot, b["tpot_lo"], b["tpot_lo"] / tpot, "s"))
    if tokens_s > b["tokens_hi"]:
        out.append(("below_roofline", "throughput", tokens_s, b["tokens_hi"], tokens_s / b["tokens_hi"], "tok/s"))
    if "ttft_hi" in b and ttft > b["ttft_hi"]:
        out.append(("above_plausible", "ttft", ttft, b["ttft_hi"], ttft / b["ttft_hi"], "s"))
    if tpot > b["tpot_hi"]:
        out.append(("above_plausible", "tpot", tpot, b["tpot_hi"], tpot / b["tpot_hi"], "s"))
    return out


def check_capacity(phys: Physics, context: float, sequences: float) -> list[tuple[str, str, float, float, float,
                                                                                   str]]:
    """The KV-capacity bounds `sequences` (what the model says fit at `context` tokens) breaks."""
    out = []
    hi = phys.kv_capacity(context)
    if sequences > hi * (1 + KV_OVER_TOLERANCE):
        out.append(("kv_out_of_bounds", "kv_over", sequences, hi, sequences / max(hi, 1e-9), "seqs"))
    lo = KV_LOW_SHARE * phys.kv_capacity(context, reserve=True)
    if lo >= 1 and sequences < lo:
        out.append(("kv_out_of_bounds", "kv_low", sequences, lo, lo / max(sequences, 1e-9), "seqs"))
    return out


QUICK_MODELS = ("Llama-3.1-8B", "Qwen3-30B-A3B", "DeepSeek-V3", "Gemma-3-4B", "Qwen3-Next-80B-A3B")
QUICK_DEVICES = ("H100-SXM", "MI300X", "Ascend-910B3")


@dataclass
class Report:
    points: int = 0
    kv_checks: int = 0
    layouts: int = 0
    skipped: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    unfit: list[str] = field(default_factory=list)
    """(model on device) pairs no layout holds the weights of."""
    closest: dict[str, tuple[float, str]] = field(default_factory=dict)
    """Per metric, the smallest margin to its physical bound (predicted / lower bound; ceiling / predicted for
    throughput and KV capacity) and where: how near the model comes to the impossible."""
    violations: list[Violation] = field(default_factory=list)
    by_group: dict[str, dict[str, int]] = field(default_factory=lambda: defaultdict(lambda: defaultdict(int)))
    seconds: float = 0.0

    def count(self, group: str, key: str, n: int = 1) -> None:
        self.by_group[group][key] += n


def run(quick: bool = False, catalog: Catalog | None = None) -> Report:
    """Predict every point of the grid (the quick subset with `quick`) and check it against the bounds."""
    start = time.perf_counter()
    catalog = catalog or load_catalog()
    models = [m for m in catalog.models.values() if m.kind == "llm" and (not quick or m.name in QUICK_MODELS)]
    devices = [d for d in catalog.devices.values() if not quick or d.name in QUICK_DEVICES]
    prompts, outputs = (PROMPTS[:3:2], OUTPUTS[:1]) if quick else (PROMPTS, OUTPUTS)
    report = Report()
    for model in sorted(models, key=lambda m: m.name):
        fam = family(model)
        for device in sorted(devices, key=lambda d: d.name):
            found, why = layouts(model, device, catalog)
            if not found:
                if why != "no engine":
                    report.unfit.append(f"{model.name} on {device.name}")
                continue
            for lay in (found[:1] if quick else found):
                report.layouts += 1
                _run_layout(lay, fam, prompts, outputs, report)
    report.seconds = time.perf_counter() - start
    return report


def _run_layout(lay: Layout, fam: str, prompts: tuple[int, ...], outputs: tuple[int, ...], report: Report) -> None:
    worker = lay.compiled.workers["agg"]
    groups = (f"family {fam}", f"vendor {lay.device.vendor}", "total")
    for isl in prompts:
        for osl in outputs:
            if isl + osl > lay.model.max_context:
                continue
            cap = worker.max_sequences(isl + osl)
            if cap < 1:
                report.skipped["one request does not fit the KV cache"] += 1
                continue
            where = f"{lay.model.name} on {lay.device.name} {lay.label()} isl {isl} osl {osl}"
            for metric, margin in (("kv_capacity", lay.phys.kv_capacity(isl + osl) / cap),):
                if metric not in report.closest or margin < report.closest[metric][0]:
                    report.closest[metric] = (margin, where)
            for kind, metric, pred, bound, ratio, unit in check_capacity(lay.phys, isl + osl, cap):
                report.violations.append(Violation(kind, metric, lay.model.name, fam, lay.device.vendor,
                                                   lay.device.name, lay.label(), isl, osl, None, pred, bound,
                                                   ratio, unit))
                for g in groups:
                    report.count(g, metric)
            report.kv_checks += 1
            for g in groups:
                report.count(g, "kv_checks")
            for clients in sorted({b for b in BATCHES if b <= cap} | {cap}):
                case = lay.case(isl, osl, clients)
                try:
                    pred = lay.compiled.at(case.workload()).prediction
                except InfraError as exc:
                    report.skipped[f"estimate refused: {exc.problems[0]}"[:120]] += 1
                    continue
                ttft, tpot = pred.ttft["mean"], pred.tpot["mean"]
                if not (pred.stable and math.isfinite(ttft) and math.isfinite(tpot)):
                    report.skipped["prediction not stable"] += 1
                    continue
                report.points += 1
                b = bounds(lay.phys, isl, osl, clients, pred.batch)
                where = f"{lay.model.name} on {lay.device.name} {lay.label()} isl {isl} osl {osl} c{clients}"
                for metric, margin in (("ttft", ttft / b["ttft_lo"]), ("tpot", tpot / b["tpot_lo"]),
                                       ("throughput", b["tokens_hi"] / max(pred.output_tokens_per_s, 1e-300))):
                    if metric not in report.closest or margin < report.closest[metric][0]:
                        report.closest[metric] = (margin, where)
                broken = check_point(b, ttft, tpot, pred.output_tokens_per_s)
                kinds = set()
                for kind, metric, value, bound, ratio, unit in broken:
                    report.violations.append(Violation(kind, metric, lay.model.name, fam, lay.device.vendor,
                                                       lay.device.name, lay.label(), isl, osl, clients, value,
                                                       bound, ratio, unit))
                    kinds.add(kind)
                    for g in groups:
                        report.count(g, f"{kind} {metric}")
                for g in groups:
                    report.count(g, "points")
                    for kind in kinds:
                        report.count(g, kind)


def worst(violations: list[Violation], n: int) -> list[Violation]:
    """The n furthest outside their bound, one per model and check (so one model does not fill the list)."""
    best: dict[tuple[str, str, str], Violation] = {}
    for v in violations:
        key = (v.model, v.kind, v.metric)
        if key not in best or v.ratio > best[key].ratio:
            best[key] = v
    return sorted(best.values(), key=lambda v: -v.ratio)[:n]


def summary(report: Report) -> dict[str, Any]:
    total = report.by_group.get("total", {})
    groups = {}
    for name, c in sorted(report.by_group.items()):
        if name == "total":
            continue
        points, checks = c.get("points", 0), c.get("kv_checks", 0)
        kv = c.get("kv_over", 0) + c.get("kv_low", 0)
        groups[name] = {"points": points, "below_roofline": c.get("below_roofline", 0),
                        "above_plausible": c.get("above_plausible", 0), "kv_checks": checks, "kv_out_of_bounds": kv,
                        "share_outside": round((c.get("below_roofline", 0) + c.get("above_plausible", 0))
                                               / points, 4) if points else None}
    by_check = {k: v for k, v in sorted(total.items()) if k not in ("points", "kv_checks", "below_roofline",
                                                                     "above_plausible")}
    return {
        "points": report.points, "layouts": report.layouts, "kv_checks": report.kv_checks,
        "below_roofline": total.get("below_roofline", 0), "above_plausible": total.get("above_plausible", 0),
        "kv_out_of_bounds": total.get("kv_over", 0) + total.get("kv_low", 0),
        "by_check": by_check, "by_group": groups,
        "skipped": dict(sorted(report.skipped.items())), "unfit": report.unfit,
        "closest_to_roofline": {k: {"margin": round(m, 4), "where": w} for k, (m, w) in sorted(report.closest.items())},
        "worst": [v.as_dict() for v in worst(report.violations, 2 * WORST)],
        "bounds": {"k_prefill": K_PREFILL, "k_decode": K_DECODE, "ttft_fixed_s": TTFT_FIXED_S,
                   "step_fixed_s": STEP_FIXED_S, "layer_s": LAYER_S, "kv_low_share": KV_LOW_SHARE},
        "seconds": round(report.seconds, 3),
    }


def print_report(report: Report) -> None:
    s = summary(report)
    print(f"{s['points']} predictions over {s['layouts']} layouts and {s['kv_checks']} KV-capacity checks in "
          f"{s['seconds']:.1f} s; plausible ceilings: prefill x{K_PREFILL:g}, decode x{K_DECODE:g} the roofline plus "
          f"{TTFT_FIXED_S * 1e3:g} ms per request, {STEP_FIXED_S * 1e3:g} ms per step, {LAYER_S * 1e6:g} us per "
          "layer (+ collectives)")
    print(f"{'':34s} {'points':>7s} {'below':>6s} {'above':>6s} {'outside':>8s}  {'kv chk':>6s} {'kv out':>6s}")
    for name, g in s["by_group"].items():
        share = "-" if g["share_outside"] is None else f"{100 * g['share_outside']:.1f}%"
        print(f"{name:34s} {g['points']:7d} {g['below_roofline']:6d} {g['above_plausible']:6d} {share:>8s}  "
              f"{g['kv_checks']:6d} {g['kv_out_of_bounds']:6d}")
    share = (s["below_roofline"] + s["above_plausible"]) / s["points"] if s["points"] else 0.0
    print(f"{'total':34s} {s['points']:7d} {s['below_roofline']:6d} {s['above_plausible']:6d} "
          f"{100 * share:7.1f}%  {s['kv_checks']:6d} {s['kv_out_of_bounds']:6d}")
    print("by check: " + ", ".join(f"{k} {v}" for k, v in s["by_check"].items()))
    print("closest to the physical bound (predicted / lower bound; ceiling / predicted for throughput and KV "
          "capacity): "
          + "; ".join(f"{k} x{v['margin']:.3f} ({v['where']})" for k, v in s["closest_to_roofline"].items()))
    for why, n in s["skipped"].items():
        print(f"skipped {n} points: {why}")
    if s["unfit"]:
        print(f"no layout up to tp{max(TP_SIZES)} holds the weights of {len(s['unfit'])} model-device pairs "
              f"(e.g. {', '.join(s['unfit'][:3])})")
    print(f"worst {WORST} (one per model and check):")
    for v in worst(report.violations, WORST):
        print("  " + v.line())


def measured(path: Path, catalog: Catalog) -> dict[str, Any]:
    """The bounds against measured engines (see the module's notes): rows checked, those below a lower bound and
    above a plausible ceiling per metric, and the furthest outside."""
    out: dict[str, Any] = {"rows": 0, "below_roofline": defaultdict(int), "above_plausible": defaultdict(int)}
    outside: list[Violation] = []
    moe_excess: dict[str, list[float]] = defaultdict(list)
    for row in load_rows(path):
        case = to_case(row, catalog)
        if isinstance(case, str) or case.deployment.mode != "agg":
            continue
        clients = case.workload.concurrency
        if clients is None or clients > MEASURED_CLIENTS:
            continue
        dep, model = case.deployment, catalog.model(case.model)
        device, fw = catalog.device(dep.device), catalog.framework(dep.framework)
        phys = physics(model, device, fw, dep.precision, dep.agg.parallel.devices, dep.agg.parallel.ep)
        isl, osl = case.workload.isl, case.workload.osl
        prompt = K_PREFILL * phys.prefill_s(isl) + K_COMM * isl * phys.comm_s_per_token
        step = STEP_FIXED_S + phys.layers * phys.per_layer_s
        ttft_hi = phys.ttft_ceiling(isl) + (clients - 1) * prompt + K_DECODE * phys.decode_s(clients, isl, osl) + step
        ttft, tpot = case.ttft_ms / 1e3, case.tpot_ms / 1e3
        if phys.moe_request_s:
            layers = moe_layer_count(model)
            moe_excess[f"{model.name} {fw.name} {device.name}"].append(
                (ttft - phys.ttft_ceiling(isl) + phys.moe_request_s) / layers)
        checks = (("below_roofline", "ttft", ttft < phys.prefill_s(isl), phys.prefill_s(isl)),
                  ("below_roofline", "tpot", tpot < phys.decode_s(1, isl, osl) / (1 + case.draft),
                   phys.decode_s(1, isl, osl) / (1 + case.draft)),
                  ("above_plausible", "ttft", ttft > ttft_hi, ttft_hi),
                  ("above_plausible", "tpot", tpot > phys.tpot_ceiling(clients, isl, osl),
                   phys.tpot_ceiling(clients, isl, osl)))
        out["rows"] += 1
        for kind, metric, broken, bound in checks:
            if broken:
                value = ttft if metric == "ttft" else tpot
                out[kind][metric] += 1
                outside.append(Violation(kind, metric, model.name, family(model), device.vendor, device.name,
                                         f"{fw.name} {dep.precision} tp{dep.agg.parallel.tp} dp"
                                         f"{dep.agg.parallel.attention_dp}", round(isl), round(osl), clients, value,
                                         bound, max(value / bound, bound / value), "s"))
    out["below_roofline"], out["above_plausible"] = dict(out["below_roofline"]), dict(out["above_plausible"])
    out["moe_request_layer_ms"] = {
        where: {"rows": len(xs), "median": round(statistics.median(xs) * 1e3, 2),
                "max": round(max(xs) * 1e3, 2)} for where, xs in sorted(moe_excess.items())}
    out["worst"] = [v.as_dict() for v in worst(outside, WORST)]
    out["lines"] = [v.line() for v in worst(outside, WORST)]
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--json", action="store_true", help="print one JSON object instead of the report")
    ap.add_argument("--quick", action="store_true", help="a few models and devices, two prompts, one answer length")
    ap.add_argument("--measured", type=Path, metavar="CSV",
                    help="first hold the bounds against measured rows (silicon_calibration.csv format)")
    args = ap.parse_args()
    catalog = load_catalog()
    checked = None
    if args.measured is not None:
        try:
            checked = measured(args.measured, catalog)
        except InfraError as exc:
            print(f"error: {exc.problems[0]}", file=sys.stderr)
            return 1
        if not args.json:
            def tally(counts: dict[str, int]) -> str:
                return f"{sum(counts.values())}" + (f" ({', '.join(f'{k} {v}' for k, v in sorted(counts.items()))})"
                                                    if counts else "")
            print(f"measured rows of at most {MEASURED_CLIENTS} clients against the bounds: {checked['rows']} rows; "
                  f"below the roofline {tally(checked['below_roofline'])}, above the plausible ceiling "
                  f"{tally(checked['above_plausible'])}")
            for line in checked["lines"]:
                print("  " + line)
            print("MoE rows: TTFT over the single-request ceiling without the MoE allowance, ms per MoE layer "
                  f"(allowance {MOE_REQUEST_LAYER_S * 1e3:g}): " + "; ".join(
                      f"{where} {v['median']:g} median, {v['max']:g} max ({v['rows']} rows)"
                      for where, v in checked["moe_request_layer_ms"].items()))
    report = run(quick=args.quick, catalog=catalog)
    if args.json:
        out = summary(report)
        if checked is not None:
            out["measured"] = {k: v for k, v in checked.items() if k != "lines"}
        print(json.dumps(out, sort_keys=True))
    else:
        print_report(report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
