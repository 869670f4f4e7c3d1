"""Fit a user's calibration (`infra.perf.correction`) to measured load points of their deployments.

Each point is replayed through the model with the packaged factors (the prior) and with its engine step stretched
by a quarter, which says how its TPOT and TTFT respond to the step correction (their elasticities: about 1 in a
closed loop, more in an open one, where a slower step also grows the batch). The corrections are then found top
down, in log space:

1. the step multiplier: each point's TPOT miss over its elasticity is the step change it asks for; a level's value
   is its parent's plus `n / (n + EVIDENCE[level])` of the difference its evidence makes (the median over each
   deployment's points, averaged over the deployments), `n` counting distinct deployments (points at the
   deployment level), so each deployment's load sweep counts once above it;
2. the TTFT multiplier the same way, on the TTFT miss left once the level's own step multiplier is applied.

The device level is shrunk towards the prior (no correction). A single measured point moves the device half
way, and its own deployment 97% of the way; a model measured on many deployments pins its own level and leaves
the device's to what they share.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from infra.catalog.loader import Catalog
from infra.perf.calibration import Factors, lookup, table
from infra.perf.correction import (
    LEVELS,
    STEP_BOUNDS,
    WORKLOAD_MATCH,
    CalibrationFile,
    Node,
    level_keys,
    match,
    scaled,
)
from infra.perf.rows import Case, compiled

EVIDENCE = {"device": 1.0, "framework": 1.0, "model": 1.0, "deployment": 0.25}
"""Pseudo-count of each level's pull towards the level above: the deployments (points, at the deployment level)
a level needs before its own evidence outweighs its parent's. The deployment level trusts its own points most:
within a load sweep the prior's shape holds to about 13% TTFT and 5% TPOT, so one point already says most of what
the level is; across deployments, layouts and models the level carries over less."""
PROBE = 1.25
"""Step multiplier the elasticities are measured at."""
ELASTICITY = {"tpot": (0.3, 4.0), "ttft": (0.0, 6.0)}
"""Bounds of the measured elasticities: past them a point sits at the edge of saturation, where the response to a
small change says nothing about a large one."""


@dataclass(frozen=True)
class Measured:
    """One measured load point of a known deployment."""

    case: Case
    source: str
    """File and place in it."""
    date: str | None = None


@dataclass
class Row:
    """A measured point prepared for fitting."""

    m: Measured
    run: Callable[[float], tuple[float, float]]
    """(TTFT ms, TPOT ms) at a step multiplier."""
    prior: tuple[float, float]
    e_tpot: float
    e_ttft: float
    keys: dict[str, str]
    """Key of each level; the deployment level's with its workload (`@isl/osl`)."""


def runner(case: Case, catalog: Catalog, base: Callable[[Case], Factors] | None = None
           ) -> Callable[[float], tuple[float, float]] | str:
    """Predictions of a measured case with a step multiplier on the packaged factors (or on `base(case)`: a
    benchmark's prior fitted without the case's model), or why there are none."""
    run = compiled(case, catalog)
    if isinstance(run, str):
        return run
    dep = case.deployment
    factors = base(case) if base else lookup(dep.framework, catalog.device(dep.device),
                                               catalog.framework(dep.framework).calibration_from).factors
    return lambda step: run(scaled(factors, step))


def _clamp(value: float, bounds: tuple[float, float]) -> float:
    return min(max(value, bounds[0]), bounds[1])


def prepare(points: Sequence[Measured], catalog: Catalog, base: Callable[[Case], Factors] | None = None
            ) -> tuple[list[Row], list[tuple[str, str]]]:
    """Rows ready to fit, and (source, why) for each point the model cannot replay (`base` as in `runner`)."""
    rows: list[Row] = []
    skipped: list[tuple[str, str]] = []
    for m in points:
        run = runner(m.case, catalog, base)
        if isinstance(run, str):
            skipped.append((m.source, run))
            continue
        prior = run(1.0)
        if not all(math.isfinite(v) and v > 0 for v in prior):
            skipped.append((m.source, "the model predicts this load unsustainable for the deployment"))
            continue
        probe, up = PROBE, run(PROBE)
        if not all(math.isfinite(v) for v in up):
            probe, up = 1.05, run(1.05)
        if all(math.isfinite(v) and v > 0 for v in up):
            e_ttft = math.log(up[0] / prior[0]) / math.log(probe)
            e_tpot = math.log(up[1] / prior[1]) / math.log(probe)
        else:
            e_ttft, e_tpot = 1.0, 1.0
        rows.append(Row(m, run, prior, _clamp(e_tpot, ELASTICITY["tpot"]), _clamp(e_ttft, ELASTICITY["ttft"]), {}))
    _key_workloads(rows)
    return rows, skipped


