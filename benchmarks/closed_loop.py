"""What calibrating on a few measurements buys: reveal some rows, calibrate on them, predict the rest.

    python benchmarks/closed_loop.py --csv ../shared/data/silicon_calibration.csv [--lomo-prior] [--json]

Uses the code path of `infra calibrate` (`infra.perf.recalibrate`: the same rows, corrections and matching):
- `per_sweep`: in each load sweep (rows of one deployment and workload, `infra.fitting.replay.sweep_key`, at least
  three), the row at its median load is revealed and calibrated on; the sweep's other rows are predicted;
- `per_sweep_two`: in each sweep of at least four loads, one row at its lower and one at its upper quartile load
  are revealed (as `infra verify` measures a plan's baseline and peak); the sweep's rows at other loads are
  predicted;
- `per_model`: for each model, its sweep with the most rows is revealed; the model's other sweeps (other layouts,
  systems, frameworks, lengths) are predicted;
- `prior`: the rows `per_sweep` scores, predicted without calibration (`prior_two`: those `per_sweep_two` scores,
  `prior_per_model`: those `per_model` scores).
Nothing is fitted to a scored row. The prior is the packaged calibration, which was fitted to the calibration set
itself; `--lomo-prior` refits it without each model (`benchmarks/calibrate.py`'s fit, minutes per model, needs
scipy) and predicts that model's rows from the refit, so every figure is on a model the prior never saw.
With --json the last line is one JSON object with `per_sweep`, `per_sweep_two`, `per_model` and `prior` (and
`prior_two`, `prior_per_model`),
each with n, ttft_median_ape, ttft_p90_ape, tpot_median_ape, tpot_p90_ape (fractions). `--write` commits the
figures and the spread of the calibrated predictions (quantiles of measured / predicted per mode, per_sweep as
the `deployment` band and per_model as the `model` band) to infra/perf/data/closed_loop.json: the error band an
estimate reports where a user's calibration matched its deployment or model.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import multiprocessing
import os
import statistics
import sys
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from infra.catalog.loader import load_catalog  # noqa: E402
from infra.errors import InfraError  # noqa: E402
from infra.fitting.replay import MIN_SWEEP_ROWS, error_bands, sweep_key  # noqa: E402
from infra.perf.calibration import (  # noqa: E402
    Factors,
    borrow,
    table,  # noqa: E402
)
from infra.perf.recalibrate import Measured, Row, errors, fit, predict, prepare  # noqa: E402
from infra.perf.rows import Case, load_rows, to_case  # noqa: E402

OUT = ROOT / "infra" / "perf" / "data" / "closed_loop.json"
TWO_LOADS_SWEEP = 4
"""Fewest distinct loads of a sweep that `per_sweep_two` scores: two revealed, at least two predicted."""


def _load(row: Row) -> float:
    wl = row.m.case.workload
    return float(wl.concurrency if wl.concurrency is not None else wl.rate or 0.0)


def per_sweep(rows: list[Row]) -> list[tuple[Row, tuple[float, float]]]:
    """Each sweep's other rows predicted from a calibration on its median-load row."""
    sweeps: dict[tuple[str, ...], list[Row]] = {}
    for r in rows:
        sweeps.setdefault(sweep_key(r.m.case.row), []).append(r)
    out = []
    for _, members in sorted(sweeps.items()):
        if len(members) < MIN_SWEEP_ROWS:
            continue
        ordered = sorted(members, key=lambda r: (_load(r), r.m.source))
        shown = ordered[(len(ordered) - 1) // 2]
        nodes = fit([shown])
        out += [(r, predict(r, nodes)) for r in ordered if r is not shown]
    return out


def per_sweep_two(rows: list[Row]) -> list[tuple[Row, tuple[float, float]]]:
    """Each sweep of at least four loads predicted from a calibration on two of them (its lower and upper quartile
    loads, one row each), as `infra verify` measures a plan at its baseline and its peak; rows at other loads."""
    sweeps: dict[tuple[str, ...], list[Row]] = {}
    for r in rows:
        sweeps.setdefault(sweep_key(r.m.case.row), []).append(r)
    out = []
    for _, members in sorted(sweeps.items()):
        loads = sorted({_load(r) for r in members})
        if len(loads) < TWO_LOADS_SWEEP:
            continue
        ordered = sorted(members, key=lambda r: (_load(r), r.m.source))
        picked = (loads[len(loads) // 4], loads[3 * len(loads) // 4])
        shown = [next(r for r in ordered if _load(r) == load) for load in picked]
        nodes = fit(shown)
        out += [(r, predict(r, nodes)) for r in ordered if _load(r) not in picked]
    return out


def per_model(rows: list[Row]) -> list[tuple[Row, tuple[float, float]]]:
    """Each model's rows outside its largest sweep predicted from a calibration on that sweep."""
    out = []
    for model in sorted({r.m.case.model for r in rows}):
        sweeps: dict[tuple[str, ...], list[Row]] = {}
        for r in rows:
            if r.m.case.model == model:
                sweeps.setdefault(sweep_key(r.m.case.row), []).append(r)
        shown_key = max(sweeps, key=lambda k: (len(sweeps[k]), k))
        nodes = fit(sweeps[shown_key])
        out += [(r, predict(r, nodes)) for k, members in sorted(sweeps.items()) if k != shown_key for r in members]
    return out


def _lomo_base(cases: list[Case]) -> Callable[[Case], Factors]:
    """Each model's prior refitted without it (calibrate.py's fit), folds in worker processes."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import calibrate  # noqa: PLC0415  (a benchmark script, not a package module)

    catalog = load_catalog()
    items = []
    shared: dict = {}
    for case in cases:
        run = calibrate.compiled(case, catalog, shared)
        if not isinstance(run, str):
            items.append((case, run))
    calibrate._ITEMS = items
    models = sorted({c.model for c in cases})
    with multiprocessing.get_context("fork").Pool(max(1, min(os.cpu_count() or 1, len(models)))) as pool:
        folds = dict(zip(models, pool.map(_fit_without, models)))
    devices_cache: dict[str, dict] = {}

    def base(case: Case) -> Factors:
        pooled, groups, scales = folds[case.model]
        if case.group in groups:
            return groups[case.group]
        key = case.model
        if key not in devices_cache:
            devices_cache[key] = calibrate.device_points(groups)
        fw, dev = case.group.split("/")
        got = borrow(fw, catalog.device(dev), groups, devices_cache[key], scales,
                     catalog.framework(fw).calibration_from)
        return got[1] if got is not None else pooled

    return base


def _fit_without(model: str):  # noqa: ANN202  (runs in a worker process)
    import calibrate  # noqa: PLC0415

    return calibrate.fit_all([it for it in calibrate._ITEMS if it[0].model != model])


def _pct(v: float | None) -> str:
    return "    -" if v is None else f"{100 * v:5.1f}%"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--csv", required=True, help="measurements in the silicon_calibration.csv format")
    ap.add_argument("--lomo-prior", action="store_true",
                    help="predict each model from a prior refitted without it (slow; needs scipy)")
    ap.add_argument("--json", action="store_true", help="end with one JSON line of the figures")
    ap.add_argument("--write", action="store_true", help=f"write the figures and bands to {OUT.relative_to(ROOT)}")
    args = ap.parse_args()
    catalog = load_catalog()
    try:
        raw = load_rows(args.csv)
    except InfraError as exc:
        print(f"error: {exc.problems[0]}", file=sys.stderr)
        return 1
    points, skipped = [], 0
    for i, row in enumerate(raw, 2):
        case = to_case(row, catalog)
        if isinstance(case, str):
            skipped += 1
            continue
        date = next((p.split("=", 1)[1] for p in row.get("silicon_data_source", "").split("; ")
                     if p.startswith("measured=")), None)
        points.append(Measured(case, f"{Path(args.csv).name}:{i}", date))
    if not points:
        print(f"error: {args.csv}: no row can be replayed ({skipped} skipped) — To fix: give measurements of "
              "catalog models in the silicon_calibration.csv format", file=sys.stderr)
        return 1
    base = _lomo_base([p.case for p in points]) if args.lomo_prior else None
    rows, unreplayed = prepare(points, catalog, base)
    sweep, two, model = per_sweep(rows), per_sweep_two(rows), per_model(rows)
    figures = {"per_sweep": errors(sweep), "per_sweep_two": errors(two), "per_model": errors(model),
               "prior": errors([(r, r.prior) for r, _ in sweep]),
               "prior_two": errors([(r, r.prior) for r, _ in two]),
               "prior_per_model": errors([(r, r.prior) for r, _ in model]),
               "prior_fit": "leave-one-model-out" if args.lomo_prior else "packaged (fitted on these rows)",
               "rows": len(rows), "skipped": skipped + len(unreplayed)}
    sweeps = len({sweep_key(r.m.case.row) for r, _ in sweep})
    print(f"rows {len(raw)}: replayed {len(rows)}, skipped {figures['skipped']}; prior: {figures['prior_fit']}")
    print(f"{'':34s} {'n':>5s}  {'TTFT med':>8s} {'TTFT p90':>8s}  {'TPOT med':>8s} {'TPOT p90':>8s}")
    for name, key in ((f"prior ({sweeps} sweeps' other rows)", "prior"),
                      ("calibrated on the median-load row", "per_sweep"),
                      ("prior (4+ loads' other loads)", "prior_two"),
                      ("calibrated on two loads", "per_sweep_two"),
                      ("prior (models' other sweeps)", "prior_per_model"),
                      ("calibrated on the largest sweep", "per_model")):
        b = figures[key]
        print(f"{name:34s} {b['n']:5d}  {_pct(b['ttft_median_ape']):>8s} {_pct(b['ttft_p90_ape']):>8s}  "
              f"{_pct(b['tpot_median_ape']):>8s} {_pct(b['tpot_p90_ape']):>8s}")
    ratios = [r.m.case.ttft_ms / p[0] for r, p in sweep if p[0] > 0]
    if ratios:
        print(f"per_sweep measured/predicted TTFT median {statistics.median(ratios):.3f}")
    if args.write:
        csv_bytes = Path(args.csv).read_bytes()
        if hashlib.sha256(csv_bytes).hexdigest() != table().get("data_sha256"):
            print(f"error: {args.csv}: not the data the packaged prior was fitted on — To fix: give that CSV "
                  f"({table().get('data')})", file=sys.stderr)
            return 1
        data = {"data": Path(args.csv).name, "data_sha256": table().get("data_sha256"),
                "prior_fit": figures["prior_fit"],
                "figures": {k: figures[k] for k in ("per_sweep", "per_sweep_two", "per_model", "prior", "prior_two",
                                                 "prior_per_model")},
                "bands": {"deployment": error_bands([(r.m.case, p[0], p[1]) for r, p in sweep]),
                          "model": error_bands([(r.m.case, p[0], p[1]) for r, p in model])}}
        OUT.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")
        print(f"wrote {OUT.relative_to(ROOT)}")
    if args.json:
        print(json.dumps(figures, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
