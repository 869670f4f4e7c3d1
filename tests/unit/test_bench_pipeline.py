"""Pipelines simulated stage by stage: the chunked stage queue, hand-off between stages, bubbles, utilisation,
verdicts and the corrections a failing pipeline objective yields."""

from __future__ import annotations

import copy
import json

import numpy as np
import pytest

from infra.bench.pipeline import _chunked, bench_pipeline, judge_pipeline, simulate_pipeline
from infra.bench.verify import _corrections
from infra.planner.candidates import Corrections
from infra.planner.types import DeploymentPlan, load_plan

from ..conftest import ROOT
from ..e2e.test_cli import infra

OMNI = ROOT / "tests" / "golden" / "omni-speech" / "plan.yaml"
VL = ROOT / "tests" / "golden" / "vision-language" / "plan.yaml"


def test_one_server_serves_in_order_and_queues_the_second():
    arrive = np.array([0.0, 0.1])
    first, end, wait, bubble, busy = _chunked(arrive, arrive, [(0.3, 0.0)], 1.0)
    assert end.tolist() == pytest.approx([0.3, 0.6])
    assert wait.tolist() == pytest.approx([0.0, 0.2])
    assert bubble.tolist() == [0.0, 0.0] and busy == pytest.approx(0.6)
    assert first.tolist() == pytest.approx(end.tolist())


def test_a_stage_that_needs_all_its_input_waits_for_the_last_of_it():
    # Input starts arriving at 0 and is complete at 2: an encoder starts at 2; the 2 s are its bubble.
    _, end, wait, bubble, _ = _chunked(np.array([0.0]), np.array([2.0]), [(0.5, 0.0)], 1.0)
    assert end[0] == pytest.approx(2.5) and bubble[0] == pytest.approx(2.0) and wait[0] == 0.0


def test_a_chunked_stage_paced_by_a_slow_producer_shows_the_wait_as_bubble():
    # A codec with 4 chunks (first output after a quarter of the work): 0.4 s of work, input spread over 3 s.
    first, end, wait, bubble, busy = _chunked(np.array([0.0]), np.array([3.0]), [(0.4, 0.0)], 0.25)
    assert first[0] == pytest.approx(0.1)
    # Chunks released at 0, 1, 2, 3; each takes 0.1 s; the last ends at 3.1.
    assert end[0] == pytest.approx(3.1)
    assert bubble[0] == pytest.approx(3.1 - 0.4) and wait[0] == 0.0 and busy == pytest.approx(0.4)


def test_two_requests_interleave_their_chunks_on_one_server():
    arrive = np.array([0.0, 0.0])
    ready = np.array([1.0, 1.0])
    _, end, wait, _, busy = _chunked(arrive, ready, [(0.2, 0.0)], 0.5)
    # Chunk 0 of both at 0 (0.1 s each), chunk 1 of both at 1.0: the server alternates, no request waits long.
    assert end.tolist() == pytest.approx([1.1, 1.2])
    assert wait.tolist() == pytest.approx([0.0, 0.2]) and busy == pytest.approx(0.4)


def test_requests_failed_upstream_are_left_out():
    first, end, _, _, busy = _chunked(np.array([0.0, np.nan]), np.array([0.0, np.nan]), [(0.1, 0.0)], 1.0)
    assert np.isnan(end[1]) and np.isnan(first[1]) and busy == pytest.approx(0.1)


@pytest.fixture(scope="module")
def omni():
    plan = load_plan(OMNI)
    run = simulate_pipeline(plan, "voice", requests=1000, seed=3, intent=ROOT / "examples" / "omni-speech.yaml")
    return plan, run


def test_stages_hand_on_in_order(omni):
    plan, run = omni
    assert [s.name for s in run.stages] == [st.name for st in plan.spec.pipelines[0].stages]
    for before, after in zip(run.stages, run.stages[1:]):
        ok = np.isfinite(after.arrive)
        # Every stage streams here: the next one starts at the previous one's first output, not before.
        assert np.all(after.arrive[ok] >= before.first[ok] - 1e-9)
        assert np.all(after.end[ok] >= before.end[ok] - 1e-9)
    last = run.stages[-1]
    assert np.all(last.end >= last.first)


def test_the_codec_waits_on_the_talker_and_says_so(omni):
    plan, run = omni
    v = judge_pipeline(plan, run)
    stages = {s["name"]: s for s in v.stages}
    assert stages["code2wav"]["bubble_share"] > 0.5 and stages["code2wav"]["bubble_ms"]["mean"] > 1000
    assert stages["audio-in"]["bubble_share"] == 0.0
    for s in v.stages:
        assert 0 < s["utilisation"] <= 1.0 and s["servers"] >= 1
    assert {o.key for o in v.objectives} == set(plan.spec.pipelines[0].objectives)
    assert set(v.units) == {st.unit for st in plan.spec.pipelines[0].stages}
    codec = v.units["voice-code2wav"]
    assert {o.key for o in codec.objectives} == {"first_output_p99", "latency_p99"}


def test_the_run_repeats_exactly(omni):
    plan, run = omni
    again = simulate_pipeline(plan, "voice", requests=1000, seed=3, intent=ROOT / "examples" / "omni-speech.yaml")
    for a, b in zip(run.stages, again.stages):
        assert np.array_equal(a.end, b.end, equal_nan=True)


