"""Calibrated physics of the performance model: collective latency, the speculative decoding of the measured
disaggregated recipes, and the decode batch of a closed loop."""

from __future__ import annotations

import dataclasses
import itertools
import math

import pytest

from infra.catalog.loader import load_catalog
from infra.perf.arch import compile_worker
from infra.perf.calibration import Factors
from infra.perf.estimate import VECTOR_MIN, build_workers, predict
from infra.perf.rows import Case, as_measured, compiled, replay, to_case
from infra.perf.rows import predict as replay_predict
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


def test_routed_experts_add_a_fixed_first_token_latency_and_a_fixed_cost_to_prompt_steps():
    f = Factors(request_ms=20.0, expert_latency_ms=10.0, expert_step_us=2.0)
    none = dataclasses.replace(f, expert_latency_ms=0.0, expert_step_us=0.0)
    dense = _worker(4, f)
    assert dense.request_s() == pytest.approx(0.020)
    assert dense.step(8, 2000, 512, 256) == pytest.approx(_worker(4, none).step(8, 2000, 512, 256))

    def moe(factors: Factors):
        return compile_worker(CAT.model("DeepSeek-R1"), CAT.device("H200"), "fp8", Parallel(tp=8, ep=8), factors)

    m, m0 = moe(f), moe(none)
    # 8 of 256 routed experts of 3 x 7168 x 2048 parameters in each of 58 MoE layers (3 of DeepSeek-R1's 61 are
    # dense): 20.4B routed parameters a token passes through, within the catalog's published total.
    assert m.routed_params_b() == pytest.approx(8 * 58 * 3 * 7168 * 2048 / 1e9, rel=0.02)
    assert m.request_s() == pytest.approx(0.020 + m.routed_params_b() * 10e-3)
    assert m.step(8, 2000, 512, 256) - m0.step(8, 2000, 512, 256) == pytest.approx(256 * 58 * 2e-6)
    # Decode-only steps carry no prompt, so the other sequences' token time is untouched.
    assert m.step(8, 2000) == pytest.approx(m0.step(8, 2000))


def _disagg_case(recipe: bool) -> Case:
    dep = Deployment("Llama-3.1-70B", "H200", "vllm", "fp8", "disagg",
                     prefill=Role(Parallel(tp=4), workers=1), decode=Role(Parallel(tp=4), workers=1))
    return Case({}, "vllm/H200", "Llama-3.1-70B", dep, Workload(isl=1000, osl=500, concurrency=32), 100.0, 10.0,
                recipe=recipe)


def test_recipe_speculation_applies_to_measured_decode_workers_only():
    f = Factors(recipe_accept=1.5)
    case = dataclasses.replace(_disagg_case(recipe=True), speculative=True)
    assert as_measured(case, "decode", f).accept == pytest.approx(1.5)
    assert as_measured(case, "prefill", f).accept == 1.0
    # A recipe known to decode one token a step, and one the rows leave open (halfway, in log space).
    assert as_measured(dataclasses.replace(case, speculative=False), "decode", f).accept == 1.0
    assert as_measured(dataclasses.replace(case, speculative=None), "decode", f).accept == pytest.approx(1.5 ** 0.5)
    # The recipe's draft tokens go with its speculation, half of them where the rows leave it open.
    drafted = dataclasses.replace(case, draft=3.0)
    assert as_measured(drafted, "decode", f).draft_tokens == 3.0
    assert as_measured(dataclasses.replace(drafted, speculative=None), "decode", f).draft_tokens == 1.5
    assert as_measured(dataclasses.replace(drafted, speculative=False), "decode", f).draft_tokens == 0.0
    assert as_measured(_disagg_case(recipe=False), "decode", f).accept == 1.0
    measured = replay_predict(case, CAT, factors=f)
    own = replay_predict(_disagg_case(recipe=False), CAT, factors=f)
    assert isinstance(measured, tuple) and isinstance(own, tuple) and measured[1] < own[1]
    # A plan's estimate never assumes the recipes' speculation.
    workers, _, link = build_workers(case.deployment, CAT, factors=f)
    assert predict(case.deployment, case.workload, workers, link).tpot["mean"] * 1e3 == pytest.approx(own[1])


def test_speculative_decoding_computes_the_draft_tokens_but_reads_the_kv_cache_once():
    plain, drafted = _worker(8), _worker(8, Factors(draft_tokens=3.0))
    # Memory-bound at one sequence: four tokens cost little more than one.
    assert plain.step(1, 2000) < drafted.step(1, 2000) < 1.2 * plain.step(1, 2000)
    # Compute-bound at 512: as much as 2048 sequences' GEMMs, with 512 sequences' cache reads.
    assert drafted.step(512, 2000) > 2 * plain.step(512, 2000)
    assert drafted.step(512, 2000) < plain.step(2048, 2000)


def test_closed_loop_decode_batch_holds_only_clients_past_their_first_token():
    dep = dataclasses.replace(_disagg_case(recipe=False).deployment)
    workers, _, link = build_workers(dep, CAT)
    long_prompts = predict(dep, Workload(isl=16000, osl=200, concurrency=64), workers, link)
    assert long_prompts.batch < 64 * 0.9
    e2e = long_prompts.ttft["mean"] + 199 * long_prompts.tpot["mean"]
    assert long_prompts.batch == pytest.approx(64 * 199 * long_prompts.tpot["mean"] / e2e, rel=0.01)


def test_mla_prefill_attends_in_the_decompressed_form():
    ds = CAT.model("DeepSeek-R1")
    w = compile_worker(ds, CAT.device("H200"), "fp8", Parallel(tp=8), Factors())
    mla = ds.mla
    assert w.prefill_qk_scale == pytest.approx(
        (mla.qk_nope_head_dim + mla.qk_rope_head_dim + mla.v_head_dim) / (2 * mla.kv_lora_rank + mla.qk_rope_head_dim))
    # Only the attention of the prompt is cheaper: a long prompt's step costs less than in the absorbed form.
    absorbed = dataclasses.replace(w, prefill_qk_scale=1.0)
    assert w.step(0, 0, 8192, 4096) < absorbed.step(0, 0, 8192, 4096)
    assert w.step(16, 4000) == pytest.approx(absorbed.step(16, 4000))
    assert _worker(4).prefill_qk_scale == 1.0


