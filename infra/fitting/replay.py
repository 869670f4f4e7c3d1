"""Replay measured deployments through the model: the statistics the packaged calibration is fitted and judged
with (`benchmarks/calibrate.py`, `benchmarks/fidelity.py`): errors overall and by group, error bands, the data's
repeatability and the error within load sweeps. Offline tooling: nothing the product runs imports it.
"""

from __future__ import annotations

import math
import statistics
from typing import Any, Callable

import numpy as np

from infra.catalog.loader import Catalog
from infra.perf.calibration import BAND_QUANTILES, band_key, error_band
from infra.perf.rows import CONCURRENCY_FIELD, Case, predict, to_case


def ape(pred: float, meas: float) -> float:
    return abs(pred - meas) / meas


def _stats(values: list[float]) -> dict[str, float]:
    if not values:
        return {"n": 0}
    ordered = sorted(values)
    p90 = ordered[min(len(ordered) - 1, int(round(0.9 * (len(ordered) - 1))))]
    return {"n": len(values), "median": statistics.median(values), "p90": p90}


def summarize(results: list[tuple[Case, float, float]], skipped: list[tuple[dict[str, str], str]]) -> dict[str, Any]:
    """Median and p90 absolute percentage error of TTFT and TPOT, overall and by mode, backend and system."""
    def block(rs: list[tuple[Case, float, float]]) -> dict[str, Any]:
        t = _stats([ape(a, c.ttft_ms) for c, a, _ in rs])
        p = _stats([ape(b, c.tpot_ms) for c, _, b in rs])
        return {"n": len(rs), "ttft_median_ape": t.get("median"), "ttft_p90_ape": t.get("p90"),
                "tpot_median_ape": p.get("median"), "tpot_p90_ape": p.get("p90")}

    out: dict[str, Any] = {**block(results), "skipped": len(skipped),
                           "skipped_fraction": len(skipped) / max(1, len(skipped) + len(results))}
    for key, fn in (("mode", lambda c: c.deployment.mode), ("backend", lambda c: c.deployment.framework),
                    ("system", lambda c: c.deployment.device), ("model", lambda c: c.model)):
        groups: dict[str, list[tuple[Case, float, float]]] = {}
        for r in results:
            groups.setdefault(fn(r[0]), []).append(r)
        out[f"by_{key}"] = {k: block(v) for k, v in sorted(groups.items())}
    reasons: dict[str, int] = {}
    for _, why in skipped:
        reasons[why] = reasons.get(why, 0) + 1
    out["skip_reasons"] = dict(sorted(reasons.items(), key=lambda kv: -kv[1]))
    return out


def _ratios(rs: list[tuple[Case, float, float]], metric: str) -> np.ndarray:
    return np.asarray([c.ttft_ms / t if metric == "ttft" else c.tpot_ms / p for c, t, p in rs])


def _scored(r: tuple[Case, float, float]) -> bool:
    """Whether both predictions of a replayed row are positive, finite numbers."""
    return r[1] > 0 and r[2] > 0 and math.isfinite(r[1]) and math.isfinite(r[2])


def error_bands(results: list[tuple[Case, float, float]]) -> dict[str, dict[str, Any]]:
    """Per mode, the quantiles of measured / predicted TTFT and TPOT over scored rows (for the held-out rows of a
    leave-one-model-out fit: how far a prediction for a model the fit has never seen lands from the measurement),
    and how often the band between the outer quantiles held for a model left out of the band itself (each model's
    rows against the quantiles of the other models' rows): the figure a band for a new model can claim."""
    by_mode: dict[str, list[tuple[Case, float, float]]] = {}
    for r in filter(_scored, results):
        by_mode.setdefault(r[0].deployment.mode, []).append(r)
    edges = (BAND_QUANTILES[0], BAND_QUANTILES[-1])
    out: dict[str, dict[str, Any]] = {}
    for mode, rs in sorted(by_mode.items()):
        band: dict[str, Any] = {"n": len(rs), "held": {}}
        models = sorted({c.model for c, _, _ in rs})
        for metric in ("ttft", "tpot"):
            q = np.quantile(_ratios(rs, metric), BAND_QUANTILES)
            band[metric] = {band_key(k): round(float(v), 4) for k, v in zip(BAND_QUANTILES, q)}
            inside = total = 0
            for model in models if len(models) > 1 else []:
                lo, hi = np.quantile(_ratios([r for r in rs if r[0].model != model], metric), edges)
                mine = _ratios([r for r in rs if r[0].model == model], metric)
                inside += int(((mine >= lo) & (mine <= hi)).sum())
                total += len(mine)
            band["held"][metric] = round(inside / total, 4) if total else None
        out[mode] = band
    return out


