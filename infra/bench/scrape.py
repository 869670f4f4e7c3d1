"""An engine's own latency figures, read from its Prometheus `/metrics` (vLLM's names; the emulator uses the same).

Histograms are cumulative, so a run's share is the difference of two scrapes: before the measured requests and
after them. Means come from `_sum / _count`; that is all a bucketed histogram says exactly.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from prometheus_client.parser import text_string_to_metric_families

HISTOGRAMS = {"ttft": "vllm:time_to_first_token_seconds", "itl": "vllm:inter_token_latency_seconds",
              "e2e": "vllm:e2e_request_latency_seconds"}


def histogram_totals(text: str) -> dict[str, tuple[float, float]]:
    """(sum, count) of each known histogram, added over its label sets (models, engines)."""
    out: dict[str, list[float]] = {}
    wanted = {v: k for k, v in HISTOGRAMS.items()}
    for family in text_string_to_metric_families(text):
        key = wanted.get(family.name)
        if key is None:
            continue
        acc = out.setdefault(key, [0.0, 0.0])
        for sample in family.samples:
            if sample.name.endswith("_sum"):
                acc[0] += sample.value
            elif sample.name.endswith("_count"):
                acc[1] += sample.value
    return {k: (v[0], v[1]) for k, v in out.items()}


def server_means(before: dict[str, tuple[float, float]], after: dict[str, tuple[float, float]]
                 ) -> dict[str, dict[str, float]]:
    """Per metric, the mean (ms) and count of what the engine observed between two scrapes."""
    out = {}
    for key, (s1, c1) in sorted(after.items()):
        s0, c0 = before.get(key, (0.0, 0.0))
        if c1 - c0 > 0:
            out[key] = {"mean_ms": round((s1 - s0) / (c1 - c0) * 1000.0, 3), "n": int(c1 - c0)}
    return out


@dataclass(frozen=True)
class Series:
    """One histogram's totals (or a counter's, with no buckets), added over its label sets."""

    sum: float
    count: float
    buckets: tuple[tuple[float, float], ...] = ()
    """(upper bound, cumulative count), increasing bounds, the last one +Inf."""


def snapshot(text: str, model: str | None = None) -> dict[str, Series]:
    """Every histogram and counter of a Prometheus text scrape by family name (`vllm:request_success` for
    `vllm:request_success_total`), added over label sets; with `model`, only the series of that `model_name` (or
    `model`, Dynamo's label: an engine serving several models, or a scrape of several engines)."""
    out: dict[str, Series] = {}
    for family in text_string_to_metric_families(text):
        if family.type not in ("histogram", "counter"):
            continue
        total, count = 0.0, 0.0
        buckets: dict[float, float] = {}
        for sample in family.samples:
            if model is not None and sample.labels.get("model_name", sample.labels.get("model", model)) != model:
                continue
            if sample.name.endswith("_bucket"):
                le = float(sample.labels["le"])
                buckets[le] = buckets.get(le, 0.0) + sample.value
            elif sample.name.endswith("_sum"):
                total += sample.value
            elif sample.name.endswith("_count") or (family.type == "counter" and sample.name.endswith("_total")):
                count += sample.value
        # A family met twice (the scrapes of several engines joined) adds up.
        out[family.name] = add(out.get(family.name, Series(0.0, 0.0)),
                               Series(total, count, tuple(sorted(buckets.items()))))
    return out


def add(a: Series, b: Series) -> Series:
    """Two series' totals as one: sums, counts and each bucket's count added."""
    buckets = dict(a.buckets)
    for le, c in b.buckets:
        buckets[le] = buckets.get(le, 0.0) + c
    return Series(a.sum + b.sum, a.count + b.count, tuple(sorted(buckets.items())))


def process_starts(text: str) -> tuple[float, ...]:
    """The start times of the processes a scrape reports (`process_start_time_seconds`, which Prometheus's
    Python client exports where the engine keeps its default registry, as vLLM does): two scrapes of one engine
    report the same; a restart, or a Service answering from another pod, does not."""
    return tuple(sorted(sample.value for family in text_string_to_metric_families(text)
                        if family.name == "process_start_time_seconds" for sample in family.samples))


def window(before: dict[str, Series], after: dict[str, Series]) -> dict[str, Series]:
    """What each series counted between two scrapes (a series absent before counts from zero)."""
    out = {}
    for name, s in after.items():
        b = before.get(name, Series(0.0, 0.0))
        earlier = dict(b.buckets)
        out[name] = Series(s.sum - b.sum, s.count - b.count,
                           tuple((le, c - earlier.get(le, 0.0)) for le, c in s.buckets))
    return out


FINE = 1.25
"""Widest bucket (upper bound over lower) a percentile is read from: inside a bucket the observations' order is
lost, and the linear interpolation `histogram_quantile` makes can be off by the bucket's width (vLLM's default
TTFT buckets run 0.1, 0.25, 0.5 s: a p99 read from them may be off by half)."""


def bucket_at(series: Series, q: float) -> tuple[float, float, float, float] | None:
    """The bucket that holds the q-quantile (0..1) of a histogram's window: its bounds (lower, upper] and the
    cumulative counts below and at its upper bound (upper +Inf past the last bucket); None for an empty one."""
    if series.count <= 0 or not series.buckets:
        return None
    rank = q * series.count
    lower, below = 0.0, 0.0
    for upper, cumulative in series.buckets:
        if cumulative >= rank and cumulative > below:
            return lower, upper, below, cumulative
        lower, below = upper, cumulative
    return lower, math.inf, below, series.count


def bucket_quantile(series: Series, q: float) -> float | None:
    """The q-quantile (0..1) of a histogram's window, interpolated linearly inside its bucket as Prometheus's
    `histogram_quantile` does; None where that bucket is wider than `FINE`, open-ended, or empty."""
    got = bucket_at(series, q)
    if got is None:
        return None
    lower, upper, below, cumulative = got
    if math.isinf(upper) or lower <= 0 or upper / lower > FINE:
        return None
    return lower + (upper - lower) * (q * series.count - below) / (cumulative - below)