def _key_workloads(rows: list[Row]) -> None:
    """Give every row its level keys; rows of one deployment whose mean lengths are within `WORKLOAD_MATCH` of a
    group's first row share that group's workload key (the geometric means of its lengths)."""
    groups: dict[str, list[list[Row]]] = {}
    for row in sorted(rows, key=lambda r: (level_keys(r.m.case.deployment)["deployment"], r.m.case.workload.isl,
                                           r.m.case.workload.osl, r.m.source)):
        keys = level_keys(row.m.case.deployment)
        row.keys = keys
        wl = row.m.case.workload
        for group in groups.setdefault(keys["deployment"], []):
            head = group[0].m.case.workload
            if (abs(math.log(wl.isl / head.isl)) <= math.log1p(WORKLOAD_MATCH)
                    and abs(math.log(wl.osl / head.osl)) <= math.log1p(WORKLOAD_MATCH)):
                group.append(row)
                break
        else:
            groups[keys["deployment"]].append([row])
    for dep_key, gs in groups.items():
        for group in gs:
            isl = math.exp(statistics.fmean(math.log(r.m.case.workload.isl) for r in group))
            osl = math.exp(statistics.fmean(math.log(r.m.case.workload.osl) for r in group))
            for r in group:
                r.keys = {**r.keys, "deployment": f"{dep_key}@{_num(isl)}/{_num(osl)}"}


def _num(value: float) -> str:
    return f"{value:.6g}"


def _dates(rows: list[Row]) -> tuple[str | None, str | None]:
    dates = sorted(r.m.date[:10] for r in rows if r.m.date)
    return (dates[0], dates[-1]) if dates else (None, None)


def fit(rows: list[Row]) -> list[Node]:
    """The correction of every level the rows reach."""
    if not rows:
        return []
    lo, hi = (math.log(b) for b in STEP_BOUNDS)

    def bound(x: float) -> float:
        return min(max(x, lo), hi)

    step: dict[tuple[str, str], tuple[float, float]] = {}

    def step_parent(r: Row, level: str) -> float:
        above = LEVELS[LEVELS.index(level) - 1]
        return step[(above, r.keys[above])][0]

    def step_residual(r: Row, level: str) -> float:
        return math.log(r.m.case.tpot_ms / r.prior[1]) / r.e_tpot

    step = _levels(rows, step_residual, step_parent, step, bound)

    ttft: dict[tuple[str, str], tuple[float, float]] = {}

    def ttft_parent(r: Row, level: str) -> float:
        above = LEVELS[LEVELS.index(level) - 1]
        return ttft[(above, r.keys[above])][0]

    def ttft_residual(r: Row, level: str) -> float:
        s = step[(level, r.keys[level])][0]
        return math.log(r.m.case.ttft_ms / r.prior[0]) - r.e_ttft * s

    ttft = _levels(rows, ttft_residual, ttft_parent, ttft, bound)
    groups: dict[tuple[str, str], list[Row]] = {}
    for r in rows:
        for level in LEVELS:
            groups.setdefault((level, r.keys[level]), []).append(r)
    nodes = []
    for (level, key), (value, weight) in sorted(step.items(), key=lambda kv: (LEVELS.index(kv[0][0]), kv[0][1])):
        members = groups[(level, key)]
        first, last = _dates(members)
        isl = osl = None
        if level == "deployment":
            isl_s, _, osl_s = key.rpartition("@")[2].partition("/")
            isl, osl = float(isl_s), float(osl_s)
        nodes.append(Node(level=level, key=key, step=_r(math.exp(value)), ttft=_r(math.exp(ttft[(level, key)][0])),
                          rows=len(members), deployments=len({r.keys["deployment"] for r in members}),
                          weight=_r(weight), isl=isl, osl=osl, first=first, last=last))
    return nodes


def _levels(rows: list[Row], residual: Callable[[Row, str], float], parent: Callable[[Row, str], float],
            into: dict[tuple[str, str], tuple[float, float]],
            bound: Callable[[float], float]) -> dict[tuple[str, str], tuple[float, float]]:
    """Fill `into` level by level (each level's parent read from it) and return it."""
    for level in LEVELS:
        by_key: dict[str, list[Row]] = {}
        for r in rows:
            by_key.setdefault(r.keys[level], []).append(r)
        for key, members in sorted(by_key.items()):
            base = parent(members[0], level) if level != LEVELS[0] else 0.0
            per_dep: dict[str, list[float]] = {}
            for r in members:
                per_dep.setdefault(r.keys["deployment"], []).append(residual(r, level))
            # A deployment's level is the median of its points (one run off its neighbours, a cold engine or a
            # saturated load, does not drag it), and a level above weighs each deployment once.
            n = len(members) if level == "deployment" else len(per_dep)
            mean = statistics.fmean(statistics.median(v) for v in per_dep.values())
            weight = n / (n + EVIDENCE[level])
            into[(level, key)] = (bound(base + weight * (mean - base)), weight)
    return into