def band_coverage(results: list[tuple[Case, float, float]]) -> dict[str, float | None]:
    """Share of rows whose measured TTFT and TPOT fall inside the committed error band around their prediction: on
    models the fit never saw, near the share the band held for a left-out model when it tells the truth."""
    inside: dict[str, list[bool]] = {"ttft": [], "tpot": []}
    for case, ttft, tpot in results:
        band = error_band(case.deployment.mode)
        if band is None:
            continue
        for metric, pred, meas in (("ttft", ttft, case.ttft_ms), ("tpot", tpot, case.tpot_ms)):
            if 0 < pred < math.inf:
                lo, hi = band.interval(metric, pred)
                inside[metric].append(lo <= meas <= hi)
    return {k: (sum(v) / len(v) if v else None) for k, v in inside.items()}


MEASURED_COLUMNS = ("id", "silicon_data_source", "silicon_ttft_ms", "silicon_tpot_ms")
"""Columns that are not inputs of the deployment: the row's name, its provenance and what was measured."""


def _inputs(row: dict[str, str], also: frozenset[str] = frozenset()) -> tuple[str, ...]:
    """What a row records of its deployment and workload: every column but `MEASURED_COLUMNS` (and `also`)."""
    return tuple(f"{k}={v}" for k, v in sorted(row.items()) if k not in MEASURED_COLUMNS and k not in also)


def repeatability(rows: list[dict[str, str]]) -> dict[str, Any]:
    """How well the data predicts itself: among rows that record the same deployment and workload (every column but
    `MEASURED_COLUMNS`, plus the concurrency in the provenance) yet were measured apart with different results,
    the error of each row's measurement against the geometric mean of the others. No model of the recorded inputs
    can do better on those rows, which makes it the floor under any fidelity figure; hidden settings (worker
    counts, speculative decoding, harness) show up here."""
    groups: dict[tuple[str, ...], dict[tuple[float, float], None]] = {}
    for row in rows:
        try:
            measured = (float(row["silicon_ttft_ms"]), float(row["silicon_tpot_ms"]))
        except (TypeError, ValueError):
            continue
        if min(measured) <= 0:
            continue
        conc = CONCURRENCY_FIELD.search(row.get("silicon_data_source") or "")
        key = _inputs(row)
        groups.setdefault(key + (conc.group(1) if conc else "",), {})[measured] = None
    ttft: list[float] = []
    tpot: list[float] = []
    repeated = [list(g) for g in groups.values() if len(g) > 1]
    for runs in repeated:
        for i, (t, p) in enumerate(runs):
            others = runs[:i] + runs[i + 1:]
            ttft.append(ape(statistics.geometric_mean([o[0] for o in others]), t))
            tpot.append(ape(statistics.geometric_mean([o[1] for o in others]), p))
    t, p = _stats(ttft), _stats(tpot)
    return {"groups": len(repeated), "n": len(ttft), "ttft_median_ape": t.get("median"), "ttft_p90_ape": t.get("p90"),
            "tpot_median_ape": p.get("median"), "tpot_p90_ape": p.get("p90")}


MIN_SWEEP_ROWS = 3
"""Fewest rows of one deployment and workload that make a load sweep of their own."""
BATCH_COLUMNS = frozenset({"batch_size", "prefill_batch_size", "decode_batch_size"})
"""Batch caps, which the sweeps raise with the clients: a load sweep is one deployment whatever they say."""


def sweep_key(row: dict[str, str]) -> tuple[str, ...]:
    """The deployment and workload a row measured, whatever its load: every column but `MEASURED_COLUMNS` (the
    concurrency sits in the provenance) and `BATCH_COLUMNS`. Rows with one key form a load sweep."""
    return _inputs(row, BATCH_COLUMNS)


