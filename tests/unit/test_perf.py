"""The performance model: memory accounting, shape checks, physics-monotone predictions, calibration lookups."""

from __future__ import annotations

import dataclasses
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from infra.catalog.loader import load_catalog
from infra.errors import InfraError
from infra.perf.arch import compile_worker
from infra.perf.calibration import Factors, borrow, device_point, lookup
from infra.perf.estimate import CAPACITY_REL, ShapeError, estimate, max_rate, meets
from infra.perf.serving import _mixed_step, regula_falsi, regula_falsi_steps
from infra.perf.shape import Deployment, Parallel, Role, Workload

from ..conftest import VLLM_H100

CAT = load_catalog()


def worker(model="Llama-3.1-8B", device="H100-SXM", precision="bf16", par=Parallel(), kv="bf16"):
    return compile_worker(CAT.model(model), CAT.device(device), precision, par, Factors(), kv_precision=kv)


def test_kv_bytes_per_token_gqa_and_mla():
    # Llama-3.1-8B: 32 layers x (K and V) x 8 KV heads x 128 dims x 2 bytes
    assert worker().kv_full_per_token == 32 * 2 * 8 * 128 * 2
    # Tensor parallelism splits KV heads; beyond 8 ways heads are replicated, not split further
    assert worker(par=Parallel(tp=4)).kv_full_per_token == 32 * 2 * 2 * 128 * 2
    # DeepSeek-V3 MLA caches one 512 + 64 latent per layer (fp8): 61 x 576 bytes, whatever the TP size
    ds = worker("DeepSeek-V3", "H200", "fp8", Parallel(tp=8, ep=8), kv="fp8")
    assert ds.kv_full_per_token == 61 * 576
    assert ds.kv_full_per_token == worker("DeepSeek-V3", "H200", "fp8", Parallel(tp=4, ep=8), kv="fp8").kv_full_per_token


def test_sliding_window_caps_kv_growth():
    w = worker("gpt-oss-120b", "H200", "fp4", Parallel(tp=2, ep=2))
    assert w.kv_swa_per_token > 0
    short, long = w.kv_bytes(1000), w.kv_bytes(100_000)
    assert long < 100 * short  # full-attention layers grow, windowed ones stop at the window


def test_sparse_attention_bounds_attention_work_but_caches_every_indexer_key():
    sparse = CAT.model("DeepSeek-V3.2")
    dense = sparse.model_copy(update={"attention": sparse.attention.model_copy(update={"sparse_topk": None})})
    h200 = CAT.device("H200")
    ws, wd = (compile_worker(m, h200, "fp8", Parallel(tp=8), Factors(), kv_precision="fp8") for m in (sparse, dense))
    # Each token and layer caches 128 FP8 key bytes plus one FP32 scale for the indexer.
    assert ws.kv_bytes(1000) - wd.kv_bytes(1000) == pytest.approx(1000 * 61 * 132)
    # Up to the top-k the indexer only adds work; beyond it attention stops growing with the context.
    assert ws.step(64, 1500) > wd.step(64, 1500)
    assert ws.step(64, 32000) - ws.step(64, 8000) < 0.5 * (wd.step(64, 32000) - wd.step(64, 8000))
    assert ws.step(64, 32000) > ws.step(64, 8000)  # the indexer still scores every cached token
    assert ws.step(0, 0, 8192, 16000) < wd.step(0, 0, 8192, 16000)


def test_linear_attention_keeps_a_fixed_state_per_sequence():
    # Qwen3.5-397B: 45 Gated DeltaNet layers x 64 value heads x a 128 x 128 state, split over tp, plus the
    # convolution's last 3 inputs (2 x 16 key heads + 64 value heads, x 128, 16-bit).
    par = Parallel(tp=4, ep=4)
    w = compile_worker(CAT.model("Qwen3.5-397B-A17B"), CAT.device("B200"), "fp8", par, Factors(), kv_precision="fp8")
    assert w.state_bytes == pytest.approx(45 * (64 * 128 * 128 * 2 + 3 * (2 * 16 * 128 + 64 * 128) * 2) / 4)
    assert w.kv_bytes(0) == w.state_bytes  # it is there before the first token and does not grow
    assert w.kv_bytes(2000) - w.kv_bytes(1000) == pytest.approx(1000 * w.kv_full_per_token)
    fp32 = compile_worker(CAT.model("Qwen3.5-397B-A17B"), CAT.device("B200"), "fp8", par, Factors(),
                          kv_precision="fp8", state_element_bytes=4)
    assert fp32.max_sequences(4096) < w.max_sequences(4096)
    assert fp32.step(64, 4096) > w.step(64, 4096)  # every decode step reads and writes it
    # Models without linear attention keep none.
    assert worker().state_bytes == 0


def test_weights_split_by_parallelism():
    one = worker("Llama-3.1-70B", "H200", "fp8")
    four = worker("Llama-3.1-70B", "H200", "fp8", Parallel(tp=4))
    assert 68 < one.memory.weights_gb < 76  # 70.6B parameters at one byte, plus 16-bit embeddings
    assert four.memory.weights_gb == pytest.approx(one.memory.weights_gb / 4, rel=0.05)


def test_memory_misfit_is_explained():
    w = worker("Llama-3.1-70B", "H100-SXM", "bf16")
    assert not w.memory.fits
    text = w.memory.explain()
    assert "does not fit" in text and "GB" in text
    dep = Deployment("Llama-3.1-70B", "H100-SXM", "vllm", "bf16", agg=Role(Parallel(tp=1)))
    with pytest.raises(ShapeError, match="does not fit"):
        estimate(dep, Workload(isl=1000, osl=100, concurrency=1), CAT)


