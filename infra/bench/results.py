"""Readers for the result files of common LLM serving benchmarks, so that calibration can learn from measurements
people already have instead of only from runs of our own.

Every reader turns one tool's file into load points of one meaning: mean time to first token and mean time per
output token in milliseconds, mean input and output tokens per completed request, the load that was offered (a
closed loop's concurrency or an open loop's rate) and how many requests completed; beside the means, the percentiles
of TTFT and TPOT the file records, of the same distribution as the mean and in its unit. Field names are taken from
each tool's own code, cited per format below; nothing is guessed. An entry that cannot be used is returned in `bad` with
where it is and why, never dropped in silence. The files come from untrusted places, so their size is bounded and
every number is checked to be finite and positive before it is believed.

TPOT here is (E2E - TTFT) / (output tokens - 1), averaged over requests. vLLM and SGLang report exactly that; the
other tools report an inter-token latency that is the same quantity per request (GenAI-Perf, AIPerf) or its
token-weighted mean (GuideLLM), and the point's notes say so. Dates are ISO 8601; GuideLLM's epoch seconds are read
as UTC.
"""

from __future__ import annotations

import json
import math
import statistics
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import yaml

from infra.errors import InfraError, Location, Problem
from infra.limits import MAX_RECORDS_BYTES, check_tree, deep_point, loads_json, scan_yaml, too_deep
from infra.perf.serving import PERCENTILES

FORMATS: tuple[str, ...] = ("vllm-bench", "sglang-bench", "genai-perf", "aiperf", "guidellm")

MAX_BYTES = MAX_RECORDS_BYTES
"""Bigger files are refused: a result file is kilobytes to megabytes, and these come from untrusted places."""

_FIX = {
    "vllm-bench": "give the JSON written by vllm bench serve --save-result (or benchmark_serving.py --save-result)",
    "sglang-bench": "give the JSON Lines file written by python -m sglang.bench_serving --output-file",
    "genai-perf": "give the profile_export_genai_perf.json written by genai-perf profile",
    "aiperf": "give the profile_export_aiperf.json written by aiperf profile",
    "guidellm": "give the benchmarks.json (or .yaml) report written by guidellm benchmark",
}


@dataclass(frozen=True)
class ResultPoint:
    """One load point of one benchmark run."""

    source: str
    """Where in the file: "path" for a single-result file, "path:LINE" for JSON Lines, "path#benchmarks[2]" for
    GuideLLM."""
    format: str
    ttft_ms: float
    tpot_ms: float
    isl: float
    osl: float
    concurrency: int | None
    """Closed loop: the most requests in flight. None for an open loop."""
    rate: float | None
    """Open loop: offered requests/s. None for a closed loop or when everything was sent at once."""
    requests: int
    date: str | None
    model: str | None
    framework: str | None
    """vllm, sglang or trtllm when the file names the serving engine; a client protocol such as "openai" does not."""
    isl_cv: float = 0.0
    osl_cv: float = 0.0
    notes: tuple[str, ...] = ()
    tails: dict[str, dict[str, float]] = field(default_factory=dict, hash=False)
    """Measured percentiles in ms where the file records them: {"ttft_ms": {"p90": ..., "p99": ...}, "tpot_ms":
    {...}}, only of `PERCENTILES`; a metric the file gives no percentile of is absent. Left out of the hash so that a
    point stays hashable."""
    prefix_hit: float = 0.0
    """Share of the prompt tokens found in the server's prefix cache, where the run measured it."""
    steady: bool = False
    """A closed loop measured past its start-up (`infra.bench.run.past_start_up`): its figures are the steady
    state's, with no first wave in them."""


@dataclass(frozen=True)
class ResultFile:
    path: str
    format: str
    points: tuple[ResultPoint, ...]
    bad: tuple[tuple[str, str], ...]
    """(where, why) for each entry that could not be used."""


# ---------------------------------------------------------------------------------------------------------------
# Reading and parsing


class _Unusable(Exception):
    """Why one entry cannot be used; `field` is the dotted path of the field at fault, when there is one."""

    def __init__(self, why: str, field: str = ""):
        super().__init__(why)
        self.why = why
        self.field = field


@dataclass(frozen=True)
class _Broken:
    """A JSON Lines line that is not JSON: kept so that it is reported, not skipped."""

    why: str


class _Lines(list):
    """(line number, parsed object or _Broken) for each non-blank line of a JSON Lines file."""


@dataclass(frozen=True)
class _Entry:
    where: str
    line: int | None
    prefix: str
    data: Any


@dataclass(frozen=True)
class _Bad:
    where: str
    why: str
    line: int | None
    field: str


def _problem(message: str, file: str, fix: str, line: int | None = None, column: int | None = None,
             field: str = "") -> InfraError:
    return InfraError(Problem(message, Location(file, line, column, field), fix))


