"""Shared fixtures: paths of the examples and a helper that writes a YAML file into a temporary directory."""

from __future__ import annotations

from pathlib import Path

import pytest

from infra.perf.calibration import Factors

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples"


VLLM_H100 = Factors(gemm=0.48493, mem=0.62394, attn=0.71381, comm=0.73459, step_ms=0.65816, request_ms=22.00665,
                    collective_us=28.31972, queue=0.19299, layer_us=0.0)
"""vLLM's factors on H100 from one fit, held fixed for tests that probe a deployment at the edge of a regime (the
rate where a batch stops settling, where its slot queue fills): a refit moves that edge, not the physics tested."""


def example_intents() -> list[Path]:
    return sorted(EXAMPLES.glob("*.yaml"))


def example_profiles() -> list[Path]:
    return sorted((EXAMPLES / "profiles").glob("*.yaml"))


@pytest.fixture
def write(tmp_path: Path):
    """write(name, text) -> path of a new file under a fresh temporary directory."""

    def _write(name: str, text: str) -> Path:
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
        return path

    return _write
