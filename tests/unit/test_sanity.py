"""`benchmarks/sanity.py`: the roofline bounds on hand-computed cases, and the quick grid against them."""

from __future__ import annotations

import importlib.util
import json
import math
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from infra.api import estimate as api_estimate
from infra.catalog.loader import load_catalog

ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("sanity_benchmark", ROOT / "benchmarks" / "sanity.py")
sanity = importlib.util.module_from_spec(_spec)
sys.modules[_spec.name] = sanity  # dataclasses look their module up by name
_spec.loader.exec_module(sanity)

CAT = load_catalog()
H100_FLOPS, H100_BW = 989e12, 3.35e12
LLAMA_VOCAB_ROWS = 128256 * 4096
"""Llama-3.1-8B's embedding (and, untied, its LM head): 525,336,576 parameters each."""
LLAMA_BODY = 32 * (4096 * 128 * (2 * 32 + 2 * 8) + 3 * 4096 * 14336)
"""Its 32 layers' matmul parameters: q, o (32 heads) and k, v (8 heads) of 128, and a 14336-wide SwiGLU FFN;
6,979,321,856 = 8.03e9 less the embedding and the LM head."""
LLAMA_KV_TOKEN = 32 * 2 * 8 * 128 * 2
"""bf16 K and V of 8 heads of 128 in 32 layers: 131,072 bytes per token."""


def phys(model: str, device: str, precision: str, tp: int) -> sanity.Physics:
    dev = CAT.device(device)
    return sanity.physics(CAT.model(model), dev, sanity.framework_for(dev, CAT), precision, tp)


def test_llama_8b_prefill_on_h100_is_its_matmul_flops_at_peak():
    p = phys("Llama-3.1-8B", "H100-SXM", "bf16", 1)
    assert p.body_params == LLAMA_BODY
    # 1024 tokens through every layer's matmuls, the LM head for the last token only, and causal attention:
    # 1024 x 1025 / 2 (query, key) pairs, each 2 x 32 heads x (128 + 128) FLOPs in each of 32 layers.
    gemm = (2 * LLAMA_BODY * 1024 + 2 * LLAMA_VOCAB_ROWS) / H100_FLOPS
    attn = 1024 * 1025 / 2 * 2 * 32 * 256 * 32 / H100_FLOPS
    assert p.prefill_s(1024) == pytest.approx(gemm + attn, rel=1e-12)
    assert p.prefill_s(1024) == pytest.approx(14.73e-3, rel=1e-3)
    # The textbook 2 x 8.03e9 x 1024 / 989e12 = 16.6 ms also counts the embedding gather and 1023 LM-head rows
    # no engine computes: the bound sits 11% under it.
    naive = 2 * 8.03e9 * 1024 / H100_FLOPS
    assert 0.85 * naive < p.prefill_s(1024) < naive


def test_a_short_prefill_is_bound_by_reading_the_weights():
    p = phys("Llama-3.1-8B", "H100-SXM", "bf16", 1)
    compute, memory = p.prefill_parts(128)
    read = (LLAMA_BODY + LLAMA_VOCAB_ROWS) * 2 + 128 * LLAMA_KV_TOKEN
    assert memory == pytest.approx(read / H100_BW, rel=1e-12)
    assert compute < memory
    assert p.prefill_s(128) == memory == pytest.approx(4.485e-3, rel=1e-3)


def test_llama_8b_decode_on_h100_reads_weights_and_kv_at_peak_bandwidth():
    p = phys("Llama-3.1-8B", "H100-SXM", "bf16", 1)
    # One sequence at a 1024-token context (prompt 1024, the second token): 15.01 GB of bf16 weights (less the
    # embedding, of which a step reads one row) and 134 MB of KV cache.
    one = ((LLAMA_BODY + LLAMA_VOCAB_ROWS) * 2 + 1024 * LLAMA_KV_TOKEN) / H100_BW
    assert p.decode_s(1, 1024, 2) == pytest.approx(one, rel=1e-12)
    assert p.decode_s(1, 1024, 2) == pytest.approx(4.520e-3, rel=1e-3)
    # 64 sequences add 63 caches; the weights are read once for all of them.
    assert p.decode_s(64, 1024, 2) == pytest.approx(one + 63 * 1024 * LLAMA_KV_TOKEN / H100_BW, rel=1e-12)
    # Over a 1024-token answer the mean context is 1024 + 511.
    assert p.decode_s(1, 1024, 1024) == pytest.approx(one + 511 * LLAMA_KV_TOKEN / H100_BW, rel=1e-12)


