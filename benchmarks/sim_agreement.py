"""Where the simulator and the analytic model agree, and where queueing and batching make them part.

    python benchmarks/sim_agreement.py [--requests 4000] [--json]

Both price engine steps with the same `Worker.step`; they differ in how requests share those steps. For a few
deployments (vLLM on H100, fixed 1000-token prompts and 200-token answers) the script runs open loops (Poisson) at
rising rates and closed loops at rising concurrency, and prints simulated vs predicted mean TTFT and TPOT with the
relative difference. At low load the two should agree within 10-20%; the gap that opens with load is the
dynamics the analytic model smooths over (closed-loop clients that start together stay in step, so their prompts
queue in waves). For closed loops it also compares TTFT p99, which that first wave makes.

A second table checks the tails an objective is written on: Poisson arrivals with lognormal prompt and answer
lengths (prompts 2000 tokens on average, CV 1; answers 200, CV 0.7) and a 2048-token step budget, so long prompts
are cut into chunks that ride in decode steps. It compares simulated and predicted TTFT p99, TPOT p99 and ITL p99
(pooled gaps) at rising rates, and prints the largest relative difference of each. A third table does the same for
TPOT p99 on a disaggregated deployment (three prefill workers and one decode worker, decode batch capped at 256) as
the decode batch nears its cap (70, 85 and 95% of the predicted capacity), where the batch's fluctuation and waits
for a slot make the tail. A fourth checks closed loops of variable lengths (four mixes of lognormal prompts and
answers, 4 to 64 clients, a 2048-token step budget), each prediction taking the run's first wave (its clients over
its requests): simulated vs predicted p90 and p99 of TTFT, TPOT, ITL and E2E, and the median and largest relative
difference of each. A fifth does the same for the TTFT (mean, p50, p99) of disaggregated closed loops (two prefill
workers and one decode worker, 4 to 128 clients), apart for varied lengths (the model's steady state) and fixed
ones (clients the model takes to stay in step, every round a burst at the prefill workers, as the calibration
set's measured loops fit; the simulator's dephase even then). A sixth puts the fourth's loops as a plan prices
them, served for good with no first wave, against what `infra bench --simulate` judges (the requests sent once
every client's first one has ended), beside the figures plans priced before with the first wave's fitted share.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from infra.bench.engine import Engine, EngineModel  # noqa: E402
from infra.bench.metrics import summarize  # noqa: E402
from infra.bench.run import past_start_up  # noqa: E402
from infra.bench.simulate import Group, simulate  # noqa: E402
from infra.bench.workload import Load, RequestSpec  # noqa: E402
from infra.catalog.loader import load_catalog  # noqa: E402
from infra.perf.estimate import build_workers, compile_deployment, max_rate, predict  # noqa: E402
from infra.perf.serving import batch_slots  # noqa: E402
from infra.perf.shape import Deployment, Parallel, Role, Workload  # noqa: E402

DEPLOYMENTS = (("Llama-3.1-8B", 1), ("Llama-3.1-70B", 4))
RATES = (0.5, 2.0, 8.0)
CONCURRENCY = (1, 4, 16)
ISL, OSL = 1000, 200
TAIL_ISL, TAIL_ISL_CV, TAIL_OSL, TAIL_OSL_CV, TAIL_BUDGET = 2000, 1.0, 200, 0.7, 2048
TAIL_RATES = (1.0, 3.0, 6.0)
TAIL_METRICS = ("ttft", "tpot", "itl")


def _lognormal(rng: np.random.Generator, mean: float, cv: float, n: int) -> np.ndarray:
    sigma = float(np.sqrt(np.log1p(cv * cv)))
    return np.maximum(1, np.ceil(rng.lognormal(np.log(mean) - sigma * sigma / 2, sigma, n))).astype(int)


def _poisson_load(seed: int, rate: float, isl: tuple[float, float], osl: tuple[float, float], n: int) -> Load:
    """n Poisson arrivals at `rate` with lognormal (mean, cv) prompt and output lengths."""
    rng = np.random.default_rng(seed)
    i_len, o_len = _lognormal(rng, *isl, n), _lognormal(rng, *osl, n)
    t = np.concatenate(([0.0], np.cumsum(rng.exponential(1 / rate, n - 1))))
    return Load([RequestSpec(i, float(t[i]), int(i_len[i]), int(o_len[i]), -1, 0) for i in range(n)], rate, None,
                "poisson")


DECODE_ISL, DECODE_ISL_CV, DECODE_OSL, DECODE_OSL_CV, DECODE_CAP = 900, 0.7, 250, 0.65, 256
DECODE_LOADS = (0.7, 0.85, 0.95)
"""Rates as shares of the predicted capacity of the deployment, so the table stays near the cap whatever the
calibration."""
PREFILL_WORKERS = 3
"""Enough prefill workers that prompts keep up at these rates, so the decode worker's batch is what fills."""


