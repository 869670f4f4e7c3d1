"""Benchmark result readers: each tool's own file read to load points of one meaning, and nothing dropped unsaid."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import yaml

from infra.bench import results
from infra.bench.results import FORMATS, ResultFile, detect, read_results
from infra.errors import InfraError

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "results"


def fixture(name: str) -> Path:
    return FIXTURES / name


def only_point(name: str):
    result = read_results(fixture(name))
    assert isinstance(result, ResultFile) and result.bad == () and len(result.points) == 1
    return result.points[0]


def read_error(path: Path, format: str | None = None) -> str:
    """The one-line error a file gets, checked to name the file."""
    with pytest.raises(InfraError) as caught:
        read_results(path, format)
    text = str(caught.value)
    assert len(caught.value.problems) == 1 and "\n" not in text and str(path) in text
    return text


def write_json(path: Path, doc) -> Path:
    path.write_text(json.dumps(doc))
    return path


# --- each format, read with exact expectations ----------------------------------------------------------------


def test_vllm_bench_serve_result():
    p = only_point("vllm-bench.json")
    assert (p.format, p.source) == ("vllm-bench", str(fixture("vllm-bench.json")))
    assert (p.ttft_ms, p.tpot_ms, p.isl, p.osl) == (95.37, 11.82, 1024.0, 128.0)
    assert (p.concurrency, p.rate, p.requests) == (4, None, 10)
    assert (p.date, p.model, p.framework) == ("2025-06-11T14:22:33", "Qwen/Qwen2.5-7B-Instruct", "vllm")
    assert (p.isl_cv, p.osl_cv) == (0.0, 0.0)


def test_vllm_per_request_lengths_count_only_completed_requests():
    p = only_point("vllm-benchmark-serving.json")
    # Four requests completed (inputs 1000, 1200, 800, 1000); the failed one (900 in, 0 out) must not count.
    assert (p.isl, p.osl, p.requests) == (1000.0, 10.0, 4)
    assert p.isl_cv == pytest.approx(math.sqrt(20000) / 1000)
    assert p.osl_cv == pytest.approx(math.sqrt(2) / 10)
    assert (p.ttft_ms, p.tpot_ms) == (105.75, pytest.approx(13.7972))
    assert (p.concurrency, p.rate, p.date) == (None, 4.0, "2025-03-14T09:30:05")
    assert p.framework is None  # "openai-chat" names the protocol, not the engine
    assert any("per-request" in note for note in p.notes)


def test_vllm_appended_results_keep_the_good_run_and_report_the_others():
    path = fixture("vllm-bench-appended.json")
    result = read_results(path)
    (p,) = result.points
    assert (p.source, p.rate, p.concurrency, p.requests) == (f"{path}:1", 2.0, None, 200)
    assert (p.ttft_ms, p.tpot_ms, p.isl, p.osl) == (61.5, 10.25, 512.0, 256.0)
    assert any("at most 16 in flight" in note for note in p.notes)
    (where2, why2), (where3, why3) = result.bad
    assert (where2, why2) == (f"{path}:2", "completed is 0; no completed requests")
    assert where3 == f"{path}:3" and why3.startswith("line is not JSON")


def test_sglang_bench_serving_json_lines():
    path = fixture("sglang-bench.jsonl")
    result = read_results(path)
    assert result.format == "sglang-bench" and result.bad == ()
    assert [p.source for p in result.points] == [f"{path}:1", f"{path}:2", f"{path}:3"]
    assert [p.ttft_ms for p in result.points] == [48.75, 63.25, 221.5]
    assert [p.tpot_ms for p in result.points] == [7.5, 8.25, 11.0]
    # request_rate Infinity with max_concurrency 16 is a closed loop of 16.
    assert [(p.rate, p.concurrency) for p in result.points] == [(1.0, None), (4.0, None), (None, 16)]
    for p in result.points:
        assert (p.isl, p.osl, p.requests, p.date) == (768.0, 192.0, 200, None)
        assert (p.model, p.framework) == ("meta-llama/Llama-3.1-8B-Instruct", "sglang")


def test_sglang_partly_bad_file():
    path = fixture("sglang-bench-partial.jsonl")
    result = read_results(path)
    (p,) = result.points
    assert (p.source, p.ttft_ms, p.tpot_ms, p.rate, p.requests) == (f"{path}:1", 44.575, 7.6, 8.0, 4)
    assert (p.isl, p.osl) == (512.0, 128.0)
    assert p.isl_cv == pytest.approx(math.sqrt(8192) / 512) and p.osl_cv == pytest.approx(math.sqrt(512) / 128)
    assert [where for where, _ in result.bad] == [f"{path}:2", f"{path}:3"]
    assert result.bad[0][1].startswith("line is not JSON")
    assert result.bad[1][1] == "completed is 0; no completed requests"


def test_genai_perf_export_with_the_flat_argument_config():
    p = only_point("profile_export_genai_perf.json")
    assert (p.format, p.ttft_ms, p.tpot_ms, p.isl, p.osl) == ("genai-perf", 45.21, 9.87, 550.0, 200.5)
    assert (p.isl_cv, p.osl_cv) == (0.0, pytest.approx(10.2 / 200.5))
    assert (p.concurrency, p.rate, p.requests) == (8, None, 100)
    assert any("configured request count" in note for note in p.notes)
    assert (p.model, p.date) == ("meta-llama/Meta-Llama-3-8B-Instruct", None)
    # The backend field defaults to tensorrtllm even for the openai service kind: it must not name the engine.
    assert p.framework is None


def test_genai_perf_export_with_the_nested_config():
    p = only_point("genai-perf-triton.json")
    assert (p.ttft_ms, p.tpot_ms, p.isl, p.osl) == (72.4, 10.26, 2048.0, 128.0)
    assert (p.concurrency, p.rate) == (None, 10.0)
    assert (p.model, p.framework) == ("ensemble", "trtllm")
    assert p.requests == 1 and any("counted as 1" in note for note in p.notes)


def test_aiperf_export():
    p = only_point("profile_export_aiperf.json")
    assert (p.format, p.ttft_ms, p.tpot_ms, p.isl, p.osl) == ("aiperf", 38.66, 3.17, 512.0, 126.25)
    assert (p.isl_cv, p.osl_cv) == (0.0, pytest.approx(4.9 / 126.25))
    assert (p.concurrency, p.rate, p.requests) == (16, None, 640)
    assert (p.date, p.model, p.framework) == ("2025-10-07T05:00:07", "Qwen/Qwen3-0.6B", None)


def test_guidellm_v02_report_one_point_per_benchmark():
    path = fixture("guidellm-benchmarks.json")
    result = read_results(path)
    assert result.format == "guidellm" and result.bad == ()
    assert [p.source for p in result.points] == [f"{path}#benchmarks[{i}]" for i in range(3)]
    # synchronous, throughput (no limit: everything at once), constant at 3.5 req/s
    assert [(p.concurrency, p.rate) for p in result.points] == [(1, None), (None, None), (None, 3.5)]
    assert [p.requests for p in result.points] == [28, 512, 105]
    assert [p.ttft_ms for p in result.points] == pytest.approx([33.29678571428571, 1662.58546875, 44.855809523809526])
    assert [p.tpot_ms for p in result.points] == pytest.approx([7.11975, 19.78153125, 8.361933333333335])
    for p in result.points:
        assert (p.isl, p.osl) == (pytest.approx(256.0), pytest.approx(128.0))
        assert (p.model, p.framework) == ("meta-llama/Llama-3.1-8B-Instruct", None)
    assert result.points[0].date == "2025-06-11T13:00:00"


def test_guidellm_later_report_written_as_yaml():
    result = read_results(fixture("guidellm-benchmarks.yaml"))
    assert result.format == "guidellm" and result.bad == ()
    first, second = result.points
    assert [(p.concurrency, p.rate, p.requests) for p in result.points] == [(4, None, 109), (16, None, 421)]
    assert (first.ttft_ms, second.ttft_ms) == pytest.approx((39.152660550458705, 71.1450593824228))
    assert (first.tpot_ms, second.tpot_ms) == pytest.approx((9.37781013477089, 12.26975973110499))
    assert (first.isl, first.osl) == pytest.approx((513.1467889908257, 256.2752293577982))
    assert first.isl_cv == pytest.approx(37.359357224907214 / 513.1467889908257)
    assert first.osl_cv == pytest.approx(38.4836129928583 / 256.2752293577982)
    assert (first.model, first.framework, first.date) == ("Qwen/Qwen2.5-7B-Instruct", "vllm", "2025-11-20T00:00:00")


def test_guidellm_benchmark_without_successful_requests_is_reported():
    path = fixture("guidellm-partial.json")
    result = read_results(path)
    (p,) = result.points
    assert (p.source, p.concurrency, p.requests) == (f"{path}#benchmarks[0]", 16, 64)
    assert (p.ttft_ms, p.tpot_ms) == pytest.approx((122.78, 14.148984375))
    assert result.bad == ((f"{path}#benchmarks[1]", "request_totals.successful is 0; no successful requests"),)


# --- detection --------------------------------------------------------------------------------------------------


def parsed(path: Path):
    text = path.read_text(encoding="utf-8")
    if path.suffix == ".yaml":
        return yaml.safe_load(text)
    if path.suffix == ".jsonl" or "appended" in path.name:
        out = []
        for line in text.splitlines():
            try:
                out.append(json.loads(line))
            except ValueError:
                continue
        return out
    return json.loads(text)


@pytest.mark.parametrize("name, expected", [
    ("vllm-bench.json", "vllm-bench"),
    ("vllm-benchmark-serving.json", "vllm-bench"),
    ("vllm-bench-appended.json", "vllm-bench"),
    ("vllm-bench-no-ttft.json", "vllm-bench"),
    ("sglang-bench.jsonl", "sglang-bench"),
    ("sglang-bench-partial.jsonl", "sglang-bench"),
    ("profile_export_genai_perf.json", "genai-perf"),
    ("genai-perf-triton.json", "genai-perf"),
    ("genai-perf-no-itl.json", "genai-perf"),
    ("profile_export_aiperf.json", "aiperf"),
    ("aiperf-all-failed.json", "aiperf"),
    ("guidellm-benchmarks.json", "guidellm"),
    ("guidellm-benchmarks.yaml", "guidellm"),
    ("guidellm-partial.json", "guidellm"),
])
def test_every_fixture_is_detected_as_its_format(name, expected):
    assert detect(fixture(name), parsed(fixture(name))) == expected


def test_files_of_no_known_tool_are_not_detected(tmp_path):
    assert detect(tmp_path / "x.json", {"model": "m", "ttft": 12.0}) is None
    assert detect(tmp_path / "x.json", []) is None
    assert detect(tmp_path / "x.json", [1, "two"]) is None
    assert detect(tmp_path / "x.json", 42) is None


def test_formats_are_the_documented_names():
    assert FORMATS == ("vllm-bench", "sglang-bench", "genai-perf", "aiperf", "guidellm")


# --- errors: one line, naming the file and the format -----------------------------------------------------------


def test_missing_file(tmp_path):
    assert "benchmark result file not found" in read_error(tmp_path / "nope.json")
    assert "aiperf result file not found" in read_error(tmp_path / "nope.json", "aiperf")


def test_unknown_format_lists_the_formats_known(tmp_path):
    text = read_error(write_json(tmp_path / "locust.json", {"model": "m", "ttft": 12.0}))
    assert "not a result file of a known benchmark" in text
    assert all(name in text for name in FORMATS)


def test_unknown_format_name(tmp_path):
    text = read_error(fixture("vllm-bench.json"), "locust")
    assert "unknown benchmark result format 'locust'" in text and "guidellm" in text


def test_files_over_the_size_bound_are_refused_unread(tmp_path):
    big = tmp_path / "big.json"
    with big.open("wb") as fh:
        fh.truncate(results.MAX_BYTES + 1)  # sparse: nothing is written, nothing may be read
    assert "over 256 MiB" in read_error(big, "vllm-bench")


def test_bytes_that_are_not_utf8(tmp_path):
    path = tmp_path / "r.json"
    path.write_bytes(b'{"backend": "vllm",\n "model_id": "\xff\xfe"}')
    text = read_error(path, "vllm-bench")
    assert "vllm-bench result file is not UTF-8" in text and f"{path}:2" in text


def test_text_that_is_not_json(tmp_path):
    path = tmp_path / "r.json"
    path.write_text("Successful requests: 100\nMean TTFT (ms): 12.3\n")
    assert "benchmark result file is not JSON or JSON Lines" in read_error(path)
    path.write_text("  \n")
    assert "sglang-bench result file is empty" in read_error(path, "sglang-bench")


def test_yaml_that_is_not_yaml(tmp_path):
    path = tmp_path / "benchmarks.yaml"
    path.write_text("benchmarks: [\n  {metrics: 1\n")
    assert "guidellm result file is not YAML" in read_error(path, "guidellm")


def test_a_directory_is_not_a_result_file(tmp_path):
    assert "is a directory" in read_error(tmp_path, "guidellm")


def test_recognised_file_without_a_usable_point_names_what_is_missing():
    text = read_error(fixture("vllm-bench-no-ttft.json"))
    assert "vllm-bench result: no mean_ttft_ms" in text and "vllm bench serve --save-result" in text
    text = read_error(fixture("genai-perf-no-itl.json"))
    assert "genai-perf result: no inter_token_latency.avg (GenAI-Perf records it only for streaming runs)" in text
    text = read_error(fixture("aiperf-all-failed.json"))
    assert "aiperf result: no request_count.avg (every request failed: error_request_count 100)" in text


def test_a_format_named_by_the_caller_is_checked_not_trusted():
    assert "guidellm result: no benchmarks list" in read_error(fixture("vllm-bench.json"), "guidellm")
    assert "aiperf result: expected one JSON object" in read_error(fixture("sglang-bench.jsonl"), "aiperf")


def test_json_lines_where_no_line_is_usable(tmp_path):
    line = json.loads(fixture("sglang-bench.jsonl").read_text().splitlines()[0])
    path = tmp_path / "runs.jsonl"
    path.write_text("\n".join(json.dumps(dict(line, completed=0)) for _ in range(2)) + "\n")
    text = read_error(path)
    assert "sglang-bench result: none of its 2 load points is usable" in text
    assert "completed is 0; no completed requests" in text


@pytest.mark.parametrize("field, value, why", [
    ("mean_tpot_ms", float("nan"), "mean_tpot_ms is nan, not a positive finite number"),
    ("mean_ttft_ms", -3.0, "mean_ttft_ms is -3, not a positive finite number"),
    ("mean_ttft_ms", float("inf"), "mean_ttft_ms is inf, not a positive finite number"),
    ("mean_ttft_ms", "95", "mean_ttft_ms is '95', not a number"),
    ("total_input_tokens", 0, "total_input_tokens is 0, not a positive finite number"),
    ("completed", 2.5, "completed is 2.5, not a count of at least 1"),
    ("request_rate", -1, "request_rate is -1, not a positive rate"),
    ("max_concurrency", 0, "max_concurrency is 0, not a positive integer"),
])
def test_numbers_that_are_not_finite_and_positive_are_refused(tmp_path, field, value, why):
    doc = dict(json.loads(fixture("vllm-bench.json").read_text()), **{field: value})
    assert f"vllm-bench result: {why}" in read_error(write_json(tmp_path / "r.json", doc))


def test_a_non_finite_line_among_good_ones_is_reported_not_dropped(tmp_path):
    lines = fixture("sglang-bench.jsonl").read_text().splitlines()
    lines[1] = json.dumps(dict(json.loads(lines[1]), mean_ttft_ms=float("inf")))
    path = tmp_path / "runs.jsonl"
    path.write_text("\n".join(lines) + "\n")
    result = read_results(path)
    assert [p.source for p in result.points] == [f"{path}:1", f"{path}:3"]
    assert result.bad == ((f"{path}:2", "mean_ttft_ms is inf, not a positive finite number"),)


# --- the offered load -------------------------------------------------------------------------------------------


def test_vllm_unbounded_rate_without_a_limit_sends_everything_at_once(tmp_path):
    doc = dict(json.loads(fixture("vllm-bench.json").read_text()), max_concurrency=None)
    p = read_results(write_json(tmp_path / "r.json", doc)).points[0]
    assert (p.concurrency, p.rate) == (None, None)
    assert any("all requests sent at once" in note for note in p.notes)


def test_vllm_ramp_up_has_no_single_rate(tmp_path):
    doc = dict(json.loads(fixture("vllm-bench.json").read_text()), max_concurrency=None, ramp_up_strategy="linear",
               ramp_up_start_rps=1, ramp_up_end_rps=20)
    p = read_results(write_json(tmp_path / "r.json", doc)).points[0]
    assert (p.concurrency, p.rate) == (None, None)
    assert any("ramped 1 -> 20" in note for note in p.notes)


def test_vllm_date_that_is_not_the_documented_format_is_dropped_with_a_note(tmp_path):
    doc = dict(json.loads(fixture("vllm-bench.json").read_text()), date="yesterday")
    p = read_results(write_json(tmp_path / "r.json", doc)).points[0]
    assert p.date is None and any("'yesterday'" in note for note in p.notes)


# --- measured percentiles -------------------------------------------------------------------------------------


@pytest.mark.parametrize("name, ttft, tpot", [
    # vLLM and SGLang: p99_<metric>_ms, and median_<metric>_ms as p50
    ("vllm-bench.json", {"p50": 87.238, "p99": 102.0292}, {"p50": 11.7338, "p99": 12.4179}),
    ("vllm-benchmark-serving.json", {"p50": 105.5, "p99": 124.55}, {"p50": 13.8699, "p99": 14.3204}),
    # GenAI-Perf and AIPerf: the time_to_first_token and inter_token_latency statistics the means come from
    ("profile_export_genai_perf.json", {"p50": 42.9, "p90": 64.8, "p95": 71.3, "p99": 88.1},
     {"p50": 9.8, "p90": 10.4, "p95": 10.6, "p99": 10.9}),
    ("genai-perf-triton.json", {"p50": 64.7, "p90": 128.6, "p95": 151.0, "p99": 190.3},
     {"p50": 10.1, "p90": 11.8, "p95": 12.4, "p99": 13.1}),
    ("profile_export_aiperf.json", {"p50": 37.2, "p90": 51.9, "p95": 57.3, "p99": 68.0},
     {"p50": 3.16, "p90": 3.44, "p95": 3.52, "p99": 3.71}),
])
def test_percentiles_each_single_point_file_records(name, ttft, tpot):
    p = only_point(name)
    assert p.tails == {"ttft_ms": ttft, "tpot_ms": tpot}
    hash(p)  # the dict of tails must not make a point unhashable


def test_sglang_percentiles_per_line():
    result = read_results(fixture("sglang-bench.jsonl"))
    assert [p.tails for p in result.points] == [
        {"ttft_ms": {"p50": 45.338, "p99": 117.0}, "tpot_ms": {"p50": 7.35, "p99": 9.75}},
        {"ttft_ms": {"p50": 58.823, "p99": 151.8}, "tpot_ms": {"p50": 8.085, "p99": 10.725}},
        {"ttft_ms": {"p50": 205.995, "p99": 531.6}, "tpot_ms": {"p50": 10.78, "p99": 14.3}},
    ]


def test_guidellm_v02_percentiles_take_the_median_for_p50_and_p999_for_p99_9():
    first = read_results(fixture("guidellm-benchmarks.json")).points[0]
    assert first.tails == {"ttft_ms": {"p50": 32.98, "p90": 39.79, "p95": 43.07, "p99": 47.43, "p99.9": 47.43},
                           "tpot_ms": {"p50": 7.179, "p90": 7.413, "p95": 7.505, "p99": 7.57, "p99.9": 7.57}}


def test_guidellm_later_report_percentiles():
    _, second = read_results(fixture("guidellm-benchmarks.yaml")).points
    assert second.tails == {"ttft_ms": {"p50": 70.59, "p90": 83.18, "p95": 86.82, "p99": 93.76, "p99.9": 105.21},
                            "tpot_ms": {"p50": 12.261, "p90": 13.028, "p95": 13.232, "p99": 13.699, "p99.9": 13.965}}


def test_vllm_every_metric_percentile_is_read_and_unusable_ones_left_out(tmp_path):
    # As --metric-percentiles 50,90,95,99,99.9 writes them; p50 wins over the median when both are there.
    doc = dict(json.loads(fixture("vllm-bench.json").read_text()), p50_ttft_ms=87.0, p90_ttft_ms=99.0,
               p95_ttft_ms=100.5, **{"p99.9_ttft_ms": 110.25}, p90_tpot_ms=float("nan"), p95_tpot_ms=0.0,
               **{"p99.9_tpot_ms": "13"})
    p = read_results(write_json(tmp_path / "r.json", doc)).points[0]
    assert p.tails == {"ttft_ms": {"p50": 87.0, "p90": 99.0, "p95": 100.5, "p99": 102.0292, "p99.9": 110.25},
                       "tpot_ms": {"p50": 11.7338, "p99": 12.4179}}


def test_a_metric_without_percentiles_is_absent_and_itl_does_not_stand_in_for_tpot(tmp_path):
    doc = json.loads(fixture("vllm-bench.json").read_text())
    for key in ("median_tpot_ms", "p99_tpot_ms"):
        del doc[key]
    doc.update(median_itl_ms=11.5, p99_itl_ms=30.0)
    p = read_results(write_json(tmp_path / "r.json", doc)).points[0]
    assert p.tails == {"ttft_ms": {"p50": 87.238, "p99": 102.0292}}


def test_profile_export_percentiles_are_converted_like_the_mean(tmp_path):
    doc = json.loads(fixture("profile_export_aiperf.json").read_text())
    doc["time_to_first_token"] = {"unit": "s", "avg": 0.04, "p50": 0.037, "p90": 0.052, "p99": 0.068}
    doc["inter_token_latency"] = {"unit": "ms", "avg": 3.17}
    p = read_results(write_json(tmp_path / "profile_export_aiperf.json", doc)).points[0]
    assert p.ttft_ms == pytest.approx(40.0)
    assert p.tails == {"ttft_ms": pytest.approx({"p50": 37.0, "p90": 52.0, "p99": 68.0})}
