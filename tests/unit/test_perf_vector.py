"""The vectorised open loop (`infra.perf.vector.predict_open_agg`) against the scalar `open_loop_agg`, case by case:
the same predictions, field for field (to 1e-9 relative), over a sweep of catalog deployments and workloads that
reaches every kind of result (stable, and each unstable one).

Where the batch slots end a deployment's capacity, the slots' Erlang wait is unstable only within some 1e-11 of
the capacity, where the wait's (slots - offered load) keeps a dozen fewer digits than its terms: a last-bit
difference in a step moves it by up to 1e-4. Steps of dense models are exact in both models, but a MoE step
takes an expm1, which numpy's SIMD routine and the C library's round differently in the last bit; so that
stretch is compared on dense models, and on MoE models with the C library's expm1 (`exact=True`)."""

from __future__ import annotations

import dataclasses
import itertools
import math
import random

import numpy as np
import pytest

from infra.catalog.loader import load_catalog
from infra.errors import InfraError
from infra.perf import serving, vector
from infra.perf.estimate import (
    VECTOR_MIN,
    Compiled,
    Pending,
    build_workers,
    compile_deployment,
    estimates,
    max_rate_search,
    run_search,
    run_searches,
)
from infra.perf.serving import Prediction, open_loop_agg
from infra.perf.shape import Deployment, Parallel, Role, Workload
from infra.perf.vector import predict_open_agg, predict_open_disagg

CAT = load_catalog()
MODELS = ("Llama-3.1-8B", "Llama-3.1-70B", "Qwen3-32B", "Qwen3-235B-A22B", "DeepSeek-V3", "gpt-oss-120b",
          "Qwen3-Next-80B-A3B", "DeepSeek-V3.2")
DEVICES = ("H100-SXM", "H200", "B200", "A100-80G", "L40S", "MI300X", "Ascend-910B3")
ROLES = ((None, 8192, 1), (16, 512, 1), (64, 2048, 2))
"""(batch cap, max_num_tokens, attention-DP groups of a MoE model)."""
MIXES = ((2048, 256, 0.0, 0.0), (512, 2048, 0.5, 1.0), (128, 64, 0.0, 0.3), (8192, 1024, 1.0, 0.0),
         (30000, 16, 0.3, 0.5), (1, 1, 0.0, 0.0))
"""(prompt, answer, prompt CV, answer CV)."""
REL = 1e-9
KINDS = ("stable", "one request does not fit", "arrival rate exceeds what the replicas", "prompts arrive faster",
         "arrival rate exceeds what the batch slots", "arrival rate is past the point")


def _workers() -> list[tuple[object, Role]]:
    """(worker, role) for every layout of the sweep that fits its device."""
    out = []
    for name, device, tp in itertools.product(MODELS, DEVICES, (1, 2, 4, 8)):
        model = CAT.model(name)
        framework = "vllm-ascend" if device.startswith("Ascend") else "vllm"
        precision = model.native_precision if model.native_precision in CAT.device(device).precisions else "bf16"
        for cap, budget, dp in ROLES:
            dp = dp if model.moe else 1
            par = Parallel(tp=tp, ep=tp * dp, moe_tp=1, attention_dp=dp) if model.moe else Parallel(tp=tp)
            role = Role(par, batch_cap=cap, max_num_tokens=budget)
            try:
                workers = build_workers(Deployment(name, device, framework, precision, agg=role), CAT)[0]
            except InfraError:  # layouts that do not fit or do not divide the model
                continue
            out.append((workers["agg"], role))
    return out


WORKERS = _workers()


def _workload(rng: random.Random, rate: float) -> Workload:
    isl, osl, isl_cv, osl_cv = rng.choice(MIXES)
    quantiles = rng.choice(((), (("p90", 2.7),), (("p50", 0.8), ("p99", 4.0), ("p99.9", 6.0), ("p75", 1.5))))
    return Workload(isl=isl, osl=osl, rate=rate, isl_cv=isl_cv, osl_cv=osl_cv, arrival_cv=rng.choice((0.0, 1.0, 2.0)),
                    prefix_hit=rng.choice((0.0, 0.0, 0.5, 0.9)), peers=rng.choice((1, 1, 4)), isl_quantiles=quantiles)