def decode_tails(catalog, requests: int) -> list[dict]:
    """Simulated vs predicted TPOT p99 of a prefill/decode pair as the decode batch nears its cap."""
    rows = []
    model = "Llama-3.1-8B"
    dep = Deployment(model, "H100-SXM", "sglang", "bf16", "disagg",
                     prefill=Role(Parallel(tp=1), batch_cap=256, workers=PREFILL_WORKERS),
                     decode=Role(Parallel(tp=1), batch_cap=DECODE_CAP, workers=1))
    workers, _, link = build_workers(dep, catalog)
    models = {role: EngineModel.from_worker(w, max_num_seqs=256 if role == "prefill" else DECODE_CAP,
                                            max_num_batched_tokens=8192, kv_tokens=w.memory.kv_tokens)
              for role, w in workers.items()}
    capacity, _ = max_rate(dep, Workload(isl=DECODE_ISL, osl=DECODE_OSL, rate=1.0, isl_cv=DECODE_ISL_CV,
                                         osl_cv=DECODE_OSL_CV), {}, catalog)
    for share in DECODE_LOADS:
        rate = round(share * capacity, 1)
        load = _poisson_load(2, rate, (DECODE_ISL, DECODE_ISL_CV), (DECODE_OSL, DECODE_OSL_CV), requests)
        wl = Workload(isl=DECODE_ISL, osl=DECODE_OSL, rate=rate, isl_cv=DECODE_ISL_CV, osl_cv=DECODE_OSL_CV)
        pred = predict(dep, wl, workers, link)
        group = Group([Engine(models["prefill"], "prefill") for _ in range(PREFILL_WORKERS)],
                      [Engine(models["decode"], "decode")])
        sim = simulate([group], load)
        got = summarize(sim.records, itl_pool=sim.itl_pool).metrics
        row = {"model": model, "load": f"rate {rate:g}/s", "tpot_p99_sim_ms": round(got["tpot"].get("p99") or 0.0, 2),
               "tpot_p99_pred_ms": round(pred.tpot["p99"] * 1e3, 2) if pred.stable else None,
               "tpot_mean_sim_ms": round(got["tpot"].mean or 0.0, 2),
               "tpot_mean_pred_ms": round(pred.tpot["mean"] * 1e3, 2) if pred.stable else None}
        row["tpot_p99_diff"] = (round(row["tpot_p99_sim_ms"] / row["tpot_p99_pred_ms"] - 1, 4)
                                if row["tpot_p99_pred_ms"] else None)
        rows.append(row)
        p99 = f"{row['tpot_p99_pred_ms']:6.1f}" if row["tpot_p99_pred_ms"] else "unstable"
        mean = f"{row['tpot_mean_pred_ms']:6.1f}" if row["tpot_mean_pred_ms"] else "unstable"
        diff = f"({row['tpot_p99_diff']:+.0%})" if row["tpot_p99_diff"] is not None else ""
        print(f"{model:14s} P/D {row['load']:11s}  TPOT mean sim {row['tpot_mean_sim_ms']:6.1f} pred {mean}   "
              f"TPOT p99 sim {row['tpot_p99_sim_ms']:6.1f} pred {p99} {diff}")
    return rows


