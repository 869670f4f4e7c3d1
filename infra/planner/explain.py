"""Why an intent has no plan, and what to relax: each objective loosened alone, the budget and the devices a
plan would need, a lower confidence, every part of the solver's conflict in words, and the shapes the search
refused, each relaxation solved for real."""

from __future__ import annotations

import dataclasses
import math

from infra.errors import Location, Problem
from infra.intent.models import Service
from infra.intent.resolve import ResolvedIntent
from infra.planner.candidates import (
    DOMINATED,
    NO_IMAGE,
    Candidate,
    Considered,
    Corrections,
    millis,
)
from infra.planner.search import search
from infra.planner.solve import Limits, Solution, solve

SLO_STEPS = (1.25, 1.5, 2.0, 3.0, 5.0, 10.0, 20.0, 50.0)
"""How far objectives are loosened, in turn, to find the smallest relaxation that makes an intent feasible."""


def _span(seconds: float) -> str:
    """A target as an intent writes it: `450ms`, `7.5s`."""
    return f"{seconds * 1000:.0f}ms" if seconds < 1 else f"{seconds:.3g}s"


STAGE_METRICS = {"e2e": "latency", "ttft": "first_output"}
"""The names a pipeline stage's budgets give the service's objectives: its whole latency, its first output."""


def _only(resolved: ResolvedIntent, service: str) -> ResolvedIntent:
    """The intent with `service` alone: what a search for that service's candidates needs (each service's shapes
    are scored on their own; the solve that checks a relaxation takes the others' candidates as they were)."""
    return dataclasses.replace(resolved, services=[r for r in resolved.services if r.service.name == service])


def _loosen_alone(resolved: ResolvedIntent, service: str, svc: Service, cands: list[Candidate], limits: Limits,
                  considered: list[Considered]) -> list[str]:
    """For each objective of `svc` on its own, the smallest step of SLO_STEPS that makes the intent feasible
    with every other objective and limit as written, checked by a search and a solve (feasibility only grows with
    the step, so a bisection over the steps); a pipeline's objective moves every stage's budget with it. Where
    shapes of `service` (the service or the stage in conflict) miss objectives even at their lightest load, only
    those the closest shape misses are tried: loosening any other cannot bring it in."""
    units = sorted(u for u in limits.demand if limits.parent.get(u, u) == svc.name)
    others = [c for c in cands if c.service not in units]
    closest = _closest(considered, service)
    missed = {k for k, _, _ in closest.misses} if closest else set()
    out = []
    for metric, pct, target in svc.slo.targets():
        keys = frozenset({f"{metric}_{pct}", f"{STAGE_METRICS.get(metric, metric)}_{pct}"})
        if missed and not keys & missed:
            continue

        def cost_at(scale: float, keys: frozenset[str] = keys) -> float | None:
            fix = Corrections({u: {k: scale for k in sorted(keys)} for u in units})
            mine = [c for c in search(_only(resolved, svc.name), corrections=fix)[0] if c.service in units]
            trial = solve(others + mine, limits, time_limit_s=5.0) if mine else None
            return trial.cost_per_hour if trial and trial.status in ("OPTIMAL", "FEASIBLE") else None

        lo, hi = -1, len(SLO_STEPS) - 1
        cost = cost_at(SLO_STEPS[hi])
        if cost is None:
            continue
        while hi - lo > 1:
            mid = (lo + hi) // 2
            trial_cost = cost_at(SLO_STEPS[mid])
            if trial_cost is None:
                lo = mid
            else:
                hi, cost = mid, trial_cost
        # Then between the two steps, to a target as one would write it (two significant figures, rounded up).
        below, scale = (SLO_STEPS[lo] if lo >= 0 else 1.0), SLO_STEPS[hi]
        for _ in range(3):
            mid = _round_up(target * math.sqrt(below * scale)) / target
            if not below < mid < scale:
                break
            trial_cost = cost_at(mid)
            if trial_cost is None:
                below = mid
            else:
                scale, cost = mid, trial_cost
        out.append(f"feasible with service {svc.name}'s {metric} {pct} at {_span(target * scale)} instead of "
                   f"{_span(target)}, the other objectives as written (${cost:.2f}/h)")
    return out


