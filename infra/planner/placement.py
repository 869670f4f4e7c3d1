"""Nodes: whether replicas fit the nodes of a pool, not just its device count, and where they go.

Candidate layouts divide a node's devices (tp 1, 2, 4, 8... of devices_per_node) or take whole nodes, and device
slices are halves and quarters, so on a pool whose nodes all have `devices_per_node` devices every item size
divides every larger one and counting devices is an exact packing test (see `solve`). Pools whose listed nodes
differ in size break that; for them the solver uses node patterns: each node runs one maximal combination of
worker sizes that fits it, and the workers of each size must be covered by the patterns chosen (exact bin packing
in the pattern formulation). After the solve, `place` puts every worker on a node (first fit, largest first,
multi-node workers on whole nodes first) and returns the nodes each allocation uses.
"""

from __future__ import annotations

from dataclasses import dataclass

from infra.intent.profile import Pool

MAX_PATTERNS = 4000


@dataclass(frozen=True)
class NodeGroup:
    """Nodes of one pool with the same number of devices."""

    devices: int
    names: tuple[str, ...]


def node_names(pool: Pool) -> list[tuple[str, int]]:
    """(name, devices) of every node; nodes given by count are named `<pool>/<index>`."""
    if isinstance(pool.nodes, int):
        return [(f"{pool.name}/{i}", pool.devices_per_node) for i in range(pool.nodes)]
    return [(n.name, n.devices or pool.devices_per_node) for n in pool.nodes]


def node_groups(pool: Pool) -> list[NodeGroup]:
    groups: dict[int, list[str]] = {}
    for name, devices in node_names(pool):
        groups.setdefault(devices, []).append(name)
    return [NodeGroup(d, tuple(names)) for d, names in sorted(groups.items(), reverse=True)]


def uniform(pool: Pool) -> bool:
    """Every node has devices_per_node devices, so counting devices packs exactly."""
    return all(d == pool.devices_per_node for _, d in node_names(pool))


def patterns(capacity: int, sizes: list[int]) -> list[tuple[int, ...]]:
    """Maximal combinations of item sizes that fit `capacity`: counts per size, in the order of `sizes`."""
    out: list[tuple[int, ...]] = []
    smallest = min(sizes) if sizes else capacity + 1

    def walk(i: int, left: int, acc: tuple[int, ...]) -> None:
        if len(out) >= MAX_PATTERNS:
            return
        if i == len(sizes):
            if left < smallest and any(acc):
                out.append(acc)
            return
        for k in range(left // sizes[i], -1, -1):
            walk(i + 1, left - k * sizes[i], acc + (k,))

    walk(0, capacity, ())
    return out


@dataclass(frozen=True)
class Worker:
    """One engine instance to place: `devices` on one node, or `nodes` whole nodes of a pool."""

    key: str
    devices: float
    nodes: int = 1


def workers_of(key: str, worker_devices: int, share: float, workers_per_replica: int, replicas: int,
               devices_per_node: int) -> list[Worker]:
    """The workers of `replicas` replicas of one candidate."""
    if worker_devices > devices_per_node:
        one = Worker(key, devices_per_node, -(-worker_devices // devices_per_node))
    else:
        one = Worker(key, worker_devices * share)
    return [one] * (workers_per_replica * replicas)


class PlacementError(Exception):
    """The workers do not fit the nodes (the solver's packing test and the placement disagree)."""


@dataclass(frozen=True)
class Placement:
    """Where a pool's workers went."""

    nodes: dict[str, dict[str, int]]
    """Candidate key -> node name -> workers."""
    devices_used: int
    """Devices holding at least one worker or slice."""
    quarters_idle: int
    """Unallocated quarters of the devices used (slices that leave part of a device empty)."""
    partly_idle: tuple[tuple[str, int, int], ...] = ()
    """(node, device index on the node, idle quarters) of every device used that slices leave partly empty; every
    other device used is wholly allocated."""


def place(pool: Pool, workers: list[Worker]) -> Placement:
    """Put every worker on a node. Multi-node workers take whole nodes of devices_per_node or more; the rest go
    largest first to the first node with room (in quarters of a device, so that slices fill devices)."""
    nodes = node_names(pool)
    free = {name: devices * 4 for name, devices in nodes}
    out: dict[str, dict[str, int]] = {}
    multi = [w for w in workers if w.nodes > 1]
    single = sorted((w for w in workers if w.nodes == 1), key=lambda w: (-w.devices, w.key))
    for w in multi:
        whole = [name for name, devices in nodes if devices >= pool.devices_per_node
                 and free[name] == devices * 4][:w.nodes]
        if len(whole) < w.nodes:
            raise PlacementError(f"a {w.nodes}-node worker of {w.key} finds only {len(whole)} free whole nodes "
                                 f"in pool {pool.name}")
        for name in whole:
            free[name] = 0
            out.setdefault(w.key, {})[name] = out.setdefault(w.key, {}).get(name, 0) + 1
    # First fit: for items of one size the first node with room only moves forward (free space only shrinks),
    # so one pointer per size keeps this linear in nodes plus workers.
    names = [name for name, _ in nodes]
    at, size = 0, None
    for w in single:
        need = round(w.devices * 4)
        if need != size:
            at, size = 0, need
        while at < len(names) and free[names[at]] < need:
            at += 1
        if at == len(names):
            raise PlacementError(f"a {w.devices:g}-device worker of {w.key} finds no node with room in pool "
                                 f"{pool.name}")
        name = names[at]
        free[name] -= need
        out.setdefault(w.key, {})[name] = out.setdefault(w.key, {}).get(name, 0) + 1
    # Largest first with sizes that divide one another fills devices in order: a node's used quarters occupy
    # ceil(used / 4) devices.
    used = [devices * 4 - free[name] for name, devices in nodes]
    devices_used = sum(-(-u // 4) for u in used)
    partly = tuple((name, u // 4, 4 - u % 4) for (name, _), u in zip(nodes, used) if u % 4)
    return Placement({k: dict(sorted(v.items())) for k, v in sorted(out.items())}, devices_used,
                     devices_used * 4 - sum(used), partly)
