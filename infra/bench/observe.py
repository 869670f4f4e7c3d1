"""What a deployed engine served over a window of its own traffic, read from its Prometheus `/metrics` (vLLM's
request-level histograms, which the emulator exports too, SGLang's or a Dynamo frontend's: `Exporter`): no load is
sent. Two scrapes, at the start and the end of the window, and their difference is the window's: the requests that
finished in it, their mean TTFT and TPOT (`_sum / _count`, exact), mean prompt and answer lengths, and the arrival
rate. Percentiles come from the buckets where these are narrow enough to say them (`scrape.FINE`); the engines'
default ones rarely are, and then a calibration made from the window corrects the means only.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from infra.bench.scrape import Series, bucket_quantile, snapshot, window
from infra.catalog import metrics
from infra.errors import InfraError, Location, Problem
from infra.perf.serving import PERCENTILES

TTFT = metrics.VLLM.ttft
TPOT = metrics.VLLM.tpot
"""A finished request's decode time per output token after its first (vLLM V1; the emulator alike)."""
PROMPT = "vllm:request_prompt_tokens"
GENERATION = "vllm:request_generation_tokens"


@dataclass(frozen=True)
class Exporter:
    """Which series an engine counts its finished requests in (family names: a counter's without `_total`)."""

    engine: str
    latency: metrics.LatencyHistograms
    """Its latency histograms (`infra.catalog.metrics`): TTFT, TPOT (each request's, or each gap's), ITL, E2E."""
    prompt: str
    """Prompt tokens: a histogram of each request's, or a counter of them all (with `requests`)."""
    generation: str
    requests: str | None = None
    """Counter of finished requests, where the token counts are counters."""
    lengths: tuple[str, str] | None = None
    """Histograms of each request's prompt and answer tokens, where the engine exports them besides the counters."""
    cache: tuple[str, str] | None = None
    """The prompt tokens found in the prefix cache and those looked up, where the engine counts them: counters, or
    (`cache_histograms`) histograms of each request's, whose sums are the tokens."""
    cache_histograms: bool = False
    whole_requests: bool = False
    """Whether it sees whole requests where prefill and decode run apart (a frontend does; an engine serves part)."""

    @property
    def needed(self) -> tuple[str, ...]:
        return ((self.latency.ttft, self.latency.tpot, self.prompt, self.generation)
                + ((self.requests,) if self.requests else ()))

    @property
    def histograms(self) -> tuple[str, ...]:
        named = (self.latency.ttft, self.latency.tpot) + ((self.prompt, self.generation) if self.requests is None
                                                          else self.lengths or ())
        return tuple(dict.fromkeys(named + (self.cache or () if self.cache_histograms else ())
                                   + tuple(self.latency.by_metric().values())))

    @property
    def counters(self) -> tuple[str, ...]:
        named = (self.prompt, self.generation, self.requests) if self.requests else ()
        return tuple(dict.fromkeys(named + (self.cache or () if not self.cache_histograms else ())))


VLLM = Exporter("vLLM", metrics.VLLM, PROMPT, GENERATION,
                cache=("vllm:prefix_cache_hits", "vllm:prefix_cache_queries"))
"""vLLM V1: per-request histograms (and one of every gap between tokens), and the prefix cache's hit and query
counters (in tokens)."""
SGLANG = Exporter("SGLang", metrics.SGLANG, "sglang:prompt_tokens", "sglang:generation_tokens", "sglang:num_requests",
                  ("sglang:prompt_tokens_histogram", "sglang:generation_tokens_histogram"),
                  cache=("sglang:cached_tokens", "sglang:prompt_tokens"))
"""SGLang (`--enable-metrics`): its inter-token histogram adds each streamed chunk's interval to `_sum` and its
tokens to the buckets, so `_sum / _count` is the mean gap over the window's tokens, not over its requests; the
per-request token histograms come with `--collect-tokens-histogram`. Source: sgl-project/sglang
python/sglang/srt/metrics/collector.py (TokenizerMetricsCollector)."""
DYNAMO = Exporter("Dynamo", metrics.DYNAMO, "dynamo_frontend_input_sequence_tokens",
                  "dynamo_frontend_output_sequence_tokens",
                  cache=("dynamo_frontend_cached_tokens", "dynamo_frontend_input_sequence_tokens"),
                  cache_histograms=True, whole_requests=True)