def test_device_memory_figures_are_binary_gigabytes():
    w = _worker(4)
    assert w.memory.device_gb == 141
    assert w.memory.usable_gb == pytest.approx(141 * 2**30 / 1e9 * 0.9)


def _row(**kw: str) -> dict[str, str]:
    row = {"model_path": "deepseek-ai/DeepSeek-R1", "system": "b200_sxm", "backend": "trtllm", "precision": "fp4",
           "mode": "agg", "isl": "1024", "osl": "1024", "silicon_ttft_ms": "500", "silicon_tpot_ms": "20",
           "silicon_data_source": "silicon_concurrency=96"}
    return {**row, **kw}


def test_replayed_sglang_attention_dp_prefills_its_chunk_divided_among_the_groups():
    from infra.perf.rows import sglang_chunk, to_case

    wide = dict(backend="sglang", system="gb200", precision="fp8", tp_size="72", batch_size="256", isl="7372",
                silicon_data_source="silicon_concurrency=256")
    case = to_case(_row(**wide), CAT)
    assert isinstance(case, Case) and case.deployment.agg.parallel.attention_dp == 72
    # GB200 (186 GB): SGLang's default 16384-token chunk, over 72 groups.
    assert sglang_chunk(186) == 16384 and case.deployment.agg.max_num_tokens == 16384 // 72
    assert sglang_chunk(141) == 8192  # H200
    # Each group then takes its prompts in 227-token steps: the prompts of a step wait far longer than in whole
    # 8192-token chunks, which is what the rack's measured TTFT (2.8 s at 256 clients) shows.
    whole = dataclasses.replace(case, deployment=dataclasses.replace(
        case.deployment, agg=dataclasses.replace(case.deployment.agg, max_num_tokens=8192)))
    assert replay_predict(case, CAT)[0] > 2 * replay_predict(whole, CAT)[0]
    narrow = to_case(_row(**{**wide, "tp_size": "8", "moe_ep_size": "8", "moe_tp_size": "1"}), CAT)
    assert narrow.deployment.agg.parallel.attention_dp == 1 and narrow.deployment.agg.max_num_tokens == 8192
    trtllm = to_case(_row(**{**wide, "backend": "trtllm", "precision": "fp4"}), CAT)
    assert trtllm.deployment.agg.parallel.attention_dp == 72 and trtllm.deployment.agg.max_num_tokens == 8192


def test_replay_reads_whole_batches_over_tp_ranks_as_attention_data_parallelism():
    from infra.perf.rows import to_case

    case = to_case(_row(batch_size="12", tp_size="8", moe_ep_size="4", moe_tp_size="2"), CAT)
    assert isinstance(case, Case)
    assert (case.deployment.agg.parallel.tp, case.deployment.agg.parallel.attention_dp) == (1, 8)
    # A batch that holds every client keeps the recorded tensor parallelism.
    case = to_case(_row(batch_size="96", tp_size="8", moe_ep_size="8"), CAT)
    assert (case.deployment.agg.parallel.tp, case.deployment.agg.parallel.attention_dp) == (8, 1)