def tails(catalog, requests: int) -> list[dict]:
    """Simulated vs predicted p99 of TTFT, TPOT and ITL with variable lengths and chunked prefill."""
    rows = []
    model = "Llama-3.1-8B"
    dep = Deployment(model, "H100-SXM", "vllm", "bf16",
                     agg=Role(Parallel(tp=1), batch_cap=256, max_num_tokens=TAIL_BUDGET))
    workers, _, link = build_workers(dep, catalog)
    w = workers["agg"]
    engine_model = EngineModel.from_worker(w, max_num_seqs=256, max_num_batched_tokens=TAIL_BUDGET,
                                           kv_tokens=w.memory.kv_tokens)
    for rate in TAIL_RATES:
        load = _poisson_load(1, rate, (TAIL_ISL, TAIL_ISL_CV), (TAIL_OSL, TAIL_OSL_CV), requests)
        wl = Workload(isl=TAIL_ISL, osl=TAIL_OSL, rate=rate, isl_cv=TAIL_ISL_CV, osl_cv=TAIL_OSL_CV)
        pred = predict(dep, wl, workers, link)
        sim = simulate([Group([Engine(engine_model)])], load)
        got = summarize(sim.records, itl_pool=sim.itl_pool).metrics
        row = {"model": model, "load": f"rate {rate:g}/s"}
        for metric in TAIL_METRICS:
            measured = got[metric].get("p99") or 0.0
            row[f"{metric}_p99_sim_ms"] = round(measured, 2)
            row[f"{metric}_p99_pred_ms"] = round(getattr(pred, metric)["p99"] * 1e3, 2)
            row[f"{metric}_p99_diff"] = round(measured / row[f"{metric}_p99_pred_ms"] - 1, 4)
        rows.append(row)
        print(f"{model:14s} tp1 {row['load']:11s}  " + "   ".join(
            f"{m.upper()} p99 sim {row[f'{m}_p99_sim_ms']:7.1f} pred {row[f'{m}_p99_pred_ms']:7.1f} "
            f"({row[f'{m}_p99_diff']:+.0%})" for m in TAIL_METRICS))
    return rows


CLOSED_MIXES = ((2000, 1.0, 200, 0.7), (1000, 0.5, 400, 1.0), (4096, 0.2, 64, 0.2), (8000, 0.5, 500, 0.5))
"""(prompt, prompt CV, answer, answer CV) of the closed loops whose tails the fourth table checks."""
CLOSED_CLIENTS = (4, 16, 64)
CLOSED_METRICS = ("ttft", "tpot", "itl", "e2e")


def _closed_run(dep: Deployment, compiled, group: Callable[[], Group], lengths: tuple[float, float, float, float],
                clients: int, requests: int, served: bool = False):
    """(prediction, simulated metrics) of a closed loop of `clients` over `requests` with lognormal (prompt, CV,
    answer, CV) `lengths`, the prediction taking the run's first wave (its clients over its requests), as
    `infra estimate --requests` does; `served`: the deployment serving the load for good, as a plan prices it,
    against the requests a run judges past its start-up (`past_start_up`). `group` makes the simulated engines
    afresh."""
    isl, isl_cv, osl, osl_cv = lengths
    rng = np.random.default_rng(3)
    i_len, o_len = _lognormal(rng, isl, isl_cv, requests), _lognormal(rng, osl, osl_cv, requests)
    load = Load([RequestSpec(i, None, int(i_len[i]), int(o_len[i]), -1, 0) for i in range(requests)], None,
                clients, "closed")
    wl = Workload(isl=isl, osl=osl, concurrency=clients, isl_cv=isl_cv, osl_cv=osl_cv)
    wave = compiled.serving(wl) if served else compiled.with_first_wave(clients / requests)
    pred = predict(dep, wl, wave.workers, wave.link)
    sim = simulate([group()], load)
    judged = past_start_up(sim.records, clients)[0] if served else sim.records
    return pred, summarize(judged, itl_pool=sim.itl_pool).metrics