def within_sweeps(results: list[tuple[Case, float, float]]) -> dict[str, Any]:
    """How far predictions follow the load, apart from their level: rows that record the same deployment and
    workload (every column but `MEASURED_COLUMNS` and `BATCH_COLUMNS`), at least `MIN_SWEEP_ROWS` of them and so
    mostly at different loads, form a sweep; each sweep's median measured / predicted ratio is divided out, and what
    error is left is the model's in how latency grows with the clients. Against the plain figures it says how much
    of the error is a per-deployment level the recorded columns do not explain, and how much is the response to
    load."""
    sweeps: dict[tuple[str, ...], list[tuple[Case, float, float]]] = {}
    for r in filter(_scored, results):
        sweeps.setdefault(sweep_key(r[0].row), []).append(r)
    ttft: list[float] = []
    tpot: list[float] = []
    used = [rs for rs in sweeps.values() if len(rs) >= MIN_SWEEP_ROWS]
    for rs in used:
        level_t = math.exp(statistics.median(math.log(c.ttft_ms / t) for c, t, _ in rs))
        level_p = math.exp(statistics.median(math.log(c.tpot_ms / p) for c, _, p in rs))
        ttft.extend(ape(t * level_t, c.ttft_ms) for c, t, _ in rs)
        tpot.extend(ape(p * level_p, c.tpot_ms) for c, _, p in rs)
    t, p = _stats(ttft), _stats(tpot)
    return {"sweeps": len(used), "n": len(ttft), "ttft_median_ape": t.get("median"), "ttft_p90_ape": t.get("p90"),
            "tpot_median_ape": p.get("median"), "tpot_p90_ape": p.get("p90")}


PROMPT_BANDS = ((1024, "prompts up to 1k"), (4096, "prompts 1k-4k"), (math.inf, "prompts over 4k"))
CLIENT_BANDS = ((8, "clients 1-8"), (64, "clients 9-64"), (math.inf, "clients 65+"))
_SIZES = ((1, "1"), (2, "2"), (4, "4"), (8, "8"), (32, "9-32"), (math.inf, "33+"))
"""Parallel sizes as groups: each up to one 8-device node, then within and beyond 32 devices."""

_Group = tuple[int, int, str]
"""(kind, rank within the kind, name): the order the groups print in."""


def _band(kind: int, prefix: str, value: float, bands: tuple[tuple[float, str], ...]) -> _Group:
    rank = next(i for i, (top, _) in enumerate(bands) if value <= top)
    return kind, rank, f"{prefix}{bands[rank][1]}"


def _groups(case: Case) -> list[_Group]:
    """The groups a row belongs to: its mode, prompt length and clients, and for an aggregated row its tensor,
    expert and attention-data parallel sizes (a disaggregated row's two roles run different layouts)."""
    out = [(0, 0 if case.deployment.mode == "agg" else 1, f"mode {case.deployment.mode}"),
           _band(1, "", case.workload.isl, PROMPT_BANDS)]
    if case.workload.concurrency is not None:
        out.append(_band(2, "", case.workload.concurrency, CLIENT_BANDS))
    if case.deployment.mode == "agg":
        par = case.deployment.agg.parallel
        out.append(_band(3, "agg tp ", par.tp, _SIZES))
        if par.ep > 1:
            out.append(_band(4, "agg ep ", par.ep, _SIZES))
        if par.attention_dp > 1:
            out.append(_band(5, "agg attention-dp ", par.attention_dp, _SIZES))
    return out


def lean(results: list[tuple[Case, float, float]]) -> dict[str, dict[str, Any]]:
    """Which way predictions lean, by what a structural miss would follow: the median measured / predicted TTFT and
    TPOT (above 1: the model is optimistic there) by mode, prompt length, client count, and the aggregated rows'
    tensor, expert and attention-data parallel sizes. Errors hide the direction; factors fitted over every row
    centre the whole near 1, so a group far from it is a mechanism the model prices wrong rather than noise."""
    groups: dict[_Group, list[tuple[Case, float, float]]] = {}
    for r in filter(_scored, results):
        for group in _groups(r[0]):
            groups.setdefault(group, []).append(r)
    return {g[2]: {"n": len(groups[g]), "ttft": statistics.median(c.ttft_ms / t for c, t, _ in groups[g]),
                   "tpot": statistics.median(c.tpot_ms / p for c, _, p in groups[g])} for g in sorted(groups)}


def prepare(rows: list[dict[str, str]], catalog: Catalog, make: Callable[[Case], Any | str]
            ) -> tuple[list[tuple[Case, Any]], list[tuple[dict[str, str], str]]]:
    """`make(case)` for every row that maps to a case; rows that do not, or for which `make` returns a reason
    (a string), are skipped with that reason."""
    out, skipped = [], []
    for row in rows:
        case = to_case(row, catalog)
        got = case if isinstance(case, str) else make(case)
        if isinstance(got, str):
            skipped.append((row, got))
        else:
            out.append((case, got))
    return out, skipped


def replay(rows: list[dict[str, str]], catalog: Catalog) -> tuple[list[tuple[Case, float, float]],
                                                                   list[tuple[dict[str, str], str]]]:
    """Predict every row with the committed calibration."""
    done, skipped = prepare(rows, catalog, lambda case: predict(case, catalog))
    return [(case, got[0], got[1]) for case, got in done], skipped

