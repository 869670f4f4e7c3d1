"""How fast the performance model scores candidates: the planner's fast path, the full estimate, and vectorised
open-loop predictions.

    python benchmarks/perf_speed.py [--n 20000] [--json]

Fast path per candidate: memory fit of a layout (weights, activations, KV capacity), the decode and prefill step
times at the workload's lengths, and the steady-state batch the KV cache allows, for a sweep over models,
devices, precisions and tensor-parallel sizes. Full path: `estimate()` with the closed-loop serving model, one
deployment at a time (compiled each time). Vector closed loop: `infra.perf.vector_closed.predict_closed_agg` over
every deployment of the sweep that fits, under the same length mixes at client counts from 1 to 256, in one call
(the scalar `closed_loop_agg` on a sample); full estimates in vector passes: `estimates()` of the compiled
deployments at those loads, Estimate objects with every percentile (what `infra estimate --cases` and a search's
rounds get).
Vector open loop: `infra.perf.vector.predict_open_agg` over every deployment of the sweep that fits, under a few
length mixes at rates from a trickle to past saturation, full predictions (percentiles included) in one call;
the scalar `open_loop_agg` on a sample of the same cases for comparison. Vector disaggregated open loop:
`predict_open_disagg` over the same layouts as prefill/decode units (one prefill and two decode workers), against
the scalar `disagg` likewise, and as closed loops at the client counts in turn (`predict_closed_disagg`).
Single process, single thread.
"""

from __future__ import annotations

import argparse
import itertools
import json
import sys
import time
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from infra.catalog.loader import load_catalog  # noqa: E402
from infra.errors import InfraError  # noqa: E402
from infra.perf.arch import compile_worker  # noqa: E402
from infra.perf.calibration import lookup  # noqa: E402
from infra.perf.estimate import build_workers, compile_deployment, estimate, estimates  # noqa: E402
from infra.perf.serving import closed_loop_agg, disagg, open_loop_agg  # noqa: E402
from infra.perf.shape import Deployment, Parallel, Role, Workload  # noqa: E402
from infra.perf.vector import predict_open_agg, predict_open_disagg  # noqa: E402
from infra.perf.vector_closed import predict_closed_agg, predict_closed_disagg  # noqa: E402

MODELS = ["Llama-3.1-8B", "Llama-3.1-70B", "Qwen3-32B", "Qwen3-235B-A22B", "DeepSeek-V3", "gpt-oss-120b"]
DEVICES = ["H100-SXM", "H200", "B200", "A100-80G", "L40S", "Ascend-910B3", "MI300X"]
OPEN_MIXES = ((2048, 256, 0.0, 0.0), (1024, 1024, 0.3, 0.5), (8192, 512, 0.5, 0.5), (512, 2048, 1.0, 1.0))
"""(prompt, answer, prompt CV, answer CV) of the open-loop workloads."""
OPEN_RATES = tuple(0.05 * 2 ** k for k in range(14))
"""Requests/s, 0.05 to 410: from a trickle to past what most of the sweep's deployments sustain."""
CLIENTS = (1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 128, 256)
"""Closed-loop client counts: one alone to more than most of the sweep's batches hold."""
SCALAR_SAMPLE = 10
"""Every this many cases, the scalar path runs too (for the comparison only)."""


def open_loop_cases(deps: list[Deployment], cat) -> list:
    """(worker, role, workload) for every deployment that fits, every length mix and every rate."""
    cases = []
    for dep in deps:
        try:
            worker = build_workers(dep, cat)[0]["agg"]
        except InfraError:
            continue
        for isl, osl, isl_cv, osl_cv in OPEN_MIXES:
            for rate in OPEN_RATES:
                cases.append((worker, dep.agg, Workload(isl=isl, osl=osl, rate=rate, isl_cv=isl_cv, osl_cv=osl_cv)))
    return cases


def closed_loop_loads(deps: list[Deployment], cat) -> list:
    """(compiled deployment, workload) for every deployment that fits, every length mix and client count."""
    loads = []
    for dep in deps:
        try:
            one = compile_deployment(dep, cat)
        except InfraError:
            continue
        for isl, osl, isl_cv, osl_cv in OPEN_MIXES:
            for clients in CLIENTS:
                wl = Workload(isl=isl, osl=osl, concurrency=clients, isl_cv=isl_cv, osl_cv=osl_cv)
                if one.workers["agg"].max_sequences(isl + osl) >= 1:
                    loads.append((one, wl))
    return loads


def disagg_cases(deps: list[Deployment], cat) -> list:
    """(prefill worker, decode worker, roles, workload, link) for every layout that fits as a unit of one prefill
    and two decode workers, every length mix and every rate."""
    cases = []
    for dep in deps:
        unit = replace(dep, mode="disagg", prefill=Role(dep.agg.parallel, workers=1),
                       decode=Role(dep.agg.parallel, workers=2))
        try:
            workers, _, link = build_workers(unit, cat)
        except InfraError:
            continue
        for isl, osl, isl_cv, osl_cv in OPEN_MIXES:
            for rate in OPEN_RATES:
                cases.append((workers["prefill"], workers["decode"], unit.prefill, unit.decode,
                              Workload(isl=isl, osl=osl, rate=rate, isl_cv=isl_cv, osl_cv=osl_cv), link))
    return cases