@pytest.mark.parametrize("dep,fragment", [
    (Deployment("Llama-3.1-70B", "H200", "vllm", "fp8", agg=Role(Parallel(tp=3))), "does not divide"),
    (Deployment("Llama-3.1-8B", "H200", "vllm", "bf16", agg=Role(Parallel(tp=2, ep=2))), "no experts"),
    (Deployment("Llama-3.1-8B", "A100-80G", "vllm", "fp8", agg=Role(Parallel())), "does not support fp8"),
    (Deployment("Llama-3.1-8B", "Ascend-910B3", "trtllm", "bf16", agg=Role(Parallel())), "does not run on"),
    (Deployment("Qwen3-235B-A22B", "H200", "vllm", "fp8", agg=Role(Parallel(tp=4, ep=256))), "exceeds"),
    (Deployment("Llama-3.1-8B", "H200", "vllm-fl", "bf16", "disagg"), "does not support prefill/decode"),
])
def test_impossible_shapes_are_explained(dep, fragment):
    with pytest.raises(ShapeError, match=fragment):
        estimate(dep, Workload(isl=100, osl=10, concurrency=1), CAT)


def test_a_framework_that_does_not_run_on_the_device_names_those_that_do():
    dep = Deployment("Llama-3.1-8B", "Ascend-910B3", "trtllm", "bf16", agg=Role(Parallel()))
    with pytest.raises(ShapeError) as err:
        estimate(dep, Workload(isl=100, osl=10, concurrency=1), CAT)
    fix = err.value.problems[0].fix
    assert "vllm-ascend" in fix and "mindie" in fix and "trtllm" not in fix


def test_calibration_lookup_says_when_it_borrows():
    assert lookup("trtllm", CAT.device("H200")).calibrated
    borrowed = lookup("vllm-ascend", CAT.device("Ascend-910B3"), CAT.framework("vllm-ascend").calibration_from)
    assert not borrowed.calibrated and borrowed.source.startswith("borrowed:vllm/") and borrowed.distance > 0
    dep = Deployment("Qwen3-32B", "Ascend-910B3", "vllm-ascend", "bf16", agg=Role(Parallel(tp=4)))
    est = estimate(dep, Workload(isl=1000, osl=200, concurrency=8), CAT)
    assert not est.to_json()["calibrated"] and "not calibrated" in est.notes[0]
    # Borrowed across device generations, an estimate says whose share of peak it took.
    traded = lookup("vllm", CAT.device("B300"))
    assert traded.source == "borrowed:vllm/B200" and traded.architecture == "blackwell-ultra"
    dep = Deployment("Llama-3.1-70B", "B300", "vllm", "fp8", agg=Role(Parallel(tp=4)))
    note = estimate(dep, Workload(isl=1000, osl=200, concurrency=8), CAT).notes[0]
    assert note.endswith("at blackwell-ultra's fitted share of peak")


def test_borrowed_factors_trade_the_lenders_architecture_for_the_borrowers():
    groups = {"trtllm/H200": Factors(gemm=0.66), "vllm/B200": Factors(gemm=0.3)}
    devices = {"H200": device_point(CAT.device("H200")), "B200": device_point(CAT.device("B200"))}
    scales = {"hopper": {"gemm": 1.1}, "blackwell": {"gemm": 0.7}}
    key, got, dist, arch = borrow("trtllm", CAT.device("B300"), groups, devices, scales)
    # Same framework first, even on another generation; its Hopper multiplier is swapped for Blackwell's where the
    # fit found one for the borrower's architecture, and divided out where it found none (B300 is blackwell-ultra:
    # none here), so a generation no fit covers takes the framework's own share, not the lender generation's.
    assert key == "trtllm/H200" and got.gemm == pytest.approx(0.66 / 1.1) and dist > 0 and arch == ""
    _, got, _, arch = borrow("trtllm", CAT.device("B200"), groups, devices, scales)
    assert got.gemm == pytest.approx(0.66 * 0.7 / 1.1) and arch == "blackwell"
    _, got, _, arch = borrow("trtllm", CAT.device("B200"), groups, devices)
    assert got.gemm == pytest.approx(0.66) and arch == ""
    # A framework never fitted borrows another framework's factors on the same device.
    key, _, dist, arch = borrow("sglang", CAT.device("B200"), groups, devices, scales)
    assert key == "vllm/B200" and dist == 0 and arch == ""


def test_estimates_say_which_layers_no_measured_model_has():
    def notes(model, tp=8):
        dep = Deployment(model, "H200", "vllm", "fp8", agg=Role(Parallel(tp=tp, ep=tp if CAT.model(model).moe else 1)))
        return " ".join(estimate(dep, Workload(isl=1000, osl=100, concurrency=4), CAT).notes)

    assert "state-space layers, which no measured model has" in notes("Nemotron-H-56B")
    assert "sparse attention, which no measured model has" in notes("DeepSeek-V3.2")
    # Latent attention, routed experts and sliding windows were all measured (DeepSeek-R1, gpt-oss). (gpt-oss-20b's
    # few experts for its routed parameters have a note of their own, on its fixed MoE latency.)
    assert notes("Qwen3-32B") == notes("Kimi-K2") == ""
    assert "which no measured model has" not in notes("gpt-oss-20b", tp=1)


def test_estimates_say_when_their_collectives_cross_a_pcie_no_measurement_crossed():
    def notes(device, tp, model="Llama-3.1-70B"):
        dep = Deployment(model, device, "vllm", "fp8", agg=Role(Parallel(tp=tp)))
        return " ".join(estimate(dep, Workload(isl=1000, osl=100, concurrency=4), CAT).notes)

    assert "L40S has no scale-up fabric: its collectives cross the server's PCIe" in notes("L40S", 4)
    assert "PCIe" not in notes("L40S", 1, "Llama-3.1-8B") and "PCIe" not in notes("H200", 4)