def _r(value: float) -> float:
    return float(f"{value:.5g}")


def predict(row: Row, nodes: list[Node]) -> tuple[float, float]:
    """(TTFT ms, TPOT ms) of a row under the correction that matches it (the prior's where none does)."""
    node = match(nodes, row.m.case.deployment, row.m.case.workload)
    if node is None:
        return row.prior
    ttft, tpot = row.run(node.step)
    return ttft * node.ttft, tpot


def errors(pairs: list[tuple[Row, tuple[float, float]]]) -> dict[str, Any]:
    """Median and p90 absolute percentage error (fractions) of predicted mean TTFT and TPOT."""
    def stats(values: list[float]) -> tuple[float | None, float | None]:
        if not values:
            return None, None
        ordered = sorted(values)
        return (_r(statistics.median(ordered)),
                _r(ordered[min(len(ordered) - 1, int(round(0.9 * (len(ordered) - 1))))]))
    ok = [(r, p) for r, p in pairs if all(math.isfinite(v) and v > 0 for v in p)]
    t = stats([abs(p[0] - r.m.case.ttft_ms) / r.m.case.ttft_ms for r, p in ok])
    s = stats([abs(p[1] - r.m.case.tpot_ms) / r.m.case.tpot_ms for r, p in ok])
    return {"n": len(ok), "ttft_median_ape": t[0], "ttft_p90_ape": t[1], "tpot_median_ape": s[0],
            "tpot_p90_ape": s[1]}


def leave_one_out(rows: list[Row]) -> list[tuple[Row, tuple[float, float]]] | None:
    """Each deployment-and-workload's points predicted by corrections fitted without them; None with fewer than
    two such groups."""
    groups: dict[str, list[Row]] = {}
    devices: dict[str, list[Row]] = {}
    for r in rows:
        groups.setdefault(r.keys["deployment"], []).append(r)
        devices.setdefault(r.keys["device"], []).append(r)
    if len(groups) < 2:
        return None
    out = []
    for g, held in sorted(groups.items()):
        # Every level a point can match lies under its device, so the rows of other devices change nothing it is
        # predicted with: fit on the device's other rows only.
        nodes = fit([r for r in devices[held[0].keys["device"]] if r.keys["deployment"] != g])
        out += [(r, predict(r, nodes)) for r in held]
    return out


def document(name: str, rows: list[Row], sources: list[dict[str, Any]]) -> CalibrationFile:
    """The calibration file of fitted rows: sources, corrections, points and errors."""
    nodes = fit(rows)
    fitted = [(r, predict(r, nodes)) for r in rows]
    loo = leave_one_out(rows)
    packaged = table()
    points = []
    for r, (ttft, tpot) in sorted(fitted, key=lambda x: (x[0].keys["deployment"], x[0].m.source)):
        wl = r.m.case.workload
        points.append({
            "source": r.m.source, "date": r.m.date, "deployment": level_keys(r.m.case.deployment)["deployment"],
            "isl": _r(wl.isl), "osl": _r(wl.osl), "concurrency": wl.concurrency,
            "rate": None if wl.rate is None else _r(wl.rate),
            "measured": {"ttft_ms": _r(r.m.case.ttft_ms), "tpot_ms": _r(r.m.case.tpot_ms)},
            "prior": {"ttft_ms": _r(r.prior[0]), "tpot_ms": _r(r.prior[1])},
            "calibrated": {"ttft_ms": _r(ttft), "tpot_ms": _r(tpot)}})
    return CalibrationFile.model_validate({
        "apiVersion": "infra.dev/v1alpha1", "kind": "Calibration", "metadata": {"name": name},
        "prior": {"data": str(packaged.get("data", "")), "data_sha256": str(packaged.get("data_sha256", "")),
                  "fitted": str(packaged.get("fitted", ""))},
        "sources": sources, "corrections": [n.model_dump() for n in nodes], "points": points,
        "error": {"prior": errors([(r, r.prior) for r in rows]), "calibrated": errors(fitted),
                  "leave_one_out": errors(loo) if loo is not None else None}})


__all__ = ["EVIDENCE", "Measured", "Row", "document", "errors", "fit", "leave_one_out", "predict", "prepare",
           "runner"]
