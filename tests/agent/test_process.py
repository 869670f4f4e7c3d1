"""The agent commands as separate processes: settings come from the environment, the model from a real socket."""

from __future__ import annotations

import os
import subprocess
import sys

from ..fakes.chat_server import ChatServer


def run(args, env):
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("INFRA_LLM_", "OPENAI_"))}
    return subprocess.run([sys.executable, "-m", "infra", *args], check=False, capture_output=True, text=True,
                          timeout=120, env={**clean, **env})


def test_draft_without_endpoint_and_explain_with_one(small_plan, tmp_path):
    nowhere = {"INFRA_LLM_SETTINGS": str(tmp_path / "none.yaml")}
    out = run(["draft", "serve Qwen3-8B", "-o", str(tmp_path / "i.yaml")], nowhere)
    assert out.returncode == 1 and out.stderr.startswith("error: no LLM endpoint is configured")
    assert "Traceback" not in out.stderr and not (tmp_path / "i.yaml").exists()
    with ChatServer([{"content": "It is bound by its minimum of 2 replicas."}]) as server:
        out = run(["explain", str(small_plan), "--llm"], {**nowhere, **server.env()})
    assert out.returncode == 0 and out.stdout == "It is bound by its minimum of 2 replicas.\n", out.stderr
    assert server.requests[0]["model"] == "scripted"
