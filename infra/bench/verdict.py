"""Measured against target: a verdict per objective with a confidence interval, and one for the service.

Each objective (`ttft_p99: 1500` ms) is checked on its distribution: per-request values for TTFT, TPOT and E2E,
pooled gaps for ITL, with failed requests counted as infinitely slow (they miss every bound, never drop out).
The interval is a seeded percentile bootstrap of the percentile. Resampling n values and taking the k-th smallest
is the same as taking the value at rank floor(n U) where U is the k-th smallest of n uniforms, a Beta(k, n-k+1)
draw, so each resample costs one Beta draw instead of n: exact for the bootstrap, and cheap for a million ITL gaps.

- fail: the whole interval is above the target, whatever the sample size (failed requests at +inf put it there
  as soon as they reach the percentile);
- pass: the whole interval is within the target and at least `MIN_TAIL` samples lie beyond the percentile (p99
  needs 1,000 requests), so a pass is never claimed on too little data;
- inconclusive: otherwise (the target inside the interval, or a pass on too few samples).

Failed requests are judged on their own too, when the caller states the share it allows (`max_failed`, the
endpoint's `--max-failed`), with the Wilson interval of the failed share:
- fail: the interval's lower bound is above the allowed share (more failed than allowed, for certain);
- inconclusive: the observed share is above it but the interval reaches down to it (too few requests to tell);
- pass: the observed share is within it.
A run with no objective still fails on its failures; without failures and objectives it is inconclusive.

The service passes when every objective (and the failed share, when judged, and the attainment, when a target is
known) passes, fails when any fails, and is inconclusive otherwise. Attainment (requests within each metric's
loosest percentile target at once, `metrics.request_bounds`) and goodput are reported with a Wilson interval; the
intent's attainment target is judged on that interval like the failed share: fail when it lies wholly below the
target, pass when wholly at or above, inconclusive otherwise. Plans are sized for it (`planner.candidates.
attainment_objectives`). The JSON forms hold no inf or NaN: see
`metrics.json_number`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from statistics import NormalDist
from typing import Any, Literal

import numpy as np

from infra.bench.metrics import RequestRecord, json_number, parse_objective, percentile_q, summarize
from infra.catalog.metrics import MIN_MEAN, MIN_TAIL, needed

CONFIDENCE = 0.95
RESAMPLES = 2000
DEFAULT_MAX_FAILED = 0.01
"""Share of requests that may fail before a run against an endpoint fails (`--max-failed`): a serving SLO of
99% availability or better leaves at most this much."""
BEYOND = "failed requests, counted as infinitely slow, reach this percentile"

Outcome = Literal["pass", "fail", "inconclusive"]


@dataclass(frozen=True)
class ObjectiveVerdict:
    """One objective: target, what was measured with its interval, what the plan predicted, and the verdict."""

    key: str
    target_ms: float
    measured_ms: float | None
    ci_ms: tuple[float, float] | None
    n: int
    verdict: Outcome
    reason: str
    predicted_ms: float | None = None

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"key": self.key, "target_ms": self.target_ms}
        json_number(out, "measured_ms", self.measured_ms, BEYOND)
        out["ci_ms"] = None if self.ci_ms is None else _ci_json(out, self.ci_ms)
        out["n"] = self.n
        json_number(out, "predicted_ms", self.predicted_ms, "the plan predicts no finite value")
        out.update(verdict=self.verdict, reason=self.reason)
        return out


def _ci_json(out: dict[str, Any], ci: tuple[float, float]) -> list[float | None]:
    """The interval's ends, an infinite one as null with `ci_ms_note` saying which and why."""
    ends = [None if not math.isfinite(x) else round(x, 3) for x in ci]
    infinite = sum(not math.isfinite(x) for x in ci)
    if infinite:
        where = "both ends of the interval" if infinite == 2 else "the interval's upper end"
        out["ci_ms_note"] = f"failed requests, counted as infinitely slow, reach {where}"
    return ends


