"""How long rendering takes per plan, and how large the trees are.

    python benchmarks/render_speed.py [--repeat N] [--json]

Renders every stored golden plan (tests/golden/<example>/plan.yaml) N times after one warm-up (which loads the
catalog and compiles the templates) and prints the median wall time per plan, the object count and the bytes
written, plus whether repeated renders gave identical bytes.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from infra.errors import InfraError  # noqa: E402
from infra.planner.types import load_plan  # noqa: E402
from infra.render import render_plan  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    rows = []
    for folder in sorted((ROOT / "tests" / "golden").iterdir()):
        if not (folder / "plan.yaml").is_file():
            continue
        plan = load_plan(folder / "plan.yaml")
        try:
            first = render_plan(plan)
        except InfraError as exc:
            rows.append({"plan": folder.name, "error": str(exc).split(" — ")[0]})
            continue
        times, same = [], True
        for _ in range(args.repeat):
            t = time.perf_counter()
            files = render_plan(plan)
            times.append(time.perf_counter() - t)
            same = same and files == first
        rows.append({"plan": folder.name, "median_ms": round(statistics.median(times) * 1000, 1),
                     "objects": sum(1 for p in first if not p.endswith("kustomization.yaml")),
                     "files": len(first), "bytes": sum(len(t.encode()) for t in first.values()),
                     "identical": same})
    if args.json:
        print(json.dumps(rows, indent=2, sort_keys=True))
        return 0
    print(f"{'plan':<20} {'median ms':>10} {'objects':>8} {'files':>6} {'bytes':>8}  identical")
    for r in rows:
        if "error" in r:
            print(f"{r['plan']:<20} does not render: {r['error']}")
        else:
            print(f"{r['plan']:<20} {r['median_ms']:>10} {r['objects']:>8} {r['files']:>6} {r['bytes']:>8}  "
                  f"{r['identical']}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