def _round_up(seconds: float) -> float:
    """Up to two significant figures: 0.2345 -> 0.24."""
    step = 10 ** (math.floor(math.log10(seconds)) - 1)
    return math.ceil(seconds / step - 1e-9) * step


def relaxations(resolved: ResolvedIntent, cands: list[Candidate], limits: Limits, core: list[str],
                 considered: list[Considered]) -> list[Problem]:
    """The cheapest change to each conflicting limit that makes the intent feasible, each checked by a solve and
    placed at the line it would change. For objectives: each one alone where loosening it alone is enough, else
    all of a service's together."""
    doc = resolved.loaded.document
    names = [r.service.name for r in resolved.services]
    out: list[Problem] = []
    unbounded = dataclasses.replace(limits, budget_hour={k: None for k in limits.budget_hour},
                                    total_budget_hour=None)
    free = solve(cands, unbounded, time_limit_s=5.0) if cands else None
    if any(k.startswith("budget:") for k in core) and free and free.status in ("OPTIMAL", "FEASIBLE"):
        if limits.total_budget_hour is not None and "budget:total" in core:
            fixed = sum(limits.fixed.values())
            out.append(Problem(f"feasible with a total budget of ${free.cost_per_hour + fixed:.2f}/h instead of "
                               f"${limits.total_budget_hour + fixed:.2f}/h",
                               doc.locate(("spec", "budget", "per_hour")),
                               f"set per_hour: ${free.cost_per_hour + fixed:.2f}/h"))
        for k in core:
            if k.startswith("budget:") and k != "budget:total":
                s = k.split(":", 1)[1]
                fixed = limits.fixed.get(s, 0.0)
                cost = fixed + sum(c.cost_per_hour * free.replicas.get(c.key, 0) for c in cands
                                   if limits.parent.get(c.service, c.service) == s)
                out.append(Problem(f"feasible with service {s}'s budget at ${cost:.2f}/h instead of "
                                   f"${(limits.budget_hour[s] or 0.0) + fixed:.2f}/h",
                                   doc.locate(("spec", "services", names.index(s), "budget")),
                                   f"allow ${cost:.2f}/h (per_hour, or the $/Mtok or $/request equivalent)"))
    if any(k.startswith(("pool:", "demand:", "zones:", "replicas:")) for k in core) and cands:
        grown = solve(cands, limits, extra_devices=_room(cands, limits), time_limit_s=5.0)
        if grown.status in ("OPTIMAL", "FEASIBLE"):
            need = {p: math.ceil(v) for p, v in grown.devices_by_pool(cands).items()}
            cdoc = resolved.loaded.cluster_document()
            for i, pool in enumerate(resolved.loaded.cluster.pools):
                n = need.get(pool.name, 0)
                if n > limits.pool_devices[pool.name]:
                    dev = resolved.pools[pool.name].name
                    out.append(Problem(f"feasible with {n - limits.pool_devices[pool.name]} more {dev} in pool "
                                       f"{pool.name} (${grown.cost_per_hour:.2f}/h in all)",
                                       cdoc.locate(resolved.loaded.cluster_path() + ("pools", i, "nodes")),
                                       f"add nodes to pool {pool.name}"))
    for s in sorted(limits.demand):
        if f"demand:{s}" in core or not any(c.service == s for c in cands):
            owner = limits.parent.get(s, s)
            svc = next(r.service for r in resolved.services if r.service.name == owner)
            where = doc.locate(("spec", "services", names.index(owner), "slo"))
            alone = _loosen_alone(resolved, s, svc, cands, limits, considered)
            if alone:
                out += [Problem(text, where, "loosen that objective; each line alone is enough") for text in alone]
                continue
            fallback: Problem | None = None
            for scale in SLO_STEPS:
                relaxed = search(_only(resolved, owner), slo_scale=scale)[0]
                relaxed = [c for c in relaxed if c.service == s]
                if not relaxed:
                    continue
                parts = "; ".join(f"{m} {p} {_span(v * scale)} instead of {_span(v)}" for m, p, v in svc.slo.targets())
                # Checked jointly: the other services keep their candidates and every limit stays as written.
                pool = [c for c in cands if c.service != s] + relaxed
                trial = solve(pool, limits, time_limit_s=5.0)
                if trial.status in ("OPTIMAL", "FEASIBLE"):
                    out.append(Problem(f"feasible with service {s}'s objectives loosened x{scale:g}: {parts} "
                                       f"(${trial.cost_per_hour:.2f}/h)", where,
                                       "loosen the objectives that matter least to users"))
                    fallback = None
                    break
                if fallback is None:
                    paid = solve(pool, unbounded, extra_devices=_room(pool, limits), time_limit_s=5.0)
                    if paid.status in ("OPTIMAL", "FEASIBLE"):
                        more = _extra_devices(resolved, pool, paid, limits)
                        fallback = Problem(f"feasible with service {s}'s objectives loosened x{scale:g}: {parts}; "
                                           + (f"{more}; " if more else "")
                                           + f"and a budget of ${paid.cost_per_hour:.2f}/h", where,
                                           "loosen the objectives, add the devices and raise the budget together")
            if fallback is not None:
                out.append(fallback)
    out += _lower_confidence(resolved, cands, limits)
    return out