@dataclass(frozen=True)
class Verdict:
    """The service's verdict: its objectives, attainment and goodput."""

    overall: Outcome
    objectives: list[ObjectiveVerdict]
    attainment: float
    attainment_ci: tuple[float, float]
    goodput_rps: float
    requests: int
    failed: int
    attainment_target: float | None = None
    attainment_verdict: Outcome | None = None
    notes: list[str] = field(default_factory=list)
    failed_kinds: dict[str, int] = field(default_factory=dict)
    """Failed requests by kind (`http_500`, `timeout`, `bad_sse`, ...)."""
    max_failed: float | None = None
    """The share of requests allowed to fail; None when failures are not judged on their own."""
    failed_ci: tuple[float, float] = (0.0, 1.0)
    """Wilson interval of the failed share."""
    failed_verdict: Outcome | None = None
    failed_reason: str = ""

    def to_json(self) -> dict[str, Any]:
        return {"overall": self.overall, "objectives": [o.to_json() for o in self.objectives],
                "attainment": round(self.attainment, 6),
                "attainment_ci": [round(self.attainment_ci[0], 6), round(self.attainment_ci[1], 6)],
                "attainment_target": self.attainment_target, "attainment_verdict": self.attainment_verdict,
                "goodput_rps": round(self.goodput_rps, 6), "requests": self.requests, "failed": self.failed,
                "failed_kinds": dict(sorted(self.failed_kinds.items())),
                "failed_share": round(self.failed / self.requests, 6) if self.requests else None,
                "failed_ci": [round(self.failed_ci[0], 6), round(self.failed_ci[1], 6)],
                "max_failed": self.max_failed, "failed_verdict": self.failed_verdict,
                "failed_reason": self.failed_reason, "notes": list(self.notes)}


def _sample(records: list[RequestRecord], metric: str,
            itl_pool: tuple[np.ndarray, np.ndarray] | None) -> tuple[np.ndarray, np.ndarray | None]:
    """(values in ms, occurrence weights or None) of one metric; failed requests are +inf."""
    inf = float("inf")
    if metric == "itl":
        if itl_pool is not None:
            return np.asarray(itl_pool[0], dtype=float) * 1000, np.asarray(itl_pool[1], dtype=float)
        return np.fromiter((g * 1000 for r in records if r.ok for g in r.itl), dtype=float), None
    out = []
    for r in records:
        if not r.ok:
            out.append(inf)
            continue
        v = r.ttft if metric == "ttft" else r.e2e if metric == "e2e" else r.tpot
        if v is not None:
            out.append(v * 1000)
    return np.asarray(out, dtype=float), None


def _at(sorted_v: np.ndarray, cum: np.ndarray | None, pos: np.ndarray) -> np.ndarray:
    """Values at 0-based ranks `pos` of the (weighted) sorted sample."""
    if cum is None:
        return sorted_v[np.minimum(pos, len(sorted_v) - 1)]
    return sorted_v[np.minimum(np.searchsorted(cum, pos, side="right"), len(sorted_v) - 1)]


def _lerp(a: np.ndarray | float, b: np.ndarray | float, frac: float) -> Any:
    with np.errstate(invalid="ignore"):
        out = np.where(np.isinf(b) | np.isinf(a), np.where(frac > 0, b, a), a + frac * (np.asarray(b) - a))
    return out


