"""A window of a deployment's traffic read from the Prometheus server that scrapes its engines, instead of from one
engine's `/metrics`: a window that has already passed (the last hour, yesterday's peak), every replica's series
added together (one engine's `/metrics` behind a Service is whichever pod answers), and an engine restart inside
the window counted right (`increase()` treats a counter that drops as a reset, where two scrapes of an engine
would see the counters go down).

Each histogram an engine counts its requests in (`observe.Exporter`) is asked for as PromQL range queries whose
points are the windows' ends: `sum by (le) (increase(H_bucket{SEL}[Ns]))`, `sum(increase(H_sum{SEL}[Ns]))` and
`sum(increase(H_count{SEL}[Ns]))`, and each counter as `sum(increase(C_total{SEL}[Ns]))`, which make the
`scrape.Series` of the window that two scrapes would; and the instances whose engines finished a request in it.
`increase()` extrapolates each series to the window's edges, so its counts are not whole numbers; the means are
ratios of such increases and stay exact where the window holds whole scrapes of steady traffic.
A window split into consecutive ones of `seconds` (a day in windows of 15 minutes, say) is the same queries over
more points, one load point each. Source: the Prometheus HTTP API (`GET /api/v1/query_range?query=...&start=...
&end=...&step=...`, a JSON envelope with `status`, `data` `{"resultType": "matrix", "result": [{"metric": {...},
"values": [[t, "v"], ...]}]}`, or `errorType` and `error`).
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Sequence
from typing import Any

from infra.bench.scrape import Series, add

INSTANCES = "instances"
"""The query key of the count of instances that finished a request in the window."""


def escape(value: str) -> str:
    """A PromQL string literal's contents: backslashes and double quotes escaped, newlines spelled out."""
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def selector(labels: str | None, model: str | None, model_label: str = "model_name") -> str:
    """The label matchers every query carries (`{namespace="llm",model_name="m"}`): the user's, with or without
    their braces, and the served model's (by `model_label`) where one is kept; "" for none."""
    inner = (labels or "").strip()
    if inner.startswith("{") and inner.endswith("}"):
        inner = inner[1:-1].strip()
    parts = [inner.rstrip(",")] if inner else []
    if model is not None:
        parts.append(f'{model_label}="{escape(model)}"')
    return "{" + ",".join(parts) + "}" if parts else ""


def queries(histograms: Sequence[str], counters: Sequence[str], sel: str, seconds: int, instances_of: str
            ) -> dict[str, str]:
    """The queries of windows of `seconds` ending at each point, by key (`name:buckets`, `name:sum` and
    `name:count` of a histogram, `name:count` of a counter, and `INSTANCES`: the instances whose `instances_of`
    histogram counted a request)."""
    span = f"[{seconds}s]"
    out = {}
    for name in histograms:
        out[f"{name}:buckets"] = f"sum by (le) (increase({name}_bucket{sel}{span}))"
        out[f"{name}:sum"] = f"sum(increase({name}_sum{sel}{span}))"
        out[f"{name}:count"] = f"sum(increase({name}_count{sel}{span}))"
    for name in counters:
        out[f"{name}:count"] = f"sum(increase({name}_total{sel}{span}))"
    out[INSTANCES] = f"count(count by (instance) (increase({instances_of}_count{sel}{span}) > 0))"
    return out


def _envelope(body: str) -> tuple[str, list]:
    """The result type and results of a query's answer; ValueError, with Prometheus's own words where it gives
    them, for an error or an answer that is not Prometheus's."""
    try:
        doc = json.loads(body)
    except (ValueError, RecursionError):
        raise ValueError("the answer is not JSON (is this a Prometheus server's address?)") from None
    if not isinstance(doc, dict):
        raise ValueError("the answer is not a Prometheus API response")
    if doc.get("status") != "success":
        raise ValueError(_reason(f"{doc.get('errorType') or 'error'}: {doc.get('error') or 'no reason given'}"))
    data = doc.get("data")
    if not isinstance(data, dict) or not isinstance(data.get("result"), list):
        raise ValueError("the answer holds no result")
    return str(data.get("resultType")), data["result"]


