"""A deployment measured on its own traffic: Prometheus scrapes read as histograms, a window's difference, the
percentiles narrow buckets resolve, and the window written as a measurement calibrate reads."""

from __future__ import annotations

import datetime as dt
import json
import re
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest

from infra.bench.measurements import read_measurements
from infra.bench.observe import (
    DYNAMO,
    GENERATION,
    MIN_REQUESTS,
    PROMPT,
    TPOT,
    TTFT,
    observation,
    observation_lines,
    prefix_hit_between,
)
from infra.bench.promql import matrix, queries, read_windows, selector, total, window_series
from infra.bench.scrape import FINE, Series, bucket_quantile, snapshot, window
from infra.catalog.loader import load_catalog
from infra.errors import InfraError
from infra.workflow.observe import end_time, observe

FINE_BUCKETS = tuple(round(0.005 * 1.1 ** k, 7) for k in range(80))
"""Latency buckets 10% apart: narrow enough to read percentiles from."""


class Engine:
    """A registry exporting vLLM's request-level series, as an engine's /metrics does."""

    def __init__(self, buckets: tuple[float, ...] = FINE_BUCKETS, model: str = "m") -> None:
        reg = self.registry = CollectorRegistry()
        self.ttft = Histogram(TTFT, "", ["model_name"], registry=reg, buckets=buckets).labels(model)
        self.tpot = Histogram(TPOT, "", ["model_name"], registry=reg, buckets=buckets).labels(model)
        self.prompt = Histogram(PROMPT, "", ["model_name"], registry=reg,
                                buckets=(10, 20, 50, 100, 200, 500, 1000, 2000)).labels(model)
        self.answer = Histogram(GENERATION, "", ["model_name"], registry=reg,
                                buckets=(10, 20, 50, 100, 200, 500, 1000, 2000)).labels(model)
        self.success = Counter("vllm:request_success", "", ["model_name"], registry=reg).labels(model)
        self.cache_hits = Counter("vllm:prefix_cache_hits", "", ["model_name"], registry=reg).labels(model)
        self.cache_queries = Counter("vllm:prefix_cache_queries", "", ["model_name"], registry=reg).labels(model)

    def serve(self, n: int, ttft: float, tpot: float, prompt: int = 300, answer: int = 150) -> None:
        for i in range(n):
            # A spread of 0.5x .. 1.5x around each mean, in even steps.
            k = 0.5 + i / max(n - 1, 1)
            self.ttft.observe(ttft * k)
            self.tpot.observe(tpot * k)
            self.prompt.observe(prompt)
            self.answer.observe(answer)
            self.success.inc()

    def scrape(self, model: str | None = None) -> dict[str, Series]:
        return snapshot(generate_latest(self.registry).decode(), model)


def test_a_window_is_the_difference_of_two_scrapes_and_its_means_are_exact():
    engine = Engine()
    engine.serve(50, 9.0, 9.0)  # before the window: not the window's
    before = engine.scrape()
    engine.serve(200, 0.2, 0.03)
    obs = observation(before, engine.scrape(), 20.0, "http://e/metrics", "2026-12-06T00:00:00+00:00")
    assert obs.requests == 200 and obs.rate == pytest.approx(10.0)
    assert obs.ttft_ms == pytest.approx(200.0) and obs.tpot_ms == pytest.approx(30.0)
    assert obs.isl == pytest.approx(300) and obs.osl == pytest.approx(150)
    # Observations spread evenly over 0.5..1.5 of the mean: p90 at 1.4 of it, read within a 10% bucket.
    assert obs.percentiles["ttft_ms"]["p90"] == pytest.approx(280.0, rel=0.1)
    assert obs.percentiles["tpot_ms"]["p50"] == pytest.approx(30.0, rel=0.1)


