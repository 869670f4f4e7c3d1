"""Per-request measurements and their summary, defined once for the simulator, the HTTP load client and reports.

Definitions (DESIGN.md §3): TTFT is send -> first token; E2E is send -> last token; TPOT is
(E2E - TTFT) / (output tokens - 1), defined for two or more output tokens; ITL is every gap between successive
tokens, pooled over requests. Percentiles interpolate linearly between closest ranks (NumPy's default). A request
is good when it completed and every per-request objective holds with <=; failed requests count against
attainment and goodput, never dropped.

JSON has no infinity and no NaN, and a failed request is an infinitely slow one, so a percentile can be +inf.
`json_number` writes such a value as null beside a `<key>_note` that says why; every bench JSON goes through it.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import math

import numpy as np

PERCENTILES = ("p50", "p90", "p95", "p99")
METRICS = ("ttft", "tpot", "itl", "e2e")


@dataclass(frozen=True)
class RequestRecord:
    """What happened to one request; times in seconds on one monotonic clock."""

    index: int
    t_sched: float
    """When the load generator planned the request (arrival time, or when a closed-loop client became free)."""
    t_send: float
    """Just before the request was written."""
    ttft: float | None = None
    e2e: float | None = None
    input_tokens: int = 0
    output_tokens: int = 0
    itl: tuple[float, ...] = ()
    """Gaps between successive token chunks (empty when the producer pools ITL itself, as the simulator does)."""
    error: str | None = None
    """Why the request failed (HTTP status, timeout, truncated stream...); None when it completed."""
    approximate: bool = False
    """Output tokens counted from stream chunks because the server sent no usage."""
    ttft_any: float | None = None
    """Send -> first event of any kind (a role-only chunk counts here, not in TTFT); a diagnostic."""
    bad_usage: str | None = None
    """Usage counts the server sent that cannot be token counts (e.g. `prompt_tokens -1`); the record holds the
    client's own counts instead, as for a server that sends no usage."""

    @property
    def ok(self) -> bool:
        return self.error is None and self.ttft is not None and self.e2e is not None

    @property
    def tpot(self) -> float | None:
        if not self.ok or self.output_tokens < 2:
            return None
        assert self.e2e is not None and self.ttft is not None
        return (self.e2e - self.ttft) / (self.output_tokens - 1)

    @property
    def end(self) -> float:
        return self.t_send + (self.e2e or 0.0)


def parse_objective(key: str) -> tuple[str, str]:
    """`ttft_p99` -> (`ttft`, `p99`); `tpot_mean` -> (`tpot`, `mean`)."""
    metric, _, pct = key.partition("_")
    if metric not in METRICS or not (pct.startswith("p") or pct == "mean"):
        raise ValueError(f"unknown objective {key!r}; use <metric>_<percentile> or <metric>_mean with metric one "
                         f"of {', '.join(METRICS)}, e.g. ttft_p99")
    return metric, pct


def percentile_q(pct: str) -> float:
    """`p99.9` -> 99.9."""
    return float(pct[1:])


def request_bounds(objectives: dict[str, float]) -> dict[str, float]:
    """The bound each request is held to, per metric (ms): the loosest percentile target of TTFT, TPOT and E2E.
    A tighter percentile (a p50 under a p99) bounds the distribution, not every request; a mean bounds the
    average; ITL bounds the pooled gaps; none of those decides whether one request is good."""
    out: dict[str, float] = {}
    for key, target_ms in objectives.items():
        metric, pct = parse_objective(key)
        if pct != "mean" and metric in ("ttft", "tpot", "e2e"):
            out[metric] = max(out.get(metric, 0.0), target_ms)
    return out


def good(record: RequestRecord, objectives: dict[str, float]) -> bool:
    """Completed and within the bound of each metric (`request_bounds`, objectives in ms); a TPOT bound is not
    evaluable for a single-token answer, so it does not fail it."""
    return _within(record, request_bounds(objectives))


def _within(record: RequestRecord, bounds: dict[str, float]) -> bool:
    if not record.ok:
        return False
    for metric, bound_ms in bounds.items():
        value = {"ttft": record.ttft, "e2e": record.e2e, "tpot": record.tpot}[metric]
        if value is not None and value * 1000 > bound_ms:
            return False
    return True


def weighted_percentile(values: np.ndarray, weights: np.ndarray, q: float) -> float:
    """Percentile of values that occur `weights` times each (inverse of the weighted CDF)."""
    order = np.argsort(values, kind="stable")
    v, w = values[order], weights[order]
    cum = np.cumsum(w)
    idx = int(np.searchsorted(cum, q / 100 * cum[-1], side="left"))
    return float(v[min(idx, len(v) - 1)])