REASON_CHARS = 200
"""Most of a server's own error message quoted back: a PromQL parse error fits, a hostile megabyte does not."""


def _reason(text: str) -> str:
    """A server's message on one line, cut after `REASON_CHARS` with its length said."""
    flat = " ".join(text.split())
    return flat if len(flat) <= REASON_CHARS else f"{flat[:REASON_CHARS]}… ({len(flat):,} characters)"


def _labels(item: Any) -> dict[str, str]:
    labels = item.get("metric") if isinstance(item, dict) else None
    if not isinstance(labels, dict):
        raise ValueError("a series of the answer has no labels")
    return {str(k): str(v) for k, v in labels.items()}


def matrix(body: str) -> dict[float, list[tuple[dict[str, str], float]]]:
    """A range query's answer as the instant vectors at each of its times (ValueError where it is not a range
    vector)."""
    kind, result = _envelope(body)
    if kind != "matrix":
        raise ValueError("the answer is not a range vector")
    out: dict[float, list[tuple[dict[str, str], float]]] = {}
    for item in result:
        labels = _labels(item)
        try:
            points = [(float(t), float(v)) for t, v in item["values"]]
        except (KeyError, TypeError, ValueError):
            raise ValueError("a sample of the answer is not a (time, value) pair") from None
        for t, v in points:
            out.setdefault(t, []).append((labels, v))
    return out


def _finite(samples: list[tuple[dict[str, str], float]]) -> float | None:
    """The one value of an aggregated query (None where no series matched, or it is not a number)."""
    values = [v for _, v in samples if math.isfinite(v)]
    return values[0] if values else None


def window_series(answers: dict[str, list[tuple[dict[str, str], float]]], histograms: Sequence[str],
                  counters: Sequence[str] = ()) -> dict[str, Series]:
    """The window's `Series` of each histogram and counter the answers hold (those no series matched are left
    out). The buckets' increases are extrapolated series by series, so a cumulative count can dip below the one
    before it; it is raised to it, as `histogram_quantile` does."""
    out = {}
    for name in counters:
        count = _finite(answers[f"{name}:count"])
        if count is not None:
            out[name] = Series(0.0, count)
    for name in histograms:
        total, count = _finite(answers[f"{name}:sum"]), _finite(answers[f"{name}:count"])
        if total is None or count is None:
            continue
        buckets = sorted((float(labels["le"]), value) for labels, value in answers[f"{name}:buckets"]
                         if "le" in labels and math.isfinite(value))
        running, monotone = 0.0, []
        for le, cumulative in buckets:
            running = max(running, cumulative)
            monotone.append((le, running))
        out[name] = Series(total, count, tuple(monotone))
    return out


def read_windows(fetch: Callable[[str], str], histograms: Sequence[str], counters: Sequence[str], sel: str,
                 seconds: int, instances_of: str) -> list[tuple[float, dict[str, Series], int]]:
    """Each window's time (its end, Unix seconds), histograms and counters, and the instances that served in it,
    oldest first: `fetch(query)` answers a range query whose points are the windows' ends, `seconds` apart (one
    point, one window); ValueError, as `matrix`, where an answer is not one."""
    asked = queries(histograms, counters, sel, seconds, instances_of)
    answers = {key: matrix(fetch(query)) for key, query in asked.items()}
    times = sorted(set().union(*(a.keys() for key, a in answers.items() if key != INSTANCES)))
    out = []
    for t in times:
        at = {key: a.get(t, []) for key, a in answers.items()}
        instances = _finite(at.pop(INSTANCES))
        out.append((t, window_series(at, histograms, counters), int(instances or 0)))
    return out


def total(windows: Sequence[dict[str, Series]]) -> dict[str, Series]:
    """Consecutive windows' histograms as one window's."""
    out: dict[str, Series] = {}
    for got in windows:
        for name, s in got.items():
            out[name] = add(out.get(name, Series(0.0, 0.0)), s)
    return out


__all__ = ["escape", "matrix", "queries", "read_windows", "selector", "total", "window_series"]
