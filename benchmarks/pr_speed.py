"""How long `infra pr` takes once the plan exists: render, commit on the branch, body; and a re-run that must
make no commit. Planning is timed apart (it dominates). Runs on throw-away git repositories in a temp directory.

    python benchmarks/pr_speed.py [--examples NAME ...] [--json]
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

from infra.api import load_intent
from infra.errors import InfraError
from infra.gitops.pr import PrRequest, prepare
from infra.planner.plan import build_plan
from infra.planner.types import DeploymentPlan
from infra.render import render_tree
from infra.report.plan import plan_yaml
from tests.gitrepo import make_repos


def _render(plan: DeploymentPlan) -> tuple[dict[str, str], list[str]]:
    rendered = render_tree(plan)
    return rendered.files, rendered.notes


def measure(example: str) -> dict[str, object]:
    path = ROOT / "examples" / f"{example}.yaml"
    t0 = time.perf_counter()
    resolved = load_intent(path)
    plan, _ = build_plan(resolved)
    plan_s = time.perf_counter() - t0
    records = {"intent.yaml": path.read_text()}
    text = plan_yaml(plan)
    with tempfile.TemporaryDirectory(prefix="infra-pr-bench-") as tmp:
        _, clone = make_repos(Path(tmp))
        req = PrRequest(repo=clone, command=f"infra pr examples/{example}.yaml --repo .")
        t1 = time.perf_counter()
        try:
            first = prepare(plan, text, _render, records, req)
        except InfraError as exc:
            return {"example": example, "plan_s": round(plan_s, 3), "error": str(exc.problems[0])}
        first_s = time.perf_counter() - t1
        t2 = time.perf_counter()
        again = prepare(plan, text, _render, records, req)
        again_s = time.perf_counter() - t2
    return {"example": example, "plan_s": round(plan_s, 3), "pr_s": round(first_s, 3),
            "rerun_s": round(again_s, 3), "files": len(first.files), "body_chars": len(first.body),
            "rerun_committed": again.committed, "same_body": first.body == again.body}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--examples", nargs="+", default=["small-model-shared", "chat-mixed-fleet", "rag-long-context",
                                                        "deepseek-moe", "multi-service"])
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    rows = [measure(e) for e in args.examples]
    if args.json:
        print(json.dumps(rows, indent=2))
        return
    print(f"{'example':<22} {'plan s':>7} {'pr s':>6} {'rerun s':>8} {'files':>6} {'body':>6}  rerun")
    for r in rows:
        if "error" in r:
            print(f"{r['example']:<22} {r['plan_s']:>7.2f}  not rendered: {r['error']}")
            continue
        rerun = "no commit, same body" if not r["rerun_committed"] and r["same_body"] else "CHANGED"
        print(f"{r['example']:<22} {r['plan_s']:>7.2f} {r['pr_s']:>6.2f} {r['rerun_s']:>8.2f} {r['files']:>6} "
              f"{r['body_chars']:>6}  {rerun}")


if __name__ == "__main__":
    main()
