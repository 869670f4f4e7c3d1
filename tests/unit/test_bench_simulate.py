"""The simulator against the analytic model, on a real plan, and the closed verification loop."""

from __future__ import annotations

import copy
import dataclasses
import json

import numpy as np
import pytest

from infra import api
from infra.bench.engine import Engine, EngineModel, engine_for
from infra.bench.measurements import deployment_of_plan, read_measurements
from infra.bench.metrics import RequestRecord, summarize
from infra.bench.run import past_start_up, save, simulate_service
from infra.bench.simulate import Group, plan_groups, simulate
from infra.bench.verify import verify_plan
from infra.bench.workload import Load, RequestSpec
from infra.catalog.loader import load_catalog
from infra.errors import InfraError
from infra.perf.cases import read_measured
from infra.perf.estimate import build_workers, predict
from infra.perf.rows import measured_cases
from infra.perf.shape import Deployment, Parallel, Role, Workload
from infra.planner.types import DeploymentPlan

from ..conftest import EXAMPLES

CHAT = EXAMPLES / "chat-mixed-fleet.yaml"


@pytest.fixture(scope="module")
def chat_plan() -> dict:
    """The plan as its file holds it: each test edits a copy."""
    return api.plan(CHAT, top=0).plan.document()


@pytest.mark.parametrize("model,tp,rate", [("Llama-3.1-8B", 1, 1.0), ("Llama-3.1-70B", 4, 0.5)])
def test_agrees_with_the_analytic_model_at_low_load(model, tp, rate):
    """Where queueing hardly matters, simulation and prediction share their step times and must agree."""
    catalog = load_catalog()
    dep = Deployment(model, "H100-SXM", "vllm", "bf16", agg=Role(Parallel(tp=tp), batch_cap=256))
    workers, _, link = build_workers(dep, catalog)
    w = workers["agg"]
    isl, osl, n = 1000, 200, 400
    pred = predict(dep, Workload(isl=isl, osl=osl, rate=rate), workers, link)
    times = np.concatenate(([0.0], np.cumsum(np.random.default_rng(0).exponential(1 / rate, n - 1))))
    load = Load([RequestSpec(i, float(times[i]), isl, osl, -1, 0) for i in range(n)], rate, None, "poisson")
    engine = Engine(EngineModel.from_worker(w, max_num_seqs=256, max_num_batched_tokens=8192,
                                            kv_tokens=w.memory.kv_tokens))
    result = simulate([Group([engine])], load)
    got = summarize(result.records, itl_pool=result.itl_pool).metrics
    assert got["ttft"].mean == pytest.approx(pred.ttft["mean"] * 1000, rel=0.15)
    assert got["tpot"].mean == pytest.approx(pred.tpot["mean"] * 1000, rel=0.10)


def test_simulating_a_planned_service(chat_plan, tmp_path):
    plan = DeploymentPlan.model_validate(chat_plan)
    result = simulate_service(plan, requests=600, seed=1, intent=CHAT)
    assert result.summary.completed == 600 and result.summary.failed == 0
    svc = plan.spec.services[0]
    assert {o.key for o in result.verdict.objectives} == set(svc.objectives) | set(svc.attainment_objectives)
    assert all(o.predicted_ms for o in result.verdict.objectives)
    assert sum(g["requests"] for g in result.groups) == 600
    again = simulate_service(plan, requests=600, seed=1, intent=CHAT)
    assert again.to_json() == result.to_json()
    out = tmp_path / "run.jsonl"
    save(result, out)
    cases = read_measured(out)
    assert cases and all(ttft > 0 and tpot > 0 for _, _, ttft, tpot, _ in cases)
    replayed = measured_cases(out, load_catalog())
    assert {c.deployment.device for c in replayed} <= {a.device for a in plan.spec.services[0].allocations}


def test_engine_for_names_what_exists(chat_plan):
    plan = DeploymentPlan.model_validate(chat_plan)
    engine = engine_for(plan, "chat", 1)
    alloc = plan.spec.services[0].allocations[1]
    assert engine.model.max_num_seqs == alloc.engines["agg"].max_num_seqs
    assert engine.model.kv_tokens == alloc.engines["agg"].kv_cache_tokens
    with pytest.raises(InfraError, match="no service 'nope'"):
        engine_for(plan, "nope", 0)
    with pytest.raises(InfraError, match="no allocation 9"):
        engine_for(plan, "chat", 9)
    with pytest.raises(InfraError, match="no prefill engine"):
        engine_for(plan, "chat", 1, role="prefill")