def test_decode_turns_compute_bound_at_large_batches():
    p = phys("Llama-3.1-8B", "H100-SXM", "bf16", 1)
    # 4096 sequences at 128 tokens: 2 x 7.5e9 FLOPs each, 62 ms at peak, outlast reading 15 GB of weights and
    # 69 GB of KV cache (25 ms).
    flops = 4096 * p.decode_seq_compute_s(128, 2)
    assert p.decode_s(4096, 128, 2) == pytest.approx(flops, rel=1e-12)
    assert flops > (15.0e9 + 4096 * 128 * LLAMA_KV_TOKEN) / H100_BW


def test_kv_capacity_is_the_memory_the_weights_leave():
    p = phys("Llama-3.1-8B", "H100-SXM", "bf16", 1)
    # 80 GiB less 16.06 GB of weights over 2048 tokens of 128 KiB each: 260 sequences.
    assert p.kv_capacity(2048) == pytest.approx((80 * 2**30 - 8.03e9 * 2) / (2048 * LLAMA_KV_TOKEN), rel=1e-12)
    assert math.floor(p.kv_capacity(2048)) == 260
    # After the engine's 10% and 4 GB the share left is smaller, never larger.
    assert p.kv_capacity(2048, reserve=True) == pytest.approx(
        (0.9 * 80 * 2**30 - 4e9 - 8.03e9 * 2) / (2048 * LLAMA_KV_TOKEN), rel=1e-12)


def test_kv_layout_follows_the_engines():
    # Past 8 ranks Llama's 8 KV heads are replicated: tp16 stores every token's cache twice.
    assert phys("Llama-3.1-8B", "H100-SXM", "bf16", 8).kv_full == LLAMA_KV_TOKEN
    assert phys("Llama-3.1-8B", "H100-SXM", "bf16", 16).kv_full == 2 * LLAMA_KV_TOKEN
    # DeepSeek-V3's MLA latent (512 + 64, fp8 with fp8 weights) sits whole on each of 8 ranks.
    ds = phys("DeepSeek-V3", "H200", "fp8", 8)
    assert ds.kv_full == 61 * 576 * 8
    # Its prefill attends in the decompressed form: 128 heads x (192-wide keys + 128-wide values).
    assert ds.attn_pair_flops == 2 * 128 * (192 + 128) * 61
    # DeepSeek-V3.2's indexer (64 heads of 128) scores every pair on every rank.
    assert phys("DeepSeek-V3.2", "H200", "fp8", 8).index_pair_flops == 2 * 64 * 128 * 61 * 8


def test_moe_steps_read_the_experts_their_tokens_pick():
    p = phys("Qwen3-30B-A3B", "H100-SXM", "bf16", 1)
    assert p.touched(1) == pytest.approx(8)
    assert p.touched(64) == pytest.approx(128 * (1 - (120 / 128) ** 64))
    # One expert: 3 x 2048 x 768 parameters in each of 48 layers (scaled by the catalog's 30.5B over the
    # shapes' 30.53B, which a lower bound must not exceed).
    assert p.expert_params == pytest.approx(3 * 2048 * 768 * 48, rel=2e-3)
    assert p.expert_params <= 3 * 2048 * 768 * 48
    one, many = p.decode_s(1, 128, 2), p.decode_s(64, 128, 2)
    assert many - one == pytest.approx(((p.touched(64) - 8) * p.expert_params * 2
                                        + 63 * 128 * p.kv_full) / H100_BW, rel=1e-9)


def test_window_and_causal_helpers():
    assert sanity.causal_pairs(4) == 10
    assert sanity.causal_pairs(4, window=2) == 1 + 2 + 2 + 2
    assert sanity.mean_capped(10, 4, 12) == (10 + 11 + 12 + 12) / 4
    assert sanity.mean_capped(10, 4, math.inf) == 11.5
    assert sanity.mean_capped(20, 4, 12) == 12


