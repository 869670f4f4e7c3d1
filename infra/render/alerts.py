"""A service's objectives as Prometheus alerting rules on its engines' own latency histograms (rendered as a
PrometheusRule where the cluster runs the Prometheus Operator, `conventions.crds.prometheus_operator`), so the
figures a plan promises are watched where it runs, and a miss, or traffic past the peak it was sized for, says
how to close the loop: `infra verify PLAN --prometheus URL --selector ...` judges, calibrates and re-plans.

- a percentile objective: `histogram_quantile(q, sum by (le) (rate(H_bucket{SEL}[W])))` above its target;
- a mean objective: `sum(rate(H_sum{SEL}[W])) / sum(rate(H_count{SEL}[W]))` above its target;
  either only over a window holding the observations a verdict needs (`infra.catalog.metrics.needed`: a p99
  1,000, a mean 30);
- the planned peak: requests finishing faster than `workload.rate.peak` (`sum(rate(TTFT_count{SEL}[W]))`).

SEL holds the plan's namespace and the pod names of the service's aggregated allocations (a Deployment's pods,
`NAME-HASH-ID`, or a LeaderWorkerSet's, `NAME-GROUP[-WORKER]`: infra's own `<service>-a<i>`, KServe's
`<service>-a<i>-kserve`, llm-d's chart's decode Deployment), which Prometheus's Kubernetes discovery labels every
scraped series with (`namespace`, `pod`). Prefill/decode-disaggregated allocations are left out: each of their
engines serves part of a request (a decode engine's TTFT starts after the remote prefill). Where the deployment
target has a frontend that sees each request whole (NVIDIA Dynamo's, `infra.catalog.metrics.FRONTENDS`), SEL is
the namespace and the served model the frontend labels its series with, and every allocation, disaggregated ones
too, is watched through it. An engine whose series infra does not know (`FrameworkSpec.metrics` unset), or a TPOT
objective of a family that counts gaps rather than requests (SGLang's, Dynamo's), gets no rule; the caller notes
which and why.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from infra.catalog.metrics import FAMILIES, MIN_MEAN, frontend_selector, needed, pod_selector, watch_selectors
from infra.catalog.targets import serving_workload

WINDOW = "10m"
"""Rate window of every rule: long enough for a p99 of a few requests a second to rest on some hundreds."""
FOR = "10m"
"""How long an objective stays missed before its alert fires."""
PEAK_FOR = "15m"
"""How long traffic stays past the planned peak before that alert fires."""


@dataclass(frozen=True)
class Rules:
    """The alerting rules of one service, and what could not be watched (one line each)."""

    rules: list[dict[str, Any]]
    skipped: list[str]


def _seconds(ms: float) -> str:
    # Twelve digits: the plan's target itself (validation reads it back, PLN012), with no float noise.
    return f"{ms / 1000:.12g}"


def _objective(service: str, key: str, target: float, name: str, sel: str, fingerprint: str,
               verify: str, source: str) -> dict[str, Any]:
    metric, _, stat = key.partition("_")
    if stat == "mean":
        value = f"sum(rate({name}_sum{{{sel}}}[{WINDOW}])) / sum(rate({name}_count{{{sel}}}[{WINDOW}]))"
        what, need = f"mean {metric.upper()}", MIN_MEAN
    else:
        value = (f"histogram_quantile({float(stat[1:]) / 100:g}, sum by (le) "
                 f"(rate({name}_bucket{{{sel}}}[{WINDOW}])))")
        what, need = f"{metric.upper()} {stat}", needed(float(stat[1:]))
    # Judged only on a window that can say it, as a verdict is: a quiet hour's handful of requests pages no one.
    expr = f"{value} > {_seconds(target)} and on () sum(increase({name}_count{{{sel}}}[{WINDOW}])) >= {need}"
    return {
        "alert": "ServingObjectiveMissed", "expr": expr, "for": FOR,
        "labels": {"severity": "warning", "service": service, "objective": key},
        "annotations": {
            "summary": f"{service}: {what} over the {target:g} ms the plan promises",
            "description": (f"{what} of {service} over the last {WINDOW}, read from {source} histograms (a "
                            f"percentile interpolated within its bucket) over at least {need:,} observations, is "
                            f"above its {target:g} ms objective (plan {fingerprint}). Judge it on the traffic "
                            f"served, calibrate and re-plan: {verify}"),
        },
    }


def _verify(service: str, namespace: str, allocations: int, indices: list[int],
            workload: Callable[[str], str] | None) -> str:
    """What a rule's description says to run when it fires: `infra verify` on the watched series, one allocation
    at a time where the service has several (a calibration is filed under one deployment)."""
    if workload is None:
        if allocations == 1:
            return (f"infra verify PLAN --service {service} --prometheus PROMETHEUS_URL --selector "
                    f"'{frontend_selector(namespace, service)}'")
        # A frontend's series mix the allocations it routes to; none of them can be told apart there.
        return (f"its frontend serves the service's {allocations} allocations together, which one calibration cannot "
                "tell apart: measure each on its own (infra bench --save), calibrate (infra calibrate) and re-plan "
                "(infra plan --calibration)")
    if allocations == 1:
        return (f"infra verify PLAN --service {service} --prometheus PROMETHEUS_URL --selector "
                f"'{pod_selector(namespace, [workload(str(indices[0]))])}'")
    return (f"infra verify PLAN --service {service} --allocation I --prometheus PROMETHEUS_URL --selector "
            f"'{pod_selector(namespace, [workload('I')])}' for each allocation I of {', '.join(map(str, indices))}")


def objective_rules(service: str, namespace: str, target: str, watched: dict[str | None, list[int]],
                    allocations: int, objectives: dict[str, float], peak_rps: float | None,
                    fingerprint: str) -> Rules:
    """The rules watching `objectives` (key -> target ms, `ttft_p99`) and `peak_rps` of a service of `allocations`
    allocations deployed through `target`, on the series `watched` names (`infra.catalog.metrics.watching`:
    family -> allocation indices, None for engines that export no family infra reads): the pods of each watched
    allocation's workload as the target names it, or the target's frontend (`watch_selectors`)."""
    skipped = []
    covered = {i for indices in watched.values() for i in indices}
    unwatched = [f"a{i}" for i in range(allocations) if i not in covered]
    if unwatched:
        skipped.append(f"{', '.join(unwatched)}: prefill/decode-disaggregated, whose engines each serve part of a "
                       "request: not watched (watch a router or frontend that sees whole requests)")
    if None in watched:
        skipped.append(f"{', '.join(f'a{i}' for i in watched[None])}: the engine exports no series infra reads "
                       "(vLLM's or SGLang's): not watched")
    selectors = watch_selectors(target, service, namespace, watched)
    if not selectors:
        return Rules([], skipped)
    workload = serving_workload(target, service)
    verify = _verify(service, namespace, allocations, sorted(i for f in selectors for i in watched[f]), workload)
    rules = []
    for family, sel in selectors.items():
        by_metric = FAMILIES[family].by_metric()
        for key, target in sorted(objectives.items()):
            name = by_metric.get(key.partition("_")[0])
            if name is None:
                skipped.append(f"{key}: {family} counts TPOT per gap between tokens, not per request: not watched")
                continue
            rules.append(_objective(service, key, target, name, sel, fingerprint, verify,
                                    "its engines'" if workload else "its frontend's"))
    if peak_rps is not None:
        served = " + ".join(f"(sum(rate({FAMILIES[family].ttft}_count{{{sel}}}[{WINDOW}])) or vector(0))"
                            for family, sel in selectors.items())
        rules.append({
            "alert": "ServingLoadPastPlan", "expr": f"{served} > {peak_rps:.6g}", "for": PEAK_FOR,
            "labels": {"severity": "info", "service": service},
            "annotations": {
                "summary": f"{service}: traffic past the {peak_rps:g}/s peak the plan was sized for",
                "description": (f"{service} has served more than the {peak_rps:g} requests/s its plan ({fingerprint}) "
                                "was sized for: its objectives hold only as far as the model carries them past the "
                                f"peak. Measure this traffic, calibrate and re-plan: {verify}"),
            },
        })
    return Rules(rules, skipped)


__all__ = ["FOR", "PEAK_FOR", "WINDOW", "Rules", "objective_rules"]
