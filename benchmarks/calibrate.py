"""Fit the performance model's efficiency factors to measured deployments, and report how well they generalise.

    python benchmarks/calibrate.py --csv ../shared/data/silicon_calibration.csv [--extra RUN.jsonl] [--write]
                                   [--lomo] [--loao] [--jobs N] [--json]

Fits, in log space with robust losses (Cauchy on TTFT, soft L1 on TPOT):
1. pooled factors over every row (the fallback for unmeasured pairs);
2. per framework (or per framework/device pair with --group-by pair), shrunk towards the pooled factors so thin
   groups stay sensible; the routed-expert costs (`SHARED_FACTORS`) stay pooled, as no framework has enough MoE
   models to tell its own from theirs;
3. per device architecture (hopper, blackwell...), multipliers of the GEMM and all-reduce efficiencies
   (`ARCH_FACTORS`) shared by every framework on it, pulled towards 1.
Among them `collective_us` (the fixed latency of each collective, which is what makes a tensor-parallel step dearer
than its share of the work) and `recipe_accept` (tokens per decode step of the measured disaggregated recipes
that decode speculatively, which the rows do not record; applied when replaying such rows, never to a plan).
`--write` commits them to infra/perf/data/calibration.json with the date and the data's fingerprint.
`--lomo` refits with each model held out and scores the held-out rows: the figure that says how the model does
on models it has never seen. A held-out model's rows on a framework/device pair no other model was measured on
(DeepSeek-R1's on SGLang B200/GB200/GB300/H100 and TRT-LLM B300/GB300) take factors the way an estimate for an
unmeasured pair does (`infra.perf.calibration.borrow`: the framework's closest measured device, with its
architecture's multiplier traded for theirs), not the pooled ones: leave-one-model-out TTFT median 31.7% -> 31.1%,
TPOT 20.2% -> 18.5% (held-out DeepSeek-R1 32.3/24.4% -> 31.4/21.9%). With `--write` their spread (quantiles of
measured / predicted per mode) is committed too, as the error band every estimate reports.
`--loao` refits with each device architecture held out (hopper, blackwell, blackwell-ultra) and predicts its rows
with factors borrowed the way an estimate for a device no measurement fitted borrows them: the bias and spread of
carrying factors to another device, which a held-out model's band never sees. With `--write` they are committed as
`borrowed_bands`, the band of every estimate whose factors were borrowed (`infra.perf.calibration.borrowed_band`,
widened for a vendor no measurement covers), which `slo.confidence` plans against.
`--lolo` refits without the rows of the longest prompts (`LONG_PROMPT` tokens and more) and predicts them: how much
error carrying the factors to prompts about twice as long as any fitted adds over the fit that saw them (the same
rows in-sample), as a lognormal spread per doubling of the prompt (bias and the widening of the spread, in
quadrature). With `--write` it is committed as `extrapolation`, by which an estimate past the measured lengths widens
its band (`infra.perf.calibration.extrapolation_sigma`). Requires scipy (in the `dev` extra).
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import hashlib
import json
import math
import multiprocessing
import os
import sys
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from statistics import NormalDist

import numpy as np
from scipy.optimize import least_squares

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from infra.catalog.loader import load_catalog  # noqa: E402
from infra.errors import InfraError  # noqa: E402
from infra.fitting.replay import error_bands, prepare, summarize  # noqa: E402
from infra.perf.calibration import SHARED_FACTORS, Factors, borrow, device_point  # noqa: E402
from infra.perf.rows import Case, compiled, load_rows, measured_cases, replay  # noqa: E402

OUT = ROOT / "infra" / "perf" / "data" / "calibration.json"
NAMES = [n for n in Factors.names() if n not in ("accept", "draft_tokens", "balance_steps", "poll_steps")]
"""Speculative-decoding acceptance is not identifiable from TTFT/TPOT alone (it trades against step overhead and
bandwidth), so it stays at 1 unless a user states it, as do the draft tokens a step verifies; attention-DP
balancing and polling for requests every few steps are off in the engines this product renders, and what the
measured ones did is fitted as `recipe_balance_steps` and `recipe_poll`."""
LO = np.array([Factors.BOUNDS[n][0] for n in NAMES])
HI = np.array([Factors.BOUNDS[n][1] for n in NAMES])
# Parameters are optimised as logs of a positive offset so that 0-valued overheads stay reachable.
OFFSET = np.array([0.0 if Factors.BOUNDS[n][0] > 0 else 0.5 for n in NAMES])
MIN_BAND_ROWS = 30
"""Fewest rows of one model and mode that give it an in-sample error band of its own."""
PRIOR_STRENGTH = 3.0
"""Pull of the pooled factors on a group's fit, in residual units per unit of log-parameter: a group needs about a
hundred rows of evidence to move a factor far from the pool. A framework's rows hold two to four models, so what
they alone say about a factor is partly those models; against 1.0, leave-one-model-out TTFT median 32.7% -> 31.7%
and p90 87.6% -> 85.7% (held-out gpt-oss-120b 41.4% -> 37.3%), TPOT median 20.2% either way, p90 46.8% -> 47.8%."""
F_SCALE = {"cauchy": 0.15, "soft_l1": 0.3}
"""Log residual past which a row's pull on the factors stops growing quadratically, per loss: about 16% for TTFT,
whose rows carry runs a few times off their neighbours, so the factors follow the bulk that sets the median error
(leave-one-model-out TTFT median 42.8% -> 41.3%, TPOT 23.0% -> 22.3% against 0.3 for both); about 35% for TPOT,
whose rows are tighter (0.15 for both: TPOT 24.6%)."""
DEFAULT_PRIOR = 5.0
"""Pull of the factors' documented defaults (`Factors`) on the pooled fit, in the same units as PRIOR_STRENGTH: a
factor the rows barely inform (attention-DP balancing, the routed experts' fixed costs when only a few MoE models
carry them) stays near its default instead of drifting to whatever the loss surface's flat direction allows, which
is what happens to it when the one model that informs it is left out. Leave-one-model-out TTFT median 41.3% -> 38.9%
(held-out DeepSeek-R1 49.1% -> 44.4%), TPOT p90 68.6% -> 66.1% (median 22.3% -> 22.8%); 2.0 and 10.0 gave the
held-out DeepSeek-R1 45.3% and 45.6%. `recipe_accept` is left free: its default (no speculation) is what the
recipes are known not to run."""
UNPRIORED = ("recipe_accept",)
TTFT_LOSS, TPOT_LOSS = "cauchy", "soft_l1"
"""Robust losses of the two metrics. TTFT rows carry outliers no factor should chase (runs whose first prompts
met a cold engine, queues of unrecorded recipes, up to 10x off their repeats), so their pull fades past F_SCALE
(Cauchy); TPOT is tighter and keeps a pull that grows linearly (soft L1)."""


def _robust(r: np.ndarray, loss: str) -> np.ndarray:
    """Residuals whose squares are the robust loss of `r`, so plain least squares minimises that loss."""
    scale = F_SCALE[loss]
    z = (r / scale) ** 2
    rho = np.log1p(z) if loss == "cauchy" else 2 * (np.sqrt(1 + z) - 1)
    return np.sign(r) * scale * np.sqrt(rho)


def to_params(x: np.ndarray) -> np.ndarray:
    return np.clip(np.exp(x) - OFFSET, LO, HI)


def to_x(values: np.ndarray) -> np.ndarray:
    return np.log(np.clip(values, LO, HI) + OFFSET)


Prepared = list[tuple[Case, object]]


def factors_of(x: np.ndarray) -> Factors:
    return Factors(**dict(zip(NAMES, (float(v) for v in to_params(x)))))


def robust_residuals(items: Prepared, factors: Callable[[Case], Factors]) -> np.ndarray:
    """Robust log residuals of every row, TTFT then TPOT, each row run with `factors(case)`."""
    res = []
    for (case, _), (ttft, tpot) in zip(items, replay([run for _, run in items], [factors(case) for case, _ in items])):
        for pred, meas in ((ttft, case.ttft_ms), (tpot, case.tpot_ms)):
            res.append(math.log(pred / meas) if math.isfinite(pred) and pred > 0 else 5.0)
    out = np.asarray(res)
    out[0::2] = _robust(out[0::2], TTFT_LOSS)
    out[1::2] = _robust(out[1::2], TPOT_LOSS)
    return out


def fit(items: Prepared, start: Factors, prior: np.ndarray | None = None, max_nfev: int = 60,
        fixed: tuple[str, ...] = (), strength: np.ndarray | float | None = None) -> Factors:
    """Least squares from `start`; the `fixed` factors keep their starting values, the others are pulled towards
    `prior` (log space) when one is given, each with its `strength` (PRIOR_STRENGTH unless given)."""
    x_all = to_x(np.array([getattr(start, n) for n in NAMES]))
    free = np.array([n not in fixed for n in NAMES])
    pull = np.broadcast_to(np.asarray(PRIOR_STRENGTH if strength is None else strength, dtype=float), x_all.shape)

    def res(x: np.ndarray) -> np.ndarray:
        full = x_all.copy()
        full[free] = x
        f = factors_of(full)
        out = robust_residuals(items, lambda case: f)
        if prior is None:
            return out
        return np.concatenate([out, _robust(pull[free] * (x - prior[free]), "soft_l1")])

    sol = least_squares(res, x_all[free], max_nfev=max_nfev, diff_step=1e-3)
    full = x_all.copy()
    full[free] = sol.x
    return Factors(**{n: round(float(v), 5) for n, v in zip(NAMES, to_params(full))})


GROUP_BY = "framework"
"""How factors are shared: `pair` (framework/device), `framework`, or `none` (one pooled set). Per framework is the
default because it generalises best to models left out of the fit (leave-one-model-out), which is what matters
for models nobody has measured; per pair fits the measured models more closely."""


def group_key(case: Case) -> str:
    fw, dev = case.group.split("/")
    return {"pair": case.group, "framework": fw, "none": "all"}[GROUP_BY]


ARCH_FACTORS = ("gemm", "comm")
"""Factors a device architecture scales for every framework on it, fitted after the frameworks' own: how much of the
spec sheet's peak the GEMM kernels of a generation reach (Blackwell's doubled peaks are further from what the
engines' kernels reach than Hopper's), and how much of its scale-up link's quoted bandwidth a large all-reduce
reaches (with one factor for both generations, TTFT on Hopper rose with the tensor-parallel degree, Llama-3.1-70B on
vLLM 0.90 at tp1 to 1.22 at tp8 predicted/measured, and fell on Blackwell, 1.00 to 0.62: the fit puts Hopper at x1.34
(0.76 of NVLink 4's 450 GB/s a direction, near the ring all-reduce's bus bandwidth) and Blackwell at x0.89; in-sample
TTFT median/p90 28.8/83.6% -> 28.3/82.2%, leave-one-model-out 31.1/84.9% -> 30.6/84.4%, TPOT 18.5/46.2% ->
17.9/45.6%; leave-one-architecture-out 34.5/90.4% -> 33.0/85.2%, TPOT 18.2/52.4% -> 18.4/53.1%, with a generation no
fit covers taking the frameworks' own factors, `infra.perf.calibration.borrow`). Per-framework factors alone cannot
hold them, as each framework was measured on its own mix of devices; per device or per framework/device pair the
multipliers would learn the few models each was measured with instead (a GB200's rows are nearly all one model's
disaggregated recipes)."""


def _architecture(group: str) -> str:
    """The catalog architecture of a framework/device group's device."""
    return load_catalog().device(group.split("/")[1]).architecture


def _scaled(f: Factors, scale: dict[str, float]) -> Factors:
    return replace(f, **{n: min(Factors.BOUNDS[n][1], getattr(f, n) * scale[n]) for n in ARCH_FACTORS})


def fit_architectures(items: Prepared, groups: dict[str, Factors]) -> dict[str, dict[str, float]]:
    """Per device architecture, the multipliers of `ARCH_FACTORS` over the fitted groups' values, pulled towards 1
    so an architecture with few rows keeps its frameworks' factors."""
    by_arch: dict[str, Prepared] = {}
    for item in items:
        by_arch.setdefault(_architecture(item[0].group), []).append(item)
    scales = {}
    for arch, rows in sorted(by_arch.items()):
        def res(x: np.ndarray, rows: Prepared = rows) -> np.ndarray:
            scale = dict(zip(ARCH_FACTORS, np.exp(x)))
            out = robust_residuals(rows, lambda case: _scaled(groups[case.group], scale))
            return np.concatenate([out, _robust(PRIOR_STRENGTH * x, "soft_l1")])

        sol = least_squares(res, np.zeros(len(ARCH_FACTORS)), max_nfev=30, diff_step=1e-3)
        scales[arch] = {n: round(float(v), 5) for n, v in zip(ARCH_FACTORS, np.exp(sol.x))}
    return scales


def fit_all(items: Prepared) -> tuple[Factors, dict[str, Factors], dict[str, dict[str, float]]]:
    """Pooled factors, the factors of every framework/device pair measured, and the architecture multipliers in
    them."""
    defaults = to_x(np.array([getattr(Factors(), n) for n in NAMES]))
    pooled = fit(items, Factors(), defaults, max_nfev=80,
                 strength=np.array([0.0 if n in UNPRIORED else DEFAULT_PRIOR for n in NAMES]))
    if GROUP_BY == "none":
        return pooled, {}, {}
    prior = to_x(np.array([getattr(pooled, n) for n in NAMES]))
    groups: dict[str, Prepared] = {}
    for item in items:
        groups.setdefault(group_key(item[0]), []).append(item)
    fitted = {g: fit(rows, pooled, prior, fixed=SHARED_FACTORS) for g, rows in sorted(groups.items())}
    if GROUP_BY == "pair":
        return pooled, fitted, {}
    # Expand to every framework/device pair seen, so lookups stay by pair, each with its architecture's multipliers.
    fitted = {c.group: fitted[group_key(c)] for c, _ in items}
    scales = fit_architectures(items, fitted)
    return pooled, {g: _scaled(f, scales[_architecture(g)]) for g, f in fitted.items()}, scales


def device_points(groups: dict[str, Factors]) -> dict[str, dict]:
    """The fitted groups' devices as `borrow` compares them (committed as `devices`)."""
    catalog = load_catalog()
    return {dev: device_point(catalog.device(dev)) for dev in sorted({key.split("/")[1] for key in groups})}


def score(items: Prepared, pooled: Factors, groups: dict[str, Factors],
          scales: dict[str, dict[str, float]] | None = None) -> list[tuple[Case, float, float]]:
    """Predictions with the fitted factors; a framework/device pair the fit did not see (a held-out model's
    device) borrows them the way an estimate does (`infra.perf.calibration.borrow`)."""
    catalog = load_catalog()
    devices = device_points(groups)
    chosen = []
    for case, _ in items:
        factors = groups.get(case.group)
        if factors is None:
            fw, dev = case.group.split("/")
            got = borrow(fw, catalog.device(dev), groups, devices, scales, catalog.framework(fw).calibration_from)
            factors = got[1] if got is not None else pooled
        chosen.append(factors)
    return [(case, ttft, tpot) for (case, _), (ttft, tpot) in zip(items, replay([run for _, run in items], chosen))]


_ITEMS: Prepared = []


def _fold(model: str) -> list[tuple[int, float, float]]:
    """Fit without `model` and predict its rows: (index into the cases, TTFT, TPOT)."""
    p, g, s = fit_all([it for it in _ITEMS if it[0].model != model])
    held = [i for i, (case, _) in enumerate(_ITEMS) if case.model == model]
    return [(i, ttft, tpot) for i, (_, ttft, tpot) in zip(held, score([_ITEMS[i] for i in held], p, g, s))]


def _fold_architecture(arch: str) -> list[tuple[int, float, float]]:
    """Fit without any device of architecture `arch` and predict its rows with factors borrowed the way an
    estimate for an unmeasured device borrows them (`score`): (index into the cases, TTFT, TPOT)."""
    p, g, s = fit_all([it for it in _ITEMS if _architecture(it[0].group) != arch])
    held = [i for i, (case, _) in enumerate(_ITEMS) if _architecture(case.group) == arch]
    return [(i, ttft, tpot) for i, (_, ttft, tpot) in zip(held, score([_ITEMS[i] for i in held], p, g, s))]


LONG_PROMPT = 6000
"""Mean prompt length from which rows are held out by `--lolo` (the 8k rows; the longest fitted are then 4k)."""


def _fold_long(_: str) -> list[tuple[int, float, float]]:
    """Fit without the rows of prompts of `LONG_PROMPT` tokens or more and predict them: (index, TTFT, TPOT)."""
    p, g, s = fit_all([it for it in _ITEMS if it[0].workload.isl < LONG_PROMPT])
    held = [i for i, (case, _) in enumerate(_ITEMS) if case.workload.isl >= LONG_PROMPT]
    return [(i, ttft, tpot) for i, (_, ttft, tpot) in zip(held, score([_ITEMS[i] for i in held], p, g, s))]


def _run_fold(fold: tuple[str, str]) -> list[tuple[int, float, float]]:
    kind, name = fold
    return {"model": _fold, "architecture": _fold_architecture, "length": _fold_long}[kind](name)


def _log_spread(ratios: dict[str, float]) -> float:
    """The lognormal sigma of a band's p5..p95 ratios."""
    return (math.log(ratios["p95"]) - math.log(ratios["p5"])) / (2 * NormalDist().inv_cdf(0.95))


def extrapolation(held: list[tuple[Case, float, float]], fitted: list[tuple[Case, float, float]],
                  longest: float) -> dict:
    """What predicting the longest prompts from a fit without them (`held`) adds over the fit that saw them
    (`fitted`, the same rows in-sample), per mode and metric: the widening of the log spread and the shift of the
    median, in quadrature, per doubling of the prompt (the held-out rows' mean over `longest`, the longest mean
    prompt the fit without them saw)."""
    mean = float(np.mean([c.workload.isl for c, _, _ in held]))
    doublings = math.log2(mean / longest)
    out, out_bands, in_bands = {}, error_bands(held), error_bands(fitted)
    for mode, band in out_bands.items():
        sigma = {}
        for metric in ("ttft", "tpot"):
            mine, base = band[metric], in_bands[mode][metric]
            widening = max(0.0, _log_spread(mine) ** 2 - _log_spread(base) ** 2)
            shift = math.log(mine["p50"] / base["p50"])
            sigma[metric] = round(math.sqrt(widening + shift ** 2) / doublings, 4)
        out[mode] = {"n": band["n"], "sigma_per_doubling": sigma}
    return {"longest_fitted": round(longest, 1), "held_out_mean": round(mean, 1), "doublings": round(doublings, 3),
            "modes": out}


def measured_ranges(items: Prepared) -> dict[str, list[float]]:
    """The shortest and longest mean prompt and answer the fitted rows ran (committed as `measured_ranges`): past
    them the step times are the roofline's at factors fitted elsewhere (`infra.perf.calibration.unmeasured_regime`)."""
    out = {}
    for name in ("isl", "osl"):
        values = [getattr(case.workload, name) for case, _ in items]
        out[name] = [round(min(values), 1), round(max(values), 1)]
    return out


def fmt(block: dict) -> str:
    def pct(v):
        return "-" if v is None else f"{100 * v:5.1f}%"
    return (f"n={block['n']:5d}  TTFT median {pct(block['ttft_median_ape'])} p90 {pct(block['ttft_p90_ape'])}  "
            f"TPOT median {pct(block['tpot_median_ape'])} p90 {pct(block['tpot_p90_ape'])}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--csv", default=str(ROOT.parent / "shared" / "data" / "silicon_calibration.csv"))
    ap.add_argument("--write", action="store_true", help="write infra/perf/data/calibration.json")
    ap.add_argument("--out", default=str(OUT), help="where --write puts the factors")
    ap.add_argument("--lomo", action="store_true", help="also report leave-one-model-out figures")
    ap.add_argument("--json", action="store_true", help="end with one JSON line of the figures")
    ap.add_argument("--loao", action="store_true",
                    help="also report leave-one-architecture-out figures: each device architecture's rows predicted "
                         "with factors borrowed from the others (with --write, the band of unmeasured devices)")
    ap.add_argument("--lolo", action="store_true",
                    help="also fit without the longest prompts and predict them (with --write, how far an estimate "
                         "past the measured lengths widens its band)")
    ap.add_argument("--group-by", choices=("pair", "framework", "none"), default=GROUP_BY,
                    help="share factors per framework/device pair, per framework, or not at all")
    ap.add_argument("--prior", type=float, default=PRIOR_STRENGTH, help="pull of the pooled factors on groups")
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 1,
                    help="processes for the leave-one-model-out folds (default: one per core)")
    ap.add_argument("--extra", action="append", default=[], metavar="FILE",
                    help="also fit the cases of a saved benchmark run (`infra bench --save FILE`); repeatable")
    args = ap.parse_args()
    globals()["GROUP_BY"] = args.group_by
    globals()["PRIOR_STRENGTH"] = args.prior

    catalog = load_catalog()
    try:
        rows = load_rows(args.csv)
    except InfraError as exc:
        print(f"error: {exc.problems[0]}", file=sys.stderr)
        return 1
    shared: dict = {}
    items, skipped = prepare(rows, catalog, lambda case: compiled(case, catalog, shared))
    for path in args.extra:
        for case in measured_cases(path, catalog):
            run = compiled(case, catalog, shared)
            if isinstance(run, str):
                skipped.append((case.row, run))
            else:
                items.append((case, run))
    if not items:
        print(f"error: {args.csv}: no row can be replayed ({len(skipped)} skipped) — To fix: give measurements of "
              "catalog models in the silicon_calibration.csv format", file=sys.stderr)
        return 1
    if args.lolo and not (any(c.workload.isl >= LONG_PROMPT for c, _ in items)
                          and any(c.workload.isl < LONG_PROMPT for c, _ in items)):
        print(f"error: {args.csv}: --lolo needs rows of prompts both shorter and longer than {LONG_PROMPT} tokens — "
              "To fix: give measurements at both lengths, or leave out --lolo", file=sys.stderr)
        return 1
    global _ITEMS
    _ITEMS = items
    models = sorted({c.model for c, _ in items}) if args.lomo else []
    archs = sorted({_architecture(c.group) for c, _ in items}) if args.loao else []
    plan = [("model", m) for m in models] + [("architecture", a) for a in archs] + (
        [("length", "")] if args.lolo else [])
    with contextlib.ExitStack() as stack:
        pending = None
        if plan:
            # Folds are independent fits: run them in worker processes (forked, so they share the compiled cases)
            # while this one makes the in-sample fit.
            pool = stack.enter_context(multiprocessing.get_context("fork").Pool(max(1, min(args.jobs, len(plan)))))
            pending = pool.map_async(_run_fold, plan)
        pooled, groups, arch_scales = fit_all(items)
        fitted = [r for r in score(items, pooled, groups) if math.isfinite(r[1])]
        in_sample = summarize(fitted, skipped)
        print(f"rows {len(rows)}, used {len(items)}, skipped {len(skipped)}")
        for arch, scale in arch_scales.items():
            print(f"architecture {arch:16s}", ", ".join(f"{n} x{v:.3f}" for n, v in scale.items()))
        print("in-sample        ", fmt(in_sample), flush=True)
        figures: dict = {"in_sample": {k: in_sample[k] for k in ("n", "ttft_median_ape", "ttft_p90_ape",
                                                                "tpot_median_ape", "tpot_p90_ape")},
                         "skipped": len(skipped)}
        done: list[list[tuple[int, float, float]]] = pending.get() if pending is not None else []
    folds = done[:len(models)]
    if args.lolo:
        long_rows = [(items[i][0], ttft, tpot) for i, ttft, tpot in done[-1]]
        stretch = extrapolation(long_rows, [r for r in fitted if r[0].workload.isl >= LONG_PROMPT],
                                max(c.workload.isl for c, _ in items if c.workload.isl < LONG_PROMPT))
        print("longest prompts held out", fmt(summarize(long_rows, [])), f"({stretch['doublings']:.2f} doublings past "
              f"the longest fitted, {stretch['longest_fitted']:g} tokens)")
        for mode, block in stretch["modes"].items():
            print(f"  extrapolation {mode:7s} sigma per doubling: TTFT {block['sigma_per_doubling']['ttft']:.3f}, "
                  f"TPOT {block['sigma_per_doubling']['tpot']:.3f}")
    if args.loao:
        borrowed: list[tuple[Case, float, float]] = []
        for arch, rows in zip(archs, done[len(models):]):
            scored = [(items[i][0], ttft, tpot) for i, ttft, tpot in rows]
            borrowed += scored
            print(f"held out {arch:22s}", fmt(summarize(scored, [])))
        loao = summarize(borrowed, [])
        print("leave-one-architecture-out", fmt(loao))
        figures["loao"] = {k: loao[k] for k in ("n", "ttft_median_ape", "ttft_p90_ape", "tpot_median_ape",
                                                "tpot_p90_ape")}
        borrowed_bands = error_bands(borrowed)
        for mode, band in borrowed_bands.items():
            print(f"  borrowed band {mode:7s} measured/predicted p5..p95: TTFT {band['ttft']['p5']:.2f}.."
                  f"{band['ttft']['p95']:.2f} (median {band['ttft']['p50']:.2f}), TPOT {band['tpot']['p5']:.2f}.."
                  f"{band['tpot']['p95']:.2f} (median {band['tpot']['p50']:.2f})")
    if args.lomo:
        held: list[tuple[Case, float, float]] = []
        for model, rows in zip(models, folds):
            scored = [(items[i][0], ttft, tpot) for i, ttft, tpot in rows]
            held += scored
            block = summarize(scored, [])
            print(f"held out {model:22s}", fmt(block))
        lomo = summarize(held, skipped)
        print("leave-one-model-out", fmt(lomo))
        for key in ("by_mode", "by_backend", "by_system"):
            for name, block in lomo[key].items():
                print(f"  lomo {key[3:]:8s} {name:10s}", fmt(block))
        figures["lomo"] = {k: lomo[k] for k in ("n", "ttft_median_ape", "ttft_p90_ape", "tpot_median_ape",
                                                "tpot_p90_ape")}
        bands = error_bands(held)
        for mode, band in bands.items():
            kept = {k: "-" if v is None else f"{100 * v:.0f}%" for k, v in band["held"].items()}
            print(f"  error band {mode:7s} measured/predicted p5..p95: TTFT {band['ttft']['p5']:.2f}.."
                  f"{band['ttft']['p95']:.2f}, TPOT {band['tpot']['p5']:.2f}..{band['tpot']['p95']:.2f}; held for a "
                  f"model left out of it: TTFT {kept['ttft']}, TPOT {kept['tpot']}")
    if args.write:
        devices = device_points(groups)
        data = {
            "fitted": dt.date.today().isoformat(),
            "data": Path(args.csv).name,
            "data_sha256": hashlib.sha256(Path(args.csv).read_bytes()).hexdigest(),
            "rows_used": len(items),
            "fit": figures,
            "pooled": pooled.as_dict(),
            "architecture_scales": arch_scales,
            "devices": dict(sorted(devices.items())),
            "measured_ranges": measured_ranges(items),
            "groups": {g: {"factors": f.as_dict(), "rows": sum(1 for c, _ in items if c.group == g)}
                       for g, f in sorted(groups.items())},
        }
        if args.lomo:
            # Only a leave-one-model-out fit says how far predictions for unseen models land; without one the
            # estimates carry no band rather than a stale one.
            data["error_bands"] = bands
        if args.lolo:
            # How much wider predictions land past the longest measured prompt (`infra.perf.calibration.
            # extrapolation_sigma`).
            data["extrapolation"] = stretch
        if args.loao:
            # How far predictions land on a device whose architecture no measurement fitted, its factors borrowed
            # (`infra.perf.calibration.borrowed_band`): wider than a held-out model's band, and off-centre.
            data["borrowed_bands"] = borrowed_bands
        # A model whose own measurements were fitted is predicted closer than an unseen one: its in-sample band,
        # where it has enough rows of a mode to say.
        data["fitted_bands"] = {}
        for model in sorted({c.model for c, _, _ in fitted}):
            mine = {mode: band for mode, band in error_bands([r for r in fitted if r[0].model == model]).items()
                    if band["n"] >= MIN_BAND_ROWS}
            if mine:
                data["fitted_bands"][model] = mine
        out = Path(args.out)
        out.parent.mkdir(parents=True, exist_ok=True)
        data["group_by"], data["prior_strength"] = GROUP_BY, PRIOR_STRENGTH
        out.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")
        print(f"wrote {out}")
    if args.json:
        print(json.dumps(figures, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
