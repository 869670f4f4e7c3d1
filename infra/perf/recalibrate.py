"""Fit a user's calibration (`infra.perf.correction`) to measured load points of their deployments.

Each point is replayed through the model with the packaged factors (the prior). The corrections are then found
top down, in log space:

1. the step multiplier: each point asks for the step multiplier under which the model predicts its measured TPOT
   (solved on the model itself, not on a linearisation: a CPU engine on two cores or a slice of a GPU runs ten or
   more times the step of the device the catalog describes, and how TPOT and TTFT respond to a step that much
   longer is not how they respond to a small change); a level's value is its parent's plus
   `n / (n + EVIDENCE[level])` of the difference its evidence makes (the median over each deployment's points,
   averaged over the deployments), `n` counting distinct deployments (points at the deployment level), so each
   deployment's load sweep counts once above it;
2. the TTFT multiplier, at the deployment level only, on the TTFT miss left once its step multiplier is applied
   (the model rerun at that step), shrunk towards none as the step is. What is left of TTFT after the step is the
   deployment's and workload's own (its prompt lengths, scheduler settings, queueing regime) and does not carry to
   other layouts or lengths: calibrated on a model's largest sweep, its other sweeps' TTFT came out 27.5% / 87.9%
   off (median / p90) with the multiplier carried up the levels, 28.4% / 80.6% without it (prior 28.1% / 79.2%).

3. the tails, at the deployment level only, where the points record percentiles: each point's highest percentile
   with `MIN_TAIL` samples beyond it, as a ratio to its own mean, against the calibrated model's ratio at that
   percentile; a narrower measured spread scales the model's down, a wider one adds a normal spread beyond it
   (`_tails`), the medians over the deployment's points shrunk by its evidence as the step is.

The device level is shrunk towards the prior (no correction). A single measured point moves the device half
way, and its own deployment 97% of the way; a model measured on many deployments pins its own level and leaves
the device's to what they share.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from infra.catalog.loader import Catalog
from infra.catalog.metrics import MIN_TAIL
from infra.perf.calibration import Factors, load_key, lookup, table, tails_at, ttft_at
from infra.perf.correction import (
    LEVELS,
    STEP_BOUNDS,
    TAIL_ADD,
    WORKLOAD_MATCH,
    CalibrationFile,
    MetricTail,
    Node,
    TailSpread,
    level_keys,
    match,
    scaled,
    with_tails,
    with_ttft,
)
from infra.perf.rows import Case, Replay, compiled, replay
from infra.perf.serving import Prediction, z_of

EVIDENCE = {"device": 1.0, "framework": 1.0, "model": 1.0, "deployment": 0.25}
"""Pseudo-count of each level's pull towards the level above: the deployments (points, at the deployment level)
a level needs before its own evidence outweighs its parent's. The deployment level trusts its own points most:
within a load sweep the prior's shape holds to about 13% TTFT and 5% TPOT, so one point already says most of what
the level is; across deployments, layouts and models the level carries over less."""
ABOVE_SHARE = 1 - math.prod(EVIDENCE[k] / (1 + EVIDENCE[k]) for k in LEVELS[:-1])
"""Share of a lone deployment's own miss that the levels above it take (7/8): a deployment's TTFT multiplier,
which has no levels above it, starts there before its own evidence, as its step multiplier does."""
PROBE = 1.25
"""Step multiplier the first guess at a point's own step is measured at (its TPOT's elasticity)."""
ELASTICITY = (0.3, 4.0)
"""Bounds of that elasticity: past them a point sits at the edge of saturation, where the response to a small
change says nothing about a large one."""
SOLVE_ITERATIONS = 12
"""Secant steps towards a point's own step multiplier; they meet the measured TPOT to 0.1% within a few."""
LOAD_MATCH = 0.1
"""How far (relative) loads may be from the lowest of their group and still count as one load of a deployment's
TTFT multipliers: a benchmark sweep's loads are far apart, while a day of production traffic observed in windows
(`infra observe --step`) has a load per window, each a few dozen requests or more, and a multiplier per window
would follow their noise."""


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
    step: float
    """Log of the step multiplier under which the model predicts the measured TPOT (within `STEP_BOUNDS`)."""
    keys: dict[str, str]
    """Key of each level; the deployment level's with its workload (`@isl/osl`)."""
    seen: dict[float, tuple[float, float]] = field(default_factory=dict)
    """Predictions already made, by log step multiplier."""
    full: Callable[[float], Prediction] | None = None
    """The whole prediction at a step multiplier, for a point with measured percentiles (`Case.tails`)."""

    def at(self, log_step: float) -> tuple[float, float]:
        """(TTFT ms, TPOT ms) at a step multiplier of exp(`log_step`)."""
        if log_step not in self.seen:
            self.seen[log_step] = (self.prior if log_step == 0.0 else self.run(math.exp(log_step)))
        return self.seen[log_step]

    def tails(self) -> list[tuple[str, str, float]]:
        """(metric, percentile, ms) of the highest measured percentile of each metric that has `MIN_TAIL` samples
        beyond it (above the median), where the point can be predicted whole."""
        if self.full is None:
            return []
        best: dict[str, tuple[str, float]] = {}
        for metric, pct, ms in self.m.case.tails:
            q = float(pct[1:])
            # (in percent, where 200 x (100 - 95) is 1,000 exactly and 200 x (1 - 0.95) is not 10)
            if q > 50 and self.m.case.samples * (100 - q) >= 100 * MIN_TAIL and (
                    metric not in best or q > float(best[metric][0][1:])):
                best[metric] = (pct, ms)
        return [(metric, *best[metric]) for metric in ("ttft", "tpot") if metric in best]


