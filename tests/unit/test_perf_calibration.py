"""Calibrated physics of the performance model: collective latency, the speculative decoding of the measured
disaggregated recipes, and the decode batch of a closed loop."""

from __future__ import annotations

import dataclasses

import pytest

from infra.catalog.loader import load_catalog
from infra.perf.arch import compile_worker
from infra.perf.calibration import Factors
from infra.perf.estimate import build_workers, predict
from infra.perf.replay import Case, as_measured
from infra.perf.replay import predict as replay_predict
from infra.perf.shape import Deployment, Parallel, Role, Workload

CAT = load_catalog()


def _worker(tp: int, factors: Factors = Factors()):
    return compile_worker(CAT.model("Llama-3.1-70B"), CAT.device("H200"), "fp8", Parallel(tp=tp), factors)


def test_collective_latency_costs_every_all_reduce_of_a_tensor_parallel_step():
    slow = Factors(collective_us=30.0)
    fast = Factors(collective_us=5.0)
    assert _worker(1, slow).step(8, 2000) == pytest.approx(_worker(1, fast).step(8, 2000))
    w_slow, w_fast = _worker(8, slow), _worker(8, fast)
    # Two all-reduces per layer: 160 for 80 layers, each 25 us dearer.
    assert w_slow.step(8, 2000) - w_fast.step(8, 2000) == pytest.approx(160 * 25e-6, rel=1e-6)


def _disagg_case(recipe: bool) -> Case:
    dep = Deployment("Llama-3.1-70B", "H200", "vllm", "fp8", "disagg",
                     prefill=Role(Parallel(tp=4), workers=1), decode=Role(Parallel(tp=4), workers=1))
    return Case({}, "vllm/H200", "Llama-3.1-70B", dep, Workload(isl=1000, osl=500, concurrency=32), 100.0, 10.0,
                recipe=recipe)


def test_recipe_speculation_applies_to_measured_decode_workers_only():
    f = Factors(recipe_accept=1.5)
    case = _disagg_case(recipe=True)
    assert as_measured(case, "decode", f).accept == pytest.approx(1.5)
    assert as_measured(case, "prefill", f).accept == 1.0
    assert as_measured(_disagg_case(recipe=False), "decode", f).accept == 1.0
    measured = replay_predict(case, CAT, factors=f)
    own = replay_predict(_disagg_case(recipe=False), CAT, factors=f)
    assert isinstance(measured, tuple) and isinstance(own, tuple) and measured[1] < own[1]
    # A plan's estimate never assumes the recipes' speculation.
    workers, _, link = build_workers(case.deployment, CAT, factors=f)
    assert predict(case.deployment, case.workload, workers, link).tpot["mean"] * 1e3 == pytest.approx(own[1])


def test_closed_loop_decode_batch_holds_only_clients_past_their_first_token():
    dep = dataclasses.replace(_disagg_case(recipe=False).deployment)
    workers, _, link = build_workers(dep, CAT)
    long_prompts = predict(dep, Workload(isl=16000, osl=200, concurrency=64), workers, link)
    assert long_prompts.batch < 64 * 0.9
    e2e = long_prompts.ttft["mean"] + 199 * long_prompts.tpot["mean"]
    assert long_prompts.batch == pytest.approx(64 * 199 * long_prompts.tpot["mean"] / e2e, rel=0.01)
