"""Mechanisms behind the prior's structural misses (issue 41): the TTFT tail of long, varied prompts, attention-DP
groups stalling for each other's prompts, a lone request's steps carrying its own token, CPU expert kernels without
tensor-core tiles, the band of factors borrowed for devices no measurement covers, and workloads past the measured
lengths."""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pytest

from infra.catalog.loader import load_catalog
from infra.perf import serving
from infra.perf.arch import CPU_TILE_ROWS, MMA_MIN_ROWS, MOE_TILE_ROWS, Fabric, compile_worker, fabric
from infra.perf.calibration import borrowed_band, error_band, lookup
from infra.perf.estimate import build_workers, max_rate
from infra.perf.shape import Deployment, Parallel, Role, Workload
from infra.planner.candidates import confident

CAT = load_catalog()


def _worker(model: str, device: str, framework: str, precision: str, parallel: Parallel):
    dep = Deployment(model, device, framework, precision, agg=Role(parallel))
    return build_workers(dep, CAT)[0]["agg"]


def _lognormal(mean: float, cv: float) -> dict[str, float]:
    """The percentiles of a lognormal service of this mean and CV (what a service proportional to lengths has)."""
    return {p: serving.lognormal_q(mean, cv, serving.z_of(p)) for p in serving.PERCENTILES}


def _mg1_sojourn(rho: float, cv: float, n: int, seed: int) -> np.ndarray:
    """Times in system of an M/G/1 FIFO queue with lognormal service of mean 1 (Lindley's recursion)."""
    rng = np.random.default_rng(seed)
    s2 = math.log1p(cv * cv)
    service = rng.lognormal(-s2 / 2, math.sqrt(s2), n)
    gaps = rng.exponential(1 / rho, n)
    wait = np.zeros(n)
    for i in range(1, n):
        wait[i] = max(0.0, wait[i - 1] + service[i - 1] - gaps[i])
    return wait + service


@pytest.mark.parametrize("rho", [0.03, 0.1, 0.3, 0.6])
def test_the_ttft_tail_of_a_prefill_queue_follows_an_mg1_simulation(rho):
    # Prompts of length CV 0.43 (the long-prompt workload of issue 41): the service time's tail and the wait's are
    # independent, so their p99s do not add. Adding them put the p99 40% over the simulation at 10-30% load.
    cv = 0.43
    sim = _mg1_sojourn(rho, cv, 200_000, seed=7)
    wait = serving._kingman_wait(rho, 1.0, 1.0, cv)
    got = serving._queue_percentiles(1.0, wait, rho, 0.0, _lognormal(1.0, cv), cv)
    assert got["mean"] == pytest.approx(sim.mean(), rel=0.03)
    for p in ("p90", "p99"):
        measured = float(np.quantile(sim, float(p[1:]) / 100))
        assert got[p] == pytest.approx(measured, rel=0.15), p
    summed = (serving.lognormal_q(1.0, cv, serving.z_of("p99"))
              + ((wait / rho) * math.log(rho / 0.01) if rho > 0.01 else 0.0))
    assert got["p99"] < summed


@pytest.fixture(scope="module")
def prefill_lengths():
    """A prefill worker's service times over 100,000 prompts of 3,000 tokens on average (CV 1.2, capped at the
    model's 32k context), and the worker's price of a prompt."""
    dep = Deployment("Qwen2.5-32B", "H100-SXM", "vllm", "fp8", "disagg", prefill=Role(Parallel(tp=2), workers=1),
                     decode=Role(Parallel(tp=2), workers=1))
    wp = build_workers(dep, CAT)[0]["prefill"]

    def price(n: float) -> float:
        return wp.step(0.0, 0.0, n, n / 2)

    rng = np.random.default_rng(11)
    s2 = math.log1p(1.2 ** 2)
    lengths = np.minimum(rng.lognormal(math.log(3000.0) - s2 / 2, math.sqrt(s2), 100_000), 32768)
    return price, np.array([price(n) for n in lengths]), rng


