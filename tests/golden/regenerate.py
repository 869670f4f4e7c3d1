"""Regenerate the golden manifests: plan every example intent that plans, store its plan.yaml, render it.

Run from anywhere after an intended change to templates, rendering, catalog or planning:

    python tests/golden/regenerate.py

Each `tests/golden/<example>/` then holds `plan.yaml` and either `manifests/` (the rendered tree) or
`render-error.txt` (why the plan does not render, e.g. a framework without a pinned image for the device).
tests/unit/test_render_golden.py renders the stored plans again and compares byte for byte.
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
GOLDEN = ROOT / "tests" / "golden"


def main() -> int:
    sys.path.insert(0, str(ROOT))
    from infra import api
    from infra.errors import InfraError
    from infra.planner.types import load_plan
    from infra.render import render_plan
    from infra.report.plan import plan_yaml

    os.chdir(ROOT)  # plans record the intent path as given; keep it repository-relative
    for intent in sorted((ROOT / "examples").glob("*.yaml")):
        name = intent.stem
        target = GOLDEN / name
        shutil.rmtree(target, ignore_errors=True)
        try:
            planned = api.plan(Path("examples") / intent.name).plan
        except InfraError as exc:
            print(f"{name}: does not plan ({type(exc).__name__}), no golden")
            continue
        target.mkdir(parents=True)
        (target / "plan.yaml").write_text(plan_yaml(planned), encoding="utf-8", newline="\n")
        try:
            files = render_plan(load_plan(target / "plan.yaml"))
        except InfraError as exc:
            (target / "render-error.txt").write_text(str(exc) + "\n", encoding="utf-8", newline="\n")
            print(f"{name}: does not render: {exc}")
            continue
        for rel, text in files.items():
            path = target / "manifests" / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text, encoding="utf-8", newline="\n")
        print(f"{name}: {len(files)} files")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