def test_verification_rounds_correct_and_replan(chat_plan):
    """A tail objective the plan misses is tightened by target / measured for the next plan, and each round is
    recorded with measured, predicted, target, interval and verdict."""
    data = copy.deepcopy(chat_plan)
    data["spec"]["services"][0]["objectives"]["ttft_p99"] = 500.0
    asked = []

    def replan(corrections):
        # Stands in for the planner: a plan with more replicas, whose own objective it meets.
        asked.append(corrections)
        bigger = copy.deepcopy(chat_plan)
        bigger["spec"]["services"][0]["allocations"][1]["replicas"] = 16
        return DeploymentPlan.model_validate(bigger), "second"

    final, extra, verification = verify_plan(DeploymentPlan.model_validate(data), replan, intent=str(CHAT),
                                             requests=1500)
    section = verification.model_dump(mode="json", exclude_none=True)
    first, second = section["rounds"]
    ttft = next(o for o in first["services"][0]["objectives"] if o["key"] == "ttft_p99")
    assert first["verdict"] == "fail" and ttft["verdict"] == "fail" and ttft["measured_ms"] > 500
    assert ttft["ci_ms"][0] > 500 and ttft["predicted_ms"] and ttft["target_ms"] == 500
    scale = asked[0].scale("chat", "ttft", "p99")
    assert scale == pytest.approx(500 / ttft["measured_ms"] * 0.95, rel=1e-3)
    assert first["corrections"][0]["objective"] == "ttft_p99"
    assert second["verdict"] == "pass" and section["plan_round"] == 2 and extra == "second"
    assert final.spec.services[0].allocations[1].replicas == 16
    assert final.spec.verification == verification and verification.verdict == "pass"


def test_a_plan_with_several_services_needs_one_named(chat_plan):
    data = copy.deepcopy(chat_plan)
    other = copy.deepcopy(data["spec"]["services"][0])
    other["name"] = "chat-b"
    data["spec"]["services"].append(other)
    plan = DeploymentPlan.model_validate(data)
    with pytest.raises(InfraError, match="--service chat"):
        simulate_service(plan, requests=10, intent=CHAT)
    assert simulate_service(plan, service="chat-b", requests=50, intent=CHAT).service == "chat-b"


def test_an_inconclusive_service_is_judged_again_on_more_requests(chat_plan):
    plan = DeploymentPlan.model_validate(chat_plan)
    measured = simulate_service(plan, requests=1000, intent=CHAT).verdict.objectives
    p99 = next(o.measured_ms for o in measured if o.key == "ttft_p99")
    data = copy.deepcopy(chat_plan)
    data["spec"]["services"][0]["objectives"]["ttft_p99"] = round(p99, 1)

    def replan(corrections):
        raise AssertionError("one round only")

    _, _, verification = verify_plan(DeploymentPlan.model_validate(data), replan, intent=str(CHAT), requests=1000,
                                     max_rounds=1)
    section = verification.model_dump(mode="json", exclude_none=True)
    notes = section["rounds"][0]["services"][0]["notes"]
    assert notes[0] == "inconclusive at 1000 requests; judged on 4000"
    assert section["rounds"][0]["services"][0]["objectives"][-1]["n"] == 4000


def test_a_goodput_plan_is_verified_at_the_share_of_the_peak_it_serves(chat_plan):
    from infra.bench.verify import _served_load

    svc = DeploymentPlan.model_validate(chat_plan).spec.services[0]
    assert _served_load(svc) == {}
    assert _served_load(svc.model_copy(update={"served": 0.5})) == {"rate": pytest.approx(20.0)}
    clients = svc.model_copy(update={"served": 0.5, "demand": svc.demand.model_copy(update={"unit": "clients"})})
    assert _served_load(clients) == {"concurrency": 20}


def test_a_disaggregated_group_counts_its_requests_until_they_have_decoded():
    """Two groups of equal weight, one aggregated and one prefill/decode: the router balances requests in flight
    (a disaggregated request still counts against its group while it decodes), so neither takes nearly all."""
    catalog = load_catalog()
    dep = Deployment("Llama-3.1-8B", "H100-SXM", "vllm", "bf16", agg=Role(Parallel(tp=1), batch_cap=64))
    workers, _, _ = build_workers(dep, catalog)
    w = workers["agg"]

    def engine(role: str) -> Engine:
        return Engine(EngineModel.from_worker(w, max_num_seqs=64, max_num_batched_tokens=8192,
                                              kv_tokens=w.memory.kv_tokens), role=role)  # type: ignore[arg-type]

    n, rate = 600, 6.0
    times = np.concatenate(([0.0], np.cumsum(np.random.default_rng(1).exponential(1 / rate, n - 1))))
    load = Load([RequestSpec(i, float(times[i]), 1000, 300, -1, 0) for i in range(n)], rate, None, "poisson")
    result = simulate([Group([engine("agg")], [], 1.0, "agg"), Group([engine("prefill")], [engine("decode")], 1.0,
                                                                        "disagg")], load)
    share = float(np.mean(result.group == 1))
    assert 0.3 < share < 0.7, share