@dataclass(frozen=True)
class Stepped:
    """(TTFT ms, TPOT ms) of a measured case at a step multiplier on its factors: `replay` predicts many cases'
    at once."""

    run: Replay
    factors: Factors

    def __call__(self, step: float) -> tuple[float, float]:
        return self.run(scaled(self.factors, step))


def runner(case: Case, catalog: Catalog, base: Callable[[Case], Factors] | None = None) -> Stepped | str:
    """Predictions of a measured case with a step multiplier on the packaged factors (or on `base(case)`: a
    benchmark's prior fitted without the case's model), or why there are none."""
    run = compiled(case, catalog)
    if isinstance(run, str):
        return run
    return Stepped(run, _base(case, catalog, base))


def _predict_at(rows: list[Row], log_steps: list[float]) -> None:
    """Make the predictions each row lacks at its log step multiplier, together in vector passes
    (`infra.perf.rows.replay`, each the one `Row.at` would make)."""
    need = {(id(r), s): (r, s) for r, s in zip(rows, log_steps) if s not in r.seen and isinstance(r.run, Stepped)}
    if not need:
        return
    got = replay([r.run.run for r, _ in need.values()], [scaled(r.run.factors, math.exp(s)) for r, s in need.values()])
    for (r, s), pred in zip(need.values(), got):
        r.seen[s] = pred


def _base(case: Case, catalog: Catalog, base: Callable[[Case], Factors] | None) -> Factors:
    dep = case.deployment
    return base(case) if base else lookup(dep.framework, catalog.device(dep.device),
                                          catalog.framework(dep.framework).calibration_from).factors


def _full_runner(case: Case, catalog: Catalog, base: Callable[[Case], Factors] | None
                 ) -> Callable[[float], Prediction] | None:
    """`runner`'s whole prediction, for a point with measured percentiles of one known deployment."""
    if not case.tails or case.alternatives:
        return None
    run = compiled(case, catalog)
    if isinstance(run, str):
        return None
    factors = _base(case, catalog, base)
    return lambda step: run.full(scaled(factors, step))[0]


def _clamp(value: float, bounds: tuple[float, float]) -> float:
    return min(max(value, bounds[0]), bounds[1])


def _finite(pred: tuple[float, float]) -> bool:
    return all(math.isfinite(v) and v > 0 for v in pred)