def _agg(model="Llama-3.1-70B", device="H200", precision="fp8", tp=4, batch=None):
    return Deployment(model, device, "vllm", precision, agg=Role(Parallel(tp=tp), batch_cap=batch))


@settings(max_examples=40, deadline=None)
@given(st.integers(1, 200), st.integers(1, 200), st.sampled_from([256, 1024, 4096]), st.sampled_from([64, 512]))
def test_more_clients_never_lower_latency(c1, c2, isl, osl):
    lo, hi = sorted((c1, c2))
    a = estimate(_agg(), Workload(isl=isl, osl=osl, concurrency=lo), CAT).prediction
    b = estimate(_agg(), Workload(isl=isl, osl=osl, concurrency=hi), CAT).prediction
    assert b.tpot["mean"] >= a.tpot["mean"] * (1 - 1e-6)
    assert b.ttft["mean"] >= a.ttft["mean"] * (1 - 1e-6)
    assert b.throughput_rps >= a.throughput_rps * (1 - 1e-6)


@settings(max_examples=40, deadline=None)
@given(st.floats(0.05, 20), st.floats(0.05, 20), st.sampled_from([512, 2048]))
def test_more_rate_never_lowers_latency(r1, r2, isl):
    lo, hi = sorted((r1, r2))
    a = estimate(_agg(), Workload(isl=isl, osl=256, rate=lo), CAT).prediction
    b = estimate(_agg(), Workload(isl=isl, osl=256, rate=hi), CAT).prediction
    for metric in ("ttft", "tpot", "e2e"):
        for k in ("mean", "p50", "p99"):
            assert getattr(b, metric)[k] >= getattr(a, metric)[k] * (1 - 1e-6), (metric, k)


def _never_lower(loads, dep, make, percentiles=("p50", "p90", "p99"), metrics=("ttft", "tpot", "e2e")):
    """Predictions at increasing loads: no latency percentile and no throughput goes down."""
    keys = [(m, k) for m in metrics for k in ("mean", *percentiles)]
    prev = None
    for load in loads:
        p = estimate(dep, make(load), CAT).prediction
        assert p.stable, load
        if prev is not None:
            for m, k in keys:
                assert getattr(p, m)[k] >= getattr(prev, m)[k] * (1 - 1e-6), (load, m, k)
            assert p.throughput_rps >= prev.throughput_rps * (1 - 1e-6), load
        prev = p


def test_more_clients_never_lower_a_compute_bound_batch():
    # Short prompts, long answers: the decode batch is compute-bound, so the throughput barely moves as the batch
    # grows, and solved for the throughput the batch once jumped between neighbouring client counts (TPOT down
    # by up to 1% from one client more).
    dep = Deployment("Llama-3.1-8B", "H100-SXM", "vllm", "bf16", agg=Role(Parallel()))
    _never_lower(range(230, 320), dep, lambda c: Workload(isl=128, osl=2048, isl_cv=0.5, osl_cv=0.5, concurrency=c),
                 percentiles=())


@pytest.mark.parametrize("dep, isl, osl, clients", [
    # Past what the KV cache holds (about 150 sequences of 9k tokens), the clients added queue for a slot.
    (Deployment("DeepSeek-V3", "H200", "sglang", "fp8", agg=Role(Parallel(tp=8, ep=8))), 8192, 1024,
     (96, 128, 160, 192, 256, 384)),
    # Up to and past the KV cache's 214 sequences: the decoding count never exceeds the clients.
    (Deployment("Llama-3.1-8B", "H100-SXM", "vllm", "bf16", agg=Role(Parallel())), 1024, 1024,
     (128, 160, 192, 224, 256, 384)),
    # Across the KV cache's 22 sequences: a slot that holds a prefill is not decoding, in either regime.
    (Deployment("Llama-3.1-8B", "L40S", "vllm", "bf16", agg=Role(Parallel(), batch_cap=32, max_num_tokens=4096)),
     8192, 1024, (20, 21, 22, 23, 24, 26)),
])
def test_more_clients_past_the_batch_slots_never_lower_latency_or_throughput(dep, isl, osl, clients):
    _never_lower(clients, dep, lambda c: Workload(isl=isl, osl=osl, concurrency=c))


@pytest.mark.parametrize("dep, clients", [
    # Long prompts, short answers: the prefills bound the loop well before the step budget does. Past about 124
    # decoding sequences no throughput sustains the count (they finish faster than the budget's room for prompts
    # replaces them), and a solve that searched past it once found a second count there: TTFT fell 75% from 280
    # clients to 281.
    (Deployment("Qwen3-235B-A22B", "H200", "sglang", "fp8", agg=Role(Parallel(tp=8, ep=8))),
     (250, 280, 281, 300, 400, 600, 650, 700, 1000)),
    (Deployment("gpt-oss-120b", "H100-SXM", "vllm", "fp4", agg=Role(Parallel(tp=2, moe_tp=2))),
     (300, 340, 347, 348, 349, 400, 600, 1000)),
])
def test_more_clients_never_lower_a_prefill_bound_loop(dep, clients):
    _never_lower(clients, dep, lambda c: Workload(isl=4096, osl=64, isl_cv=0.2, osl_cv=0.2, concurrency=c))


def _capacity(dep, lengths):
    """The first rate predicted unstable, to 0.1% (found from below, so a rate held above it would not move it)."""
    hi = 1.0
    while estimate(dep, Workload(rate=hi, **lengths), CAT).prediction.stable:
        hi *= 2
    lo = 0.0
    while hi - lo > 1e-3 * hi:
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if estimate(dep, Workload(rate=mid, **lengths), CAT).prediction.stable else (lo, mid)
    return hi