def _read_text(path: Path, what: str) -> str:
    """The file as text, refusing what is missing, too big or not UTF-8; reads at most one byte past the bound so a
    file that grows while read cannot exhaust memory."""
    name = str(path)
    try:
        if path.is_dir():
            raise _problem(f"{what} path is a directory", name, "give the result file itself")
        size = path.stat().st_size
        if size > MAX_BYTES:
            raise _problem(f"{what} file is {size} bytes; files over 256 MiB are refused", name,
                           "give the result file itself, not a log or an archive")
        with path.open("rb") as fh:
            raw = fh.read(MAX_BYTES + 1)
    except FileNotFoundError:
        raise _problem(f"{what} file not found", name, "check the path") from None
    except OSError as exc:
        raise _problem(f"cannot read {what} file: {exc.strerror}", name, "check that the file is readable") from None
    if len(raw) > MAX_BYTES:
        raise _problem(f"{what} file is over 256 MiB; refused", name, "give the result file itself")
    try:
        return raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = raw[:exc.start].count(b"\n") + 1
        raise _problem(f"{what} file is not UTF-8 text", name, "give the file as the tool wrote it (UTF-8 JSON)",
                       line) from None


def _parse(path: Path, text: str, what: str) -> Any:
    """A YAML document for .yaml/.yml; otherwise one JSON document, or JSON Lines when the whole is not one
    document (SGLang appends a line per run, and so does vLLM with --append-result)."""
    name = str(path)
    if not text.strip():
        raise _problem(f"{what} file is empty", name, "give the file as the tool wrote it")
    if path.suffix.lower() in (".yaml", ".yml"):
        return _parse_yaml(name, text, what)
    try:
        return loads_json(text, name)
    except json.JSONDecodeError as exc:
        lines = _parse_lines(text)
        if any(isinstance(obj, dict) for _, obj in lines):
            return lines
        raise _problem(f"{what} file is not JSON or JSON Lines: {exc.msg}", name,
                       "give the file as the tool wrote it", exc.lineno, exc.colno) from None
    except ValueError as exc:
        raise _problem(f"{what} file is not JSON: {exc}", name, "give the file as the tool wrote it") from None


def _parse_yaml(name: str, text: str, what: str) -> Any:
    scan_yaml(text, name)  # nesting and alias bombs refused from the event stream, before a tree is built
    try:
        data = yaml.safe_load(text)
        check_tree(data, name)
        return data
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line, column = (mark.line + 1, mark.column + 1) if mark is not None else (None, None)
        reason = getattr(exc, "problem", None) or "invalid YAML"
        raise _problem(f"{what} file is not YAML: {reason}", name, "give the file as the tool wrote it", line,
                       column) from None
    except RecursionError:
        raise too_deep(name, *deep_point(text)) from None


def _parse_lines(text: str) -> _Lines:
    out = _Lines()
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            out.append((number, loads_json(line, "", number)))
        except ValueError as exc:
            out.append((number, _Broken(f"line is not JSON: {getattr(exc, 'msg', exc)}")))
        except InfraError as exc:  # nested past the depth bound
            out.append((number, _Broken(f"line is not JSON we read: {exc.problems[0].message}")))
    return out


# ---------------------------------------------------------------------------------------------------------------
# Detection

_GENAI_METRICS = ("time_to_first_token", "inter_token_latency", "request_latency", "request_throughput")
# Keys only SGLang's bench_serving writes (vLLM says mean_e2el_ms, SGLang mean_e2e_latency_ms).
_SGLANG_MARKERS = ("total_output_tokens_retokenized", "mean_e2e_latency_ms", "sharegpt_output_len",
                   "random_range_ratio")
# Keys only vLLM's benchmark writes, present whichever metrics were selected.
_VLLM_MARKERS = ("model_id", "tokenizer_id", "num_prompts", "burstiness", "mean_e2el_ms", "endpoint_type")
_LINE_FORMATS = ("vllm-bench", "sglang-bench")


def detect(path: str | Path, data: Any) -> str | None:
    """Which of FORMATS a parsed file is, or None. `data` is the parsed document, or the list of objects of a JSON
    Lines file; `path` only breaks the tie between GenAI-Perf and AIPerf files that carry no AIPerf marker."""
    if isinstance(data, dict):
        return _detect_one(Path(path), data)
    if isinstance(data, list):
        for obj in data:
            if isinstance(obj, dict) and (found := _detect_one(Path(path), obj)) is not None:
                return found
    return None


def _detect_one(path: Path, obj: dict) -> str | None:
    config = obj.get("input_config")
    if isinstance(obj.get("benchmarks"), list):
        return "guidellm"
    if "aiperf_version" in obj or (isinstance(config, dict) and "loadgen" in config):
        return "aiperf"
    if isinstance(config, dict) and any(key in obj for key in _GENAI_METRICS):
        return "aiperf" if "aiperf" in path.name.lower() else "genai-perf"
    if any(key in obj for key in _SGLANG_MARKERS):
        return "sglang-bench"
    if any(key in obj for key in _VLLM_MARKERS):
        return "vllm-bench"
    return None


# ---------------------------------------------------------------------------------------------------------------
# Entry point