def percentile_ci(values: np.ndarray, q: float, *, weights: np.ndarray | None = None, seed: int = 0,
                  confidence: float = CONFIDENCE, resamples: int = RESAMPLES) -> tuple[float, float, float, int]:
    """(percentile, low, high, samples): the percentile (linear interpolation, NumPy's default) and its bootstrap
    interval, over values occurring `weights` times each."""
    order = np.argsort(values, kind="stable")
    v = np.asarray(values, dtype=float)[order]
    cum = None
    if weights is not None:
        cum = np.cumsum(np.asarray(weights, dtype=float)[order])
        n = round(float(cum[-1]))
    else:
        n = len(v)
    h = q / 100 * (n - 1)
    k = math.floor(h)
    frac = h - k
    ranks = np.array([k, min(k + 1, n - 1)])
    lo_v, hi_v = _at(v, cum, ranks)
    point = float(_lerp(lo_v, hi_v, frac))
    if n < 2:
        return point, point, point, n
    rng = np.random.default_rng(seed)
    # k-th smallest of n uniforms, then the next one up (the gap to it is the smallest of the n-k-1 above).
    u1 = rng.beta(k + 1, n - k, resamples)
    u2 = u1 + (1 - u1) * rng.beta(1, max(n - k - 1, 1), resamples) if k + 1 < n else u1
    p1 = np.floor(u1 * n).astype(np.int64)
    p2 = np.floor(u2 * n).astype(np.int64)
    boot = _lerp(_at(v, cum, p1), _at(v, cum, p2), frac)
    alpha = (1 - confidence) / 2
    low, high = np.quantile(boot, [alpha, 1 - alpha], method="inverted_cdf")
    return point, float(low), float(high), n


def wilson(successes: int, n: int, confidence: float = CONFIDENCE) -> tuple[float, float]:
    """Wilson score interval of a proportion."""
    if n == 0:
        return 0.0, 1.0
    z = {0.9: 1.6449, 0.95: 1.96, 0.99: 2.5758}.get(confidence, 1.96)
    p = successes / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return max(0.0, centre - half), min(1.0, centre + half)


def judge_objective(key: str, target_ms: float, values: np.ndarray, weights: np.ndarray | None = None, *,
                    seed: int = 0, predicted_ms: float | None = None) -> ObjectiveVerdict:
    """The verdict on one objective from its sample."""
    _, pct = parse_objective(key)
    if pct == "mean":
        return _judge_mean(key, target_ms, values, weights, predicted_ms)
    q = percentile_q(pct)
    n = round(float(weights.sum())) if weights is not None else len(values)
    need = needed(q) if q < 100 else None
    if n == 0:
        return ObjectiveVerdict(key, target_ms, None, None, 0, "inconclusive", "no samples", predicted_ms)
    point, low, high, n = percentile_ci(values, q, weights=weights, seed=seed)
    verdict, reason = _outcome(target_ms, low, high, n, need, pct)
    return ObjectiveVerdict(key, target_ms, point, (low, high), n, verdict, reason, predicted_ms)


def mean_ci(values: np.ndarray, weights: np.ndarray | None = None,
            confidence: float = CONFIDENCE) -> tuple[float, float, float, int]:
    """(mean, low, high, samples) with a normal interval for the mean. A failed request counts as infinitely
    slow, so any in the sample makes the mean, and both ends of its interval, infinite."""
    v = np.asarray(values, dtype=float)
    w = np.ones_like(v) if weights is None else np.asarray(weights, dtype=float)
    n = round(float(w.sum()))
    if not np.isfinite(v).all():
        return math.inf, math.inf, math.inf, n
    mean = float((v * w).sum() / w.sum())
    if n < 2:
        return mean, mean, mean, n
    var = float((w * (v - mean) ** 2).sum() / (w.sum() - 1))
    half = NormalDist().inv_cdf(0.5 + confidence / 2) * math.sqrt(var / n)
    return mean, mean - half, mean + half, n


def _judge_mean(key: str, target_ms: float, values: np.ndarray, weights: np.ndarray | None,
                predicted_ms: float | None) -> ObjectiveVerdict:
    if len(values) == 0:
        return ObjectiveVerdict(key, target_ms, None, None, 0, "inconclusive", "no samples", predicted_ms)
    point, low, high, n = mean_ci(values, weights)
    verdict, reason = _outcome(target_ms, low, high, n, MIN_MEAN, "the mean")
    return ObjectiveVerdict(key, target_ms, point, (low, high), n, verdict, reason, predicted_ms)