def _role(rng: random.Random, role: Role) -> Role:
    return dataclasses.replace(role, workers=rng.choice((None, None, 2, 3)))


def _capacities(configs: list[tuple[object, Role, Workload]]) -> list[float]:
    """The largest stable rate of each (worker, role, workload) from its own rate up (0 where that is unstable
    already), to some 1e-12, found with the vector model: the rate quadrupled until unstable, then its log
    bisected, all configurations at once."""
    at = [wl.rate for _, _, wl in configs]
    lo = [0.0] * len(configs)
    hi = [math.inf] * len(configs)
    for _ in range(24):
        preds = predict_open_agg([(w, r, dataclasses.replace(wl, rate=x)) for (w, r, wl), x in zip(configs, at)])
        for i, p in enumerate(preds):
            if math.isinf(hi[i]):
                if p.stable:
                    lo[i], at[i] = at[i], at[i] * 4
                else:
                    hi[i] = at[i]
    for _ in range(40):
        mids = [math.sqrt(a * b) if a > 0 and math.isfinite(b) else b for a, b in zip(lo, hi)]
        preds = predict_open_agg([(w, r, dataclasses.replace(wl, rate=x if math.isfinite(x) else 1.0))
                                  for (w, r, wl), x in zip(configs, mids)])
        for i, p in enumerate(preds):
            if lo[i] > 0 and math.isfinite(hi[i]):
                lo[i], hi[i] = (mids[i], hi[i]) if p.stable else (lo[i], mids[i])
    return lo


def _cases(n: int, seed: int) -> list[tuple[object, Role, Workload]]:
    """Random deployments of the sweep at rates from a trickle to far past saturation, and around their
    capacities: just below, and past them, where every kind of unstable result but the slots' lies."""
    rng = random.Random(seed)
    cases = []
    for _ in range(n):
        w, role = rng.choice(WORKERS)
        cases.append((w, _role(rng, role), _workload(rng, 10 ** rng.uniform(-3, 3.5))))
    near = [(w, _role(rng, role), _workload(rng, 1e-3)) for w, role in rng.sample(WORKERS, 150)]
    for (w, role, wl), top in zip(near, _capacities(near)):
        for f in (0.5, 0.999, 1 + 1e-6, 1.001, 1.01, 1.1, 2.0) if top > 0 else ():
            cases.append((w, role, dataclasses.replace(wl, rate=top * f)))
    return cases


def _knife_edge_cases(seed: int, moe: bool = False) -> list[tuple[object, Role, Workload]]:
    """Deployments with a batch cap, dense or MoE, within 1e-12 of their capacity (where the slots end it, if they
    do)."""
    rng = random.Random(seed)
    near = [(w, _role(rng, role), _workload(rng, 1e-3)) for w, role in WORKERS
            if role.batch_cap and bool(w.experts) == moe]
    if moe:
        near = rng.sample(near, 60)
    cases = []
    for (w, role, wl), top in zip(near, _capacities(near)):
        for f in (1 - 1e-12, 1 + 1e-12, 1 + 1e-11) if top > 0 else ():
            cases.append((w, role, dataclasses.replace(wl, rate=top * f)))
    return cases


def _rel(a: float, b: float) -> float:
    if a == b:
        return 0.0
    if not (math.isfinite(a) and math.isfinite(b)):
        return math.inf
    return abs(a - b) / max(abs(a), abs(b))


def _difference(want: Prediction, got: Prediction) -> float:
    """The largest relative difference between two predictions' figures; inf where anything else differs."""
    if (want.stable, want.assumptions, want.workers) != (got.stable, got.assumptions, got.workers):
        return math.inf
    worst = max(_rel(getattr(want, f), getattr(got, f))
                for f in ("throughput_rps", "output_tokens_per_s", "batch", "load"))
    for metric in ("ttft", "tpot", "itl", "e2e"):
        a, b = getattr(want, metric), getattr(got, metric)
        if list(a) != list(b):
            return math.inf
        worst = max(worst, *(_rel(a[k], b[k]) for k in a))
    return worst


