"""The packaged catalog: coverage the planner needs, provenance on every figure, lookups and overlays."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from infra.catalog.hf import model_from_hf_config
from infra.catalog.loader import Catalog, load_catalog
from infra.errors import CatalogError

SHARED = Path(__file__).resolve().parents[3] / "shared" / "data" / "silicon_calibration.csv"

REQUIRED_MODELS = [
    "Llama-2-70B", "Llama-3.1-8B", "Llama-3.1-70B", "Llama-3.1-405B", "Llama-3.3-70B", "Qwen2.5-7B", "Qwen2.5-32B",
    "Qwen2.5-72B", "Qwen3-8B", "Qwen3-32B", "Qwen3-235B-A22B", "Qwen3.5-397B-A17B", "DeepSeek-V3", "DeepSeek-R1",
    "DeepSeek-V3.1", "Kimi-K2.5", "GLM-5", "MiniMax-M2.5", "gpt-oss-20b", "gpt-oss-120b", "Mixtral-8x7B",
    "Gemma-3-27B",
]
REQUIRED_DEVICES = [
    "A100-80G", "H100-SXM", "H100-PCIe", "H200", "H20", "L20", "L40S", "L4", "B200", "B300", "GB200", "GB300",
    "RTX-4090", "MI300X", "MI325X", "Ascend-910B3", "Ascend-910C", "Ascend-310P", "MLU370-X8", "MLU590", "P800",
    "BI-V150", "C500", "K100-AI", "S4000", "S60",
]
REQUIRED_FRAMEWORKS = ["vllm", "sglang", "trtllm", "vllm-ascend", "mindie", "lmdeploy"]


@pytest.fixture(scope="module")
def cat() -> Catalog:
    return load_catalog()


def test_sizes(cat):
    assert len(cat.models) >= 30
    assert len(cat.devices) >= 25
    assert len(cat.frameworks) >= 6


@pytest.mark.parametrize("name", REQUIRED_MODELS)
def test_required_models(cat, name):
    m = cat.model(name)
    assert m.name == name
    assert m.params_total_b >= m.params_active_b > 0


@pytest.mark.parametrize("name", REQUIRED_DEVICES)
def test_required_devices(cat, name):
    d = cat.device(name)
    assert d.memory_gb.value > 0 and d.memory_bandwidth_tbps.value > 0
    assert d.tflops, f"{name} has no throughput figure"


@pytest.mark.parametrize("name", REQUIRED_FRAMEWORKS)
def test_required_frameworks(cat, name):
    assert cat.framework(name).vendors


def test_omni_stages_present(cat):
    kinds = {m.kind for m in cat.models.values()}
    assert {"llm", "codec", "dit", "vision_encoder", "audio_encoder"} <= kinds
    assert any("Omni" in m.name and m.kind == "codec" for m in cat.models.values())


def test_moe_mla_window_and_linear_attention_are_described(cat):
    v3 = cat.model("DeepSeek-V3")
    assert v3.moe and v3.moe.experts == 256 and v3.moe.active_experts == 8 and v3.moe.dense_layers == 3
    assert v3.mla and v3.mla.kv_lora_rank == 512
    assert cat.model("gpt-oss-120b").attention.sliding_window_layers > 0
    assert cat.model("Qwen3.5-397B-A17B").attention.linear_attention_layers > 0
    assert cat.model("Llama-3.1-70B").kv_heads == 8


def test_every_device_figure_has_a_source(cat):
    for d in cat.devices.values():
        figures = [d.memory_gb, d.memory_bandwidth_tbps, d.devices_per_node, d.reference_price_per_hour,
                   d.interconnect.bandwidth_gbs, d.interconnect.domain_size, *d.tflops.values(),
                   *d.media_engines.values()]
        for f in figures:
            assert f.source.startswith("http") and f.confidence in ("high", "medium", "low")


def test_devices_without_fp8_say_so(cat):
    assert "fp8" not in cat.device("A100-80G").precisions
    assert "fp8" not in cat.device("Ascend-910B3").precisions
    assert "fp8" in cat.device("H100-SXM").precisions
    assert "fp4" in cat.device("B200").precisions


@pytest.mark.parametrize("ref,name", [
    ("Qwen/Qwen3-32B", "Qwen3-32B"), ("qwen3-32b", "Qwen3-32B"), ("meta-llama/Llama-3.1-70B-Instruct", "Llama-3.1-70B"),
    ("deepseek-ai/DeepSeek-R1", "DeepSeek-R1"),
])
def test_model_ids_resolve(cat, ref, name):
    assert cat.model(ref).name == name


@pytest.mark.parametrize("ref,name", [("h100_sxm", "H100-SXM"), ("H200_SXM", "H200"), ("b200_sxm", "B200"),
                                      ("gb200", "GB200"), ("Ascend910B3", "Ascend-910B3")])
def test_device_aliases_resolve(cat, ref, name):
    assert cat.device(ref).name == name


def test_calibration_rows_resolve(cat):
    if not SHARED.exists():
        pytest.skip("measured data not present beside this checkout")
    with SHARED.open() as fh:
        rows = list(csv.DictReader(fh))
    assert {cat.model(r["model_path"]).name for r in rows}
    assert {cat.device(r["system"]).name for r in rows}
    assert {cat.framework(r["backend"]).name for r in rows}


def test_unknown_names_suggest(cat):
    with pytest.raises(CatalogError, match="did you mean 'H100-SXM'"):
        cat.device("H100-SMX")
    with pytest.raises(CatalogError, match="did you mean"):
        cat.model("Llama-3.1-70")
    with pytest.raises(CatalogError, match="unknown framework"):
        cat.framework("tgi-nonexistent-xyz")


def test_overlay_reprices_a_device_and_adds_a_card(tmp_path):
    (tmp_path / "devices").mkdir()
    (tmp_path / "devices" / "h100.yaml").write_text(
        "name: h100_sxm\nreference_price_per_hour: {value: 1.5, source: 'https://example.com/prices', "
        "confidence: high}\n")
    base = load_catalog().device("H100-SXM")
    new = base.model_dump(mode="json")
    new.update(name="Acme-X1", aliases=["x1"])
    (tmp_path / "devices" / "x1.yaml").write_text(json.dumps(new))
    cat = Catalog([tmp_path])
    assert cat.device("H100-SXM").reference_price_per_hour.value == 1.5
    assert cat.device("H100-SXM").memory_gb == base.memory_gb
    assert cat.device("x1").name == "Acme-X1"


def test_overlay_errors_name_the_file(tmp_path):
    (tmp_path / "devices").mkdir()
    (tmp_path / "devices" / "bad.yaml").write_text("name: Acme-Y\nvendor: nvidia\n")
    with pytest.raises(CatalogError) as exc:
        Catalog([tmp_path])
    assert "bad.yaml" in str(exc.value) and "memory_gb" in str(exc.value)
    with pytest.raises(CatalogError, match="not a directory"):
        Catalog([tmp_path / "missing"])


def test_a_framework_borrows_calibration_only_from_a_catalog_framework(tmp_path):
    assert load_catalog().framework("vllm-ascend").calibration_from == "vllm"
    (tmp_path / "frameworks").mkdir()
    (tmp_path / "frameworks" / "mlu.yaml").write_text("name: vllm-mlu\ncalibration_from: vlm\n")
    with pytest.raises(CatalogError) as exc:
        Catalog([tmp_path])
    problem = exc.value.problems[0]
    assert "mlu.yaml" in str(problem.location) and problem.location.path == "calibration_from"
    assert "'vlm'" in problem.message and "vllm" in problem.fix


def test_activation_format_only_for_weight_only_fp4(tmp_path):
    (tmp_path / "models").mkdir()
    new = load_catalog().model("Llama-3.1-8B").model_dump(mode="json")
    new.update(name="Acme-8B", aliases=[], hf_id="acme/acme-8b", native_activations="fp8")
    (tmp_path / "models" / "acme.yaml").write_text(json.dumps(new))
    with pytest.raises(CatalogError) as exc:
        Catalog([tmp_path])
    assert "acme.yaml" in str(exc.value) and "native_activations" in str(exc.value)


def test_hf_config_json(tmp_path):
    cfg = {"model_type": "llama", "num_hidden_layers": 32, "hidden_size": 4096, "num_attention_heads": 32,
           "num_key_value_heads": 8, "intermediate_size": 14336, "vocab_size": 128256,
           "max_position_embeddings": 131072, "tie_word_embeddings": False, "_name_or_path": "acme/llama-8b"}
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    m = model_from_hf_config(path)
    assert m.kv_heads == 8 and m.head_dim == 128
    assert 7.9 < m.params_total_b < 8.1  # Llama-3.1-8B has 8.03B parameters


def test_hf_config_moe_mla(tmp_path):
    cfg = {"model_type": "deepseek_v3", "num_hidden_layers": 61, "hidden_size": 7168, "num_attention_heads": 128,
           "num_key_value_heads": 128, "intermediate_size": 18432, "moe_intermediate_size": 2048,
           "n_routed_experts": 256, "num_experts_per_tok": 8, "n_shared_experts": 1, "first_k_dense_replace": 3,
           "kv_lora_rank": 512, "q_lora_rank": 1536, "qk_rope_head_dim": 64, "qk_nope_head_dim": 128,
           "v_head_dim": 128, "vocab_size": 129280, "max_position_embeddings": 163840}
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    m = model_from_hf_config(path)
    assert 660 < m.params_total_b < 690 and 36 < m.params_active_b < 40  # published: 671B total, 37B active


def test_hf_config_linear_attention_state(tmp_path):
    cfg = {"model_type": "qwen3_next", "num_hidden_layers": 4, "hidden_size": 2048, "num_attention_heads": 16,
           "num_key_value_heads": 2, "head_dim": 256, "intermediate_size": 5120, "vocab_size": 151936,
           "layer_types": ["linear_attention"] * 3 + ["full_attention"], "linear_num_key_heads": 16,
           "linear_num_value_heads": 32, "linear_key_head_dim": 128, "linear_value_head_dim": 128,
           "linear_conv_kernel_dim": 4}
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    att = model_from_hf_config(path).attention
    assert (att.linear_attention_layers, att.linear_key_heads, att.linear_value_heads) == (3, 16, 32)
    assert (att.linear_key_dim, att.linear_value_dim, att.linear_conv_kernel) == (128, 128, 4)


def test_hf_config_sparse_attention_indexer(tmp_path):
    cfg = {"model_type": "deepseek_v32", "num_hidden_layers": 4, "hidden_size": 1024, "num_attention_heads": 16,
           "num_key_value_heads": 16, "intermediate_size": 4096, "vocab_size": 32000, "kv_lora_rank": 512,
           "q_lora_rank": 1536, "qk_rope_head_dim": 64, "qk_nope_head_dim": 128, "v_head_dim": 128,
           "index_topk": 2048, "index_n_heads": 64, "index_head_dim": 128}
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    att = model_from_hf_config(path).attention
    assert (att.sparse_topk, att.indexer_heads, att.indexer_head_dim) == (2048, 64, 128)
    del cfg["index_topk"], cfg["index_n_heads"], cfg["index_head_dim"]
    path.write_text(json.dumps(cfg))
    assert model_from_hf_config(path).attention.sparse_topk is None


def test_hf_config_errors(tmp_path):
    path = tmp_path / "config.json"
    path.write_text("{not json")
    with pytest.raises(CatalogError, match="invalid JSON"):
        model_from_hf_config(path)
    path.write_text(json.dumps({"hidden_size": 10}))
    with pytest.raises(CatalogError, match="num_hidden_layers"):
        model_from_hf_config(path)
    with pytest.raises(CatalogError, match="not found"):
        model_from_hf_config(tmp_path / "nope.json")
