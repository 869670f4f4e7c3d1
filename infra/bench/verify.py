"""Closed-loop verification of a plan: simulate it, and where an objective fails, correct and re-plan.

Each round simulates every service of the plan under its intent's peak workload (a plan for the goodput objective:
the share of the peak it serves) and judges each objective
(`infra.bench.verdict`). An objective that fails because the measured percentile ran over its target (queueing and
batching the analytic model smooths over) is tightened for scoring by target / measured, times `SAFETY`: shapes
are then sized so that their predicted value leaves the room the simulation showed was missing. The planner is
run again with those corrections (`infra.planner.candidates.Corrections`), for at most `MAX_ROUNDS` simulations;
a correction the inventory or budget cannot carry is retried at half strength. A service whose verdict is
inconclusive is simulated once more with `RETRY_FACTOR` times the requests. The plan kept is the first that does
not fail, else the one that missed least.
Failures that re-planning cannot fix stop the loop at once and say why: requests the engines reject (longer than
max_model_len or the KV cache), or a corrected intent with no feasible plan.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from infra.bench.pipeline import PipelineVerdict, judge_pipeline, simulate_pipeline
from infra.bench.run import simulate_service
from infra.bench.verdict import BEYOND, Verdict
from infra.errors import InfeasibleError, IntentError
from infra.planner.candidates import Considered, Corrections
from infra.planner.types import DeploymentPlan, Verification

MAX_ROUNDS = 3
VERIFY_REQUESTS = 2000
"""Requests per service and round: enough to judge p99 objectives, and a fraction of a second to simulate."""
RETRY_FACTOR = 4
"""An inconclusive service is simulated once more with this many times the requests (halving its interval)."""
SAFETY = 0.95
"""Extra tightening on top of target / measured, so the next plan does not land on the edge again."""


def _r(x: float | None, nd: int = 4) -> float | None:
    if x is None or math.isinf(x) or math.isnan(x):
        return None
    return float(f"{x:.{nd}g}")


def _service_entry(name: str, verdict: Verdict, notes: list[str]) -> dict[str, Any]:
    objectives = []
    for o in verdict.objectives:
        entry = {
            "key": o.key, "target_ms": o.target_ms, "predicted_ms": _r(o.predicted_ms),
            "measured_ms": _r(o.measured_ms),
            "ci_ms": None if o.ci_ms is None else [_r(o.ci_ms[0]), _r(o.ci_ms[1])],
            "n": o.n, "verdict": o.verdict, "reason": o.reason}
        # A null that stands for infinity says so (failed requests count as infinitely slow).
        if o.measured_ms is not None and not math.isfinite(o.measured_ms):
            entry["measured_ms_note"] = BEYOND
        if o.ci_ms is not None and not all(math.isfinite(x) for x in o.ci_ms):
            entry["ci_ms_note"] = "failed requests, counted as infinitely slow, reach the interval"
        objectives.append(entry)
    return {"service": name, "verdict": verdict.overall, "objectives": objectives,
            "attainment": _r(verdict.attainment), "goodput_rps": _r(verdict.goodput_rps), "failed": verdict.failed,
            **({"attainment_target": verdict.attainment_target,
                "attainment_ci": [_r(verdict.attainment_ci[0]), _r(verdict.attainment_ci[1])],
                "attainment_verdict": verdict.attainment_verdict} if verdict.attainment_verdict else {}),
            "notes": notes}


def _corrections(verdicts: dict[str, Verdict], before: Corrections, plan: DeploymentPlan | None = None,
                 pipes: dict[str, PipelineVerdict] | None = None) -> tuple[Corrections, list[dict[str, Any]],
                                                                          str | None]:
    """(corrections for the next round, what changed, why no correction can help, if so). A pipeline objective
    that fails while its stages meet their budgets (queues and bubbles between stages) tightens the matching
    budget of every stage on its path by the same ratio."""
    scale = {s: dict(v) for s, v in before.objective_scale.items()}
    changed = []
    for name, verdict in sorted(verdicts.items()):
        if verdict.failed:
            return before, [], (f"service {name}: {verdict.failed} of {verdict.requests} requests failed in the "
                                f"engines ({'; '.join(verdict.notes)}); re-planning cannot fix that")
        failing = [o for o in verdict.objectives if o.verdict == "fail" and o.measured_ms]
        if not failing and verdict.attainment_verdict == "fail" and plan is not None:
            # Each metric's tail met what was asked of it, yet too few requests met all their bounds at once (the
            # metrics miss together less often than the union bound allows only when they are independent):
            # hold every attainment objective below what was just measured.
            held = next((s.attainment_objectives for s in plan.spec.services if s.name == name), {})
            failing = [o for o in verdict.objectives if o.key in held and o.measured_ms]
        for o in failing:
            assert o.measured_ms
            old = scale.get(name, {}).get(o.key, 1.0)
            # The plan was scored to predict at most target x old; the run measured more. Scored again, its
            # prediction must stay under what this one predicted, scaled by how far the measurement ran over it
            # (a prediction with room under its target would otherwise pass the tightened target unchanged).
            over = o.predicted_ms / (o.measured_ms * old) if o.predicted_ms else 1.0
            new = old * min(o.target_ms / o.measured_ms, 1.0, over) * SAFETY
            scale.setdefault(name, {})[o.key] = new
            ratio = o.measured_ms / o.predicted_ms if o.predicted_ms else None
            changed.append({"service": name, "objective": o.key, "scale": _r(new, 3),
                            "measured_over_predicted": _r(ratio, 3)})
    for name, pv in sorted((pipes or {}).items()):
        assert plan is not None
        pipe = next(p for p in plan.spec.pipelines if p.service == name)
        for o in pv.objectives:
            if o.verdict != "fail" or not o.measured_ms:
                continue
            metric, _, pct = o.key.rpartition("_")
            path = pipe.stages
            if metric.endswith("_first_output"):
                stage = metric[: -len("_first_output")]
                path = pipe.stages[: next(i for i, st in enumerate(pipe.stages) if st.name == stage) + 1]
            for st in path:
                if st.unit is None:
                    continue
                keys = verdicts[st.unit].objectives if st.unit in verdicts else []
                wanted = {"ttft": ("ttft", "first_output"), "e2e": ("e2e", "latency")}.get(
                    metric, ("ttft", "first_output"))
                for ok in keys:
                    m, _, p = ok.key.rpartition("_")
                    if m not in wanted or p != pct or any(c["service"] == st.unit and c["objective"] == ok.key
                                                          for c in changed):
                        continue
                    new = scale.get(st.unit, {}).get(ok.key, 1.0) * o.target_ms / o.measured_ms * SAFETY
                    scale.setdefault(st.unit, {})[ok.key] = new
                    changed.append({"service": st.unit, "objective": ok.key, "scale": _r(new, 3),
                                    "measured_over_predicted": None})
    return Corrections(scale), changed, None


def _halfway(before: Corrections, after: Corrections,
             changed: list[dict[str, Any]]) -> tuple[Corrections, list[dict[str, Any]]]:
    """Corrections half-way (geometrically) from `before` to `after`."""
    scale = {s: dict(v) for s, v in after.objective_scale.items()}
    for svc, keys in scale.items():
        for key, new in keys.items():
            old = before.scale(svc, *key.split("_", 1))
            keys[key] = math.sqrt(old * new)
    return Corrections(scale), [{**c, "scale": _r(scale[c["service"]][c["objective"]], 3)} for c in changed]


def _run_pipeline(plan: DeploymentPlan, pipe: Any, *, requests: int, seed: int, intent: str,
                  catalog: Any) -> tuple[PipelineVerdict, list[str]]:
    """Simulate and judge one pipeline at its served load; once more with more requests if inconclusive."""
    first = next(s for s in plan.spec.services if s.pipeline == pipe.service)
    load = _served_load(first)
    notes: list[str] = []
    for n in (requests, requests * RETRY_FACTOR):
        run = simulate_pipeline(plan, pipe.service, requests=n, seed=seed, rate=load.get("rate"),
                                clients=load.get("concurrency"), intent=intent, catalog=catalog)
        pv = judge_pipeline(plan, run, seed=seed)
        if pv.overall != "inconclusive":
            break
        notes = [f"inconclusive at {requests} requests; judged on {requests * RETRY_FACTOR}"]
    pv.notes = notes + pv.notes
    return pv, notes


def _pipeline_entry(name: str, pv: PipelineVerdict) -> dict[str, Any]:
    objectives = [{"key": o.key, "target_ms": o.target_ms, "predicted_ms": _r(o.predicted_ms),
                   "measured_ms": _r(o.measured_ms),
                   "ci_ms": None if o.ci_ms is None else [_r(o.ci_ms[0]), _r(o.ci_ms[1])],
                   "n": o.n, "verdict": o.verdict, "reason": o.reason} for o in pv.objectives]
    return {"service": name, "verdict": pv.overall, "objectives": objectives, "failed": pv.failed,
            "stages": pv.stages, "notes": pv.notes}


def _served_load(svc: Any) -> dict[str, Any]:
    """The load to verify at: the peak, or the share of it a goodput plan carries within the objectives."""
    if svc.served >= 1:
        return {}
    if svc.demand.unit == "clients":
        return {"concurrency": max(1, math.floor(svc.demand.value * svc.served))}
    return {"rate": svc.demand.value * svc.served}


def _overall(verdicts: dict[str, Verdict], pipes: dict[str, PipelineVerdict]) -> str:
    outcomes = {v.overall for v in verdicts.values()} | {p.overall for p in pipes.values()}
    return "fail" if "fail" in outcomes else "inconclusive" if "inconclusive" in outcomes else "pass"


def _miss(verdicts: dict[str, Verdict], pipes: dict[str, PipelineVerdict]) -> tuple[int, int, float]:
    """How badly a round missed: (objectives failed, requests failed, worst measured / target); smaller is
    better."""
    fails = [o for v in verdicts.values() for o in v.objectives if o.verdict == "fail"]
    fails += [o for p in pipes.values() for o in p.objectives if o.verdict == "fail"]
    worst = max((o.measured_ms / o.target_ms if o.measured_ms else math.inf for o in fails), default=0.0)
    return len(fails), sum(v.failed for v in verdicts.values()), worst


Replan = Callable[[Corrections], tuple[DeploymentPlan, list[Considered]]]
"""Plans the intent again with corrections of its objectives (raises InfeasibleError)."""


def verify_plan(first: DeploymentPlan, replan: Replan, *, intent: str, catalog: Any = None,
                requests: int = VERIFY_REQUESTS, seed: int = 0, max_rounds: int = MAX_ROUNDS, calibration: Any = None
                ) -> tuple[DeploymentPlan, list[Considered] | None, Verification]:
    """Verify a plan, re-planning with `replan(corrections)` while objectives fail. Returns the plan kept (the
    first that passes, else the round that missed least) with its `verification` section, what `replan` returned
    beside that plan (None for the first one), and the section."""
    rounds: list[dict[str, Any]] = []
    corrections = Corrections()
    current: tuple[DeploymentPlan, list[Considered] | None] = (first, None)
    tried: list[tuple[tuple[int, int, float], int, tuple[DeploymentPlan, list[Considered] | None]]] = []
    for n in range(1, max_rounds + 1):
        plan = current[0]
        verdicts: dict[str, Verdict] = {}
        entries = []
        skipped = []
        pipes: dict[str, Any] = {}
        for pipe in plan.spec.pipelines:
            try:
                pv, notes = _run_pipeline(plan, pipe, requests=requests, seed=seed, intent=intent, catalog=catalog)
            except IntentError as exc:
                skipped.append(f"{pipe.service}: not simulated end to end: {exc.problems[0].message}; its LLM "
                               "stages are simulated on their own")
                continue
            pipes[pipe.service] = pv
            for unit, verdict in pv.units.items():
                verdicts[unit] = verdict
                entries.append(_service_entry(unit, verdict, [f"measured inside pipeline {pipe.service}"]))
        for svc in plan.spec.services:
            if svc.pipeline in pipes:
                continue
            if not svc.runs_llm_engine:
                skipped.append(f"{svc.name}: a stage of kind {svc.kind} of a pipeline not simulated end to end; "
                               "its latency is the stage model's prediction")
                continue
            load = _served_load(svc)
            result = simulate_service(plan, service=svc.name, requests=requests, seed=seed, intent=intent,
                                      catalog=catalog, calibration=calibration, **load)
            notes = list(result.notes or [])
            if result.verdict.overall == "inconclusive":
                # Too few samples or a target inside the interval: more requests narrow it, once.
                result = simulate_service(plan, service=svc.name, requests=requests * RETRY_FACTOR, seed=seed,
                                          intent=intent, catalog=catalog, calibration=calibration, **load)
                notes = [f"inconclusive at {requests} requests; judged on {requests * RETRY_FACTOR}",
                         *(result.notes or [])]
            verdicts[svc.name] = result.verdict
            entries.append(_service_entry(svc.name, result.verdict, notes))
        entry: dict[str, Any] = {"round": n, "verdict": _overall(verdicts, pipes), "services": entries,
                                 **({"pipelines": [_pipeline_entry(k, v) for k, v in pipes.items()]} if pipes else {}),
                                 **({"skipped": skipped} if skipped else {})}
        rounds.append(entry)
        tried.append((_miss(verdicts, pipes), n, current))
        if entry["verdict"] != "fail":
            break
        if n == max_rounds:
            entry["outcome"] = f"objectives still fail after {max_rounds} rounds"
            break
        previous = corrections
        corrections, changed, stuck = _corrections(verdicts, corrections, plan, pipes)
        if stuck is not None:
            entry["outcome"] = stuck
            break
        try:
            current = replan(corrections)
        except InfeasibleError:
            # The full correction may ask more than the inventory or budget allows; half of it (in log terms)
            # may still be enough, and the next round will tell.
            corrections, changed = _halfway(previous, corrections, changed)
            try:
                current = replan(corrections)
            except InfeasibleError as exc:
                entry["corrections"] = changed
                entry["outcome"] = (f"re-planning is infeasible with the full corrections and with these, half of "
                                    f"them ({exc.problems[0].message})")
                break
        entry["corrections"] = changed
    # The last round's plan if it did not fail; otherwise the one that missed least (earliest on a tie).
    _, kept, (final, extra) = tried[-1] if rounds[-1]["verdict"] != "fail" else min(tried, key=lambda t: t[:2])
    section = Verification.model_validate({"method": "simulation", "seed": seed, "requests": requests,
                                           "plan_round": kept, "verdict": rounds[kept - 1]["verdict"],
                                           "rounds": rounds})
    return final.with_spec(verification=section), extra, section


__all__ = ["MAX_ROUNDS", "SAFETY", "VERIFY_REQUESTS", "Replan", "verify_plan"]
