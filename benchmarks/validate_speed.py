"""How long `infra validate` takes per manifest tree: the fixture tree (every kind infra renders) and the tree
rendered from each example plan, cold (first run in a process: schemas loaded) and warm (schemas cached).

    python benchmarks/validate_speed.py [--repeat N] [--json]

Examples whose plan uses a framework rendering cannot launch yet are listed as skipped, with the reason.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from infra.errors import InfraError  # noqa: E402

EXAMPLES = ["small-model-shared", "rag-long-context", "chat-mixed-fleet", "deepseek-moe", "multi-service",
            "agent-workload"]


def _time(fn, repeat: int) -> tuple[float, list[float], object]:
    start = time.perf_counter()
    result = fn()
    cold = time.perf_counter() - start
    warm = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        warm.append(time.perf_counter() - start)
    return cold, warm, result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3, help="warm runs per tree")
    parser.add_argument("--json", action="store_true", help="print JSON")
    args = parser.parse_args()

    from infra import api
    from infra.planner.types import load_plan
    from infra.render import render_plan

    rows = []
    fixture = ROOT / "tests" / "fixtures" / "manifests"
    cold, warm, report = _time(lambda: api.validate(fixture / "good", profile=fixture / "profile.yaml"), args.repeat)
    rows.append({"tree": "fixture (13 objects, all kinds)", "objects": report.objects, "cold_s": round(cold, 3),
                 "warm_s": round(statistics.median(warm), 3), "errors": len(report.errors)})
    with tempfile.TemporaryDirectory() as tmp:
        for name in EXAMPLES:
            out = Path(tmp) / name
            api.plan(ROOT / "examples" / f"{name}.yaml", out)
            try:
                files = render_plan(load_plan(out / "plan.yaml"))
            except InfraError as exc:
                rows.append({"tree": name, "skipped": exc.problems[0].message})
                continue
            for rel, text in files.items():
                (out / "manifests" / rel).parent.mkdir(parents=True, exist_ok=True)
                (out / "manifests" / rel).write_text(text)
            _, warm, report = _time(lambda: api.validate(out / "manifests", plan=out / "plan.yaml"), args.repeat)
            rows.append({"tree": name, "objects": report.objects, "warm_s": round(statistics.median(warm), 3),
                         "errors": len(report.errors)})
    if args.json:
        print(json.dumps(rows, indent=2, sort_keys=True))
        return 0
    for r in rows:
        if "skipped" in r:
            print(f"{r['tree']:34s} skipped: {r['skipped']}")
        else:
            cold = f"cold {r['cold_s']:.2f} s, " if "cold_s" in r else ""
            print(f"{r['tree']:34s} {r['objects']:3d} objects  {cold}warm {r['warm_s']:.3f} s  "
                  f"errors {r['errors']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
