"""Published Hugging Face ids resolve to the checkpoint they republish, and the entries of models the measured
source covers hold the numbers of their config.json."""

from __future__ import annotations

import json

import pytest

from infra.catalog.hfids import repo_name, strip_format
from infra.catalog.loader import Catalog, load_catalog
from infra.errors import CatalogError
from infra.perf.rows import predict, to_case


@pytest.fixture(scope="module")
def cat() -> Catalog:
    return load_catalog()


@pytest.mark.parametrize("ref,base", [
    ("nvidia/Qwen3-32B-NVFP4", "nvidia/Qwen3-32B"),
    ("Qwen/Qwen3-32B-FP8", "Qwen/Qwen3-32B"),
    ("RedHatAI/Meta-Llama-3.1-8B-Instruct-FP8-Dynamic", "RedHatAI/Meta-Llama-3.1-8B-Instruct"),
    ("nvidia/DeepSeek-R1-0528-FP4-v2", "nvidia/DeepSeek-R1-0528"),
    ("openai/gpt-oss-120b-MXFP4", "openai/gpt-oss-120b"),
    ("Qwen/Qwen3-30B-A3B-GPTQ-Int4", "Qwen/Qwen3-30B-A3B"),
    ("Qwen/Qwen2.5-72B-Instruct-GPTQ-Int8", "Qwen/Qwen2.5-72B-Instruct"),
    ("Qwen/Qwen3-32B-AWQ", "Qwen/Qwen3-32B"),
    ("someone/Qwen3-8B-AWQ-Int4", "someone/Qwen3-8B"),
    ("RedHatAI/Qwen3-32B-W4A16", "RedHatAI/Qwen3-32B"),
    ("neuralmagic/Meta-Llama-3.1-70B-Instruct-W8A8", "neuralmagic/Meta-Llama-3.1-70B-Instruct"),
    ("RedHatAI/Meta-Llama-3.1-8B-Instruct-quantized.w4a16", "RedHatAI/Meta-Llama-3.1-8B-Instruct"),
    ("unsloth/Kimi-K2-Thinking-BF16", "unsloth/Kimi-K2-Thinking"),
    ("unsloth/Llama-3.3-70B-Instruct-bnb-4bit", "unsloth/Llama-3.3-70B-Instruct"),
    ("someone/Mistral-7B-Instruct-v0.3-int4", "someone/Mistral-7B-Instruct-v0.3"),
])
def test_format_suffixes_are_dropped(ref, base):
    assert strip_format(ref) == base


@pytest.mark.parametrize("ref", [
    "Qwen/Qwen3-32B", "Qwen/Qwen3-30B-A3B", "deepseek-ai/DeepSeek-V3-0324", "openai/gpt-oss-120b",
    "Qwen/Qwen3-235B-A22B-Instruct-2507", "mistralai/Mistral-7B-Instruct-v0.3", "someone/FP8",
])
def test_size_version_and_date_parts_stay(ref):
    assert strip_format(ref) == ref


def test_repo_name():
    assert repo_name("nvidia/Qwen3-32B-NVFP4") == "Qwen3-32B-NVFP4"
    assert repo_name("Qwen3-32B") == "Qwen3-32B"