@pytest.mark.parametrize("dep, lengths", [
    # Where prompt chunks start riding every step the mean step has a kink, and the batch's loop gain taken from
    # a one-sequence slope on either side of it halved the TPOT tail as the rate rose (-30% at p99.9, at 60% of
    # the capacity).
    (Deployment("Llama-3.1-70B", "H200", "vllm", "bf16", agg=Role(Parallel(tp=4))),
     {"isl": 4096, "osl": 64, "isl_cv": 0.2, "osl_cv": 0.2}),
    # Near the step budget: the tail fell 36% from one rate to the next.
    (Deployment("gpt-oss-120b", "H100-SXM", "vllm", "fp4", agg=Role(Parallel(tp=2, moe_tp=2))),
     {"isl": 2048, "osl": 256}),
    (Deployment("Qwen3-235B-A22B", "H200", "sglang", "fp8", agg=Role(Parallel(tp=8, ep=8))),
     {"isl": 2048, "osl": 256}),
])
def test_more_rate_never_lowers_open_loop_tails(dep, lengths):
    # Up to 99.9% of the capacity, where the batch a percentile reaches is held at the slots.
    top = _capacity(dep, lengths)
    rates = [top * (0.5 + 0.499 * k / 60) for k in range(61)]
    _never_lower(rates, dep, lambda r: Workload(rate=r, **lengths), percentiles=("p50", "p90", "p99", "p99.9"),
                 metrics=("ttft", "tpot", "itl", "e2e"))


def test_more_rate_never_lowers_the_decode_gaps_near_the_batch_slots():
    # 8k prompts: the KV cache holds about 50 sequences, and near it the batch a percentile reaches is held at the
    # slots. The gap a percentile adds was once the growth of the mean token time (prompt chunks included), which
    # shrinks as the mean batch nears the slots: ITL p90 fell by up to 0.65% a step from 64% to 95% of capacity.
    dep = Deployment("Llama-3.1-8B", "H100-SXM", "vllm", "bf16", agg=Role(Parallel()))
    lengths = {"isl": 8192, "osl": 1024}
    top = _capacity(dep, lengths)
    _never_lower([top * (0.6 + 0.39 * k / 40) for k in range(41)], dep, lambda r: Workload(rate=r, **lengths),
                 percentiles=("p50", "p90", "p99", "p99.9"), metrics=("itl",))


def test_a_closed_loop_past_the_step_budget_queues_for_its_prefills():
    # Past about 141 clients of 4096/64, prompts wait for the step budget: every step is full, the decodes keep
    # chunk (osl - 1) / (prompt + osl - 1) of it, the throughput holds and the clients over it wait longer.
    a, b = (estimate(_agg(), Workload(isl=4096, osl=64, concurrency=c), CAT).prediction for c in (160, 200))
    assert a.throughput_rps == pytest.approx(b.throughput_rps, rel=1e-9) and b.ttft["mean"] > a.ttft["mean"] + 1
    assert a.batch == pytest.approx(8192 * 63 / (4096 + 63), rel=1e-9) and a.tpot["mean"] < float("inf")
    assert a.load == 1.0 and "token budget" in a.assumptions[0]


def test_a_closed_loop_near_its_batch_cap_solves_for_the_load_alone():
    # Where the batch cap nearly meets the clients, the decoding count consistent with a throughput depends on
    # that throughput alone: once it was carried over from the previous trial and a stable estimate said TPOT
    # infinite (a count past the token budget's wall taken for a solution).
    dep = Deployment("DeepSeek-R1", "GB200", "trtllm", "fp4", agg=Role(Parallel(tp=64, moe_tp=64), batch_cap=538))
    tpots = []
    for c in (400, 450, 500, 520, 530, 538):
        p = estimate(dep, Workload(isl=7372.8, osl=921.6, concurrency=c), CAT).prediction
        assert p.stable and math.isfinite(p.tpot["mean"]) and math.isfinite(p.ttft["mean"]), c
        tpots.append(p.tpot["mean"])
    assert tpots == sorted(tpots)


def test_an_open_loop_batch_that_never_settles_is_unstable():
    # Short prompts, answers of 256: past about 150 sequences the step is compute-bound and the tokens asked for
    # (60.9 x 256 per second) outrun the tokens the batch emits, however large it grows. A damped iteration that
    # stopped after 80 steps once called this stable at load 0.66.
    dep = Deployment("Llama-3.1-8B", "H100-SXM", "vllm", "bf16", agg=Role(Parallel()))
    lengths = {"isl": 128, "osl": 256, "osl_cv": 0.5}
    assert not estimate(dep, Workload(rate=60.87, **lengths), CAT, factors=VLLM_H100).prediction.stable
    held = estimate(dep, Workload(rate=50.0, **lengths), CAT, factors=VLLM_H100).prediction
    assert held.stable and held.load < 1


def test_the_open_loop_has_one_capacity():
    # No rate above one predicted unstable is held: the planner's capacity search bisects on that. Near the step
    # budget a one-sequence slope of the mixed step once held rates either side of an unstable one.
    dep = Deployment("gpt-oss-120b", "H100-SXM", "vllm", "fp4", agg=Role(Parallel(tp=2, moe_tp=2)))
    lengths = {"isl": 2048, "osl": 256}
    top = _capacity(dep, lengths)
    held = [estimate(dep, Workload(rate=top * (0.9 + k / 1000), **lengths), CAT).prediction.stable
            for k in range(201)]
    assert held.index(False) > 0 and not any(held[held.index(False):])