def test_percentiles_are_read_only_from_narrow_buckets():
    wide = Series(3.0, 10.0, ((0.1, 0.0), (0.25, 10.0), (float("inf"), 10.0)))
    assert bucket_quantile(wide, 0.9) is None and 0.25 / 0.1 > FINE
    narrow = Series(2.1, 10.0, ((0.2, 0.0), (0.22, 10.0), (float("inf"), 10.0)))
    assert bucket_quantile(narrow, 0.5) == pytest.approx(0.21)
    open_ended = Series(9.0, 10.0, ((0.2, 0.0), (float("inf"), 10.0)))
    assert bucket_quantile(open_ended, 0.5) is None
    engine = Engine(buckets=(0.1, 0.25, 0.5, 1.0))
    before = engine.scrape()
    engine.serve(100, 0.2, 0.03)
    obs = observation(before, engine.scrape(), 10.0, "u", "d")
    assert obs.percentiles == {} and any("means only" in n for n in obs.notes)


def test_a_scrape_keeps_one_served_model_when_asked():
    a, b = Engine(model="a"), Engine(model="b")
    a.serve(40, 0.1, 0.01)
    b.serve(40, 0.3, 0.05)
    text = generate_latest(a.registry).decode() + generate_latest(b.registry).decode()
    both, only_b = snapshot(text), snapshot(text, "b")
    assert both[TTFT].count == 80 and only_b[TTFT].count == 40
    assert only_b[TTFT].sum == pytest.approx(40 * 0.3)
    assert window(only_b, both)[TTFT].count == 40


def test_a_window_without_a_measurement_is_a_clear_error():
    engine = Engine()
    before = engine.scrape()
    engine.serve(MIN_REQUESTS - 1, 0.2, 0.03)
    with pytest.raises(InfraError, match=f"{MIN_REQUESTS - 1} request.*finished in 5 s"):
        observation(before, engine.scrape(), 5.0, "u", "d")
    restarted = Engine()
    restarted.serve(10, 0.2, 0.03)
    with pytest.raises(InfraError, match="counters went down"):
        observation(engine.scrape(), restarted.scrape(), 5.0, "u", "d")
    # Series that disagree (no answer counted while 50 requests had a first token): no mean divides by zero.
    broken = {TTFT: Series(5.0, 50.0), TPOT: Series(1.0, 50.0), PROMPT: Series(500.0, 50.0), GENERATION: Series(0, 0)}
    with pytest.raises(InfraError, match="50 requests had a first token in the window but "
                                         "vllm:request_generation_tokens counted none"):
        observation({}, broken, 5.0, "u", "d")
    with pytest.raises(InfraError, match="no vllm:request_time_per_output_token_seconds.* among the metrics"):
        observation({}, {TTFT: Series(1.0, 50.0)}, 5.0, "u", "d")


def test_the_window_is_a_measurement_calibrate_reads(tmp_path: Path):
    engine = Engine()
    before = engine.scrape()
    engine.serve(300, 0.2, 0.03)
    obs = observation(before, engine.scrape(), 30.0, "http://e/metrics", "2026-12-06T00:00:00+00:00")
    deployment = {"model": "Llama-3.1-8B", "device": "H100-SXM", "framework": "vllm", "tp": 1}
    path = tmp_path / "observed.jsonl"
    path.write_text("".join(json.dumps(x) + "\n" for x in observation_lines([(obs, deployment)], obs, "chat")))
    src = read_measurements(path, None, load_catalog())
    assert src.format == "infra-observe" and not src.skipped
    [m] = src.points
    assert m.case.workload.rate == pytest.approx(10.0) and m.case.workload.isl == 300
    assert m.case.ttft_ms == pytest.approx(200.0) and m.case.samples == 300
    assert ("ttft", "p90", obs.percentiles["ttft_ms"]["p90"]) in m.case.tails
    assert m.date == "2026-12-06T00:00:00+00:00"
    assert obs.prefix_hit == 0.0 and "prefix_hit" not in json.loads(path.read_text().splitlines()[0])["case"]


def test_a_window_keeps_the_share_of_prompt_tokens_the_prefix_cache_held(tmp_path: Path):
    """vLLM counts the prompt tokens it looked up in its prefix cache and those it found: the window's share is
    the measured workload's prefix_hit, which calibrate's point carries (its prompts that much shorter to
    prefill), rather than a TTFT multiplier that would carry the cache to workloads without it."""
    engine = Engine()
    before = engine.scrape()
    engine.serve(100, 0.2, 0.03)
    engine.cache_queries.inc(100 * 300)
    engine.cache_hits.inc(100 * 120)
    obs = observation(before, engine.scrape(), 10.0, "http://e/metrics", "2026-12-06T00:00:00+00:00")
    assert obs.prefix_hit == pytest.approx(0.4) and any("prefix cache held 40.0%" in n for n in obs.notes)
    path = tmp_path / "observed.jsonl"
    deployment = {"model": "Llama-3.1-8B", "device": "H100-SXM", "framework": "vllm", "tp": 1}
    path.write_text("".join(json.dumps(x) + "\n" for x in observation_lines([(obs, deployment)], obs, "chat")))
    [m] = read_measurements(path, None, load_catalog()).points
    assert m.case.workload.prefix_hit == pytest.approx(0.4)


