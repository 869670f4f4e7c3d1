"""Agent tests: no real endpoint is ever reached, and commands run through the real CLI entry point."""

from __future__ import annotations

import io
import os
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from ..conftest import ROOT


@pytest.fixture(autouse=True)
def _no_configured_llm(monkeypatch, tmp_path_factory):
    """Only the scripted loopback server a test starts may be used: clear every variable that could point
    elsewhere, and point the settings file at nothing."""
    for name in list(os.environ):
        if name.startswith(("INFRA_LLM_", "OPENAI_")) and name != "INFRA_LLM_RECORD_UPSTREAM":
            monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("INFRA_LLM_SETTINGS", str(tmp_path_factory.mktemp("cfg") / "none.yaml"))


@dataclass
class Run:
    code: int
    stdout: str
    stderr: str


@pytest.fixture
def cli(monkeypatch, capsys):
    """cli(*args, env={}, stdin="") runs `infra ARGS` in this process and returns its exit code and output."""

    def _run(*args: str, env: dict[str, str] | None = None, stdin: str = "") -> Run:
        from infra import cli as cli_mod

        for k, v in (env or {}).items():
            monkeypatch.setenv(k, v)
        monkeypatch.setattr(sys, "stdin", io.StringIO(stdin))
        capsys.readouterr()
        code = 0
        try:
            cli_mod.main(list(args))
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else 1
        out = capsys.readouterr()
        for k in env or {}:
            monkeypatch.delenv(k, raising=False)
        return Run(code, out.out, out.err)

    return _run


@pytest.fixture(scope="session")
def small_plan(tmp_path_factory) -> Path:
    """A real plan of the small example (solved once per session, about a second)."""
    from infra import api

    out = tmp_path_factory.mktemp("plan")
    api.plan(ROOT / "examples" / "small-model-shared.yaml", out)
    return out / "plan.yaml"


@pytest.fixture
def planning():
    """The real `check` and `plan`, bundled as `infra.api` hands them to the agent."""
    from infra import api
    from infra.agent.planning import Planning

    return Planning(check=api.check, plan=api.plan)