def test_more_rate_never_lowers_disaggregated_moe_tails():
    # Decode steps of a MoE model grow ever more slowly with the batch: the tail must still rise with the load.
    dep = Deployment("DeepSeek-V3", "B200", "trtllm", "fp4", "disagg", prefill=Role(Parallel(tp=4, ep=4), workers=2),
                     decode=Role(Parallel(ep=8, attention_dp=8), workers=1))
    _never_lower((40, 56, 65, 75, 86, 99, 114, 131, 151, 174), dep, lambda r: Workload(isl=128, osl=64, rate=r))
    _never_lower((3.0, 3.9, 4.5, 5.2, 6.0, 6.9, 7.9), dep, lambda r: Workload(isl=1024, osl=1024, rate=r))


@settings(max_examples=60, deadline=None)
@given(st.floats(1, 512), st.floats(1, 512), st.floats(100, 32000), st.floats(1.0, 3.0))
def test_step_time_monotone_in_batch_context_and_bandwidth(b1, b2, ctx, scale):
    w = worker("Qwen3-32B", "H200", "fp8", Parallel(tp=2))
    lo, hi = sorted((b1, b2))
    assert w.step(hi, ctx) >= w.step(lo, ctx)
    assert w.step(lo, ctx * 2) >= w.step(lo, ctx)
    faster = dataclasses.replace(w, bw_bytes_s=w.bw_bytes_s * scale)
    assert faster.step(lo, ctx) <= w.step(lo, ctx)


def test_weight_only_checkpoints_compute_in_their_activation_format():
    # gpt-oss publishes MXFP4 experts without quantized activations: on B200 they run as W4A8 (MXFP8 activations),
    # not at the fp4 rate NVFP4 checkpoints reach; on H200, without microscaled tensor cores, as W4A16.
    b200, h200 = CAT.device("B200"), CAT.device("H200")
    prefill = 8192.0

    def prefill_s(model, device, precision):
        return compile_worker(CAT.model(model), device, precision, Parallel(), Factors()).step(0, 0, prefill, 4096)

    native = compile_worker(CAT.model("gpt-oss-120b"), b200, "fp4", Parallel(), Factors())
    assert native.flops_s == pytest.approx(b200.tflops["fp8"].value * 1e12)
    assert compile_worker(CAT.model("gpt-oss-120b"), h200, "fp4", Parallel(), Factors()).flops_s == \
        pytest.approx(h200.tflops["bf16"].value * 1e12)
    # An NVFP4 checkpoint of a model published in 16-bit quantizes its activations too.
    assert compile_worker(CAT.model("Llama-3.1-70B"), b200, "fp4", Parallel(tp=2), Factors()).flops_s == \
        pytest.approx(b200.tflops["fp4"].value * 1e12)
    # A long prompt is compute-bound: the MXFP4 checkpoint prefills at the pace of an FP8 one, not twice as fast.
    assert prefill_s("gpt-oss-120b", b200, "fp4") == pytest.approx(prefill_s("gpt-oss-120b", b200, "fp8"), rel=0.05)


def test_wide_expert_parallelism_pays_all_to_all_latency_per_peer():
    # Dispatch and combine signal every peer: at one sequence per rank, the latency over 64 devices is about nine
    # times that over 8 (63 peers against 7), not the same fixed cost.
    def extra(ep):
        w = worker("DeepSeek-V3", "GB200", "fp8", Parallel(attention_dp=ep, ep=ep), kv="fp8")
        quiet = dataclasses.replace(w, factors=dataclasses.replace(w.factors, a2a_peer_us=0.0))
        return w.step(1, 2000) - quiet.step(1, 2000)

    assert extra(8) > 0
    assert extra(64) == pytest.approx(extra(8) * 63 / 7, rel=1e-6)


def test_open_loop_overload_is_unstable_not_a_number():
    p = estimate(_agg("Llama-3.1-8B", "L4", "fp8", tp=1), Workload(isl=4000, osl=500, rate=500), CAT).prediction
    assert not p.stable and p.ttft["p99"] == float("inf")


def test_percentiles_are_ordered():
    p = estimate(_agg(), Workload(isl=2000, osl=300, rate=4, arrival_cv=2, isl_cv=0.8, osl_cv=0.5), CAT).prediction
    for metric in (p.ttft, p.tpot, p.itl, p.e2e):
        values = [metric[k] for k in ("p50", "p90", "p95", "p99", "p99.9")]
        assert values == sorted(values)


def test_max_rate_meets_objectives_and_just_above_does_not():
    slo = {("ttft", "p99"): 1.0, ("tpot", "p99"): 0.05}
    wl = Workload(isl=2000, osl=300, rate=1)
    rate, est = max_rate(_agg(), wl, slo, CAT)
    assert rate > 0 and est is not None and meets(est.prediction, slo)
    above = estimate(_agg(), dataclasses.replace(wl, rate=rate * (1 + 2 * CAPACITY_REL)), CAT).prediction
    assert not meets(above, slo)


def _overrun_curve(saturates: float, knee: float, target: float):
    """An overrun shaped like a queue's tail: the log of a latency that grows as 1 / (1 - x / saturates) over
    its target, infinite past saturation."""
    def g(x: float) -> float:
        return math.log(knee / (1 - x / saturates) / target) if x < saturates else math.inf
    return g


def _closing(steps, g) -> tuple[tuple[float, float], int]:
    calls = 0
    try:
        x = next(steps)
        while True:
            calls += 1
            x = steps.send(g(x))
    except StopIteration as done:
        return done.value, calls