def _outcome(target_ms: float, low: float, high: float, n: int, need: int | None, pct: str) -> tuple[Outcome, str]:
    # Too little data can hide a miss but not fake one: an interval wholly above the target fails at any size.
    if low > target_ms:
        return "fail", f"{CONFIDENCE:.0%} interval above the target"
    if need is None or n < need:
        return "inconclusive", f"{n} samples; {pct} needs at least {need or 'more'} ({MIN_TAIL} beyond it)"
    if high <= target_ms:
        return "pass", f"{CONFIDENCE:.0%} interval within the target"
    return "inconclusive", f"target inside the {CONFIDENCE:.0%} interval; run more requests"


def _pct(x: float) -> str:
    # Three significant digits: an allowance of 0.05% must not print as 0.1%.
    return f"{x * 100:.3g}%"


def judge_failures(failed: int, total: int, max_failed: float) -> tuple[Outcome, tuple[float, float], str]:
    """(verdict, Wilson interval of the failed share, why) for `failed` of `total` requests against the share
    allowed to fail."""
    ci = wilson(failed, total)
    if total == 0:
        return "inconclusive", ci, "no request was measured"
    share = failed / total
    said = (f"{failed} of {total} requests failed ({_pct(share)}, {CONFIDENCE:.0%} CI {_pct(ci[0])} .. "
            f"{_pct(ci[1])}); at most {_pct(max_failed)} may fail")
    if ci[0] > max_failed:
        return "fail", ci, said
    if share > max_failed:
        return "inconclusive", ci, said + "; too few requests to be sure more fail"
    return "pass", ci, said


def judge(records: list[RequestRecord], objectives: dict[str, float], *,
          itl_pool: tuple[np.ndarray, np.ndarray] | None = None, predicted: dict[str, float] | None = None,
          attainment_target: float | None = None, max_failed: float | None = None, seed: int = 0) -> Verdict:
    """The verdict on a run: every objective (key -> target ms) judged on its distribution, attainment and goodput
    from the shared summary. `predicted` (key -> ms) is carried along for comparison. `max_failed` (a share) also
    judges the failed requests on their own; None leaves them to the objectives."""
    predicted = predicted or {}
    out = []
    for i, (key, target) in enumerate(sorted(objectives.items())):
        metric, _ = parse_objective(key)
        values, weights = _sample(records, metric, itl_pool)
        out.append(judge_objective(key, float(target), values, weights, seed=seed + i,
                                   predicted_ms=predicted.get(key)))
    summary = summarize(records, objectives, itl_pool=itl_pool)
    total = summary.completed + summary.failed
    failed_verdict: Outcome | None = None
    failed_ci, failed_reason = wilson(summary.failed, total), ""
    if max_failed is not None:
        failed_verdict, failed_ci, failed_reason = judge_failures(summary.failed, total, max_failed)
    ci = wilson(summary.good, total)
    att_verdict: Outcome | None = None
    if attainment_target is not None:
        att_verdict = "pass" if ci[0] >= attainment_target else "fail" if ci[1] < attainment_target \
            else "inconclusive"
    outcomes = {o.verdict for o in out} | {v for v in (failed_verdict, att_verdict) if v}
    overall: Outcome = "fail" if "fail" in outcomes else "inconclusive" if "inconclusive" in outcomes or not out \
        else "pass"
    notes = []
    if summary.failed:
        kinds = ", ".join(f"{k} {v}" for k, v in sorted(summary.errors.items()))
        notes.append(f"{summary.failed} of {total} requests failed ({kinds}); they count as missing every bound")
    return Verdict(overall, out, summary.attainment, ci, summary.goodput_rps, total, summary.failed,
                   attainment_target, att_verdict, notes, dict(summary.errors), max_failed, failed_ci,
                   failed_verdict, failed_reason)


__all__ = ["CONFIDENCE", "DEFAULT_MAX_FAILED", "MIN_TAIL", "ObjectiveVerdict", "Verdict", "judge", "judge_failures",
           "judge_objective", "percentile_ci", "wilson"]