ATTAINMENT_LEVELS = (0.9995, 0.999, 0.995, 0.99, 0.98, 0.95, 0.9)
"""The attainments tried in turn, below the one asked, to find the highest at which an infeasible intent fits: the
levels service objectives are written at, so 99.99% is offered 99.95% or 99.9% before 99.5%."""


def _lower_confidence(resolved: ResolvedIntent, cands: list[Candidate], limits: Limits) -> list[Problem]:
    """For each service planned at a confidence or an attainment: the highest one (confidence in steps of 5%,
    attainment at `ATTAINMENT_LEVELS`, down to none) at which the intent is feasible with every other limit as
    written, checked by a solve."""
    doc = resolved.loaded.document
    out: list[Problem] = []
    for i, rs in enumerate(resolved.services):
        name = rs.service.name
        for field in ("confidence", "attainment"):
            asked = getattr(rs.service.slo, field)
            if asked is None:
                continue
            steps: list[float | None] = (
                [k / 100 for k in range(round(asked * 100) - 5, 49, -5)] if field == "confidence"
                else [level for level in ATTAINMENT_LEVELS if level < asked])
            for lower in steps + [None]:
                svc = rs.service.model_copy(update={"slo": rs.service.slo.model_copy(update={field: lower})})
                trial_intent = dataclasses.replace(resolved, services=[
                    dataclasses.replace(r, service=svc) if r is rs else r for r in resolved.services])
                mine = [c for c in search(_only(trial_intent, name))[0]
                        if limits.parent.get(c.service, c.service) == name]
                others = [c for c in cands if limits.parent.get(c.service, c.service) != name]
                trial = solve(others + mine, limits, time_limit_s=5.0)
                if trial.status not in ("OPTIMAL", "FEASIBLE"):
                    continue
                if field == "confidence":
                    at = f"{lower:.0%} confidence" if lower is not None else "the bare predictions (no confidence)"
                    what = f"objectives planned at {at} instead of {asked:.0%}"
                else:
                    at = _share(lower) if lower is not None else "none (each percentile on its own)"
                    what = f"attainment at {at} instead of {_share(asked)}"
                out.append(Problem(f"feasible with service {name}'s {what} (${trial.cost_per_hour:.2f}/h)",
                                   doc.locate(("spec", "services", i, "slo", field)),
                                   f"set {field}: {lower:.0%}" if lower is not None and field == "confidence" else
                                   f"set {field}: {_share(lower)}" if lower is not None else f"remove {field}"))
                break
    return out


def _share(fraction: float) -> str:
    """A share as the intent writes it, to the digits it has: 99.5%, 99.99%."""
    return f"{round(fraction * 100, 6):g}%"


def _room(cands: list[Candidate], limits: Limits) -> dict[str, int]:
    """Devices to add to each pool so that any one candidate alone could carry its service's whole demand."""
    room: dict[str, int] = {}
    for c in cands:
        need = math.ceil((math.ceil(limits.demand[c.service] / c.capacity) + limits.min_replicas[c.service])
                         * c.consumption)
        for p in c.pools:
            room[p] = min(max(room.get(p, 0), need), 1_000_000)
    return room