@dataclass
class Distribution:
    """Mean and percentiles of one metric in milliseconds, with the sample count behind them."""

    n: int
    mean: float | None
    percentiles: dict[str, float | None] = field(default_factory=dict)

    def get(self, pct: str) -> float | None:
        if pct in self.percentiles:
            return self.percentiles[pct]
        return None

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"n": self.n}
        for key, value in (("mean", self.mean), *self.percentiles.items()):
            json_number(out, key, value, "failed requests, counted as infinitely slow, reach it")
        return out


def json_number(out: dict[str, Any], key: str, value: float | None, why_infinite: str,
                digits: int = 3) -> dict[str, Any]:
    """Set out[key] to `value` rounded. JSON cannot hold inf or NaN: such a value is written null, and
    out[key + "_note"] says why (`why_infinite` for +inf)."""
    if value is None or math.isfinite(value):
        out[key] = None if value is None else round(value, digits)
        return out
    out[key] = None
    out[f"{key}_note"] = why_infinite if value == math.inf else f"{value} is not a finite number"
    return out


def distribution(values_s: Iterable[float], pcts: Iterable[str] = PERCENTILES,
                 weights: np.ndarray | None = None) -> Distribution:
    arr = np.asarray(list(values_s) if not isinstance(values_s, np.ndarray) else values_s, dtype=float) * 1000
    pcts = list(pcts)
    if arr.size == 0:
        return Distribution(0, None, {p: None for p in pcts})
    if weights is None:
        return Distribution(int(arr.size), float(arr.mean()),
                            {p: float(np.percentile(arr, percentile_q(p))) for p in pcts})
    w = np.asarray(weights, dtype=float)
    return Distribution(int(w.sum()), float((arr * w).sum() / w.sum()),
                        {p: weighted_percentile(arr, w, percentile_q(p)) for p in pcts})


@dataclass
class Summary:
    """Aggregates over a measurement window."""

    completed: int
    failed: int
    duration_s: float
    request_throughput: float
    output_token_throughput: float
    good: int
    goodput_rps: float
    attainment: float
    """Good requests over all requests (failed ones included)."""
    metrics: dict[str, Distribution]
    errors: dict[str, int]
    approximate_tokens: int
    """Requests whose output tokens were counted from chunks (no usage from the server)."""

    def to_json(self) -> dict[str, Any]:
        return {
            "completed": self.completed, "failed": self.failed, "duration_s": round(self.duration_s, 6),
            "request_throughput": round(self.request_throughput, 6),
            "output_token_throughput": round(self.output_token_throughput, 3),
            "good": self.good, "goodput_rps": round(self.goodput_rps, 6), "attainment": round(self.attainment, 6),
            **{f"{m}_ms": d.to_json() for m, d in self.metrics.items()},
            "errors": dict(sorted(self.errors.items())), "approximate_tokens": self.approximate_tokens,
        }


def summarize(records: list[RequestRecord], objectives: dict[str, float] | None = None, *,
              itl_pool: tuple[np.ndarray, np.ndarray] | None = None) -> Summary:
    """Summary of the records (already restricted to the measurement window). `objectives` maps `ttft_p99` to a
    bound in ms and decides which requests are good; their percentiles are reported too. `itl_pool` gives pooled
    ITL as (gap seconds, occurrences) when the records carry no gaps of their own."""
    objectives = objectives or {}
    pcts = sorted(set(PERCENTILES) | {parse_objective(k)[1] for k in objectives} - {"mean"}, key=percentile_q)
    done = [r for r in records if r.ok]
    failed = len(records) - len(done)
    if records:
        start = min(r.t_send for r in records)
        end = max([r.end for r in done] or [start])
        duration = max(end - start, 0.0)
    else:
        duration = 0.0
    bounds = request_bounds(objectives)
    n_good = sum(1 for r in done if _within(r, bounds))
    rate = (lambda x: x / duration) if duration > 0 else (lambda x: 0.0)
    if itl_pool is not None:
        itl = distribution(itl_pool[0], pcts, itl_pool[1])
    else:
        itl = distribution(np.fromiter((g for r in done for g in r.itl), dtype=float), pcts)
    errors: dict[str, int] = {}
    for r in records:
        if r.error is not None:
            kind = r.error.split(":", 1)[0]
            errors[kind] = errors.get(kind, 0) + 1
    return Summary(
        completed=len(done), failed=failed, duration_s=duration, request_throughput=rate(len(done)),
        output_token_throughput=rate(sum(r.output_tokens for r in done)), good=n_good, goodput_rps=rate(n_good),
        attainment=n_good / len(records) if records else 0.0,
        metrics={"ttft": distribution([r.ttft for r in done if r.ttft is not None], pcts),
                 "tpot": distribution([t for r in done if (t := r.tpot) is not None], pcts),
                 "itl": itl,
                 "e2e": distribution([r.e2e for r in done if r.e2e is not None], pcts)},
        errors=errors, approximate_tokens=sum(1 for r in done if r.approximate))
