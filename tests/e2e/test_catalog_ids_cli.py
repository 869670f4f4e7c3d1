"""A quantized re-upload's Hugging Face id, as a user types it, reaches the model it was made from."""

from __future__ import annotations

import json

from .test_cli import infra


def test_estimate_takes_a_republished_id():
    out = infra("estimate", "--model", "nvidia/Qwen3-32B-NVFP4", "--device", "H200", "--framework", "trtllm",
                "--precision", "fp8", "--tp", "2", "--isl", "2k", "--osl", "256", "--concurrency", "8", "--json")
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["model"] == "Qwen3-32B"


def test_catalog_shows_the_entry_and_refuses_another_size():
    out = infra("catalog", "models", "zai-org/GLM-4.7-FP8", "--json")
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["name"] == "GLM-4.7"
    out = infra("catalog", "models", "nvidia/Qwen3-33B-NVFP4")
    assert out.returncode == 1
    assert "unknown model 'nvidia/Qwen3-33B-NVFP4'; did you mean 'Qwen3-32B'" in out.stderr
    assert "Traceback" not in out.stderr and len(out.stderr.strip().splitlines()) == 1