def _assert_same(cases, want: list[Prediction], got: list[Prediction]) -> float:
    assert len(got) == len(want)
    worst = 0.0
    for case, a, b in zip(cases, want, got):
        d = _difference(a, b)
        assert d <= REL, f"{case[0].parallel} {case[1]} {case[2]}:\n  scalar {a}\n  vector {b}"
        worst = max(worst, d)
    return worst


def _kind(p: Prediction) -> str:
    return "stable" if p.stable else next(k for k in KINDS if p.assumptions[0].startswith(k))


@pytest.fixture(scope="module")
def sweep():
    cases = _cases(4000, seed=7)
    return cases, [open_loop_agg(*c) for c in cases]


def test_vector_open_loop_equals_the_scalar_one_case_by_case(sweep):
    cases, want = sweep
    _assert_same(cases, want, predict_open_agg(cases))
    kinds = {_kind(p) for p in want}
    assert kinds == set(KINDS[:4]), f"the sweep reached {sorted(kinds)}"
    assert sum(p.stable for p in want) > len(want) // 5


@pytest.mark.parametrize("moe", [False, True])
def test_at_the_capacity_the_batch_slots_set_it_ends_alike(moe):
    cases = _knife_edge_cases(seed=9, moe=moe)
    want = [open_loop_agg(*c) for c in cases]
    _assert_same(cases, want, predict_open_agg(cases, exact=moe))
    assert "arrival rate exceeds what the batch slots" in {_kind(p) for p in want}


def test_a_mixed_batch_equals_one_call_per_case_and_one_per_worker(sweep):
    cases, want = sweep
    which = random.Random(3).sample(range(len(cases)), 300)
    picked = [cases[i] for i in which]
    batch = predict_open_agg(picked)
    alone = [predict_open_agg([case])[0] for case in picked]
    _assert_same(picked, batch, alone)
    _assert_same(picked, [want[i] for i in which], batch)
    by_worker: dict[int, list[int]] = {}
    for i, (w, _, _) in enumerate(picked):
        by_worker.setdefault(id(w), []).append(i)
    for group in by_worker.values():
        alike = [picked[i] for i in group]
        _assert_same(alike, [batch[i] for i in group], predict_open_agg(alike))


def test_factors_the_catalog_leaves_at_zero_are_priced_alike():
    """Speculative decoding (draft tokens, more than a token a step), a scheduler that polls and an attention-DP
    balancer that holds prompts, and a per-token MoE routing cost: terms the calibrated factors mostly leave out."""
    rng = random.Random(11)
    moe = [(w, r) for w, r in WORKERS if w.experts and w.parallel.attention_dp > 1]
    dense = [(w, r) for w, r in WORKERS if not w.experts]
    cases = []
    for w, role in rng.sample(moe, 10) + rng.sample(dense, 10):
        f = dataclasses.replace(w.factors, accept=1.7, draft_tokens=1.0, poll_steps=4.0, balance_steps=20.0,
                                moe_ns=40.0)
        worker = dataclasses.replace(w, factors=f)
        for rate in (0.01, 0.3, 3.0, 30.0, 300.0):
            cases.append((worker, role, _workload(rng, rate)))
    _assert_same(cases, [open_loop_agg(*c) for c in cases], predict_open_agg(cases))


