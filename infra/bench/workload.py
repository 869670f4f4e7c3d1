"""Requests to send: arrival times and token lengths drawn from an intent's workload, seeded and reproducible.

Lengths follow the same reading of a distribution as the performance model (`length_stats`): a fixed length, a
lognormal with the given mean and spread (clipped to min/max), a histogram (uniform within a bar) or a trace
replayed in order (with its timestamps, when it has them, as arrival times). Prompts of one prefix group share
their first `prefix_sharing` share of tokens, so that an engine's prefix cache sees what the intent describes.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from infra.errors import IntentError, Location, Problem
from infra.intent.models import LengthDistribution, Workload
from infra.limits import read_jsonl
from infra.planner.candidates import length_stats

PREFIX_GROUPS = 8
"""Distinct shared prefixes in a run: enough to exercise a prefix cache without every request sharing one."""


@dataclass(frozen=True)
class RequestSpec:
    """One request to send."""

    index: int
    at: float | None
    """Arrival time in seconds from the start (open loop); None in a closed loop, where a client sends its next
    request when the last one returns."""
    input_tokens: int
    output_tokens: int
    prefix_group: int
    prefix_tokens: int
    """Leading input tokens shared with every other request of the same group."""


@dataclass(frozen=True)
class Load:
    """A run: the requests and how they are driven."""

    requests: list[RequestSpec]
    rate: float | None
    """Mean requests/s of an open loop."""
    concurrency: int | None
    """Clients of a closed loop."""
    arrival: str
    """poisson, gamma, constant, closed or trace."""


def _sample_lengths(dist: LengthDistribution | None, n: int, rng: np.random.Generator, base: Path,
                    field: str) -> np.ndarray:
    if dist is None:
        return np.ones(n, dtype=np.int64)
    if dist.trace is not None:
        values = [int(rec[field]) for _, rec in read_jsonl(base / dist.trace, "trace file")]
        return np.resize(np.asarray(values, dtype=np.int64), n)
    if dist.fixed is not None:
        return np.full(n, int(dist.fixed), dtype=np.int64)
    if dist.histogram is not None:
        bounds = np.array([0] + [b.le for b in dist.histogram], dtype=float)
        weights = np.array([b.weight for b in dist.histogram], dtype=float)
        bars = rng.choice(len(weights), size=n, p=weights / weights.sum())
        values = bounds[bars] + rng.random(n) * (bounds[bars + 1] - bounds[bars])
    else:
        mean, cv = length_stats(dist)
        if cv <= 0:
            values = np.full(n, mean)
        else:
            sigma = math.sqrt(math.log1p(cv * cv))
            values = rng.lognormal(math.log(mean) - sigma * sigma / 2, sigma, n)
    lo = dist.min or 1
    hi = dist.max or np.inf
    return np.clip(np.ceil(values), lo, hi).astype(np.int64)


def _arrivals(workload: Workload, rate: float, n: int, rng: np.random.Generator) -> np.ndarray:
    process = workload.arrival.process
    if process == "constant":
        gaps = np.full(n, 1.0 / rate)
    elif process == "gamma":
        cv = workload.arrival.cv or 1.0
        shape = 1.0 / (cv * cv)
        gaps = rng.gamma(shape, 1.0 / (rate * shape), n)
    else:
        gaps = rng.exponential(1.0 / rate, n)
    # The first request goes out at once; later ones follow the process.
    return np.concatenate(([0.0], np.cumsum(gaps[:-1])))


def _trace_times(workload: Workload, base: Path, n: int) -> np.ndarray | None:
    """Arrival times from a trace's `timestamp` field (seconds), when every record has one."""
    dist = workload.input_tokens
    if dist is None or dist.trace is None:
        return None
    records = [rec for _, rec in read_jsonl(base / dist.trace, "trace file")]
    if not records or any("timestamp" not in r for r in records):
        return None
    ts = np.asarray([float(r["timestamp"]) for r in records])
    ts = ts - ts.min()
    span = ts.max() + (ts.max() / max(len(ts) - 1, 1) if len(ts) > 1 else 1.0)
    laps = np.arange(n) // len(ts)
    return np.sort(np.resize(ts, n) + laps * span)


def generate(workload: Workload, *, requests: int, seed: int = 0, base: Path = Path("."),
             rate: float | None = None, concurrency: int | None = None,
             input_tokens: int | None = None, output_tokens: int | None = None) -> Load:
    """`requests` requests for `workload` (its peak rate or concurrency unless `rate`/`concurrency` is given;
    fixed lengths override its distributions)."""
    if requests < 1:
        raise IntentError(Problem(f"requests is {requests}; a run needs at least one request",
                                  Location(path="requests"), "give --requests 1 or more"))
    if seed < 0:
        # NumPy's generators take no negative seed; refusing it here keeps one seed meaning one run everywhere.
        raise IntentError(Problem(f"--seed is {seed}; seeds are whole numbers from 0", Location(path="--seed"),
                                  "give --seed 0 or more"))
    rng = np.random.default_rng(seed)
    isl = (np.full(requests, input_tokens, dtype=np.int64) if input_tokens
           else _sample_lengths(workload.input_tokens, requests, rng, base, "input_tokens"))
    osl = (np.full(requests, output_tokens, dtype=np.int64) if output_tokens
           else _sample_lengths(workload.output_tokens, requests, rng, base, "output_tokens"))
    if rate is None and concurrency is None:
        if workload.rate is not None and workload.rate.peak_rps:
            rate = workload.rate.peak_rps
        else:
            concurrency = workload.concurrency
    times: np.ndarray | None = None
    kind = "closed"
    if rate is not None:
        traced = _trace_times(workload, base, requests)
        times, kind = (traced, "trace") if traced is not None else (_arrivals(workload, rate, requests, rng),
                                                                      workload.arrival.process)
    share = float(workload.prefix_sharing)
    groups = rng.integers(0, PREFIX_GROUPS, requests)
    specs = [RequestSpec(i, None if times is None else float(times[i]), int(isl[i]), int(osl[i]), int(groups[i]),
                         int(share * isl[i])) for i in range(requests)]
    return Load(specs, rate, concurrency if rate is None else None, kind)
