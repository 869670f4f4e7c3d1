"""Routing that matches the plan: the plan records the router its cluster renders and the weights it splits by, the
manifests carry exactly those weights, validation catches drift, the simulator routes as the manifests do, and
availability over zones counts capacity, not replicas."""

from __future__ import annotations

import collections
import dataclasses
import io
from pathlib import Path

import pytest
from ruamel.yaml import YAML

from infra import api
from infra.bench.run import simulate_service
from infra.bench.simulate import Router, plan_policy
from infra.errors import IntentError
from infra.perf.shape import Workload
from infra.planner.routing import fill_routing, replica_loads, route_weights, router_for
from infra.planner.solve import Limits, solve, zone_share
from infra.planner.types import load_plan
from infra.render import render_plan
from infra.validators import validate_tree

from ..conftest import ROOT
from .test_planner import _cand

GOLDEN = ROOT / "tests" / "golden"
ROUTE = "reports/base/httproute-reports.yaml"


def _two_way() -> str:
    """The multi-service example's plan with service `reports` split over two allocations of unequal capacity
    (one replica each, carrying 3 and 0.6 requests/s) behind its HTTPRoute: what a plan mixing shapes looks like."""
    yaml = YAML(typ="safe")
    data = yaml.load((GOLDEN / "multi-service" / "plan.yaml").read_text())
    reports = data["spec"]["services"][2]
    (a,) = reports["allocations"]
    per = a["devices"] / a["replicas"]
    a.update(replicas=1, devices=per)
    b = {**a, "load_per_replica": 0.6, "capacity_per_replica": 1.0}
    reports["allocations"] = [a, b]
    reports["routing"] = {"router": "http-route", "weights": route_weights(reports["allocations"])}
    yaml.default_flow_style = False
    out = io.StringIO()
    yaml.dump(data, out)
    return out.getvalue()


TWO_WAY = _two_way()


@pytest.fixture
def MULTI(tmp_path: Path) -> Path:  # noqa: N802 - the plan file, named like the constant it stands for
    path = tmp_path / "plan.yaml"
    path.write_text(TWO_WAY)
    return path


def _write(files: dict[str, str], root: Path) -> Path:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


# --- what the plan records ------------------------------------------------------------------------------------------

def test_weights_are_planned_load_shares_in_ten_thousandths():
    allocs = [{"mode": "agg", "replicas": 1, "load_per_replica": 0.2108, "capacity_per_replica": 0.2426},
              {"mode": "agg", "replicas": 10, "load_per_replica": 3.979, "capacity_per_replica": 4.578},
              {"mode": "disagg", "replicas": 2, "load_per_replica": 5.0, "capacity_per_replica": 6.0}]
    # The Ascend token replica of the issue: 0.21 of 40 requests/s is 53 in 10,000, not an even half.
    assert route_weights(allocs) == {"a0": 53, "a1": 9947}
    # A sliver of load keeps a weight of 1 rather than being rounded away; P/D allocations take none.
    tiny = [{"mode": "agg", "replicas": 1, "load_per_replica": 1e-6}, {"mode": "agg", "replicas": 1,
                                                                       "load_per_replica": 10.0}]
    assert route_weights(tiny) == {"a0": 1, "a1": 10000}
    # Without stated loads, capacities split it.
    assert route_weights([{"replicas": 1, "capacity_per_replica": 1.0},
                          {"replicas": 3, "capacity_per_replica": 1.0}]) == {"a0": 2500, "a1": 7500}


def test_the_router_is_what_the_cluster_has_installed():
    assert router_for({"inference_extension": "inference.networking.k8s.io/v1",
                       "gateway_api": "gateway.networking.k8s.io/v1"}) == "inference-pool"
    assert router_for({"gateway_api": "gateway.networking.k8s.io/v1"}) == "http-route"
    assert router_for({"gateway_api": "gateway.networking.k8s.io/v1"}, aggregated=False) == "service"
    assert router_for({"inference_extension": "inference.networking.k8s.io/v1"}, runs_llm_engine=False) == "service"
    assert router_for({}) == "service"
    assert fill_routing("not a plan") == "not a plan"


@pytest.mark.parametrize("example,router", [("chat-mixed-fleet", "http-route"), ("multi-service", "http-route"),
                                            ("rag-long-context", "inference-pool"),
                                            ("small-model-shared", "service")])
def test_each_example_plan_records_its_router(example: str, router: str):
    plan = load_plan(GOLDEN / example / "plan.yaml")
    svc = next(s for s in plan.spec.services if any(a.mode == "agg" for a in s.allocations))
    assert svc.routing.router == router
    if router == "http-route":
        assert svc.routing.weights == route_weights([a.model_dump() for a in svc.allocations])