@pytest.mark.parametrize("rho", [0.1, 0.35, 0.6])
def test_the_prefill_queue_is_priced_at_the_prompt_lengths_themselves(prefill_lengths, rho):
    # A prompt's prefill is not proportional to its length (weights read whatever the tokens, attention growing
    # with its square): the service's spread and tail are the prices of the lengths, not the length's CV and
    # percentiles scaled by the mean prompt's price, which put TTFT 4-24% under an M/G/1 simulation here.
    price, service, rng = prefill_lengths
    mean, cv, quantiles = serving._service_spread(price, 3000.0, 1.2)
    assert mean == pytest.approx(service.mean(), rel=0.03) and cv > 1.2
    gaps = rng.exponential(mean / rho, service.size)
    wait = np.zeros(service.size)
    for i in range(1, service.size):
        wait[i] = max(0.0, wait[i - 1] + service[i - 1] - gaps[i])
    sim = wait + service
    got = serving._queue_percentiles(mean, serving._kingman_wait(rho, mean, 1.0, cv), rho, 0.0, quantiles, cv)
    one = price(3000.0)
    scaled = serving._queue_percentiles(one, serving._kingman_wait(rho * one / mean, one, 1.0, 1.2), rho * one / mean,
                                        0.0, _lognormal(one, 1.2), 1.2)
    for key, q in (("mean", None), ("p90", 0.9), ("p99", 0.99)):
        measured = float(sim.mean() if q is None else np.quantile(sim, q))
        assert got[key] == pytest.approx(measured, rel=0.12), key
        assert abs(got[key] / measured - 1) < abs(scaled[key] / measured - 1), key


def test_fixed_prompts_cost_what_one_prompt_costs():
    assert serving._service_spread(lambda n: 0.01 + n * 1e-5, 2000.0, 0.0) == (0.03, 0.0, dict.fromkeys(
        serving.PERCENTILES, 0.03))


@pytest.mark.parametrize("cv,rho", [(0.43, 0.35), (0.43, 0.6), (1.0, 0.2), (1.0, 0.5), (0.0, 0.35)])
def test_the_median_ttft_counts_the_requests_that_wait(cv, rho):
    # Below half load the wait's own median is 0, yet a share rho of the requests waits: the median of service
    # plus wait lies well above the service's (adding the parts' medians put it 18-45% under the simulation).
    sim = _mg1_sojourn(rho, cv, 200_000, seed=3) if cv > 0 else _mg1_fixed(rho, 200_000, seed=3)
    wait = serving._kingman_wait(rho, 1.0, 1.0, cv)
    got = serving._queue_percentiles(1.0, wait, rho, 0.0, _lognormal(1.0, cv), cv)["p50"]
    measured = float(np.median(sim))
    assert -0.1 < got / measured - 1 < 0.2
    added = serving.lognormal_q(1.0, cv, 0.0) + ((wait / rho) * math.log(rho / 0.5) if rho > 0.5 else 0.0)
    assert abs(got / measured - 1) < abs(added / measured - 1) or cv == 0


def _mg1_fixed(rho: float, n: int, seed: int) -> np.ndarray:
    """Times in system of an M/D/1 FIFO queue with service 1."""
    gaps = np.random.default_rng(seed).exponential(1 / rho, n)
    wait = np.zeros(n)
    for i in range(1, n):
        wait[i] = max(0.0, wait[i - 1] + 1.0 - gaps[i])
    return wait + 1.0


def _dep8():
    return Deployment("DeepSeek-R1", "B200", "trtllm", "fp4",
                      agg=Role(Parallel(tp=1, ep=8, moe_tp=1, attention_dp=8)))


def test_every_attention_dp_groups_prompts_stall_each_groups_steps_in_an_open_loop():
    w = build_workers(_dep8(), CAT)[0]["agg"]
    assert serving.attention_dp_stall(w) == 8
    b, ctx, isl, chunk = 200.0, 2800.0, 800.0, 8192
    base, chunks, extra = serving._chunk_cost(w, b, ctx, isl, isl, chunk)
    lam = 0.5 / (chunks * extra * 8)  # half the steps carry some group's chunk
    assert serving._mixed_step(w, b, ctx, lam, isl, isl, chunk, 8) == pytest.approx(base / (1 - 8 * lam * chunks
                                                                                              * extra))
    assert serving._mixed_step(w, b, ctx, lam, isl, isl, chunk) == pytest.approx(base / (1 - lam * chunks * extra))
    # Past one chunk per step for the union, every step carries a chunk on its busiest group (while each group's
    # own prompt tokens stay under one prompt a step): no step time falls as prompts arrive faster, and the two
    # regimes meet where the union's chunks reach one a step.
    rates = np.linspace(0.2, 3.0, 400) / (chunks * extra * 8)
    times = [serving._mixed_step(w, b, ctx, r, isl, isl, chunk, 8) for r in rates]
    assert all(t2 >= t1 * (1 - 1e-9) for t1, t2 in zip(times, times[1:]))
    one_chunk = base + extra
    assert times[-1] == pytest.approx(one_chunk)
    light = [t for r, t in zip(rates, times) if r * 8 * t * chunks <= 1]
    assert light[-1] == pytest.approx(one_chunk, rel=0.03)