def test_checks_flag_what_breaks_the_bounds():
    p = phys("Llama-3.1-8B", "H100-SXM", "bf16", 1)
    b = sanity.bounds(p, 1024, 128, 1, 1.0)
    assert sanity.check_point(b, b["ttft_lo"] * 1.5, b["tpot_lo"] * 1.5, b["tokens_hi"] * 0.5) == []
    broken = sanity.check_point(b, b["ttft_lo"] * 0.5, b["tpot_lo"] * 0.9, b["tokens_hi"] * 2)
    assert [(k, m) for k, m, *_ in broken] == [("below_roofline", "ttft"), ("below_roofline", "tpot"),
                                               ("below_roofline", "throughput")]
    assert broken[0][4] == pytest.approx(2.0)
    broken = sanity.check_point(b, b["ttft_hi"] * 3, b["tpot_hi"] * 2, b["tokens_hi"] * 0.5)
    assert [(k, m, round(r, 6)) for k, m, _, _, r, _ in broken] == [("above_plausible", "ttft", 3.0),
                                                                    ("above_plausible", "tpot", 2.0)]
    # With more than one client, TTFT queues behind other prefills: no ceiling on it.
    assert "ttft_hi" not in sanity.bounds(p, 1024, 128, 8, 7.5)
    cap = p.kv_capacity(2048)
    assert sanity.check_capacity(p, 2048, cap) == []
    assert [m for _, m, *_ in sanity.check_capacity(p, 2048, cap * 1.1)] == ["kv_over"]
    assert [m for _, m, *_ in sanity.check_capacity(p, 2048, 0.1 * cap)] == ["kv_low"]


def test_the_grid_prices_what_infra_estimate_prints():
    lay = next(lay for lay in sanity.layouts(CAT.model("Qwen3-30B-A3B"), CAT.device("H100-SXM"), CAT)[0])
    pred = lay.compiled.at(lay.case(4096, 128, 8).workload()).prediction
    shown = api_estimate({"model": "Qwen3-30B-A3B", "device": "H100-SXM", "tp": lay.tp, "ep": lay.ep, "isl": 4096,
                          "osl": 128, "concurrency": 8})
    assert shown["precision"] == lay.precision and shown["framework"] == lay.framework.name
    assert shown["ttft_ms"]["mean"] == round(pred.ttft["mean"] * 1000, 4)
    assert shown["tpot_ms"]["mean"] == round(pred.tpot["mean"] * 1000, 4)


def test_layouts_are_the_smallest_that_fit_and_the_next():
    found, _ = sanity.layouts(CAT.model("Llama-3.1-70B"), CAT.device("H100-SXM"), CAT)
    # 141 GB of bf16 weights: not on one 80 GB card, on two.
    assert [lay.tp for lay in found] == [2, 4]
    found, _ = sanity.layouts(CAT.model("Llama-4-Maverick-17B-128E"), CAT.device("H100-SXM"), CAT)
    # 800 GB over 40 query heads: 16 ways does not split them, 40 does, with the 8192-wide experts (which 40 does
    # not divide) whole on each device.
    assert [(lay.tp, lay.ep) for lay in found][:1] == [(40, 40)]


def test_quick_grid_stays_above_the_physical_lower_bounds():
    report = sanity.run(quick=True)
    s = sanity.summary(report)
    assert s["points"] > 100 and s["kv_checks"] > 20
    assert {"MLA", "MoE", "dense small (<30B)", "hybrid (linear attention)"} <= {
        name.removeprefix("family ") for name in s["by_group"] if name.startswith("family ")}
    # Faster than the hardware's peak is impossible: the model must never predict it.
    assert s["below_roofline"] == 0, [v for v in s["worst"] if v["kind"] == "below_roofline"]
    assert all(m["margin"] >= 1 for m in s["closest_to_roofline"].values())
    assert s["seconds"] < 30
    decoded = json.loads(json.dumps(s))
    for key in ("points", "below_roofline", "above_plausible", "kv_out_of_bounds", "worst", "seconds"):
        assert key in decoded
    for v in decoded["worst"]:
        assert v["ratio"] >= 1 and v["kind"] in ("below_roofline", "above_plausible", "kv_out_of_bounds")


