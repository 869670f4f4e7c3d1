"""What a deployed engine served over a window of its own traffic, read from its Prometheus `/metrics` (vLLM's
request-level histograms; the emulator exports the same): no load is sent. Two scrapes, at the start and the end
of the window, and their difference is the window's: the requests that finished in it, their mean TTFT and TPOT
(`_sum / _count`, exact), mean prompt and answer lengths, and the arrival rate. Percentiles come from the buckets
where these are narrow enough to say them (`scrape.FINE`); vLLM's default ones rarely are, and then a calibration
made from the window corrects the means only.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from infra.bench.scrape import Series, bucket_quantile, window
from infra.errors import InfraError, Location, Problem
from infra.perf.serving import PERCENTILES

TTFT = "vllm:time_to_first_token_seconds"
TPOT = "vllm:request_time_per_output_token_seconds"
"""A finished request's decode time per output token after its first (vLLM V1; the emulator alike)."""
PROMPT = "vllm:request_prompt_tokens"
GENERATION = "vllm:request_generation_tokens"
NEEDED = (TTFT, TPOT, PROMPT, GENERATION)
MIN_REQUESTS = 30
"""Finished requests a window needs before its means say anything (as a mean objective's verdict does)."""


@dataclass(frozen=True)
class Observation:
    """A window of a deployment's own traffic."""

    source: str
    """The /metrics URL scraped."""
    date: str
    """When the window ended (UTC, ISO 8601)."""
    seconds: float
    requests: int
    """Requests that finished in the window (TTFT's count)."""
    rate: float
    """Requests per second that finished in it: the arrival rate, for a deployment that keeps up."""
    isl: float
    osl: float
    isl_cv: float
    osl_cv: float
    ttft_ms: float
    tpot_ms: float
    percentiles: dict[str, dict[str, float]] = field(default_factory=dict)
    """{"ttft_ms": {"p90": ...}, "tpot_ms": {...}}: those the buckets resolve (`scrape.bucket_quantile`)."""
    notes: tuple[str, ...] = ()


def metrics_url(url: str) -> str:
    """The /metrics beside an engine's OpenAI API (`http://host:8000/v1` -> `http://host:8000/metrics`)."""
    base = url.rstrip("/")
    if base.endswith("/metrics"):
        return base
    return base.removesuffix("/v1") + "/metrics"


def _bucket_cv(series: Series) -> float:
    """Coefficient of variation of a token-count histogram, each bucket's observations at the geometric middle of
    its bounds (1-2-5 buckets: within a factor of 1.6 of any of them)."""
    mean = series.sum / series.count
    lower, below, second = 0.0, 0.0, 0.0
    for upper, cumulative in series.buckets:
        n = cumulative - below
        if n > 0:
            x = mean if math.isinf(upper) else math.sqrt(max(lower, 0.5) * upper)
            second += n * x * x
        lower, below = upper, cumulative
    return round(math.sqrt(max(second / series.count - mean * mean, 0.0)) / mean, 4) if mean > 0 else 0.0


def observation(before: dict[str, Series], after: dict[str, Series], seconds: float, source: str,
                date: str) -> Observation:
    """The window between two scrapes (`scrape.snapshot`), or a clear error where it cannot be read."""
    where = Location(source)
    missing = [name for name in NEEDED if name not in after]
    if missing:
        raise InfraError(Problem(f"no {', '.join(missing)} among the metrics", where,
                                 "point at the /metrics of a vLLM engine that exports its request-level "
                                 "histograms (V1) or of `infra emulate`"))
    got = window(before, after)
    # Whole numbers from two scrapes; Prometheus's increase() extrapolates them (`promql`), so the means divide by
    # the counts as they are and only the request count is rounded.
    n = round(got[TTFT].count)
    if any(s.count < 0 or s.sum < 0 for s in got.values()):
        raise InfraError(Problem("the counters went down during the window (the engine restarted)",
                                 where, "observe a window in which the engine keeps running"))
    if n < MIN_REQUESTS or got[TPOT].count <= 0:
        raise InfraError(Problem(f"{n} request(s) finished in {seconds:g} s; a window needs "
                                 f"{MIN_REQUESTS} or more", where,
                                 "observe a longer window (--duration) or a busier deployment"))
    pcts: dict[str, dict[str, float]] = {}
    for key, name in (("ttft_ms", TTFT), ("tpot_ms", TPOT)):
        found = {p: round(1000 * v, 4) for p in PERCENTILES
                 if (v := bucket_quantile(got[name], float(p[1:]) / 100)) is not None}
        if found:
            pcts[key] = found
    notes = ["arrivals are taken as Poisson (the metrics do not say how requests were spaced)",
             "length CVs are read from the token histograms' buckets (each at its bucket's middle)"]
    if not pcts:
        notes.append("the latency buckets are too wide to read percentiles from (wider than "
                     "x1.25): a calibration from this window corrects the means only")
    return Observation(source, date, seconds, n, got[TTFT].count / seconds, got[PROMPT].sum / got[PROMPT].count,
                       got[GENERATION].sum / got[GENERATION].count, _bucket_cv(got[PROMPT]),
                       _bucket_cv(got[GENERATION]), 1000 * got[TTFT].sum / got[TTFT].count,
                       1000 * got[TPOT].sum / got[TPOT].count, pcts, tuple(notes))


def observation_lines(windows: Sequence[tuple[Observation, dict[str, Any]]], whole: Observation,
                      service: str | None) -> list[dict[str, Any]]:
    """Windows as an `infra bench --save` file holds a run (`infra calibrate` reads it): a `case` line for each
    (the deployment that served it, the workload it served and what it measured, one load point), and a closing
    `summary` line of them all (`whole`)."""
    lines = []
    for obs, deployment in windows:
        case = {**deployment, "isl": max(1, round(obs.isl)), "osl": max(1, round(obs.osl)), "isl_cv": obs.isl_cv,
                "osl_cv": obs.osl_cv, "rate": round(obs.rate, 6), "arrival_cv": 1.0}
        lines.append({"kind": "case", "source": obs.source, "service": service, "label": "observed",
                      "requests": obs.requests, "case": case, "ttft_ms": round(obs.ttft_ms, 4),
                      "tpot_ms": round(obs.tpot_ms, 4), "percentiles": obs.percentiles, "date": obs.date})
    metrics = {key: {"mean": round(mean, 4), "n": whole.requests, **whole.percentiles.get(key, {})}
               for key, mean in (("ttft_ms", whole.ttft_ms), ("tpot_ms", whole.tpot_ms))}
    lines.append({"kind": "summary", "source": whole.source, "service": service, "date": whole.date,
                  "completed": whole.requests, "duration_s": round(whole.seconds, 3),
                  "request_throughput": round(whole.rate, 6),
                  "load": {"observed_s": round(whole.seconds, 3), "rate_rps": round(whole.rate, 6)}, **metrics,
                  "notes": list(whole.notes)})
    return lines


__all__ = ["MIN_REQUESTS", "NEEDED", "TTFT", "Observation", "metrics_url", "observation", "observation_lines"]
