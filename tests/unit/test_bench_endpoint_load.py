"""What `infra bench --endpoint` sends: the workload and objectives of an intent or flags, and bad flags."""

from __future__ import annotations

import pytest

from infra import api
from infra.bench.client import BenchRun
from infra.bench.endpoint import _plan_case, parse_objectives, plan_load, source_from
from infra.bench.metrics import RequestRecord
from infra.errors import InfraError
from infra.planner.types import load_plan

from ..conftest import EXAMPLES


def test_an_intents_workload_and_objectives():
    src = source_from(EXAMPLES / "chat-mixed-fleet.yaml", None, None)
    assert src.service == "chat" and src.attainment == pytest.approx(0.99)
    assert src.objectives == {"ttft_p50": 300.0, "ttft_p99": 1500.0, "tpot_p99": 60.0, "e2e_p99": 60000.0}
    load = plan_load(src, concurrency=None, rate=None, requests=50, duration_s=None, input_tokens=None,
                     output_tokens=None)
    assert load.arrival == "gamma" and load.rate == 40.0 and len(load.requests) == 50
    assert len({s.input_tokens for s in load.requests}) > 10  # lengths follow the intent's distribution
    assert all(s.prefix_tokens == int(0.35 * s.input_tokens) for s in load.requests)
    over = plan_load(src, concurrency=3, rate=None, requests=5, duration_s=None, input_tokens=10, output_tokens=7)
    assert over.concurrency == 3 and over.arrival == "closed"
    assert {(s.input_tokens, s.output_tokens) for s in over.requests} == {(10, 7)}


def test_flags_alone_and_duration_bounds():
    closed = plan_load(None, concurrency=None, rate=None, requests=None, duration_s=None, input_tokens=None,
                       output_tokens=None)
    assert closed.concurrency == 1 and len(closed.requests) == 100
    timed = plan_load(None, concurrency=None, rate=5.0, requests=None, duration_s=10.0, input_tokens=8,
                      output_tokens=4)
    assert timed.arrival == "poisson" and len(timed.requests) == 51
    # A larger closed loop sends ten requests per client, so that what follows its start-up is judged.
    many = plan_load(None, concurrency=32, rate=None, requests=None, duration_s=None, input_tokens=8,
                     output_tokens=4)
    assert len(many.requests) == 320
    agents = plan_load(source_from(EXAMPLES / "agent-workload.yaml", None, None), concurrency=None, rate=None,
                       requests=None, duration_s=None, input_tokens=None, output_tokens=None)
    assert agents.concurrency == 64 and len(agents.requests) == 640


@pytest.mark.parametrize("kw, flag", [
    ({"concurrency": 2, "rate": 1.0}, "--rate"),
    ({"concurrency": 0}, "--concurrency"),
    ({"requests": -1}, "--requests"),
])
def test_bad_flags_name_themselves(kw, flag):
    args = {"concurrency": None, "rate": None, "requests": 3, "duration_s": None, "input_tokens": None,
            "output_tokens": None, **kw}
    with pytest.raises(InfraError) as exc:
        plan_load(None, **args)
    assert flag in str(exc.value) and "To fix" in str(exc.value)


def test_unknown_service_and_both_sources_are_refused():
    with pytest.raises(InfraError, match="no service 'nope'"):
        source_from(EXAMPLES / "chat-mixed-fleet.yaml", None, "nope")
    with pytest.raises(InfraError, match="not both"):
        source_from(EXAMPLES / "chat-mixed-fleet.yaml", EXAMPLES / "x.yaml", None)
    with pytest.raises(InfraError, match="unknown objective"):
        parse_objectives("latency_p99=3ms")


def test_the_prefix_cache_share_a_server_counted_is_the_case_line_s(tmp_path):
    """The share of the prompt tokens the server's prefix cache held over a run (its /metrics counters) is what a
    saved case line takes its prompts to have found cached, so a calibration does not read the cache's speed-up
    as the engine's; where the server counts none, none."""
    api.plan(EXAMPLES / "small-model-shared.yaml", tmp_path, verify=False)
    plan = load_plan(tmp_path / "plan.yaml")
    service = next(s.name for s in plan.spec.services if len(s.allocations) == 1)
    load = plan_load(None, concurrency=2, rate=None, requests=8, duration_s=None, input_tokens=400, output_tokens=8)
    records = [RequestRecord(i, 0.1 * i, 0.1 * i, ttft=0.05, e2e=0.2, input_tokens=400, output_tokens=8)
               for i in range(8)]
    for share, expected in ((0.6, 0.6), (None, 0.0)):
        run = BenchRun(records, [], "m", "http://127.0.0.1:9/v1", "chat", load, 1.0, prefix_hit=share)
        [group] = _plan_case(plan, service, load, run, records, 0)
        assert group["case"]["prefix_hit"] == pytest.approx(expected)
