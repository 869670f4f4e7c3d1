"""Objectives judged on a window's latency histograms (`infra verify --prometheus`): a percentile is known to the
bucket that holds its rank, a mean exactly."""

from __future__ import annotations

import math

import pytest

from infra.bench.observe import Observation
from infra.bench.scrape import Series, bucket_at
from infra.catalog.metrics import needed
from infra.bench.window_verdict import judge_series, judge_window, pooled_prediction


def _series(values_s: list[float], bounds: tuple[float, ...] = (0.05, 0.1, 0.25, 0.5, 1.0)) -> Series:
    """The histogram a Prometheus client keeps of `values_s` (cumulative buckets, +Inf last)."""
    buckets = tuple((b, float(sum(v <= b for v in values_s))) for b in bounds) + ((math.inf, float(len(values_s))),)
    return Series(sum(values_s), float(len(values_s)), buckets)


def test_the_bucket_of_a_percentile_is_the_one_holding_its_rank():
    s = _series([0.08] * 980 + [0.3] * 20)
    assert bucket_at(s, 0.5) == (0.05, 0.1, 0.0, 980.0)
    assert bucket_at(s, 0.98) == (0.05, 0.1, 0.0, 980.0)
    assert bucket_at(s, 0.99) == (0.25, 0.5, 980.0, 1000.0)
    assert bucket_at(_series([2.0] * 10), 0.5) == (1.0, math.inf, 0.0, 10.0)
    assert bucket_at(Series(0.0, 0.0), 0.5) is None


def test_a_percentile_passes_fails_or_stays_open_by_its_bucket():
    fast = _series([0.08] * 2000)
    assert judge_series("ttft_p99", 100.0, fast, "").verdict == "pass"
    assert judge_series("ttft_p99", 100.0, fast, "").ci_ms == (50.0, 100.0)
    # The target inside the bucket that holds p99: the buckets cannot tell.
    inside = judge_series("ttft_p99", 80.0, fast, "")
    assert inside.verdict == "inconclusive" and "around the target" in inside.reason
    # The whole bucket above the target fails, on any number of requests.
    slow = judge_series("ttft_p99", 200.0, _series([0.3] * 40), "")
    assert slow.verdict == "fail" and slow.ci_ms == (250.0, 500.0) and slow.n == 40
    # Within the target, but too few requests lie beyond p99 to say so.
    few = judge_series("ttft_p99", 100.0, _series([0.08] * 500), "")
    assert few.verdict == "inconclusive" and "needs at least 1,000" in few.reason
    # Past the last finite bucket: an open interval, above a target below its lower end, open about any other.
    beyond = judge_series("e2e_p90", 800.0, _series([3.0] * 100), "")
    assert beyond.verdict == "fail" and beyond.ci_ms == (1000.0, math.inf) and beyond.measured_ms is None
    assert judge_series("e2e_p90", 5000.0, _series([3.0] * 100), "").verdict == "inconclusive"


def test_a_mean_is_the_windows_sum_over_its_count():
    s = _series([0.1] * 30 + [0.4] * 10)
    v = judge_series("ttft_mean", 200.0, s, "", predicted_ms=150.0)
    assert v.measured_ms == pytest.approx(175.0) and v.verdict == "pass" and v.predicted_ms == 150.0
    assert judge_series("ttft_mean", 170.0, s, "").verdict == "fail"
    assert judge_series("ttft_mean", 170.0, _series([0.4] * 10), "").verdict == "inconclusive"


def test_a_window_fails_when_one_objective_fails_and_says_what_it_cannot_judge():
    obs = Observation("src", "2026-12-06T00:00:00+00:00", 60.0, 2000, 33.3, 128, 16, 0.0, 0.0, 80.0, 30.0,
                      latency={"ttft": _series([0.08] * 2000)}, engine="SGLang")
    judged, overall = judge_window(obs, {"ttft_p99": 100.0, "tpot_p99": 40.0}, {"ttft_p99": 90.0})
    by = {o.key: o for o in judged}
    assert by["ttft_p99"].verdict == "pass" and by["ttft_p99"].predicted_ms == 90.0
    assert by["tpot_p99"].verdict == "inconclusive" and "per gap" in by["tpot_p99"].reason
    assert overall == "inconclusive"
    _, failed = judge_window(obs, {"ttft_p99": 40.0, "tpot_p99": 40.0})
    assert failed == "fail"
    _, held = judge_window(obs, {"ttft_p99": 100.0})
    assert held == "pass"


def test_a_percentile_needs_ten_observations_beyond_it():
    assert [needed(q) for q in (50, 90, 95, 99, 99.67, 99.9)] == [20, 100, 200, 1000, 3031, 10000]


def _predicted(scale: float) -> dict[str, float]:
    return {"ttft_mean": 100 * scale, "ttft_p50": 90 * scale, "ttft_p90": 150 * scale, "ttft_p95": 180 * scale,
            "ttft_p99": 250 * scale, "ttft_p99.9": 400 * scale}


def test_windows_predicted_at_their_own_loads_pool_as_their_requests_do():
    same = pooled_prediction([_predicted(1), _predicted(1)], [100, 300], [0, 0])
    assert same["ttft_mean"] == pytest.approx(100) and same["ttft_p99"] == pytest.approx(250, rel=1e-6)
    mixed = pooled_prediction([_predicted(1), _predicted(2)], [100, 300], [0, 0])
    assert mixed["ttft_mean"] == pytest.approx(175)
    # The busier, slower window holds three quarters of the requests: the pooled p99 is near its own.
    assert 250 < mixed["ttft_p99"] < 500 and mixed["ttft_p99"] > 0.8 * 500
    assert mixed["ttft_p50"] > 90 and "tpot_mean" not in mixed
