"""The package layering of DESIGN.md §2, enforced on the import statements of every module."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

PKG = Path(__file__).resolve().parents[2] / "infra"

# What each layer may import from the package, besides itself, `infra.errors`, `infra.files` and `infra.limits`.
ALLOWED = {
    "catalog": set(),
    "intent": {"catalog"},
    "perf": {"catalog", "intent"},
    "planner": {"catalog", "intent", "perf"},
    "bench": {"catalog", "intent", "perf", "planner"},
    "report": {"api", "catalog", "intent", "perf", "planner", "render", "validators", "bench"},
    "render": {"catalog", "intent", "planner"},
    "gitops": {"catalog", "intent", "perf", "planner", "render", "report"},
    "validators": {"catalog", "intent", "planner"},
    # not `api`: the api calls into the agent, which gets what it plans with handed in (infra.agent.planning)
    "agent": {"catalog", "intent", "perf", "planner", "report"},
}
NEVER = {"agent"}  # only cli/api may reach it, and only lazily


def _imports(path: Path) -> list[tuple[str, bool]]:
    """(module, at_top_level) for every `infra.*` import in a file."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    top = {id(n) for n in tree.body}
    out = []
    for node in ast.walk(tree):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module == "infra" and node.level == 0:
            names = [f"infra.{a.name}" for a in node.names]  # `from infra import api` reaches infra.api
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module]
        for name in names:
            if name == "infra" or name.startswith("infra."):
                out.append((name, id(node) in top))
    return out


def _layer(path: Path) -> str:
    rel = path.relative_to(PKG)
    return rel.parts[0].removesuffix(".py")


def test_every_module_respects_its_layer():
    offences = []
    for path in sorted(PKG.rglob("*.py")):
        layer = _layer(path)
        for module, top_level in _imports(path):
            parts = module.split(".")
            target = parts[1] if len(parts) > 1 else "infra"
            if target in (layer, "errors", "files", "limits"):
                continue
            if target in NEVER and not (layer in ("cli", "api") and not top_level):
                offences.append(f"{path.relative_to(PKG)} imports {module}")
            if layer in ALLOWED and target not in ALLOWED[layer]:
                offences.append(f"{path.relative_to(PKG)} ({layer}) imports {module}")
    assert not offences, "layering broken:\n" + "\n".join(offences)


def test_layering_check_catches_a_violation(tmp_path):
    bad = tmp_path / "mod.py"
    bad.write_text("from infra.planner import solve\nimport infra.intent\n")
    assert ("infra.planner", True) in _imports(bad)


def test_importing_the_api_does_not_import_openai():
    code = "import sys, infra.api, infra.cli; print('openai' in sys.modules, 'ortools' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert out == ["False", "False"]
