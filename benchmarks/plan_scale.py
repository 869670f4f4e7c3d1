"""How planning time grows with the problem: services, device types, devices and nodes.

    python benchmarks/plan_scale.py [--json] [--quick | --largest] [--examples]

Each case writes a synthetic intent and cluster profile (services on catalog models with open-loop load and
latency objectives; pools of catalog devices, served by vLLM), then times
`infra.api.plan` end to end: candidate scoring by the performance model and the CP-SAT solve. The modules are
imported first, so the first case is not charged for it. --quick runs the small cases only; --largest adds 500
services on 24 device types and 99,840 devices. --examples adds what a user waits for: `infra plan` of every
example intent with its verification (the plan simulated, re-planned while an objective fails), rendered and
validated into a temporary folder, the best of two runs after a first one that warms the imports and caches.
With --json the last line is {"cases": [{"services": S, "device_types": T, "devices": D, "nodes": N,
"seconds": X, "gap": G}, ...]} (and "examples": [{"example": E, "seconds": X, "rounds": R, "verdict": V}, ...]).
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
from infra.errors import InfraError  # noqa: E402
from infra.workflow import plan as _plan  # noqa: E402, F401  (what api.plan imports on first use)

DEVICES = ["H100-SXM", "H200", "B200", "A100-80G", "L40S", "L4", "H20", "MI300X", "Ascend-910B3", "RTX-4090",
           "L20", "H100-PCIe", "B300", "GB200", "GB300", "MI325X", "Ascend-910B2", "Ascend-910B4", "Ascend-910C",
           "Ascend-310P", "K100-AI", "S4000", "P800", "C500"]
FRAMEWORKS = "[vllm, vllm-ascend, vllm-fl, vllm-kunlun, vllm-metax]"
"""Cases of more than twelve device types let each vendor's vLLM build serve its devices; the smaller cases keep
upstream vLLM alone, as they always have, so that their figures compare across versions."""
MODELS = ["Llama-3.1-8B", "Qwen3-8B", "Qwen2.5-7B", "Mistral-7B-v0.3", "Qwen3-32B", "Llama-3.1-70B"]


def write_case(folder: Path, services: int, types: int, nodes_per_pool: int) -> None:
    pools = []
    for i, dev in enumerate(DEVICES[:types]):
        pools.append(f"""    - name: pool-{i}
      device: {dev}
      nodes: {nodes_per_pool}
      devices_per_node: 8
      topology: {{zone: zone-{i % 3}}}""")
    svcs = []
    for s in range(services):
        svcs.append(f"""    - name: svc-{s}
      model: {MODELS[s % len(MODELS)]}
      workload:
        rate: {1 + (s * 7) % 20}/s
        input_tokens: {{mean: {500 + (s * 131) % 3000}, p99: {4000 + (s * 131) % 3000}}}
        output_tokens: {{mean: {100 + (s * 37) % 400}}}
      slo:
        ttft: {{p99: 2s}}
        tpot: {{p99: 80ms}}
      preferences:
        frameworks: {FRAMEWORKS if types > 12 else "[vllm]"}""")
    (folder / "profile.yaml").write_text("apiVersion: infra.dev/v1alpha1\nkind: ClusterProfile\nmetadata: {name: scale}\n"
                                         "spec:\n  pools:\n" + "\n".join(pools) + "\n")
    (folder / "intent.yaml").write_text("apiVersion: infra.dev/v1alpha1\nkind: ServingIntent\nmetadata: {name: scale}\n"
                                        "spec:\n  cluster: {profile: profile.yaml}\n  services:\n" + "\n".join(svcs) + "\n")


def time_examples() -> list[dict]:
    """Each example planned as `infra plan EXAMPLE -o OUT` does, verification included."""
    rows = []
    print(f"{'example':24s} {'seconds':>8s} {'rounds':>6s}  verdict")
    for intent in sorted((ROOT / "examples").glob("*.yaml")):
        best, rounds, verdict = float("inf"), 0, "-"
        for run in range(3):
            with tempfile.TemporaryDirectory() as tmp:
                start = time.perf_counter()
                try:
                    result = api.plan(intent, Path(tmp) / "out", verify=True)
                    v = result.verification
                    rounds, verdict = (len(v.rounds), v.verdict) if v is not None else (0, "-")
                except InfraError as exc:
                    verdict = type(exc).__name__
                if run:  # the first run warms the imports and caches
                    best = min(best, time.perf_counter() - start)
        rows.append({"example": intent.stem, "seconds": round(best, 3), "rounds": rounds, "verdict": verdict})
        print(f"{intent.stem:24s} {best:8.2f} {rounds:6d}  {verdict}")
    return rows


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--json", action="store_true")
    size = ap.add_mutually_exclusive_group()
    size.add_argument("--quick", action="store_true", help="only the small cases")
    size.add_argument("--largest", action="store_true", help="add 500 services on 24 device types")
    ap.add_argument("--examples", action="store_true", help="also time every example, verification included")
    args = ap.parse_args()
    grid = [(1, 4, 2), (5, 4, 8), (10, 8, 32)] + ([] if args.quick else [(50, 12, 104)]) + (
        [(500, 24, 520)] if args.largest else [])
    cases = []
    print(f"{'services':>8s} {'types':>5s} {'devices':>7s} {'nodes':>5s} {'seconds':>8s} {'gap':>6s}  status")
    for services, types, nodes in grid:
        with tempfile.TemporaryDirectory() as tmp:
            folder = Path(tmp)
            write_case(folder, services, types, nodes)
            start = time.perf_counter()
            try:
                result = api.plan(folder / "intent.yaml")
                status, gap = result.plan.spec.solver.status, result.plan.spec.solver.gap
            except InfraError as exc:
                status, gap = f"{type(exc).__name__}", None
            seconds = time.perf_counter() - start
        row = {"services": services, "device_types": types, "devices": types * nodes * 8, "nodes": types * nodes,
               "seconds": round(seconds, 3), "gap": gap}
        cases.append(row)
        print(f"{services:8d} {types:5d} {row['devices']:7d} {row['nodes']:5d} {seconds:8.2f} "
              f"{'-' if gap is None else f'{gap:.4f}':>6s}  {status}")
    examples = time_examples() if args.examples else None
    if args.json:
        print(json.dumps({"cases": cases, **({"examples": examples} if examples is not None else {})}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