def read_results(path: str | Path, format: str | None = None) -> ResultFile:
    """The load points of one result file; `format` (one of FORMATS) skips detection."""
    path = Path(path)
    name = str(path)
    if format is not None and format not in FORMATS:
        raise _problem(f"unknown benchmark result format {format!r}; formats known: {', '.join(FORMATS)}", name,
                       f"name one of {', '.join(FORMATS)}")
    what = f"{format} result" if format else "benchmark result"
    data = _parse(path, _read_text(path, what), what)
    fmt = format or detect(path, [obj for _, obj in data] if isinstance(data, _Lines) else data)
    if fmt is None:
        raise _problem(f"not a result file of a known benchmark (formats known: {', '.join(FORMATS)})", name,
                       "give a file written by one of those tools, or name its format")
    points, bad = _read_entries(fmt, _entries(fmt, name, data))
    if not points:
        raise _no_point(fmt, name, bad)
    return ResultFile(name, fmt, tuple(points), tuple((b.where, b.why) for b in bad))


def _entries(fmt: str, name: str, data: Any) -> list[_Entry]:
    if fmt == "guidellm":
        return _guidellm_entries(name, data)
    if isinstance(data, _Lines):
        return _line_entries(fmt, name, data)
    if not isinstance(data, dict):
        raise _problem(f"{fmt} result: expected a JSON object, found {type(data).__name__}", name, _FIX[fmt])
    # SGLang's file is JSON Lines even when it holds one run, so its points are named by line.
    return [_Entry(f"{name}:1" if fmt == "sglang-bench" else name, None, "", data)]


def _line_entries(fmt: str, name: str, lines: _Lines) -> list[_Entry]:
    if fmt not in _LINE_FORMATS:
        broken = next((n for n, obj in lines if isinstance(obj, _Broken)), lines[0][0])
        raise _problem(f"{fmt} result: expected one JSON object, found {len(lines)} lines of JSON Lines", name,
                       _FIX[fmt], broken)
    return [_Entry(f"{name}:{number}", number, "", obj) for number, obj in lines]


def _guidellm_entries(name: str, data: Any) -> list[_Entry]:
    benchmarks = data.get("benchmarks") if isinstance(data, dict) else None
    if not isinstance(benchmarks, list):
        raise _problem("guidellm result: no benchmarks list", name, _FIX["guidellm"], field="benchmarks")
    return [_Entry(f"{name}#benchmarks[{i}]", None, f"benchmarks[{i}]", (bench, data))
            for i, bench in enumerate(benchmarks)]


def _read_entries(fmt: str, entries: list[_Entry]) -> tuple[list[ResultPoint], list[_Bad]]:
    points: list[ResultPoint] = []
    bad: list[_Bad] = []
    for entry in entries:
        if isinstance(entry.data, _Broken):
            bad.append(_Bad(entry.where, entry.data.why, entry.line, ""))
            continue
        try:
            points.append(ResultPoint(source=entry.where, format=fmt, **_READERS[fmt](entry.data)))
        except _Unusable as exc:
            field = ".".join(part for part in (entry.prefix, exc.field) if part)
            bad.append(_Bad(entry.where, exc.why, entry.line, field))
    return points, bad


def _no_point(fmt: str, name: str, bad: list[_Bad]) -> InfraError:
    if not bad:
        return _problem(f"{fmt} result: no load points in the file", name, _FIX[fmt])
    first = bad[0]
    if len(bad) == 1:
        return _problem(f"{fmt} result: {first.why}", name, _FIX[fmt], first.line, field=first.field)
    return _problem(f"{fmt} result: none of its {len(bad)} load points is usable; the first ({first.where}): "
                    f"{first.why}", name, _FIX[fmt])


# ---------------------------------------------------------------------------------------------------------------
# Checked values


def _dig(obj: Any, dotted: str) -> Any:
    """The value at a dotted path of nested objects, or None where any step is missing."""
    for key in dotted.split("."):
        if not isinstance(obj, dict):
            return None
        obj = obj.get(key)
    return obj


def _number(obj: Any, dotted: str, why_missing: str = "") -> float:
    value = _dig(obj, dotted)
    if value is None:
        raise _Unusable(f"no {dotted}{why_missing}", dotted)
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise _Unusable(f"{dotted} is {value!r}, not a number", dotted)
    return float(value)


def _positive(value: float, field: str) -> float:
    if not math.isfinite(value) or value <= 0:
        raise _Unusable(f"{field} is {value:g}, not a positive finite number", field)
    return value


def _pos(obj: Any, dotted: str, why_missing: str = "") -> float:
    return _positive(_number(obj, dotted, why_missing), dotted)


def _count(obj: Any, dotted: str, what: str = "completed requests", why_missing: str = "") -> int:
    value = _number(obj, dotted, why_missing)
    if not math.isfinite(value) or value != int(value) or value < 1:
        raise _Unusable(f"{dotted} is {value:g}; no {what}" if value == 0 else
                        f"{dotted} is {value:g}, not a count of at least 1", dotted)
    return int(value)


def _optional_int(value: Any, field: str) -> int | None:
    """A positive integer setting, or None when unset (JSON null, or "" where GenAI-Perf writes None)."""
    if value is None or value == "":
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or value != int(value) or value < 1:
        raise _Unusable(f"{field} is {value!r}, not a positive integer", field)
    return int(value)


def _optional_rate(value: Any, field: str) -> float | None:
    """Requests/s of an open loop; None when unset or infinite (everything sent at once)."""
    if value is None or value == "" or value == "inf":
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or math.isnan(value) or value <= 0:
        raise _Unusable(f"{field} is {value!r}, not a positive rate", field)
    return None if math.isinf(value) else float(value)


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) and value.strip() else None


