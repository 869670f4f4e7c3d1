"""Co-located pipeline stages as one unit of devices per node.

When the planner co-locates consecutive stages of a pipeline (see `infra.planner.pipeline`), their replicas must
share nodes so that the hand-off stays on the node's scale-up link (or inside one device). The solver sees such a
group as one service whose candidates are bundles: on one pool, k_1 replicas of a shape of the first stage, k_2
of a shape of the second, ..., that together fill exactly a size that packs (a quarter or half device, or a number
of devices that divides the node the way single replicas do). A bundle carries min_j k_j x capacity_j requests/s
and costs its devices; placement puts each bundle on one node, so every replica of one stage has its partner
replicas beside it. After the solve, bundles are turned back into the stages' replicas (`unbundle`).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, replace

from infra.intent.profile import Pool
from infra.perf.shape import Parallel
from infra.planner.candidates import SLOTS_PER_DEVICE, Candidate, prune_dominated
from infra.planner.solve import Solution

BEST_PER_POOL = 3
"""Shapes of each stage per pool combined into bundles: those carrying the most load per device."""


@dataclass(frozen=True)
class Bundle(Candidate):
    """Replicas of several co-located stages that go onto one node together."""

    members: tuple[tuple[Candidate, int], ...] = ()
    """(shape of one stage, replicas of it in the bundle), in pipeline order."""
    slots: int = 0
    """Quarter devices the bundle fills."""

    def workers_on(self, pool: str) -> list[tuple[int, float, int]]:
        if pool != self.pool:
            return []
        if self.slots >= SLOTS_PER_DEVICE:
            return [(self.slots // SLOTS_PER_DEVICE, 1.0, 1)]
        return [(1, self.slots / SLOTS_PER_DEVICE, 1)]

    @property
    def frameworks(self) -> set[str]:
        return {m.framework for m, _ in self.members}

    @property
    def consumption(self) -> float:
        return self.slots / SLOTS_PER_DEVICE

    @property
    def cost_per_hour(self) -> float:
        return self.consumption * self.price_per_device_hour

    @property
    def layout(self) -> str:
        return " + ".join(f"{k}x {m.service} {m.layout}" for m, k in self.members)

    @property
    def key(self) -> str:
        return f"{self.service}/{self.pool}/" + "+".join(f"{k}x{m.key}" for m, k in self.members)

    @property
    def in_one_device(self) -> bool:
        """Every replica is a slice and all of them share one device: hand-offs go through device memory."""
        return self.slots <= SLOTS_PER_DEVICE and all(m.share < 1 for m, _ in self.members)


def sizes(pool: Pool) -> list[int]:
    """Bundle sizes in quarter devices that pack like single replicas: a quarter, a half, and whole devices in
    the powers of two that divide the node, and the whole node."""
    out = {1, 2}
    d = 1
    while d <= pool.devices_per_node:
        if pool.devices_per_node % d == 0:
            out.add(d * SLOTS_PER_DEVICE)
        d *= 2
    out.add(pool.devices_per_node * SLOTS_PER_DEVICE)
    return sorted(out)


def _fill(slots: list[int], caps: list[float], size: int) -> tuple[tuple[int, ...], float] | None:
    """Replica counts (each at least one) whose slots add up to exactly `size`, carrying the most load."""
    best: tuple[tuple[int, ...], float] | None = None
    ranges = [range(1, size // s + 1) for s in slots[:-1]]
    for ks in itertools.product(*ranges):
        rest = size - sum(k * s for k, s in zip(ks, slots))
        if rest < slots[-1] or rest % slots[-1]:
            continue
        counts = ks + (rest // slots[-1],)
        cap = min(k * c for k, c in zip(counts, caps))
        if best is None or cap > best[1]:
            best = (counts, cap)
    return best


def bundles(group: str, members: list[list[Candidate]], pools: dict[str, Pool]) -> list[Bundle]:
    """The bundles of a group of co-located stages (candidates of each stage in pipeline order), undominated."""
    out: list[Bundle] = []
    common = set.intersection(*({c.pool for c in cs} for cs in members)) if members else set()
    for name in sorted(common):
        pool = pools[name]
        per_stage = []
        for cs in members:
            mine = [c for c in cs if c.pool == name and c.decode_pool is None
                    and c.parallel.devices <= pool.devices_per_node]
            mine.sort(key=lambda c: (-c.capacity / c.consumption, c.key))
            per_stage.append(mine[:BEST_PER_POOL])
        for combo in itertools.product(*per_stage):
            slots = [c.slots_on(name) for c in combo]
            caps = [c.capacity for c in combo]
            for size in sizes(pool):
                if size < sum(slots):
                    continue
                found = _fill(slots, caps, size)
                if found is None:
                    continue
                counts, cap = found
                first = combo[0]
                out.append(Bundle(
                    group, name, first.device, "+".join(c.framework for c in combo),
                    "+".join(c.precision for c in combo), Parallel(), max(1, size // SLOTS_PER_DEVICE), cap,
                    first.price_per_device_hour, first.spot, first.zone, first.estimate,
                    share=1.0 if size >= SLOTS_PER_DEVICE else size / SLOTS_PER_DEVICE,
                    members=tuple(zip(combo, counts)), slots=size))
    kept, _ = prune_dominated(out)
    return sorted(kept, key=lambda b: b.key)  # type: ignore[return-value]


def unbundle(sol: Solution, cands: list[Candidate]) -> tuple[Solution, list[Candidate]]:
    """The solution with each chosen bundle turned into its stages' replicas, and the candidates that names
    (bundles replaced by their members)."""
    by_key = {c.key: c for c in cands}
    replicas: dict[str, int] = {}
    out: list[Candidate] = []
    seen: set[str] = set()
    for c in cands:
        if not isinstance(c, Bundle):
            out.append(c)
    for key, n in sol.replicas.items():
        c = by_key[key]
        if isinstance(c, Bundle):
            for m, k in c.members:
                replicas[m.key] = replicas.get(m.key, 0) + k * n
                if m.key not in seen:
                    seen.add(m.key)
                    out.append(m)
        else:
            replicas[key] = replicas.get(key, 0) + n
    return replace(sol, replicas=dict(sorted(replicas.items()))), out


def member_nodes(placed: dict[str, dict[str, int]], cands: list[Candidate],
                 sol: Solution) -> dict[str, dict[str, int]]:
    """Nodes of each stage's replicas, from where the bundles went: a bundle's node holds k of each member."""
    out = {k: dict(v) for k, v in placed.items()}
    for c in cands:
        if isinstance(c, Bundle) and c.key in sol.replicas:
            for m, k in c.members:
                mine = out.setdefault(m.key, {})
                for node, count in placed.get(c.key, {}).items():
                    mine[node] = mine.get(node, 0) + k * count
    return {k: dict(sorted(v.items())) for k, v in sorted(out.items())}