def test_attention_dp_stall_halves_the_capacity_of_wide_expert_parallelism(monkeypatch):
    # DeepSeek-R1 fp4 on 8 B200s at attention DP 8 and EP 8, ~800-token prompts, ~4k answers, TTFT p99 2 s and
    # TPOT p99 80 ms (issue 41's second family): counting a group's own prompts alone, 18 req/s.
    wl = Workload(isl=800, osl=4000, rate=1.0, isl_cv=0.3, osl_cv=0.3)
    slo = {("ttft", "p99"): 2.0, ("tpot", "p99"): 0.08}
    stalled = max_rate(_dep8(), wl, slo, CAT)[0]
    monkeypatch.setattr(serving, "attention_dp_stall", lambda w: 1.0)
    own = max_rate(_dep8(), wl, slo, CAT)[0]
    assert own / stalled > 1.6


def test_an_open_loop_without_attention_dp_is_unchanged_by_the_stall():
    w = _worker("Llama-3.1-70B", "H200", "vllm", "fp8", Parallel(tp=4))
    assert serving.attention_dp_stall(w) == 1


def test_cpu_expert_kernels_pad_no_rows_so_small_batches_read_weights():
    cpu = _worker("Qwen3-30B-A3B", "EPYC-9654", "vllm", "bf16", Parallel())
    gpu = _worker("Qwen3-30B-A3B", "H100-SXM", "vllm", "bf16", Parallel())
    assert cpu.tile_rows == CPU_TILE_ROWS and gpu.tile_rows == MOE_TILE_ROWS
    t = cpu.step_terms
    touched = t["experts_local"] * -math.expm1(t["miss"])
    read = touched * t["expert_bytes"] / t["mem_s"]
    compute = max(t["active"] * t["experts_local"] / t["experts"], touched * cpu.tile_rows) * t["expert_fl"] / t[
        "gemm_s"]
    # One token's experts: their weights' read bounds the step, not 64 padded rows of FLOPs.
    assert read > compute


def test_expert_tiles_shrink_where_a_padded_tile_would_outrun_the_weight_read():
    """A tuned grouped GEMM pads an expert to the largest tile that keeps its weight read binding: 64 rows on an
    H100 (295 FLOPs per byte of an 8-bit weight), fewer on an H20 (37 FLOPs per byte of a 16-bit one), never under
    the matrix unit's 16 (a 4-bit weight computed in 16 bits on an H20: 10)."""
    h100 = _worker("Qwen3-30B-A3B", "H100-SXM", "vllm", "fp8", Parallel())
    h20 = _worker("Qwen3-30B-A3B", "H20", "vllm", "bf16", Parallel())
    h20_fp4 = _worker("gpt-oss-20b", "H20", "vllm", "fp4", Parallel())
    assert h100.tile_rows == MOE_TILE_ROWS
    h20_dev = CAT.device("H20")
    # Peak bf16 FLOPs x 2 bytes per weight over 2 FLOPs per weight and row x bandwidth: 37 rows.
    assert h20.tile_rows == pytest.approx(h20_dev.tflops["bf16"].value / h20_dev.memory_bandwidth_tbps.value)
    assert 30 < h20.tile_rows < 40
    assert h20_fp4.tile_rows == MMA_MIN_ROWS
    # A decode batch of 16 touches ~16 x 8 of the 128 experts, 1.1 rows each: 64 padded rows of FLOPs would price
    # the experts at 1.7x their weight read on an H20; its own tile keeps the step a fifth under that at least.
    t = h20.step_terms
    touched = t["experts_local"] * -math.expm1(16 * t["miss"])
    read = touched * t["expert_bytes"] / t["mem_s"]
    assert touched * MOE_TILE_ROWS * t["expert_fl"] / t["gemm_s"] > 1.5 * read
    padded = replace(h20, tile_rows=MOE_TILE_ROWS)
    assert h20.step(16, 1024) < 0.8 * padded.step(16, 1024)