def _only(value: Any) -> tuple[str | None, list[str]]:
    """The model of a run that names one model; several models make one point of mixed models."""
    if isinstance(value, str):
        return _text(value), []
    if isinstance(value, list) and value and all(isinstance(v, str) for v in value):
        if len(value) == 1:
            return _text(value[0]), []
        return None, [f"several models benchmarked together: {', '.join(value)}"]
    return None, []


def _load(rate: float | None, concurrency: int | None) -> tuple[int | None, float | None, list[str]]:
    """(concurrency, rate, notes) with the rate taking precedence, as every one of these tools schedules it: a
    concurrency limit beside a rate only caps an open loop."""
    if rate is not None:
        notes = [f"open loop at {rate:g} req/s with at most {concurrency} in flight"] if concurrency else []
        return None, rate, notes
    if concurrency is None:
        return None, None, ["all requests sent at once: no rate and no concurrency limit"]
    return concurrency, None, []


def cv_of(values: list[float]) -> float:
    """Coefficient of variation of the lengths a run sent (population standard deviation over the mean)."""
    mean = statistics.fmean(values)
    return statistics.pstdev(values) / mean if mean > 0 else 0.0


def _summary(obj: Any, key: str, mean_key: str, std_key: str) -> tuple[float, float]:
    """(mean, coefficient of variation) of a tool's per-request distribution summary; the spread is the tool's own
    population standard deviation over the requests it measured."""
    mean = _pos(obj, f"{key}.{mean_key}")
    std = _dig(obj, f"{key}.{std_key}")
    ok = isinstance(std, int | float) and not isinstance(std, bool) and math.isfinite(std) and std >= 0
    cv = std / mean if ok else 0.0
    return mean, (cv if cv > 1e-9 else 0.0)  # below that it is the tool's rounding noise on equal lengths


_TIME_UNITS = {"ms": 1.0, "s": 1000.0, "sec": 1000.0, "us": 1e-3, "ns": 1e-6}


def _ms(obj: Any, key: str, why_missing: str = "") -> float:
    """A GenAI-Perf/AIPerf time statistic's mean in milliseconds, honouring its unit."""
    return _pos(obj, f"{key}.avg", why_missing) * _ms_factor(obj, key)


def _ms_factor(obj: Any, key: str) -> float:
    unit = _dig(obj, f"{key}.unit")
    factor = _TIME_UNITS.get(unit if isinstance(unit, str) else "ms")
    if factor is None:
        raise _Unusable(f"{key}.unit is {unit!r}, not a time unit", f"{key}.unit")
    return factor


def _ms_tails(obj: Any, key: str) -> dict[str, float]:
    """A GenAI-Perf/AIPerf time statistic's percentiles in ms: both name them p50, p90, p95, p99 as we do."""
    stat = _dig(obj, key)
    if not isinstance(stat, dict):
        return {}
    return _tails({name: stat.get(name) for name in PERCENTILES}, _ms_factor(obj, key))


def _tails(values: dict[str, Any], scale: float = 1.0) -> dict[str, float]:
    """The percentiles of `values` (keyed by PERCENTILES names) that are finite and positive. Anything else is
    dropped rather than refused: the mean alone decides whether a point is usable, and tools write 0 for a
    distribution they did not fill."""
    return {name: float(value) * scale for name, value in values.items()
            if isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value) and value > 0}


def _by_metric(ttft: dict[str, float], tpot: dict[str, float]) -> dict[str, dict[str, float]]:
    return {metric: tails for metric, tails in (("ttft_ms", ttft), ("tpot_ms", tpot)) if tails}


def _date_from_iso(value: Any) -> str | None:
    if not isinstance(value, str):
        return None
    try:
        return datetime.fromisoformat(value).strftime("%Y-%m-%dT%H:%M:%S")
    except ValueError:
        return None


def _date_from_epoch(value: Any) -> str | None:
    # Before 2001 or after 2286 is no benchmark's start time but a zero, a -1 placeholder or a mistake.
    if isinstance(value, bool) or not isinstance(value, int | float) or not 1e9 <= value < 1e10:
        return None
    return datetime.fromtimestamp(value, tz=timezone.utc).strftime("%Y-%m-%dT%H:%M:%S")


# ---------------------------------------------------------------------------------------------------------------
# vLLM: `vllm bench serve --save-result` and the older `benchmarks/benchmark_serving.py --save-result`.
# Sources: vllm-project/vllm vllm/benchmarks/serve.py (benchmark(): the result dict with completed, failed,
# total_input_tokens, total_output_tokens, input_lens, output_lens, errors and mean_<metric>_ms; main_async(): date
# as %Y%m%d-%H%M%S, backend, model_id, request_rate ("inf" when unbounded), max_concurrency, ramp_up_*; per-request
# fields kept only with --save-detailed; --append-result adds a JSON object per line) and calculate_metrics() (TPOT
# is (latency - ttft) / (output_len - 1) averaged over requests; failed requests carry output length 0 and a non-
# empty error). The older benchmarks/benchmark_serving.py writes the same keys and always keeps input_lens,
# output_lens and errors. Backends: vllm/benchmarks/lib/endpoint_request_func.py and
# benchmarks/backend_request_func.py (ASYNC_REQUEST_FUNCS: "vllm", "sglang", "tensorrt-llm" name engines; "openai",
# "openai-chat", ... name only the protocol).