def _extra_devices(resolved: ResolvedIntent, cands: list[Candidate], sol: Solution, limits: Limits) -> str:
    need = {p: math.ceil(v) for p, v in sol.devices_by_pool(cands).items()}
    return ", ".join(f"{n - limits.pool_devices[p]} more {resolved.pools[p].name} in pool {p}"
                     for p, n in sorted(need.items()) if n > limits.pool_devices[p])


_CORE_WORDS = {
    "demand": ("serve {v}", ("workload", "rate")),
    "budget": ("stay within its budget", ("budget",)),
    "replicas": ("keep its minimum replicas", ("availability", "min_replicas")),
    "zones": ("spread across its zones", ("availability", "zones")),
}


def core_problems(resolved: ResolvedIntent, core: list[str], relax: list[Problem], cands: list[Candidate],
                   considered: list[Considered], limits: Limits) -> list[Problem]:
    doc = resolved.loaded.document
    names = [r.service.name for r in resolved.services]
    problems = []
    fix = ("relax one of them as the 'feasible with' lines below say" if relax
           else "loosen the objectives, raise the budget or add devices")
    for item in core:
        kind, _, target = item.partition(":")
        if kind == "pool":
            cdoc = resolved.loaded.cluster_document()
            idx = next(i for i, p in enumerate(resolved.loaded.cluster.pools) if p.name == target)
            loc = cdoc.locate(resolved.loaded.cluster_path() + ("pools", idx, "nodes"))
            problems.append(Problem(f"pool {target} has too few devices for what the services need", loc, fix))
        elif kind == "budget" and target == "total":
            problems.append(Problem("the total budget is too small", doc.locate(("spec", "budget", "per_hour")), fix))
        elif limits.parent.get(target, target) in names:
            owner = limits.parent.get(target, target)
            si = names.index(owner)
            svc = resolved.services[si].service
            words, path = _CORE_WORDS.get(kind, (kind, ()))
            if target != owner:
                stage = target[len(owner) + 1:].split("+")[0]  # a co-located run is named by its first stage
                if kind == "demand" and not any(c.service == target for c in cands):
                    ti = next(i for i, st in enumerate(svc.pipeline or []) if st.name == stage)
                    where = doc.locate(("spec", "services", si, "pipeline", ti))
                    refused = _refused(resolved, considered, f"{owner}-{stage}", f"stage {stage} of service {owner}")
                    if refused is not None:
                        problems.append(_refusal(resolved, refused, where))
                        continue
                    problems.append(Problem(
                        f"no replica shape of stage {stage} of service {owner} meets its share of the objectives "
                        f"at any load ({sum(1 for c in considered if c.service == f'{owner}-{stage}')} shapes "
                        "tried; with -o DIR, DIR/report.md lists each and why)", where, fix))
                    continue
                target = f"{owner} (stage {stage})"
            elif kind == "demand" and not any(c.service == target for c in cands):
                refused = _refused(resolved, considered, target, f"service {target}")
                if refused is not None:
                    problems.append(_refusal(resolved, refused, doc.locate(("spec", "services", si, "model"))))
                    continue
                tried = sum(1 for c in considered if c.service == target)
                problems.append(Problem(f"no replica shape of service {target} meets its objectives at any load "
                                        f"({tried} shapes tried; with -o DIR, DIR/report.md lists each and why)"
                                        f"{_closest_miss(considered, target)}",
                                        doc.locate(("spec", "services", si, "slo")), fix))
                continue
            if kind == "demand":
                wl = svc.workload
                what = f"{wl.rate.peak_rps:g} requests/s" if wl.rate is not None else f"{wl.concurrency} clients"
                words = words.format(v=what) + " within its objectives"
                path = ("workload", "rate") if wl.rate is not None else ("workload", "concurrency")
            problems.append(Problem(f"service {target} cannot {words} together with the other constraints",
                                    doc.locate(("spec", "services", si) + path), fix))
    return problems


REFUSALS_SHOWN = 3
"""Distinct refusal reasons a headline names before it points at the report for the rest."""