def _tail_loops(catalog, requests: int, served: bool = False):
    """(deployment, compiled, workload, prediction, simulated metrics, the row's workload fields) of every closed
    loop of `CLOSED_MIXES` and `CLOSED_CLIENTS` on each of `DEPLOYMENTS` aggregated on H100 with the tails' step
    budget (`_closed_run`), the simulated engines capped at the batch the prediction lets them run
    (`serving.batch_slots`, a plan's max_num_seqs)."""
    for model, tp in DEPLOYMENTS:
        dep = Deployment(model, "H100-SXM", "vllm", "bf16", agg=Role(Parallel(tp=tp), batch_cap=256,
                                                                     max_num_tokens=TAIL_BUDGET))
        compiled = compile_deployment(dep, catalog)
        w = compiled.workers["agg"]
        for isl, isl_cv, osl, osl_cv in CLOSED_MIXES:
            for clients in CLOSED_CLIENTS:
                wl = Workload(isl=isl, osl=osl, concurrency=clients, isl_cv=isl_cv, osl_cv=osl_cv)
                model_ = EngineModel.from_worker(w, max_num_seqs=batch_slots(w, dep.agg, wl),
                                                 max_num_batched_tokens=TAIL_BUDGET, kv_tokens=w.memory.kv_tokens)
                pred, got = _closed_run(dep, compiled, lambda m=model_: Group([Engine(m)]),
                                        (isl, isl_cv, osl, osl_cv), clients, requests, served)
                yield dep, compiled, wl, pred, got, {"model": model, "isl": isl, "isl_cv": isl_cv, "osl": osl,
                                                     "osl_cv": osl_cv, "clients": clients}


SERVED_METRICS = (("ttft", "mean"), ("ttft", "p90"), ("ttft", "p99"), ("e2e", "p99"))


def served_closed(catalog, requests: int) -> list[dict]:
    """Closed loops with variable lengths as a plan prices them (`Compiled.serving`: no first wave) against what
    `infra bench --simulate` judges (past the start-up), and as plans priced them before (the first wave's share
    fitted to benchmarks that do not say), aggregated deployments as in `closed_tails`."""
    rows = []
    for dep, compiled, wl, pred, got, row in _tail_loops(catalog, requests, served=True):
        before = predict(dep, wl, compiled.workers, compiled.link)
        for metric, q in SERVED_METRICS:
            measured = (got[metric].mean if q == "mean" else got[metric].get(q)) or 0.0
            row[f"{metric}_{q}_sim_ms"] = round(measured, 2)
            for name, p in (("pred", pred), ("before", before)):
                row[f"{metric}_{q}_{name}_ms"] = round(getattr(p, metric)[q] * 1e3, 2)
                row[f"{metric}_{q}_{name}_diff"] = round(measured / (getattr(p, metric)[q] * 1e3) - 1, 4)
        rows.append(row)
        print(_label(row) + "  ".join(f"{m.upper()} {q} {row[f'{m}_{q}_sim_ms']:7.1f}/{row[f'{m}_{q}_pred_ms']:7.1f}"
                                      f"/{row[f'{m}_{q}_before_ms']:7.1f}" for m, q in SERVED_METRICS))
    return rows


def closed_tails(catalog, requests: int) -> list[dict]:
    """Simulated vs predicted p90 and p99 of closed loops with variable lengths, each prediction taking the run's
    first wave (its clients over its requests), as `infra estimate --requests` does."""
    rows = []
    for _, _, _, pred, got, row in _tail_loops(catalog, requests):
        for metric in CLOSED_METRICS:
            for q in ("p90", "p99"):
                measured = got[metric].get(q) or 0.0
                predicted = getattr(pred, metric)[q] * 1e3
                row[f"{metric}_{q}_sim_ms"] = round(measured, 2)
                row[f"{metric}_{q}_pred_ms"] = round(predicted, 2)
                row[f"{metric}_{q}_diff"] = round(measured / predicted - 1, 4)
        rows.append(row)
        print(_label(row) + "  ".join(f"{m.upper()} p99 {row[f'{m}_p99_sim_ms']:7.1f}/{row[f'{m}_p99_pred_ms']:7.1f}"
                                      for m in CLOSED_METRICS))
    return rows