def test_cpu_stage_utilisation_is_load_times_work_over_cores():
    # The LLM stage behind a load-aware router, as on a cluster with the Inference Extension: behind the example's
    # plain Service its two allocations of unequal capacity get even shares and the smaller one falls behind,
    # which stretches the run and so dilutes every stage's utilisation.
    data = load_plan(VL).model_dump(mode="json", by_alias=True, exclude_none=True)
    for svc in data["spec"]["services"]:
        if svc["name"] == "vl-llm":
            svc["routing"] = {"router": "inference-pool"}
    plan = DeploymentPlan.model_validate(data)
    bench = bench_pipeline(plan, "vl", requests=3000, seed=1, intent=ROOT / "examples" / "vision-language.yaml")
    cpu = next(s for s in bench.verdict.stages if s["kind"] == "cpu")
    st = next(s for s in plan.spec.pipelines[0].stages if s.kind == "cpu")
    rate = bench.load["rate_rps"]
    expected = rate * 0.035 / st.cpu_cores
    assert cpu["utilisation"] == pytest.approx(expected, rel=0.1)
    assert json.loads(json.dumps(bench.to_json()))["pipeline"] == "vl"


def test_a_failing_pipeline_objective_tightens_every_stage_on_its_path(omni):
    plan, run = omni
    data = plan.model_dump(mode="json", by_alias=True, exclude_none=True)
    tight = copy.deepcopy(data)
    tight["spec"]["pipelines"][0]["objectives"]["e2e_p99"]["target_ms"] = 1000.0
    tplan = DeploymentPlan.model_validate(tight)
    v = judge_pipeline(tplan, run)
    e2e = next(o for o in v.objectives if o.key == "e2e_p99")
    assert e2e.verdict == "fail" and v.overall == "fail"
    _, changed, stuck = _corrections(v.units, Corrections(), tplan, {"voice": v})
    assert stuck is None
    tightened = {(c["service"], c["objective"]) for c in changed}
    assert tightened == {("voice-audio-in", "latency_p99"), ("voice-thinker", "e2e_p99"),
                         ("voice-talker", "e2e_p99"), ("voice-code2wav", "latency_p99")}
    assert all(c["scale"] < 1 for c in changed)


def test_bench_runs_a_pipeline_from_the_cli():
    run = infra("bench", "--simulate", str(OMNI), "--service", "voice", "--requests", "300", "--json",
                "--intent", str(ROOT / "examples" / "omni-speech.yaml"))
    assert run.returncode in (0, 3), run.stderr
    data = json.loads(run.stdout.strip().splitlines()[-1])
    assert data["pipeline"] == "voice" and [s["name"] for s in data["stages"]] == [
        "audio-in", "thinker", "talker", "code2wav"]
    bad = infra("bench", "--simulate", str(OMNI), "--service", "voice", "--output-tokens", "4")
    assert bad.returncode == 1 and "--output-tokens does not apply to pipeline voice" in bad.stderr


def test_a_stage_alone_is_refused_and_a_lone_pipeline_is_the_default():
    run = infra("bench", "--simulate", str(OMNI), "--service", "voice-code2wav")
    assert run.returncode == 1 and "bench the pipeline with --service voice" in run.stderr
    lone = infra("bench", "--simulate", str(OMNI), "--requests", "200", "--json", "--intent",
                 str(ROOT / "examples" / "omni-speech.yaml"))
    assert lone.returncode in (0, 3) and json.loads(lone.stdout.strip().splitlines()[-1])["pipeline"] == "voice"


def test_clients_in_a_closed_loop_send_when_their_last_request_ends(omni):
    plan, _ = omni
    run = simulate_pipeline(plan, "voice", requests=300, seed=2, clients=8,
                            intent=ROOT / "examples" / "omni-speech.yaml")
    e2e = run.stages[-1].end - run.arrive
    # Each client's next request (request i is client i mod 8's) leaves when its previous one ended, to within
    # what the fixed point's last step moved the E2Es (a tenth of one).
    for client in range(8):
        mine = np.arange(client, len(e2e), 8)
        early = run.arrive[mine[:-1]] + e2e[mine[:-1]] - run.arrive[mine[1:]]
        assert np.all(np.abs(early) <= 0.1 * e2e[mine[:-1]])
    # So about 8 requests are in flight at any time once the loop runs (more for an instant where the clients
    # hand over at once).
    t = np.sort(run.arrive)[50:]
    in_flight = [np.sum((run.arrive <= x) & (run.arrive + e2e > x)) for x in t]
    assert 7 <= np.mean(in_flight) <= 9.5
    assert run.note and "8 clients in a closed loop" in run.note and run.load.concurrency == 8
    assert any("closed loop" in n for n in judge_pipeline(plan, run).notes)


def test_closed_arrivals_follow_each_client():
    from infra.bench.pipeline import closed_arrivals

    assert closed_arrivals(2, np.array([1.0, 2.0, 3.0, 4.0, 5.0])).tolist() == [0.0, 0.0, 1.0, 2.0, 4.0]


@pytest.mark.parametrize("flags,message", [(("--rate", "0"), "--rate: 0 is not positive"),
                                           (("--concurrency", "0"), "--concurrency: 0 is not positive")])
def test_a_pipeline_run_refuses_a_load_that_is_not_positive(flags, message):
    run = infra("bench", "--simulate", str(OMNI), "--service", "voice", *flags)
    assert run.returncode == 1 and message in run.stderr and "Traceback" not in run.stderr
