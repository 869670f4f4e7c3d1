"""The engine's scheduler and the simulator around it, on step functions simple enough to check by hand."""

from __future__ import annotations

import numpy as np
import pytest

from infra.bench.engine import Engine, EngineModel, SimRequest
from infra.bench.metrics import summarize
from infra.bench.simulate import Group, Router, simulate
from infra.bench.workload import Load, RequestSpec


def linear(decode: float, context: float, prefill: float, prefill_context: float) -> float:
    """10 ms a step, 1 ms per decoding sequence, 0.1 ms per prompt token."""
    return 0.010 + 0.001 * decode + 0.0001 * prefill


def model(**kw) -> EngineModel:
    settings = {"max_num_seqs": 64, "max_num_batched_tokens": 2048, "kv_tokens": 1_000_000}
    settings.update(kw)
    return EngineModel(linear, **settings)


def run(engine: Engine, requests: list[SimRequest], at: float = 0.0) -> list:
    """Add every request at `at` and step the engine until idle; the StepResults."""
    for r in requests:
        engine.add(r, at)
    out, now = [], at
    while (res := engine.step(now)) is not None:
        out.append(res)
        now = res.end
    return out


def test_single_request_ttft_is_its_prefill_step_and_then_one_step_per_token():
    steps = run(Engine(model()), [SimRequest(1, 500, 4)])
    assert steps[0].first[0].first_token == pytest.approx(linear(0, 0, 500, 250))
    assert [s.tokens for s in steps] == [[(1, 1, False)], [(1, 1, False)], [(1, 1, False)], [(1, 1, True)]]
    assert steps[1].duration == pytest.approx(linear(1, 501, 0, 0))
    assert steps[-1].done[0].generated == 4


def test_batching_raises_throughput():
    reqs = lambda: [SimRequest(i, 100, 50) for i in range(16)]
    serial = run(Engine(model(max_num_seqs=1)), reqs())
    batched = run(Engine(model(max_num_seqs=16)), reqs())
    assert batched[-1].end < serial[-1].end / 4


def test_max_num_seqs_caps_the_batch():
    steps = run(Engine(model(max_num_seqs=3)), [SimRequest(i, 64, 20) for i in range(10)])
    assert max(s.decoding for s in steps) == 3
    assert max(sum(1 for t in s.tokens) for s in steps) <= 3
    assert sum(len(s.done) for s in steps) == 10


def test_decode_goes_first_and_prefill_takes_the_rest_of_the_budget():
    e = Engine(model(max_num_batched_tokens=100))
    e.add(SimRequest(1, 50, 100), 0.0)
    first = e.step(0.0)
    e.add(SimRequest(2, 500, 5), first.end)
    mixed = e.step(first.end)
    # One decode token for request 1, then 99 prompt tokens of request 2.
    assert mixed.duration == pytest.approx(linear(1, 51, 99, 49.5))
    assert mixed.tokens == [(1, 1, False)]


def test_chunked_prefill_splits_a_long_prompt():
    steps = run(Engine(model(max_num_batched_tokens=1000)), [SimRequest(1, 2500, 2)])
    assert [s.first for s in steps[:2]] == [[], []]
    assert steps[2].first and steps[2].first[0].first_token == pytest.approx(
        linear(0, 0, 1000, 500) + linear(0, 0, 1000, 1500) + linear(0, 0, 500, 2250))
    unchunked = run(Engine(model(max_num_batched_tokens=1000, chunked_prefill=False)), [SimRequest(1, 2500, 2)])
    assert unchunked[0].first and unchunked[0].duration == pytest.approx(linear(0, 0, 2500, 1250))


def test_kv_exhaustion_preempts_and_recomputes():
    e = Engine(model(kv_tokens=1000, max_num_seqs=8))
    reqs = [SimRequest(i, 200, 200) for i in range(4)]
    steps = run(e, reqs)
    assert e.preemptions > 0 and sum(r.preemptions for r in reqs) == e.preemptions
    assert all(r.generated == 200 for r in reqs)
    assert max(len(s.resumed) for s in steps) >= 1
    assert e.kv_used == 0 and not e.running