_VLLM_ENGINES = {"vllm": "vllm", "sglang": "sglang", "tensorrt-llm": "trtllm"}


def _serving_point(obj: Any, load: Callable[[dict], tuple[int | None, float | None, list[str]]],
                   engines: dict[str, str], model: Callable[[dict], Any],
                   date: Callable[[dict], tuple[str | None, list[str]]] | None = None) -> dict[str, Any]:
    """A point of vLLM's or SGLang's results, which share their shape (SGLang's bench_serving began as a copy of
    vLLM's benchmark_serving): `load(obj)` reads the offered load, `date(obj)` the run's date where recorded."""
    if not isinstance(obj, dict):
        raise _Unusable("not a JSON object")
    completed = _count(obj, "completed")
    ttft = _pos(obj, "mean_ttft_ms")
    tpot = _pos(obj, "mean_tpot_ms")
    lengths = _lengths(obj, completed)
    length_notes = lengths.pop("notes")
    concurrency, rate, load_notes = load(obj)
    when, date_notes = date(obj) if date is not None else (None, [])
    return dict(ttft_ms=ttft, tpot_ms=tpot, **lengths, concurrency=concurrency, rate=rate, requests=completed,
                date=when, model=_text(model(obj)), framework=engines.get(obj.get("backend")),
                notes=tuple(length_notes + load_notes + date_notes),
                tails=_by_metric(_serving_tails(obj, "ttft"), _serving_tails(obj, "tpot")))


def _serving_tails(obj: dict, metric: str) -> dict[str, float]:
    """vLLM writes p{N}_<metric>_ms for each of --metric-percentiles (N as "99" or "99.9", the names we use) and
    SGLang a fixed few of the same shape; both write the median as median_<metric>_ms, which stands in for p50."""
    found = {name: obj.get(f"{name}_{metric}_ms") for name in PERCENTILES}
    if not _tails({"p50": found["p50"]}):
        found["p50"] = obj.get(f"median_{metric}_ms")
    return _tails(found)


def _vllm_point(obj: Any) -> dict[str, Any]:
    return _serving_point(obj, _vllm_load, _VLLM_ENGINES, lambda o: o.get("model_id"),
                          lambda o: _vllm_date(o.get("date")))


def _vllm_load(obj: dict) -> tuple[int | None, float | None, list[str]]:
    concurrency = _optional_int(obj.get("max_concurrency"), "max_concurrency")
    if obj.get("ramp_up_strategy") is not None:
        return None, None, [f"request rate ramped {obj.get('ramp_up_start_rps')} -> {obj.get('ramp_up_end_rps')} "
                            f"req/s ({obj.get('ramp_up_strategy')}); no single offered rate"]
    return _load(_optional_rate(obj.get("request_rate"), "request_rate"), concurrency)


def _vllm_date(value: Any) -> tuple[str | None, list[str]]:
    if value is None:
        return None, []
    try:
        return datetime.strptime(str(value), "%Y%m%d-%H%M%S").strftime("%Y-%m-%dT%H:%M:%S"), []
    except ValueError:
        return None, [f"date {value!r} is not YYYYMMDD-HHMMSS; ignored"]


def _lengths(obj: dict, completed: int) -> dict[str, Any]:
    """Mean lengths per completed request, from the per-request lists when the file kept them (they also give the
    spread), else from the totals."""
    per_request = _per_request_lengths(obj, completed)
    if per_request is not None:
        inputs, outputs = per_request
        return dict(isl=_positive(statistics.fmean(inputs), "input_lens"),
                    osl=_positive(statistics.fmean(outputs), "output_lens"), isl_cv=cv_of(inputs),
                    osl_cv=cv_of(outputs), notes=["isl/osl from the per-request input_lens/output_lens"])
    notes = ["per-request lengths disagree with completed; isl/osl from the totals"] \
        if isinstance(obj.get("input_lens"), list) else []
    return dict(isl=_pos(obj, "total_input_tokens") / completed, osl=_pos(obj, "total_output_tokens") / completed,
                notes=notes)


def _per_request_lengths(obj: dict, completed: int) -> tuple[list[float], list[float]] | None:
    inputs, outputs, errors = obj.get("input_lens"), obj.get("output_lens"), obj.get("errors")
    if not isinstance(inputs, list) or not isinstance(outputs, list) or len(inputs) != len(outputs) or not inputs:
        return None
    if isinstance(errors, list) and len(errors) == len(inputs):
        ok = [not error for error in errors]
    else:
        ok = [_is_length(out) and out > 0 for out in outputs]  # a failed request is written with output length 0
    pairs = [(i, o) for i, o, good in zip(inputs, outputs, ok) if good]
    if len(pairs) != completed or not all(_is_length(i) and _is_length(o) for i, o in pairs):
        return None
    return [float(i) for i, _ in pairs], [float(o) for _, o in pairs]