def _own_step(at: Callable[[float], tuple[float, float]], tpot_ms: float, guess: float) -> float:
    """Log of the step multiplier under which the model's TPOT is `tpot_ms` (TPOT grows with the step): secant
    steps from the prior (log 0) and `guess`, halving back towards the last stable step where the model has the
    load unsustainable; a TPOT out of reach ends at the bound it lies beyond."""
    lo, hi = (math.log(b) for b in STEP_BOUNDS)
    target = math.log(tpot_ms)
    xa, fa = 0.0, math.log(at(0.0)[1]) - target
    x = _clamp(guess, (lo, hi))
    for _ in range(SOLVE_ITERATIONS):
        pred = at(x)
        if not _finite(pred):
            x = (xa + x) / 2
            continue
        fx = math.log(pred[1]) - target
        if abs(fx) < 1e-3 or x == xa:
            return x
        slope = (fx - fa) / (x - xa)
        xa, fa = x, fx
        if slope <= 0:
            break
        x = _clamp(x - fx / slope, (lo, hi))
        if x == xa:
            break
    return xa


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
        if not _finite(prior):
            skipped.append((m.source, "the model predicts this load unsustainable for the deployment"))
            continue
        probe, up = PROBE, run(PROBE)
        if not _finite(up):
            probe, up = 1.05, run(1.05)
        e_tpot = math.log(up[1] / prior[1]) / math.log(probe) if _finite(up) else 1.0
        row = Row(m, run, prior, 0.0, {}, {0.0: prior, math.log(probe): up},
                  _full_runner(m.case, catalog, base))
        row.step = _own_step(row.at, m.case.tpot_ms, math.log(m.case.tpot_ms / prior[1]) / _clamp(e_tpot, ELASTICITY))
        rows.append(row)
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
    return fits([rows])[0]


def fits(sets: list[list[Row]]) -> list[list[Node]]:
    """`fit` of each set of rows (the folds of a cross-validation), with the predictions every set's TTFT
    corrections rest on made together in vector passes."""
    steps = [_step_levels(rows) for rows in sets]
    _predict_at([r for rows in sets for r in rows],
                [step[("deployment", r.keys["deployment"])][0] for rows, step in zip(sets, steps) for r in rows])
    return [_nodes(rows, step) if rows else [] for rows, step in zip(sets, steps)]


def _bound(x: float) -> float:
    """A log correction within `STEP_BOUNDS`."""
    return min(max(x, math.log(STEP_BOUNDS[0])), math.log(STEP_BOUNDS[1]))


def _step_levels(rows: list[Row]) -> dict[tuple[str, str], tuple[float, float]]:
    """The step correction (log, weight) of every level the rows reach."""
    step: dict[tuple[str, str], tuple[float, float]] = {}
    if not rows:
        return step

    def step_parent(r: Row, level: str) -> float:
        above = LEVELS[LEVELS.index(level) - 1]
        return step[(above, r.keys[above])][0]

    def step_residual(r: Row, level: str) -> float:
        return r.step

    return _levels(rows, step_residual, step_parent, step, _bound)


def _nodes(rows: list[Row], step: dict[tuple[str, str], tuple[float, float]]) -> list[Node]:
    """Every level's correction: its step (`_step_levels`), the TTFT correction the rows' predictions under it
    leave, and a deployment's TTFT by load and its tails."""
    bound = _bound
    # The levels above a deployment undo their step's effect on TTFT (`_upper_ttft`); a deployment's own is fitted
    # on its points.
    ttft = _upper_ttft(rows, step)

    def ttft_residual(r: Row, level: str) -> float:
        pred = r.at(step[(level, r.keys[level])][0])
        # Where the level's step leaves the point's load unsustainable, the TTFT it would take is unknown: the
        # prior's stands in (the step correction then says more than the TTFT one could).
        return math.log(r.m.case.ttft_ms / (pred if _finite(pred) else r.prior)[0])

    own: dict[str, list[float]] = {}
    for r in rows:
        own.setdefault(r.keys["deployment"], []).append(ttft_residual(r, "deployment"))

    def ttft_parent(r: Row, level: str) -> float:
        # A deployment's TTFT is shrunk towards none by as much as its step is by the levels above it alone.
        return ABOVE_SHARE * statistics.median(own[r.keys["deployment"]])

    ttft = _levels(rows, ttft_residual, ttft_parent, ttft, bound, ("deployment",))
    groups: dict[tuple[str, str], list[Row]] = {}
    for r in rows:
        for level in LEVELS:
            groups.setdefault((level, r.keys[level]), []).append(r)
    nodes = []
    for (level, key), (value, weight) in sorted(step.items(), key=lambda kv: (LEVELS.index(kv[0][0]), kv[0][1])):
        members = groups[(level, key)]
        first, last = _dates(members)
        isl = osl = None
        loads: list[dict[str, Any]] | None = None
        if level == "deployment":
            isl_s, _, osl_s = key.rpartition("@")[2].partition("/")
            isl, osl = float(isl_s), float(osl_s)
            loads = _ttft_loads(members, lambda r: ttft_residual(r, "deployment"), ttft_parent(members[0], level),
                                ttft[(level, key)][1], bound) or None
        node = Node(level=level, key=key, step=_r(math.exp(value)), ttft=_r(math.exp(ttft[(level, key)][0])),
                    rows=len(members), deployments=len({r.keys["deployment"] for r in members}),
                    weight=_r(weight), isl=isl, osl=osl, first=first, last=last, loads=loads)
        if level == "deployment":
            node = _load_tails(members, node.model_copy(update={"tails": _tails(members, node)}))
        nodes.append(node)
    return nodes


