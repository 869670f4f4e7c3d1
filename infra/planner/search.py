"""The search for every service's replica shapes: plain services and each model stage of a pipeline (expanded
into units) scored as candidates, the other stages by their own models, dominated shapes pruned, and stages to
co-locate bundled, a run whose shapes fit no node together searched again apart."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from infra.intent.resolve import ResolvedIntent, ResolvedService
from infra.planner.candidates import (
    Candidate,
    Considered,
    Corrections,
    enumerate_candidates,
    prune_dominated,
)
from infra.planner.colocate import bundles
from infra.planner.pipeline import Unit, expand, group_name, groups, stage_candidates


def search(resolved: ResolvedIntent, slo_scale: float = 1.0, progress: Callable[[int, int], None] | None = None,
           corrections: Corrections | None = None) -> tuple[list[Candidate], list[Considered], list[ResolvedService],
                                                            dict[str, list[Unit]]]:
    """Candidates of every service and pipeline stage (pipelines expanded into units), what was considered, the
    services searched (LLM stages as services of their own) and the pipelines' units. Stages to co-locate come as
    bundles (`infra.planner.colocate`); a run of them whose shapes fit no node together is searched again apart,
    its budgets split with the network hand-off."""
    return _search(resolved, slo_scale, progress, corrections, frozenset())


def _search(resolved: ResolvedIntent, slo_scale: float, progress: Callable[[int, int], None] | None,
            corrections: Corrections | None, apart: frozenset[str]) -> tuple[list[Candidate], list[Considered],
                                                                               list[ResolvedService],
                                                                               dict[str, list[Unit]]]:
    services, pipelines = expand(resolved, apart)
    cands, seen = enumerate_candidates(resolved, slo_scale=slo_scale, progress=progress, services=services,
                                       corrections=corrections)
    extra: list[Candidate] = []
    for rs in resolved.services:
        for u in pipelines.get(rs.service.name, []):
            if u.stage.kind in ("llm", "cpu"):
                continue
            fix = corrections or Corrections()
            if slo_scale != 1.0 or fix.objective_scale.get(u.name):
                u = replace(u, first={p: v * slo_scale * fix.scale(u.name, "first_output", p)
                                      for p, v in u.first.items()},
                            full={p: v * slo_scale * fix.scale(u.name, "latency", p) for p, v in u.full.items()})
            cv = {"poisson": 1.0, "constant": 0.0, "gamma": rs.service.workload.arrival.cv or 1.0}[
                rs.service.workload.arrival.process]
            extra += stage_candidates(u, rs, resolved, cv, seen)
    kept, _ = prune_dominated(extra)
    bundled, failed = _bundled(cands + kept, pipelines, resolved)
    if failed:
        return _search(resolved, slo_scale, progress, corrections, apart | failed)
    return bundled, seen, services, pipelines


def _bundled(cands: list[Candidate], pipelines: dict[str, list[Unit]],
             resolved: ResolvedIntent) -> tuple[list[Candidate], frozenset[str]]:
    """Candidates with each co-located run's stages replaced by bundles of them, and the stages (that hand on)
    of the runs for which no bundle fits a node."""
    pools = {p.name: p for p in resolved.loaded.cluster.pools}
    failed: set[str] = set()
    for units in pipelines.values():
        for run in groups(units):
            names = {u.name for u in run}
            found = bundles(group_name(run), [[c for c in cands if c.service == u.name] for u in run], pools)
            if not found:
                failed.update(u.name for u in run if u.colocate)
                continue
            cands = [c for c in cands if c.service not in names] + found
    return cands, frozenset(failed)
