"""The vectorised closed loop (`infra.perf.vector_closed.predict_closed_agg`) against the scalar `closed_loop_agg`,
case by case: with the C library's expm1 (`exact`) the same predictions to the last bit, over a sweep of catalog
deployments and client counts that reaches each of its regimes (a single client, the decoding count found by
Little's law, the steps' token budget full, clients queueing for batch slots, a request that does not fit)."""

from __future__ import annotations

import dataclasses
import gc
import random

import pytest

from infra.errors import InfraError
from infra.perf.estimate import VECTOR_MIN, compile_deployment, estimate, estimates
from infra.perf.serving import closed_loop_agg, disagg
from infra.perf.shape import Deployment, Parallel, Role, Workload
from infra.perf.vector import predict_open_agg
from infra.perf.vector_closed import predict_closed_agg, predict_closed_disagg
from tests.unit.test_perf_vector import CAT, MIXES, WORKERS, _cases, _difference, _pd_pairs, _role

CLIENTS = (1, 2, 3, 8, 32, 100, 512, 4096)


def _closed(rng: random.Random, clients: float) -> Workload:
    isl, osl, isl_cv, osl_cv = rng.choice(MIXES)
    return Workload(isl=isl, osl=osl, concurrency=clients, isl_cv=isl_cv, osl_cv=osl_cv,
                    prefix_hit=rng.choice((0.0, 0.0, 0.5)))


def _regime(case, pred) -> str:
    w, role, wl = case
    if not pred.stable:
        return "no fit"
    if pred.assumptions:
        return "budget full"
    groups = (role.workers or 1) * w.parallel.attention_dp
    if wl.concurrency / groups > pred.batch / pred.load + 1e-9:
        return "slots"
    return "one client" if wl.concurrency == groups else "little"


@pytest.fixture(scope="module")
def sweep():
    rng = random.Random(17)
    cases = []
    for _ in range(2500):
        w, role = rng.choice(WORKERS)
        cases.append((w, _role(rng, role), _closed(rng, rng.choice(CLIENTS))))
    return cases, [closed_loop_agg(*c) for c in cases]


def test_vector_closed_loop_equals_the_scalar_one_to_the_last_bit(sweep):
    cases, want = sweep
    got = predict_closed_agg(cases, exact=True)
    for case, a, b in zip(cases, want, got):
        assert a == b, f"{case[0].parallel} {case[1]} {case[2]}:\n  scalar {a}\n  vector {b}"
    regimes = {_regime(c, p) for c, p in zip(cases, want)}
    assert regimes == {"no fit", "budget full", "slots", "one client", "little"}, f"the sweep reached {regimes}"


def test_with_numpys_expm1_it_is_the_scalar_one_to_1e_7(sweep):
    """A last-bit difference in a MoE step can end a solver elsewhere in its final bracket (the decoding count's to
    1e-10), which the TTFT's queue magnifies by 1 / (1 - rho) near the loop's knee, a thousandfold at most where
    rho is held at 0.999 (the sweep's worst: 470-fold, 512 clients of one-token prompts and answers)."""
    cases, want = sweep
    worst = max(_difference(a, b) for a, b in zip(want, predict_closed_agg(cases)))
    assert worst <= 1e-7


def test_a_batch_is_what_each_case_gives_alone(sweep):
    cases, want = sweep
    picked = random.Random(4).sample(range(len(cases)), 60)
    for i in picked:
        assert predict_closed_agg([cases[i]], exact=True) == [want[i]]


def test_factors_the_catalog_leaves_at_zero_are_priced_alike():
    """Speculative decoding, a scheduler that polls, an attention-DP balancer that holds prompts, a first wave
    all the clients join."""
    rng = random.Random(12)
    cases = []
    for w, role in rng.sample(WORKERS, 40):
        f = dataclasses.replace(w.factors, accept=1.7, draft_tokens=1.0, poll_steps=4.0, balance_steps=20.0,
                                queue=rng.choice((0.0, 0.3, 1.0)))
        worker = dataclasses.replace(w, factors=f)
        cases += [(worker, role, _closed(rng, clients)) for clients in CLIENTS]
    assert predict_closed_agg(cases, exact=True) == [closed_loop_agg(*c) for c in cases]


def test_no_cases_and_open_loops():
    assert predict_closed_agg([]) == []
    w, role = WORKERS[0]
    with pytest.raises(ValueError, match="clients"):
        predict_closed_agg([(w, role, Workload(isl=128, osl=16, rate=4.0))])


