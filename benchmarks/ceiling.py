"""How much of the measured latency the recorded columns explain at all: a flexible learner next to the model.

    python benchmarks/ceiling.py --csv PATH [--folds 5] [--json]

PATH is a CSV in the silicon_calibration.csv format (shared/data/README.md). Gradient-boosted trees
(scikit-learn's HistGradientBoostingRegressor, installed with `pip install -e '.[dev]'`) learn log TTFT and log TPOT
from every column a row records of its deployment and workload (lengths, clients, layouts, batch caps, worker
counts, framework and version, system, precision, mode) and are scored on rows they were not trained on:

- held-out sweeps: the rows are split into `--folds` folds by load sweep (`infra.fitting.replay.sweep_key`: one
  deployment and workload at every load), so the learner has seen every model, system and framework, just not
  the deployment it predicts. Once on the columns alone, once with the performance model's own prediction as one
  more column (a correction learned on top of it; the model's calibration saw those rows, which flatters it);
- leave-one-model-out: each model's rows predicted by a learner trained on the other models' (the model column
  withheld), the split the performance model's targets are set on.

Next to them: the performance model replayed with the committed calibration (in-sample when PATH is the
calibration set) and, when PATH is the very file the calibration was fitted on (its SHA-256), the committed
leave-one-model-out figures (`benchmarks/calibrate.py --lomo`). A learner that
sees every model yet does no better than the model on held-out deployments says the error left is in what the
rows do not record (hidden engine settings, the measuring harness), not in the model's form. Rows the model cannot
replay are left out of every figure. With --json the last line is one JSON object of the figures.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from infra.catalog.loader import load_catalog  # noqa: E402
from infra.errors import InfraError  # noqa: E402
from infra.fitting.replay import replay, summarize, sweep_key  # noqa: E402
from infra.perf.calibration import table  # noqa: E402
from infra.perf.rows import Case, load_rows  # noqa: E402

ROLE_COLUMNS = ("batch_size", "tp_size", "pp_size", "attention_dp_size", "moe_tp_size", "moe_ep_size")
NUMERIC = ("isl", "osl", *ROLE_COLUMNS, *(f"{role}_{c}" for role in ("prefill", "decode")
                                         for c in (*ROLE_COLUMNS, "num_workers")))
CATEGORICAL = ("backend", "backend_version", "system", "precision", "gemm_quant_mode", "moe_quant_mode", "mode")
MISSING = -1.0
"""A column the row leaves empty (the trees split it off like any value)."""


def _number(value: str | None) -> float:
    try:
        v = float(value or "")
    except ValueError:
        return MISSING
    return v if math.isfinite(v) else MISSING


def features(cases: list[Case], with_model: bool) -> tuple[np.ndarray, list[bool]]:
    """The recorded columns of each case as numbers (categories as codes in order of appearance), the clients the
    row ran, and the model's name where `with_model`; with the mask of categorical columns."""
    names = CATEGORICAL + (("model",) if with_model else ())
    codes: dict[str, dict[str, int]] = {name: {} for name in names}
    out = []
    for case in cases:
        row = case.row
        values = [_number(row.get(c)) for c in NUMERIC] + [math.log(case.workload.concurrency or 1)]
        for name in names:
            value = case.model if name == "model" else row.get(name) or ""
            values.append(float(codes[name].setdefault(value, len(codes[name]))))
        out.append(values)
    return np.array(out, dtype=float), [False] * (len(NUMERIC) + 1) + [True] * len(names)


def learned(x: np.ndarray, categorical: list[bool], y: np.ndarray, groups: list[str], folds: int) -> np.ndarray:
    """Predictions of y for every row by trees trained on the folds without its group."""
    from sklearn.ensemble import HistGradientBoostingRegressor
    from sklearn.model_selection import GroupKFold

    labels = {g: i for i, g in enumerate(dict.fromkeys(groups))}
    index = np.array([labels[g] for g in groups])
    out = np.zeros_like(y)
    for train, test in GroupKFold(n_splits=min(folds, len(labels))).split(x, y, index):
        for j in range(y.shape[1]):
            trees = HistGradientBoostingRegressor(max_iter=400, learning_rate=0.05, categorical_features=categorical,
                                                  early_stopping=False, random_state=0)
            trees.fit(x[train], y[train, j])
            out[test, j] = trees.predict(x[test])
    return out