def test_measured_rows_are_held_against_the_bounds(tmp_path):
    """A measured row is checked against its own layout's bounds: one faster than the roofline allows is flagged
    below it, one within the bounds is not, and rows of more clients than a single request's bounds speak for are
    left out."""
    header = ("id,silicon_data_source,backend,backend_version,model_path,system,precision,mode,isl,osl,"
              "gemm_quant_mode,moe_quant_mode,batch_size,tp_size,pp_size,attention_dp_size,moe_tp_size,moe_ep_size,"
              "silicon_ttft_ms,silicon_tpot_ms")
    row = ("{id},silicon_concurrency={c},vllm,0.10,meta-llama/Llama-3.1-8B,h100_sxm,fp8,agg,1024,512,fp8,,{c},1,1,,,,"
           "{t},{p}")
    path = tmp_path / "rows.csv"
    path.write_text("\n".join([header, row.format(id="fine", c=1, t=60.0, p=8.0),
                               row.format(id="too-fast", c=1, t=0.01, p=0.01),
                               row.format(id="crowded", c=64, t=0.01, p=0.01)]) + "\n")
    out = sanity.measured(path, CAT)
    assert out["rows"] == 2
    assert out["below_roofline"] == {"ttft": 1, "tpot": 1}
    assert out["above_plausible"] == {}
    assert all(v["clients"] == 1 for v in out["worst"])


def test_a_moe_request_is_allowed_its_measured_latency_per_moe_layer(tmp_path):
    """MoE engines add a per-request latency per MoE layer that dense models do not pay (measured rows of three
    engines): the single-request ceiling carries it, and `--measured` reports each measured MoE deployment's
    excess over the ceiling without it, per MoE layer, which is what the allowance is read from."""
    dense, moe = phys("Llama-3.1-70B", "H200", "fp8", 8), phys("DeepSeek-R1", "H200", "fp8", 8)
    assert dense.moe_request_s == 0
    assert moe.moe_request_s == pytest.approx(58 * sanity.MOE_REQUEST_LAYER_S)  # 61 layers, the first 3 dense
    without = replace(moe, moe_request_s=0.0)
    assert moe.ttft_ceiling(1024) - without.ttft_ceiling(1024) == pytest.approx(58 * sanity.MOE_REQUEST_LAYER_S)
    header = ("id,silicon_data_source,backend,backend_version,model_path,system,precision,mode,isl,osl,"
              "gemm_quant_mode,moe_quant_mode,batch_size,tp_size,pp_size,attention_dp_size,moe_tp_size,moe_ep_size,"
              "silicon_ttft_ms,silicon_tpot_ms")
    row = ("{id},silicon_concurrency=1,sglang,0.5,deepseek-ai/DeepSeek-R1,h200_sxm,fp8,agg,1024,1024,fp8,fp8,1,8,1,"
           ",1,8,{t},20.0")
    # The same layout as `moe`: experts spread over the 8 devices.
    ep8 = sanity.physics(CAT.model("DeepSeek-R1"), CAT.device("H200"), CAT.framework("sglang"), "fp8", 8, 8)
    base = ep8.ttft_ceiling(1024) - ep8.moe_request_s
    path = tmp_path / "rows.csv"
    path.write_text("\n".join([header, row.format(id="a", t=(base + 58e-3) * 1e3),
                               row.format(id="b", t=(base + 3 * 58e-3) * 1e3)]) + "\n")
    out = sanity.measured(path, CAT)
    assert out["moe_request_layer_ms"] == {"DeepSeek-R1 sglang H200": {"rows": 2, "median": 2.0, "max": 3.0}}


def test_a_decoding_mla_query_is_priced_against_the_latent():
    """A prompt's MLA attention is cheapest decompressed (192-wide keys, 128-wide values per head: 640 FLOPs a
    pair and head), a decoding query's against the cached latent (512 + 64 wide keys, 512-wide values: 2,176),
    since decompressing a 64k-token cache every step would cost more than either."""
    p = phys("DeepSeek-V3", "H200", "fp8", 8)
    assert p.attn_pair_flops == 2 * 128 * (192 + 128) * 61
    assert p.decode_pair_flops == 2 * 128 * (512 + 64 + 512) * 61
    dense = phys("Llama-3.1-70B", "H200", "fp8", 8)
    assert dense.decode_pair_flops == dense.attn_pair_flops
