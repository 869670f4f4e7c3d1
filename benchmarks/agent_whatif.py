"""How long a what-if takes: each intent patch the agent (or a reviewer) proposes is checked and solved for real.

    python benchmarks/agent_whatif.py [--json]

For each small example: the baseline plan, then a fixed set of patches (relaxed and tightened objectives, more
replicas, a budget below the plan's cost, disaggregation off, another precision), each through
`infra.agent.patches.solve_patch` (apply to the YAML, `infra check`, plan). Prints wall seconds, outcome and cost
per patch. Single process; the figures bound how many patches `plan --agent` can try in a conversation
(`budgets.max_solver_calls`).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from infra import api  # noqa: E402
from infra.agent.patches import parse_patch, solve_patch  # noqa: E402
from infra.agent.planning import Planning  # noqa: E402

CASES = {
    "small-model-shared.yaml": ["slo.ttft.p99=1s", "slo.ttft.p99=300ms", "availability.min_replicas=3",
                                "budget.per_hour=$0.3/h", "preferences.disaggregation=off"],
    "agent-workload.yaml": ["slo.ttft.p99=2s", "slo.tpot.p99=30ms", "budget.per_hour=$60/h", "precisions=bf16"],
}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    rows = []
    for name, patches in CASES.items():
        path = ROOT / "examples" / name
        t0 = time.perf_counter()
        base = api.plan(path)
        rows.append({"intent": name, "patch": "(baseline)", "status": "solved",
                     "cost_per_hour": base.plan.spec.cost.per_hour,
                     "seconds": round(time.perf_counter() - t0, 2)})
        for text in patches:
            t0 = time.perf_counter()
            outcome = solve_patch(path, parse_patch(text), Planning(check=api.check, plan=api.plan))
            rows.append({"intent": name, "patch": text, "status": outcome.status,
                         "cost_per_hour": outcome.plan.spec.cost.per_hour if outcome.plan else None,
                         "seconds": round(time.perf_counter() - t0, 2)})
    if args.json:
        print(json.dumps(rows, indent=2, sort_keys=True))
        return 0
    print(f"{'intent':<24} {'patch':<32} {'outcome':<11} {'$/h':>8} {'seconds':>8}")
    for r in rows:
        cost = "" if r["cost_per_hour"] is None else f"{r['cost_per_hour']:g}"
        print(f"{r['intent']:<24} {r['patch']:<32} {r['status']:<11} {cost:>8} {r['seconds']:>8.2f}")
    patches = [r["seconds"] for r in rows if r["patch"] != "(baseline)"]
    print(f"{len(patches)} what-ifs: mean {sum(patches) / len(patches):.2f} s, max {max(patches):.2f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