def test_a_benchmark_run_reads_the_prefix_cache_s_share_between_its_scrapes():
    """`infra bench --endpoint` scrapes the server's /metrics before and after its requests: the prefix cache's
    share of the prompt tokens between the two is what its case lines take the prompts to have found cached; a
    server that counts none, or looked none up, says nothing (None), never a share of 0 it did not measure."""
    engine = Engine()
    before = generate_latest(engine.registry).decode()
    assert prefix_hit_between(before, before) is None  # nothing looked up
    engine.cache_queries.inc(10_000)
    engine.cache_hits.inc(8_500)
    assert prefix_hit_between(before, generate_latest(engine.registry).decode()) == pytest.approx(0.85)
    bare = CollectorRegistry()
    Counter("vllm:request_success", "", registry=bare).inc()
    text = generate_latest(bare).decode()
    assert prefix_hit_between(text, text) is None


def _answer(*series: tuple[dict[str, str], list[tuple[float, str]]]) -> str:
    """A Prometheus API answer to a range query, as the server writes it."""
    return json.dumps({"status": "success", "data": {"resultType": "matrix", "result": [
        {"metric": labels, "values": [[t, v] for t, v in values]} for labels, values in series]}})


def test_prometheus_queries_carry_the_selector_and_the_served_model():
    assert selector(None, None) == "" and selector("  ", None) == ""
    assert selector('{namespace="llm"}', None) == '{namespace="llm"}'
    assert selector('namespace="llm",', 'a "b"\\c') == '{namespace="llm",model_name="a \\"b\\"\\\\c"}'
    asked = queries([TTFT], ["sglang:num_requests"], '{job="x"}', 600, TTFT)
    assert asked[f"{TTFT}:buckets"] == f'sum by (le) (increase({TTFT}_bucket{{job="x"}}[600s]))'
    assert asked[f"{TTFT}:sum"] == f'sum(increase({TTFT}_sum{{job="x"}}[600s]))'
    assert asked["sglang:num_requests:count"] == 'sum(increase(sglang:num_requests_total{job="x"}[600s]))'
    assert asked["instances"] == f'count(count by (instance) (increase({TTFT}_count{{job="x"}}[600s]) > 0))'


def test_prometheus_answers_become_each_window_s_series():
    """Each histogram's buckets, sum and count at each point of its range queries; extrapolated buckets that dip
    are raised to the count below them, as histogram_quantile does; a histogram no series matched is left out;
    consecutive windows add up to one."""
    t1, t2 = 1796558000.0, 1796558600.0
    answers = {TTFT: (_answer(({"le": "0.1"}, [(t1, "10.5"), (t2, "3")]), ({"le": "+Inf"}, [(t1, "40.2"), (t2, "5")]),
                              ({"le": "0.2"}, [(t1, "10.4"), (t2, "4")])),
                      _answer(({}, [(t1, "6.03"), (t2, "0.5")])), _answer(({}, [(t1, "40.2"), (t2, "5")]))),
               TPOT: (_answer(), _answer(), _answer())}
    asked = []

    def fetch(query: str) -> str:
        asked.append(query)
        if query.startswith("count("):
            return _answer(({}, [(t1, "2"), (t2, "1")]))
        name = TTFT if TTFT in query else TPOT
        return answers[name][0 if "by (le)" in query else 1 if "_sum" in query else 2]

    got = read_windows(fetch, [TTFT, TPOT], [], "", 600, TTFT)
    assert len(asked) == 7 and [(t, instances) for t, _, instances in got] == [(t1, 2), (t2, 1)]
    first, second = got[0][1], got[1][1]
    assert list(first) == [TTFT]
    assert first[TTFT] == Series(6.03, 40.2, ((0.1, 10.5), (0.2, 10.5), (float("inf"), 40.2)))
    assert second[TTFT] == Series(0.5, 5.0, ((0.1, 3.0), (0.2, 4.0), (float("inf"), 5.0)))
    assert total([first, second])[TTFT] == Series(6.53, 45.2, ((0.1, 13.5), (0.2, 14.5), (float("inf"), 45.2)))
    assert window_series({f"{TTFT}:{k}": [] for k in ("buckets", "sum", "count")}, [TTFT]) == {}
    # A counter's increase is its count.
    counted = window_series({"sglang:num_requests:count": [({}, 41.5)]}, [], ["sglang:num_requests"])
    assert counted == {"sglang:num_requests": Series(0.0, 41.5)}


