"""Nodes: packing workers onto nodes of different sizes, exactly, and placing them."""

from __future__ import annotations

import itertools

import pytest

from infra.intent.profile import Pool
from infra.perf.shape import Parallel
from infra.planner.candidates import Candidate
from infra.planner.placement import PlacementError, Worker, node_groups, patterns, place, uniform, workers_of
from infra.planner.solve import Limits, solve


def _pool(nodes, per_node=8) -> Pool:
    return Pool.model_validate({"name": "p", "device": "H100-SXM", "devices_per_node": per_node,
                                "nodes": nodes if isinstance(nodes, int) else
                                [{"name": f"n{i}", "devices": d} for i, d in enumerate(nodes)]})


def _cand(devices, capacity, price=1.0, tag="x", pp=1):
    return Candidate("s", "p", "H100-SXM", tag, "fp8", Parallel(tp=devices // pp, pp=pp), devices, capacity, price,
                     False, "a", None)  # type: ignore[arg-type]


def test_patterns_are_the_maximal_combinations():
    assert patterns(6, [4, 2]) == [(1, 1), (0, 3)]
    assert patterns(3, [4]) == []
    assert all(sum(k * s for k, s in zip(p, [4, 2, 1])) == 8 for p in patterns(8, [4, 2, 1]))


def test_groups_and_uniformity():
    assert uniform(_pool(3)) and not uniform(_pool([8, 4, 4]))
    assert [(g.devices, len(g.names)) for g in node_groups(_pool([8, 4, 4]))] == [(8, 1), (4, 2)]


def _limits(pool: Pool, demand: float) -> Limits:
    groups = tuple((g.devices, len(g.names)) for g in node_groups(pool))
    return Limits({"s": demand}, {"s": 1}, {"s": 1}, {"s": None}, {"p": pool.device_count},
                  pool_nodes={} if uniform(pool) else {"p": (pool.devices_per_node, groups)})


def _fits(pool: Pool, counts: dict[int, int]) -> bool:
    try:
        place(pool, [w for size, k in counts.items() for w in workers_of(str(size), size, 1.0, 1, k,
                                                                          pool.devices_per_node)])
    except PlacementError:
        return False
    return True


@pytest.mark.parametrize("nodes", [[8, 4, 4], [6, 6], [8, 2, 2, 2]])
def test_solver_packs_nodes_exactly(nodes):
    """The cheapest plan equals brute force over counts that really fit the nodes, and it places."""
    pool = _pool(nodes)
    cands = [_cand(4, 3.0, 1.0, "a"), _cand(2, 1.4, 1.2, "b"), _cand(8, 6.5, 0.9, "c")]
    for demand in (3.0, 6.0, 9.0, 12.0):
        best = None
        for ks in itertools.product(range(5), range(9), range(3)):
            counts = {4: ks[0], 2: ks[1], 8: ks[2]}
            cap = 3.0 * ks[0] + 1.4 * ks[1] + 6.5 * ks[2]
            if cap >= demand and _fits(pool, counts):
                cost = 4 * 1.0 * ks[0] + 2 * 1.2 * ks[1] + 8 * 0.9 * ks[2]
                best = cost if best is None else min(best, cost)
        sol = solve(cands, _limits(pool, demand))
        if best is None:
            assert sol.status == "INFEASIBLE"
            continue
        assert sol.cost_per_hour == pytest.approx(best)
        by_size = {c.devices: sol.replicas.get(c.key, 0) for c in cands}
        assert _fits(pool, by_size)


def test_device_count_alone_would_overcommit_small_nodes():
    """Two 4-device nodes and an 8-device worker: 8 devices in total, but no node holds it."""
    pool = _pool([4, 4])
    sol = solve([_cand(8, 10.0)], _limits(pool, 1.0))
    assert sol.status == "INFEASIBLE" and "pool:p" in sol.core


def test_multi_node_workers_take_whole_nodes():
    pool = _pool(4)
    placed = place(pool, workers_of("big", 16, 1.0, 1, 1, 8) + workers_of("small", 2, 1.0, 1, 4, 8)).nodes
    assert placed["big"] == {"p/0": 1, "p/1": 1}
    assert placed["small"] == {"p/2": 4}
    with pytest.raises(PlacementError):
        place(pool, workers_of("big", 16, 1.0, 1, 2, 8) + [Worker("x", 1)])


def test_slices_fill_devices():
    pool = _pool(1, per_node=2)
    placed = place(pool, workers_of("q", 1, 0.25, 1, 4, 2) + workers_of("h", 1, 0.5, 1, 2, 2))
    assert placed.nodes == {"h": {"p/0": 2}, "q": {"p/0": 4}}
    assert (placed.devices_used, placed.quarters_idle) == (2, 0)
    three = place(pool, workers_of("q", 1, 0.25, 1, 3, 2))
    assert (three.devices_used, three.quarters_idle) == (1, 1)
    assert placed.partly_idle == () and three.partly_idle == (("p/0", 0, 1),)
    # Two halves and three quarters fill the first node's devices in order: a quarter of its second stays empty.
    two = place(_pool(2, per_node=2), workers_of("h", 1, 0.5, 1, 2, 2) + workers_of("q", 1, 0.25, 1, 3, 2))
    assert two.partly_idle == (("p/0", 1, 1),) and two.quarters_idle == 1
    with pytest.raises(PlacementError):
        place(pool, workers_of("q", 1, 0.25, 1, 9, 2))
