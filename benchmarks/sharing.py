"""What fractional sharing saves on a fleet of small-model services: devices and cost with HAMi slices allowed and
with whole devices only, from the same intent planned both ways.

    python benchmarks/sharing.py [--services N] [--json]

The fleet: N low-traffic services on 7-8B models (internal tools, summarisers, classifiers), each with two
replicas for availability, on owned L40S nodes whose conventions name HAMi memory and core resources. With --json
the last line is {"services": N, "whole": {...}, "shared": {...}, "devices_saved": D, "cost_saved_per_hour": C}.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from infra import api  # noqa: E402

MODELS = ["Qwen/Qwen3-8B", "meta-llama/Llama-3.1-8B-Instruct", "Qwen/Qwen2.5-7B-Instruct",
          "mistralai/Mistral-7B-Instruct-v0.3"]


def intent(services: int, sharing: bool) -> str:
    svcs = []
    for i in range(services):
        svcs.append(f"""    - name: tool-{i}
      model: {MODELS[i % len(MODELS)]}
      precisions: [fp8]
      max_context: 8k
      workload:
        rate: {0.2 + 0.1 * (i % 4):.1f}/s
        input_tokens: {{mean: 1.5k, max: 6k}}
        output_tokens: {{mean: 150, max: 512}}
      slo:
        ttft: {{p99: 3s}}
        tpot: {{p99: 100ms}}
      availability: {{min_replicas: 2}}
      preferences:
        fractional_sharing: {str(sharing).lower()}
        frameworks: [vllm]""")
    return f"""apiVersion: infra.dev/v1alpha1
kind: ServingIntent
metadata:
  name: tools-fleet
spec:
  cluster:
    pools:
      - name: l40s
        device: L40S
        nodes: {max(2, services // 2)}
        devices_per_node: 8
        price: $1.10/h
        owned: true
  services:
{chr(10).join(svcs)}
"""


def run(services: int, sharing: bool, folder: Path) -> dict:
    path = folder / f"fleet-{'shared' if sharing else 'whole'}.yaml"
    path.write_text(intent(services, sharing), encoding="utf-8")
    plan = api.plan(path, None).plan.document()["spec"]
    use = plan["pools_used"]
    return {"devices": sum(u["devices"] for u in use), "allocated": round(sum(u["allocated"] for u in use), 3),
            "idle_fraction": max((u["idle_fraction"] for u in use), default=0.0),
            "cost_per_hour": plan["cost"]["per_hour"],
            "replicas": sum(a["replicas"] for s in plan["services"] for a in s["allocations"])}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--services", type=int, default=12)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        whole = run(args.services, False, Path(tmp))
        shared = run(args.services, True, Path(tmp))
    print(f"{args.services} small-model services on L40S, two replicas each")
    print(f"{'':8} {'devices':>8} {'allocated':>10} {'idle':>6} {'$/h':>8} {'replicas':>9}")
    for label, r in (("whole", whole), ("shared", shared)):
        print(f"{label:8} {r['devices']:>8} {r['allocated']:>10g} {r['idle_fraction']:>6.1%} "
              f"{r['cost_per_hour']:>8.2f} {r['replicas']:>9}")
    saved = whole["devices"] - shared["devices"]
    print(f"sharing saves {saved} devices ({saved / whole['devices']:.0%}) and "
          f"${whole['cost_per_hour'] - shared['cost_per_hour']:.2f}/h")
    if args.json:
        print(json.dumps({"services": args.services, "whole": whole, "shared": shared, "devices_saved": saved,
                          "cost_saved_per_hour": round(whole["cost_per_hour"] - shared["cost_per_hour"], 6)}))


if __name__ == "__main__":
    main()
