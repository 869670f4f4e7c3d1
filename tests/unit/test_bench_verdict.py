"""Verdicts: intervals that cover the truth, no pass on too little data, failures never dropped."""

from __future__ import annotations

import math

import numpy as np
import pytest

from infra.bench.metrics import RequestRecord
from infra.bench.verdict import judge, judge_objective, percentile_ci, wilson
from infra.catalog.metrics import MIN_TAIL


def records(ttfts_s, failed: int = 0) -> list[RequestRecord]:
    out = [RequestRecord(i, 0.0, float(i), ttft=float(t), e2e=float(t) + 1.0, output_tokens=11)
           for i, t in enumerate(ttfts_s)]
    out += [RequestRecord(len(out) + j, 0.0, 0.0, error="http 500") for j in range(failed)]
    return out


def test_bootstrap_interval_covers_the_true_percentile():
    rng = np.random.default_rng(7)
    for q in (50.0, 90.0):
        truth = -math.log(1 - q / 100)  # exponential(1)
        covered = sum(lo <= truth <= hi for lo, hi in
                      (percentile_ci(rng.exponential(1.0, 1000), q, seed=t)[1:3] for t in range(120)))
        assert covered / 120 >= 0.88, (q, covered)


def test_point_estimate_is_numpys_percentile_and_weights_mean_repeats():
    rng = np.random.default_rng(1)
    x = rng.exponential(1.0, 400).round(2)
    point, lo, hi, n = percentile_ci(x, 90, seed=3)
    assert point == pytest.approx(np.percentile(x, 90)) and lo <= point <= hi and n == 400
    values, counts = np.unique(x, return_counts=True)
    assert percentile_ci(values, 90, weights=counts, seed=3) == pytest.approx((point, lo, hi, n))


def test_too_few_samples_is_inconclusive_never_a_pass():
    v = judge_objective("ttft_p99", 10_000.0, np.full(200, 5.0))
    assert v.verdict == "inconclusive" and "needs at least" in v.reason
    enough = math.ceil(MIN_TAIL / 0.01)
    assert judge_objective("ttft_p99", 10_000.0, np.full(enough, 5.0)).verdict == "pass"


def test_clear_pass_clear_fail_and_a_target_inside_the_interval():
    rng = np.random.default_rng(2)
    x = rng.normal(100.0, 10.0, 3000)
    assert judge_objective("ttft_p50", 120.0, x).verdict == "pass"
    assert judge_objective("ttft_p50", 80.0, x).verdict == "fail"
    assert judge_objective("ttft_p50", float(np.percentile(x, 50)), x).verdict == "inconclusive"


def test_failed_requests_count_as_misses():
    recs = records([0.1] * 850, failed=150)
    verdict = judge(recs, {"ttft_p90": 1000.0, "ttft_p50": 1000.0})
    by = {o.key: o for o in verdict.objectives}
    assert by["ttft_p90"].verdict == "fail" and math.isinf(by["ttft_p90"].measured_ms)
    assert by["ttft_p50"].verdict == "pass"
    assert verdict.overall == "fail" and verdict.failed == 150 and verdict.notes
    assert verdict.attainment == pytest.approx(0.85)


def test_service_verdict_and_attainment_interval():
    recs = records(np.linspace(0.05, 0.15, 2000))
    verdict = judge(recs, {"ttft_p99": 200.0, "e2e_p50": 2000.0}, attainment_target=0.95,
                    predicted={"ttft_p99": 140.0})
    assert verdict.overall == "pass" and verdict.attainment_verdict == "pass"
    assert verdict.objectives[1].predicted_ms == 140.0
    lo, hi = wilson(90, 100)
    assert lo < 0.9 < hi and wilson(0, 0) == (0.0, 1.0)


def test_an_attainment_short_of_its_target_fails_the_service_though_each_percentile_passes():
    """TTFT p95 and E2E p95 each pass, but the slow TTFTs and the slow E2Es are different requests: only 92% of
    requests are within both bounds, well short of a 99% attainment."""
    n = 2000
    ttft = np.full(n, 0.1)
    ttft[:80] = 0.5  # 4% of requests with a slow first token...
    recs = [RequestRecord(i, 0.0, float(i), ttft=float(t), e2e=float(t) + (5.0 if 80 <= i < 160 else 1.0),
                          output_tokens=11) for i, t in enumerate(ttft)]  # ...and another 4% slow to finish
    verdict = judge(recs, {"ttft_p95": 400.0, "e2e_p95": 3000.0}, attainment_target=0.99)
    assert all(o.verdict == "pass" for o in verdict.objectives)
    assert verdict.attainment == pytest.approx(0.92) and verdict.attainment_verdict == "fail"
    assert verdict.overall == "fail"
    assert judge(recs, {"ttft_p95": 400.0, "e2e_p95": 3000.0}, attainment_target=0.85).overall == "pass"