def test_closing_steps_bracket_the_capacity_within_the_tolerance_in_fewer_probes_than_illinois():
    total = {"capacity": 0, "illinois": 0}
    for saturates in (0.5, 3.0, 40.0):
        for knee in (0.01, 0.2, 0.6, 0.95):
            g = _overrun_curve(saturates, knee, 1.0)
            root = saturates * (1 - knee)
            for hi in (saturates * 0.999, saturates * 1.5, saturates * 8):
                lo = 1e-3
                (a, b), n = _closing(regula_falsi_steps(lo, g(lo), hi, g(hi), CAPACITY_REL, closing=True), g)
                assert a <= root <= b and b - a <= CAPACITY_REL * b and g(a) <= 0
                total["capacity"] += n
                total["illinois"] += _closing(regula_falsi_steps(lo, g(lo), hi, g(hi), CAPACITY_REL), g)[1]
    assert total["capacity"] < 0.85 * total["illinois"], total


def test_a_point_within_the_tolerance_is_the_root_and_ends_the_search():
    """A function whose value near its root is rounding (a few 1e-16 over a few 1e-14 of x), started there, the
    far end at 0: without a tolerance the bracket closes by halving its way up from 0 (each secant lands within
    a rounding of the near end); with one, the start is the root."""
    root = 0.281998
    g = lambda x: (x - root) / root if abs(x - root) > 1e-14 * root else 1.1e-16  # noqa: E731
    start = root
    calls = []

    def counted(x: float) -> float:
        calls.append(x)
        return g(x)

    hi = root * (1 + 4.6e-5)
    assert 0 < g(start) <= 1e-12
    assert regula_falsi(counted, 0.0, g(0.0), hi, g(hi), 1e-12, start=start, tol=1e-12) == (start, start)
    assert calls == [start]
    calls.clear()
    lo, hi = regula_falsi(counted, 0.0, g(0.0), hi, g(hi), 1e-12, start=start)
    assert hi - lo <= 1e-12 * hi and abs(lo - root) <= 1e-13 and len(calls) > 10, len(calls)


def test_disaggregated_estimate_sizes_workers_and_says_so():
    dep = Deployment("DeepSeek-V3", "H200", "sglang", "fp8", "disagg",
                     prefill=Role(Parallel(tp=8, ep=8)), decode=Role(Parallel(tp=8, ep=8)))
    est = estimate(dep, Workload(isl=2000, osl=500, concurrency=256), CAT)
    p = est.prediction
    assert p.workers["prefill"] >= 1 and p.workers["decode"] >= 1
    assert any("assumed" in n for n in p.assumptions)
    assert est.devices == 8 * (p.workers["prefill"] + p.workers["decode"])


def test_decode_on_another_device_type_uses_its_figures_and_the_network():
    wl = Workload(isl=4000, osl=500, rate=2.0)
    roles = {"prefill": Role(Parallel(tp=2), workers=1), "decode": Role(Parallel(tp=2), workers=1)}
    same = estimate(Deployment("Llama-3.1-70B", "H200", "vllm", "fp8", "disagg", **roles), wl, CAT)
    split = estimate(Deployment("Llama-3.1-70B", "H200", "vllm", "fp8", "disagg", **roles, decode_device="H20"),
                     wl, CAT)
    # H20 decodes from 4.0 TB/s against the H200's 4.8: slower per token, and the KV cache crosses a NIC.
    assert split.prediction.tpot["p50"] > same.prediction.tpot["p50"]
    assert split.prediction.ttft["p50"] > same.prediction.ttft["p50"]
    assert "decode" in split.calibration.source and split.memory["decode"].device_gb == pytest.approx(96, rel=0.01)


def test_estimate_cases_shard_experts_as_the_engines_do_unless_told():
    from infra.perf.cases import EstimateCase

    def moe_tp(model: str, **layout) -> int:
        case = EstimateCase(model=model, device="H200", isl=1000, osl=100, concurrency=8, **layout)
        return case.deployment(CAT).agg.parallel.moe_tp

    assert moe_tp("DeepSeek-R1", tp=8) == 8  # tensor parallelism alone shards every expert
    assert moe_tp("DeepSeek-R1", tp=8, ep=8) == 1  # expert parallelism keeps experts whole
    assert moe_tp("DeepSeek-R1", tp=8, ep=4) == 2
    assert moe_tp("DeepSeek-R1", tp=8, moe_tp=1) == 1  # as told
    assert moe_tp("Llama-3.1-70B", tp=8) == 1  # no experts


def test_estimate_cases_run_a_quantized_re_upload_in_the_format_its_id_names():
    from infra.perf.cases import EstimateCase

    def precision(model: str, device: str = "H200", **given) -> str:
        case = EstimateCase(model=model, device=device, isl=1000, osl=100, concurrency=8, **given)
        return case.deployment(CAT).precision

    assert precision("nvidia/Llama-3_3-Nemotron-Super-49B-v1_5-FP8") == "fp8"
    assert precision("nvidia/Llama-3_3-Nemotron-Super-49B-v1_5") == "bf16"  # the original checkpoint
    assert precision("nvidia/Qwen3-235B-A22B-NVFP4", device="B200") == "fp4"
    assert precision("Qwen/Qwen3-32B-FP8", precision="bf16") == "bf16"  # as told