@pytest.mark.parametrize("ref,name", [
    ("nvidia/Qwen3-32B-NVFP4", "Qwen3-32B"),
    ("Qwen/Qwen3-32B-FP8", "Qwen3-32B"),
    ("RedHatAI/Qwen3-32B-FP8-dynamic", "Qwen3-32B"),
    ("nvidia/DeepSeek-V3-0324-NVFP4", "DeepSeek-V3"),
    ("nvidia/Kimi-K2.5-NVFP4", "Kimi-K2.5"),
    ("nvidia/Qwen3-30B-A3B-NVFP4", "Qwen3-30B-A3B"),
    ("nvidia/GLM-5-NVFP4", "GLM-5"),
    ("nvidia/Llama-3.1-8B-Instruct-FP8", "Llama-3.1-8B"),
    ("RedHatAI/Meta-Llama-3.1-8B-Instruct-quantized.w8a8", "Llama-3.1-8B"),
    ("nvidia/Llama-3.3-70B-Instruct-FP8", "Llama-3.3-70B"),
    ("unsloth/Llama-3.3-70B-Instruct-bnb-4bit", "Llama-3.3-70B"),
    ("Qwen3-32B-NVFP4", "Qwen3-32B"),
    ("zai-org/GLM-4.7-FP8", "GLM-4.7"),
    ("zai-org/GLM-4.6-FP8", "GLM-4.7"),
    ("zai-org/GLM-4.7-Flash", "GLM-4.7-Flash"),
    ("moonshotai/Kimi-K2-Instruct", "Kimi-K2"),
    ("moonshotai/Kimi-K2-Instruct-0905", "Kimi-K2"),
    ("moonshotai/Kimi-K2-Thinking", "Kimi-K2.5"),
    ("Qwen/Qwen3-VL-235B-A22B-Thinking", "Qwen3-VL-235B-A22B"),
    ("Qwen/Qwen3-VL-235B-A22B-Instruct-FP8", "Qwen3-VL-235B-A22B"),
    ("Qwen/Qwen3-Coder-480B-A35B-Instruct-FP8", "Qwen3-Coder-480B-A35B"),
    ("Qwen/Qwen3-Coder-30B-A3B-Instruct", "Qwen3-30B-A3B"),
    ("deepseek-ai/DeepSeek-V3.2", "DeepSeek-V3.2"),
    ("deepseek-ai/DeepSeek-V3.2-Exp", "DeepSeek-V3.2"),
    ("Qwen/Qwen3-14B", "Qwen3-14B"),
    ("Qwen/Qwen3-14B-FP8", "Qwen3-14B"),
    ("nvidia/Qwen3-14B-FP8", "Qwen3-14B"),
    ("Qwen/Qwen3-4B-Instruct-2507", "Qwen3-4B"),
    ("Qwen/Qwen3-4B-Thinking-2507-FP8", "Qwen3-4B"),
    ("Qwen/Qwen3-1.7B", "Qwen3-1.7B"),
    ("Qwen/Qwen3-0.6B-Base", "Qwen3-0.6B"),
    ("Qwen/Qwen2.5-14B-Instruct-AWQ", "Qwen2.5-14B"),
    ("deepseek-ai/DeepSeek-R1-Distill-Qwen-14B", "Qwen2.5-14B"),
    ("zai-org/GLM-4.5-Air-FP8", "GLM-4.5-Air"),
    ("zai-org/GLM-4.5", "GLM-4.7"),
    ("meta-llama/Llama-4-Scout-17B-16E-Instruct", "Llama-4-Scout-17B-16E"),
    ("nvidia/Llama-4-Scout-17B-16E-Instruct-FP4", "Llama-4-Scout-17B-16E"),
    ("meta-llama/Llama-4-Maverick-17B-128E-Instruct-FP8", "Llama-4-Maverick-17B-128E"),
    ("nvidia/Llama-4-Maverick-17B-128E-Instruct-FP8", "Llama-4-Maverick-17B-128E"),
    ("mistralai/Mistral-Small-3.2-24B-Instruct-2506", "Mistral-Small-3.1-24B"),
    ("Qwen/Qwen3-235B-A22B-Instruct-2507", "Qwen3-235B-A22B"),
    ("Qwen/Qwen3-235B-A22B-Thinking-2507-FP8", "Qwen3-235B-A22B"),
    ("meta-llama/Llama-3.2-1B", "Llama-3.2-1B"),
    ("unsloth/Llama-3.2-3B-Instruct", "Llama-3.2-3B"),
    ("google/gemma-3-12b-pt", "Gemma-3-12B"),
    ("google/gemma-3-4b-it", "Gemma-3-4B"),
    ("MiniMaxAI/MiniMax-M2.7", "MiniMax-M2.5"),
    ("nvidia/MiniMax-M2.7-NVFP4", "MiniMax-M2.5"),
    ("Qwen/Qwen3.5-27B", "Qwen3.5-27B"),
    ("Qwen/Qwen3.5-27B-FP8", "Qwen3.5-27B"),
    ("Qwen/Qwen3.5-35B-A3B", "Qwen3.5-35B-A3B"),
    ("Qwen/Qwen3.5-35B-A3B-FP8", "Qwen3.5-35B-A3B"),
    ("XiaomiMiMo/MiMo-V2-Flash", "MiMo-V2-Flash"),
    ("XiaomiMiMo/MiMo-V2-Flash-Base", "MiMo-V2-Flash"),
    ("XiaomiMiMo/MiMo-7B-Base", "MiMo-7B"),
    ("XiaomiMiMo/MiMo-7B-RL", "MiMo-7B"),
    ("XiaomiMiMo/MiMo-7B-SFT", "MiMo-7B"),
    ("nvidia/Llama-3_3-Nemotron-Super-49B-v1", "Llama-3.3-Nemotron-Super-49B"),
    ("nvidia/Llama-3_3-Nemotron-Super-49B-v1-FP8", "Llama-3.3-Nemotron-Super-49B"),
    ("nvidia/Llama-3_3-Nemotron-Super-49B-v1_5", "Llama-3.3-Nemotron-Super-49B"),
    ("nvidia/Llama-3_3-Nemotron-Super-49B-v1_5-NVFP4", "Llama-3.3-Nemotron-Super-49B"),
    ("nvidia/NVIDIA-Nemotron-3-Nano-30B-A3B-BF16", "NVIDIA-Nemotron-3-Nano-30B-A3B"),
    ("nvidia/NVIDIA-Nemotron-3-Nano-30B-A3B-FP8", "NVIDIA-Nemotron-3-Nano-30B-A3B"),
    ("nvidia/NVIDIA-Nemotron-3-Nano-30B-A3B-NVFP4", "NVIDIA-Nemotron-3-Nano-30B-A3B"),
    ("nvidia/Nemotron-H-56B-Base-8K", "Nemotron-H-56B"),
])
def test_published_ids_resolve(cat, ref, name):
    assert cat.model(ref).name == name


