"""How long `infra validate` takes per manifest tree: the fixture tree (every kind infra renders) and the tree
rendered from each example plan, cold (first run in a process: schemas loaded) and warm (schemas cached).

    python benchmarks/validate_speed.py [--repeat N] [--json]

Each example is planned first (`infra plan` writes plan.yaml and manifests/); its tree is validated against its
plan. An example that does not plan or render is listed as skipped, with the reason. Warm runs build overlays
with kubectl kustomize too when kubectl is on PATH.
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
            "agent-workload", "omni-speech", "vision-language", "video-dit"]


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

    rows = []
    fixture = ROOT / "tests" / "fixtures" / "manifests"
    cold, warm, report = _time(lambda: api.validate(fixture / "good", profile=fixture / "profile.yaml"), args.repeat)
    rows.append({"tree": "fixture (13 objects, all kinds)", "objects": report.objects, "cold_s": round(cold, 3),
                 "warm_s": round(statistics.median(warm), 3), "errors": len(report.errors)})
    with tempfile.TemporaryDirectory() as tmp:
        for name in EXAMPLES:
            out = Path(tmp) / name
            try:
                api.plan(ROOT / "examples" / f"{name}.yaml", out)  # writes plan.yaml and manifests/
            except InfraError as exc:
                rows.append({"tree": name, "skipped": exc.problems[0].message})
                continue
            cold, warm, report = _time(lambda out=out: api.validate(out / "manifests", plan=out / "plan.yaml"),
                                       args.repeat)
            rows.append({"tree": name, "objects": report.objects, "cold_s": round(cold, 3),
                         "warm_s": round(statistics.median(warm), 3), "errors": len(report.errors)})
    if args.json:
        print(json.dumps(rows, indent=2, sort_keys=True))
        return 0
    for r in rows:
        if "skipped" in r:
            print(f"{r['tree']:34s} skipped: {r['skipped']}")
        else:
            print(f"{r['tree']:34s} {r['objects']:3d} objects  cold {r['cold_s']:.2f} s  warm {r['warm_s']:.3f} s  "
                  f"errors {r['errors']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