def test_a_batch_that_keeps_growing_is_unstable_alike(monkeypatch):
    """No catalog deployment reaches the check on the batch's spread (the slots or the climb stop it first), so
    both models get a tipping point five times nearer, the same in each, to take that branch."""
    def tips_early(batch_sd):
        def sd(lam, b, slope, osl):
            return batch_sd(lam * 5, b, slope, osl)
        return sd

    monkeypatch.setattr(serving, "_batch_sd", tips_early(serving._batch_sd))
    monkeypatch.setattr(vector, "_batch_sd", tips_early(vector._batch_sd))
    rng = random.Random(5)
    cases = [(w, _role(rng, role), _workload(rng, 10 ** rng.uniform(-2, 2))) for w, role in rng.sample(WORKERS, 150)]
    want = [open_loop_agg(*c) for c in cases]
    assert any(not p.stable and p.assumptions[0].startswith("arrival rate is past the point") for p in want)
    _assert_same(cases, want, predict_open_agg(cases))


def test_no_cases_and_closed_loops():
    assert predict_open_agg([]) == []
    w, role = WORKERS[0]
    with pytest.raises(ValueError, match="rate"):
        predict_open_agg([(w, role, Workload(isl=128, osl=16, concurrency=4))])


def test_a_file_of_cases_gives_what_each_case_gives_alone():
    from infra.errors import Location
    from infra.perf.cases import case_from, run_case, run_cases

    cat = load_catalog()
    rows = [
        {"model": "Llama-3.1-8B", "device": "H100-SXM", "isl": 2048, "osl": 256, "rate": r, "slo": {"ttft_p99": "1s"}}
        for r in (0.5, 5, 40, 400)] + [
        {"model": "Qwen3-235B-A22B", "device": "H200", "tp": 8, "ep": 8, "precision": "fp8", "isl": "4k",
         "osl": 512, "rate": r, "isl_cv": 0.5, "osl_cv": 0.5} for r in (1, 10, 30)] + [
        {"model": "Llama-3.1-70B", "device": "H200", "tp": 4, "isl": 1024, "osl": 128, "concurrency": 16},
        {"model": "Llama-3.1-8B", "device": "L4", "isl": 2048, "osl": 256, "rate": 2, "max_rate": True,
         "slo": {"ttft_p99": "2s", "tpot_p99": "80ms"}},
        {"model": "Llama-3.1-70B", "device": "L4", "isl": 1024, "osl": 128, "rate": 1},
        {"model": "Llama-3.1-8B", "device": "L4", "isl": "1M", "osl": 128, "rate": 1},
    ]
    cases = [case_from(row, Location(path="")) for row in rows]
    together = run_cases(cases, cat)
    for case, got in zip(cases, together):
        try:
            alone = run_case(case, cat)
        except InfraError as exc:
            assert isinstance(got, InfraError) and got.problems == exc.problems
        else:
            assert got == alone
    assert sum(isinstance(r, InfraError) for r in together) == 2


PD_KINDS = ("stable", "one request does not fit decode", "arrival rate exceeds what the workers",
            "arrival rate exceeds what the decode batch slots", "arrival rate is past the point")


def _pd_pairs() -> list[tuple[object, object, Role, Role, float]]:
    """(prefill worker, decode worker, their roles, link bytes/s) for disaggregated layouts of the sweep that fit:
    worker counts given or left to the model, batch caps set or left to memory, decode in attention-DP groups."""
    out = []
    for name, device, tp in itertools.product(MODELS[:6], DEVICES[:4], (2, 4, 8)):
        model = CAT.model(name)
        precision = model.native_precision if model.native_precision in CAT.device(device).precisions else "bf16"
        par = Parallel(tp=tp, ep=tp, moe_tp=1) if model.moe else Parallel(tp=tp)
        wide = Parallel(tp=1, ep=tp, moe_tp=1, attention_dp=tp) if model.moe else par
        for (p, d), cap, budget in itertools.product(((1, 1), (2, 1), (1, 4), (None, None), (1, None)),
                                                     (None, 16), (8192, 1024)):
            prefill = Role(par, batch_cap=cap, workers=p, max_num_tokens=budget)
            decode = Role(wide if d == 4 else par, batch_cap=cap, workers=d)
            try:
                workers, _, link = build_workers(Deployment(name, device, "vllm", precision, "disagg",
                                                            prefill=prefill, decode=decode), CAT)
            except InfraError:
                continue
            out.append((workers["prefill"], workers["decode"], prefill, decode, link))
    return out


