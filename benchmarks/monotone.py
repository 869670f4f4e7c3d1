"""How far predictions ever step back as the load rises: the physics says they should not.

    python benchmarks/monotone.py [--rates 300] [--json]

Nine aggregated deployments (dense and MoE, vLLM, SGLang and TRT-LLM, with and without batch caps, a small step
budget, attention data parallelism) under six length mixes (fixed and variable, short and long prompts and
answers). Open loop: `--rates` rates from near zero up past the first rate predicted unstable; closed loop: 1 to
400 clients. For every pair of neighbouring loads it checks the mean and p50..p99.9 of TTFT, TPOT, ITL and E2E
(and the throughput of a closed loop) and prints how many pairs stepped back by more than 0.01%, by how much at
worst, and how many rates were held above one predicted unstable (a second capacity, which a capacity search
bisecting on the rate would trip on). Then the same closed loops on three prefill/decode deployments with their
workers given, and how often and how far those step back.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from infra.catalog.loader import load_catalog
from infra.perf.estimate import build_workers, predict
from infra.perf.shape import Deployment, Parallel, Role, Workload

MIXES = ((2048, 256, 0.0, 0.0), (1024, 1024, 0.3, 0.5), (8192, 1024, 0.0, 0.0), (128, 2048, 0.5, 0.5),
         (4096, 64, 0.2, 0.2), (512, 512, 1.0, 1.0))
"""(prompt, answer, prompt CV, answer CV)."""
CLIENTS = tuple(range(1, 401))
METRICS = ("ttft", "tpot", "itl", "e2e")
KEYS = ("mean", "p50", "p90", "p99", "p99.9")
SLACK = 1e-4
"""Relative step back below which a pair counts as level (the solvers' own tolerances are far finer)."""


def deployments(catalog) -> list[Deployment]:
    def dep(model, device, framework, tp, precision=None, ep=1, dp=1, batch=None, budget=8192):
        m = catalog.model(model)
        par = Parallel(tp=tp, ep=ep, moe_tp=max(1, tp * dp // ep), attention_dp=dp) if m.moe else Parallel(tp=tp)
        return Deployment(model, device, framework, precision or m.native_precision, "agg",
                          agg=Role(parallel=par, batch_cap=batch, max_num_tokens=budget))

    return [dep("Llama-3.1-70B", "H200", "vllm", 4), dep("Llama-3.1-8B", "H100-SXM", "vllm", 1),
            dep("Qwen3-235B-A22B", "H200", "sglang", 8, "fp8", ep=8),
            dep("DeepSeek-R1", "B200", "trtllm", 8, "fp4", ep=8, dp=8), dep("gpt-oss-120b", "H100-SXM", "vllm", 2),
            dep("Llama-3.1-70B", "H200", "vllm", 4, batch=64, budget=2048),
            dep("Qwen3-32B", "H100-SXM", "vllm", 2, batch=256), dep("Llama-3.1-8B", "L40S", "vllm", 1, batch=32,
                                                                    budget=4096),
            dep("DeepSeek-R1", "H200", "sglang", 8, "fp8", ep=8)]


def disaggregated(catalog) -> list[Deployment]:
    """Prefill/decode deployments with their workers given (the model sizes them otherwise, and more workers at
    more clients lower latencies by design)."""
    def dep(model, device, tp, prefill_workers, precision=None, ep=1, batch=None):
        m = catalog.model(model)
        par = Parallel(tp=tp, ep=ep, moe_tp=max(1, tp // ep)) if m.moe else Parallel(tp=tp)
        return Deployment(model, device, "sglang", precision or m.native_precision, "disagg",
                          prefill=Role(parallel=par, workers=prefill_workers),
                          decode=Role(parallel=par, batch_cap=batch, workers=1))

    return [dep("Llama-3.1-8B", "H100-SXM", 1, 2, batch=128), dep("Llama-3.1-70B", "H200", 4, 1),
            dep("DeepSeek-R1", "H200", 8, 1, "fp8", ep=8)]


def scan_closed(dep, catalog) -> dict:
    """The closed-loop half of `scan` alone."""
    workers, _, link = build_workers(dep, catalog)
    figures = {"closed_pairs": 0, "closed_back": 0, "worst": {}}
    for isl, osl, isl_cv, osl_cv in MIXES:
        prev = None
        for c in CLIENTS:
            p = predict(dep, Workload(isl=isl, osl=osl, isl_cv=isl_cv, osl_cv=osl_cv, concurrency=c), workers, link)
            if prev is not None and p.stable:
                figures["closed_pairs"] += 1
                drops = step_backs(prev, p, closed=True)
                figures["closed_back"] += bool(drops)
                for name, drop in drops.items():
                    figures["worst"][name] = max(figures["worst"].get(name, 0.0), drop)
            prev = p if p.stable else prev
    return figures


def step_backs(prev, cur, closed: bool) -> dict[str, float]:
    """Relative drop of each figure from `prev` to `cur` where it exceeds SLACK."""
    out = {}
    for metric in METRICS:
        for key in KEYS:
            a, b = getattr(prev, metric)[key], getattr(cur, metric)[key]
            if b < a * (1 - SLACK):
                out[f"{metric} {key}"] = 1 - b / a
    if closed and cur.throughput_rps < prev.throughput_rps * (1 - SLACK):
        out["throughput"] = 1 - cur.throughput_rps / prev.throughput_rps
    return out


def scan(dep, catalog, rates: int) -> dict:
    workers, _, link = build_workers(dep, catalog)
    figures = {"open_pairs": 0, "open_back": 0, "second_capacity": 0, "closed_pairs": 0, "closed_back": 0,
               "worst": {}}

    def note(drops: dict[str, float], loop: str) -> None:
        if drops:
            figures[f"{loop}_back"] += 1
        for name, drop in drops.items():
            key = f"{loop}: {name}"
            figures["worst"][key] = max(figures["worst"].get(key, 0.0), drop)

    for isl, osl, isl_cv, osl_cv in MIXES:
        lengths = {"isl": isl, "osl": osl, "isl_cv": isl_cv, "osl_cv": osl_cv}

        def at(lengths=lengths, **load):
            return predict(dep, Workload(**lengths, **load), workers, link)

        top = 0.5
        while at(rate=top).stable:
            top *= 2
        prev, unstable_seen = None, False
        for k in range(1, rates + 1):
            p = at(rate=top * k / rates)
            if not p.stable:
                unstable_seen = True
                continue
            figures["second_capacity"] += unstable_seen
            if prev is not None:
                figures["open_pairs"] += 1
                note(step_backs(prev, p, closed=False), "open")
            prev = p
        prev = None
        for c in CLIENTS:
            p = at(concurrency=c)
            if prev is not None and p.stable:
                figures["closed_pairs"] += 1
                note(step_backs(prev, p, closed=True), "closed")
            prev = p if p.stable else prev
    return figures


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rates", type=int, default=300, help="open-loop rates per deployment and length mix")
    ap.add_argument("--json", action="store_true", help="end with one JSON line of the figures")
    args = ap.parse_args()
    catalog = load_catalog()
    total = {"open_pairs": 0, "open_back": 0, "second_capacity": 0, "closed_pairs": 0, "closed_back": 0}
    worst: dict[str, float] = {}
    for dep in deployments(catalog):
        figures = scan(dep, catalog, args.rates)
        for key in total:
            total[key] += figures[key]
        for key, drop in figures["worst"].items():
            worst[key] = max(worst.get(key, 0.0), drop)
        back = max(figures["worst"].values(), default=0.0)
        print(f"{dep.model:16s} {dep.framework:7s} {dep.device:9s} open {figures['open_back']:4d}/"
              f"{figures['open_pairs']:5d} stepped back, closed {figures['closed_back']:3d}/"
              f"{figures['closed_pairs']:4d}, worst {100 * back:.2f}%, rates held above an unstable one "
              f"{figures['second_capacity']}")
    print(f"open loop: {total['open_back']} of {total['open_pairs']} neighbouring rates stepped back; closed loop: "
          f"{total['closed_back']} of {total['closed_pairs']} neighbouring client counts; rates held above an "
          f"unstable one: {total['second_capacity']}")
    for key, drop in sorted(worst.items(), key=lambda kv: -kv[1]):
        print(f"  worst {key}: {100 * drop:.2f}%")
    pd = {"pairs": 0, "back": 0}
    pd_worst: dict[str, float] = {}
    for dep in disaggregated(catalog):
        figures = scan_closed(dep, catalog)
        pd["pairs"] += figures["closed_pairs"]
        pd["back"] += figures["closed_back"]
        for key, drop in figures["worst"].items():
            pd_worst[key] = max(pd_worst.get(key, 0.0), drop)
        print(f"{dep.model:16s} {dep.framework:7s} {dep.device:9s} P/D closed {figures['closed_back']:3d}/"
              f"{figures['closed_pairs']:4d}, worst {100 * max(figures['worst'].values(), default=0.0):.2f}%")
    print(f"disaggregated closed loop: {pd['back']} of {pd['pairs']} neighbouring client counts stepped back")
    for key, drop in sorted(pd_worst.items(), key=lambda kv: -kv[1])[:6]:
        print(f"  worst P/D closed: {key}: {100 * drop:.2f}%")
    means = max((d for k, d in worst.items() if k.endswith((" mean", "throughput"))), default=0.0)
    if args.json:
        print(json.dumps({**total, "worst_mean_or_throughput": round(means, 6),
                          "worst_any": round(max(worst.values(), default=0.0), 6), "pd_closed_pairs": pd["pairs"],
                          "pd_closed_back": pd["back"], "pd_worst_any": round(max(pd_worst.values(), default=0.0), 6)},
                         sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