def test_borrowed_factors_carry_a_wider_band_and_the_planner_plans_against_it():
    held, borrowed = error_band("agg"), borrowed_band("agg")
    assert borrowed is not None, "the packaged calibration lacks its leave-one-architecture-out bands"
    unmeasured = borrowed_band("agg", vendor_measured=False)
    def width(band, metric):
        return band.ratio(metric, 0.95) / band.ratio(metric, 0.05)

    for metric in ("ttft", "tpot"):
        assert width(unmeasured, metric) > width(borrowed, metric)
        assert unmeasured.ratio(metric, 0.95) > borrowed.ratio(metric, 0.95)
        assert unmeasured.ratio(metric, 0.5) == pytest.approx(borrowed.ratio(metric, 0.5))
    assert held is not None
    mi300 = lookup("vllm", CAT.device("MI300X"))
    l40s = lookup("vllm", CAT.device("L40S"))
    assert not mi300.calibrated and not mi300.vendor_measured
    assert not l40s.calibrated and l40s.vendor_measured
    slo = {("ttft", "p99"): 1.0, ("tpot", "p99"): 0.04}
    dep = Deployment("Llama-3.1-70B", "MI300X", "vllm", "fp8", agg=Role(Parallel(tp=4)))
    on_mi300 = confident(slo, dep, 0.9, False, "", False)
    on_l40s = confident(slo, dep, 0.9, False, "", True)
    assert all(on_mi300[k] <= on_l40s[k] <= slo[k] for k in slo)
    assert on_mi300[("tpot", "p99")] == pytest.approx(0.04 / max(1.0, unmeasured.ratio("tpot", 0.9)))


def test_a_lone_decoding_request_steps_with_its_own_token_at_a_trickle():
    # At 0.001 req/s the time-averaged batch is far below one sequence; the request's own steps still read the
    # experts its token picks. Priced at the averaged batch, DeepSeek-R1's TPOT read a few of them (16% low here).
    dep = Deployment("DeepSeek-R1", "H200", "vllm", "fp8", agg=Role(Parallel(tp=8, ep=8, moe_tp=1)))
    w = build_workers(dep, CAT)[0]["agg"]
    wl = Workload(isl=1000, osl=200, rate=0.001)
    pred = serving.open_loop_agg(w, dep.agg, wl)
    assert pred.batch < 0.01
    lone = w.step(1.0, serving.resident_context(wl)) / w.factors.accept
    assert pred.tpot["mean"] == pytest.approx(lone, rel=1e-3)
    assert pred.tpot["mean"] > 1.1 * w.step(pred.batch, serving.resident_context(wl))


def test_an_estimate_past_the_measured_lengths_says_so():
    from infra.perf.calibration import table, unmeasured_regime
    from infra.perf.estimate import estimate

    top = (table().get("measured_ranges") or {}).get("isl")
    assert top is not None, "the packaged calibration lacks its measured ranges"
    assert unmeasured_regime(top[1], 100) == []
    dep = Deployment("Llama-3.1-405B", "H200", "vllm", "fp8", agg=Role(Parallel(tp=8)))
    est = estimate(dep, Workload(isl=9400, osl=684, rate=0.1, isl_cv=0.43), CAT)
    assert any("longer than any the calibration measured" in n for n in est.to_json()["notes"])


def test_pcie_cards_reduce_over_their_servers_pcie_not_the_nic():
    """Cards with no scale-up fabric (L40S: PCIe 4.0 x16, 64 GB/s both ways) all-reduce over the PCIe of their
    server at its speed each way, paying the collective latency twice as NCCL prices a PCI step against an NVLink
    one; past the server, the NIC carries each device's share. An NVLink device keeps its domain."""
    cat = load_catalog()
    model = cat.model("Llama-3.1-70B")
    l40s, h100 = cat.device("L40S"), cat.device("H100-SXM")
    assert fabric(l40s) == Fabric(8.0, 32e9, 2.0) and fabric(h100) == Fabric(8.0, 450e9, 1.0)
    factors = lookup("vllm", l40s).factors
    hidden = model.hidden_size
    four = compile_worker(model, l40s, "fp8", Parallel(tp=4), factors)
    assert four.ar_s_per_token == pytest.approx(2 * 3 / 4 * hidden * 2 / 32e9, rel=1e-12)
    assert four.collective_hops == 2.0
    sixteen = compile_worker(model, l40s, "fp8", Parallel(tp=16), factors)
    assert sixteen.ar_s_per_token == pytest.approx(2 * 7 / 8 * hidden * 2 / 32e9 + 2 * 1 / 2 * hidden * 2 / (8 * 50e9),
                                                   rel=1e-12)
    nvlink = compile_worker(model, h100, "fp8", Parallel(tp=4), lookup("vllm", h100).factors)
    assert nvlink.collective_hops == 1.0
    assert nvlink.ar_s_per_token == pytest.approx(2 * 3 / 4 * hidden * 2 / 450e9, rel=1e-12)
