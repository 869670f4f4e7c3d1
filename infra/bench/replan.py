"""Closing the loop on a deployed plan: the loads to measure it at, and what planning again on the measurements
changed, in words a reviewer reads (`chat: 8 x H100 tp4 -> 10 x H100 tp4, +$24.00/h: TTFT p99 measured 1.31x
predicted at 40/s`)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError as PydanticValidationError

from infra.bench.engine import plan_allocation
from infra.bench.observe import Observation
from infra.bench.run import BenchResult
from infra.bench.verdict import ObjectiveVerdict, Outcome
from infra.errors import IntentError, Location, Problem
from infra.intent.models import Workload
from infra.planner.types import DeploymentPlan

MAX_FAILED = 0.01
"""Share of failed requests beyond which a measured load fails verification, whatever the latencies of the rest."""


@dataclass(frozen=True)
class Run:
    """One measured load of the service: a benchmark at a planned load, or a window of its own traffic."""

    label: str
    """`peak` or `baseline` (a benchmark), `observed` (a window of traffic)."""
    rate: float | None
    concurrency: int | None
    objectives: tuple[ObjectiveVerdict, ...]
    overall: Outcome
    bench: BenchResult | None = None
    """The benchmark, where load was sent."""
    observed: Observation | None = None
    """The window, where the deployment's own traffic was read (`infra.bench.window_verdict` judged it)."""
    predicted: dict[str, float] | None = None
    """The model's figures at the window's load (ms by objective key, `ttft_mean` ...), where it is one window."""

    @classmethod
    def of_bench(cls, label: str, rate: float | None, concurrency: int | None, bench: BenchResult) -> Run:
        return cls(label, rate, concurrency, tuple(bench.verdict.objectives), bench.verdict.overall, bench)

    def load(self) -> str:
        if self.rate is None:
            return f"{self.concurrency} clients"
        # A planned load is the intent's figure; an observed one a measured rate, said to four digits.
        return f"{self.rate:.4g}/s" if self.observed is not None else f"{self.rate:g}/s"

    def failure(self) -> str | None:
        """Why the run fails whatever its latencies: requests that failed beyond `MAX_FAILED` of those sent (a
        deployment that errors is not one that meets its objectives), or none completed. A window of traffic
        counts its finished requests only."""
        if self.bench is None:
            return None
        s = self.bench.summary
        sent = s.completed + s.failed
        if s.completed == 0:
            return f"{self.label} {self.load()}: none of {sent} requests completed"
        if s.failed > MAX_FAILED * sent:
            return f"{self.label} {self.load()}: {s.failed} of {sent} requests failed (more than {MAX_FAILED:.0%})"
        return None


def plan_loads(plan: DeploymentPlan, service: str, allocation: int | None = None
               ) -> list[tuple[str, float | None, int | None]]:
    """(label, rate, concurrency) of each load the service is planned for: its peak, and its baseline when the
    workload's rate has one below the peak; for one `allocation` measured on its own, its share of them (the load
    the plan gives its replicas)."""
    svc, alloc = plan_allocation(plan, service, allocation or 0)
    try:
        wl = Workload.model_validate(svc.workload)
    except PydanticValidationError as exc:
        first = exc.errors(include_url=False)[0]
        raise IntentError(Problem(f"the plan's workload does not validate: {first['msg']}",
                                  Location(path=f"spec.services.{service}.workload"), "re-plan the intent")) from None
    share = 1.0
    if allocation is not None:
        demand = wl.rate.peak_rps if wl.rate is not None else float(wl.concurrency or 1)
        share = min(1.0, alloc.load_per_replica * alloc.replicas / demand) if demand > 0 else 1.0
    if wl.rate is None:
        return [("peak", None, max(1, round(int(wl.concurrency or 1) * share)))]
    peak, base = wl.rate.peak_rps * share, wl.rate.baseline_rps * share
    return [("peak", peak, None)] + ([("baseline", base, None)] if 0 < base < peak else [])


def _layout(p: Any) -> str:
    parts = [f"tp{p.tp}"] + [f"{k}{v}" for k, v in (("pp", p.pp), ("ep", p.ep), ("dp", p.attention_dp),
                                                        ("sp", p.sp)) if v > 1]
    return "-".join(parts)


def _allocations(svc: Any) -> str:
    return " + ".join(f"{a.replicas} x {a.device} {_layout(a.parallel)} ({a.framework} {a.precision}"
                      f"{', ' + a.mode if a.mode != 'agg' else ''})" for a in svc.allocations) or "nothing"


def _why(runs: list[Run]) -> str:
    """The figure furthest from its prediction, measured over predicted, at the peak (what the plan's predictions
    are for), or on the window of traffic observed (its objectives, and its mean TTFT and TPOT, which a
    histogram gives exactly where its buckets place a percentile only roughly)."""
    worst: tuple[float, str] | None = None
    for run in runs[:1]:
        pairs = [(o.key, o.measured_ms, o.predicted_ms) for o in run.objectives]
        if run.observed is not None and run.predicted:
            pairs += [("ttft_mean", run.observed.ttft_ms, run.predicted.get("ttft_mean")),
                      ("tpot_mean", run.observed.tpot_ms, run.predicted.get("tpot_mean"))]
        for key, measured, predicted in pairs:
            if measured is None or not predicted or not math.isfinite(measured):
                continue
            ratio = measured / predicted
            metric, _, pct = key.partition("_")
            text = f"{metric.upper()} {pct} measured {ratio:.2f}x predicted at {run.load()}"
            if worst is None or abs(math.log(ratio)) > worst[0]:
                worst = (abs(math.log(ratio)), text)
    return worst[1] if worst else "no objective with a prediction to compare"


def _basis(measured: str | None) -> str:
    """What an allocation's figures rest on, in words: the packaged prior, or the level of the measurements."""
    if not measured:
        return "the packaged prior alone"
    # "calibrated on 2 measured load point(s) of 1 deployment(s) (this deployment, ...)": the level is the first
    # thing in the parentheses after the deployments counted.
    level = measured.partition("deployment(s) (")[2].partition(",")[0]
    return f"measurements of {level}" if level else "the measurements"


def changes(before: DeploymentPlan, new: DeploymentPlan | None, service: str, runs: list[Run]) -> list[str]:
    """One line per service whose deployment the new plan changes, and one for the measured service either way."""
    if new is None:
        return []
    olds = {s.name: s for s in before.spec.services}
    out = []
    for svc in new.spec.services:
        old = olds.get(svc.name)
        was, now = (_allocations(old) if old else "nothing"), _allocations(svc)
        if was == now and svc.name != service:
            continue
        cost = sum(a.cost_per_hour for a in svc.allocations) - (sum(a.cost_per_hour for a in old.allocations)
                                                                 if old else 0.0)
        why = _why(runs) if svc.name == service else "re-planned beside it"
        basis = sorted({_basis(a.measured) for a in svc.allocations})
        if was == now:
            out.append(f"{svc.name}: unchanged ({now}): {why}")
        else:
            out.append(f"{svc.name}: {was} -> {now}, {'+' if cost >= 0 else '-'}${abs(cost):,.2f}/h: {why}; "
                       f"its figures rest on {' and '.join(basis)}")
    return out


__all__ = ["MAX_FAILED", "Run", "changes", "plan_loads"]
