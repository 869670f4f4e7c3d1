"""Plan consistency of the objective alerts: where the plan's cluster runs the Prometheus Operator, each service's
PrometheusRule `<service>-objectives` (`infra.render.alerts`) watches what the plan promises, at the plan's
targets. A threshold loosened by hand in the repository would let an objective slip past the plan unnoticed, and
a rule kept from an older plan watches promises no longer made: both are PLN012 findings, as are a missing rule
for a service whose engines' series infra reads and a rule that reads other series than the plan's engines
export (a kustomize namePrefix or another namespace: it would never fire).

Each `ServingObjectiveMissed` rule names its objective (`labels.objective`); its threshold is the number its
expression compares the metric with (`... > SECONDS and on () ...`), in seconds.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from infra.catalog.loader import Catalog
from infra.catalog.metrics import FAMILIES, watch_selectors, watching
from infra.catalog.targets import DEFAULT_TARGET
from infra.planner.types import DeploymentPlan, ServicePlan
from infra.validators.findings import Finding
from infra.validators.manifests import Manifest
from infra.validators.rules import rule

THRESHOLD = re.compile(r"\)\s*>\s*([0-9][0-9.eE+-]*)\s+and\s+on\s*\(\)")
"""The target an objective rule compares its metric with (seconds)."""
ALERTS = ("ServingObjectiveMissed", "ServingLoadPastPlan")
"""The alerts infra renders (`infra.render.alerts`); a rule a user added beside them is theirs."""
SELECTOR = re.compile(r"\{([^{}]*)\}")
"""The label matchers of the first series an expression reads."""


def _watched(svc: ServicePlan, catalog: Catalog, target: str) -> dict[str | None, list[int]]:
    return watching(target, [(catalog.framework(a.framework).metrics, a.mode) for a in svc.allocations])


def _watchable(watched: dict[str | None, list[int]], svc: ServicePlan) -> set[str]:
    """The objectives of `svc` the series that watch it hold (`infra.catalog.metrics.watching`)."""
    metrics: set[str] = set()
    for family in watched:
        if family is not None:
            metrics |= set(FAMILIES[family].by_metric())
    objectives = {**svc.objectives, **svc.attainment_objectives}
    return {key for key in objectives if key.partition("_")[0] in metrics}


def _rules(m: Manifest) -> list[tuple[tuple[Any, ...], dict[str, Any]]]:
    spec = m.data.get("spec")
    groups = spec.get("groups") if isinstance(spec, dict) else None
    out = []
    for gi, g in enumerate(groups if isinstance(groups, list) else []):
        rules = g.get("rules") if isinstance(g, dict) else None
        for ri, r in enumerate(rules if isinstance(rules, list) else []):
            if isinstance(r, dict):
                out.append((("spec", "groups", gi, "rules", ri), r))
    return out


def check_objective_alerts(manifests: list[Manifest], plan: DeploymentPlan, plan_path: str,
                           line: Callable[[tuple], int], catalog: Catalog, target: str = DEFAULT_TARGET
                           ) -> list[Finding]:
    """PLN012 findings for every LLM service of a plan whose cluster lists the Prometheus Operator, in a tree
    rendered for `target`."""
    if not plan.spec.cluster.crds.get("prometheus_operator"):
        return []
    out: list[Finding] = []
    fingerprint = plan.spec.fingerprint
    for si, svc in enumerate(plan.spec.services):
        if not svc.runs_llm_engine or svc.stage is not None:
            continue
        name = f"{svc.name}-objectives"
        watched = _watched(svc, catalog, target)
        watchable = _watchable(watched, svc)
        selectors = set(watch_selectors(target, svc.name, plan.spec.cluster.namespace, watched).values())
        docs = [m for m in manifests if m.kind == "PrometheusRule" and m.name == name]
        if not docs:
            if watchable:
                out.append(rule("PLN012").at(plan_path, line(("spec", "services", si)), svc.name,
                                             f"the cluster runs the Prometheus Operator, but no PrometheusRule "
                                             f"{name!r} watches {', '.join(sorted(watchable))}",
                                             field=f"spec.services[{si}]"))
            continue
        m = docs[0]
        if m.annotations.get("infra.dev/plan-fingerprint") != fingerprint:
            out.append(m.finding("PLN012", ("metadata", "annotations"),
                                 f"plan-fingerprint is {m.annotations.get('infra.dev/plan-fingerprint')!r}, the "
                                 f"plan's is {fingerprint!r}: the rule watches another plan's promises"))
        objectives = {**svc.objectives, **svc.attainment_objectives}
        covered: set[str] = set()
        for path, r in _rules(m):
            alert = r.get("alert")
            if alert not in ALERTS:
                continue
            labels = r.get("labels") if isinstance(r.get("labels"), dict) else {}
            key = str(labels.get("objective") or "")
            expr = str(r.get("expr") or "")
            sel = SELECTOR.search(expr)
            if sel is None or sel.group(1) not in selectors:
                # A namePrefix, a renamed namespace or a hand edit: the rule reads series no engine of the plan has.
                out.append(m.finding("PLN012", path + ("expr",),
                                     f"the {key or alert} rule reads {{{sel.group(1) if sel else ''}}}, not the "
                                     f"series of the plan's engines ({{{'} or {'.join(sorted(selectors))}}})",
                                     fix="render the plan again (a kustomize namePrefix or another namespace needs "
                                         "the rule's selector changed with it)"))
            if alert != "ServingObjectiveMissed":
                continue
            if key not in objectives:
                out.append(m.finding("PLN012", path + ("labels", "objective"),
                                     f"the rule watches objective {key!r}, which the plan does not promise "
                                     f"(it promises {', '.join(sorted(objectives)) or 'none'})",
                                     fix="remove the rule, or render the plan again"))
                continue
            covered.add(key)
            got = THRESHOLD.search(expr)
            target_s = objectives[key] / 1000
            if got is None or abs(float(got.group(1)) - target_s) > 1e-9 * max(target_s, 1.0):
                said = f"fires above {float(got.group(1)):g} s" if got else "compares with no threshold infra reads"
                out.append(m.finding("PLN012", path + ("expr",),
                                     f"the {key} rule {said}; the plan promises {target_s:g} s",
                                     fix=f"compare with {target_s:g} (render the plan again)"))
        for key in sorted(watchable - covered):
            out.append(m.finding("PLN012", ("spec", "groups"),
                                 f"no rule watches {key} ({objectives[key]:g} ms), which the plan promises",
                                 fix="render the plan again"))
    return out


__all__ = ["check_objective_alerts"]