def test_every_layer_adds_its_fixed_time_to_a_step_whatever_the_batch():
    def step(model: str, layer_us: float, pp: int = 1) -> float:
        w = compile_worker(CAT.model(model), CAT.device("H200"), "fp8", Parallel(tp=8 // pp, pp=pp),
                           Factors(layer_us=layer_us), kv_precision="fp8")
        return w.step(4, 1000)

    deep = step("Llama-3.1-70B", 50.0) - step("Llama-3.1-70B", 0.0)
    assert deep == pytest.approx(80 * 50e-6)
    # Pipeline stages split the layers, and a step still passes through all of them.
    assert step("Llama-3.1-70B", 50.0, pp=2) - step("Llama-3.1-70B", 0.0, pp=2) == pytest.approx(deep)
    assert step("Llama-3.1-8B", 50.0) - step("Llama-3.1-8B", 0.0) == pytest.approx(32 * 50e-6)


def test_a_disaggregated_estimate_says_which_worker_counts_it_chose_and_keeps_the_given_ones():
    def notes(prefill: Role, decode: Role, **load) -> list[str]:
        dep = Deployment("Llama-3.1-8B", "H200", "vllm", "bf16", "disagg", prefill=prefill, decode=decode)
        return estimate(dep, Workload(isl=2048, osl=256, **load), CAT).prediction.assumptions

    closed = notes(Role(Parallel(tp=1)), Role(Parallel(tp=1), workers=3), concurrency=4)
    assert closed == ["worker counts not given: 1 prefill worker(s) assumed (3 decode as given)"]
    opened = notes(Role(Parallel(tp=1), workers=2), Role(Parallel(tp=1)), rate=3.0)
    assert opened == ["worker counts not given: 1 decode worker(s) sized for the rate (2 prefill as given)"]
    assert notes(Role(Parallel(tp=1), workers=1), Role(Parallel(tp=1), workers=1), rate=3.0) == []


def test_an_estimate_says_when_its_fixed_moe_latency_is_carried_past_the_measured_models():
    """Past the measured models' routed parameters per token, or on experts shaped so that the latency's other
    form (per expert of each MoE layer, which holds out about as well) parts from the packaged one further than on
    any measured model, the note gives both figures; a measured model, or one like them, has none."""
    from infra.perf.estimate import compile_deployment, expert_layers_k, routed_params_b

    cat = load_catalog()
    assert routed_params_b(cat.model("Mixtral-8x22B")) == pytest.approx(33.8, abs=0.1)
    assert expert_layers_k(cat.model("DeepSeek-R1")) == 256 * 58 / 1000
    assert routed_params_b(cat.model("Llama-3.1-70B")) == expert_layers_k(cat.model("Llama-3.1-70B")) == 0.0
    for model, layout, why in (("Mixtral-8x22B", Parallel(tp=8, moe_tp=8), "expert parameters per token"),
                               ("Mixtral-8x7B", Parallel(tp=2, moe_tp=2), "a shape on which"),
                               ("Qwen3-Next-80B-A3B", Parallel(tp=2, moe_tp=2), "a shape on which"),
                               ("DeepSeek-R1", Parallel(tp=8, moe_tp=8), None),
                               ("Kimi-K2", Parallel(tp=8, moe_tp=8), None),  # 20.6B, its forms 1.4x apart like R1's
                               ("Qwen3-235B-A22B", Parallel(tp=8, moe_tp=8), None),
                               ("Llama-3.1-70B", Parallel(tp=4), None)):
        notes = compile_deployment(Deployment(model, "H200", "vllm", "fp8", agg=Role(layout)), cat).notes
        said = [n for n in notes if "expert_latency_ms" in n]
        assert bool(said) == (why is not None) and all(why in n for n in said), (model, said)
    mixtral = compile_deployment(Deployment("Mixtral-8x22B", "H200", "vllm", "fp8",
                                            agg=Role(Parallel(tp=8, moe_tp=8))), cat)
    packaged = routed_params_b(cat.model("Mixtral-8x22B")) * mixtral.calibration.factors.expert_latency_ms
    said = next(n for n in mixtral.notes if "expert_latency_ms" in n)
    assert f"(`expert_latency_ms`, {packaged:.0f} ms)" in said and said.endswith("the error band spans both")
    other = float(said.split("it would be ")[1].split(" ms")[0])
    assert 0 < other < 0.05 * packaged  # 8 experts in each of 56 layers
    assert mixtral.calibration.unpinned_ttft_s == pytest.approx((other - packaged) / 1000, abs=1e-3)


def test_the_error_band_and_a_confident_plan_span_both_forms_of_an_unpinned_fixed_moe_latency():
    """Where the measurements cannot tell the fixed MoE latency's two forms apart for a model, the TTFT band is
    the union of the bands around each, and a plan at a confidence keeps the margin of the slower: Mixtral-8x22B's
    band reaches down by its 225 ms, Qwen3-Next-80B-A3B's objectives tighten by its 200 ms; a model the
    measurements pin has neither."""
    from infra.perf.calibration import band_for
    from infra.perf.estimate import compile_deployment, moe_latency_forms, unpinned_ttft_s
    from infra.planner.candidates import confident

    cat = load_catalog()
    wl = Workload(isl=1000, osl=200, concurrency=1)
    for model, unpinned in (("Mixtral-8x22B", -1), ("Qwen3-Next-80B-A3B", 1), ("DeepSeek-R1", 0)):
        dep = Deployment(model, "H200", "vllm", "fp8", agg=Role(Parallel(tp=8, moe_tp=8)))
        one = compile_deployment(dep, cat)
        d = one.calibration.unpinned_ttft_s
        assert (d > 0.1) - (d < -0.1) == unpinned and (unpinned or d == 0), (model, d)
        est = one.at(wl)
        band = band_for("agg", model, one.calibration.calibrated)
        mean = est.prediction.ttft["mean"]
        lo, hi = (v / 1000 for v in est.error_band()["ttft_mean_ms"])
        alone = band.interval("ttft", mean)
        assert (lo, hi) == pytest.approx((min(alone[0], band.interval("ttft", mean + d)[0]),
                                          max(alone[1], band.interval("ttft", mean + d)[1])), rel=1e-6)
        assert (lo < alone[0] * 0.999) == (unpinned < 0) and (hi > alone[1] * 1.001) == (unpinned > 0)
        slo = {("ttft", "p99"): 1.0, ("tpot", "p99"): 0.05, ("e2e", "p99"): 20.0}
        kept = confident(slo, dep, 0.9, one.calibration.calibrated, unpinned_s=d)
        plain = confident(slo, dep, 0.9, one.calibration.calibrated)
        assert kept[("tpot", "p99")] == plain[("tpot", "p99")]
        for metric in ("ttft", "e2e"):
            assert kept[(metric, "p99")] == pytest.approx(plain[(metric, "p99")] - max(d, 0.0))
    # The user's measurements of the model, or of the deployment, set its TTFT; of the framework or device, not.
    forms = moe_latency_forms(cat.model("Mixtral-8x22B"), cat, 6.8)
    assert unpinned_ttft_s(forms, "framework") == unpinned_ttft_s(forms, "") == forms[2] - forms[1] < 0
    assert unpinned_ttft_s(forms, "model") == unpinned_ttft_s(forms, "deployment") == unpinned_ttft_s(None, "") == 0


def test_a_workload_at_a_rate_is_what_replace_makes():
    wl = Workload(isl=1000, osl=200, concurrency=4, isl_cv=0.5, isl_quantiles=(("p90", 2.0),), peers=3)
    fast, slow = wl.at_rate(2.5), dataclasses.replace(wl, rate=2.5, concurrency=None)
    assert fast == slow and hash(fast) == hash(slow) and repr(fast) == repr(slow)
    assert wl.concurrency == 4 and wl.rate is None  # the workload it was made from is left as it was
    with pytest.raises(InfraError, match="rate must be above 0"):
        wl.at_rate(0.0)


def test_one_client_never_waits_on_its_own_prompt():
    """In a closed loop a client's next prompt comes after its answer: alone, its decode steps carry no prompt and
    its prompt queues behind none. A 32k-token prompt with a 128-token answer once had its TPOT priced at twice
    its decode step (its own prompts riding in it) and its TTFT queued behind its own prefill."""
    dep = _agg(tp=8)
    wl = Workload(isl=32768, osl=128, concurrency=1)
    est = estimate(dep, wl, CAT)
    w = est.workers["agg"]
    ctx = 32768 + 128 / 2
    assert est.prediction.tpot["mean"] == pytest.approx(w.step(1.0, ctx) / w.factors.accept, rel=1e-9)
    # TTFT: the request's fixed latency, its own prefill and half a step in flight; no queue.
    prefill = w.step(0.0, ctx, 8192, 32768 / 2) * 4
    assert est.prediction.ttft["mean"] < w.request_s() + prefill + w.step(0.0, ctx) + 0.05
    # Among many clients the others' prompts do ride in the steps: TPOT is well above the bare decode step.
    many = estimate(dep, dataclasses.replace(wl, concurrency=64), CAT)
    assert many.prediction.tpot["mean"] > 1.5 * many.workers["agg"].step(many.prediction.batch, ctx)


def test_a_prompt_waits_for_no_more_than_the_other_clients_prompts():
    """However loaded the prefill queue, two clients' prompt waits for at most the other's: a 32k-token prompt
    with a 16-token answer on 8 H200s queued for 1.5 prefills of another client (TTFT 2.94 s against 1.41 s
    alone) before the wait was bounded by the clients ahead."""
    dep = _agg(tp=8)
    one, two = (estimate(dep, Workload(isl=32768, osl=16, concurrency=c), CAT).prediction for c in (1, 2))
    assert two.ttft["mean"] <= 2 * one.ttft["mean"]


def test_a_worker_with_other_factors_is_the_one_replace_builds():
    # Rebinding factors is what a calibration fit does to every measured worker at every evaluation: the fast
    # path must price steps exactly as a fresh `dataclasses.replace`, and leave behind what caches kept on the old.
    old = worker("DeepSeek-V3", "H200", "fp8", Parallel(tp=8, ep=8), kv="fp8")
    old.__dict__["_vector_row"] = [0.0]
    factors = dataclasses.replace(Factors(), gemm=0.41, mem=0.63, step_ms=3.0, layer_us=7.0)
    fast, slow = old.with_factors(factors), dataclasses.replace(old, factors=factors)
    assert fast.factors is factors and "_vector_row" not in fast.__dict__
    assert fast.step_terms == slow.step_terms and fast.fixed_step_s() == slow.fixed_step_s()
    for args in ((1, 1000.0), (64, 3000.0, 512.0, 256.0), (0.0, 0.0, 8192.0, 4096.0)):
        assert fast.step(*args) == slow.step(*args) != old.step(*args)


class _HalfStep:
    """A worker whose decode step takes 0.5 s and a step with prompt tokens 1 s."""

    def step(self, decode, context, prefill=0.0, prefill_context=0.0):
        return 1.0 if prefill else 0.5


def test_a_lone_client_whose_prompt_fills_every_step_decodes_at_the_plain_step():
    # One prompt a second, each riding one step that it doubles: every step carries a chunk (share exactly 1), none
    # of them with the lone client's decodes. The weighted step divided 0 by 0 there (DeepSeek-V3.2 on GB300,
    # 64k-token prompts, one client: a traceback from `infra estimate`).
    assert _mixed_step(_HalfStep(), 1.0, 100.0, 1.0, 100.0, 100.0, 8192, seen=0.0) == 0.5
    assert _mixed_step(_HalfStep(), 1.0, 100.0, 1.0, 100.0, 100.0, 8192) == 1.0
