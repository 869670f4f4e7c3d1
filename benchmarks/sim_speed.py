"""How fast the simulator runs a whole plan: requests per second of real time on one core.

    python benchmarks/sim_speed.py [--requests 100000] [--replicas 16] [--json]

Plans `examples/chat-mixed-fleet.yaml`, keeps its largest allocation, sets it to `--replicas` replicas and drives
it with the service's workload (gamma arrivals, lognormal lengths, prefix sharing) at the load per replica the
plan gave that allocation, times `--replicas`. Reports the simulation's wall time (engines built, requests
generated and records made included; CPU time beside it, which is what counts on a shared machine) and what it
measured, so a faster simulator that changed the answer shows.
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
from infra.bench.metrics import summarize  # noqa: E402
from infra.bench.simulate import service_load, simulate_plan  # noqa: E402
from infra.planner.types import DeploymentPlan  # noqa: E402

EXAMPLE = ROOT / "examples" / "chat-mixed-fleet.yaml"


def scaled_plan(replicas: int) -> tuple[DeploymentPlan, str, float]:
    """(plan with one allocation of `replicas` replicas, service name, its rate)."""
    plan = api.plan(EXAMPLE, top=0).plan
    svc = plan.spec.services[0]
    alloc = max(svc.allocations, key=lambda a: a.capacity_per_replica * a.replicas)
    alloc = alloc.model_copy(update={"replicas": replicas})
    svc = svc.model_copy(update={"allocations": [alloc]})
    plan = plan.model_copy(update={"spec": plan.spec.model_copy(update={"services": [svc]})})
    return plan, svc.name, alloc.load_per_replica * replicas


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--requests", type=int, default=100_000)
    ap.add_argument("--replicas", type=int, default=16)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", action="store_true", help="end with one JSON line of the figures")
    args = ap.parse_args()

    plan, service, rate = scaled_plan(args.replicas)
    t0, c0 = time.perf_counter(), time.process_time()
    load = service_load(plan, service, requests=args.requests, seed=args.seed, rate=rate, intent=EXAMPLE)
    t_load = time.perf_counter() - t0
    result = simulate_plan(plan, service, load=load)
    wall = time.perf_counter() - t0
    cpu = time.process_time() - c0
    summary = summarize(result.records, plan.spec.services[0].objectives, itl_pool=result.itl_pool)
    steps = sum(e.steps for e in result.engines)
    figures = {
        "requests": args.requests, "replicas": args.replicas, "rate_rps": round(rate, 3),
        "wall_s": round(wall, 3), "cpu_s": round(cpu, 3), "generate_s": round(t_load, 3), "simulate_s": round(result.wall_s, 3),
        "requests_per_s": round(args.requests / wall, 1), "engine_steps": steps,
        "virtual_s": round(summary.duration_s, 1), "completed": summary.completed, "failed": summary.failed,
        "preemptions": result.preemptions,
        "ttft_p99_ms": summary.metrics["ttft"].get("p99"), "tpot_p99_ms": summary.metrics["tpot"].get("p99"),
    }
    print(f"{args.requests} requests through {args.replicas} replicas at {rate:.1f} req/s: {wall:.2f} s wall, "
          f"{cpu:.2f} s CPU ({figures['requests_per_s']:.0f} requests/s; generation {t_load:.2f} s, simulation "
          f"{result.wall_s:.2f} s), {steps} engine steps over {summary.duration_s:.0f} s of virtual time")
    print(f"  completed {summary.completed}, failed {summary.failed}, preemptions {result.preemptions}, "
          f"TTFT p99 {figures['ttft_p99_ms']:.1f} ms, TPOT p99 {figures['tpot_p99_ms']:.2f} ms")
    if args.json:
        print(json.dumps(figures, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