def test_replay_places_an_unrecorded_layout_on_the_smallest_that_holds_the_weights():
    from infra.perf.rows import to_case

    ones = {f"{r}_{k}": "1" for r in ("prefill", "decode") for k in ("tp_size", "attention_dp_size", "moe_ep_size")}
    case = to_case(_row(mode="disagg", system="gb200", backend="sglang", precision="fp8", **ones), CAT)
    assert isinstance(case, Case)
    p = case.deployment.decode.parallel
    assert p.attention_dp == p.ep > 1 and p.devices < 72
    workers, _, _ = build_workers(case.deployment, CAT)
    smaller = dataclasses.replace(case.deployment, decode=Role(Parallel(attention_dp=p.ep // 2, ep=p.ep // 2)))
    with pytest.raises(Exception, match="does not fit"):
        build_workers(smaller, CAT)


def test_replay_reads_a_tp_recorded_as_the_product_of_the_expert_degrees_on_one_node():
    from infra.perf.rows import to_case

    layout = {"batch_size": "64", "tp_size": "64", "moe_tp_size": "8", "moe_ep_size": "8"}
    case = to_case(_row(model_path="Qwen/Qwen3.5-397B-A17B", system="h200_sxm", backend="sglang", precision="fp8",
                        silicon_data_source="silicon_concurrency=64", **layout), CAT)
    assert isinstance(case, Case)
    p = case.deployment.agg.parallel
    assert (p.tp, p.ep, p.moe_tp, p.devices) == (8, 8, 1, 8)  # 32 heads: tp 64 cannot have run
    build_workers(case.deployment, CAT)
    # Heads that tp 64 would divide change nothing: 64 devices do not fit on an 8-GPU node.
    case = to_case(_row(system="h200_sxm", precision="fp8", silicon_data_source="silicon_concurrency=64", **layout),
                   CAT)
    p = case.deployment.agg.parallel
    assert (p.tp, p.attention_dp, p.ep, p.moe_tp) == (8, 1, 8, 1)
    # Attention-DP 64 with one sequence each is 8 data-parallel ranks of 8 sequences.
    adp = {**layout, "batch_size": "1", "tp_size": "1", "attention_dp_size": "64"}
    case = to_case(_row(system="h200_sxm", precision="fp8", silicon_data_source="silicon_concurrency=64", **adp), CAT)
    agg = case.deployment.agg
    assert (agg.parallel.tp, agg.parallel.attention_dp, agg.parallel.ep, agg.batch_cap) == (1, 8, 8, 8)
    assert case.workload.concurrency == 64


def test_replay_spreads_a_disaggregated_roles_experts_over_all_its_devices():
    from infra.perf.rows import to_case

    def roles(decode_tp: str, decode_moe_tp: str) -> tuple[Parallel, Parallel]:
        row = _row(mode="disagg", system="gb200", prefill_tp_size="4", prefill_moe_tp_size="1",
                   prefill_moe_ep_size="4", decode_tp_size=decode_tp, decode_moe_tp_size=decode_moe_tp,
                   decode_moe_ep_size="4", prefill_attention_dp_size="1", decode_attention_dp_size="1")
        case = to_case(row, CAT)
        assert isinstance(case, Case)
        return case.deployment.prefill.parallel, case.deployment.decode.parallel

    prefill, decode = roles("32", "8")  # decode tp 32 recorded as moe_tp 8 x the prefill's ep 4
    assert (prefill.tp, prefill.ep, prefill.moe_tp) == (4, 4, 1)
    assert (decode.tp, decode.attention_dp, decode.ep, decode.moe_tp) == (1, 32, 32, 1)
    _, decode = roles("8", "2")  # up to 8 devices the attention stays tensor-parallel
    assert (decode.tp, decode.attention_dp, decode.ep, decode.moe_tp) == (8, 1, 8, 1)


def test_replay_runs_a_wide_moe_role_whose_tp_cannot_split_the_heads_as_attention_data_parallelism():
    from infra.perf.rows import to_case

    wide = {f"{r}_{k}": v for r in ("prefill", "decode")
            for k, v in (("tp_size", "72"), ("moe_tp_size", "72"), ("moe_ep_size", "1"), ("attention_dp_size", "1"))}
    row = _row(model_path="Qwen/Qwen3-235B-A22B-FP8", mode="disagg", system="gb200", precision="fp8", **wide)
    case = to_case(row, CAT)  # 64 heads: tp 72 cannot have run
    assert isinstance(case, Case)
    for p in (case.deployment.prefill.parallel, case.deployment.decode.parallel):
        assert (p.tp, p.attention_dp, p.ep, p.moe_tp) == (1, 72, 72, 1)
    build_workers(case.deployment, CAT)


def test_replay_runs_an_aggregated_moe_layout_wider_than_a_node_as_wide_ep():
    from infra.perf.rows import to_case

    # 128 heads divide by 64, but the sweeps that record tp 36 and tp 48 as data-parallel attention ran tp 64 so too.
    row = _row(system="gb200", batch_size="538", tp_size="64", moe_tp_size="64", moe_ep_size="1",
               attention_dp_size="1", silicon_data_source="silicon_concurrency=538")
    p = to_case(row, CAT).deployment.agg.parallel
    assert (p.tp, p.attention_dp, p.ep, p.moe_tp) == (1, 64, 64, 1)
    p = to_case({**row, "tp_size": "8", "moe_tp_size": "8"}, CAT).deployment.agg.parallel
    assert (p.tp, p.attention_dp, p.moe_tp) == (8, 1, 8)


def test_replay_runs_attention_data_parallel_over_expert_devices_when_no_degree_is_recorded():
    from infra.perf.rows import to_case

    qwen = {"model_path": "Qwen/Qwen3-235B-A22B-FP8", "system": "h200_sxm", "backend": "vllm", "precision": "fp8",
            "batch_size": "8", "silicon_data_source": "silicon_concurrency=8"}
    case = to_case(_row(**qwen, tp_size="1", moe_tp_size="2", moe_ep_size="1"), CAT)
    assert isinstance(case, Case)
    p = case.deployment.agg.parallel
    assert (p.tp, p.attention_dp, p.moe_tp, p.devices) == (1, 2, 2, 2)
    # A recorded attention-DP degree is kept as it is.
    case = to_case(_row(**qwen, tp_size="1", attention_dp_size="1", moe_tp_size="2", moe_ep_size="1"), CAT)
    assert case.deployment.agg.parallel.attention_dp == 1


def test_replay_runs_a_dense_models_clients_in_whole_batches_as_replicas():
    from infra.perf.rows import to_case

    row = _row(model_path="Qwen/Qwen3-32B", system="gb200", precision="bf16", batch_size="144", tp_size="2",
               silicon_data_source="silicon_concurrency=288")
    case = to_case(row, CAT)
    assert isinstance(case, Case) and case.deployment.agg.workers == 2
    assert case.deployment.agg.parallel.tp == 2 and case.deployment.agg.parallel.attention_dp == 1
    assert to_case({**row, "silicon_data_source": "silicon_concurrency=144"}, CAT).deployment.agg.workers is None


def test_replay_reads_the_quantization_tools_spellings_of_precision():
    from infra.perf.rows import to_case

    for spelled, ours in (("nvfp4", "fp4"), ("bfloat16", "bf16"), ("FP8_BLOCK", "fp8")):
        case = to_case(_row(precision=spelled, batch_size="96", tp_size="8", moe_ep_size="8"), CAT)
        assert isinstance(case, Case) and case.deployment.precision == ours
    case = to_case(_row(precision="", gemm_quant_mode="fp8", batch_size="96", tp_size="8", moe_ep_size="8"), CAT)
    assert case.deployment.precision == "fp8"


def test_replay_without_recorded_clients_runs_as_many_as_the_batches_hold():
    from infra.perf.rows import to_case

    case = to_case(_row(silicon_data_source="measured=2026-03-17", batch_size="28", tp_size="8",
                        attention_dp_size="2", moe_ep_size="8"), CAT)
    assert isinstance(case, Case) and case.workload.concurrency == 56
    assert to_case(_row(silicon_data_source="measured=2026-03-17", mode="disagg"), CAT) == \
        "no silicon_concurrency in silicon_data_source and no batch size to stand in"
    # A disaggregated row's clients are its decode batches: 24 sequences in each of 3 workers.
    disagg = to_case(_row(silicon_data_source="measured=2026-01-25", mode="disagg", model_path="Qwen/Qwen3-235B-A22B",
                          system="h100_sxm", precision="fp8", prefill_batch_size="1", prefill_num_workers="1",
                          prefill_tp_size="1", prefill_attention_dp_size="4", prefill_moe_tp_size="0",
                          prefill_moe_ep_size="0", decode_batch_size="24", decode_num_workers="3",
                          decode_tp_size="4", decode_attention_dp_size="1", decode_moe_tp_size="0",
                          decode_moe_ep_size="0"), CAT)
    assert isinstance(disagg, Case) and disagg.workload.concurrency == 72


def test_replay_shards_experts_over_the_role_when_no_expert_degree_is_recorded():
    from infra.perf.rows import to_case

    # vLLM rows write 0 for the expert degrees: its engines shard the experts over tensor parallelism, or over
    # every data-parallel rank as expert parallelism. Replicated, 235B of FP8 weights would not fit 80 GB devices.
    case = to_case(_row(model_path="Qwen/Qwen3-235B-A22B", system="h100_sxm", precision="fp8", mode="disagg",
                        silicon_data_source="silicon_concurrency=56", prefill_tp_size="1",
                        prefill_attention_dp_size="4", prefill_moe_tp_size="0", prefill_moe_ep_size="0",
                        decode_tp_size="4", decode_attention_dp_size="1", decode_moe_tp_size="0",
                        decode_moe_ep_size="0", decode_num_workers="1"), CAT)
    assert isinstance(case, Case)
    assert (case.deployment.prefill.parallel.ep, case.deployment.prefill.parallel.attention_dp) == (4, 4)
    assert (case.deployment.decode.parallel.moe_tp, case.deployment.decode.parallel.tp) == (4, 4)
    assert isinstance(replay_predict(case, CAT), tuple)


def test_rows_of_the_dated_sweeps_replay_their_clients_lengths_and_first_wave():
    from infra.perf.rows import to_case

    sweep = to_case(_row(silicon_data_source="source_file=2026-03-25.csv; model=DeepSeek-R1; "
                                             "silicon_concurrency=64; wip=False", batch_size="64", tp_size="8",
                         moe_ep_size="8"), CAT)
    other = to_case(_row(silicon_data_source="source_file=/data/b200/trtllm.csv; silicon_concurrency=64",
                         batch_size="64", tp_size="8", moe_ep_size="8"), CAT)
    assert isinstance(sweep, Case) and isinstance(other, Case)
    # Lengths uniform on [0.8 L, L] average 0.9 L; ten prompts per client put a tenth of them in the first wave.
    assert (sweep.workload.isl, sweep.workload.osl, sweep.wave) == (pytest.approx(921.6), pytest.approx(921.6),
                                                                    pytest.approx(0.1))
    assert (other.workload.isl, other.wave) == (1024, None)
    # The same runs exported from the sweeps' database.
    dump = to_case(_row(silicon_data_source="db-dump/2026-04-27; config_id=87; silicon_concurrency=64; "
                                            "measured=2026-03-25T00:00:00.000Z; workflow_run_id=337",
                        batch_size="64", tp_size="8", moe_ep_size="8"), CAT)
    assert isinstance(dump, Case) and (dump.workload.isl, dump.wave) == (pytest.approx(921.6), pytest.approx(0.1))
    f = Factors(queue=0.4)
    assert as_measured(sweep, "agg", f).queue == pytest.approx(0.1)
    assert as_measured(other, "agg", f).queue == 0.4
    # A run of this product's own client (`infra bench`) puts its clients' share of its requests in the first wave.
    assert as_measured(dataclasses.replace(sweep, recipe=False), "agg", f).queue == pytest.approx(0.1)
    assert as_measured(dataclasses.replace(sweep, recipe=False), "prefill", f).queue == pytest.approx(0.1)
    assert as_measured(dataclasses.replace(other, recipe=False), "agg", f).queue == 0.4


def test_disaggregated_sweep_rows_replay_the_recipe_that_ran_at_their_client_count():
    from infra.perf.rows import to_case

    def sweep(clients: int, **kw: str) -> Case:
        row = {"mode": "disagg", "precision": "fp8", "prefill_tp_size": "8", "decode_tp_size": "8",
               "silicon_data_source": f"source_file=2026-03-25.csv; silicon_concurrency={clients}", **kw}
        case = to_case(_row(**row), CAT)
        assert isinstance(case, Case)
        return case

    # 1024 clients: one prefill worker and four decode workers of eight data-parallel attention ranks, 256
    # sequences a rank at most, decoding with MTP (ctx1_gen4_dep8_batch256_eplb0_mtp3).
    busy = sweep(1024)
    prefill, decode = busy.deployment.prefill, busy.deployment.decode
    assert (prefill.workers, prefill.parallel.attention_dp, prefill.parallel.ep) == (1, 8, 8)
    assert (decode.workers, decode.parallel.attention_dp, decode.parallel.ep, decode.batch_cap) == (4, 8, 8, 256)
    assert (busy.speculative, busy.draft) == (True, 3)
    # Four clients: three tensor-parallel decode workers, no speculation.
    lone = sweep(4)
    assert (lone.deployment.decode.workers, lone.deployment.decode.parallel.tp, lone.speculative) == (3, 8, False)
    # 32 clients ran on two recipes of different layouts, eight MTP workers of batch 4 and three without of batch
    # 1024: the row is predicted as the geometric mean of the two.
    both = sweep(32)
    layouts = [(both.deployment, both.speculative, both.draft), *both.alternatives]
    assert sorted((d.decode.workers, d.decode.batch_cap, s, k) for d, s, k in layouts) == [(3, 1024, False, 0),
                                                                                          (8, 4, True, 3)]
    alone = [replay_predict(dataclasses.replace(both, deployment=d, speculative=s, draft=k, alternatives=()), CAT)
             for d, s, k in layouts]
    mixed = replay_predict(both, CAT)
    assert isinstance(mixed, tuple) and all(isinstance(a, tuple) for a in alone)
    assert mixed[1] == pytest.approx((alone[0][1] * alone[1][1]) ** 0.5)
    # A row that records another device count, or its workers, ran none of them: the recorded columns stand.
    for case in (sweep(1024, decode_tp_size="16"), sweep(1024, prefill_num_workers="2", decode_num_workers="2")):
        assert case.speculative is None and not case.alternatives and case.deployment.decode.workers in (None, 2)
    # A row that records the recipe's own workers (the database export: prefill tp 1 x 8 attention-DP ranks,
    # decode tp 8 x 1) still takes its MTP and data-parallel attention from it, under the name of either checkpoint
    # of that architecture.
    for path in ("deepseek-ai/DeepSeek-R1", "deepseek-ai/DeepSeek-V3"):
        dump = sweep(1024, model_path=path, prefill_num_workers="1", decode_num_workers="4", prefill_tp_size="1",
                     prefill_attention_dp_size="8", decode_tp_size="8", decode_attention_dp_size="1",
                     silicon_data_source="db-dump/2026-04-27; config_id=1; silicon_concurrency=1024")
        assert (dump.model, dump.speculative, dump.draft) == (path.split("/")[1], True, 3)
        assert (dump.deployment.decode.workers, dump.deployment.decode.parallel.attention_dp) == (4, 8)
    # The H200 sweeps count clients over all decode workers: 36 are 4 on each of nine.
    h200 = sweep(36, system="h200_sxm", precision="fp8")
    assert (h200.deployment.decode.workers, h200.speculative) == (9, False)
    # Rows outside the sweeps keep the recorded columns.
    other = to_case(_row(mode="disagg", precision="fp8", prefill_tp_size="8", decode_tp_size="8",
                         silicon_data_source="source_file=/data/x.csv; silicon_concurrency=1024"), CAT)
    assert isinstance(other, Case) and other.deployment.decode.workers is None


def test_every_sweep_recipe_names_the_catalogs_model_device_and_framework_and_a_whole_layout():
    import json

    from infra.perf.rows import RECIPES

    recipes = json.loads(RECIPES.read_text())["recipes"]
    assert len(recipes) > 400
    for r in recipes:
        assert CAT.model(r["model"]).name == r["model"] and CAT.device(r["device"]).name == r["device"]
        assert CAT.framework(r["framework"]).name == r["framework"]
        assert r["concurrency"] and all(isinstance(c, int) and c > 0 for c in r["concurrency"])
        for role in (r["prefill"], r["decode"]):
            assert role["workers"] >= 1 and role["tp"] >= 1 and role["tp"] % role["ep"] == 0
        assert r["speculative"] == ("draft_tokens" in r["decode"])


def test_a_measurements_file_without_the_columns_is_an_error_naming_them(tmp_path):
    from infra.errors import InfraError
    from infra.perf.rows import load_rows

    bad = tmp_path / "rows.csv"
    bad.write_text("model_path,system\nQwen/Qwen3-32B,h200_sxm\n")
    with pytest.raises(InfraError, match=r"rows.csv:1:1: no column backend, isl, osl, silicon_ttft_ms"):
        load_rows(bad)
    with pytest.raises(InfraError, match="cannot read it"):
        load_rows(tmp_path / "missing.csv")


def test_repeatability_scores_each_repeated_run_against_the_others():
    from infra.fitting.replay import repeatability

    first = _row(id="a", silicon_ttft_ms="100", silicon_tpot_ms="10", silicon_data_source="run=1; silicon_concurrency=96")
    again = _row(id="b", silicon_ttft_ms="200", silicon_tpot_ms="10", silicon_data_source="run=2; silicon_concurrency=96")
    copy = _row(id="c", silicon_ttft_ms="200", silicon_tpot_ms="10", silicon_data_source="run=3; silicon_concurrency=96")
    other_load = _row(id="d", silicon_ttft_ms="900", silicon_tpot_ms="30", silicon_data_source="silicon_concurrency=8")
    floor = repeatability([first, again, copy, other_load])
    # Identical results count once; a different concurrency is a different workload.
    assert (floor["groups"], floor["n"]) == (1, 2)
    assert floor["ttft_median_ape"] == pytest.approx(0.75)  # |200 - 100| / 100 and |100 - 200| / 200
    assert floor["tpot_median_ape"] == pytest.approx(0.0)
    assert repeatability([first, other_load])["n"] == 0


def test_within_sweeps_divides_out_each_sweeps_level_and_scores_the_response_to_load():
    from infra.fitting.replay import within_sweeps

    wl = Workload(isl=1000, osl=500, concurrency=32)
    dep = Deployment("Llama-3.1-70B", "H200", "vllm", "fp8", "agg", agg=Role(Parallel(tp=4)))

    def scored(clients: int, measured: float, predicted: float, isl: str = "1000") -> tuple[Case, float, float]:
        row = {"isl": isl, "tp_size": "4", "batch_size": str(clients), "silicon_data_source":
               f"silicon_concurrency={clients}", "id": f"r{clients}-{isl}"}
        return Case(row, "vllm/H200", dep.model, dep, wl, measured, 10.0), predicted, 20.0

    # Every prediction half the measurement: one level for the sweep, so nothing is left once it is divided out,
    # though each row is 50% off. The batch caps rise with the clients and still make one sweep.
    level = [scored(c, 2 * p, p) for c, p in ((4, 100.0), (16, 150.0), (64, 400.0))]
    out = within_sweeps(level)
    assert (out["sweeps"], out["n"]) == (1, 3)
    assert out["ttft_median_ape"] == pytest.approx(0.0) and out["tpot_median_ape"] == pytest.approx(0.0)
    # A load response that is off shows: measured doubles from 4 to 64 clients, predicted quadruples.
    shape = [scored(4, 100.0, 100.0), scored(16, 150.0, 150.0), scored(64, 200.0, 400.0)]
    assert within_sweeps(shape)["ttft_median_ape"] == pytest.approx(0.0)
    assert within_sweeps(shape)["ttft_p90_ape"] == pytest.approx(1.0)
    # Two loads are not a sweep, and another workload is another sweep.
    assert within_sweeps(level[:2] + [scored(64, 1.0, 1.0, isl="8000")])["n"] == 0


def test_error_bands_are_quantiles_of_measured_over_predicted_per_mode():
    from infra.fitting.replay import error_bands

    wl = Workload(isl=1000, osl=500, concurrency=32)

    def agg(model: str, measured_ttft: float) -> tuple[Case, float, float]:
        dep = Deployment(model, "H200", "vllm", "fp8", "agg", agg=Role(Parallel(tp=4)))
        return Case({}, "vllm/H200", model, dep, wl, measured_ttft, 10.0), 100.0, 20.0

    # Model A measured 100..2100 ms against 100 predicted (ratios 1..21), model B 10x under its predictions.
    scored = [agg("A", 100.0 * k) for k in range(1, 22)] + [agg("B", 10.0) for _ in range(3)]
    scored.append((_disagg_case(recipe=True), 50.0, 5.0))
    scored.append((_disagg_case(recipe=True), float("inf"), 5.0))  # an unstable prediction has no ratio
    bands = error_bands(scored)
    assert bands["agg"]["n"] == 24 and bands["disagg"]["n"] == 1
    ratios = sorted([float(k) for k in range(1, 22)] + [0.1] * 3)
    assert bands["agg"]["ttft"]["p50"] == pytest.approx(ratios[len(ratios) // 2 - 1] / 2 + ratios[len(ratios) // 2] / 2)
    assert bands["agg"]["tpot"]["p5"] == bands["agg"]["tpot"]["p95"] == 0.5
    # Each model's rows against the band of the other's: A's ratios are nowhere near B's, and B's below A's.
    assert bands["agg"]["held"]["ttft"] == 0.0 and bands["agg"]["held"]["tpot"] == 1.0
    assert bands["disagg"]["held"] == {"ttft": None, "tpot": None}  # one model: nothing to leave out


def test_estimates_carry_the_committed_held_out_error_band():
    from infra.perf.calibration import error_band
    from infra.perf.estimate import estimate

    band = error_band("agg")
    assert band is not None and band.rows > 100
    assert band.ttft["p5"] < band.ttft["p50"] < band.ttft["p95"]
    assert band.held_ttft is not None and 0.5 < band.held_ttft <= 1.0
    # A model the calibration never saw gets the held-out band.
    dep = Deployment("Qwen3-32B", "H200", "vllm", "fp8", "agg", agg=Role(Parallel(tp=2)))
    e = estimate(dep, Workload(isl=2000, osl=300, concurrency=16), CAT).to_json()
    lo, hi = e["error_band"]["ttft_mean_ms"]
    assert lo == pytest.approx(e["ttft_ms"]["mean"] * band.ttft["p5"], rel=1e-4)
    assert hi == pytest.approx(e["ttft_ms"]["mean"] * band.ttft["p95"], rel=1e-4)
    assert e["error_band"]["held_for_a_left_out_model"]["ttft"] == band.held_ttft
    assert "leave-one-model-out" in e["error_band"]["basis"]


def test_a_fitted_model_gets_its_own_in_sample_band():
    from infra.perf.calibration import error_band

    own = error_band("agg", "Llama-3.1-70B")
    held = error_band("agg", "Qwen3-32B")
    assert own is not None and held is not None
    assert "in-sample" in own.basis and "Llama-3.1-70B" in own.basis and own.held_ttft is None
    assert own.rows < held.rows
    # Its own measurements were fitted: a narrower band than a model the fit never saw.
    assert own.tpot["p95"] / own.tpot["p5"] < held.tpot["p95"] / held.tpot["p5"]
    # No disaggregated rows of its own: the held-out band stands in.
    assert "leave-one-model-out" in error_band("disagg", "Llama-3.1-70B").basis


def test_a_wider_margin_held_more_often_on_held_out_models():
    from infra.perf.calibration import ErrorBand

    quantiles = {f"p{5 * k}": 0.5 + 0.05 * k for k in range(1, 20)}  # ratios 0.55 .. 1.45
    band = ErrorBand("agg", 100, quantiles, quantiles, 0.8, 0.8, "test")
    assert band.held("ttft", 1.0) == pytest.approx(0.5)  # the ratio at p50 is 1.0
    assert band.held("ttft", 1.2) > band.held("ttft", 1.0) > band.held("ttft", 0.8)
    assert band.held("ttft", 10.0) == 0.95 and band.held("ttft", 0.1) == 0.05  # clipped to what was recorded
    assert band.interval("tpot", 100.0) == pytest.approx((55.0, 145.0))


def test_band_coverage_counts_measurements_inside_the_committed_band():
    from infra.fitting.replay import band_coverage

    agg = Deployment("Llama-3.1-70B", "H200", "vllm", "fp8", "agg", agg=Role(Parallel(tp=4)))
    case = Case({}, "vllm/H200", "Llama-3.1-70B", agg, Workload(isl=1000, osl=500, concurrency=32), 100.0, 10.0)
    # Predicted as measured (inside), 100x too low (outside), unstable (not counted).
    cover = band_coverage([(case, 100.0, 10.0), (case, 1.0, 0.1), (case, float("inf"), float("inf"))])
    assert cover == {"ttft": 0.5, "tpot": 0.5}


def test_lean_says_which_way_predictions_miss_by_load_length_and_layout():
    from infra.fitting.replay import lean

    def case(parallel: Parallel, isl: int, clients: int) -> Case:
        dep = Deployment("DeepSeek-R1", "B200", "trtllm", "fp4", "agg", agg=Role(parallel))
        return Case({}, "trtllm/B200", "DeepSeek-R1", dep, Workload(isl=isl, osl=500, concurrency=clients), 100.0,
                    10.0)

    wide = Parallel(tp=1, ep=72, attention_dp=72)
    # Measured 100 ms / 10 ms: the narrow layout predicted as measured, the wide one at a quarter of its TTFT
    # (optimistic) and twice its TPOT (pessimistic); an unstable prediction joins no group.
    got = lean([(case(Parallel(tp=8), 512, 4), 100.0, 10.0), (case(wide, 8000, 256), 25.0, 20.0),
                (case(wide, 8000, 256), float("inf"), float("inf"))])
    assert list(got) == ["mode agg", "prompts up to 1k", "prompts over 4k", "clients 1-8", "clients 65+", "agg tp 1",
                         "agg tp 8", "agg ep 33+", "agg attention-dp 33+"]
    assert got["agg ep 33+"] == {"n": 1, "ttft": 4.0, "tpot": 0.5}
    assert got["agg tp 8"] == {"n": 1, "ttft": 1.0, "tpot": 1.0}
    assert got["mode agg"] == {"n": 2, "ttft": 2.5, "tpot": 0.75}


def _agg_case(framework: str, parallel: Parallel, clients: int, recipe: bool = True) -> Case:
    dep = Deployment("DeepSeek-R1", "B200", framework, "fp4", "agg", agg=Role(parallel, batch_cap=64))
    return Case({}, f"{framework}/B200", "DeepSeek-R1", dep, Workload(isl=1024, osl=1024, concurrency=clients),
                500.0, 20.0, recipe=recipe)


def test_measured_trtllm_attention_dp_holds_prompts_only_while_every_rank_decodes():
    f, off = Factors(recipe_balance_steps=50.0), Factors(recipe_balance_steps=0.0)
    adp = Parallel(tp=1, ep=8, attention_dp=8)
    busy = _agg_case("trtllm", adp, clients=64)
    assert as_measured(busy, "agg", f).balance_steps == 50.0
    assert as_measured(_agg_case("sglang", adp, clients=64), "agg", f).balance_steps == 0.0
    assert as_measured(_agg_case("trtllm", adp, clients=64, recipe=False), "agg", f).balance_steps == 0.0

    def ttft(case: Case, factors: Factors) -> float:
        got = replay_predict(case, CAT, factors=factors)
        assert isinstance(got, tuple)
        return got[0]

    # Eight clients per rank: a new prompt waits 50 decode steps (about 50 TPOTs) for the others.
    extra = ttft(busy, f) - ttft(busy, off)
    tpot = replay_predict(busy, CAT, factors=f)[1]
    assert 40 * tpot < extra < 60 * tpot
    # One client per rank: the waiting prompt's own rank is idle, and the balancer lets it through.
    idle = _agg_case("trtllm", adp, clients=8)
    assert ttft(idle, f) == pytest.approx(ttft(idle, off))
    # Tensor-parallel attention has nothing to balance.
    tp = _agg_case("trtllm", Parallel(tp=8, ep=8), clients=64)
    assert ttft(tp, f) == pytest.approx(ttft(tp, off))


def test_measured_sglang_b200_sweeps_poll_for_requests_every_few_decode_steps():
    from infra.perf.rows import to_case

    def sweep(clients: int, **kw: str) -> Case:
        row = {"backend": "sglang", "batch_size": str(clients), "tp_size": "8", "moe_ep_size": "8",
               "silicon_data_source": f"source_file=2026-04-06.csv; silicon_concurrency={clients}", **kw}
        case = to_case(_row(**row), CAT)
        assert isinstance(case, Case)
        return case

    assert [sweep(c).recv_interval for c in (8, 16, 64)] == [10, 30, 30]
    assert sweep(64, system="h200_sxm", precision="fp8").recv_interval == 1
    assert sweep(64, tp_size="4", moe_ep_size="4", precision="fp8").recv_interval == 10
    # Only the DeepSeek scripts' interval is known; another model's sweep rows poll every step.
    assert sweep(64, model_path="Qwen/Qwen3-235B-A22B-FP8", precision="fp8", moe_ep_size="1",
                 moe_tp_size="8").recv_interval == 1
    # Rows outside the sweeps, and TRT-LLM's, poll every step.
    assert to_case(_row(backend="sglang", batch_size="64", tp_size="8", moe_ep_size="8"), CAT).recv_interval == 1
    assert to_case(_row(silicon_data_source="source_file=2026-04-06.csv; silicon_concurrency=64", batch_size="64",
                        tp_size="8", moe_ep_size="8"), CAT).recv_interval == 1

    busy, off = sweep(64), Factors(recipe_poll=0.0)
    assert as_measured(busy, "agg", Factors(recipe_poll=0.5)).poll_steps == 15.0
    tpot = replay_predict(busy, CAT, factors=off)[1]
    extra = replay_predict(busy, CAT, factors=Factors(recipe_poll=0.5))[0] - replay_predict(busy, CAT, factors=off)[0]
    # Fifteen decode steps on average, each a little shorter than a TPOT (which carries the prompts' chunks too).
    assert 10 * tpot < extra <= 15 * tpot
    # A lone client finds the engine idle, and the scheduler takes its request at once.
    lone = dataclasses.replace(busy, workload=dataclasses.replace(busy.workload, concurrency=1))
    assert replay_predict(lone, CAT, factors=Factors(recipe_poll=0.5))[0] == pytest.approx(
        replay_predict(lone, CAT, factors=off)[0])


def test_closed_loop_clients_in_step_need_the_kv_cache_of_their_full_length():
    dep = Deployment("Llama-3.1-70B", "H200", "vllm", "fp8", "agg", agg=Role(Parallel(tp=1)))
    workers, _, link = build_workers(dep, CAT)
    full = workers["agg"].max_sequences(1024 + 8192)
    assert full < workers["agg"].max_sequences(1024 + 8192 / 2)
    # More clients than fit at full length queue for a slot: the batch stops at what the cache holds then.
    p = predict(dep, Workload(isl=1024, osl=8192, concurrency=2 * full), workers, link)
    assert p.batch <= full
    # Unequal output lengths spread the clients out, and the mean resident context is what counts.
    spread = predict(dep, Workload(isl=1024, osl=8192, osl_cv=0.5, concurrency=2 * full), workers, link)
    assert spread.batch > full
    # The same holds for the decode workers of a disaggregated deployment.
    pd = Deployment("Llama-3.1-70B", "H200", "vllm", "fp8", "disagg", prefill=Role(Parallel(tp=1), workers=1),
                    decode=Role(Parallel(tp=1), workers=1))
    workers, _, link = build_workers(pd, CAT)
    full = workers["decode"].max_sequences(1024 + 8192)
    p = predict(pd, Workload(isl=1024, osl=8192, concurrency=2 * full), workers, link)
    assert p.batch <= full


def test_prompts_ride_in_decode_steps_and_cost_what_they_add():
    from infra.perf.serving import _mixed_step

    w = _worker(4)
    base = w.step(32, 1500)
    assert _mixed_step(w, 32, 1500, 0.0, 1000, 1000, 8192) == base
    # Under one prompt per step, a share (rate x step) of the steps carries a whole prompt.
    t = _mixed_step(w, 32, 1500, 2.0, 1000, 1000, 8192)
    assert t == pytest.approx(base + 2.0 * t * (w.step(32, 1500, 1000, 500) - base))
    # Prompts arriving together share a step: cheaper than a step of their own each.
    assert t < base + 2.0 * t * w.step(0, 0, 1000, 500)
    # The mean step grows with the rate, without a jump near 17/s, where every step starts carrying prompt tokens,
    # up to a full step (the 32 sequences' tokens and 8160 prompt tokens); prompts arriving faster than full steps
    # take them (past 8160 / (1000 x full) = 18.6/s here) never settle.
    full = w.step(32, 1500, 8192 - 32, 500)
    wall = (8192 - 32) / (1000 * full)
    rates = [0.01 * k for k in range(1, 2500)]
    steps = [_mixed_step(w, 32, 1500, r, 1000, 1000, 8192) for r in rates]
    held = [t for r, t in zip(rates, steps) if r <= wall]
    assert all(b >= a for a, b in itertools.pairwise(held)) and max(held) <= full
    assert max(b / a for a, b in itertools.pairwise(steps[:1680])) < 1.005
    assert all(math.isinf(t) for r, t in zip(rates, steps) if r > wall)


def test_committed_routed_expert_costs_are_one_fit_over_every_framework():
    from infra.perf.calibration import SHARED_FACTORS, table

    data = table()
    for name in SHARED_FACTORS:
        values = {group["factors"][name] for group in data["groups"].values()}
        assert values == {data["pooled"][name]}, name


def test_a_workload_past_the_longest_measured_prompt_widens_the_band_by_doublings():
    from infra.perf.calibration import _table, band_for, doublings_past, extrapolation_sigma

    top_isl, top_osl = _table()["measured_ranges"]["isl"][1], _table()["measured_ranges"]["osl"][1]
    assert doublings_past(top_isl, top_osl) == 0.0
    assert doublings_past(4 * top_isl, 100) == pytest.approx(2.0)
    assert doublings_past(100, 2 * top_osl) == pytest.approx(1.0)
    sigma = extrapolation_sigma("agg")
    assert sigma is not None and sigma["ttft"] > 0
    within = band_for("agg", "Qwen3-32B", False)
    past = band_for("agg", "Qwen3-32B", False, doublings=2.0)
    further = band_for("agg", "Qwen3-32B", False, doublings=3.0)
    assert "widened for a workload 4x the longest measured" in past.basis
    for metric in ("ttft", "tpot"):
        inner, outer, outest = getattr(within, metric), getattr(past, metric), getattr(further, metric)
        assert outest["p95"] >= outer["p95"] >= inner["p95"] and outest["p5"] <= outer["p5"] <= inner["p5"]
    assert past.ttft["p95"] > within.ttft["p95"] and past.ttft["p5"] < within.ttft["p5"]
    assert band_for("agg", "Qwen3-32B", False, doublings=0.0).ttft == within.ttft


def test_an_estimate_past_the_measured_lengths_says_so_and_carries_the_wider_band():
    from infra.perf.estimate import estimate

    dep = Deployment("Qwen3-32B", "H200", "vllm", "fp8", "agg", agg=Role(Parallel(tp=2)))
    short = estimate(dep, Workload(isl=4000, osl=300, rate=0.1), CAT).to_json()
    long = estimate(dep, Workload(isl=32000, osl=300, rate=0.1), CAT).to_json()
    width = {name: e["error_band"]["ttft_mean_ms"][1] / e["error_band"]["ttft_mean_ms"][0]
             for name, e in (("short", short), ("long", long))}
    assert width["long"] > width["short"]
    assert any("error band is widened" in n for n in long["notes"])
    assert not any("longer than any the calibration measured" in n for n in short["notes"])


def test_a_fits_replay_of_many_rows_is_each_rows_own_prediction_with_workers_compiled_once():
    """`rows.replay` predicts a fit's aggregated closed loops in one vector pass and rebinds each shared worker
    once: every row's figures are those of its own run, to the last bit, under any factors."""
    rows = [_row(silicon_data_source=f"silicon_concurrency={c}", batch_size="256", tp_size="8", moe_ep_size="8",
                 isl=isl) for c in (1, 2, 4, 8, 16, 32, 64, 256, 1024) for isl in ("1024", "2048", "4096")]
    rows += [_row(model_path="meta-llama/Llama-3.1-70B", system="h200_sxm", backend="vllm", precision="fp8",
                  tp_size=str(tp), batch_size="128", silicon_data_source=f"silicon_concurrency={c}")
             for tp in (4, 8) for c in (1, 8, 32, 128)]
    cases = [to_case(row, CAT) for row in rows]
    shared: dict = {}
    runs = [compiled(case, CAT, shared) for case in cases] + [compiled(_disagg_case(True), CAT, shared)]
    assert all(not isinstance(run, str) for run in runs)
    assert sum(one.deployment.mode == "agg" for run in runs for one, _, _ in run.built) >= VECTOR_MIN  # in a pass
    # Each deployment compiled once, whatever its loads and prompt lengths.
    assert len(shared) <= len(runs) // 4
    workers = {id(w) for run in runs for _, ws, _ in run.built for w in ws.values()}
    assert len(workers) == sum(len(ws) for ws, _ in shared.values())
    one, other = Factors(), Factors(gemm=0.5, queue=0.7, accept=1.3, request_ms=40.0)
    for each in ([one] * len(runs), [one, other] * (len(runs) // 2) + [other] * (len(runs) % 2)):
        assert replay(runs, each) == [run(f) for run, f in zip(runs, each)]


def test_a_sweep_row_records_lengths_drawn_on_a_range_and_its_mean():
    """The sweeps' client drew lengths uniformly on [0.8 L, L]: the case predicts at their mean and says how they
    were drawn, for a replay that draws them again (`benchmarks/sim_fidelity.py`)."""
    from infra.perf.rows import SWEEP_RANGE_RATIO, to_case

    sweep = to_case(_row(silicon_data_source="source_file=2026-03-25.csv; silicon_concurrency=8"), CAT)
    assert sweep.range_ratio == SWEEP_RANGE_RATIO == 0.8
    assert sweep.workload.isl == pytest.approx(1024 * 0.9) and sweep.wave == pytest.approx(0.1)
    other = to_case(_row(), CAT)
    assert other.range_ratio == 1.0 and other.workload.isl == 1024 and other.wave is None
    # Given that spread, the row is priced as a plan prices a closed loop whose lengths vary (its clients dephased).
    from infra.perf.rows import with_spread

    spread = with_spread(sweep)
    assert spread.workload.isl_cv == spread.workload.osl_cv == pytest.approx(0.0642, abs=1e-4)
    assert spread.workload.dephased and not sweep.workload.dephased
    assert with_spread(other) is other