def _best_of_three(predict, cases: list) -> tuple[float, int]:
    """(predictions per second at the best of three calls, how many are stable), after a warm-up call."""
    predict(cases[:100])  # warm-up: imports, first allocations
    best = float("inf")
    for _ in range(3):
        start = time.perf_counter()
        preds = predict(cases)
        best = min(best, time.perf_counter() - start)
        stable = sum(getattr(p, "prediction", p).stable for p in preds)
        del preds  # (freeing them is the caller's time, not the prediction's)
    return len(cases) / best, stable


def _scalar(fn, cases: list) -> float:
    """Predictions per second of the scalar function on every `SCALAR_SAMPLE`th case."""
    sample = cases[::SCALAR_SAMPLE]
    start = time.perf_counter()
    for case in sample:
        fn(*case)
    return len(sample) / (time.perf_counter() - start)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=20000, help="fast-path candidates to score")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    cat = load_catalog()
    combos = []
    for m, d, tp in itertools.product(MODELS, DEVICES, (1, 2, 4, 8)):
        model, device = cat.model(m), cat.device(d)
        for precision in ("bf16", "fp8"):
            if precision in device.precisions:
                combos.append((model, device, precision, Parallel(tp=tp, ep=tp if model.moe else 1)))
    factors = {d: lookup("vllm", cat.device(d)).factors for d in DEVICES}
    isl, osl = 2048.0, 256.0

    start = time.perf_counter()
    scored = fits = 0
    while scored < args.n:
        for model, device, precision, par in combos:
            w = compile_worker(model, device, precision, par, factors[device.name])
            if w.memory.fits:
                fits += 1
                batch = min(256, w.max_sequences(isl + osl / 2))
                w.step(batch, isl + osl / 2)
                w.step(0.0, 0.0, isl, isl / 2)
            scored += 1
            if scored >= args.n:
                break
    fast = scored / (time.perf_counter() - start)

    deps = [Deployment(m.name, d.name, "vllm", p, agg=Role(par)) for m, d, p, par in combos]
    wl = Workload(isl=isl, osl=osl, concurrency=64)
    start = time.perf_counter()
    full_n = 0
    for dep in deps * 3:
        try:
            estimate(dep, wl, cat)
        except InfraError:  # shapes that do not fit are part of what the planner scores
            pass
        full_n += 1
    full = full_n / (time.perf_counter() - start)

    cases = open_loop_cases(deps, cat)
    vector, stable = _best_of_three(predict_open_agg, cases)
    scalar = _scalar(open_loop_agg, cases)
    loads = closed_loop_loads(deps, cat)
    closed_cases = [(one.workers["agg"], one.deployment.agg, wl) for one, wl in loads]
    vector_cl, stable_cl = _best_of_three(predict_closed_agg, closed_cases)
    scalar_cl = _scalar(closed_loop_agg, closed_cases)
    vector_est, _ = _best_of_three(estimates, loads)
    units = disagg_cases(deps, cat)
    vector_pd, stable_pd = _best_of_three(predict_open_disagg, units)
    scalar_pd = _scalar(disagg, units)
    closed_units = [(wp, wd, prefill, decode, replace(wl, rate=None, concurrency=clients), link)
                    for (wp, wd, prefill, decode, wl, link), clients in zip(units, itertools.cycle(CLIENTS))]
    vector_pdc, stable_pdc = _best_of_three(predict_closed_disagg, closed_units)
    scalar_pdc = _scalar(disagg, closed_units)
    print(f"fast path: {fast:,.0f} candidates/s ({scored} scored, {fits} fit memory)")
    print(f"full estimate: {full:,.0f} estimates/s ({full_n} deployments, closed loop)")
    print(f"vector open-loop: {vector:,.0f} predictions/s ({len(cases)} cases, {stable} stable; scalar "
          f"open_loop_agg {scalar:,.0f}/s on every {SCALAR_SAMPLE}th)")
    print(f"vector closed loop: {vector_cl:,.0f} predictions/s ({len(closed_cases)} cases, {stable_cl} stable; scalar "
          f"closed_loop_agg {scalar_cl:,.0f}/s on every {SCALAR_SAMPLE}th)")
    print(f"full estimates in vector passes: {vector_est:,.0f} estimates/s (estimates() of the same closed loops)")
    print(f"vector disaggregated open-loop: {vector_pd:,.0f} predictions/s ({len(units)} cases, {stable_pd} stable; "
          f"scalar disagg {scalar_pd:,.0f}/s on every {SCALAR_SAMPLE}th)")
    print(f"vector disaggregated closed loop: {vector_pdc:,.0f} predictions/s ({len(closed_units)} cases, {stable_pdc} "
          f"stable; scalar disagg {scalar_pdc:,.0f}/s on every {SCALAR_SAMPLE}th)")
    if args.json:
        print(json.dumps({"fast_path_per_s": round(fast), "full_estimate_per_s": round(full),
                          "vector_open_loop_per_s": round(vector), "vector_closed_loop_per_s": round(vector_cl),
                          "vector_estimates_per_s": round(vector_est), "vector_disagg_per_s": round(vector_pd),
                          "vector_disagg_closed_per_s": round(vector_pdc)}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
