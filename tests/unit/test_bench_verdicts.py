"""Verdicts that cannot flatter a failed run: the failed share judged on its own, an interval above the target
failing at any sample size, JSON without inf or NaN, bounded flags, and server usage counts that cannot be
counts."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from infra.bench.client import MAX_USAGE_TOKENS, StreamState
from infra.bench.emulator import check_options
from infra.bench.endpoint import check_client_flags, plan_load
from infra.bench.metrics import RequestRecord, distribution, json_number
from infra.bench.verdict import (
    DEFAULT_MAX_FAILED,
    ObjectiveVerdict,
    Verdict,
    judge,
    judge_failures,
    judge_objective,
    wilson,
)
from infra.bench.verify import _service_entry
from infra.errors import InfraError
from infra.planner.types import VerifiedService


def records(ok_ttfts_s, failed: int = 0, kind: str = "http_500") -> list[RequestRecord]:
    out = [RequestRecord(i, 0.0, float(i), ttft=float(t), e2e=float(t) + 0.5, output_tokens=8)
           for i, t in enumerate(ok_ttfts_s)]
    out += [RequestRecord(len(out) + j, 0.0, float(len(out) + j), error=f"{kind}: boom") for j in range(failed)]
    return out


def strict_json(obj) -> dict:
    """Dump and read back as strict JSON: Infinity and NaN are refused."""
    def refuse(constant):
        raise ValueError(f"{constant} in JSON")

    return json.loads(json.dumps(obj), parse_constant=refuse)


# -- the failed share ----------------------------------------------------------------------------------------


def test_every_request_failed_fails_without_objectives_and_counts_the_kinds():
    v = judge(records([], failed=10), {}, max_failed=DEFAULT_MAX_FAILED)
    assert v.overall == "fail" and v.failed_verdict == "fail"
    assert v.failed_kinds == {"http_500": 10}
    data = strict_json(v.to_json())
    assert data["failed_kinds"] == {"http_500": 10} and data["failed_share"] == 1.0
    assert data["max_failed"] == DEFAULT_MAX_FAILED and data["failed_verdict"] == "fail"
    assert "10 of 10 requests failed" in data["failed_reason"]


def test_the_failed_share_rule_is_interval_aware():
    # Wilson's lower bound above the allowance: certainly too many.
    assert wilson(3, 100)[0] > 0.01 and judge_failures(3, 100, 0.01)[0] == "fail"
    # More than allowed, but the interval reaches down to the allowance: too few requests to be sure.
    assert wilson(1, 50)[0] < 0.01 and judge_failures(1, 50, 0.01)[0] == "inconclusive"
    # Within the allowance.
    assert judge_failures(1, 100, 0.01)[0] == "pass" and judge_failures(0, 10, 0.01)[0] == "pass"
    # Nothing may fail: one failure in a million is certain to be more than none.
    assert judge_failures(1, 1_000_000, 0.0)[0] == "fail"
    assert judge_failures(10, 10, 1.0)[0] == "pass"
    assert judge_failures(0, 0, 0.01)[0] == "inconclusive"


def test_an_inconclusive_failed_share_keeps_passing_objectives_from_a_pass():
    recs = records(np.full(49, 0.1), failed=1)
    v = judge(recs, {"ttft_p50": 1000.0}, max_failed=0.01)
    assert v.objectives[0].verdict == "pass" and v.failed_verdict == "inconclusive" and v.overall == "inconclusive"


def test_failures_are_judged_only_when_an_allowance_is_stated():
    """The simulator's runs (no allowance) leave failures to the objectives, as before."""
    v = judge(records(np.full(100, 0.1), failed=5), {"ttft_p50": 1000.0})
    assert v.failed_verdict is None and v.overall == "pass" and v.failed_kinds == {"http_500": 5}
    assert strict_json(v.to_json())["failed_verdict"] is None


# -- objectives ----------------------------------------------------------------------------------------------


def test_an_interval_above_the_target_fails_whatever_the_sample_size():
    """13 of 40 failed: the p99 is +inf with interval [inf, inf], above any target, though 40 samples are far
    from the 1,000 a p99 pass needs."""
    v = judge(records(np.full(27, 0.05), failed=13), {"ttft_p99": 1000.0})
    [o] = v.objectives
    assert math.isinf(o.measured_ms) and o.ci_ms == (math.inf, math.inf)
    assert o.verdict == "fail" and "above the target" in o.reason and v.overall == "fail"
    # Finite samples too: ten values all far above the target fail a p99 at once.
    assert judge_objective("ttft_p99", 100.0, np.full(10, 5000.0)).verdict == "fail"
    # ...while ten values within it are still no pass.
    assert judge_objective("ttft_p99", 100.0, np.full(10, 5.0)).verdict == "inconclusive"


