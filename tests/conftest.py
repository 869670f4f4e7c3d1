"""Shared fixtures: paths of the examples and a helper that writes a YAML file into a temporary directory."""

from __future__ import annotations

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples"


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
