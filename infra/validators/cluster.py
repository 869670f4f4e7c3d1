"""The cluster manifests are checked against: resource names, node labels, pools, installed CRDs.

It comes from a ClusterProfile file (read through `infra.intent` loaders, resource names resolved against the
catalog's conventions) or from a plan's `spec.cluster`. Without either, device resources are recognised by the
catalog's packaged conventions (HAMi chart defaults) alone.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from infra.catalog.loader import Catalog, load_catalog
from infra.errors import CatalogError, IntentError, Problem
from infra.intent.loader import load_profile_file
from infra.intent.resolve import pool_device_memory_gb
from infra.intent.units import parse_bytes


@dataclass(frozen=True)
class PoolView:
    name: str
    device: str
    devices_per_node: int
    device_memory_bytes: float
    node_selector: dict[str, str]
    count: str
    shared_count: str | None = None
    memory: str | None = None
    memory_unit: int | None = None
    cores: str | None = None
    node_names: tuple[str, ...] = ()
    zone: str | None = None

    def resource_names(self) -> set[str]:
        return {n for n in (self.count, self.shared_count, self.memory, self.cores) if n}

    @property
    def memory_units_per_device(self) -> int | None:
        if not self.memory or not self.memory_unit:
            return None
        return int(self.device_memory_bytes // self.memory_unit)


@dataclass(frozen=True)
class ClusterView:
    name: str
    source: str
    namespace: str
    scheduler: str
    crds: dict[str, str]
    pools: tuple[PoolView, ...]
    cpu_labels: tuple[tuple[str, str], ...] = ()
    """(label, value) pairs the nodes of CPU pools carry: their selectors, hostnames and zones."""

    def resource_names(self) -> set[str]:
        return set().union(*(p.resource_names() for p in self.pools)) if self.pools else set()

    def count_names(self) -> set[str]:
        return {n for p in self.pools for n in (p.count, p.shared_count) if n}

    def node_labels(self) -> dict[str, set[str]]:
        """Label key -> values the profile knows its nodes carry (pool selectors and hostnames)."""
        out: dict[str, set[str]] = {}
        for p in self.pools:
            for k, v in p.node_selector.items():
                out.setdefault(k, set()).add(v)
            for n in p.node_names:
                out.setdefault("kubernetes.io/hostname", set()).add(n)
            if p.zone:
                out.setdefault("topology.kubernetes.io/zone", set()).add(p.zone)
        for k, v in self.cpu_labels:
            out.setdefault(k, set()).add(v)
        return out

    def pools_for(self, resource: str) -> list[PoolView]:
        return [p for p in self.pools if resource in p.resource_names()]


def chip_name(device: str) -> str:
    """HAMi's chip name for resource names that carry it (`huawei.com/Ascend{chip}`): the catalog device name
    without its vendor prefix, e.g. `Ascend-910B3` -> `910B3`."""
    return device.removeprefix("Ascend-")


def expand(name: str | None, device: str) -> str | None:
    return name.replace("{chip}", chip_name(device)) if name else name


def _pool_view(name: str, device: str, per_node: int, memory_gb: float, selector: dict[str, str], res: dict,
               node_names: tuple[str, ...], zone: str | None) -> PoolView:
    return PoolView(name=name, device=device, devices_per_node=per_node, device_memory_bytes=memory_gb * 1e9,
                    node_selector=dict(selector), count=expand(res["count"], device) or "",
                    shared_count=expand(res.get("shared_count"), device), memory=expand(res.get("memory"), device),
                    memory_unit=res.get("memory_unit"), cores=expand(res.get("cores"), device),
                    node_names=node_names, zone=zone)


def from_plan(plan, source: str) -> ClusterView:
    """The cluster a DeploymentPlan was made for."""
    c = plan.spec.cluster
    pools = tuple(_pool_view(p.name, p.device, p.devices_per_node, p.device_memory_gb, p.node_selector,
                             p.resources.model_dump(), tuple(p.node_names), p.zone) for p in c.pools)
    return ClusterView(c.name, source, c.namespace, c.scheduler, dict(c.crds), pools,
                       _cpu_labels((p.node_selector, p.node_names, p.zone) for p in c.cpu_pools))


def _cpu_labels(pools: Any) -> tuple[tuple[str, str], ...]:
    out: set[tuple[str, str]] = set()
    for selector, names, zone in pools:
        out.update(selector.items())
        out.update(("kubernetes.io/hostname", n) for n in names)
        if zone:
            out.add(("topology.kubernetes.io/zone", zone))
    return tuple(sorted(out))


def from_profile(path: Path, catalog: Catalog | None = None) -> ClusterView:
    """A ClusterProfile file, with each pool's device looked up and its resource names resolved."""

    profile, doc = load_profile_file(path)
    catalog = catalog or load_catalog()
    conv = profile.spec.conventions
    pools = []
    problems: list[Problem] = []
    for i, p in enumerate(profile.spec.pools):
        try:
            device = catalog.device(p.device)
        except CatalogError as exc:
            problems += [Problem(q.message, doc.locate(("spec", "pools", i, "device")), q.fix) for q in exc.problems]
            continue
        res = conv.devices[device.vendor].model_dump() if device.vendor in conv.devices else \
            catalog.device_resources(device.vendor)
        if not res:
            problems.append(Problem(f"no resource names known for {device.vendor} devices",
                                    doc.locate(("spec", "conventions")),
                                    f"add conventions.devices.{device.vendor} with the count resource name"))
            continue
        res = dict(res)
        if isinstance(res.get("memory_unit"), str):

            res["memory_unit"] = int(parse_bytes(res["memory_unit"]))
        names = tuple(n.name for n in p.nodes) if isinstance(p.nodes, list) else ()
        pools.append(_pool_view(p.name, device.name, p.devices_per_node, pool_device_memory_gb(p, device),
                                p.node_selector, res, names, p.zone))
    if problems:
        raise IntentError(problems)
    crds = {k: v for k, v in sorted(conv.crds.model_dump().items()) if v}
    cpu = _cpu_labels((p.node_selector, [n.name for n in p.nodes] if isinstance(p.nodes, list) else [], p.zone)
                      for p in profile.spec.cpu_pools)
    return ClusterView(profile.metadata.name, str(path), conv.namespace, conv.scheduler, crds, tuple(pools), cpu)