def _pd_kinds(cases: list[tuple]) -> set[str]:
    """Compare the vector and the scalar disaggregated open loops case by case; the kinds of result reached."""
    want = [serving.disagg(*c) for c in cases]
    got = predict_open_disagg(cases, exact=True)
    assert len(got) == len(want)
    for case, a, b in zip(cases, want, got):
        assert _difference(a, b) <= REL, f"{case[2]} {case[3]} {case[4]}:\n  scalar {a}\n  vector {b}"
    return {"stable" if p.stable else next(k for k in PD_KINDS if p.assumptions[0].startswith(k)) for p in want}


def _pd_edges(configs: list[tuple]) -> list[float]:
    """The largest stable rate of each disaggregated case from its own rate up (0 where that is unstable), to
    some 1e-9: quadrupled until unstable, then its log bisected, all cases at once with the vector model."""
    at, lo, hi = [c[4].rate for c in configs], [0.0] * len(configs), [math.inf] * len(configs)

    def stable(rates: list[float]) -> list[bool]:
        return [p.stable for p in predict_open_disagg([(*c[:4], dataclasses.replace(c[4], rate=x), c[5])
                                                       for c, x in zip(configs, rates)])]

    for _ in range(24):
        for i, ok in enumerate(stable(at)):
            if math.isinf(hi[i]):
                lo[i], at[i], hi[i] = (at[i], at[i] * 4, hi[i]) if ok else (lo[i], at[i], at[i])
    for _ in range(36):
        mids = [math.sqrt(a * b) if a > 0 and math.isfinite(b) else 1.0 for a, b in zip(lo, hi)]
        for i, ok in enumerate(stable(mids)):
            if lo[i] > 0 and math.isfinite(hi[i]):
                lo[i], hi[i] = (mids[i], hi[i]) if ok else (lo[i], mids[i])
    return lo


def test_vector_disaggregated_open_loop_equals_the_scalar_one_case_by_case():
    rng = random.Random(11)
    pairs = _pd_pairs()
    cases = [(wp, wd, p, d, _workload(rng, 10 ** rng.uniform(-3, 3.5)), link)
             for wp, wd, p, d, link in (rng.choice(pairs) for _ in range(2000))]
    near = [(wp, wd, p, d, _workload(rng, 1e-3), link) for wp, wd, p, d, link in rng.sample(pairs, 300)]
    for case, top in zip(near, _pd_edges(near)):
        for f in (0.5, 0.999, 1 + 1e-6, 1.001, 1.1) if top > 0 else ():
            cases.append((*case[:4], dataclasses.replace(case[4], rate=top * f), case[5]))
    assert _pd_kinds(cases) >= set(PD_KINDS[:3])
    assert predict_open_disagg([]) == []
    with pytest.raises(ValueError, match="rate"):
        predict_open_disagg([(*cases[0][:4], Workload(isl=128, osl=16, concurrency=4), cases[0][5])])


def test_a_full_or_growing_decode_batch_is_unstable_alike(monkeypatch):
    """No catalog deployment reaches the decode slots' or the batch spread's checks (the decode batch reaching its
    cap stops it first), so both models get slots that fill and a tipping point nearer, the same in each."""
    def busier(fn, k):
        return lambda lam, *rest: fn(lam * k, *rest)

    monkeypatch.setattr(serving, "_slot_wait", busier(serving._slot_wait, 1.5))
    monkeypatch.setattr(vector, "_slot_wait", busier(vector._slot_wait, 1.5))
    monkeypatch.setattr(serving, "_batch_sd", busier(serving._batch_sd, 5))
    monkeypatch.setattr(vector, "_batch_sd", busier(vector._batch_sd, 5))
    rng = random.Random(3)
    near = [(wp, wd, p, d, _workload(rng, 1e-3), link) for wp, wd, p, d, link in rng.sample(_pd_pairs(), 200)]
    cases = [(*case[:4], dataclasses.replace(case[4], rate=top * f), case[5])
             for case, top in zip(near, _pd_edges(near)) for f in (0.3, 0.6, 0.9, 0.999) if top > 0]
    assert _pd_kinds(cases) >= set(PD_KINDS[3:])


