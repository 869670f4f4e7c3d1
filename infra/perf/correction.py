"""A user's own calibration: corrections the packaged prior takes from measurements of their deployments.

The packaged efficiency factors (`infra.perf.calibration`) are a prior fitted to published measurements; on a
deployment they never saw, the mean TTFT lands about 38% off at the median while the shape along the load holds
(within a load sweep 13% TTFT, 5% TPOT). What the prior misses is mostly a level per deployment, and that is what
a user's measurements correct. A correction has two multipliers:

- `step`: of the engine's step time (every term of `Worker.step` scales with it, so TPOT, throughput and the
  capacity a plan sizes replicas by follow consistently, queueing included);
- `ttft`: of the time to first token left after that (admission, tokenisation, scheduler settings the prior
  cannot see), applied to the prediction; only the exact deployment and workload has one (at each measured load,
  where it was measured at several): it does not carry to other layouts or prompt lengths;
- `tails`: where the measurements record percentiles, what their spread makes of the model's (TTFT and TPOT):
  its share kept, and what is added beyond it; at the exact deployment and workload too. Objectives are
  percentiles, and a mean corrected alone leaves the p99 a plan is judged on to the model's idea of the spread.

Corrections are kept per level, from the broadest to the exact one: the device; the framework on that device; the
model on that framework and device; the exact deployment (layout) and workload (lengths). Each level is the level
above plus its own evidence shrunk by how much of it there is (`infra.perf.recalibrate`), so one measured point
already helps and many do not overfit. An estimate takes the most specific level that matches it.

A calibration file (`kind: Calibration`) records the measurements it learned from, the corrections, and its error
on those measurements before and after.
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, model_validator
from pydantic import ValidationError as PydanticValidationError

from infra.errors import InfraError, Location, Problem
from infra.intent.loader import problems_from_pydantic
from infra.intent.yamlio import load_yaml, read_text
from infra.perf.calibration import Factors, TailLoads, TtftLoads, load_key, table
from infra.perf.serving import PERCENTILES, Prediction, z_of
from infra.perf.shape import Deployment, Workload

API_VERSION = "infra.dev/v1alpha1"
LEVELS = ("device", "framework", "model", "deployment")
"""Correction levels, broadest first: the device; the framework on it; the model on both; the exact deployment
and workload."""
LEVEL_WORDS = {"device": "the device", "framework": "the framework on this device",
               "model": "this model on this framework and device", "deployment": "this deployment and workload"}
WORKLOAD_MATCH = 0.25
"""How far (relative) a workload's mean input and output lengths may be from the measured ones and still count as
the same workload at the deployment level: a plan's workload is a distribution whose sampled means move a few
percent between runs, while a workload of twice the prompt is another regime."""
STEP_BOUNDS = (0.01, 100.0)
"""Multipliers a correction may take. An engine on a slice of the device the catalog describes (two cores of a
96-core socket, a tenth of a GPU) runs tens of times its step; past a hundredth or a hundred times the prior, the
measurement describes something other than the deployment it is filed under (another model, a broken engine)."""
TAIL_ADD = 10.0
"""Most a tail correction may add per standard-normal quantile, in means (+1 at p99 is 2.3 times the mean more)."""
Tail = tuple[float, float]
"""One metric's tail correction (`spread_by`): the share of the model's spread kept, and what is added beyond it
per standard-normal quantile, in means."""
NO_TAIL: Tail = (1.0, 0.0)
Tails = tuple[Tail, Tail]
"""TTFT's and TPOT's."""
NO_TAILS: Tails = (NO_TAIL, NO_TAIL)


def scaled(factors: Factors, step: float) -> Factors:
    """Factors whose every step term takes `step` times as long: the efficiencies divided by it, the fixed
    overheads multiplied (see `Worker.step`: each term is work over an efficiency or a fixed time)."""
    if step == 1.0:
        return factors
    return replace(factors, gemm=factors.gemm / step, mem=factors.mem / step, attn=factors.attn / step,
                   comm=factors.comm / step, step_ms=factors.step_ms * step, layer_us=factors.layer_us * step,
                   moe_ns=factors.moe_ns * step, expert_step_us=factors.expert_step_us * step,
                   collective_us=factors.collective_us * step, a2a_peer_us=factors.a2a_peer_us * step)


def with_ttft(pred: Prediction, ttft: float) -> Prediction:
    """The prediction with its TTFT `ttft` times as long, and each E2E figure longer by the same amount."""
    if ttft == 1.0 or not pred.stable:
        return pred
    new = {k: v * ttft for k, v in pred.ttft.items()}
    e2e = {k: v + new.get(k, new["mean"]) - pred.ttft.get(k, pred.ttft["mean"]) for k, v in pred.e2e.items()}
    return replace(pred, ttft=new, e2e=e2e)


def spread_by(values: dict[str, float], tail: Tail) -> dict[str, float]:
    """A metric's percentiles under a measured tail (scale, add): percentile p of a metric of mean m becomes
    m + scale x (p - m) + add x z_p x m. A measured spread narrower than the model's keeps its shape, scaled
    down (the model's queueing tail overstated); a wider one keeps the model's and adds a normal one beyond it
    (variability the model does not have: an engine's own jitter, a flat closed-loop TPOT). Either keeps the
    percentiles in order."""
    if tail == NO_TAIL:
        return values
    scale, add = tail
    mean = values["mean"]
    out = {"mean": mean}
    floor = 0.0
    for p in PERCENTILES:
        if p in values:
            floor = out[p] = max(mean + scale * (values[p] - mean) + add * max(z_of(p), 0.0) * mean, floor)
    return out


def with_tails(pred: Prediction, tails: Tails, osl: float) -> Prediction:
    """The prediction with its TTFT and TPOT percentiles spread by the measured `tails` (`spread_by`); each E2E
    percentile's excess over its mean recomposed as the model composes it (`serving._e2e`: the root sum of the
    parts' squares) with the TTFT's and the (osl - 1) TPOTs' new excesses in place of the old."""
    if tails == NO_TAILS or not pred.stable:
        return pred
    ttft, tpot = spread_by(pred.ttft, tails[0]), spread_by(pred.tpot, tails[1])
    decode = max(osl - 1, 0.0)
    e2e = dict(pred.e2e)
    for p in PERCENTILES:
        if p not in e2e or z_of(p) <= 0:
            continue
        old = (pred.ttft[p] - pred.ttft["mean"], decode * (pred.tpot[p] - pred.tpot["mean"]))
        new = (ttft[p] - ttft["mean"], decode * (tpot[p] - tpot["mean"]))
        excess = e2e[p] - e2e["mean"]
        rest = max(excess * excess - sum(max(x, 0.0) ** 2 for x in old), 0.0)
        e2e[p] = max(e2e["mean"] + math.sqrt(rest + sum(max(x, 0.0) ** 2 for x in new)), e2e.get("p50", 0.0))
    return replace(pred, ttft=ttft, tpot=tpot, e2e=e2e)


def layout(dep: Deployment) -> str:
    """The layout part of a deployment's key: `tp4`, or `P tp8-ep8 / D tp8-dp8` (batch caps and worker counts
    left out: they follow the load)."""
    if dep.mode == "agg":
        return dep.agg.parallel.label()
    return f"P {dep.prefill.parallel.label()} / D {dep.decode.parallel.label()}"


def level_keys(dep: Deployment) -> dict[str, str]:
    """The key of a deployment at each level but the workload's."""
    decode = f"+{dep.decode_device}" if dep.decode_device and dep.mode != "agg" else ""
    device = f"{dep.device}{decode}"
    return {"device": device, "framework": f"{dep.framework}/{device}",
            "model": f"{dep.model}/{dep.framework}/{device}",
            "deployment": f"{dep.model}/{dep.framework}/{device}/{dep.precision}/{dep.mode}/{layout(dep)}"}


@dataclass(frozen=True)
class Correction:
    """What a user's measurements say about one deployment: the multipliers and where they come from."""

    step: float
    ttft: float
    level: str
    """The most specific level that matched (`LEVELS`)."""
    key: str
    rows: int
    """Measured load points behind that level."""
    deployments: int
    """Distinct deployments and workloads behind it."""
    measured: str
    """When: the earliest and latest date of those measurements (`2026-11-02..2026-11-30`), or `undated`."""
    calibration: str
    """The calibration file's name and the first 12 hex digits of its SHA-256."""
    stale: str = ""
    """Set when the calibration was fitted against another packaged prior than the one installed (its fit
    date): its corrections were sized for that prior's figures."""
    ttft_loads: TtftLoads = ()
    """The TTFT multiplier at each measured load of the deployment (`infra.perf.calibration.ttft_at`)."""
    tails: Tails = NO_TAILS
    """What the measured percentiles make of the model's spread (`with_tails`)."""
    tail_loads: TailLoads = ()
    """Those at each load they were measured at (`infra.perf.calibration.tails_at`)."""

    def describe(self) -> str:
        """One line for notes and plans: what was corrected, by how much, on what evidence."""
        by_load = ", ".join(f"x{m:.3g} at {_load_words(kind, x)}" for kind, x, m in self.ttft_loads)
        text = (f"calibrated on {self.rows} measured load point(s) of {self.deployments} deployment(s) "
                f"({LEVEL_WORDS[self.level]}, {self.measured}; {self.calibration}): step time x{self.step:.3g}, "
                f"TTFT x{self.ttft:.3g}" + (f" ({by_load}, in between by load)" if by_load else "")
                + (" (the prior's TTFT under that step)" if self.level != "deployment" and self.ttft != 1 else ""))
        if self.tails != NO_TAILS:
            text += "; measured percentiles: " + ", ".join(
                f"{name} {tail_words(t)}" for name, t in zip(("TTFT", "TPOT"), self.tails) if t != NO_TAIL)
            if len(self.tail_loads) > 1:
                text += f" (measured at {len(self.tail_loads)} loads, in between by load)"
        if self.stale:
            text += (f"; fitted against the packaged prior of {self.stale}, not the one installed: re-run "
                     "`infra calibrate` on the same measurements")
        return text


def tail_words(tail: Tail) -> str:
    """`spread x0.4 of the model's`, `p99 +26% of the mean beyond the model's spread`."""
    scale, add = tail
    parts = [f"spread x{scale:.2g} of the model's"] if scale != 1.0 else []
    if add:
        parts.append(f"p99 +{100 * add * z_of('p99'):.0f}% of the mean beyond the model's spread")
    return " and ".join(parts) or "the model's spread"


def _load_words(kind: str, load: float) -> str:
    return f"{load:g} clients" if kind == "concurrency" else f"{load:.4g}/s"


# --- the file --------------------------------------------------------------------------------------------------


class CalModel(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, use_attribute_docstrings=True)


class Metadata(CalModel):
    name: str = Field(min_length=1, max_length=253)
    """Name of the calibration."""


class Source(CalModel):
    """One measurement file the calibration learned from."""

    path: str
    """The file as given."""
    sha256: str = Field(pattern=r"^[0-9a-f]{64}$")
    """SHA-256 of its bytes when read."""
    format: str
    """How it was read: infra-bench, infra-observe (a deployment's own traffic), silicon-csv, vllm-bench,
    sglang-bench, genai-perf, aiperf, guidellm."""
    points: int = Field(ge=0)
    """Load points used from it."""
    skipped: list[str] = []
    """Entries that could not be used, each with where and why."""


class Metrics(CalModel):
    """Mean TTFT and TPOT, milliseconds."""

    ttft_ms: float = Field(gt=0, allow_inf_nan=False)
    tpot_ms: float = Field(gt=0, allow_inf_nan=False)


class TailPoint(CalModel):
    """A measured point's percentile of one metric, with the prior's prediction and the calibrated one."""

    metric: Literal["ttft", "tpot"]
    percentile: Literal[PERCENTILES]  # type: ignore[valid-type]
    """The highest one the point's samples support (`MIN_TAIL` beyond it)."""
    samples: int = Field(ge=1)
    """Requests measured."""
    measured_ms: float = Field(gt=0, allow_inf_nan=False)
    prior_ms: float = Field(gt=0, allow_inf_nan=False)
    calibrated_ms: float = Field(gt=0, allow_inf_nan=False)


class Point(CalModel):
    """One measured load point, with the prior's prediction and the calibrated one."""

    source: str
    """File and place in it."""
    date: str | None = None
    """When it was measured, where the file says."""
    deployment: str
    """Its deployment key (model/framework/device/precision/mode/layout)."""
    isl: float = Field(gt=0, allow_inf_nan=False)
    """Mean input tokens per request."""
    osl: float = Field(gt=0, allow_inf_nan=False)
    """Mean output tokens per request."""
    concurrency: int | None = Field(default=None, ge=1)
    """Closed loop: clients."""
    rate: float | None = Field(default=None, gt=0, allow_inf_nan=False)
    """Open loop: requests per second."""
    measured: Metrics
    prior: Metrics
    """What the packaged calibration predicted."""
    calibrated: Metrics
    """What this calibration predicts (in-sample)."""
    tails: list[TailPoint] | None = None
    """Its measured percentiles the tail corrections were fitted on, where the file records them."""


class MetricTail(CalModel):
    """One metric's measured spread against the model's: an estimate's percentile p of mean m becomes
    m + scale x (p - m) + add x z_p x m."""

    scale: float = Field(default=1.0, ge=0.0, le=1.0, allow_inf_nan=False)
    """Share of the model's spread around the mean kept (below 1 where the measured spread was narrower)."""
    add: float = Field(default=0.0, ge=0.0, le=TAIL_ADD, allow_inf_nan=False)
    """Spread added beyond the model's, per standard-normal quantile, in means (0.1 adds 23% of the mean at p99,
    none at the median)."""

    def pair(self) -> Tail:
        return (self.scale, self.add)


class TailSpread(CalModel):
    """What a deployment's measured percentiles make of the model's spread of each metric; a metric is absent
    where no measurement supports a percentile of it."""

    ttft: MetricTail | None = None
    tpot: MetricTail | None = None

    def pair(self) -> Tails:
        return (self.ttft.pair() if self.ttft else NO_TAIL, self.tpot.pair() if self.tpot else NO_TAIL)


class LoadTtft(CalModel):
    """The TTFT multiplier at one measured load of a deployment."""

    concurrency: int | None = Field(default=None, ge=1)
    """Closed loop: clients."""
    rate: float | None = Field(default=None, gt=0, allow_inf_nan=False)
    """Open loop: requests per second."""
    ttft: float = Field(ge=STEP_BOUNDS[0], le=STEP_BOUNDS[1], allow_inf_nan=False)
    """Multiplier of the time to first token at that load, after the step correction."""
    tails: TailSpread | None = None
    """Where that load's measurements record percentiles: what they make of the model's spread there (shrunk
    towards the deployment's `tails` by their evidence). An estimate between two such loads takes them
    interpolated in log load, the nearest one's beyond them."""

    @model_validator(mode="after")
    def _one_load(self) -> LoadTtft:
        if (self.concurrency is None) == (self.rate is None):
            raise ValueError("give the load as concurrency or as rate, one of the two")
        return self


class Node(CalModel):
    """The correction of one level."""

    level: Literal["device", "framework", "model", "deployment"]
    key: str
    """`H100`; `vllm/H100`; `Llama-3.1-8B/vllm/H100`; the deployment key with `@isl/osl`."""
    step: float = Field(ge=STEP_BOUNDS[0], le=STEP_BOUNDS[1], allow_inf_nan=False)
    """Multiplier of the engine's step time."""
    ttft: float = Field(ge=STEP_BOUNDS[0], le=STEP_BOUNDS[1], allow_inf_nan=False)
    """Multiplier of the time to first token after the step correction (1 above the deployment level: what TTFT
    misses after the step is a deployment's and workload's own)."""
    rows: int = Field(ge=1)
    """Measured load points behind it."""
    deployments: int = Field(ge=1)
    """Distinct deployments and workloads behind it."""
    weight: float = Field(ge=0, le=1)
    """Share of its own evidence taken over the level above (the rest is shrunk towards that level)."""
    isl: float | None = Field(default=None, gt=0)
    """Deployment level: the measured mean input tokens it matches (within `WORKLOAD_MATCH`)."""
    osl: float | None = Field(default=None, gt=0)
    """Deployment level: the measured mean output tokens."""
    first: str | None = None
    """Earliest measurement date behind it."""
    last: str | None = None
    """Latest measurement date behind it."""
    loads: list[LoadTtft] | None = None
    """Deployment level, measured at two or more loads of one kind: the TTFT multiplier at each, increasing load;
    an estimate takes it at its own load, interpolated in log load (the nearest one's beyond them). Its TTFT
    grows with the load as measured rather than as the model has it."""
    tails: TailSpread | None = None
    """Deployment level, where its measurements record percentiles: what they make of the model's spread."""

    def ttft_loads(self) -> TtftLoads:
        return tuple((*load_key(p.concurrency, p.rate), p.ttft) for p in self.loads or ())

    def tail_loads(self) -> TailLoads:
        return tuple((*load_key(p.concurrency, p.rate), p.tails.pair()) for p in self.loads or () if p.tails)

    @model_validator(mode="after")
    def _workload(self) -> Node:
        if self.level == "deployment" and (self.isl is None or self.osl is None or "@" not in self.key):
            raise ValueError("a deployment-level correction needs isl, osl and a key ending in @isl/osl, as "
                             "`infra calibrate` writes them")
        if (self.loads or self.tails) and self.level != "deployment":
            raise ValueError("only a deployment-level correction has loads or tails")
        at = self.ttft_loads()
        if any(a[0] == b[0] and a[1] >= b[1] for a, b in zip(at, at[1:])) or len({k for k, _, _ in at}) > 1:
            raise ValueError("loads must be of one kind (concurrency or rate) and in increasing load")
        return self


class Error(CalModel):
    """Absolute percentage errors (fractions) of the mean TTFT and TPOT over the points."""

    n: int = Field(ge=0)
    ttft_median_ape: float | None = None
    ttft_p90_ape: float | None = None
    tpot_median_ape: float | None = None
    tpot_p90_ape: float | None = None


class TailErrors(CalModel):
    """Absolute percentage errors of the measured percentiles (the errors' `ttft_*` and `tpot_*` fields)."""

    prior: Error
    means_only: Error
    """The step and TTFT corrections without the tails: the model's own spread around calibrated means."""
    calibrated: Error
    """In-sample, the tail corrections included."""
    leave_one_load_out: Error | None = None
    """Each measured load's percentiles predicted without that load (where a deployment was measured at two)."""


class Errors(CalModel):
    prior: Error
    """The packaged calibration on these measurements."""
    calibrated: Error
    """This calibration on the same measurements (in-sample)."""
    leave_one_out: Error | None = None
    """Each deployment's points predicted by a calibration fitted without them (when there are at least two)."""
    leave_one_load_out: Error | None = None
    """Each measured load of a deployment predicted by a calibration fitted without that load (when a deployment
    was measured at two loads or more): how far the corrections carry to a load they did not see."""
    tails: TailErrors | None = None
    """The measured percentiles (`Point.tails`), where there are any."""


class Prior(CalModel):
    """The packaged calibration the corrections are relative to."""

    data: str
    data_sha256: str
    fitted: str


class CalibrationFile(CalModel):
    """Corrections of the performance model fitted to a user's own measurements (`kind: Calibration`)."""

    api_version: Literal["infra.dev/v1alpha1"] = Field(alias="apiVersion")
    """Always `infra.dev/v1alpha1`."""
    kind: Literal["Calibration"]
    """Always `Calibration`."""
    metadata: Metadata
    prior: Prior
    sources: list[Source] = Field(min_length=1)
    corrections: list[Node] = Field(min_length=1)
    points: list[Point] = Field(min_length=1)
    error: Errors
    notes: list[str] = []
    """What to check before trusting the corrections: a device measured far from what the catalog says of it, a
    correction at its bound, an error the corrections leave."""

    model_config = ConfigDict(extra="forbid", frozen=True, use_attribute_docstrings=True, populate_by_name=True)


def dump(doc: CalibrationFile) -> str:
    """The file's text: YAML in the models' field order, the same bytes for the same calibration."""
    data = doc.model_dump(mode="json", by_alias=True, exclude_none=True)
    return yaml.safe_dump(data, sort_keys=False, default_flow_style=False, width=120, allow_unicode=True)


def schema() -> dict[str, Any]:
    """JSON Schema of calibration files."""
    return {"$schema": "https://json-schema.org/draft/2020-12/schema",
            "$id": "https://infra.dev/schemas/v1alpha1/calibration.json",
            **CalibrationFile.model_json_schema(by_alias=True, mode="validation")}


@dataclass(frozen=True)
class UserCalibration:
    """A loaded calibration file, ready to correct estimates."""

    doc: CalibrationFile
    sha256: str
    path: str

    @property
    def label(self) -> str:
        return f"{self.doc.metadata.name} sha256:{self.sha256[:12]}"

    def correction(self, dep: Deployment, wl: Workload | None = None) -> Correction | None:
        """The most specific correction that matches a deployment, or None when no level does."""
        node = match(self.doc.corrections, dep, wl)
        if node is None:
            return None
        when = "undated" if not node.first else node.first if node.first == node.last else f"{node.first}..{node.last}"
        stale = "" if self.doc.prior.data_sha256 == table().get("data_sha256", "") else self.doc.prior.fitted
        return Correction(node.step, node.ttft, node.level, node.key, node.rows, node.deployments, when, self.label,
                          stale, node.ttft_loads(), node.tails.pair() if node.tails else NO_TAILS, node.tail_loads())


def match(nodes: list[Node], dep: Deployment, wl: Workload | None) -> Node | None:
    """The most specific of `nodes` that matches a deployment: the deployment level only when the workload's mean
    lengths are within `WORKLOAD_MATCH` of the measured ones (the closest such), else the model, framework or
    device level."""
    keys = level_keys(dep)
    best: Node | None = None
    for node in nodes:
        if node.level == "deployment":
            if wl is None or not node.key.startswith(keys["deployment"] + "@"):
                continue
            assert node.isl is not None and node.osl is not None
            if not (_near(wl.isl, node.isl) and _near(wl.osl, node.osl)):
                continue
        elif node.key != keys[node.level]:
            continue
        if best is None or LEVELS.index(node.level) > LEVELS.index(best.level) or (
                node.level == best.level == "deployment" and _closer(wl, node, best)):
            best = node
    return best


def _near(a: float, b: float) -> bool:
    return abs(math.log(a / b)) <= math.log1p(WORKLOAD_MATCH)


def _closer(wl: Workload | None, a: Node, b: Node) -> bool:
    assert wl is not None and a.isl and a.osl and b.isl and b.osl
    def dist(n: Node) -> float:
        return abs(math.log(wl.isl / n.isl)) + abs(math.log(wl.osl / n.osl))  # type: ignore[operator]
    return (dist(a), a.key) < (dist(b), b.key)


def load_calibration(path: str | Path) -> UserCalibration:
    """Read and check a calibration file; a located one-line error otherwise."""
    path = Path(path)
    text = read_text(path, "calibration")
    data, smap = load_yaml(text, str(path))
    if not isinstance(data, dict) or data.get("kind") != "Calibration":
        found = data.get("kind") if isinstance(data, dict) else None
        raise InfraError(Problem(f"not a calibration file (kind {found!r})" if found else
                                 "not a calibration file (no kind: Calibration)", Location(str(path), 1, 1, "kind"),
                                 "give a file written by `infra calibrate ... -o FILE`"))
    try:
        doc = CalibrationFile.model_validate(data)
    except PydanticValidationError as exc:
        raise InfraError(problems_from_pydantic(exc, CalibrationFile, data, smap)[:1]) from None
    return UserCalibration(doc, hashlib.sha256(text.encode("utf-8")).hexdigest(), str(path))


__all__ = ["API_VERSION", "CalibrationFile", "Correction", "LEVELS", "NO_TAIL", "NO_TAILS", "Tail",
           "Tails", "UserCalibration", "dump", "layout", "level_keys", "load_calibration", "match", "scaled",
           "schema", "spread_by", "tail_words", "with_tails", "with_ttft"]