KEYS = ("ttft_median_ape", "ttft_p90_ape", "tpot_median_ape", "tpot_p90_ape")


def scores(cases: list[Case], predicted: np.ndarray) -> dict[str, float]:
    """Median and p90 absolute percentage error of TTFT and TPOT (predicted in ms, columns 0 and 1), as the
    fidelity benchmark counts them."""
    s = summarize([(c, float(t), float(p)) for c, (t, p) in zip(cases, predicted)], [])
    return {k: s[k] for k in KEYS}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--csv", required=True, help="measurements in the silicon_calibration.csv format")
    ap.add_argument("--folds", type=int, default=5, help="folds of held-out sweeps (default 5)")
    ap.add_argument("--json", action="store_true", help="end with one JSON line of the figures")
    args = ap.parse_args()
    try:
        import sklearn  # noqa: F401
    except ImportError:
        print("error: benchmarks/ceiling.py needs scikit-learn: pip install -e '.[dev]'", file=sys.stderr)
        return 1
    if args.folds < 2:
        print(f"error: --folds {args.folds}: at least 2 folds are needed to hold any sweep out", file=sys.stderr)
        return 1
    try:
        rows = load_rows(args.csv)
    except InfraError as exc:
        print(f"error: {exc.problems[0]}", file=sys.stderr)
        return 1
    results, skipped = replay(rows, load_catalog())
    models = sorted({c.model for c, _, _ in results})
    sweeps = {sweep_key(c.row) for c, _, _ in results}
    if len(sweeps) < 2:
        print(f"error: {args.csv}: {len(results)} replayable rows in {len(sweeps)} load sweep(s); holding sweeps "
              "out needs at least 2", file=sys.stderr)
        return 1
    cases = [c for c, _, _ in results]
    model = np.array([[t, p] for _, t, p in results])
    y = np.log([[c.ttft_ms, c.tpot_ms] for c in cases])
    by_sweep = ["\x1f".join(sweep_key(c.row)) for c in cases]
    x_all, cat_all = features(cases, with_model=True)
    corrected = np.column_stack([x_all, np.log(model)])
    figures = {
        "n": len(results), "skipped": len(skipped), "sweeps": len(sweeps), "models": len(models),
        "model_replayed": scores(cases, model),
        "learner_held_out_sweeps": scores(cases, np.exp(learned(x_all, cat_all, y, by_sweep, args.folds))),
        "learner_with_model_held_out_sweeps": scores(
            cases, np.exp(learned(corrected, cat_all + [False, False], y, by_sweep, args.folds))),
    }
    fitted = table()
    if fitted.get("data_sha256") == hashlib.sha256(Path(args.csv).read_bytes()).hexdigest():
        # Held-out figures of the model itself exist only for the rows it was fitted on (a refit per model).
        figures["model_lomo"] = {k: fitted.get("fit", {}).get("lomo", {}).get(k) for k in KEYS}
    if len(models) > 1:
        x_lomo, cat_lomo = features(cases, with_model=False)
        figures["learner_lomo"] = scores(cases, np.exp(learned(x_lomo, cat_lomo, y, [c.model for c in cases],
                                                               len(models))))
    print(f"rows {len(rows)}: used {len(results)} ({len(sweeps)} load sweeps, {len(models)} models), "
          f"skipped {len(skipped)}")
    print(f"{'':62s} {'TTFT med':>8s} {'TTFT p90':>8s}  {'TPOT med':>8s} {'TPOT p90':>8s}")
    labels = (("model_replayed", "performance model, committed calibration"),
              ("model_lomo", "performance model, committed leave-one-model-out"),
              ("learner_held_out_sweeps", "trees on the recorded columns, held-out sweeps"),
              ("learner_with_model_held_out_sweeps", "trees on the columns and the model's figure, held-out sweeps"),
              ("learner_lomo", "trees on the recorded columns, leave-one-model-out"))
    for key, label in labels:
        b = figures.get(key)
        if not b or b["ttft_median_ape"] is None:
            continue
        print(f"{label:62s} {100 * b['ttft_median_ape']:7.1f}% {100 * b['ttft_p90_ape']:7.1f}%  "
              f"{100 * b['tpot_median_ape']:7.1f}% {100 * b['tpot_p90_ape']:7.1f}%")
    if args.json:
        print(json.dumps(figures, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