def test_a_plan_without_routing_gets_its_clusters_and_edited_weights_are_checked(tmp_path: Path, MULTI: Path):
    text = MULTI.read_text()
    yaml = YAML(typ="safe")
    data = yaml.load(text)
    reports = next(s for s in data["spec"]["services"] if s["name"] == "reports")
    recorded = reports.pop("routing")
    plan = tmp_path / "edited.yaml"
    with plan.open("w") as f:
        yaml.dump(data, f)
    assert load_plan(plan).spec.services[2].routing.model_dump() == recorded
    a1 = f"        a1: {recorded['weights']['a1']}\n"
    assert a1 in text
    plan.write_text(text.replace(a1, a1 + "        a7: 5\n", 1))
    with pytest.raises(IntentError) as err:
        load_plan(plan)
    assert "a7" in str(err.value) and "no aggregated allocation" in str(err.value)


# --- manifests and their validation ---------------------------------------------------------------------------------

def test_an_http_route_splits_by_the_plans_weights_over_per_allocation_services(MULTI: Path):
    plan = load_plan(MULTI)
    want = next(s for s in plan.spec.services if s.name == "reports").routing.weights
    assert len(want) == 2 and min(want.values()) < 3000  # allocations of unequal capacity, unequal weights
    files = render_plan(plan)
    yaml = YAML(typ="safe")
    route = yaml.load(files[ROUTE])
    assert route["apiVersion"] == "gateway.networking.k8s.io/v1"
    assert route["spec"]["parentRefs"] == [{"group": "gateway.networking.k8s.io", "kind": "Gateway",
                                            "name": "inference-gateway"}]
    refs = route["spec"]["rules"][0]["backendRefs"]
    assert {r["name"]: r["weight"] for r in refs} == {f"reports-{a}": w for a, w in want.items()}
    for r in refs:
        svc = yaml.load(files[f"reports/base/service-{r['name']}.yaml"])
        assert svc["spec"]["selector"]["infra.dev/allocation"] == r["name"].rsplit("-", 1)[1]
        assert svc["spec"]["ports"][0]["port"] == r["port"]
    # No Service over every pod beside the route: it would split evenly.
    assert "reports/base/service-reports.yaml" not in files


WEIGHTS = YAML(typ="safe").load(TWO_WAY)["spec"]["services"][2]["routing"]["weights"]
PLANTED = [
    (ROUTE, f"      weight: {WEIGHTS['a0']}\n", "      weight: 5000\n", f"set weight: {WEIGHTS['a0']}"),
    (ROUTE, f"      weight: {WEIGHTS['a1']}\n", "", f"set weight: {WEIGHTS['a1']}"),
    (ROUTE, "      name: reports-a1\n", "      name: reports-canary\n", "route only to the Services"),
    ("reports/base/service-reports-a0.yaml", "    infra.dev/allocation: a0\n    infra.dev/role: agg",
     "    infra.dev/allocation: a1\n    infra.dev/role: agg", "select {"),
]


@pytest.mark.parametrize("file,old,new,fix", PLANTED, ids=[f"PLN011-{i}" for i in range(len(PLANTED))])
def test_route_drift_from_the_plan_is_caught(tmp_path: Path, MULTI: Path, file: str, old: str, new: str, fix: str):
    tree = _write(render_plan(load_plan(MULTI)), tmp_path / "m")
    assert [f for f in validate_tree(tree, plan=MULTI).findings if f.rule == "PLN011"] == []
    path = tree / file
    text = path.read_text()
    assert old in text
    path.write_text(text.replace(old, new, 1))
    hits = [f for f in validate_tree(tree, plan=MULTI).findings if f.rule == "PLN011"]
    assert any(fix in h.fix for h in hits) and {h.severity for h in hits} == {"error"}, [str(f) for f in hits]


def test_a_missing_route_is_caught_at_the_plans_routing(tmp_path: Path, MULTI: Path):
    tree = _write(render_plan(load_plan(MULTI)), tmp_path / "m")
    (tree / ROUTE).unlink()
    kust = tree / "reports" / "base" / "kustomization.yaml"
    kust.write_text(kust.read_text().replace("- httproute-reports.yaml\n", ""))
    hits = [f for f in validate_tree(tree, plan=MULTI).findings if f.rule == "PLN011"]
    assert len(hits) == 1 and hits[0].file == str(MULTI) and hits[0].field == "spec.services[2].routing"
    assert hits[0].line > 1


# --- the simulator routes as the manifests do ----------------------------------------------------------------------