def _is_length(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value) and value >= 0


# ---------------------------------------------------------------------------------------------------------------
# SGLang: `python -m sglang.bench_serving --output-file F`, which appends one JSON object per run to F.
# Source: sgl-project/sglang python/sglang/bench_serving.py (benchmark(): the result dict with backend,
# request_rate (a float, so Infinity when unbounded, or "trace"), max_concurrency, completed, total_input_tokens,
# total_output_tokens, mean_ttft_ms, mean_tpot_ms, server_info; result_details input_lens, output_lens and errors
# added with --output-details; calculate_metrics(): TPOT is (latency - ttft) / (output_len - 1) averaged over
# requests, failed requests get output length 0). Backends: ASYNC_REQUEST_FUNCS and run_benchmark() ("sglang",
# "sglang-native", "sglang-oai", "sglang-oai-chat", "vllm", "vllm-chat", "trt", "lmdeploy", ...). server_info is the
# server's /get_server_info, whose model_path is the served model (SGLang docs, basic_usage/native_api).

_SGLANG_ENGINES = {"sglang": "sglang", "sglang-native": "sglang", "sglang-oai": "sglang", "sglang-oai-chat": "sglang",
                   "vllm": "vllm", "vllm-chat": "vllm", "trt": "trtllm"}


def _sglang_point(obj: Any) -> dict[str, Any]:
    return _serving_point(obj, _sglang_load, _SGLANG_ENGINES, lambda o: _dig(o, "server_info.model_path"))


def _sglang_load(obj: dict) -> tuple[int | None, float | None, list[str]]:
    concurrency = _optional_int(obj.get("max_concurrency"), "max_concurrency")
    if obj.get("request_rate") == "trace":
        return None, None, ["arrivals replayed from trace timestamps; no single offered rate"]
    return _load(_optional_rate(obj.get("request_rate"), "request_rate"), concurrency)


# ---------------------------------------------------------------------------------------------------------------
# GenAI-Perf: profile_export_genai_perf.json.
# Sources: triton-inference-server/perf_analyzer genai-perf/genai_perf/export_data/json_exporter.py (the statistics
# dict plus input_config), genai-perf/genai_perf/metrics/statistics.py (each metric {unit, avg, p25..p99, min, max,
# std}; times in ms; ITL left out when all zero, i.e. not streaming), genai-perf/genai_perf/profile_data_parser/
# llm_profile_data_parser.py (inter_token_latency per request is (latency - ttft) / (output tokens - 1), i.e.
# TPOT). input_config comes in two shapes: the flat argparse one of genai-perf/tests/test_json_exporter.py (model
# list, backend, service_kind, concurrency, request_rate, request_count) and the nested config one read back by
# genai-perf/genai_perf/subcommand/process_export_files.py (model_names, perf_analyzer.stimulus {concurrency: N} or
# {request_rate: R}, perf_analyzer.measurement {mode, num}, endpoint.backend/service_kind; see
# genai-perf/genai_perf/config/input/config_perf_analyzer.py and config_endpoint.py). The backend names the engine
# only for the triton service kind. GenAI-Perf records no count of completed requests nor the run's date.

_GENAI_ENGINES = {"tensorrtllm": "trtllm", "vllm": "vllm"}


def _genai_point(obj: Any) -> dict[str, Any]:
    config = obj.get("input_config") if isinstance(obj.get("input_config"), dict) else {}
    nested = "perf_analyzer" in config or "model_names" in config or isinstance(config.get("endpoint"), dict)
    ttft = _ms(obj, "time_to_first_token")
    tpot = _ms(obj, "inter_token_latency", " (GenAI-Perf records it only for streaming runs)")
    isl, isl_cv = _summary(obj, "input_sequence_length", "avg", "std")
    osl, osl_cv = _summary(obj, "output_sequence_length", "avg", "std")
    concurrency, rate, load_notes = _genai_nested_load(config) if nested else _load(
        _optional_rate(config.get("request_rate"), "input_config.request_rate"),
        _optional_int(config.get("concurrency"), "input_config.concurrency"))
    requests, request_notes = _genai_requests(config, nested)
    model, model_notes = _only(config.get("model_names") if nested else config.get("model"))
    notes = ["tpot is GenAI-Perf's inter_token_latency: (latency - ttft) / (output tokens - 1) per request"]
    return dict(ttft_ms=ttft, tpot_ms=tpot, isl=isl, osl=osl, isl_cv=isl_cv, osl_cv=osl_cv, concurrency=concurrency,
                rate=rate, requests=requests, date=None, model=model, framework=_genai_engine(config, nested),
                notes=tuple(notes + load_notes + request_notes + model_notes),
                tails=_by_metric(_ms_tails(obj, "time_to_first_token"), _ms_tails(obj, "inter_token_latency")))