def test_objective_json_writes_infinity_as_null_with_a_note():
    v = judge(records(np.full(27, 0.05), failed=13), {"ttft_p99": 1000.0, "ttft_p50": 1000.0},
              predicted={"ttft_p99": math.inf}, max_failed=0.01)
    data = strict_json(v.to_json())
    by = {o["key"]: o for o in data["objectives"]}
    p99 = by["ttft_p99"]
    assert p99["measured_ms"] is None and "failed requests" in p99["measured_ms_note"]
    assert p99["ci_ms"] == [None, None] and "both ends" in p99["ci_ms_note"]
    assert p99["predicted_ms"] is None and p99["predicted_ms_note"]
    p50 = by["ttft_p50"]
    assert p50["measured_ms"] == pytest.approx(50.0) and "measured_ms_note" not in p50


def test_an_interval_open_at_the_top_notes_its_upper_end():
    values = np.concatenate([np.full(95, 10.0), np.full(5, math.inf)])
    o = judge_objective("ttft_p95", 1000.0, values).to_json()
    strict_json(o)
    assert o["ci_ms"][0] == pytest.approx(10.0) and o["ci_ms"][1] is None and "upper end" in o["ci_ms_note"]


def test_summaries_and_json_numbers_never_hold_inf_or_nan():
    with np.errstate(invalid="ignore"):  # NumPy interpolates inf - inf to NaN: the case under test
        d = distribution(np.array([0.1, math.inf]), ["p50", "p99"]).to_json()
    data = strict_json(d)
    assert data["p99"] is None and data["p99_note"] and data["mean"] is None and data["mean_note"]
    out = json_number({}, "x_ms", math.nan, "never")
    assert out["x_ms"] is None and "not a finite number" in out["x_ms_note"]
    assert json_number({}, "x_ms", 1.23456, "never") == {"x_ms": 1.235}


# -- usage counts from the server ----------------------------------------------------------------------------


def _stream(usage) -> RequestRecord:
    state = StreamState(t_send=0.0)
    state.feed('data: {"choices":[{"index":0,"delta":{"content":"a"},"finish_reason":null}]}', 0.1)
    state.feed('data: {"choices":[{"index":0,"delta":{"content":"b"},"finish_reason":"length"}]}', 0.2)
    state.feed("data: " + json.dumps({"choices": [], "usage": usage}), 0.21)
    return state.record(0, 0.0, input_tokens=16)


@pytest.mark.parametrize("bad", [-1, 1.5, "12", True, MAX_USAGE_TOKENS + 1, [3], {"n": 3}])
def test_usage_counts_that_cannot_be_counts_are_not_believed(bad):
    rec = _stream({"prompt_tokens": bad, "completion_tokens": bad})
    assert rec.ok and rec.input_tokens == 16 and rec.output_tokens == 2 and rec.approximate
    assert rec.bad_usage and "prompt_tokens" in rec.bad_usage and "completion_tokens" in rec.bad_usage


def test_believable_usage_is_kept_and_a_usage_that_is_no_object_is_refused():
    rec = _stream({"prompt_tokens": 20, "completion_tokens": 2.0})
    assert (rec.input_tokens, rec.output_tokens, rec.approximate, rec.bad_usage) == (20, 2, False, None)
    rec = _stream("lots")
    assert rec.ok and rec.input_tokens == 16 and rec.approximate and rec.bad_usage == 'usage "lots"'


@pytest.mark.parametrize("line", [
    'data: {"choices": {"delta": {"content": "a"}}}',
    'data: {"choices": ["a"]}',
    "data: [1, 2]",
    "data: {not json",
])
def test_malformed_events_fail_the_request_without_an_exception(line):
    state = StreamState(t_send=0.0)
    state.feed(line, 0.1)
    state.feed('data: {"choices":[{"index":0,"delta":{"content":"a"},"finish_reason":"stop"}]}', 0.2)
    rec = state.record(0, 0.0, input_tokens=4)
    assert not rec.ok and rec.error.startswith("bad_sse")