def _upper_ttft(rows: list[Row], step: dict[tuple[str, str], tuple[float, float]]
                ) -> dict[tuple[str, str], tuple[float, float]]:
    """The TTFT correction (log, weight 0) of every level above a deployment: what undoes the level's step
    correction on the prior's TTFT (through each point's `_ttft_elasticity`). The step is fitted to the measured
    TPOT and lengthens the prompts' steps as much as the decodes'; carried alone to another layout or workload it
    moved TTFT by as much, where a deployment's own TTFT miss does not carry over at all (`closed_loop.py`:
    calibrated on a model's largest sweep, its other sweeps' TTFT 28.0/79.5% median/p90 error with the step alone,
    27.8/79.3% undone, 27.8/79.3% uncalibrated; 11 workloads of Qwen3-235B on vLLM tp4, each predicted from the
    others: 69.4/134.0%, 28.7/74.8%, 26.9/83.0%). A level's correction is the mean over its deployments of each
    one's median. Predicting every point again at each level's step instead of reading its elasticity gives the
    same figures within 0.2 points and made `infra calibrate` three times as slow (every fold of its
    cross-validations predicts every point once per level)."""
    out: dict[tuple[str, str], tuple[float, float]] = {}
    for level in LEVELS[:-1]:
        by_key: dict[str, dict[str, list[float]]] = {}
        for r in rows:
            key = r.keys[level]
            by_key.setdefault(key, {}).setdefault(r.keys["deployment"], []).append(
                -_ttft_elasticity(r, step[("deployment", r.keys["deployment"])][0]) * step[(level, key)][0])
        for key, per_dep in sorted(by_key.items()):
            out[(level, key)] = (_bound(statistics.fmean(statistics.median(v) for v in per_dep.values())), 0.0)
    return out


def _ttft_elasticity(r: Row, log_step: float) -> float:
    """How a point's predicted TTFT follows the step multiplier (d log TTFT / d log step), read off the prediction
    at its deployment's step against the prior's (1, as a prompt's own steps, where that step is the prior's or
    leaves the load unsustainable): the levels above take their steps' effect on TTFT from it without predicting
    every point again at each of their steps."""
    pred = r.at(log_step)
    if log_step == 0.0 or not (_finite(pred) and _finite(r.prior)):
        return 1.0
    return math.log(pred[0] / r.prior[0]) / log_step


def _calibrated(r: Row, node: Node) -> Prediction | None:
    """A point's whole prediction under a node's step and TTFT corrections (not its tails), where stable."""
    assert r.full is not None
    wl = r.m.case.workload
    pred = r.full(node.step)
    return with_ttft(pred, ttft_at(node.ttft, node.ttft_loads(), wl.concurrency, wl.rate)) if pred.stable else None


def _tails(members: list[Row], node: Node, toward: TailSpread | None = None) -> TailSpread | None:
    """A deployment's tail corrections (`MetricTail`), per metric from each point's measured percentile against
    the calibrated model's at the same percentile, both as ratios to their means: a narrower measured spread is
    the model's scaled down, a wider one the model's with a normal one added beyond it. The medians over the
    points, shrunk by their evidence as the step is: towards no correction, or towards `toward` (the
    deployment's, for the points of one of its loads)."""
    scales: dict[str, list[float]] = {}
    adds: dict[str, list[float]] = {}
    for r in members:
        tails = r.tails()
        pred = _calibrated(r, node) if tails else None
        if pred is None:
            continue
        for metric, pct, ms in tails:
            values = getattr(pred, metric)
            model = values[pct] / values["mean"] - 1
            measured = ms / (r.m.case.ttft_ms if metric == "ttft" else r.m.case.tpot_ms) - 1
            if model > 0 and measured <= model:
                scale, add = max(measured, 0.0) / model, 0.0
            else:
                scale, add = 1.0, max(measured - max(model, 0.0), 0.0) / z_of(pct)
            scales.setdefault(metric, []).append(scale)
            adds.setdefault(metric, []).append(add)
    if not scales:
        return None
    out = {}
    for metric, v in scales.items():
        weight = len(v) / (len(v) + EVIDENCE["deployment"])
        base = getattr(toward, metric, None) or MetricTail()
        out[metric] = MetricTail(scale=_r(base.scale + weight * (statistics.median(v) - base.scale)),
                                 add=_r(min(base.add + weight * (statistics.median(adds[metric]) - base.add),
                                            TAIL_ADD)))
    return TailSpread(**out)