def test_a_closed_loops_start_up_wave_is_warm_up_not_judged(chat_plan):
    plan = DeploymentPlan.model_validate(chat_plan)
    result = simulate_service(plan, service="chat", requests=200, concurrency=8, intent=CHAT)
    assert len(result.records) == 200
    ttft = next(o for o in result.verdict.objectives if o.key.startswith("ttft"))
    # Judged from the first request sent once every client's first one had ended.
    settled = max(r.end for r in result.records if r.index < 8)
    judged = sum(1 for r in result.records if r.t_send >= settled)
    assert 8 < 200 - judged < 100 and ttft.n == judged == result.summary.completed == 200 - result.load["warm_up"]
    assert any(f"{200 - judged} requests completed of those sent before" in n and "warm-up" in n
               for n in result.notes or [])
    # An open loop has no such wave: every request is judged.
    open_loop = simulate_service(plan, service="chat", requests=200, rate=5.0, intent=CHAT)
    assert next(o for o in open_loop.verdict.objectives if o.key.startswith("ttft")).n == 200


def test_a_saved_run_without_case_lines_is_read_as_its_summary_judged_it(chat_plan, tmp_path):
    """A run saved without case lines (an endpoint measured without a plan) is one point of its summary: judged
    past its start-up, a steady state with no first wave where its lengths vary; where they all match, the clients
    stay in step, and the point is the whole run with its clients' share of it in that wave."""
    plan = DeploymentPlan.model_validate(chat_plan)
    dep = deployment_of_plan(plan, "chat", "plan.yaml", 0)
    for lengths, steady in (({}, True), ({"input_tokens": 500, "output_tokens": 100}, False)):
        out = tmp_path / f"run-{steady}.jsonl"
        save(simulate_service(plan, requests=40, seed=1, concurrency=8, intent=CHAT, **lengths), out)
        kept = [line for line in out.read_text().splitlines() if json.loads(line)["kind"] != "case"]
        out.write_text("\n".join(kept) + "\n")
        summary = json.loads(kept[-1])
        assert summary["load"]["warm_up"] >= 8
        [point] = read_measurements(out, dep, load_catalog()).points
        if steady:
            assert point.case.wave == 0.0 and point.case.samples == summary["completed"] < 40
            assert point.case.ttft_ms == pytest.approx(summary["ttft_ms"]["mean"], rel=1e-6)
        else:
            every = [json.loads(line)["ttft_ms"] for line in kept[:-1]]
            assert point.case.wave == pytest.approx(8 / 40) and point.case.samples == 40
            assert point.case.ttft_ms == pytest.approx(sum(every) / 40, rel=1e-6)


def _sent(index: int, t_send: float, e2e: float) -> RequestRecord:
    return RequestRecord(index, t_send, t_send, ttft=e2e / 10, e2e=e2e, input_tokens=100, output_tokens=10)


def test_the_start_up_left_out_is_what_was_sent_before_the_first_wave_ended():
    """Four clients start at once; the slowest first request ends at 10 s: what was sent before then met the
    start-up's queue and is left out, however many it is, up to half the run."""
    wave = [_sent(i, 0.0, e2e) for i, e2e in enumerate((1.0, 2.0, 3.0, 10.0))]
    later = [_sent(4 + i, t, 1.0) for i, t in enumerate((1.0, 2.0, 2.5, 3.0, 4.0, 9.5, *np.arange(10.0, 17.0, 0.5)))]
    judged, cut = past_start_up(later[::-1] + wave, 4)
    assert cut == 10 and [r.index for r in judged] == list(range(10, 24))
    # Never more than half the run; a run of no more than twice its clients, or an open loop, is judged whole.
    judged, cut = past_start_up(wave + later[:6], 4)
    assert cut == 5 and len(judged) == 5
    assert past_start_up(wave + later[:4], 4) == (wave + later[:4], 0)
    assert past_start_up(wave + later, None) == (wave + later, 0)
    # A request that failed in the start-up is judged all the same.
    failed = dataclasses.replace(later[2], ttft=None, e2e=None, error="http_500")
    judged, cut = past_start_up(wave + later[:2] + [failed] + later[3:], 4)
    assert cut == 9 and [r.index for r in judged] == [6, *range(10, 24)]


def test_decode_workers_run_one_engine_per_attention_group_of_their_own_layout():
    """A unit whose prefill worker runs tp8 and whose decode worker runs attention DP 8 simulates one prefill
    engine and eight decode engines per unit, as the manifests deploy it (counting the decode groups by the
    prefill's layout put every decode on one engine, and a plan the model sizes right failed its verification)."""
    plan = DeploymentPlan.model_validate(copy.deepcopy(api.plan(EXAMPLES / "deepseek-moe.yaml", top=0).plan.document()))
    svc = plan.spec.services[0]
    alloc = svc.allocations[0]
    assert alloc.mode == "disagg" and alloc.parallel.attention_dp == 1 and alloc.decode_parallel.attention_dp == 8
    group = plan_groups(plan, svc.name)[0]
    assert len(group.entry) == alloc.replicas * alloc.prefill_workers
    assert len(group.decode) == alloc.replicas * alloc.decode_workers * 8


