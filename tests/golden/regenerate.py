"""Regenerate the golden manifests: plan every example intent that plans, store its plan.yaml, render it.

Run from the repository root after an intended change to templates, rendering or planning:

    python tests/golden/regenerate.py

tests/unit/test_render_golden.py then compares renders of the stored plans with these files byte for byte.
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
GOLDEN = ROOT / "tests" / "golden"


def main() -> int:
    sys.path.insert(0, str(ROOT))
    import os

    from infra import api
    from infra.errors import InfraError
    from infra.planner.types import load_plan
    from infra.render import render_plan

    os.chdir(ROOT)  # plans record the intent path as given; keep it repository-relative
    for intent in sorted((ROOT / "examples").glob("*.yaml")):
        name = intent.stem
        target = GOLDEN / name
        try:
            api.plan(Path("examples") / intent.name, target)
        except InfraError as exc:
            print(f"{name}: does not plan ({type(exc).__name__}), no golden")
            shutil.rmtree(target, ignore_errors=True)
            continue
        (target / "report.md").unlink(missing_ok=True)
        files = render_plan(load_plan(target / "plan.yaml"))  # a render error here is a bug to fix, not skip
        shutil.rmtree(target / "manifests", ignore_errors=True)
        for rel, text in files.items():
            path = target / "manifests" / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text, encoding="utf-8", newline="\n")
        print(f"{name}: {len(files)} files")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