def _genai_nested_load(config: dict) -> tuple[int | None, float | None, list[str]]:
    stimulus = _dig(config, "perf_analyzer.stimulus")
    if isinstance(stimulus, dict) and "concurrency" in stimulus:
        return _load(None, _optional_int(stimulus["concurrency"], "input_config.perf_analyzer.stimulus.concurrency"))
    if isinstance(stimulus, dict) and "request_rate" in stimulus:
        return _load(_optional_rate(stimulus["request_rate"], "input_config.perf_analyzer.stimulus.request_rate"),
                     None)
    kind = ", ".join(stimulus) if isinstance(stimulus, dict) and stimulus else "none recorded"
    return None, None, [f"load stimulus is {kind}: neither a concurrency nor a request rate"]


def _genai_requests(config: dict, nested: bool) -> tuple[int, list[str]]:
    """GenAI-Perf does not record how many requests completed; the configured count is the best there is, and a
    run without one counts as one observation rather than as an invented number."""
    if nested:
        mode, num = _dig(config, "perf_analyzer.measurement.mode"), _dig(config, "perf_analyzer.measurement.num")
        configured = num if mode == "request_count" else None
    else:
        configured = config.get("request_count")
    if isinstance(configured, int) and not isinstance(configured, bool) and configured >= 1:
        return configured, ["requests is the configured request count: GenAI-Perf does not record completions"]
    return 1, ["GenAI-Perf recorded no request count; counted as 1"]


def _genai_engine(config: dict, nested: bool) -> str | None:
    source = config.get("endpoint") if nested else config
    if not isinstance(source, dict):
        return None
    kind = source.get("service_kind")
    if kind == "tensorrtllm_engine":
        return "trtllm"
    backend = source.get("backend")
    return _GENAI_ENGINES.get(backend.lower()) if kind == "triton" and isinstance(backend, str) else None


# ---------------------------------------------------------------------------------------------------------------
# AIPerf: profile_export_aiperf.json.
# Sources: ai-dynamo/aiperf src/aiperf/exporters/metrics_json_exporter.py and src/aiperf/common/models/
# export_models.py (JsonExportData: aiperf_version, request_count, time_to_first_token, inter_token_latency,
# input_sequence_length, output_sequence_length as {unit, avg, ..., std}, input_config, was_cancelled, start_time;
# written with exclude_unset), src/aiperf/metrics/types/inter_token_latency_metric.py (ITL = (request latency -
# TTFT) / (output length - first chunk tokens), i.e. TPOT unless --per-chunk-usage says the first chunk held more
# than one token), src/aiperf/common/config/user_config.py, loadgen_config.py (loadgen.concurrency,
# loadgen.request_rate; a rate takes precedence over a concurrency) and endpoint_config.py (endpoint.model_names).
# AIPerf is a client only: its endpoint type never names the engine.


def _aiperf_point(obj: Any) -> dict[str, Any]:
    config = obj.get("input_config") if isinstance(obj.get("input_config"), dict) else {}
    failed = _dig(obj, "error_request_count.avg")
    requests = _count(obj, "request_count.avg", "successful requests",
                      f" (every request failed: error_request_count {failed:g})" if isinstance(failed, int | float)
                      else "")
    ttft = _ms(obj, "time_to_first_token")
    tpot = _ms(obj, "inter_token_latency", " (AIPerf records it only for streaming runs)")
    isl, isl_cv = _summary(obj, "input_sequence_length", "avg", "std")
    osl, osl_cv = _summary(obj, "output_sequence_length", "avg", "std")
    concurrency, rate, load_notes = _aiperf_load(config)
    model, model_notes = _only(_dig(config, "endpoint.model_names") or config.get("model_names"))
    notes = ["tpot is AIPerf's inter_token_latency: (latency - ttft) / (output tokens - 1) per request"]
    if obj.get("was_cancelled") is True:
        notes.append("the run was cancelled before it finished")
    return dict(ttft_ms=ttft, tpot_ms=tpot, isl=isl, osl=osl, isl_cv=isl_cv, osl_cv=osl_cv, concurrency=concurrency,
                rate=rate, requests=requests, date=_date_from_iso(obj.get("start_time")), model=model, framework=None,
                notes=tuple(notes + load_notes + model_notes),
                tails=_by_metric(_ms_tails(obj, "time_to_first_token"), _ms_tails(obj, "inter_token_latency")))


def _aiperf_load(config: dict) -> tuple[int | None, float | None, list[str]]:
    loadgen = config.get("loadgen") if isinstance(config.get("loadgen"), dict) else {}
    concurrency = loadgen.get("concurrency")
    if isinstance(concurrency, list):
        return None, None, ["concurrency is a sweep list; this file does not say which value it measured"]
    return _load(_optional_rate(loadgen.get("request_rate"), "input_config.loadgen.request_rate"),
                 _optional_int(concurrency, "input_config.loadgen.concurrency"))