def _refused(resolved: ResolvedIntent, considered: list[Considered], service: str,
             label: str) -> tuple[str, str, str | None] | None:
    """(message, fix, pool) when no shape of a service (or pipeline stage) got as far as its objectives: each was
    refused for what it is (no released image, a model that does not fit, a quirk of the device, a model no
    catalog holds). Those reasons are then the whole story, and loosening the objectives cannot help; `pool` names
    the first pool of the profile at fault when the cause is the device's (no image), else None. None when any
    shape was weighed against the objectives."""
    mine = [c for c in considered if c.service == service]
    if not mine or any(c.misses or c.outcome in ("candidate", DOMINATED) for c in mine):
        return None
    count: dict[str, int] = {}
    for c in mine:
        count[c.outcome] = count.get(c.outcome, 0) + 1
    reasons = sorted(count, key=lambda r: (-count[r], r))
    shown = "; ".join(f"{r} ({count[r]} shape{'s' if count[r] > 1 else ''})" for r in reasons[:REFUSALS_SHOWN])
    if len(reasons) > REFUSALS_SHOWN:
        shown += f"; and {len(reasons) - REFUSALS_SHOWN} other reason(s) (with -o DIR, DIR/report.md lists each)"
    if all(NO_IMAGE in r for r in reasons):
        # One cause: no engine allowed on these devices has a released image to roll out. Said per device, with
        # the catalog's reason where it marks the device unplannable.
        engines: dict[str, list[str]] = {}
        specs = {}
        for c in mine:
            dev = resolved.pools.get(c.pool)
            if dev is not None:
                specs[dev.name] = dev
                fws = engines.setdefault(dev.name, [])
                fws += [] if c.framework in fws else [c.framework]
        parts = []
        for name, fws in sorted(engines.items()):
            why = specs[name].unplannable
            parts.append(f"no engine allowed on {name} has an image pinned to a release ({', '.join(sorted(fws))})"
                         + (f": {why.reason} ({why.source})" if why is not None else ""))
        example = min(engines) if engines else "<device>"
        return (f"{label} cannot be deployed: {'; '.join(parts)}",
                f"pin an engine image for {', '.join(sorted(engines)) or 'the device'} in a --catalog overlay "
                f"(frameworks/<framework>.yaml: `images: {{{example}: <registry>/<image>:<tag>}}`), or allow a pool "
                "whose device has one (`infra catalog frameworks`); loosening the objectives cannot help",
                next((p.name for p in resolved.loaded.cluster.pools if p.name in {c.pool for c in mine}), None))
    head = (f"every replica shape of {label} was refused for one reason: {shown}" if len(reasons) == 1 else
            f"every replica shape of {label} was refused before its objectives were weighed: {shown}")
    fix = ("remove what each reason names (allow a device, precision or framework that can serve the model, or give "
           "a model the catalog or its config.json describes); loosening the objectives cannot help, no shape got as "
           "far as them")
    return head, fix, None


def _refusal(resolved: ResolvedIntent, refused: tuple[str, str, str | None], where: Location) -> Problem:
    """A refusal placed at the pool whose device is at fault (its `device` line in the profile), else `where`."""
    message, fix, pool = refused
    if pool is not None:
        idx = next(i for i, p in enumerate(resolved.loaded.cluster.pools) if p.name == pool)
        where = resolved.loaded.cluster_document().locate(resolved.loaded.cluster_path() + ("pools", idx, "device"))
    return Problem(message, where, fix)


def _closest(considered: list[Considered], service: str) -> Considered | None:
    """Of a service's shapes that miss its objectives even at their lightest load, the one whose worst miss
    (prediction over target) is smallest."""
    near = [c for c in considered if c.service == service and c.misses]
    return min(near, key=lambda c: max(math.inf if v is None else v / t for _, v, t in c.misses)) if near else None


def _closest_miss(considered: list[Considered], service: str) -> str:
    """What the shape that came closest to a service's objectives predicts for them at its lightest load: how far
    the objectives would have to move for any shape to serve it."""
    best = _closest(considered, service)
    if best is None:
        return ""
    what = ", ".join(f"{k} {millis(v)} against {millis(t)}" for k, v, t in best.misses if v is not None)
    if not what:
        return ""
    return (f"; the closest, {best.parallel} with {best.framework} {best.precision} on pool {best.pool}, predicts "
            f"{what} at its lightest load")
