"""Golden manifests: every example that plans renders to exactly the stored tree (or the stored render error).

Regenerate after an intended change with `python tests/golden/regenerate.py` and review the diff.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from infra.errors import InfraError
from infra.planner.types import load_plan
from infra.render import render_plan

GOLDEN = Path(__file__).resolve().parents[1] / "golden"
EXAMPLES = sorted(p.name for p in GOLDEN.iterdir() if (p / "plan.yaml").is_file())


def test_every_planning_example_has_a_golden():
    planned = {p.stem for p in (Path(__file__).resolve().parents[2] / "examples").glob("*.yaml")}
    assert set(EXAMPLES) <= planned and len(EXAMPLES) >= 6


@pytest.mark.parametrize("name", EXAMPLES)
def test_render_matches_golden(name):
    folder = GOLDEN / name
    plan = load_plan(folder / "plan.yaml")
    error = folder / "render-error.txt"
    if error.is_file():
        with pytest.raises(InfraError) as exc:
            render_plan(plan)
        assert str(exc.value) + "\n" == error.read_text(encoding="utf-8")
        return
    files = render_plan(plan)
    stored = {p.relative_to(folder / "manifests").as_posix(): p.read_bytes()
              for p in sorted((folder / "manifests").rglob("*")) if p.is_file()}
    assert sorted(files) == sorted(stored), "file set differs; regenerate with tests/golden/regenerate.py"
    for rel, text in files.items():
        assert text.encode("utf-8") == stored[rel], f"{name}/{rel} differs from the golden file"


@pytest.mark.parametrize("name", EXAMPLES)
def test_planning_the_example_gives_its_golden_plan(name, monkeypatch):
    # The render test reads the stored plan; this one plans the example again, so that a plan that moves (a
    # tie broken another way, a fingerprint) is seen and the goldens regenerated on purpose, as regenerate.py does.
    from infra import api
    from infra.report.plan import plan_yaml

    root = GOLDEN.parents[1]
    monkeypatch.chdir(root)  # plans record the intent path as given
    planned = api.plan(Path("examples") / f"{name}.yaml").plan
    assert plan_yaml(planned) == (GOLDEN / name / "plan.yaml").read_text(encoding="utf-8"), \
        f"{name}: the plan differs from the golden; regenerate with tests/golden/regenerate.py and review the diff"