@pytest.mark.parametrize("body, why", [
    ("<html>", "not JSON"),
    ("[1]", "not a Prometheus API response"),
    ('{"status": "error", "errorType": "bad_data", "error": "parse error at char 5"}',
     "bad_data: parse error at char 5"),
    ('{"status": "success", "data": {"resultType": "vector", "result": []}}', "not a range vector"),
    ('{"status": "success", "data": {"resultType": "matrix", "result": [{"metric": {}, "values": [[1]]}]}}',
     "not a (time, value) pair"),
    ('{"status": "success", "data": {"resultType": "matrix", "result": [{"values": []}]}}', "has no labels"),
])
def test_prometheus_answers_that_are_not_range_vectors_are_refused(body: str, why: str):
    with pytest.raises(ValueError, match=re.escape(why)):
        matrix(body)


def test_a_server_s_error_message_is_quoted_on_one_line_and_cut():
    huge = json.dumps({"status": "error", "errorType": "bad_data", "error": "no\nway " * 100_000})
    with pytest.raises(ValueError) as exc:
        matrix(huge)
    assert "\n" not in str(exc.value) and len(str(exc.value)) < 300 and "(700,009 characters)" in str(exc.value)


@pytest.mark.parametrize("args, why", [
    ((None, None), "observe reads one source"),
    (("http://127.0.0.1:1", "http://127.0.0.1:2"), "observe reads one source"),
])
def test_observe_reads_one_source(tmp_path: Path, args: tuple, why: str):
    url, prometheus = args
    with pytest.raises(InfraError, match=why):
        observe(url, 1.0, tmp_path / "o.jsonl", prometheus=prometheus, deployment={"model": "Llama-3.1-8B",
                                                                                   "device": "H100-SXM"})
    with pytest.raises(InfraError, match="--selector reads Prometheus series"):
        observe("http://127.0.0.1:1", 1.0, tmp_path / "o.jsonl", labels='job="x"')
    for seconds, step, why in ((float("inf"), None, "a window of inf s"), (60.0, float("nan"), "a step of nan s")):
        with pytest.raises(InfraError, match=why):
            observe(None, seconds, tmp_path / "o.jsonl", prometheus="http://127.0.0.1:9", step=step,
                    deployment={"model": "Llama-3.1-8B", "device": "H100-SXM"})
    with pytest.raises(InfraError, match="longer than observe waits"):
        observe("http://127.0.0.1:9", 1e12, tmp_path / "o.jsonl", deployment={"model": "Llama-3.1-8B",
                                                                                "device": "H100-SXM"})
    with pytest.raises(InfraError, match="is not an http"):
        observe(None, 1.0, tmp_path / "o.jsonl", prometheus="prometheus:9090",
                deployment={"model": "Llama-3.1-8B", "device": "H100-SXM"})
    assert not (tmp_path / "o.jsonl").exists()


def test_the_window_s_end_is_a_time_in_utc():
    assert end_time("2026-12-06T10:00:00Z") == dt.datetime(2026, 12, 6, 10, tzinfo=dt.timezone.utc)
    assert end_time("2026-12-06T10:00:00") == dt.datetime(2026, 12, 6, 10, tzinfo=dt.timezone.utc)
    assert end_time("1796558926") == dt.datetime.fromtimestamp(1796558926, dt.timezone.utc)
    with pytest.raises(InfraError, match="'noon' is not a time"):
        end_time("noon")