"""NVIDIA Dynamo's HTTP frontend (what its clients see, a disaggregated deployment's prefill and hand-off included):
per-request histograms of TTFT, prompt, answer and cached tokens, and an inter-token histogram observed once per
token at each chunk's gap. Source: ai-dynamo/dynamo lib/llm/src/http/service/metrics.rs (ResponseMetricCollector)."""
EXPORTERS = (VLLM, SGLANG, DYNAMO)
NEEDED = VLLM.needed
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
    prefix_hit: float = 0.0
    """Share of the prompt tokens the prefix cache held (0 where the engine keeps no count of it)."""
    latency: dict[str, Series] = field(default_factory=dict)
    """The window's histogram of each metric an objective is judged on, in seconds (`infra.catalog.metrics`:
    `LatencyHistograms.by_metric`)."""
    engine: str = ""
    """The engine whose series these are (`Exporter.engine`)."""


def cache_hit(e: Exporter, got: dict[str, Series]) -> float | None:
    """Share of the prompt tokens the engine's prefix cache held over a window (`scrape.window`), where it counts
    them and looked some up; None where it does not."""
    if not e.cache or any(name not in got for name in e.cache):
        return None
    hits, looked = (getattr(got[name], "sum" if e.cache_histograms else "count") for name in e.cache)
    return round(min(max(hits / looked, 0.0), 1.0), 4) if looked > 0 else None


def prefix_hit_between(before: str, after: str) -> float | None:
    """Share of the prompt tokens an engine's prefix cache held between two scrapes of its /metrics (Prometheus
    text), as the first exporter of `EXPORTERS` that counts them says; None where none does."""
    got = window(snapshot(before), snapshot(after))
    return next((hit for e in EXPORTERS if (hit := cache_hit(e, got)) is not None), None)


def metrics_url(url: str) -> str:
    """The /metrics beside an engine's OpenAI API (`http://host:8000/v1` -> `http://host:8000/metrics`)."""
    base = url.rstrip("/")
    if base.endswith(metrics.METRICS_PATH):
        return base
    return base.removesuffix("/v1") + metrics.METRICS_PATH


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


def exporter(names: Iterable[str]) -> Exporter | None:
    """The engine whose request series are all among `names`."""
    have = set(names)
    return next((e for e in EXPORTERS if all(n in have for n in e.needed)), None)


