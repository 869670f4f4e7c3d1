"""Replay measured deployments through the simulator that `infra bench --simulate` runs, and report its error beside
the performance model's.

    python benchmarks/sim_fidelity.py --csv PATH [--max-clients N (1024)] [--json]

`infra verify` and `infra bench` judge a plan on the simulator unless given an endpoint, so what it says about TTFT
and TPOT should be as close to real engines as the plan's own prediction. Every row of PATH (silicon_calibration.csv
format) that `benchmarks/fidelity.py` replays runs again as the simulator runs a plan (`deployment_group`): one
engine per attention group of each worker, stepping at the performance model's step prices (the packaged
calibration, as the measured engines ran: `infra.perf.rows.as_measured`), driven by a closed loop of the row's
clients through as many requests as its client sent, their lengths drawn as its client drew them (the sweeps: ten
requests a client, uniform on [0.8 L, L]; other rows: every request L, and since their clients do not record their
count, one over the first wave's share fitted to such rows, `Factors.queue`, about five a client). The simulated
mean TTFT and TPOT over every request (what the measuring client reports) are scored against the measured, beside
the model's prediction of the same rows; a row of several candidate recipes takes the geometric mean of theirs.
Last, the rows whose client drew their lengths are predicted again with that spread, the path a plan of a closed
loop whose lengths vary takes (its clients dephased), beside the fit's own (the rows at their mean lengths).

The step prices are the model's, fitted on these rows; what the simulator adds is the dynamics (batches that form
and drain, chunked prefill, the queues and the clients' waves), so where the two part the rows say which dynamics
hold. The mechanisms the model fits to published recipes and this product's engines do not run (SGLang polling
every few steps, TRT-LLM's attention-DP balancing) are not simulated. With --json the last line is one JSON object:
n, skipped and, for `sim` and `model`, the error and lean blocks of `fidelity.py`; `model_spread`, the leans of the
last comparison.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from infra.bench.metrics import summarize as measure  # noqa: E402
from infra.bench.simulate import deployment_group, simulate  # noqa: E402
from infra.bench.workload import Load, RequestSpec  # noqa: E402
from infra.catalog.loader import load_catalog  # noqa: E402
from infra.errors import InfraError  # noqa: E402
from infra.fitting.replay import lean, replay, summarize  # noqa: E402
from infra.perf.estimate import build_workers  # noqa: E402
from infra.perf.rows import Case, as_measured, geomean, load_rows, predict, variants, with_spread  # noqa: E402

MAX_CLIENTS = 1024
"""Rows of more clients are left out by default: the wide-EP racks' sweeps run up to 16,384 clients on 72 attention
groups, 160,000 requests a row, minutes each, where the 2,800 rows up to 1,024 clients take about one minute."""


def _requests(case: Case, queue: float) -> list[RequestSpec]:
    """What the row's client sent: `clients / wave` requests where the count is known, else `clients / queue` (the
    first wave's share fitted to rows that do not say), at lengths uniform on [r L, L] (`Case.range_ratio`), L the
    recorded length, seeded by nothing but the row so every run draws the same."""
    clients = case.workload.concurrency or 1
    share = case.wave or queue
    n = max(2 * clients, round(clients / share))
    r = case.range_ratio
    # The recorded L from the mean the case holds: mean = (1 + r) / 2 L.
    top_in, top_out = (2 * v / (1 + r) for v in (case.workload.isl, case.workload.osl))
    rng = np.random.default_rng(7)
    ins = np.floor(rng.uniform(r * top_in, top_in, n)) if r < 1 else np.full(n, round(top_in))
    outs = np.floor(rng.uniform(r * top_out, top_out, n)) if r < 1 else np.full(n, round(top_out))
    return [RequestSpec(i, None, max(1, int(a)), max(2, int(b)), -1, 0) for i, (a, b) in enumerate(zip(ins, outs))]


def simulated(case: Case, catalog) -> tuple[float, float]:
    """(mean TTFT ms, mean TPOT ms) of the row's closed loop on the simulator, over every request; the geometric
    mean over the recipes it may have run."""
    got = []
    for one in variants(case):
        workers, _, link = build_workers(one.deployment, catalog)
        ws = {role: w.with_factors(as_measured(one, role, w.factors)) for role, w in workers.items()}
        queue = next(iter(workers.values())).factors.queue
        load = Load(_requests(one, queue), None, one.workload.concurrency, "closed")
        sim = simulate([deployment_group(one.deployment, ws, link, one.workload)], load)
        m = measure(sim.records, itl_pool=sim.itl_pool).metrics
        ttft, tpot = m["ttft"].mean, m["tpot"].mean
        if not ttft or not tpot:
            return math.inf, math.inf
        got.append((ttft, tpot))
    return geomean(got)


def _clients(text: str) -> int:
    """--max-clients: a whole number of clients, 0 for no limit."""
    try:
        value = int(text)
    except ValueError:
        value = -1
    if value < 0:
        raise argparse.ArgumentTypeError(f"{text!r} is not a client count: give 0 (no limit) or more")
    return value


def _pct(v: float | None) -> str:
    return "    -" if v is None else f"{100 * v:5.1f}%"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--csv", required=True, help="measurements in the silicon_calibration.csv format")
    ap.add_argument("--max-clients", type=_clients, default=MAX_CLIENTS,
                    help=f"skip rows of more clients (default {MAX_CLIENTS}; 0: none skipped)")
    ap.add_argument("--json", action="store_true", help="end with one JSON line of the figures")
    args = ap.parse_args()
    catalog = load_catalog()
    try:
        rows = load_rows(args.csv)
    except InfraError as exc:
        print(f"error: {exc.problems[0]}", file=sys.stderr)
        return 1
    model, skipped = replay(rows, catalog)
    kept, sim = [], []
    for case, ttft, tpot in model:
        if args.max_clients and (case.workload.concurrency or 0) > args.max_clients:
            skipped.append((case.row, f"more than {args.max_clients} clients"))
            continue
        kept.append((case, ttft, tpot))
        sim.append((case, *simulated(case, catalog)))
    s, m = summarize(sim, skipped), summarize(kept, skipped)
    print(f"rows {len(rows)}: simulated {s['n']}, skipped {s['skipped']}")
    for why, n in s["skip_reasons"].items():
        print(f"  skipped {n:4d}: {why}")
    print(f"{'':24s} {'n':>5s}  {'TTFT med':>8s} {'TTFT p90':>8s}  {'TPOT med':>8s} {'TPOT p90':>8s}   "
          "(simulator | performance model)")

    def line(name: str, a: dict, b: dict) -> None:
        print(f"{name:24s} {a['n']:5d}  {_pct(a['ttft_median_ape']):>8s} {_pct(a['ttft_p90_ape']):>8s}  "
              f"{_pct(a['tpot_median_ape']):>8s} {_pct(a['tpot_p90_ape']):>8s}  |  "
              f"{_pct(b['ttft_median_ape']):>8s} {_pct(b['ttft_p90_ape']):>8s}  "
              f"{_pct(b['tpot_median_ape']):>8s} {_pct(b['tpot_p90_ape']):>8s}")

    line("overall", s, m)
    for key in ("by_mode", "by_backend", "by_system", "by_model"):
        for name, block in s[key].items():
            line(f"{key[3:]} {name}", block, m[key][name])
    sim_lean, model_lean = lean(sim), lean(kept)
    print(f"{'which way it leans':24s} {'n':>5s}  {'TTFT':>8s} {'TPOT':>8s}  |  {'TTFT':>8s} {'TPOT':>8s}   "
          "(median measured / simulated | predicted: above 1, optimistic)")
    for name, block in sim_lean.items():
        other = model_lean[name]
        print(f"{name:24s} {block['n']:5d}  {block['ttft']:8.2f} {block['tpot']:8.2f}  |  {other['ttft']:8.2f} "
              f"{other['tpot']:8.2f}")
    # The rows whose clients drew their lengths, predicted with that spread: the path a plan of a closed loop whose
    # lengths vary takes (its clients dephased), which the fit (at the mean lengths alone) never replays.
    plans, fitted = [], []
    for case, ttft, tpot in kept:
        got = predict(with_spread(case), catalog) if case.range_ratio < 1 else None
        if got is not None and not isinstance(got, str):
            plans.append((case, *got))
            fitted.append((case, ttft, tpot))
    spread_lean, fitted_lean = lean(plans), lean(fitted)
    if plans:
        print(f"as plans price lengths that vary: the {len(plans)} rows whose client drew them, given their spread "
              "| at their mean lengths alone, as fitted")
        a, b = summarize(plans, []), summarize(fitted, [])
        line("overall", a, b)
        for name, block in a["by_mode"].items():
            line(f"mode {name}", block, b["by_mode"][name])
        for name, block in spread_lean.items():
            if name.startswith(("mode", "clients")):
                other = fitted_lean[name]
                print(f"{'leans, ' + name:24s} {block['n']:5d}  {block['ttft']:8.2f} {block['tpot']:8.2f}  |  "
                      f"{other['ttft']:8.2f} {other['tpot']:8.2f}")
    if args.json:
        keep = ("n", "ttft_median_ape", "ttft_p90_ape", "tpot_median_ape", "tpot_p90_ape", "by_mode", "by_backend",
                "by_system", "by_model")
        print(json.dumps({"n": s["n"], "skipped": s["skipped"], "sim": {**{k: s[k] for k in keep}, "lean": sim_lean},
                          "model": {**{k: m[k] for k in keep}, "lean": model_lean},
                          "model_spread": {"lean": spread_lean, "at_mean_lengths": fitted_lean}}, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
