"""The planner: CP-SAT matches brute force, limits hold, infeasibility is explained, plans are deterministic."""

from __future__ import annotations

import dataclasses
import itertools
import random
import types
from dataclasses import replace
from pathlib import Path

import pytest

import infra.planner.solve as solving
from infra import api
from infra.catalog.loader import load_catalog
from infra.errors import InfeasibleError
from infra.intent.models import Service
from infra.perf.calibration import borrowed_band, error_band, lookup
from infra.perf.shape import Parallel
from infra.planner.assemble import _beyond_the_pools
from infra.planner.candidates import Candidate, attainment_objectives, length_stats
from infra.planner.solve import Limits, _solve_apart, _solve_joint, minimal_conflict, solve
from infra.planner.types import load_plan
from infra.report.plan import plan_yaml

from ..conftest import ROOT

EXAMPLE = ROOT / "examples" / "chat-mixed-fleet.yaml"


def _cand(service, pool, devices, capacity, price, zone="a", tag="x"):
    return Candidate(service, pool, "H100-SXM", tag, "fp8", Parallel(tp=devices), devices, capacity, price, False,
                     zone, None)  # type: ignore[arg-type]


def _brute(cands, limits):
    best = None
    ranges = [range(0, limits.pool_devices[c.pool] // c.devices + 1) for c in cands]
    for counts in itertools.product(*ranges):
        use = dict(zip((c.key for c in cands), counts))
        ok = True
        for s, d in limits.demand.items():
            mine = [c for c in cands if c.service == s]
            if sum(c.capacity * use[c.key] for c in mine) < d - 1e-9 or sum(use[c.key] for c in mine) < \
                    limits.min_replicas[s]:
                ok = False
            cost_s = sum(c.cost_per_hour * use[c.key] for c in mine)
            if limits.budget_hour.get(s) is not None and cost_s > limits.budget_hour[s] + 1e-9:
                ok = False
        for p, total in limits.pool_devices.items():
            if sum(c.devices * use[c.key] for c in cands if c.pool == p) > total:
                ok = False
        if ok:
            cost = sum(c.cost_per_hour * use[c.key] for c in cands)
            best = cost if best is None else min(best, cost)
    return best


@pytest.mark.parametrize("seed", range(12))
def test_cp_sat_cost_equals_brute_force(seed):
    rng = random.Random(seed)
    cands = []
    for i in range(rng.randint(2, 4)):
        svc = rng.choice(["a", "b"])
        cands.append(_cand(svc, rng.choice(["p1", "p2"]), rng.choice([1, 2, 4]), round(rng.uniform(0.5, 5), 2),
                           round(rng.uniform(0.5, 4), 2), tag=f"f{i}"))
    services = sorted({c.service for c in cands})
    limits = Limits(demand={s: round(rng.uniform(1, 8), 2) for s in services},
                    min_replicas={s: rng.choice([1, 2]) for s in services}, zones={s: 1 for s in services},
                    budget_hour={s: rng.choice([None, 40.0]) for s in services},
                    pool_devices={"p1": rng.choice([4, 8]), "p2": rng.choice([2, 8])})
    sol = solve(cands, limits)
    brute = _brute(cands, limits)
    if brute is None:
        assert sol.status == "INFEASIBLE" and sol.core
    else:
        assert sol.status == "OPTIMAL"
        assert sol.cost_per_hour == pytest.approx(brute)


def _random_parts(rng: random.Random, services: list[str], shapes: tuple[int, int], sizes: list[int],
                  demand: float, budget: float, pools: list[int], total: list[float | None]):
    """Candidates of `shapes` (least, most) shapes per service and the limits they are solved under, drawn."""
    cands = [_cand(s, rng.choice(["p1", "p2", "p3"]), rng.choice(sizes), round(rng.uniform(0.3, 6), 2),
                   round(rng.uniform(0.5, 4), 2), zone=rng.choice(["z1", "z2"]), tag=f"f{i}")
             for s in services for i in range(rng.randint(*shapes))]
    limits = Limits(demand={s: round(rng.uniform(1, demand), 2) for s in services},
                    min_replicas={s: rng.choice([1, 2]) for s in services},
                    zones={s: rng.choice([1, 1, 2]) for s in services},
                    budget_hour={s: rng.choice([None, budget]) for s in services},
                    pool_devices={p: rng.choice(pools) for p in ("p1", "p2", "p3")},
                    total_budget_hour=rng.choice(total))
    return cands, limits


@pytest.mark.parametrize("seed", range(16))
def test_services_solved_apart_cost_what_the_joint_model_costs(seed):
    rng = random.Random(seed)
    cands, limits = _random_parts(rng, ["a", "b", "c", "d"][:rng.randint(2, 4)], (1, 3), [1, 2, 4], 12, 30.0,
                                  [4, 16, 64], [None, 40.0, 400.0])
    both = solve(cands, limits)
    joint = _solve_joint(cands, limits, 20.0, None, None, "cost")
    assert both.status == joint.status
    assert both.cost_per_hour == pytest.approx(joint.cost_per_hour)
    assert both.objective == pytest.approx(joint.objective)


@pytest.mark.parametrize("seed", range(16))
def test_a_small_model_solved_without_presolve_gives_the_same_plan(monkeypatch, seed):
    rng = random.Random(100 + seed)
    cands, limits = _random_parts(rng, ["a", "b", "c"][:rng.randint(1, 3)], (3, 12), [1, 2, 4, 8], 40, 60.0,
                                  [8, 32, 128], [None, 150.0])
    light = _solve_joint(cands, limits, 20.0, None, None, "cost")
    monkeypatch.setattr(solving, "SMALL_MODEL", 0)  # the full presolve and probing
    full = _solve_joint(cands, limits, 20.0, None, None, "cost")
    assert (light.status, light.replicas, light.cost_per_hour, light.core) == (full.status, full.replicas,
                                                                            full.cost_per_hour, full.core)


def test_services_that_fit_apart_but_not_together_are_solved_jointly():
    cands = [_cand("a", "p1", 4, 10.0, 1.0, tag="big"), _cand("b", "p1", 4, 10.0, 1.0, tag="big"),
             _cand("a", "p2", 4, 10.0, 3.0, tag="dear"), _cand("b", "p2", 4, 10.0, 3.0, tag="dear")]
    limits = Limits({"a": 5.0, "b": 5.0}, {"a": 1, "b": 1}, {"a": 1, "b": 1}, {"a": None, "b": None},
                    {"p1": 4, "p2": 8})
    assert _solve_apart(["a", "b"], cands, limits, 20.0, None, "cost") is None  # both want all of p1
    sol = solve(cands, limits)
    assert sol.status == "OPTIMAL" and sol.cost_per_hour == 16.0


def test_a_part_is_solved_again_only_when_what_it_used_is_gone(monkeypatch):
    from infra.planner import solve as solve_module

    calls = []
    joint = solve_module._solve_joint
    monkeypatch.setattr(solve_module, "_solve_joint", lambda cands, *a: calls.append(len(cands)) or joint(cands, *a))
    cands = [_cand(s, "p1", 1, 2.0, price, tag=tag) for s in ("a", "b")
             for tag, price in (("cheap", 1.0), ("dear", 3.0))]
    limits = Limits({"a": 3.0, "b": 3.0}, {"a": 1, "b": 1}, {"a": 1, "b": 1}, {"a": None, "b": None}, {"p1": 64})
    first = solve(cands, limits)
    assert len(calls) == 2 and first.cost_per_hour == 4.0
    # Dropping shapes neither part uses leaves both optima as they were: nothing is solved again.
    assert solve(cands, limits, exclude={"a/p1/dear/fp8/tp1", "b/p1/dear/fp8/tp1"}) == first
    assert len(calls) == 2
    # Dropping one that a part uses solves that part again, and only it.
    alt = solve(cands, limits, exclude={"a/p1/cheap/fp8/tp1"})
    assert calls[2:] == [1] and alt.cost_per_hour == 8.0
    # A part under other limits is another problem; the part whose limits stay is not solved again.
    solve(cands, replace(limits, demand={"a": 5.0, "b": 3.0}))
    assert len(calls) == 4
    # A part with no plan: the whole has none. Asked without the conflict, no joint model is built for it.
    none = replace(limits, demand={"a": 500.0, "b": 3.0})
    assert solve(cands, none, core=False).status == "INFEASIBLE"
    assert all(n <= 2 for n in calls)
    assert solve(cands, none).status == "INFEASIBLE" and calls[-1] == 4


def test_minimal_conflict_drops_innocent_groups():
    cands = [_cand("a", "p1", 1, 1.0, 1.0)]
    limits = Limits({"a": 10.0}, {"a": 1}, {"a": 1}, {"a": 100.0}, {"p1": 4})
    sol = solve(cands, limits)
    assert sol.status == "INFEASIBLE"
    assert set(minimal_conflict(cands, limits, sol.core)) == {"demand:a", "pool:p1"}


def test_zone_spread_is_enforced():
    cands = [_cand("a", "p1", 1, 10.0, 1.0, zone="z1", tag="f1"), _cand("a", "p2", 1, 10.0, 5.0, zone="z2",
                                                                         tag="f2")]
    one = solve(cands, Limits({"a": 5.0}, {"a": 1}, {"a": 1}, {"a": None}, {"p1": 4, "p2": 4}))
    two = solve(cands, Limits({"a": 5.0}, {"a": 1}, {"a": 2}, {"a": None}, {"p1": 4, "p2": 4}))
    assert one.cost_per_hour == 1.0 and two.cost_per_hour == 6.0


@pytest.mark.parametrize("calibrated_first", [True, False])
def test_at_equal_cost_and_margin_the_calibrated_prediction_wins(calibrated_first):
    # A framework that borrows another's factors predicts the same numbers, but without a measured error band.
    def cand(tag, calibrated):
        est = types.SimpleNamespace(calibration=types.SimpleNamespace(calibrated=calibrated))
        return dataclasses.replace(_cand("a", "p1", 1, 2.0, 1.0, tag=tag), estimate=est)

    cands = [cand("vllm", True), cand("lmdeploy", False)]
    sol = solve(cands if calibrated_first else cands[::-1],
                Limits({"a": 3.0}, {"a": 1}, {"a": 1}, {"a": None}, {"p1": 4}))
    assert sol.status == "OPTIMAL" and sol.cost_per_hour == 2.0
    assert list(sol.replicas) == [cands[0].key]


def test_length_stats():
    from infra.intent.models import LengthDistribution

    assert length_stats(LengthDistribution.model_validate(2000)) == (2000.0, 0.0)
    mean, cv = length_stats(LengthDistribution.model_validate({"mean": 1000, "p50": 800, "p99": 4000}))
    assert mean == 1000 and 0.5 < cv < 1.5
    mean, _ = length_stats(LengthDistribution.model_validate({"histogram": [{"le": 100, "weight": 1},
                                                                             {"le": 300, "weight": 1}]}))
    assert mean == pytest.approx(125)


def test_no_prompt_percentile_passes_the_longest_prompt_a_service_declares():
    """The workload generator clips its lognormal draws at `max`; the TTFT percentiles ride on prompts at the
    same percentiles, so the model's long-prompt tail is clipped there too, and only where the lognormal's passes
    it."""
    from infra.intent.models import LengthDistribution
    from infra.perf.serving import lognormal_q, z_of
    from infra.planner.candidates import length_quantiles

    spec = {"mean": 24000, "p50": 22000, "p90": 30000}
    free = length_quantiles(LengthDistribution.model_validate(spec), Path("."), "input_tokens")
    capped = dict(length_quantiles(LengthDistribution.model_validate({**spec, "max": 30000}), Path("."),
                                   "input_tokens"))
    mean, cv = length_stats(LengthDistribution.model_validate(spec))
    assert free == ()
    assert lognormal_q(mean, cv, z_of("p99")) > 30000 and capped["p99"] == pytest.approx(30000 / 24000)
    assert "p50" not in capped  # below the max: the lognormal's own
    wide = LengthDistribution.model_validate({"mean": 24000, "p50": 22000, "p90": 30000, "max": 100000})
    assert length_quantiles(wide, Path("."), "input_tokens") == ()


def test_plan_example_meets_everything(tmp_path):
    result = api.plan(EXAMPLE, tmp_path)
    spec = result.plan.document()["spec"]
    assert spec["solver"]["status"] == "OPTIMAL" and spec["cost"]["per_hour"] > 0
    svc = spec["services"][0]
    assert svc["required"]["value"] == pytest.approx(40 * 1.1)  # peak plus the intent's 10% headroom
    assert svc["capacity"]["value"] >= svc["required"]["value"]
    assert sum(a["replicas"] for a in svc["allocations"]) >= 2  # min_replicas
    assert len({a["pool"] for a in svc["allocations"]}) >= 1
    for a in svc["allocations"]:
        for key, v in a["predicted"].items():
            assert v["predicted_ms"] <= v["target_ms"] * 1.0001
            # How often a margin this size held on models the fit never saw: more margin, more often.
            # Borrowed factors carry the band of borrowed factors where one was measured.
            if key.startswith("e2e"):
                assert v.get("held_out") is None
            elif a["calibrated"]:
                assert 0.05 <= v["held_out"] <= 0.95
            else:
                assert v.get("held_out") is None or 0.05 <= v["held_out"] <= 0.95
    assert spec["cost"]["per_hour"] <= 90  # the intent's budget
    # The result carries the plan typed; the file holds its document, which loads back to the same plan.
    assert (tmp_path / "plan.yaml").read_text() == plan_yaml(result.plan)
    assert load_plan(tmp_path / "plan.yaml").document() == result.plan.document()
    report = (tmp_path / "report.md").read_text()
    assert "Candidates considered" in report
    assert report.count("(chosen)") == len(svc["allocations"])


def test_plans_are_byte_identical(tmp_path):
    a = api.plan(EXAMPLE, tmp_path / "a")
    b = api.plan(EXAMPLE, tmp_path / "b")
    assert (tmp_path / "a" / "plan.yaml").read_bytes() == (tmp_path / "b" / "plan.yaml").read_bytes()
    assert a.report == b.report


def test_tighter_budget_is_infeasible_with_relaxation(tmp_path):
    text = EXAMPLE.read_text().replace("per_hour: $90/h", "per_hour: $5/h")
    (tmp_path / "profiles").mkdir()
    (tmp_path / "profiles" / "mixed-h100-ascend.yaml").write_text(
        (ROOT / "examples" / "profiles" / "mixed-h100-ascend.yaml").read_text())
    path = tmp_path / "intent.yaml"
    path.write_text(text)
    with pytest.raises(InfeasibleError) as exc:
        api.plan(path)
    messages = [str(p) for p in exc.value.problems]
    assert any("budget" in m and f"{path}:" in m for m in messages)
    assert any("feasible with" in m and "instead of $5.00/h" in m for m in messages)
    assert exc.value.exit_code == 2


def test_more_demand_never_costs_less(tmp_path):
    costs = []
    (tmp_path / "profiles").mkdir()
    (tmp_path / "profiles" / "mixed-h100-ascend.yaml").write_text(
        (ROOT / "examples" / "profiles" / "mixed-h100-ascend.yaml").read_text())
    for rate in (10, 20, 40):
        path = tmp_path / f"i{rate}.yaml"
        path.write_text(EXAMPLE.read_text().replace("peak: 40/s", f"peak: {rate}/s").replace("per_hour: $90/h",
                                                                                             "per_hour: $900/h"))
        costs.append(api.plan(path).plan.document()["spec"]["cost"]["per_hour"])
    assert costs == sorted(costs)
    assert dataclasses.is_dataclass(api.PlanResult)


def test_planning_at_a_confidence_buys_margin_against_the_models_error(tmp_path):
    (tmp_path / "profiles").mkdir()
    (tmp_path / "profiles" / "mixed-h100-ascend.yaml").write_text(
        (ROOT / "examples" / "profiles" / "mixed-h100-ascend.yaml").read_text())
    plans = {}
    for conf in ("", "\n        confidence: 70%"):
        path = tmp_path / f"i{len(plans)}.yaml"
        # One zone: the Ascend pool (borrowed factors, so the wider held-out band) need not take a share.
        path.write_text(EXAMPLE.read_text().replace("per_hour: $90/h", "per_hour: $900/h")
                        .replace("zones: 2", "zones: 1").replace("attainment: 99%", "attainment: 99%" + conf))
        plans[conf] = api.plan(path, top=0).plan.document()["spec"]
    plain, sure = plans[""], plans["\n        confidence: 70%"]
    # The margin is capacity each replica gives up (whole replicas may or may not round it into the cost).
    capacity = {p: {(a["device"], a["parallel"]["tp"]): a["capacity_per_replica"]
                    for a in plan["services"][0]["allocations"]} for p, plan in (("plain", plain), ("sure", sure))}
    assert all(v < capacity["plain"][k] for k, v in capacity["sure"].items() if k in capacity["plain"])
    assert set(capacity["sure"]) & set(capacity["plain"])
    assert sure["cost"]["per_hour"] >= plain["cost"]["per_hour"]
    # Every prediction keeps under its target over the error band's 70th-percentile ratio (measured / predicted).
    svc = sure["services"][0]
    for a in svc["allocations"]:
        # Borrowed factors (the Ascend pool's: a vendor no measurement covers) bring the band of borrowed factors.
        band = error_band(a["mode"], svc["model"]) if a["calibrated"] else (
            borrowed_band(a["mode"], lookup(a["framework"], load_catalog().device(a["device"])).vendor_measured)
            or error_band(a["mode"]))
        assert band is not None
        for key, v in a["predicted"].items():
            metric = key.split("_")[0]
            ratio = max(1.0, band.ratio("ttft" if metric == "ttft" else "tpot", 0.7))
            if metric == "e2e":
                ratio = max(1.0, band.ratio("ttft", 0.7), band.ratio("tpot", 0.7))
            assert v["predicted_ms"] <= v["target_ms"] / ratio * 1.0001


def _example_outcome(path):
    if path.name == "infeasible.yaml":
        return "infeasible"
    return "planned"


@pytest.mark.parametrize("path", sorted((ROOT / "examples").glob("*.yaml")), ids=lambda p: p.name)
def test_every_example_is_planned(path):
    expected = _example_outcome(path)
    if expected == "planned":
        spec = api.plan(path).plan.document()["spec"]
        assert spec["solver"]["status"] == "OPTIMAL"
        for svc in spec["services"]:
            assert svc["capacity"]["value"] >= svc["demand"]["value"] * (1 - 1e-9)
        for pipe in spec.get("pipelines", []):
            # Budgets split along the pipeline keep every end-to-end objective.
            assert pipe["objectives"] and all(o["margin"] >= 0 for o in pipe["objectives"].values())
    else:
        with pytest.raises(InfeasibleError):
            api.plan(path)


SHARED_INTENT = """apiVersion: infra.dev/v1alpha1
kind: ServingIntent
metadata: {name: tiny}
spec:
  cluster:
    pools:
      - {name: h100, device: H100-SXM, nodes: 1, devices_per_node: 8, price: $2/h}
  services:
    - name: tiny
      model: Qwen2.5-7B
      precisions: [fp8]
      workload:
        rate: 0.2/s
        input_tokens: {mean: 500}
        output_tokens: {mean: 100}
      slo:
        ttft: {p99: 3s}
        tpot: {p99: 100ms}
      preferences:
        fractional_sharing: SHARE
"""


def test_fractional_sharing_packs_small_models_on_slices(tmp_path):
    shared = tmp_path / "shared.yaml"
    shared.write_text(SHARED_INTENT.replace("SHARE", "true"))
    whole = tmp_path / "whole.yaml"
    whole.write_text(SHARED_INTENT.replace("SHARE", "false"))
    a = api.plan(shared).plan.document()["spec"]
    b = api.plan(whole).plan.document()["spec"]
    alloc = a["services"][0]["allocations"][0]
    assert alloc["share"] in (0.25, 0.5) and alloc["devices"] < 1
    assert a["cost"]["per_hour"] == pytest.approx(2 * alloc["share"]) and b["cost"]["per_hour"] == 2


def test_plan_file_is_the_typed_contract(tmp_path):
    from infra.errors import IntentError
    from infra.planner.types import DeploymentPlan, load_plan

    api.plan(EXAMPLE, tmp_path)
    plan = load_plan(tmp_path / "plan.yaml")
    assert isinstance(plan, DeploymentPlan) and plan.spec.services[0].name == "chat"
    text = (tmp_path / "plan.yaml").read_text().replace("  replicas: ", "  replica: ", 1)
    bad = tmp_path / "bad.yaml"
    bad.write_text(text)
    with pytest.raises(IntentError) as exc:
        load_plan(bad)
    first = str(exc.value.problems[0])
    assert first.startswith(f"{bad}:") and "replica" in first and "To fix" in first


def test_longest_request_must_fit_the_kv_cache(tmp_path):
    text = (SHARED_INTENT.replace("SHARE", "true").replace("model: Qwen2.5-7B", "model: Llama-3.1-8B")
            .replace("      precisions: [fp8]\n", "      precisions: [fp8]\n      max_context: 128k\n"))
    path = tmp_path / "long.yaml"
    path.write_text(text)
    result = api.plan(path, tmp_path / "out")
    alloc = result.plan.document()["spec"]["services"][0]["allocations"][0]
    assert alloc.get("share", 1.0) > 0.25  # a quarter of an H100 cannot hold one 128k-token request
    assert "the longest request (128000 tokens)" in (tmp_path / "out" / "report.md").read_text()


def test_goodput_objective_serves_what_a_fixed_inventory_can(tmp_path):
    text = SHARED_INTENT.replace("SHARE", "false").replace("rate: 0.2/s", "rate: 400/s").replace(
        "nodes: 1, devices_per_node: 8", "nodes: 1, devices_per_node: 2")
    path = tmp_path / "busy.yaml"
    path.write_text(text)
    with pytest.raises(InfeasibleError):
        api.plan(path)
    spec = api.plan(path, objective="goodput").plan.document()["spec"]
    svc = spec["services"][0]
    assert spec["solver"]["objective"] == "goodput"
    assert 0 < svc["served"] < 1
    assert sum(a["devices"] for a in svc["allocations"]) == 2  # everything the pool has
    for a in svc["allocations"]:
        for v in a["predicted"].values():
            assert v["predicted_ms"] <= v["target_ms"] * 1.0001  # served load stays within the objectives


def test_prefill_and_decode_on_different_device_types():
    """H200 prefill with H20 decode beats both on H200, and the plan charges each pool for its own workers."""
    result = api.plan(ROOT / "examples" / "pd-across-devices.yaml")
    spec = result.plan.document()["spec"]
    prefill = decode = 0
    allocs = spec["services"][0]["allocations"]
    # The capacity left after the last whole cross-device unit may go to a same-device one.
    assert max(a["replicas"] for a in allocs if a.get("decode_pool")) >= 8
    for alloc in allocs:
        n, k = alloc["replicas"], alloc["decode_workers"]
        if alloc.get("decode_pool"):
            assert (alloc["pool"], alloc["decode_pool"], alloc["decode_device"]) == ("h200", "h20", "H20")
            prefill += n * alloc["devices_per_worker"]
            decode += n * k * Parallel(**alloc["decode_parallel"]).devices
        else:
            prefill += alloc["devices"]
    assert spec["cost"]["by_pool"] == pytest.approx({"h200": prefill * 3.80, "h20": decode * 1.30})
    assert {u["pool"]: u["allocated"] for u in spec["pools_used"]} == pytest.approx({"h200": prefill, "h20": decode})
    same = next(a for a in spec["alternatives"] if a["label"] == "prefill and decode on one device type")
    assert same["delta_per_hour"] > 0


def test_a_unit_across_pools_counts_against_both_inventories():
    base = _cand("a", "p1", 2, 1.0, 1.0)
    cross = dataclasses.replace(base, devices=4, decode_workers=1, decode_pool="p2", decode_device="H20",
                                decode_parallel=Parallel(tp=2), decode_price=0.5)
    assert cross.devices_on("p1") == 2 and cross.devices_on("p2") == 2
    assert cross.cost_per_hour == pytest.approx(2 * 1.0 + 2 * 0.5)
    limits = Limits({"a": 3.0}, {"a": 1}, {"a": 1}, {"a": None}, {"p1": 8, "p2": 2})
    assert solve([cross], limits).status == "INFEASIBLE"
    limits = Limits({"a": 3.0}, {"a": 1}, {"a": 1}, {"a": None}, {"p1": 8, "p2": 6})
    assert solve([cross], limits).replicas == {cross.key: 3}


def test_prefill_and_decode_pools_must_share_a_switch(tmp_path):
    profile = (ROOT / "examples" / "profiles" / "h200-h20-moe.yaml").read_text()
    (tmp_path / "profiles").mkdir()
    (tmp_path / "profiles" / "h200-h20-moe.yaml").write_text(
        profile.replace("NVIDIA-H20}\n      topology: {zone: us-west-2a, switch: spine-1}",
                        "NVIDIA-H20}\n      topology: {zone: us-west-2a, switch: spine-2}"))
    assert "spine-2" in (tmp_path / "profiles" / "h200-h20-moe.yaml").read_text()
    intent = tmp_path / "split.yaml"
    intent.write_text((ROOT / "examples" / "pd-across-devices.yaml").read_text())
    result = api.plan(intent)
    assert all(not a.get("decode_pool") for s in result.plan.document()["spec"]["services"] for a in s["allocations"])
    assert any("different switches" in c.outcome for c in result.considered)


def test_confidence_tightens_each_objective_by_its_band_and_never_loosens():
    from infra.perf.shape import Deployment, Role
    from infra.planner.candidates import confident

    dep = Deployment("Llama-3.1-70B", "H100-SXM", "vllm", "fp8", "agg", agg=Role(Parallel(tp=4)))
    slo = {("ttft", "p99"): 1.0, ("tpot", "p99"): 0.05, ("itl", "p99"): 0.1, ("e2e", "p99"): 30.0}
    assert confident(slo, dep, None, True) == slo
    # Factors borrowed for an unmeasured device bring the band of borrowed factors where the calibration has one.
    own, held = error_band("agg", "Llama-3.1-70B"), borrowed_band("agg") or error_band("agg")
    for calibrated, band in ((True, own), (False, held)):
        out = confident(slo, dep, 0.9, calibrated)
        r_ttft, r_tpot = band.ratio("ttft", 0.9), band.ratio("tpot", 0.9)
        assert out[("ttft", "p99")] == pytest.approx(1.0 / r_ttft)
        assert out[("tpot", "p99")] == pytest.approx(0.05 / r_tpot)
        assert out[("itl", "p99")] == pytest.approx(0.1 / r_tpot)
        assert out[("e2e", "p99")] == pytest.approx(30.0 / max(r_ttft, r_tpot))
    # At the band's lower quantiles the model over-predicts; that never loosens a target.
    assert all(v <= slo[k] for k, v in confident(slo, dep, 0.5, False).items())
    # Past the longest measured prompt the band widens, and so does the margin a plan keeps.
    within, past = confident(slo, dep, 0.9, True), confident(slo, dep, 0.9, True, doublings=2.0)
    assert past[("ttft", "p99")] < within[("ttft", "p99")]
    assert all(past[k] <= within[k] for k in slo)


def test_too_high_a_confidence_is_explained_with_the_highest_that_fits(tmp_path):
    (tmp_path / "profiles").mkdir()
    (tmp_path / "profiles" / "mixed-h100-ascend.yaml").write_text(
        (ROOT / "examples" / "profiles" / "mixed-h100-ascend.yaml").read_text())
    path = tmp_path / "intent.yaml"
    # Two zones need the Ascend pool, whose borrowed factors carry the wide held-out band.
    path.write_text(EXAMPLE.read_text().replace("per_hour: $90/h", "per_hour: $900/h")
                    .replace("attainment: 99%", "attainment: 99%\n        confidence: 90%"))
    with pytest.raises(InfeasibleError) as exc:
        api.plan(path)
    fixes = [p for p in exc.value.problems if "confidence" in p.message]
    assert len(fixes) == 1 and fixes[0].location.path == "spec.services[0].slo.confidence"
    assert "instead of 90%" in fixes[0].message and f"{path}:29:" in str(fixes[0])
    lowered = fixes[0].fix.removeprefix("set confidence: ").rstrip("%")
    assert lowered == "remove confidence" or int(lowered) < 90


def test_a_service_whose_every_shape_was_refused_hears_that_reason_not_to_loosen_its_objectives():
    """Issue 44: when no shape of a service got as far as its objectives (each refused for what it is), the
    headline names the refusal and its fix, not "loosen the objectives"; once any shape was weighed against the
    objectives, the usual explanation (closest miss, relaxations) applies."""
    from infra.planner.candidates import Considered
    from infra.planner.explain import _refused

    why = "unknown model 'vl'"
    refused = [Considered("s", "p", "vllm", "bf16", f"tp{t}", why) for t in (1, 2, 4)]
    message, fix, pool = _refused(None, refused, "s", "service s")  # type: ignore[misc, arg-type]
    assert message == "every replica shape of service s was refused for one reason: unknown model 'vl' (3 shapes)"
    assert "loosening the objectives cannot help" in fix and pool is None
    two = refused + [Considered("s", "p", "vllm", "fp8", "tp1", "fp8 does not run on this device")]
    assert "before its objectives were weighed" in _refused(None, two, "s", "service s")[0]  # type: ignore[index, arg-type]
    missed = Considered("s", "p", "vllm", "bf16", "tp8", "misses ttft_p99", misses=(("ttft_p99", 1.0, 0.5),))
    assert _refused(None, refused + [missed], "s", "service s") is None  # type: ignore[arg-type]


def test_attainment_becomes_percentile_objectives_by_the_union_bound():
    def held(slo):
        svc = Service.model_validate({"name": "s", "model": "Qwen/Qwen3-8B", "workload": {
            "rate": "1/s", "input_tokens": 100, "output_tokens": 10}, "slo": slo})
        return attainment_objectives(svc)

    # Three metrics bounded per request: each holds its loosest bound at 1 - 1% / 3, rounded up to p99.67.
    assert held({"ttft": {"p50": "300ms", "p99": "1.5s"}, "tpot": {"p99": "60ms", "mean": "20ms"},
                 "e2e": {"p99": "60s"}, "itl": {"p99": "100ms"}, "attainment": "99%"}) == {
        ("e2e", "p99.67"): 60.0, ("tpot", "p99.67"): 0.06, ("ttft", "p99.67"): 1.5}
    # The stated p99s already give 97% by themselves: nothing to add.
    assert held({"ttft": {"p99": "1.5s"}, "tpot": {"p99": "60ms"}, "e2e": {"p99": "60s"}, "attainment": "97%"}) == {}
    assert held({"ttft": {"p90": "1s"}, "attainment": "95%"}) == {("ttft", "p95"): 1.0}
    assert held({"ttft": {"mean": "1s"}, "attainment": "95%"}) == {}
    assert held({"ttft": {"p99": "1s"}}) == {}


def test_a_plan_holds_every_replica_to_its_attainment(tmp_path):
    plan = api.plan(EXAMPLE, top=0).plan.document()["spec"]
    svc = plan["services"][0]
    assert svc["attainment"] == 0.99
    held = svc["attainment_objectives"]
    assert held == {"e2e_p99.67": 60000.0, "tpot_p99.67": 60.0, "ttft_p99.67": 1500.0}
    for alloc in svc["allocations"]:
        for key in held:
            assert alloc["predicted"][key]["margin"] >= 0, (alloc["device"], key)
    # A tighter attainment than the fleet can hold is refused with the highest that fits.
    (tmp_path / "profiles").mkdir()
    (tmp_path / "profiles" / "mixed-h100-ascend.yaml").write_text(
        (ROOT / "examples" / "profiles" / "mixed-h100-ascend.yaml").read_text())
    path = tmp_path / "intent.yaml"
    path.write_text(EXAMPLE.read_text().replace("attainment: 99%", "attainment: 99.99%"))
    with pytest.raises(InfeasibleError) as exc:
        api.plan(path, top=0)
    fixes = [p for p in exc.value.problems if p.location.path == "spec.services[0].slo.attainment"]
    assert fixes and fixes[0].fix == "set attainment: 99.95%" and "instead of 99.99%" in fixes[0].message
    # over three metrics, 99.99% asks each within its bound at p99.99667 (p99.997): hundredths would give p100
    svc = api.load_intent(path).services[0].service
    assert set(attainment_objectives(svc)) == {("e2e", "p99.997"), ("tpot", "p99.997"), ("ttft", "p99.997")}


def test_no_example_plan_accepts_a_prediction_beyond_its_target():
    """Each replica is predicted at the load the plan gives it among the replicas the plan has; none may miss."""
    checked = 0
    for path in sorted((ROOT / "tests" / "golden").glob("*/plan.yaml")):
        for svc in load_plan(path).spec.services:
            for alloc in svc.allocations:
                for key, p in alloc.predicted.items():
                    assert p.margin >= 0, (path.parent.name, svc.name, alloc.device, key, p.predicted_ms)
                    checked += 1
    assert checked > 50


def test_a_change_that_removed_a_value_keeps_after_in_the_plan_file():
    # A plan leaves out fields without a value, but `after` is required: null says the change removed one.
    from infra.planner.types import Change

    change = Change(path="spec.services[0].budget", before={"per_hour": 10}, after=None, proposed_by="user",
                    accepted_by="user")
    written = change.model_dump(mode="json", exclude_none=True)
    assert written == {"path": "spec.services[0].budget", "before": {"per_hour": 10}, "after": None,
                       "proposed_by": "user", "accepted_by": "user"}
    assert Change.model_validate(written) == change


def test_an_alternative_beyond_its_pools_is_known_without_solving():
    # Each shape of `b` alone fills p1; the bound sees that both services cannot, as the solver does.
    cands = [_cand("a", "p1", 4, 10.0, 1.0, tag="x"), _cand("b", "p1", 4, 5.0, 1.0, tag="x"),
             _cand("b", "p2", 4, 10.0, 3.0, tag="y")]
    limits = Limits({"a": 10.0, "b": 10.0}, {"a": 1, "b": 1}, {"a": 1, "b": 1}, {"a": None, "b": None},
                    {"p1": 8, "p2": 4})
    only_p1 = {c.key for c in cands if c.pool != "p1"}
    assert _beyond_the_pools(cands, only_p1, limits)
    assert solve(cands, limits, exclude=only_p1, core=False).status == "INFEASIBLE"
    assert not _beyond_the_pools(cands, set(), limits)
    assert _beyond_the_pools(cands, {c.key for c in cands if c.service == "b"}, limits)  # b left without a shape


@pytest.mark.parametrize("seed", range(24))
def test_the_pools_bound_never_refuses_what_the_solver_plans(seed):
    # A relaxation of the solver's model: whenever it says no plan, the solver finds none either.
    rng = random.Random(300 + seed)
    cands, limits = _random_parts(rng, ["a", "b", "c"][:rng.randint(1, 3)], (1, 6), [1, 2, 4, 8], 12, 1e6,
                                  [4, 16, 64], [None])
    for pool in ("p1", "p2", "p3"):
        exclude = {c.key for c in cands if c.pool != pool}
        if _beyond_the_pools(cands, exclude, limits):
            assert solve(cands, limits, exclude=exclude, core=False).status == "INFEASIBLE"
