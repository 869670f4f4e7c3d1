"""Objectives judged on a window of a deployment's own traffic (`infra verify --prometheus`): from the engines'
latency histograms, not from requests timed one by one.

A histogram keeps how many requests fell in each bucket, not where in it, so a percentile is known to lie in the
bucket that holds its rank, (lower, upper], and no closer (vLLM's default TTFT buckets run 0.1, 0.25, 0.5 s):
- fail: the bucket lies wholly above the target (more than the percentile's share of requests took longer);
- pass: it lies wholly within the target, and at least `MIN_TAIL` requests lie beyond the percentile (p99 needs
  1,000 requests), as a benchmark's verdict needs (`infra.bench.verdict`);
- inconclusive: the target falls inside that bucket (finer buckets, or a benchmark, decide it), or too few requests.
A mean objective is the histogram's sum over its count: exact for the window, judged once it holds `MIN_MEAN`
requests. The window is the population an SLO over that period speaks of, so there is no sampling interval; the
interval a verdict carries is the bucket's. Requests the engines count in no latency histogram (those that failed
before a first token) are not judged here.
"""

from __future__ import annotations

import math

from infra.bench.metrics import parse_objective, percentile_q
from infra.bench.observe import Observation
from infra.bench.scrape import Series, bucket_at, bucket_quantile
from infra.bench.verdict import ObjectiveVerdict, Outcome
from infra.catalog.metrics import MIN_MEAN, MIN_TAIL, needed
from infra.perf.serving import PERCENTILES


def _ms(x: float) -> str:
    return "+Inf" if math.isinf(x) else f"{x:,.4g} ms"


def judge_series(key: str, target_ms: float, series: Series | None, missing: str,
                 predicted_ms: float | None = None) -> ObjectiveVerdict:
    """One objective (`ttft_p99`, `tpot_mean` ...) on the window's histogram of its metric (seconds); `missing`
    says why there is none where `series` is None."""
    _, pct = parse_objective(key)
    if series is None or series.count <= 0:
        return ObjectiveVerdict(key, target_ms, None, None, 0, "inconclusive", missing, predicted_ms)
    n = round(series.count)
    if pct == "mean":
        mean = 1000 * series.sum / series.count
        verdict: Outcome = "inconclusive" if n < MIN_MEAN else "pass" if mean <= target_ms else "fail"
        reason = (f"{n} requests; the mean needs at least {MIN_MEAN}" if verdict == "inconclusive" else
                  f"the window's mean over its {n:,} requests (sum over count)")
        return ObjectiveVerdict(key, target_ms, mean, (mean, mean), n, verdict, reason, predicted_ms)
    q = percentile_q(pct) / 100
    lower, upper, _, _ = bucket_at(series, q) or (0.0, math.inf, 0.0, 0.0)
    lo, hi = 1000 * lower, 1000 * upper
    point = bucket_quantile(series, q)
    measured = None if point is None else 1000 * point
    where = f"the buckets place {pct} in ({_ms(lo)}, {_ms(hi)}]"
    need = needed(100 * q) if q < 1 else None
    if lo >= target_ms:
        verdict, reason = "fail", f"{where}, above the target"
    elif hi > target_ms:
        verdict, reason = "inconclusive", f"{where}, around the target: finer buckets or a benchmark decide it"
    elif need is None or n < need:
        verdict, reason = "inconclusive", (f"{n:,} requests; {pct} needs at least "
                                           f"{f'{need:,}' if need else 'more'} ({MIN_TAIL} beyond it)")
    else:
        verdict, reason = "pass", f"{where}, within the target"
    return ObjectiveVerdict(key, target_ms, measured, (lo, hi), n, verdict, reason, predicted_ms)


def _cdf(points: list[tuple[float, float]], x: float) -> float:
    """A predicted distribution's CDF at `x` from its (value, share) percentile points, linear in log value between
    them and on along the nearest segment past either end, within 0..1."""
    for (x0, p0), (x1, p1) in zip(points, points[1:]):
        if x <= x1 or (x1, p1) == points[-1]:
            if x1 <= x0:
                return p1 if x >= x1 else p0
            share = p0 + (p1 - p0) * math.log(x / x0) / math.log(x1 / x0)
            return min(max(share, 0.0), 1.0)
    return 1.0


def pooled_prediction(predictions: list[dict[str, float]], requests: list[float],
                      gaps: list[float]) -> dict[str, float]:
    """What the model predicts for windows together, each predicted at its own load (ms by objective key, as
    `infra.workflow.observe` gives them): means weighted by each window's requests (ITL's by its gaps between
    tokens), and each percentile from p50 up the one of the windows' mixture (each window's distribution through
    its predicted percentiles), which lies between the windows' own."""
    out: dict[str, float] = {}
    for metric in ("ttft", "tpot", "itl", "e2e"):
        weights = gaps if metric == "itl" else requests
        total = sum(weights)
        if f"{metric}_mean" not in predictions[0] or total <= 0:
            continue
        out[f"{metric}_mean"] = sum(w * p[f"{metric}_mean"] for w, p in zip(weights, predictions)) / total
        curves = [[(p[f"{metric}_{pct}"], float(pct[1:]) / 100) for pct in PERCENTILES if f"{metric}_{pct}" in p]
                  for p in predictions]
        if any(len(c) < 2 or c[0][0] <= 0 for c in curves):
            continue
        for pct in PERCENTILES:
            q = float(pct[1:]) / 100
            at = [p.get(f"{metric}_{pct}") for p in predictions]
            if any(v is None or v <= 0 for v in at):
                continue
            lo, hi = math.log(min(at)), math.log(max(at))  # type: ignore[type-var]
            for _ in range(60):
                mid = (lo + hi) / 2
                share = sum(w * _cdf(c, math.exp(mid)) for w, c in zip(weights, curves)) / total
                lo, hi = (mid, hi) if share < q else (lo, mid)
            out[f"{metric}_{pct}"] = math.exp((lo + hi) / 2)
    return out


def judge_window(observation: Observation, objectives: dict[str, float],
                 predicted: dict[str, float] | None = None) -> tuple[list[ObjectiveVerdict], Outcome]:
    """Every objective (key -> target ms) on the window's histograms, and the overall outcome: fail where any
    fails, pass where every one passes, inconclusive otherwise."""
    predicted = predicted or {}
    out = []
    for key, target in sorted(objectives.items()):
        metric, _ = parse_objective(key)
        engine = observation.engine or "the engine"
        missing = (f"{engine} counts TPOT per gap between tokens, not per request: no request's TPOT to judge"
                   if metric == "tpot" else f"{engine} exports no histogram of {metric.upper()}")
        out.append(judge_series(key, float(target), observation.latency.get(metric), missing, predicted.get(key)))
    outcomes = {o.verdict for o in out}
    overall: Outcome = "fail" if "fail" in outcomes else "pass" if out and outcomes == {"pass"} else "inconclusive"
    return out, overall


__all__ = ["judge_series", "judge_window", "pooled_prediction"]
