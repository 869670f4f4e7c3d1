"""Measured against target: a verdict per objective with a confidence interval, and one for the service.

Each objective (`ttft_p99: 1500` ms) is checked on its distribution: per-request values for TTFT, TPOT and E2E,
pooled gaps for ITL, with failed requests counted as infinitely slow (they miss every bound, never drop out).
The interval is a seeded percentile bootstrap of the percentile. Resampling n values and taking the k-th smallest
is the same as taking the value at rank floor(n U) where U is the k-th smallest of n uniforms, a Beta(k, n-k+1)
draw, so each resample costs one Beta draw instead of n: exact for the bootstrap, and cheap for a million ITL gaps.

- pass: the whole interval is within the target;
- fail: the whole interval is above it;
- inconclusive: the target lies inside the interval, or fewer than `MIN_TAIL` samples lie beyond the percentile
  (p99 needs 1,000 requests), so a pass is never claimed on too little data.
The service passes when every objective passes, fails when any fails, and is inconclusive otherwise. Attainment
(requests meeting every bound at once) and goodput are reported beside it with a Wilson interval; the intent's
attainment target, when known, gets its own verdict, which the overall one does not include because plans are
sized for the percentile objectives.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np

from infra.bench.metrics import RequestRecord, parse_objective, percentile_q, summarize

MIN_TAIL = 10
"""Samples that must lie beyond a percentile for it to be judged (p99: 1,000 requests; p50: 20)."""
CONFIDENCE = 0.95
RESAMPLES = 2000

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
        def r(x: float | None) -> float | str | None:
            return None if x is None else ("inf" if math.isinf(x) else round(x, 3))

        return {"key": self.key, "target_ms": self.target_ms, "measured_ms": r(self.measured_ms),
                "ci_ms": None if self.ci_ms is None else [r(self.ci_ms[0]), r(self.ci_ms[1])], "n": self.n,
                "predicted_ms": r(self.predicted_ms), "verdict": self.verdict, "reason": self.reason}


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

    def to_json(self) -> dict[str, Any]:
        return {"overall": self.overall, "objectives": [o.to_json() for o in self.objectives],
                "attainment": round(self.attainment, 6),
                "attainment_ci": [round(self.attainment_ci[0], 6), round(self.attainment_ci[1], 6)],
                "attainment_target": self.attainment_target, "attainment_verdict": self.attainment_verdict,
                "goodput_rps": round(self.goodput_rps, 6), "requests": self.requests, "failed": self.failed,
                "notes": list(self.notes)}


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
    q = percentile_q(pct)
    n = round(float(weights.sum())) if weights is not None else len(values)
    need = math.ceil(MIN_TAIL / (1 - q / 100)) if q < 100 else None
    if n == 0:
        return ObjectiveVerdict(key, target_ms, None, None, 0, "inconclusive", "no samples", predicted_ms)
    point, low, high, n = percentile_ci(values, q, weights=weights, seed=seed)
    if need is None or n < need:
        return ObjectiveVerdict(key, target_ms, point, (low, high), n, "inconclusive",
                                f"{n} samples; {pct} needs at least {need or 'more'} ({MIN_TAIL} beyond it)",
                                predicted_ms)
    if high <= target_ms:
        verdict: Outcome = "pass"
        reason = f"{CONFIDENCE:.0%} interval within the target"
    elif low > target_ms:
        verdict, reason = "fail", f"{CONFIDENCE:.0%} interval above the target"
    else:
        verdict, reason = "inconclusive", f"target inside the {CONFIDENCE:.0%} interval; run more requests"
    return ObjectiveVerdict(key, target_ms, point, (low, high), n, verdict, reason, predicted_ms)


def judge(records: list[RequestRecord], objectives: dict[str, float], *,
          itl_pool: tuple[np.ndarray, np.ndarray] | None = None, predicted: dict[str, float] | None = None,
          attainment_target: float | None = None, seed: int = 0) -> Verdict:
    """The verdict on a run: every objective (key -> target ms) judged on its distribution, attainment and goodput
    from the shared summary. `predicted` (key -> ms) is carried along for comparison."""
    predicted = predicted or {}
    out = []
    for i, (key, target) in enumerate(sorted(objectives.items())):
        metric, _ = parse_objective(key)
        values, weights = _sample(records, metric, itl_pool)
        out.append(judge_objective(key, float(target), values, weights, seed=seed + i,
                                   predicted_ms=predicted.get(key)))
    summary = summarize(records, objectives, itl_pool=itl_pool)
    outcomes = {o.verdict for o in out}
    overall: Outcome = "fail" if "fail" in outcomes else "inconclusive" if "inconclusive" in outcomes or not out \
        else "pass"
    total = summary.completed + summary.failed
    ci = wilson(summary.good, total)
    att_verdict: Outcome | None = None
    if attainment_target is not None:
        att_verdict = "pass" if ci[0] >= attainment_target else "fail" if ci[1] < attainment_target \
            else "inconclusive"
    notes = []
    if summary.failed:
        kinds = ", ".join(f"{k} {v}" for k, v in sorted(summary.errors.items()))
        notes.append(f"{summary.failed} of {total} requests failed ({kinds}); they count as missing every bound")
    return Verdict(overall, out, summary.attainment, ci, summary.goodput_rps, total, summary.failed,
                   attainment_target, att_verdict, notes)


__all__ = ["CONFIDENCE", "MIN_TAIL", "ObjectiveVerdict", "Verdict", "judge", "judge_objective", "percentile_ci",
           "wilson"]