def _load_tails(members: list[Row], node: Node) -> Node:
    """The node with each of its loads' own tail corrections, where its points were measured at two loads or
    more (`_ttft_loads`' groups) and record percentiles."""
    if not node.loads or node.tails is None:
        return node
    groups = _load_groups(map(_load, members))
    loads = [load.model_copy(update={"tails": _tails([r for r in members if _load(r) in group], node, node.tails)})
             for load, group in zip(node.loads, groups)]
    return node.model_copy(update={"loads": loads})


def _load(r: Row) -> tuple[str, float]:
    return load_key(r.m.case.workload.concurrency, r.m.case.workload.rate)


def _load_groups(loads: Iterable[tuple[str, float]]) -> list[frozenset[tuple[str, float]]]:
    """The distinct loads, increasing, in groups of one kind within `LOAD_MATCH` of the lowest of each: what a
    deployment's TTFT multipliers (and leaving a load out) take as one load."""
    groups: list[list[tuple[str, float]]] = []
    for load in sorted(set(loads)):
        if groups and load[0] == groups[-1][0][0] and load[1] <= groups[-1][0][1] * (1 + LOAD_MATCH):
            groups[-1].append(load)
        else:
            groups.append([load])
    return [frozenset(g) for g in groups]


def _ttft_loads(members: list[Row], residual: Callable[[Row], float], parent: float, weight: float,
                bound: Callable[[float], float]) -> list[dict[str, Any]]:
    """A deployment's TTFT multiplier at each load it was measured at (`_load_groups`: the group's median load,
    at the median of its points' multipliers, shrunk as the deployment's one multiplier is), when its points are
    all of one kind and at two loads or more: within a sweep the measured TTFT grows with the load faster or
    slower than the model's, by a trend one multiplier averages away (calibrated on two loads of a sweep, its
    other loads' TTFT median / p90 error on the calibration set, `benchmarks/closed_loop.py`'s per_sweep_two:
    18.6 / 73.5% with one multiplier, 14.8 / 69.1% by load)."""
    if len({kind for kind, _ in map(_load, members)}) > 1:
        return []
    groups = _load_groups(map(_load, members))
    if len(groups) < 2 or any(x <= 0 for group in groups for _, x in group):
        return []
    out = []
    for group in groups:
        inside = [r for r in members if _load(r) in group]
        kind, x = _load(inside[0])[0], statistics.median(_load(r)[1] for r in inside)
        ttft = math.exp(bound(parent + weight * (statistics.median(map(residual, inside)) - parent)))
        out.append({kind: round(x) if kind == "concurrency" else _r(x), "ttft": _r(ttft)})
    return out


def _levels(rows: list[Row], residual: Callable[[Row, str], float], parent: Callable[[Row, str], float],
            into: dict[tuple[str, str], tuple[float, float]], bound: Callable[[float], float],
            levels: tuple[str, ...] = LEVELS) -> dict[tuple[str, str], tuple[float, float]]:
    """Fill `into` level by level (`levels`, broadest first; each level's parent read from it) and return it."""
    for level in levels:
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
    wl = row.m.case.workload
    node = match(nodes, row.m.case.deployment, wl)
    if node is None:
        return row.prior
    ttft, tpot = row.run(node.step)
    return ttft * ttft_at(node.ttft, node.ttft_loads(), wl.concurrency, wl.rate), tpot