def test_estimates_at_client_counts_are_those_of_each_alone():
    one = compile_deployment(Deployment("Qwen3-235B-A22B", "H200", "vllm", "fp8",
                                        agg=Role(Parallel(tp=4, ep=8, moe_tp=1, attention_dp=2))), CAT)
    pd = compile_deployment(Deployment("Llama-3.1-70B", "H200", "vllm", "fp8", "disagg",
                                       prefill=Role(Parallel(tp=4)), decode=Role(Parallel(tp=4), workers=2)), CAT)
    rng = random.Random(6)
    loads = [(c, _closed(rng, rng.choice(CLIENTS))) for c in (one, pd) for _ in range(2 * VECTOR_MIN)]
    loads = [(c, wl) for c, wl in loads if wl.osl > 1]
    for (c, wl), est in zip(loads, estimates(loads)):
        alone = c.at(wl)
        assert est.prediction == alone.prediction
        assert (est.devices, est.notes, est.workload) == (alone.devices, alone.notes, alone.workload)


def test_a_vector_pass_leaves_nothing_that_only_the_cyclic_collector_frees(sweep):
    """The passes run with the collector paused and hand what they made to its oldest generation, which a full
    collection rarely visits: a cycle left by every pass (a solver's frame and the step it priced with) grew a
    refit, a thousand passes, by gigabytes."""
    cases, _ = sweep
    open_loops = _cases(100, seed=3)
    gc.collect()
    predict_closed_agg(cases[:400], exact=True)
    predict_open_agg(open_loops)
    assert gc.collect() == 0


def _pd_kind(case, pred) -> str:
    wp, wd, prefill, decode, wl, _ = case
    if not pred.stable:
        return "no fit"
    groups = pred.workers["decode"] * wd.parallel.attention_dp
    if wl.concurrency / groups > pred.batch / pred.load + 1e-9:
        return "clients past the decode batch"
    # Clients whose lengths vary dephase (a steady state solved by bisection); in step, every round is a burst.
    return "held, dephased" if wl.isl_cv > 0 or wl.osl_cv > 0 else "held, in step"


def test_vector_disaggregated_closed_loop_equals_the_scalar_one_to_the_last_bit():
    rng = random.Random(21)
    pairs = _pd_pairs()
    cases = []
    for _ in range(1500):
        wp, wd, prefill, decode, link = rng.choice(pairs)
        wl = _closed(rng, rng.choice(CLIENTS))
        if wl.osl > 1:
            cases.append((wp, wd, prefill, decode, wl, link))
    want = [disagg(*c) for c in cases]
    assert predict_closed_disagg(cases, exact=True) == want
    assert {_pd_kind(c, p) for c, p in zip(cases, want)} == {"no fit", "clients past the decode batch",
                                                              "held, dephased", "held, in step"}
    notes = {p.assumptions[0].split(" worker(s)")[0] for p in want if p.assumptions}
    assert len(notes) >= 3, notes  # prefill, decode, or both sized by the model
    assert any(p.stable and not p.assumptions for p in want)


def test_a_prompt_the_prefix_cache_holds_whole_still_computes_its_last_token():
    dep = Deployment("Llama-3.1-70B", "H200", "vllm", "fp8", "disagg", prefill=Role(Parallel(tp=4)),
                     decode=Role(Parallel(tp=4)))
    for load in ({"concurrency": 8}, {"rate": 2.0}):
        cached = estimate(dep, Workload(isl=4096, osl=64, prefix_hit=1.0, **load), CAT).prediction
        fresh = estimate(dep, Workload(isl=4096, osl=64, **load), CAT).prediction
        assert cached.stable and 0 < cached.ttft["mean"] < fresh.ttft["mean"]
    one = compile_deployment(dep, CAT)
    loads = [(one, Workload(isl=4096, osl=64, concurrency=c, prefix_hit=h)) for c in range(1, 17) for h in (0.5, 1.0)]
    assert [e.prediction for e in estimates(loads)] == [one.at(wl).prediction for _, wl in loads]


def test_one_token_answers_of_a_disaggregated_closed_loop_are_refused_with_a_reason():
    dep = Deployment("Llama-3.1-70B", "H200", "vllm", "fp8", "disagg", prefill=Role(Parallel(tp=4)),
                     decode=Role(Parallel(tp=4)))
    with pytest.raises(InfraError, match="decode workers of a disaggregated deployment have nothing to do"):
        estimate(dep, Workload(isl=512, osl=1, concurrency=4), CAT)
    assert estimate(dep, Workload(isl=512, osl=2, concurrency=4), CAT).prediction.stable
