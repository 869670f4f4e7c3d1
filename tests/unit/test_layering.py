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
    "report": {"catalog", "intent", "perf", "planner", "render", "validators", "bench"},
    "render": {"catalog", "intent", "planner"},
    "gitops": {"catalog", "intent", "perf", "planner", "render", "report"},
    "validators": {"catalog", "intent", "planner"},
    # not `api`: the api calls into the agent, which gets what it plans with handed in (infra.agent.planning)
    "agent": {"catalog", "intent", "perf", "planner", "report"},
    "fitting": {"catalog", "intent", "perf"},
    # check, plan, render, validate, bench, pr, calibrate and verify as the commands run them; `api` re-exports it
    "workflow": {"catalog", "intent", "perf", "planner", "bench", "report", "render", "validators", "gitops"},
}
NEVER = {"agent"}  # only cli/api may reach it, and only lazily
OFFLINE = {"fitting"}  # calibration tooling: the benchmarks and tests use it, nothing of the product does


def _imports(path: Path) -> list[tuple[str, bool]]:
    """(module, at_top_level) for every `infra.*` import in a file."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    top = {id(n) for n in tree.body}
    out = []
    for node in ast.walk(tree):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            # `from infra import api` reaches infra.api, `from infra.x import y` module infra.x.y where there is one
            names = [f"{node.module}.{a.name}" for a in node.names]
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
            if target in OFFLINE:
                offences.append(f"{path.relative_to(PKG)} imports offline tooling {module}")
            if layer in ALLOWED and target not in ALLOWED[layer]:
                offences.append(f"{path.relative_to(PKG)} ({layer}) imports {module}")
    assert not offences, "layering broken:\n" + "\n".join(offences)


def _module(path: Path, root: Path) -> str:
    parts = path.relative_to(root.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _import_graph(root: Path) -> dict[str, set[str]]:
    """Module -> the package's modules it imports, at the top level or inside a function alike (`from infra.x
    import y` reaches module infra.x.y where there is one, else infra.x)."""
    files = {_module(p, root): p for p in sorted(root.rglob("*.py"))}

    def resolve(name: str) -> str:
        while name and name not in files:
            name = name.rpartition(".")[0]
        return name

    return {name: {resolve(t) for t, _ in _imports(path)} - {name, ""} for name, path in files.items()}


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected groups of more than one module (Tarjan's algorithm, iteratively)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on.add(root)
        while work:
            v, children = work[-1]
            w = next(children, None)
            if w is not None:
                if w not in index:
                    index[w] = low[w] = len(index)
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter(sorted(graph.get(w, ())))))
                elif w in on:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                group = []
                while True:
                    w = stack.pop()
                    on.discard(w)
                    group.append(w)
                    if w == v:
                        break
                if len(group) > 1:
                    out.append(sorted(group))
    return out


def test_no_module_imports_itself_back():
    # A cycle hidden by an import inside a function is still a cycle: the two modules cannot be read apart.
    cycles = _cycles(_import_graph(PKG))
    assert not cycles, "import cycles:\n" + "\n".join(" <-> ".join(c) for c in cycles)


def test_the_cycle_check_sees_imports_inside_functions(tmp_path):
    pkg = tmp_path / PKG.name
    (pkg / "render").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "render" / "__init__.py").write_text("")
    (pkg / "render" / "context.py").write_text(f"def build():\n    from {PKG.name}.render.stages import x\n")
    (pkg / "render" / "stages.py").write_text(f"from {PKG.name}.render.context import build\nx = 1\n")
    graph = _import_graph(pkg)
    assert graph[f"{PKG.name}.render.context"] == {f"{PKG.name}.render.stages"}
    assert _cycles(graph) == [[f"{PKG.name}.render.context", f"{PKG.name}.render.stages"]]


def test_layering_check_catches_a_violation(tmp_path):
    bad = tmp_path / "mod.py"
    bad.write_text("from infra.planner import solve\nimport infra.intent\n")
    assert ("infra.planner.solve", True) in _imports(bad)


def test_importing_the_api_does_not_import_openai():
    code = "import sys, infra.api, infra.cli; print('openai' in sys.modules, 'ortools' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert out == ["False", "False"]


def test_the_facade_re_exports_what_it_lists():
    # Each name resolves (a wrong module in the table would fail only when a user reached for it), and the
    # facade defines nothing else of the workflow's itself.
    from infra import api

    for name in api.__all__:
        assert callable(getattr(api, name)), name
    assert set(api.__all__) == set(api._EXPORTS) | {"draft", "explain", "plan_agent", "review"}
    assert all(m.startswith(("infra.workflow.", "infra.catalog.", "infra.intent.")) for m in api._EXPORTS.values())
    assert api.plan is __import__("infra.workflow.plan", fromlist=["plan"]).plan