def test_weighted_router_draws_allocations_by_weight_and_repeats_with_its_seed():
    owner = [0, 1, 1, 1]
    picks = []
    for seed in (3, 3, 4):
        r = Router([1.0] * 4, "weighted", owner=owner, route=[1.0, 9.0], seed=seed)
        seq = []
        for _ in range(20000):
            k = r.pick()
            seq.append(k)
            r.done(k)
        picks.append(seq)
    assert picks[0] == picks[1] and picks[0] != picks[2]
    share = sum(1 for k in picks[0] if owner[k] == 0) / len(picks[0])
    assert share == pytest.approx(0.1, abs=0.01)
    # Within an allocation, the least loaded engine: with every request finished at once, always the first.
    assert {k for k in picks[0] if owner[k] == 1} == {1}
    # A group whose route weight is 0 (a P/D allocation behind an HTTPRoute) is never drawn.
    r = Router([1.0, 1.0], "weighted", owner=[0, 1], route=[0.0, 1.0])
    assert {r.pick() for _ in range(200)} == {1}


def test_random_router_is_even_over_pods_whatever_their_capacity():
    # Two single-engine pods of very different capacity, and one pod of two attention groups (each half a pod).
    r = Router([1.0, 1.0, 0.5, 0.5], "random", seed=1)
    counts = collections.Counter(r.pick() for _ in range(30000))
    pods = [counts[0], counts[1], counts[2] + counts[3]]
    assert all(c / 30000 == pytest.approx(1 / 3, abs=0.015) for c in pods)


def test_the_simulation_routes_as_the_manifests_do(MULTI: Path):
    plan = load_plan(MULTI)
    assert plan_policy(plan, "reports") == "weighted"
    assert plan_policy(load_plan(GOLDEN / "rag-long-context" / "plan.yaml"), "rag") == "least-loaded"
    assert plan_policy(load_plan(GOLDEN / "small-model-shared" / "plan.yaml"), "summarise") == "random"
    weighted = simulate_service(plan, service="reports", requests=1500, seed=2, plan_path=MULTI)
    assert weighted.load["router"] == "weighted"
    weights = plan.spec.services[2].routing.weights
    share = weighted.groups[0]["requests"] / 1500
    assert share == pytest.approx(weights["a0"] / sum(weights.values()), abs=0.03)
    # The same plan behind one Service: each of its two single-replica allocations gets half.
    even = simulate_service(plan, service="reports", requests=1500, seed=2, plan_path=MULTI, router="random")
    assert even.groups[0]["requests"] / 1500 == pytest.approx(0.5, abs=0.04)


# --- zones count capacity -----------------------------------------------------------------------------------------

def test_losing_any_zone_leaves_the_stated_share_of_peak():
    assert zone_share(1) == 0.0 and zone_share(2) == 0.5 and zone_share(3) == pytest.approx(2 / 3)
    big = _cand("a", "p1", 1, 10.0, 1.0, zone="z1", tag="f1")
    token = _cand("a", "p2", 1, 1.0, 0.5, zone="z2", tag="f2")
    cands = [big, token]
    spread = Limits({"a": 10.0}, {"a": 1}, {"a": 2}, {"a": None}, {"p1": 8, "p2": 8})
    # Presence alone: one big replica and one token replica in the other zone.
    assert solve(cands, spread).replicas == {big.key: 1, token.key: 1}
    kept = Limits({"a": 10.0}, {"a": 1}, {"a": 2}, {"a": None}, {"p1": 8, "p2": 8}, zone_keep={"a": 5.0})
    sol = solve(cands, kept)
    assert sol.replicas == {big.key: 1, token.key: 5}  # zone z2 alone carries 5, z1 alone 10
    few = Limits({"a": 10.0}, {"a": 1}, {"a": 2}, {"a": None}, {"p1": 8, "p2": 4}, zone_keep={"a": 5.0})
    assert solve(cands, few).status == "INFEASIBLE" and "zones:a" in solve(cands, few).core


def test_an_even_split_uses_only_shapes_that_hold_its_share():
    big = _cand("a", "p1", 1, 6.0, 1.0, tag="big")
    small = _cand("a", "p2", 1, 4.0, 0.7, tag="small")
    picked = Limits({"a": 10.0}, {"a": 1}, {"a": 1}, {"a": None}, {"p1": 8, "p2": 1})
    # A load-aware picker fills each replica to its capacity: one of each is the cheapest.
    assert solve([big, small], picked).replicas == {big.key: 1, small.key: 1}
    even = dataclasses.replace(picked, even=frozenset({"a"}))
    # Behind a Service each of two pods gets 5 requests/s, over the small one's 4: two big ones instead.
    assert solve([big, small], even).replicas == {big.key: 2}
    # A mix stays where every shape holds the share: 7 requests/s over two pods is 3.5 each.
    assert solve([big, small], dataclasses.replace(even, demand={"a": 7.0})).replicas == {big.key: 1, small.key: 1}