def _label(row: dict) -> str:
    """A closed loop's row as the tables print it: model, prompt/CV, answer/CV, clients."""
    return (f"{row['model']:14s} {row['isl']:5d}/{row['isl_cv']:<3g} {row['osl']:4d}/{row['osl_cv']:<3g} "
            f"{row['clients']:3d} clients  ")


PD_CLOSED_MIXES = ((1000, 0.0, 200, 0.0), (2000, 1.0, 200, 0.7))
PD_CLOSED_CLIENTS = (4, 16, 64, 128)


def pd_closed(catalog, requests: int) -> list[dict]:
    """Simulated vs predicted TTFT (mean, p50, p99) and mean TPOT of disaggregated closed loops (two prefill
    workers, one decode worker), each prediction taking the run's first wave."""
    rows = []
    for model, tp in DEPLOYMENTS:
        dep = Deployment(model, "H100-SXM", "sglang", "bf16", "disagg",
                         prefill=Role(Parallel(tp=tp), batch_cap=256, workers=2),
                         decode=Role(Parallel(tp=tp), batch_cap=256, workers=1))
        compiled = compile_deployment(dep, catalog)
        models = {role: EngineModel.from_worker(w, max_num_seqs=256, max_num_batched_tokens=8192,
                                                kv_tokens=w.memory.kv_tokens)
                  for role, w in compiled.workers.items()}
        for isl, isl_cv, osl, osl_cv in PD_CLOSED_MIXES:
            for clients in PD_CLOSED_CLIENTS:
                pred, got = _closed_run(
                    dep, compiled, lambda m=models: Group([Engine(m["prefill"], "prefill") for _ in range(2)],
                                                          [Engine(m["decode"], "decode")]),
                    (isl, isl_cv, osl, osl_cv), clients, requests)
                row = {"model": model, "isl": isl, "isl_cv": isl_cv, "osl": osl, "osl_cv": osl_cv,
                       "clients": clients, "tpot_mean_sim_ms": round(got["tpot"].mean or 0.0, 2),
                       "tpot_mean_pred_ms": round(pred.tpot["mean"] * 1e3, 2)}
                for key in ("mean", "p50", "p99"):
                    measured = (got["ttft"].mean if key == "mean" else got["ttft"].get(key)) or 0.0
                    row[f"ttft_{key}_sim_ms"] = round(measured, 2)
                    row[f"ttft_{key}_pred_ms"] = round(pred.ttft[key] * 1e3, 2)
                    row[f"ttft_{key}_diff"] = round(measured / (pred.ttft[key] * 1e3) - 1, 4)
                rows.append(row)
                print(f"{model:14s} P/D {isl:5d}/{isl_cv:<3g} {osl:4d}/{osl_cv:<3g} {clients:3d} clients  " + "  ".join(
                    f"TTFT {k} {row[f'ttft_{k}_sim_ms']:7.1f}/{row[f'ttft_{k}_pred_ms']:7.1f}"
                    for k in ("mean", "p50", "p99"))
                    + f"  TPOT {row['tpot_mean_sim_ms']:5.1f}/{row['tpot_mean_pred_ms']:5.1f}")
    return rows


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--requests", type=int, default=4000,
                    help="simulated requests per load (near capacity the batch takes thousands to settle)")
    ap.add_argument("--json", action="store_true", help="end with one JSON line of the figures")
    args = ap.parse_args()
    catalog = load_catalog()
    rows = []
    for model, tp in DEPLOYMENTS:
        dep = Deployment(model, "H100-SXM", "vllm", "bf16", agg=Role(Parallel(tp=tp), batch_cap=256))
        workers, _, link = build_workers(dep, catalog)
        w = workers["agg"]
        engine_model = EngineModel.from_worker(w, max_num_seqs=256, max_num_batched_tokens=8192,
                                               kv_tokens=w.memory.kv_tokens)
        loads: list[tuple[str, Workload, Load]] = []
        rng = np.random.default_rng(0)
        for rate in RATES:
            t = np.concatenate(([0.0], np.cumsum(rng.exponential(1 / rate, args.requests - 1))))
            specs = [RequestSpec(i, float(t[i]), ISL, OSL, -1, 0) for i in range(args.requests)]
            loads.append((f"rate {rate:g}/s", Workload(isl=ISL, osl=OSL, rate=rate),
                          Load(specs, rate, None, "poisson")))
        for conc in CONCURRENCY:
            specs = [RequestSpec(i, None, ISL, OSL, -1, 0) for i in range(args.requests)]
            loads.append((f"{conc} clients", Workload(isl=ISL, osl=OSL, concurrency=conc),
                          Load(specs, None, conc, "closed")))
        for label, wl, load in loads:
            pred = predict(dep, wl, workers, link)
            sim = simulate([Group([Engine(engine_model)])], load)
            got = summarize(sim.records, itl_pool=sim.itl_pool).metrics
            row = {"model": model, "tp": tp, "load": label,
                   "ttft_sim_ms": round(got["ttft"].mean or 0.0, 2), "ttft_pred_ms": round(pred.ttft["mean"] * 1e3, 2),
                   "tpot_sim_ms": round(got["tpot"].mean or 0.0, 3), "tpot_pred_ms": round(pred.tpot["mean"] * 1e3, 3)}
            row["ttft_diff"] = round(row["ttft_sim_ms"] / row["ttft_pred_ms"] - 1, 4)
            row["tpot_diff"] = round(row["tpot_sim_ms"] / row["tpot_pred_ms"] - 1, 4)
            tail = ""
            if wl.concurrency is not None:
                # The first wave of a closed loop is the TTFT tail: every client starts at once.
                row["ttft_p99_sim_ms"] = round(got["ttft"].get("p99") or 0.0, 2)
                row["ttft_p99_pred_ms"] = round(pred.ttft["p99"] * 1e3, 2)
                row["ttft_p99_diff"] = round(row["ttft_p99_sim_ms"] / row["ttft_p99_pred_ms"] - 1, 4)
                tail = (f"   TTFT p99 sim {row['ttft_p99_sim_ms']:8.1f} pred {row['ttft_p99_pred_ms']:8.1f} "
                        f"({row['ttft_p99_diff']:+.0%})")
            rows.append(row)
            print(f"{model:14s} tp{tp} {label:11s}  TTFT sim {row['ttft_sim_ms']:8.1f} pred {row['ttft_pred_ms']:8.1f} "
                  f"({row['ttft_diff']:+.0%})   TPOT sim {row['tpot_sim_ms']:6.2f} pred {row['tpot_pred_ms']:6.2f} "
                  f"({row['tpot_diff']:+.0%}){tail}")
    low = [r for r in rows if r["load"] in (f"rate {RATES[0]:g}/s", "1 clients")]
    worst = max(max(abs(r["ttft_diff"]), abs(r["tpot_diff"])) for r in low)
    print(f"low load (rate {RATES[0]:g}/s, 1 client): largest TTFT/TPOT difference {worst:.1%}")
    closed_worst = max(abs(r["ttft_p99_diff"]) for r in rows if "ttft_p99_diff" in r)
    print(f"closed loops: largest TTFT p99 difference {closed_worst:.1%}")
    print(f"tails: {TAIL_ISL}-token prompts (CV {TAIL_ISL_CV:g}), {TAIL_OSL}-token answers (CV {TAIL_OSL_CV:g}), "
          f"{TAIL_BUDGET}-token step budget")
    tail_rows = tails(catalog, args.requests * 3)
    tail_worst = {m: max(abs(r[f"{m}_p99_diff"]) for r in tail_rows) for m in TAIL_METRICS}
    print("tails: largest p99 difference " + ", ".join(f"{m.upper()} {v:.1%}" for m, v in tail_worst.items()))
    print(f"decode near its cap: {DECODE_ISL}-token prompts (CV {DECODE_ISL_CV:g}), {DECODE_OSL}-token answers "
          f"(CV {DECODE_OSL_CV:g}), decode batch cap {DECODE_CAP}")
    decode_rows = decode_tails(catalog, args.requests * 5)
    diffs = [abs(r["tpot_p99_diff"]) for r in decode_rows if r["tpot_p99_diff"] is not None]
    decode_worst = max(diffs) if len(diffs) == len(decode_rows) else None
    print("decode near its cap: largest TPOT p99 difference "
          + (f"{decode_worst:.1%}" if decode_worst is not None else "- (a load predicted unstable)"))
    print(f"closed loops with variable lengths ({TAIL_BUDGET}-token step budget), simulated / predicted in ms:")
    closed_rows = closed_tails(catalog, args.requests)
    closed_diffs = {}
    for metric in CLOSED_METRICS:
        for q in ("p90", "p99"):
            diffs = sorted(abs(r[f"{metric}_{q}_diff"]) for r in closed_rows)
            closed_diffs[f"{metric}_{q}"] = {"median": diffs[len(diffs) // 2], "max": diffs[-1]}
    print("closed loops: |sim / pred - 1| median / max " + ", ".join(
        f"{k.upper()} {v['median']:.1%} / {v['max']:.1%}" for k, v in closed_diffs.items()))
    print("closed loops served for good (past the start-up), simulated / predicted / as plans priced them before, "
          "in ms:")
    served_rows = served_closed(catalog, args.requests)
    served_diffs = {}
    for metric, q in SERVED_METRICS:
        for name in ("pred", "before"):
            diffs = sorted(abs(r[f"{metric}_{q}_{name}_diff"]) for r in served_rows)
            served_diffs[f"{metric}_{q}_{name}"] = {"median": diffs[len(diffs) // 2], "max": diffs[-1]}
    print("closed loops served: |sim / pred - 1| median / max, now (before) " + ", ".join(
        f"{m.upper()} {q} {served_diffs[f'{m}_{q}_pred']['median']:.1%} / {served_diffs[f'{m}_{q}_pred']['max']:.1%}"
        f" ({served_diffs[f'{m}_{q}_before']['median']:.1%} / {served_diffs[f'{m}_{q}_before']['max']:.1%})"
        for m, q in SERVED_METRICS))
    print("disaggregated closed loops (2 prefill workers, 1 decode worker), simulated / predicted in ms:")
    pd_rows = pd_closed(catalog, args.requests)
    # The model takes clients whose lengths all match to stay in step (every round a burst at the prefill
    # workers, as the calibration set's measured loops fit); the simulator's dephase even then.
    pd_diffs: dict[str, dict[str, dict[str, float]]] = {}
    for lengths, picked in (("varied", [r for r in pd_rows if r["isl_cv"] or r["osl_cv"]]),
                            ("fixed", [r for r in pd_rows if not (r["isl_cv"] or r["osl_cv"])])):
        pd_diffs[lengths] = {}
        for key in ("mean", "p50", "p99"):
            diffs = sorted(abs(r[f"ttft_{key}_diff"]) for r in picked)
            pd_diffs[lengths][f"ttft_{key}"] = {"median": diffs[len(diffs) // 2], "max": diffs[-1]}
        print(f"disaggregated closed loops, {lengths} lengths: |sim / pred - 1| median / max " + ", ".join(
            f"{k.upper()} {v['median']:.1%} / {v['max']:.1%}" for k, v in pd_diffs[lengths].items()))
    if args.json:
        print(json.dumps({"rows": rows, "closed_tail_rows": closed_rows, "closed_tail_abs_diff": closed_diffs,
                          "served_closed_rows": served_rows, "served_closed_abs_diff": served_diffs,
                          "pd_closed_rows": pd_rows, "pd_closed_abs_diff": pd_diffs,
                          "low_load_max_abs_diff": worst, "closed_ttft_p99_max_abs_diff": closed_worst,
                          "tail_rows": tail_rows,
                          "tail_p99_max_abs_diff": tail_worst, "decode_rows": decode_rows,
                          "decode_tpot_p99_max_abs_diff": decode_worst}, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