# ---------------------------------------------------------------------------------------------------------------
# GuideLLM: the benchmarks.json / .yaml report, one benchmark per load point.
# Sources: vllm-project/guidellm. v0.2: src/guidellm/benchmark/benchmark.py (GenerativeBenchmark: args.strategy,
# start_time, worker.backend_type/backend_model, request_totals, metrics.time_to_first_token_ms,
# inter_token_latency_ms (weighted by output tokens - 1), prompt_token_count, output_token_count, each a
# StatusDistributionSummary with successful/incomplete/errored/total) and src/guidellm/scheduler/strategy.py
# (type_ synchronous, concurrent with streams, throughput with max_concurrency, constant and poisson with rate).
# v0.3: src/guidellm/benchmark/objects.py (the strategy moved to scheduler.strategy). Later:
# src/guidellm/benchmark/schemas/generative/report.py (args, benchmarks; JSON or yaml.dump),
# schemas/generative/benchmark.py (config.strategy, start_time), schemas/generative/metrics.py
# (metrics.request_totals), schemas/base_args.py (args.model, args.backend) and
# src/guidellm/scheduler/strategies.py. Distribution fields mean and std_dev: src/guidellm/utils/statistics.py.
# Backends vllm_python and vllm_offline (src/guidellm/backends/vllm_python/) run vLLM itself; openai_http is a client.

_GUIDELLM_ENGINES = {"vllm_python": "vllm", "vllm_offline": "vllm"}


def _guidellm_point(pair: Any) -> dict[str, Any]:
    bench, report = pair
    if not isinstance(bench, dict):
        raise _Unusable("not an object")
    metrics = bench.get("metrics")
    if not isinstance(metrics, dict):
        raise _Unusable("no metrics", "metrics")
    requests = _guidellm_requests(bench)
    ttft = _pos(metrics, "time_to_first_token_ms.successful.mean")
    tpot = _pos(metrics, "inter_token_latency_ms.successful.mean")
    isl, isl_cv = _summary(metrics, "prompt_token_count.successful", "mean", "std_dev")
    osl, osl_cv = _summary(metrics, "output_token_count.successful", "mean", "std_dev")
    concurrency, rate, load_notes = _guidellm_load(_guidellm_strategy(bench))
    model, engine = _guidellm_backend(bench, report)
    date = _date_from_epoch(bench.get("start_time")) or _date_from_epoch(_dig(bench, "run_stats.start_time"))
    notes = ["tpot is GuideLLM's inter_token_latency_ms, a mean weighted by output tokens - 1"]
    tails = _by_metric(_guidellm_tails(metrics, "time_to_first_token_ms"),
                       _guidellm_tails(metrics, "inter_token_latency_ms"))
    return dict(ttft_ms=ttft, tpot_ms=tpot, isl=isl, osl=osl, isl_cv=isl_cv, osl_cv=osl_cv, concurrency=concurrency,
                rate=rate, requests=requests, date=date, model=model, framework=engine, notes=tuple(notes + load_notes),
                tails=tails)


def _guidellm_tails(metrics: dict, key: str) -> dict[str, float]:
    """The successful requests' percentiles, as the mean is theirs. GuideLLM names them without the dot (p999 is
    p99.9); v0.2 has no p50 there, only the distribution's median."""
    dist = _dig(metrics, f"{key}.successful")
    if not isinstance(dist, dict):
        return {}
    shares = dist.get("percentiles") if isinstance(dist.get("percentiles"), dict) else {}
    found = {name: shares.get(name.replace(".", "")) for name in PERCENTILES}
    if not _tails({"p50": found["p50"]}):
        found["p50"] = dist.get("median")
    return _tails(found)


def _guidellm_requests(bench: dict) -> int:
    dotted = "metrics.request_totals.successful" if _dig(bench, "metrics.request_totals") is not None \
        else "request_totals.successful"
    return _count(bench, dotted, "successful requests")


def _guidellm_strategy(bench: dict) -> dict | None:
    for dotted in ("config.strategy", "scheduler.strategy", "args.strategy"):
        if isinstance(strategy := _dig(bench, dotted), dict):
            return strategy
    return None


def _guidellm_load(strategy: dict | None) -> tuple[int | None, float | None, list[str]]:
    kind = strategy.get("type_") if strategy else None
    if kind == "synchronous":
        return 1, None, []
    if kind == "concurrent":
        return _optional_int(strategy.get("streams"), "strategy.streams"), None, []
    if kind == "throughput":
        limit = _optional_int(strategy.get("max_concurrency"), "strategy.max_concurrency")
        return limit, None, [f"throughput: requests sent as fast as possible, at most {limit} in flight" if limit
                             else "throughput: requests sent as fast as possible"]
    if kind in ("constant", "poisson"):
        return None, _optional_rate(strategy.get("rate"), "strategy.rate"), [f"{kind} arrivals"]
    return None, None, [f"strategy {kind!r} is not a known GuideLLM strategy; load unknown"]


def _guidellm_backend(bench: dict, report: Any) -> tuple[str | None, str | None]:
    args = report.get("args") if isinstance(report, dict) and isinstance(report.get("args"), dict) else {}
    worker = bench.get("worker") if isinstance(bench.get("worker"), dict) else {}
    model = _text(args.get("model")) or _text(worker.get("backend_model"))
    if model == "None":  # v0.2 writes the string "None" when no model was given
        model = None
    backend = args.get("backend") or worker.get("backend_type")
    return model, _GUIDELLM_ENGINES.get(backend) if isinstance(backend, str) else None


_READERS: dict[str, Callable[[Any], dict[str, Any]]] = {
    "vllm-bench": _vllm_point,
    "sglang-bench": _sglang_point,
    "genai-perf": _genai_point,
    "aiperf": _aiperf_point,
    "guidellm": _guidellm_point,
}