def test_an_sglang_engine_s_window_reads_its_counters_and_its_gaps():
    """SGLang counts prompt and answer tokens and requests in counters, and the gaps between tokens (not each
    request's TPOT) in its inter-token histogram: the means come from those, the lengths are taken as fixed, and
    no TPOT percentile is read from the gaps."""
    reg = CollectorRegistry()
    ttft = Histogram("sglang:time_to_first_token_seconds", "", ["model_name"], registry=reg,
                     buckets=FINE_BUCKETS).labels("m")
    gaps = Histogram("sglang:inter_token_latency_seconds", "", ["model_name"], registry=reg,
                     buckets=FINE_BUCKETS).labels("m")
    prompt = Counter("sglang:prompt_tokens", "", ["model_name"], registry=reg).labels("m")
    answer = Counter("sglang:generation_tokens", "", ["model_name"], registry=reg).labels("m")
    finished = Counter("sglang:num_requests", "", ["model_name"], registry=reg).labels("m")
    cached = Counter("sglang:cached_tokens", "", ["model_name"], registry=reg).labels("m")
    before = snapshot(generate_latest(reg).decode())
    for i in range(40):
        ttft.observe(0.2)
        tokens = 10 if i % 2 else 30  # a short and a long answer in turn, the long one's gaps slower
        for _ in range(tokens - 1):
            gaps.observe(0.01 if tokens == 10 else 0.03)
        prompt.inc(500)
        cached.inc(100)
        answer.inc(tokens)
        finished.inc()
    obs = observation(before, snapshot(generate_latest(reg).decode()), 10.0, "http://e/metrics", "2026-12-06")
    assert obs.requests == 40 and obs.isl == 500 and obs.osl == 20 and (obs.isl_cv, obs.osl_cv) == (0.0, 0.0)
    assert obs.ttft_ms == pytest.approx(200)
    # Over the gaps: (9 x 10 + 29 x 30) / 38 ms, where a mean over requests would be 20 ms.
    assert obs.tpot_ms == pytest.approx((9 * 10 + 29 * 30) / 38)
    assert "tpot_ms" not in obs.percentiles and "ttft_ms" in obs.percentiles
    assert any("mean gap between tokens" in note for note in obs.notes)
    assert any("no per-request token histograms" in note for note in obs.notes)
    assert obs.prefix_hit == pytest.approx(0.2)  # cached prompt tokens over prompt tokens


def test_a_dynamo_frontend_s_window_reads_what_its_clients_saw():
    """Dynamo's frontend keeps per-request histograms of TTFT and prompt, answer and cached tokens under a `model`
    label, and observes its inter-token histogram once per token: TPOT is the mean gap, the cache's share the
    cached tokens over the prompt tokens, and a served model is kept by its `model` label."""
    reg = CollectorRegistry()

    def hist(name: str, buckets: tuple[float, ...] = FINE_BUCKETS) -> Histogram:
        return Histogram(f"dynamo_frontend_{name}", "", ["model"], registry=reg, buckets=buckets)

    ttft, gaps = hist("time_to_first_token_seconds"), hist("inter_token_latency_seconds")
    tokens = (50, 100, 200, 500, 1000, 2000)
    prompt, answer, cached = hist("input_sequence_tokens", tokens), hist("output_sequence_tokens", tokens), hist(
        "cached_tokens", tokens)
    before = snapshot(generate_latest(reg).decode(), "m")
    for model, n in (("m", 40), ("other", 25)):
        for _ in range(n):
            ttft.labels(model).observe(0.3)
            for _ in range(99):
                gaps.labels(model).observe(0.02)
            prompt.labels(model).observe(800)
            cached.labels(model).observe(200)
            answer.labels(model).observe(100)
    obs = observation(before, snapshot(generate_latest(reg).decode(), "m"), 20.0, "http://f/metrics", "d")
    assert obs.requests == 40 and obs.isl == 800 and obs.osl == 100
    assert obs.ttft_ms == pytest.approx(300) and obs.tpot_ms == pytest.approx(20)
    assert obs.prefix_hit == pytest.approx(0.25) and "tpot_ms" not in obs.percentiles
    assert any("Dynamo's mean gap between tokens" in note for note in obs.notes)
    assert selector(None, "m", DYNAMO.latency.model_label) == '{model="m"}'