def predict_tails(row: Row, nodes: list[Node] | None, spread: bool = True) -> list[tuple[str, str, float, float]]:
    """(metric, percentile, measured ms, predicted ms) of a point's measured percentiles (`Row.tails`) under the
    correction that matches it, its tails included unless `spread` is False (the prior's, with `nodes` None or
    where none matches)."""
    tails = row.tails()
    if not tails:
        return []
    wl = row.m.case.workload
    node = match(nodes, row.m.case.deployment, wl) if nodes is not None else None
    assert row.full is not None
    if node is None:
        pred: Prediction | None = row.full(1.0)
    else:
        pred = _calibrated(row, node)
        if pred is not None and node.tails is not None and spread:
            pred = with_tails(pred, tails_at(node.tails.pair(), node.tail_loads(), wl.concurrency, wl.rate), wl.osl)
    if pred is None or not pred.stable:
        return []
    return [(metric, pct, ms, getattr(pred, metric)[pct] * 1000) for metric, pct, ms in tails]


def _stats(values: list[float]) -> tuple[float | None, float | None]:
    if not values:
        return None, None
    ordered = sorted(values)
    return (_r(statistics.median(ordered)), _r(ordered[min(len(ordered) - 1, int(round(0.9 * (len(ordered) - 1))))]))


def errors(pairs: list[tuple[Row, tuple[float, float]]]) -> dict[str, Any]:
    """Median and p90 absolute percentage error (fractions) of predicted mean TTFT and TPOT."""
    ok = [(r, p) for r, p in pairs if all(math.isfinite(v) and v > 0 for v in p)]
    t = _stats([abs(p[0] - r.m.case.ttft_ms) / r.m.case.ttft_ms for r, p in ok])
    s = _stats([abs(p[1] - r.m.case.tpot_ms) / r.m.case.tpot_ms for r, p in ok])
    return {"n": len(ok), "ttft_median_ape": t[0], "ttft_p90_ape": t[1], "tpot_median_ape": s[0],
            "tpot_p90_ape": s[1]}


