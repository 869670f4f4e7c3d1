"""Pipelines planned and verified end to end: wall time of `infra plan` (solve, render, validate, stage-by-stage
simulation) per pipeline example, and what the simulation saw per stage.

    python benchmarks/pipelines.py [--example NAME ...] [--repeat N] [--json]

For each example (default: the three pipeline examples) it prints the best of N wall times of `api.plan` with
verification, the verdict, each pipeline objective (target / predicted / measured), and per stage its servers,
busy share, queueing and bubble (time a request waits in the stage on the stage before it). With --json the last
line is {"examples": {NAME: {"seconds": S, "verdict": V, "objectives": {...}, "stages": [...]}}}.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from infra import api  # noqa: E402

EXAMPLES = ("omni-speech", "vision-language", "video-dit")


def run(name: str, repeat: int) -> dict:
    best = float("inf")
    result = None
    for _ in range(repeat):
        with tempfile.TemporaryDirectory() as out:
            t0 = time.perf_counter()
            result = api.plan(ROOT / "examples" / f"{name}.yaml", out, verify=True)
            best = min(best, time.perf_counter() - t0)
    assert result is not None
    v = result.plan.document()["spec"]["verification"]
    rnd = v["rounds"][v["plan_round"] - 1]
    (pipe,) = rnd.get("pipelines") or [None]
    return {"seconds": round(best, 3), "verdict": v["verdict"], "rounds": len(v["rounds"]),
            "objectives": {o["key"]: {"target_ms": o["target_ms"], "predicted_ms": o["predicted_ms"],
                                      "measured_ms": o["measured_ms"], "verdict": o["verdict"]}
                           for o in (pipe or {}).get("objectives", [])},
            "stages": (pipe or {}).get("stages", [])}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--example", action="append", choices=EXAMPLES, help="example to run (repeatable)")
    ap.add_argument("--repeat", type=int, default=1, help="runs per example; the best wall time is kept")
    ap.add_argument("--json", action="store_true", help="end with one JSON line")
    args = ap.parse_args()
    out = {}
    for name in args.example or EXAMPLES:
        r = out[name] = run(name, args.repeat)
        print(f"{name}: plan + render + validate + verification {r['seconds']:.2f} s, {r['rounds']} round(s), "
              f"verdict {r['verdict']}")
        for key, o in r["objectives"].items():
            print(f"  {key}: target {o['target_ms']:g} ms, predicted {o['predicted_ms']:g}, measured "
                  f"{o['measured_ms']:g} ({o['verdict']})")
        for st in r["stages"]:
            wait = st.get("wait_ms") or {}
            print(f"  stage {st['name']:<10} {st['kind']:<14} servers {st['servers']:>2}  busy "
                  f"{st['utilisation']:>5.0%}  queue mean {wait.get('mean', 0):>8.1f} ms  bubble mean "
                  f"{st['bubble_ms'].get('mean', 0):>8.1f} ms ({st['bubble_share']:.0%} of time in stage)")
    if args.json:
        print(json.dumps({"examples": out}, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