@pytest.mark.parametrize("ref,close", [
    ("nvidia/Qwen3-33B-NVFP4", "Qwen3-32B"),
    ("nvidia/DeepSeek-V3-0325-NVFP4", "DeepSeek-V3"),
    ("nvidia/Llama-3.1-9B-Instruct-FP8", "Llama-3.1-8B"),
    # Not in the catalog (LatentMoE experts work in a 1024-wide latent the schema cannot express): never taken
    # for the Nano model its repository name resembles.
    ("nvidia/NVIDIA-Nemotron-3-Super-120B-A12B-NVFP4", "NVIDIA-Nemotron-3-Nano-30B-A3B"),
])
def test_other_models_do_not_resolve_and_suggest(cat, ref, close):
    with pytest.raises(CatalogError, match=rf"unknown model {ref!r}; did you mean .*'{close}'"):
        cat.model(ref)


def test_fallback_is_for_models_only(cat):
    with pytest.raises(CatalogError, match="unknown device"):
        cat.device("nvidia/H100-SXM-FP8")


def _overlay(tmp_path, entries: dict[str, dict]) -> Catalog:
    base = load_catalog().model("Qwen3-8B").model_dump(mode="json")
    (tmp_path / "models").mkdir()
    for name, over in entries.items():
        (tmp_path / "models" / f"{name}.yaml").write_text(json.dumps({**base, "name": name, "aliases": [], **over}))
    return Catalog([tmp_path])


def test_same_repository_name_under_two_publishers_is_never_guessed(tmp_path):
    cat = _overlay(tmp_path, {"Foo-A": {"hf_id": "org-a/Foo-7B"}, "Foo-B": {"hf_id": "org-b/Foo-7B"}})
    assert cat.model("org-b/Foo-7B").name == "Foo-B"
    with pytest.raises(CatalogError, match="fits several catalog models; did you mean 'Foo-A' or 'Foo-B'"):
        cat.model("nvidia/Foo-7B-FP8")


def test_an_exact_alias_wins_and_disagreeing_fallbacks_are_an_error(tmp_path):
    cat = _overlay(tmp_path, {"Foo": {"hf_id": "org-a/Foo-7B"},
                              "Foo-Distilled": {"hf_id": "org-b/Bar-7B", "aliases": ["org-c/Foo-7B-FP8"]}})
    assert cat.model("org-c/Foo-7B-FP8").name == "Foo-Distilled"
    assert cat.model("org-a/Foo-7B-FP8").name == "Foo"
    with pytest.raises(CatalogError, match="did you mean 'Foo' or 'Foo-Distilled'"):
        cat.model("org-d/Foo-7B-FP8")