def test_a_saved_closed_loop_replays_with_its_clients_first_wave(chat_plan, tmp_path):
    """A closed loop's clients start at once: a run too short to leave its start-up out (no more than twice its
    clients) replays its case lines with the share of their requests that wave is (each allocation's clients over
    its requests), not the share fitted where a run does not say; a longer one judges, and saves, what followed
    its start-up, which replays as the deployment serves its varied lengths for good: no first wave."""
    plan = DeploymentPlan.model_validate(chat_plan)
    for requests, steady in ((16, False), (40, True)):
        result = simulate_service(plan, requests=requests, seed=1, concurrency=8, intent=CHAT)
        out = tmp_path / f"run-{requests}.jsonl"
        save(result, out)
        lines = [json.loads(line) for line in out.read_text().splitlines()]
        groups = {f"{out}:{n}": o for n, o in enumerate(lines, 1) if o["kind"] == "case"}
        assert (lines[-1]["load"].get("warm_up", 0) >= 8) is steady
        assert sum(o["requests"] for o in groups.values()) == requests - lines[-1]["load"].get("warm_up", 0)
        replayed = measured_cases(out, load_catalog())
        assert len(replayed) == len(groups) == 2
        for case in replayed:
            line = groups[case.row["source"]]
            assert line.get("steady", False) is steady
            assert case.wave == (0.0 if steady else pytest.approx(line["case"]["concurrency"] / line["requests"]))




def test_a_deployment_replays_as_one_engine_per_attention_group_at_the_batch_its_prediction_holds():
    """`deployment_group` (how `benchmarks/sim_fidelity.py` replays a measured deployment): every worker's
    attention groups, each role at its own layout, the batch `batch_slots` lets it hold, and only the prefill
    side's KV cache crossing the link."""
    from infra.bench.simulate import deployment_group
    from infra.perf.serving import batch_slots

    catalog = load_catalog()
    dep = Deployment("Llama-3.1-8B", "H100-SXM", "sglang", "bf16", "disagg",
                     prefill=Role(Parallel(tp=2), batch_cap=16, workers=3),
                     decode=Role(Parallel(tp=4), batch_cap=512, workers=2))
    workers, _, link = build_workers(dep, catalog)
    wl = Workload(isl=4000, osl=500, concurrency=64)
    group = deployment_group(dep, workers, link, wl)
    assert len(group.entry) == 3 and len(group.decode) == 2
    assert group.entry[0].model.max_num_seqs == batch_slots(workers["prefill"], dep.prefill, wl) == 16
    assert group.decode[0].model.max_num_seqs == batch_slots(workers["decode"], dep.decode, wl) <= 512
    assert group.entry[0].model.kv_bytes_per_token_s > 0 and group.decode[0].model.kv_bytes_per_token_s == 0
    load = Load([RequestSpec(i, None, 4000, 500, -1, 0) for i in range(128)], None, 64, "closed")
    records = simulate([group], load).records
    assert len(records) == 128 and not any(r.error for r in records)


def test_a_simulated_verdict_says_where_the_simulator_parts_from_measured_engines(chat_plan):
    """`benchmarks/sim_fidelity.py`: the simulator's TTFT runs under the published P/D deployments' once their
    clients queue, and clients of exactly equal requests stay in step where measured ones did not. A verdict
    resting on either says so; a run of varied lengths on aggregated engines carries neither note."""
    plan = DeploymentPlan.model_validate(copy.deepcopy(api.plan(EXAMPLES / "deepseek-moe.yaml", top=0).plan.document()))
    pd = simulate_service(plan, requests=200, seed=0)
    assert any(n.startswith("disaggregated:") for n in pd.notes)
    chat = DeploymentPlan.model_validate(chat_plan)
    varied = simulate_service(chat, requests=200, seed=0, concurrency=8, intent=CHAT)
    assert not any(n.startswith(("disaggregated:", "every request has the same lengths")) for n in varied.notes)
    fixed = simulate_service(chat, requests=200, seed=0, concurrency=8, input_tokens=1000, output_tokens=100,
                             intent=CHAT)
    assert any(n.startswith("every request has the same lengths") for n in fixed.notes)
    alone = simulate_service(chat, requests=50, seed=0, concurrency=1, input_tokens=1000, output_tokens=100,
                             intent=CHAT)
    assert not any(n.startswith("every request has the same lengths") for n in alone.notes)
