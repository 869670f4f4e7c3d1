"""Catalog entries of dense Qwen3/Qwen2.5/Llama-3.2/Gemma-3 sizes, GLM-4.5-Air and Llama 4 hold the numbers of their
config.json, agree with the parameter counts their shapes give, resolve from the ids they are published under,
and are estimated on H200 (rows of them replay: tests/unit/test_catalog_ids.py)."""

from __future__ import annotations

import pytest

from infra.api import estimate
from infra.catalog.hf import count_params
from infra.catalog.loader import Catalog, load_catalog


@pytest.fixture(scope="module")
def cat() -> Catalog:
    return load_catalog()


# name: (layers, hidden, heads, kv_heads, head_dim, ffn, vocab, max_context, tied embeddings)
DENSE = {
    "Qwen3-14B": (40, 5120, 40, 8, 128, 17408, 151936, 40960, False),
    "Qwen3-4B": (36, 2560, 32, 8, 128, 9728, 151936, 40960, True),
    "Qwen3-1.7B": (28, 2048, 16, 8, 128, 6144, 151936, 40960, True),
    "Qwen3-0.6B": (28, 1024, 16, 8, 128, 3072, 151936, 40960, True),
    "Qwen2.5-14B": (48, 5120, 40, 8, 128, 13824, 152064, 32768, False),
    "Llama-3.2-1B": (16, 2048, 32, 8, 64, 8192, 128256, 131072, True),
    "Llama-3.2-3B": (28, 3072, 24, 8, 128, 8192, 128256, 131072, True),
    "Gemma-3-12B": (48, 3840, 16, 8, 256, 15360, 262208, 131072, True),
    "Gemma-3-4B": (34, 2560, 8, 4, 256, 10240, 262208, 131072, True),
}
# name: (layers, hidden, heads, kv_heads, dense ffn, experts, top-k, shared, expert ffn, dense layers, max_context)
MOE = {
    "GLM-4.5-Air": (46, 4096, 96, 8, 10944, 128, 8, 1, 1408, 1, 131072),
    "Llama-4-Scout-17B-16E": (48, 5120, 40, 8, 16384, 16, 1, 1, 8192, 0, 10485760),
    "Llama-4-Maverick-17B-128E": (48, 5120, 40, 8, 16384, 128, 1, 1, 8192, 24, 1048576),
}
# Sliding-window layers (Gemma 3: 5 local per global layer; Llama 4: chunked attention on 3 of every 4 layers).
WINDOWS = {"Gemma-3-12B": (1024, 40), "Gemma-3-4B": (1024, 29),
           "Llama-4-Scout-17B-16E": (8192, 36), "Llama-4-Maverick-17B-128E": (8192, 36)}
# Published totals the shapes do not reach: the vision encoders of Gemma 3 and Llama 4 Scout.
ALLOWANCE_B = {"Gemma-3-12B": 0.5, "Gemma-3-4B": 0.5, "Llama-4-Scout-17B-16E": 1.5}


@pytest.mark.parametrize("name", sorted(DENSE))
def test_dense_entries_hold_their_config(cat, name):
    layers, hidden, heads, kv, head_dim, ffn, vocab, context, _ = DENSE[name]
    m = cat.model(name)
    assert (m.layers, m.hidden_size, m.attention_heads, m.kv_heads, m.head_dim) == (layers, hidden, heads, kv, head_dim)
    assert (m.ffn_size, m.vocab_size, m.max_context) == (ffn, vocab, context)
    assert m.moe is None and m.mla is None and m.params_total_b == m.params_active_b
    assert (m.attention.sliding_window, m.attention.sliding_window_layers) == WINDOWS.get(name, (None, 0))
    assert m.native_precision == "bf16" and m.confidence == "high"
    assert m.source.startswith("https://huggingface.co/") and m.source.endswith("/config.json")


@pytest.mark.parametrize("name", sorted(MOE))
def test_moe_entries_hold_their_config(cat, name):
    layers, hidden, heads, kv, ffn, experts, active, shared, expert_ffn, dense, context = MOE[name]
    m = cat.model(name)
    assert (m.layers, m.hidden_size, m.attention_heads, m.kv_heads, m.head_dim) == (layers, hidden, heads, kv, 128)
    assert (m.ffn_size, m.max_context) == (ffn, context)
    assert m.moe is not None and m.mla is None
    assert (m.moe.experts, m.moe.active_experts, m.moe.shared_experts, m.moe.expert_ffn_size,
            m.moe.dense_layers) == (experts, active, shared, expert_ffn, dense)
    assert (m.attention.sliding_window, m.attention.sliding_window_layers) == WINDOWS.get(name, (None, 0))
    assert m.source.startswith("https://huggingface.co/") and m.source.endswith("/config.json")


@pytest.mark.parametrize("name", sorted(DENSE) + sorted(MOE))
def test_published_parameters_agree_with_the_shapes(cat, name):
    m = cat.model(name)
    tied = DENSE[name][-1] if name in DENSE else False
    total, active = count_params(layers=m.layers, hidden=m.hidden_size, heads=m.attention_heads, kv_heads=m.kv_heads,
                                 head_dim=m.head_dim, ffn=m.ffn_size, vocab=m.vocab_size, tied=tied, moe=m.moe,
                                 mla=m.mla)
    slack = ALLOWANCE_B.get(name, 0.0)
    assert total - 0.03 * m.params_total_b <= m.params_total_b <= total * 1.03 + slack
    # Cards round the active count and some leave the embeddings out of it (GLM-4.5-Air: 12B of 13.4B counted).
    assert active * 0.85 <= m.params_active_b <= active * 1.03 + slack


@pytest.mark.parametrize("model,tp", [
    ("Qwen3-14B", 1), ("Qwen3-4B", 1), ("Qwen3-1.7B", 1), ("Qwen3-0.6B", 1), ("Qwen2.5-14B", 1),
    ("Llama-3.2-1B", 1), ("Llama-3.2-3B", 1), ("Gemma-3-12B", 1), ("Gemma-3-4B", 1),
    ("mistralai/Mistral-Small-3.2-24B-Instruct-2506", 1), ("GLM-4.5-Air", 4), ("Llama-4-Scout-17B-16E", 4),
    ("Llama-4-Maverick-17B-128E", 8), ("Qwen/Qwen3-235B-A22B-Instruct-2507", 8),
])
def test_estimates_on_h200_with_vllm(model, tp):
    out = estimate({"model": model, "device": "H200", "framework": "vllm", "tp": tp, "ep": tp,
                    "isl": 2048, "osl": 512, "concurrency": 16})
    assert out["memory"]["agg"]["kv_tokens"] > 16 * (2048 + 512)
    assert out["throughput_rps"] > 0