def tail_errors(tails: list[tuple[str, str, float, float]]) -> dict[str, Any]:
    """`errors` of measured percentiles: (metric, percentile, measured, predicted) each."""
    ok = [t for t in tails if math.isfinite(t[3]) and t[3] > 0]
    ttft = [abs(p - m) / m for metric, _, m, p in ok if metric == "ttft"]
    tpot = [abs(p - m) / m for metric, _, m, p in ok if metric == "tpot"]
    t, s = _stats(ttft), _stats(tpot)
    # (a point has one percentile of each metric: the points are the larger count)
    return {"n": max(len(ttft), len(tpot)), "ttft_median_ape": t[0], "ttft_p90_ape": t[1], "tpot_median_ape": s[0],
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
    # Every level a point can match lies under its device, so the rows of other devices change nothing it is
    # predicted with: fit on the device's other rows only.
    held_out = sorted(groups.items())
    folds = fits([[r for r in devices[held[0].keys["device"]] if r.keys["deployment"] != g] for g, held in held_out])
    return [(r, predict(r, nodes)) for (_, held), nodes in zip(held_out, folds) for r in held]


FAR = 3.0
"""A device correction past this multiple (or fraction) of the prior is called out in the calibration's notes: the
measured engine is not the one the catalog's device describes, and plans on that device inherit the correction."""
LEFT = 0.25
"""Median error the corrections may leave on their own measurements before the calibration says so."""


def notes(nodes: list[Node], calibrated: dict[str, Any]) -> list[str]:
    """What the calibration's user should check: devices measured far from the catalog's figures, corrections at
    their bounds, and an in-sample error the corrections leave."""
    out = []
    for n in nodes:
        if n.level == "device" and not 1 / FAR <= n.step <= FAR:
            out.append(f"{n.key}: the measured engines' steps take {n.step:.3g} times as long as the packaged "
                       "model predicts for this device; if they ran on part of it (CPU limits, a GPU share) or on "
                       "another SKU, plans for whole devices inherit that: calibrate on what plans will deploy")
        at = [what for what, v in (("step time", n.step), ("TTFT", n.ttft)) if v in STEP_BOUNDS]
        if at:
            out.append(f"{n.key}: the {' and '.join(at)} correction stops at its bound "
                       f"(x{STEP_BOUNDS[0]:g}..x{STEP_BOUNDS[1]:g}): the measurements describe another deployment "
                       "than the one they are filed under, or an engine in trouble")
    for metric in ("ttft", "tpot"):
        left = calibrated.get(f"{metric}_median_ape")
        if left is not None and left > LEFT:
            out.append(f"calibrated {metric.upper()} stays {100 * left:.0f}% off its own measurements at the median: "
                       "the model's response to the load differs from this engine's, and figures between and beyond "
                       "the measured loads carry that error")
    return out


def leave_one_load_out(rows: list[Row]) -> list[tuple[Row, list[Node]]] | None:
    """Each measured load of a deployment with the corrections fitted without that load's points (its other
    loads kept): what the in-sample error, which the per-load TTFT multipliers close by construction, cannot say.
    None where no deployment was measured at two loads."""
    by_dep: dict[str, list[Row]] = {}
    for r in rows:
        by_dep.setdefault(r.keys["deployment"], []).append(r)
    held_out, sets = [], []
    for dep, members in sorted(by_dep.items()):
        groups = _load_groups(map(_load, members))
        if len(groups) < 2:
            continue
        device = [r for r in rows if r.keys["device"] == members[0].keys["device"]]
        for group in groups:
            sets.append([r for r in device if r.keys["deployment"] != dep or _load(r) not in group])
            held_out.append([r for r in members if _load(r) in group])
    return [(r, nodes) for held, nodes in zip(held_out, fits(sets)) for r in held] or None


def document(name: str, rows: list[Row], sources: list[dict[str, Any]]) -> CalibrationFile:
    """The calibration file of fitted rows: sources, corrections, points and errors."""
    nodes = fit(rows)
    fitted = [(r, predict(r, nodes)) for r in rows]
    loo = leave_one_out(rows)
    lolo = leave_one_load_out(rows)
    calibrated = errors(fitted)
    packaged = table()
    points = []
    tails_prior, tails_means, tails_fitted = [], [], []
    for r, (ttft, tpot) in sorted(fitted, key=lambda x: (x[0].keys["deployment"], x[0].m.source)):
        wl = r.m.case.workload
        prior_t, fitted_t = predict_tails(r, None), predict_tails(r, nodes)
        tails_prior += prior_t
        tails_means += predict_tails(r, nodes, spread=False)
        tails_fitted += fitted_t
        fitted_at = {(metric, pct): ms for metric, pct, _, ms in fitted_t}
        tails = [{"metric": metric, "percentile": pct, "samples": r.m.case.samples, "measured_ms": _r(measured),
                  "prior_ms": _r(ms), "calibrated_ms": _r(fitted_at[(metric, pct)])}
                 for metric, pct, measured, ms in prior_t if (metric, pct) in fitted_at]
        points.append({
            "source": r.m.source, "date": r.m.date, "deployment": level_keys(r.m.case.deployment)["deployment"],
            "isl": _r(wl.isl), "osl": _r(wl.osl), "concurrency": wl.concurrency,
            "rate": None if wl.rate is None else _r(wl.rate),
            "measured": {"ttft_ms": _r(r.m.case.ttft_ms), "tpot_ms": _r(r.m.case.tpot_ms)},
            "prior": {"ttft_ms": _r(r.prior[0]), "tpot_ms": _r(r.prior[1])},
            "calibrated": {"ttft_ms": _r(ttft), "tpot_ms": _r(tpot)}, "tails": tails or None})
    lolo_tails = [t for r, held in lolo or () for t in predict_tails(r, held)]
    return CalibrationFile.model_validate({
        "apiVersion": "infra.dev/v1alpha1", "kind": "Calibration", "metadata": {"name": name},
        "prior": {"data": str(packaged.get("data", "")), "data_sha256": str(packaged.get("data_sha256", "")),
                  "fitted": str(packaged.get("fitted", ""))},
        "sources": sources, "corrections": [n.model_dump() for n in nodes], "points": points,
        "error": {"prior": errors([(r, r.prior) for r in rows]), "calibrated": calibrated,
                  "leave_one_out": errors(loo) if loo is not None else None,
                  "leave_one_load_out": errors([(r, predict(r, held)) for r, held in lolo]) if lolo else None,
                  "tails": {"prior": tail_errors(tails_prior), "means_only": tail_errors(tails_means),
                            "calibrated": tail_errors(tails_fitted),
                            "leave_one_load_out": tail_errors(lolo_tails) if lolo_tails else None}
                  if tails_fitted else None},
        "notes": notes(nodes, calibrated)})


__all__ = ["EVIDENCE", "Measured", "Row", "document", "errors", "fit", "leave_one_load_out", "leave_one_out",
           "predict", "predict_tails", "prepare", "runner", "tail_errors"]