@pytest.mark.parametrize("name,layers,hidden,heads,kv,experts,active,dense,latent,context,native", [
    ("GLM-4.7", 92, 5120, 96, 8, 160, 8, 3, None, 202752, "bf16"),
    ("GLM-4.7-Flash", 47, 2048, 20, 20, 64, 4, 1, 512, 202752, "bf16"),
    ("Kimi-K2", 61, 7168, 64, 64, 384, 8, 1, 512, 131072, "fp8"),
    ("Qwen3-VL-235B-A22B", 94, 4096, 64, 4, 128, 8, 0, None, 262144, "bf16"),
    ("Qwen3-Coder-480B-A35B", 62, 6144, 96, 8, 160, 8, 0, None, 262144, "bf16"),
    ("DeepSeek-V3.2", 61, 7168, 128, 128, 256, 8, 3, 512, 163840, "fp8"),
    ("Qwen3.5-35B-A3B", 40, 2048, 16, 2, 256, 8, 0, None, 262144, "bf16"),
    ("MiMo-V2-Flash", 48, 4096, 64, 4, 256, 8, 1, None, 262144, "fp8"),
    # NemotronH: layers are token mixers (23 Mamba2 + 6 attention), the 6 attention layers the "dense" ones.
    ("NVIDIA-Nemotron-3-Nano-30B-A3B", 29, 2688, 32, 2, 128, 6, 6, None, 262144, "bf16"),
])
def test_new_entries_hold_their_config(cat, name, layers, hidden, heads, kv, experts, active, dense, latent, context,
                                       native):
    m = cat.model(name)
    assert (m.layers, m.hidden_size, m.attention_heads, m.kv_heads) == (layers, hidden, heads, kv)
    assert m.moe is not None and (m.moe.experts, m.moe.active_experts, m.moe.dense_layers) == (experts, active, dense)
    assert (m.mla.kv_lora_rank if m.mla else None) == latent
    assert m.max_context == context and m.native_precision == native
    assert m.source.startswith("https://huggingface.co/") and m.source.endswith("config.json")


@pytest.mark.parametrize("model_path,backend,precision,tp,ep", [
    ("zai-org/GLM-4.7-FP8", "trtllm", "fp8", 8, 8),
    ("zai-org/GLM-4.7-Flash", "vllm", "bf16", 1, 1),
    ("moonshotai/Kimi-K2-Instruct", "trtllm", "fp4", 8, 8),
    ("Qwen/Qwen3-VL-235B-A22B-Thinking", "vllm", "fp8", 4, 4),
    ("Qwen/Qwen3-Coder-480B-A35B-Instruct-FP8", "vllm", "fp8", 8, 8),
    ("deepseek-ai/DeepSeek-V3.2", "trtllm", "fp8", 8, 8),
    ("nvidia/Qwen3-32B-NVFP4", "trtllm", "fp8", 2, 1),
    ("Qwen/Qwen3-14B-FP8", "vllm", "fp8", 1, 1),
    ("Qwen/Qwen3-0.6B", "sglang", "bf16", 1, 1),
    ("zai-org/GLM-4.5-Air-FP8", "vllm", "fp8", 4, 4),
    ("nvidia/Llama-4-Scout-17B-16E-Instruct-FP4", "trtllm", "fp4", 2, 1),
    ("nvidia/Llama-4-Maverick-17B-128E-Instruct-FP8", "trtllm", "fp8", 8, 8),
    ("mistralai/Mistral-Small-3.2-24B-Instruct-2506", "vllm", "bf16", 2, 1),
    ("google/gemma-3-12b-it", "vllm", "bf16", 1, 1),
    ("meta-llama/Llama-3.2-3B-Instruct", "vllm", "bf16", 1, 1),
    ("MiniMaxAI/MiniMax-M2.7", "sglang", "fp8", 4, 4),
    ("Qwen/Qwen3.5-27B-FP8", "vllm", "fp8", 1, 1),
    ("Qwen/Qwen3.5-35B-A3B", "sglang", "bf16", 1, 1),
    ("XiaomiMiMo/MiMo-V2-Flash", "sglang", "fp8", 8, 8),
    ("XiaomiMiMo/MiMo-7B-RL", "vllm", "bf16", 1, 1),
    ("nvidia/Llama-3_3-Nemotron-Super-49B-v1_5", "trtllm", "fp8", 1, 1),
    ("nvidia/NVIDIA-Nemotron-3-Nano-30B-A3B-FP8", "vllm", "fp8", 1, 1),
    ("nvidia/Nemotron-H-56B-Base-8K", "vllm", "bf16", 2, 1),
])
def test_rows_of_these_models_replay(cat, model_path, backend, precision, tp, ep):
    # The timings are placeholders: only whether the row is replayed, not how close it comes, is checked here.
    row = {"backend": backend, "model_path": model_path, "system": "h200_sxm", "precision": precision, "mode": "agg",
           "isl": "4000", "osl": "1000", "silicon_data_source": "silicon_concurrency=16", "batch_size": "16",
           "tp_size": str(tp), "pp_size": "1", "attention_dp_size": "1", "moe_tp_size": "1", "moe_ep_size": str(ep),
           "silicon_ttft_ms": "1", "silicon_tpot_ms": "1"}
    case = to_case(row, cat)
    assert not isinstance(case, str), case
    pred = predict(case, cat)
    assert not isinstance(pred, str), pred
    assert pred[0] > 0 and pred[1] > 0