# -- bounded flags -------------------------------------------------------------------------------------------

LOAD = {"concurrency": None, "rate": None, "requests": 3, "duration_s": None, "input_tokens": None,
        "output_tokens": None}


@pytest.mark.parametrize("kw, flag", [
    ({"rate": 1e-300}, "--rate"),
    ({"rate": 2e6}, "--rate"),
    ({"rate": math.nan}, "--rate"),
    ({"requests": 10**9}, "--requests"),
    ({"concurrency": 10**6}, "--concurrency"),
    ({"duration_s": math.nan}, "--duration"),
    ({"duration_s": math.inf}, "--duration"),
    ({"duration_s": 0.0}, "--duration"),
    ({"rate": 1000.0, "duration_s": 86_400.0, "requests": None}, "--duration"),
    ({"input_tokens": 10**12}, "--input-tokens"),
    ({"seed": -1}, "--seed"),
])
def test_load_flags_outside_their_bounds_name_themselves(kw, flag):
    with pytest.raises(InfraError) as exc:
        plan_load(None, **{**LOAD, **kw})
    text = str(exc.value)
    assert flag in text and "To fix" in text and "\n" not in text


@pytest.mark.parametrize("kw, flag", [
    ({"timeout_s": math.nan}, "--timeout"), ({"timeout_s": 0.0}, "--timeout"), ({"timeout_s": 1e9}, "--timeout"),
    ({"warmup": -1}, "--warmup"), ({"warmup": 10**6}, "--warmup"),
    ({"max_failed": 1.5}, "--max-failed"), ({"max_failed": math.nan}, "--max-failed"),
])
def test_client_flags_outside_their_bounds_name_themselves(kw, flag):
    with pytest.raises(InfraError, match=flag):
        check_client_flags(**{"warmup": 1, "timeout_s": 60.0, **kw})


def test_sensible_flags_pass():
    check_client_flags(warmup=0, timeout_s=3600.0, max_failed=0.0)
    assert len(plan_load(None, **{**LOAD, "rate": 0.001}).requests) == 3


@pytest.mark.parametrize("kw, flag", [
    ({"port": 70000}, "--port"), ({"port": -1}, "--port"),
    ({"ttft_ms": math.nan}, "--ttft-ms"), ({"ttft_ms": -1.0}, "--ttft-ms"), ({"itl_ms": math.inf}, "--itl-ms"),
    ({"stall_ms": -5.0}, "--stall-ms"), ({"slow_start": math.nan}, "--slow-start"),
    ({"error_rate": 1.5}, "--error-rate"), ({"stall_rate": -0.1}, "--stall-rate"),
    ({"disconnect_rate": math.nan}, "--disconnect-rate"), ({"tokens_per_chunk": 0}, "--tokens-per-chunk"),
])
def test_emulator_settings_outside_their_bounds_name_their_flag(kw, flag):
    with pytest.raises(InfraError) as exc:
        check_options(**kw)
    assert str(exc.value).startswith(flag + ":") and "To fix" in str(exc.value)


def test_emulator_settings_within_bounds_pass():
    check_options(port=0, ttft_ms=0.0, itl_ms=None, error_rate=1.0, stall_rate=0.0, disconnect_rate=0.5,
                  stall_ms=3_600_000.0, slow_start=0.0, tokens_per_chunk=1)


def test_a_verification_entry_writes_an_unbounded_percentile_as_null_with_its_reason():
    beyond = ObjectiveVerdict("ttft_p99", 1000.0, math.inf, (900.0, math.inf), 40, "fail", "failed requests")
    v = Verdict("fail", [beyond], 0.6, (0.5, 0.7), 1.0, 40, 13)
    entry = _service_entry("chat", v, [])
    o = entry["objectives"][0]
    assert o["measured_ms"] is None and "infinitely slow" in o["measured_ms_note"]
    assert o["ci_ms"] == [900.0, None] and "interval" in o["ci_ms_note"]
    assert "Infinity" not in json.dumps(entry) and "NaN" not in json.dumps(entry)
    VerifiedService.model_validate(entry)  # what the plan file holds accepts it


def test_an_event_nested_past_the_decoders_recursion_fails_the_request_not_the_run():
    state = StreamState(t_send=0.0)
    state.feed("data: " + '{"choices":' + "[" * 100_000 + "]" * 100_000 + "}", 0.1)
    assert state.error is not None and state.error.startswith("bad_sse: nested too deeply")