def test_prefix_cache_hits_shorten_prefill():
    e = Engine(model())
    a = run(e, [SimRequest(1, 1000, 2, prefix_group=3, prefix_tokens=800)])
    b = run(e, [SimRequest(2, 1000, 2, prefix_group=3, prefix_tokens=800)], at=a[-1].end)
    cold = a[0].duration
    warm = b[0].duration
    assert b[0].first[0].cached_tokens == 800
    assert warm == pytest.approx(linear(0, 0, 200, 900)) and warm < cold
    off = Engine(model(prefix_caching=False))
    run(off, [SimRequest(1, 1000, 2, prefix_group=3, prefix_tokens=800)])
    assert run(off, [SimRequest(2, 1000, 2, prefix_group=3, prefix_tokens=800)])[0].duration == pytest.approx(cold)


def test_requests_that_cannot_fit_are_rejected_and_output_is_cut_at_max_model_len():
    e = Engine(model(kv_tokens=1000, max_model_len=800))
    assert "max_model_len" in e.rejects(SimRequest(1, 800, 10))
    assert "KV cache" in Engine(model(kv_tokens=500)).rejects(SimRequest(1, 400, 200))
    steps = run(e, [SimRequest(2, 700, 500)])
    assert steps[-1].done[0].generated == 100


def _load(n: int, isl: int, osl: int, rate: float | None = None, concurrency: int | None = None) -> Load:
    times = [i / rate for i in range(n)] if rate else [None] * n
    return Load([RequestSpec(i, times[i], isl, osl, -1, 0) for i in range(n)], rate, concurrency,
                "constant" if rate else "closed")


def test_disaggregation_adds_the_kv_transfer_to_ttft():
    m_p = model(transfer_fixed_s=0.02, kv_bytes_per_token_s=1e-5)
    agg = simulate([Group([Engine(model())])], _load(1, 1000, 10, rate=1.0))
    pd = simulate([Group([Engine(m_p, "prefill")], [Engine(model(), "decode")])], _load(1, 1000, 10, rate=1.0))
    prefill = linear(0, 0, 1000, 500)
    assert agg.records[0].ttft == pytest.approx(prefill)
    assert pd.records[0].ttft == pytest.approx(prefill + 0.02 + 1000 * 1e-5)
    assert pd.records[0].output_tokens == 10


def test_simulated_run_is_deterministic_and_counts_every_request():
    load = _load(300, 300, 40, concurrency=16)
    a = simulate([Group([Engine(model(max_num_seqs=8)) for _ in range(2)])], load)
    b = simulate([Group([Engine(model(max_num_seqs=8)) for _ in range(2)])], load)
    assert [r.e2e for r in a.records] == [r.e2e for r in b.records]
    s = summarize(a.records, itl_pool=a.itl_pool)
    assert s.completed == 300 and s.failed == 0
    # Every token after the first is one pooled gap.
    assert s.metrics["itl"].n == 300 * 39
    # A closed loop never has more requests in flight than clients.
    assert all(r.output_tokens == 40 for r in a.records)


def test_router_weights_and_policies():
    r = Router([1.0, 3.0], "round-robin")
    picks = [r.pick() for _ in range(400)]
    assert picks.count(1) == 300
    ll = Router([1.0, 3.0])
    for _ in range(8):
        ll.pick()
    assert ll.load == [2, 6]
    ll.done(1)
    assert ll.pick() == 1
    with pytest.raises(Exception, match="router"):
        Router([1.0], "fastest")  # type: ignore[arg-type]


def test_least_loaded_spreads_a_burst_over_replicas():
    groups = [Group([Engine(model()) for _ in range(4)])]
    res = simulate(groups, _load(40, 200, 20, rate=1000.0))
    served = [e.steps for e in res.engines]
    assert min(served) > 0
    assert np.isfinite([r.e2e for r in res.records]).all()