def test_prefill_decode_units_are_not_mixed_with_replicas_a_router_would_starve_them_beside():
    agg = _cand("a", "p1", 1, 6.0, 1.0, tag="agg")
    pd = dataclasses.replace(_cand("a", "p1", 1, 4.0, 0.6, tag="pd"), decode_workers=1)
    limits = Limits({"a": 10.0}, {"a": 1}, {"a": 1}, {"a": None}, {"p1": 16})
    assert solve([agg, pd], limits).replicas == {agg.key: 1, pd.key: 1}
    assert solve([agg, pd], dataclasses.replace(limits, one_mode=frozenset({"a"}))).replicas == {pd.key: 3}


def test_prefill_decode_units_behind_a_service_each_hold_an_even_share():
    # A service of P/D units only, on a cluster without the endpoint picker, is routed by a plain Service, which
    # gives each unit the same share (the simulator's `random` router): a 4 + 1 unit of 13.6 requests/s beside a
    # 2 + 1 unit of 6.8 would each get 10 of 20, 3.2 over the small one's capacity.
    big = dataclasses.replace(_cand("a", "p1", 1, 13.6, 2.0, tag="big"), decode_workers=1)
    small = dataclasses.replace(_cand("a", "p1", 1, 6.8, 1.2, tag="small"), decode_workers=1)
    limits = Limits({"a": 20.0}, {"a": 1}, {"a": 1}, {"a": None}, {"p1": 64})
    assert solve([big, small], limits).replicas == {big.key: 1, small.key: 1}
    one_mode = dataclasses.replace(limits, one_mode=frozenset({"a"}))
    assert solve([big, small], one_mode).replicas == {small.key: 3}  # 6.67 each; two big ones cost 4.0
    allocs = [("big", 1, 13.6, False), ("small", 1, 6.8, False)]
    loads = replica_loads("service", Workload(isl=1000, osl=200, rate=20.0), allocs)
    assert loads["big"].rate == loads["small"].rate == pytest.approx(10.0) and loads["small"].peers == 1
    assert replica_loads("inference-pool", Workload(isl=1000, osl=200, rate=20.0), allocs)["small"].rate == \
        pytest.approx(20 * 6.8 / 20.4)


def test_the_chat_example_keeps_half_its_peak_in_each_zone():
    plan = api.plan(ROOT / "examples" / "chat-mixed-fleet.yaml", top=0).plan.document()["spec"]
    zone = {p["name"]: p["zone"] for p in plan["cluster"]["pools"]}
    by_zone: dict[str, float] = collections.defaultdict(float)
    svc = plan["services"][0]
    for a in svc["allocations"]:
        by_zone[zone[a["pool"]]] += a["replicas"] * a["capacity_per_replica"]
    peak = svc["demand"]["value"]
    assert len(by_zone) == 2
    for lost in by_zone:
        assert sum(v for z, v in by_zone.items() if z != lost) >= peak * zone_share(2) - 1e-6


def test_each_router_gives_each_replica_its_own_share_and_burstiness():
    wl = Workload(isl=1000, osl=200, rate=20.0, arrival_cv=2.0)
    allocs = [("big", 2, 10.0, True), ("small", 1, 5.0, True)]
    picker = replica_loads("inference-pool", wl, allocs)
    assert picker["big"].rate == pytest.approx(8.0) and picker["small"].rate == pytest.approx(4.0)
    assert picker["big"].arrival_cv == 2.0 and picker["big"].peers == 3
    route = replica_loads("http-route", wl, allocs)
    # Thinned to its share p by a weighted random choice: cv^2 = p c^2 + 1 - p; smoothed over its own replicas.
    assert route["big"].rate == pytest.approx(8.0) and route["big"].peers == 2
    assert route["big"].arrival_cv == pytest.approx((0.8 * 4 + 0.2) ** 0.5)
    assert route["small"].arrival_cv == pytest.approx((0.2 * 4 + 0.8) ** 0.5)
    even = replica_loads("service", wl, allocs)
    # Every pod a third, whatever its capacity: the small one is over its 5 requests/s.
    assert even["big"].rate == even["small"].rate == pytest.approx(20 / 3) and even["small"].peers == 1
    assert even["small"].arrival_cv == pytest.approx((4 / 3 + 2 / 3) ** 0.5)
    # A closed loop behind a Service: the busiest of the pods holds more than its share of the clients.
    clients = replica_loads("service", Workload(isl=1000, osl=200, concurrency=64), [("a", 2, 40.0, True)])
    assert clients["a"].concurrency == 37
    assert replica_loads("inference-pool", Workload(isl=1000, osl=200, concurrency=64),
                         [("a", 2, 40.0, True)])["a"].concurrency == 32