@dataclass(frozen=True)
class DeviceNames:
    """Which extended resources count devices and which slice them, as regular expressions."""

    counts: tuple[re.Pattern[str], ...]
    slices: tuple[re.Pattern[str], ...]
    known: frozenset[str] = field(default_factory=frozenset)

    def is_count(self, name: str) -> bool:
        return any(p.fullmatch(name) for p in self.counts)

    def is_slice(self, name: str) -> bool:
        return any(p.fullmatch(name) for p in self.slices)


def _pattern(name: str) -> re.Pattern[str]:
    return re.compile(re.escape(name).replace(re.escape("{chip}"), r"[A-Za-z0-9._-]+"))


def device_names(cluster: ClusterView | None, catalog: Catalog | None = None) -> DeviceNames:
    """Device resource names of the cluster, else of every vendor in the catalog's conventions."""
    if cluster is not None and cluster.pools:
        counts = sorted(cluster.count_names())
        slices = sorted({n for p in cluster.pools for n in (p.memory, p.cores) if n})
        return DeviceNames(tuple(_pattern(n) for n in counts), tuple(_pattern(n) for n in slices),
                           frozenset(cluster.resource_names()))
    catalog = catalog or load_catalog()
    counts, slices = set(), set()
    for res in catalog.conventions.values():
        counts |= {n for n in (res.get("count"), res.get("shared_count")) if n}
        slices |= {n for n in (res.get("memory"), res.get("cores")) if n}
    return DeviceNames(tuple(_pattern(n) for n in sorted(counts)), tuple(_pattern(n) for n in sorted(slices)))
