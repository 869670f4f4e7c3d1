"""A service that names a quantized re-upload serves that checkpoint, in the precision its format suffix names;
other references serve the catalog entry's own checkpoint."""

from __future__ import annotations

import shutil

import pytest

from infra import api
from infra.catalog.hfids import checkpoint_precision, implied_precision
from infra.errors import IntentError

from ..conftest import EXAMPLES

INTENT = """apiVersion: infra.dev/v1alpha1
kind: ServingIntent
metadata: {name: quant}
spec:
  cluster:
    pools:
      - {name: pool, device: DEVICE, nodes: 1, devices_per_node: 8, price: $2/h}
  services:
    - name: chat
      model: MODEL
PRECISIONS      workload:
        rate: 0.5/s
        input_tokens: {mean: 500}
        output_tokens: {mean: 100}
      slo:
        ttft: {p99: 3s}
        tpot: {p99: 100ms}
"""


def _intent(tmp_path, model, precisions=None, device="H100-SXM"):
    text = INTENT.replace("DEVICE", device).replace("MODEL", model).replace(
        "PRECISIONS", f"      precisions: [{', '.join(precisions)}]\n" if precisions else "")
    path = tmp_path / "intent.yaml"
    path.write_text(text)
    return path


@pytest.mark.parametrize("ref,precision", [
    ("nvidia/Qwen3-32B-NVFP4", "fp4"),
    ("nvidia/DeepSeek-R1-0528-FP4-v2", "fp4"),
    ("openai/gpt-oss-120b-MXFP4", "fp4"),
    ("Qwen/Qwen3-32B-FP8", "fp8"),
    ("RedHatAI/Meta-Llama-3.1-8B-Instruct-FP8-Dynamic", "fp8"),
    ("Qwen/Qwen3-32B-AWQ", "int4"),
    ("someone/Qwen3-8B-AWQ-Int4", "int4"),
    ("Qwen/Qwen3-30B-A3B-GPTQ-Int4", "int4"),
    ("Qwen/Qwen2.5-72B-Instruct-GPTQ-Int8", "int8"),
    ("RedHatAI/Qwen3-32B-W4A16", "int4"),
    ("neuralmagic/Meta-Llama-3.1-70B-Instruct-W8A8", "int8"),
    ("RedHatAI/Meta-Llama-3.1-8B-Instruct-quantized.w4a16", "int4"),
    ("RedHatAI/Meta-Llama-3.1-8B-Instruct-quantized.w8a8", "int8"),
    ("unsloth/Llama-3.3-70B-Instruct-bnb-4bit", "int4"),
    ("unsloth/Kimi-K2-Thinking-BF16", "bf16"),
    ("Qwen/Qwen3-32B", None),
    ("Qwen/Qwen3-235B-A22B-Instruct-2507", None),
    ("someone/Foo-7B-quantized.w6a16", None),
    ("someone/Foo-7B-AWQ-FP8", None),
])
def test_the_suffix_names_the_precision(ref, precision):
    assert implied_precision(ref) == precision


def test_only_another_hugging_face_id_is_a_checkpoint():
    assert checkpoint_precision("nvidia/Qwen3-32B-NVFP4", "Qwen/Qwen3-32B") == "fp4"
    assert checkpoint_precision("Qwen/Qwen3-32B", "Qwen/Qwen3-32B") is None
    assert checkpoint_precision("qwen3-32b-fp8", "Qwen/Qwen3-32B") is None
    assert checkpoint_precision("models/Qwen3-32B-FP8/config.json", "Qwen/Qwen3-32B") is None


def _service(tmp_path, model, precisions=None, device="H100-SXM"):
    return api.plan(_intent(tmp_path, model, precisions, device)).plan.document()["spec"]["services"][0]


@pytest.mark.parametrize("model,entry,precision", [
    ("Qwen/Qwen3-8B-FP8", "Qwen3-8B", "fp8"),
    ("nvidia/Qwen3-8B-FP8", "Qwen3-8B", "fp8"),
    ("Qwen/Qwen2.5-7B-Instruct-AWQ", "Qwen2.5-7B", "int4"),
])
def test_a_quantized_re_upload_is_served_as_written(tmp_path, model, entry, precision):
    svc = _service(tmp_path, model)
    assert (svc["model"], svc["model_id"]) == (entry, model)
    for alloc in svc["allocations"]:
        assert alloc["precision"] == precision
        # The checkpoint holds the format already: the engine is not asked to quantize on load.
        assert all("quantization" not in e for e in alloc["engines"].values())


def test_the_original_checkpoint_is_quantized_on_load(tmp_path):
    svc = _service(tmp_path, "Qwen3-8B", ["fp8"])
    assert svc["model_id"] == "Qwen/Qwen3-8B"
    assert all(e["quantization"] == "fp8" for a in svc["allocations"] for e in a["engines"].values())


def test_stated_precisions_that_exclude_the_checkpoint_format_are_an_error(tmp_path):
    path = _intent(tmp_path, "nvidia/Qwen3-8B-FP8", ["bf16"])
    with pytest.raises(IntentError) as exc:
        api.plan(path)
    text = str(exc.value.problems[0])
    assert text.startswith(f"{path}:11:") and "spec.services[0].precisions" in text
    assert "nvidia/Qwen3-8B-FP8 publishes fp8 weights, but the precisions allowed are bf16" in text
    assert "name the original checkpoint Qwen/Qwen3-8B" in text


def test_a_format_no_allowed_device_runs_is_an_error(tmp_path):
    path = _intent(tmp_path, "nvidia/Qwen3-8B-FP8", device="Ascend-910B3")
    with pytest.raises(IntentError) as exc:
        api.check(path)
    text = str(exc.value.problems[0])
    assert f"{path}:10:" in text and "spec.services[0].model" in text
    assert "publishes fp8 weights, which run on none of the allowed devices (Ascend-910B3" in text


def test_a_pipeline_stage_serves_its_re_upload(tmp_path):
    shutil.copytree(EXAMPLES / "profiles", tmp_path / "profiles")
    path = tmp_path / "vl.yaml"
    path.write_text((EXAMPLES / "vision-language.yaml").read_text().replace(
        "model: Qwen2.5-VL-7B\n", "model: Qwen/Qwen2.5-VL-7B-Instruct-AWQ\n"))
    services = {s["stage"]: s for s in api.plan(path).plan.document()["spec"]["services"] if s.get("stage")}
    assert services["llm"]["model_id"] == "Qwen/Qwen2.5-VL-7B-Instruct-AWQ"
    assert {a["precision"] for a in services["llm"]["allocations"]} == {"int4"}
    assert services["vision"]["model_id"] == "Qwen/Qwen2.5-VL-7B-Instruct/visual"