def _agg_and_pd() -> tuple[Compiled, Compiled]:
    """An aggregated 8B replica and a 70B prefill/decode unit, compiled."""
    agg = Deployment("Llama-3.1-8B", "H100-SXM", "vllm", "bf16", agg=Role(Parallel(tp=1)))
    pd = Deployment("Llama-3.1-70B", "H200", "vllm", "fp8", "disagg", prefill=Role(Parallel(tp=4), workers=1),
                    decode=Role(Parallel(tp=4), workers=2))
    return compile_deployment(agg, CAT), compile_deployment(pd, CAT)


def test_estimates_of_many_loads_are_those_of_each_alone():
    rng = random.Random(2)
    one, pd = _agg_and_pd()
    loads = [(c, _workload(rng, 10 ** rng.uniform(-2, 3))) for c in (one, pd) for _ in range(2 * VECTOR_MIN)]
    loads += [(one, Workload(isl=1024, osl=128, concurrency=8)), (one, Workload(isl=2e6, osl=128, rate=1.0))]
    got = estimates(loads)
    for (c, wl), est in zip(loads, got):
        try:
            alone = c.at(wl)
        except InfraError as exc:
            assert isinstance(est, InfraError) and est.problems == exc.problems
            continue
        assert _difference(alone.prediction, est.prediction) <= REL
        assert (est.devices, est.notes, est.workload) == (alone.devices, alone.notes, alone.workload)
    assert sum(isinstance(e, InfraError) for e in got) == 1


def test_capacity_searches_run_together_find_what_each_finds_alone():
    rng = random.Random(3)
    one, pd = _agg_and_pd()
    slos = [{("ttft", "p99"): 10 ** rng.uniform(-0.5, 1), ("tpot", "p99"): 10 ** rng.uniform(-1.5, -0.7)}
            for _ in range(2 * VECTOR_MIN)]
    asks = [(c, _workload(rng, 1.0), slo) for c in (one, pd) for slo in slos]
    finished: list[int] = []
    together = run_searches([max_rate_search(c, wl, slo) for c, wl, slo in asks], finished.append)
    assert sorted(finished) == list(range(len(asks)))
    caps = []
    for (c, wl, slo), (cap, est) in zip(asks, together):
        alone, at = run_search(max_rate_search(c, wl, slo))
        assert cap == pytest.approx(alone, rel=1e-6) and est.workload.rate == pytest.approx(at.workload.rate, rel=1e-6)
        caps.append(cap)
    assert sum(c > 0 for c in caps) > len(caps) // 2 and sum(c == 0 for c in caps) > 0  # both outcomes were met


def test_a_search_waits_on_a_result_another_is_finding():
    one, _ = _agg_and_pd()
    shared: dict[str, object] = {}
    finding = Pending()
    order: list[str] = []

    def finder():
        shared["rate"] = Pending  # in flight
        for rate in (1.0, 2.0, 3.0):  # three rounds of probes before the answer
            yield one, Workload(isl=1024, osl=128, rate=rate)
        shared["rate"] = 3.0
        order.append("found")
        finding.resolve()
        return "finder"

    def waiter():
        yield finding
        order.append("woke")
        return shared["rate"]

    assert run_searches([waiter(), finder()]) == [3.0, "finder"]
    assert order == ["found", "woke"]
    with pytest.raises(RuntimeError, match="wait on results no search is finding"):
        run_searches([_stuck()])


def _stuck():
    yield Pending()


