"""Plan consistency of routing: the manifests split a service's requests as the plan says they are split
(`ServicePlan.routing`), which is also how the plan was simulated.

For a service routed by an HTTPRoute: the route `<service>` exists, its backendRefs are the Services
`<service>-a<i>` of the plan's aggregated allocations with exactly the plan's weights (an unset weight is 1, as the
Gateway API defaults it), and each of those Services selects only its allocation's serving pods. A route whose
weights drift from the plan sends an allocation more than the capacity it was planned with.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from infra.planner.types import DeploymentPlan
from infra.validators.findings import Finding
from infra.validators.manifests import Manifest
from infra.validators.rules import rule



def check_routing(manifests: list[Manifest], plan: DeploymentPlan, plan_path: str,
                  line: Callable[[tuple], int]) -> list[Finding]:
    """PLN011 findings for every service the plan routes by an HTTPRoute."""
    out: list[Finding] = []
    for si, svc in enumerate(plan.spec.services):
        if svc.routing.router != "http-route" or not svc.runs_llm_engine:
            continue
        where = ("spec", "services", si, "routing")
        routes = [m for m in manifests if m.kind == "HTTPRoute" and m.name == svc.name]
        if not routes:
            out.append(rule("PLN011").at(plan_path, line(where), svc.name,
                                         f"the plan routes service {svc.name} by an HTTPRoute (weights "
                                         f"{_weights(svc.routing.weights or {})}), but no HTTPRoute "
                                         f"{svc.name!r} is in the manifests", field=f"spec.services[{si}].routing"))
            continue
        m = routes[0]
        want = dict(svc.routing.weights or {})
        services = {x.name: x for x in manifests if x.kind == "Service"}
        seen: set[str] = set()
        rules = (m.data.get("spec") or {}).get("rules") if isinstance(m.data.get("spec"), dict) else None
        for ri, r in enumerate(rules if isinstance(rules, list) else []):
            refs = r.get("backendRefs") if isinstance(r, dict) else None
            for bi, ref in enumerate(refs if isinstance(refs, list) else []):
                if not isinstance(ref, dict):
                    continue
                path = ("spec", "rules", ri, "backendRefs", bi)
                name = str(ref.get("name") or "")
                alloc = name.removeprefix(f"{svc.name}-") if name.startswith(f"{svc.name}-") else None
                if ref.get("kind", "Service") != "Service" or alloc not in want:
                    out.append(m.finding("PLN011", path + ("name",),
                                         f"backendRef {name!r} is no Service of an allocation the plan routes to "
                                         f"(expected {', '.join(f'{svc.name}-{a}' for a in want)})",
                                         fix="route only to the Services `<service>-a<i>` the plan weighs"))
                    continue
                seen.add(alloc)
                got = ref.get("weight", 1)
                if got != want[alloc]:
                    out.append(m.finding("PLN011", path + ("weight",),
                                         f"weight {got} for allocation {alloc}, the plan gives it {want[alloc]} "
                                         f"(of {sum(want.values())}: its planned share of the load)",
                                         fix=f"set weight: {want[alloc]}"))
                out += _selects_allocation(services.get(name), svc.name, alloc)
        for alloc in sorted(set(want) - seen, key=lambda a: int(a[1:])):
            if want[alloc] > 0:
                out.append(m.finding("PLN011", ("spec", "rules"),
                                     f"allocation {alloc} (weight {want[alloc]} in the plan) has no backendRef",
                                     fix=f"add backendRef {svc.name}-{alloc} with weight: {want[alloc]}"))
    return out


def _selects_allocation(s: Manifest | None, service: str, alloc: str) -> list[Finding]:
    """A backend Service must select its own allocation's serving pods, or the weights split nothing."""
    if s is None:
        return []  # a Service missing from the tree is SEM's and kubectl's to report
    spec = s.data.get("spec")
    selector = spec.get("selector") if isinstance(spec, dict) else None
    selector = selector if isinstance(selector, dict) else {}
    want = {"infra.dev/service": service, "infra.dev/allocation": alloc}
    wrong = {k: v for k, v in want.items() if selector.get(k) != v}
    if wrong:
        return [s.finding("PLN011", ("spec", "selector"),
                          f"Service {s.name} is a weighted backend of allocation {alloc} but does not select only its "
                          f"pods ({wrong} missing)", fix=f"select {want}")]
    return []


def _weights(weights: dict[str, Any]) -> str:
    return ", ".join(f"{k}: {v}" for k, v in weights.items()) or "none"


__all__ = ["check_routing"]