def observation(before: dict[str, Series], after: dict[str, Series], seconds: float, source: str,
                date: str) -> Observation:
    """The window between two scrapes (`scrape.snapshot`), or a clear error where it cannot be read."""
    where = Location(source)
    e = exporter(after)
    if e is None:
        missing = [name for name in NEEDED if name not in after]
        raise InfraError(Problem(f"no {', '.join(missing)} among the metrics, nor SGLang's or Dynamo's request "
                                 "metrics", where, "point at the /metrics of a vLLM engine that exports its "
                                 "request-level histograms (V1), of an SGLang engine run with --enable-metrics, of a "
                                 "Dynamo frontend, or of `infra emulate`"))
    got = window(before, after)
    # Whole numbers from two scrapes; Prometheus's increase() extrapolates them (`promql`), so the means divide by
    # the counts as they are and only the request count is rounded.
    n = round(got[e.latency.ttft].count)
    if any(s.count < 0 or s.sum < 0 for s in got.values()):
        raise InfraError(Problem("the counters went down during the window (the engine restarted)",
                                 where, "observe a window in which the engine keeps running"))
    if n < MIN_REQUESTS:
        raise InfraError(Problem(f"{n} request(s) finished in {seconds:g} s; a window needs "
                                 f"{MIN_REQUESTS} or more", where,
                                 "observe a longer window (--duration) or a busier deployment"))
    finished = got[e.requests].count if e.requests else got[e.prompt].count
    # Every count a mean divides by: a window's series can disagree (a broken exporter, series of other engines).
    counts = {e.latency.tpot: got[e.latency.tpot].count, e.requests or e.prompt: finished}
    if e.requests is None:
        counts[e.generation] = got[e.generation].count
    empty = [name for name, count in counts.items() if count <= 0]
    if empty:
        raise InfraError(Problem(f"{n} requests had a first token in the window but {', '.join(empty)} counted "
                                 "none", where, "observe metrics of one deployment's engines (--selector, "
                                 "--model-name)"))
    pcts: dict[str, dict[str, float]] = {}
    # A per-gap histogram's percentiles are the gaps', not the requests' TPOT an objective is written on.
    per_request = (("ttft_ms", e.latency.ttft),) + ((("tpot_ms", e.latency.tpot),) if not e.latency.per_gap else ())
    for key, name in per_request:
        found = {p: round(1000 * v, 4) for p in PERCENTILES
                 if (v := bucket_quantile(got[name], float(p[1:]) / 100)) is not None}
        if found:
            pcts[key] = found
    notes = ["arrivals are taken as Poisson (the metrics do not say how requests were spaced)"]
    if e.requests is None:
        isl, osl = got[e.prompt].sum / got[e.prompt].count, got[e.generation].sum / got[e.generation].count
        lengths: tuple[str, str] | None = (e.prompt, e.generation)
    else:
        isl, osl = got[e.prompt].count / finished, got[e.generation].count / finished
        lengths = e.lengths if e.lengths and all(got.get(h, Series(0, 0)).count > 0 for h in e.lengths) else None
    if lengths:
        notes.append("length CVs are read from the token histograms' buckets (each at its bucket's middle)")
        cvs = (_bucket_cv(got[lengths[0]]), _bucket_cv(got[lengths[1]]))
    else:
        notes.append(f"{e.engine} exported no per-request token histograms (--collect-tokens-histogram): the "
                     "lengths are taken as fixed at their means")
        cvs = (0.0, 0.0)
    if e.latency.per_gap:
        notes.append(f"TPOT is {e.engine}'s mean gap between tokens over the window's tokens, which weighs long "
                     "answers more than a mean over requests")
    if not pcts:
        notes.append("the latency buckets are too wide to read percentiles from (wider than "
                     "x1.25): a calibration from this window corrects the means only")
    hit = cache_hit(e, got) or 0.0
    if hit > 0:
        assert e.cache is not None
        notes.append(f"the prefix cache held {hit:.1%} of the prompt tokens ({e.cache[0]} over {e.cache[1]}): "
                     "the point's prompts are that much shorter to prefill")
    ttft, tpot = got[e.latency.ttft], got[e.latency.tpot]
    return Observation(source, date, seconds, n, ttft.count / seconds, isl, osl, *cvs, 1000 * ttft.sum / ttft.count,
                       1000 * tpot.sum / tpot.count, pcts, tuple(notes), hit,
                       {m: got[name] for m, name in e.latency.by_metric().items() if name in got}, e.engine)


def observation_lines(windows: Sequence[tuple[Observation, dict[str, Any]]], whole: Observation,
                      service: str | None) -> list[dict[str, Any]]:
    """Windows as an `infra bench --save` file holds a run (`infra calibrate` reads it): a `case` line for each
    (the deployment that served it, the workload it served and what it measured, one load point), and a closing
    `summary` line of them all (`whole`)."""
    lines = []
    for obs, deployment in windows:
        case = {**deployment, "isl": max(1, round(obs.isl)), "osl": max(1, round(obs.osl)), "isl_cv": obs.isl_cv,
                "osl_cv": obs.osl_cv, "rate": round(obs.rate, 6), "arrival_cv": 1.0,
                **({"prefix_hit": obs.prefix_hit} if obs.prefix_hit > 0 else {})}
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


__all__ = ["DYNAMO", "EXPORTERS", "MIN_REQUESTS", "NEEDED", "SGLANG", "TTFT", "VLLM", "Exporter", "Observation",
           "exporter", "metrics_url", "observation", "observation_lines"]