def test_exact_expm1_is_the_c_librarys_for_every_argument():
    """The exact passes' expm1 skips the call at 0 and below -40 (where the C library returns -1 exactly) and takes
    the C library's elsewhere: equal to `math.expm1` element for element, across those bounds and the specials."""
    rng = random.Random(7)
    values = [0.0, -0.0, -40.0, math.nextafter(-40.0, 0.0), math.nextafter(-40.0, -math.inf), -38.8, -1e-300, 1e-300,
              -1e300, math.inf, -math.inf, math.nan, 1e-17, -1e-17, 2.5, 700.0]
    values += [-rng.expovariate(1 / 20) for _ in range(2000)] + [rng.uniform(-1e-3, 1e-3) for _ in range(500)]
    x = np.array(values)
    got = vector._expm1(x)
    want = np.array([math.expm1(v) for v in values])
    assert np.array_equal(got, want, equal_nan=True)


@pytest.mark.parametrize("closing", [False, True])
def test_lockstep_regula_falsi_brackets_each_root_as_the_scalar_one_does(closing):
    """Curves that bend up to a wall past which they are infinite (a queue's overrun), bracketed from 0 to below,
    at or past the wall: each element's bracket is the scalar search's, to the last bit, with Illinois halving and
    with Anderson-Bjorck scaling alike, whatever the other elements of the batch."""
    params = [(s, k, t, hi) for s in (0.5, 3.0, 40.0) for k in (0.01, 0.3, 0.95) for t in (0.5, 1.0)
              for hi in (s * 0.999, s, s * 1.5, s * 8)]
    sat, knee, target, top = (np.array(v, float) for v in zip(*params))

    def g(c: vector._Cases, x: np.ndarray) -> np.ndarray:
        with np.errstate(all="ignore"):
            return np.where(x < c.sat, np.log(c.knee / (1 - x / c.sat) / c.target), np.inf)

    c = vector._Cases(n=len(params))
    c.sat, c.knee, c.target = sat, knee, target
    lo = np.full(len(params), 1e-3)
    with np.errstate(all="ignore"):  # (as in the vector passes: a kept end whose value is 0)
        got = vector._regula_falsi(g, c, lo, g(c, lo), top, g(c, top), 1e-10, closing=closing)
    for (s, k, t, hi), a, b in zip(params, *got):
        def one(x: float, s=s, k=k, t=t) -> float:
            return float(np.log(k / (1 - x / s) / t)) if x < s else math.inf
        want = serving.regula_falsi(one, 1e-3, one(1e-3), hi, one(hi), 1e-10, closing=closing)
        assert (a, b) == want, (s, k, t, hi)


def test_a_disaggregated_benchmark_of_barely_varying_lengths_is_said_to_arrive_in_bunches():
    """A client's start wanders by about its round's CV each round, so ten rounds of lengths varying by 6.4% leave
    the starts within a fifth of a round: the published P/D sweeps queued so, above the dephased prediction. The
    note says so for a disaggregated run of too few rounds, not for one of many, nor for an aggregated one."""
    from infra.errors import Location
    from infra.perf.cases import case_from, run_case

    cat = load_catalog()
    pd = {"model": "Llama-3.1-8B", "device": "H100-SXM", "framework": "sglang", "mode": "disagg",
          "prefill": {"tp": 1, "workers": 1}, "decode": {"tp": 1}, "isl": 1000, "osl": 500, "isl_cv": 0.064,
          "osl_cv": 0.064, "concurrency": 64}

    def bunched(**kw) -> bool:
        got = run_case(case_from({**pd, **kw}, Location(path="")), cat)
        return any("arrive in bunches" in n for n in got.get("notes", []))

    assert bunched(requests=640)
    assert not bunched(requests=640 * 100)  # a hundred rounds: starts spread over 64% of a round
    assert not bunched(requests=640, osl_cv=0.5, isl_cv=0.5)
    assert not bunched()  # no --requests: the steady state a plan prices
    agg = {k: v for k, v in pd.items() if k not in ("mode", "prefill", "decode")}
    assert not any("arrive in bunches" in n for n in run_case(case_from({**agg, "requests": 640},
                                                                       Location(path="")), cat).get("notes", []))
