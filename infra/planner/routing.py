"""How a service's requests reach its allocations: the router its manifests render, decided from what the cluster
has installed, and the split the planner gave it.

Three routers, in order of preference:

- `inference-pool`: the cluster runs the Gateway API Inference Extension (`crds.inference_extension`); one
  InferencePool over every serving pod, whose endpoint picker sends each request to the pod with the least queue
  and KV-cache load. A load-aware picker fills a fast replica more than a slow one without being told their
  capacities, which the simulator models as least outstanding requests per unit of planned capacity.
- `http-route`: the cluster serves the Gateway API (`crds.gateway_api`); one Service per allocation and an
  HTTPRoute whose backendRefs carry integer weights proportional to each allocation's planned load. Gateways pick
  the backend of each request by weighted random choice (Envoy's weighted clusters) and an endpoint within it by
  their own balancing (Envoy Gateway's default: least requests), so the simulator does the same.
- `service`: neither; one ClusterIP Service over every serving pod, which kube-proxy spreads evenly over pods
  whatever their capacity (a random endpoint per connection).

Prefill/decode allocations need a router that knows the two roles; only the endpoint picker does, so a service
with one is routed by an HTTPRoute only over its aggregated allocations' Services (the others get no weight), and
a service with none keeps its Services.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

from infra.perf.shape import Workload

ROUTERS = ("inference-pool", "http-route", "service")
WEIGHT_TOTAL = 10_000
"""What a service's route weights add up to (about: each allocation with load keeps at least 1). Gateway API
weights are relative integers (0 to 1,000,000); a ten-thousandth of the load is finer than any plan's rounding."""


def router_for(crds: dict[str, Any], runs_llm_engine: bool = True, aggregated: bool = True) -> str:
    """The router the manifests render for a service on a cluster with these custom resources installed
    (`aggregated`: the service has an aggregated allocation, which an HTTPRoute can send requests to)."""
    if crds.get("inference_extension") and runs_llm_engine:
        return "inference-pool"
    if crds.get("gateway_api") and runs_llm_engine and aggregated:
        return "http-route"
    return "service"


def route_weights(allocations: list[dict[str, Any]]) -> dict[str, int]:
    """Allocation id (`a<i>`) -> weight of its backendRef: its planned load (replicas x load per replica; the
    capacity where the plan states no load) over the service's, in ten-thousandths, at least 1 for any allocation
    with load so that none is starved by rounding. Prefill/decode allocations take no share (see the module)."""
    def share(a: dict[str, Any], key: str) -> float:
        if a.get("mode", "agg") != "agg":
            return 0.0
        return float(a.get("replicas") or 0) * float(a.get(key) or 0.0)

    key = "load_per_replica" if any(share(a, "load_per_replica") > 0 for a in allocations) else \
        "capacity_per_replica"
    loads = [share(a, key) for a in allocations]
    total = sum(loads)
    if total <= 0:
        return {f"a{i}": 1 for i, a in enumerate(allocations) if a.get("mode", "agg") == "agg"}
    return {f"a{i}": max(1, round(WEIGHT_TOTAL * x / total)) for i, x in enumerate(loads) if x > 0}


def fill_routing(data: Any) -> Any:
    """A plan's data with `routing` filled in for every service that states none: the router its cluster's
    custom resources give and, for an HTTPRoute, the weights of its allocations. Data of any other shape is left
    for validation to refuse."""
    if not isinstance(data, dict):
        return data
    spec = data.get("spec")
    if not isinstance(spec, dict) or not isinstance(spec.get("services"), list):
        return data
    cluster = spec.get("cluster")
    crds = cluster.get("crds") if isinstance(cluster, dict) else None
    crds = crds if isinstance(crds, dict) else {}
    services = []
    changed = False
    for svc in spec["services"]:
        if isinstance(svc, dict) and "routing" not in svc and isinstance(svc.get("allocations"), list) and \
                all(isinstance(a, dict) for a in svc["allocations"]):
            router = router_for(crds, svc.get("kind") in (None, "llm"),
                                any(a.get("mode", "agg") == "agg" for a in svc["allocations"]))
            if svc.get("pipeline") and router == "http-route":
                # A stage's config hands off to the next stage's Service, not to a route over its allocations.
                router = "service"
            routing: dict[str, Any] = {"router": router}
            if router == "http-route":
                routing["weights"] = route_weights(svc["allocations"])
            svc = {**svc, "routing": routing}
            changed = True
        services.append(svc)
    if not changed:
        return data
    return {**data, "spec": {**spec, "services": services}}


def replica_loads(router: str, wl: Workload, allocations: list[tuple[str, int, float, bool]]) -> dict[str, Workload]:
    """What one replica of each allocation meets behind `router` when the service's workload `wl` (its peak rate or
    clients) is served by `allocations`, each (key, replicas, capacity per replica, aggregated):

    - `inference-pool` (and prefill/decode allocations, which only a P/D-aware picker feeds): a load-aware picker
      sends each replica its capacity's share, as a smoother stream than the whole (`peers`: all replicas);
    - `http-route`: the same share; the gateway picks the allocation at random by weight, which thins the
      stream (a renewal stream of cv c thinned to a share p has cv^2 = p c^2 + 1 - p), and balances its own
      replicas by least requests (`peers`: the allocation's replicas);
    - `service`: every pod the same share, at random, whatever its capacity (no smoothing), a prefill/decode
      unit's replica counting as one pod among the service's units (one mode holds behind it); clients of a closed
      loop land on pods at random too, so the busiest of n pods holds some standard deviations more than its
      share (about sqrt(2 ln n) of them).
    """
    capacity = sum(n * cap for _, n, cap, _ in allocations)
    demand = float(wl.rate if wl.rate is not None else wl.concurrency or 0)
    served = min(demand, capacity)
    total = sum(n for _, n, _, _ in allocations)
    # Pods a Service spreads over, aggregated replicas and P/D units apart (one mode holds behind it).
    pods_of = {kind: sum(m for _, m, _, agg in allocations if agg == kind) for kind in (True, False)}
    out: dict[str, Workload] = {}
    for key, n, cap, agg in allocations:
        share = cap / capacity if capacity else 0.0
        cv, peers = wl.arrival_cv, max(total, 1)
        pods = pods_of[agg]
        if router == "service" and pods:
            share = 1.0 / pods
            cv, peers = math.sqrt(share * wl.arrival_cv ** 2 + 1 - share), 1
        elif router == "http-route" and agg:
            p = n * share
            cv, peers = math.sqrt(p * wl.arrival_cv ** 2 + 1 - p), max(n, 1)
        if wl.rate is not None:
            out[key] = dataclasses.replace(wl, rate=max(served * share, 1e-6), arrival_cv=cv, peers=peers)
            continue
        mean = served * share
        clients = round(mean)
        if router == "service" and agg and pods > 1:
            clients = math.ceil(mean + math.sqrt(mean * (1 - share)) * math.sqrt(2 * math.log(pods)) - 1e-9)
        out[key] = dataclasses.replace(wl, concurrency=max(1, int(clients)), peers=peers)
    return out


def policy(router: str) -> str:
    """The simulator's router policy (`infra.bench.simulate.POLICIES`) for a rendered router."""
    return {"inference-pool": "least-loaded", "http-route": "weighted", "service": "random"}[router]


__all__ = ["ROUTERS", "WEIGHT_TOTAL", "fill_routing", "policy", "replica_loads", "route_weights", "router_for"]
