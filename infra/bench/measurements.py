"""Measurement files people already have, read as measured load points of known deployments for `infra calibrate`.

Formats: `infra bench --save` runs (JSON Lines: `case` lines record their deployment; a run without a plan gives
its summary and requests, and the deployment from the command line), the silicon CSV format of the calibration
set (one row per deployment and load), and the result files of the common serving benchmarks
(`infra.bench.results`: vLLM, SGLang, GenAI-Perf, AIPerf, GuideLLM), which record the load but seldom the
deployment: that comes from `--plan PLAN [--service S]` or flags (`--model --device --framework --precision --tp
...`). A file that cannot be read is a one-line error naming it and the format tried; entries that cannot be used
are listed with their place and reason, never dropped silently.
"""

from __future__ import annotations

import hashlib
import json
import math
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from infra.bench.engine import plan_allocation
from infra.bench.metrics import distribution
from infra.bench.results import ResultPoint, cv_of, read_results
from infra.bench.run import allocation_deployment, pick_service
from infra.catalog.loader import Catalog
from infra.errors import InfraError, Location, Problem
from infra.limits import MAX_RECORDS_BYTES, read_jsonl, read_limited
from infra.perf.cases import EstimateCase, case_from, measured_wave
from infra.perf.correction import load_calibration
from infra.perf.recalibrate import Measured
from infra.perf.rows import REQUIRED_COLUMNS, Case, load_rows, to_case
from infra.perf.serving import PERCENTILES

MAX_BYTES = MAX_RECORDS_BYTES
"""Largest measurement file read: these come from other teams and pull requests."""
BOUNDS = {"ttft_ms": (0.01, 3.6e6), "tpot_ms": (0.01, 6e4), "isl": (1.0, 1e7), "osl": (1.0, 1e7)}
"""What a measured point may hold: a first token within a hundredth of a millisecond to an hour, a token every
hundredth of a millisecond to a minute, lengths of one to ten million tokens. Past them a number is a unit or
a recording error (microseconds read as milliseconds, a total read as a mean), and fitting to it would bend the
corrections of every plan on that device."""
DEPLOYMENT_FIELDS = ("model", "device", "framework", "precision", "mode", "tp", "pp", "ep", "moe_tp", "dp", "batch",
                     "workers", "max_num_tokens", "prefill", "decode", "memory_utilization")
"""Fields of an estimate case that describe the deployment rather than its load."""


@dataclass
class Source:
    """One file read: what it held and what of it was used."""

    path: str
    sha256: str
    format: str
    points: list[Measured] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    """`place: why` for every entry that could not be used."""

    def record(self) -> dict[str, Any]:
        return {"path": self.path, "sha256": self.sha256, "format": self.format, "points": len(self.points),
                "skipped": list(self.skipped)}


def deployment_of_plan(plan: Any, service: str | None, plan_path: str, allocation: int | None = None
                       ) -> dict[str, Any]:
    """The deployment fields of a plan's service (of its `allocation`, when measured apart), as an estimate case
    spells them; a service of several allocations without one named is refused (a measurement of the whole
    service cannot say which one served each request)."""
    name = pick_service(plan, service, plan_path)
    svc, alloc = plan_allocation(plan, name, allocation or 0)
    if allocation is None and len(svc.allocations) != 1:
        raise InfraError(Problem(f"service {name} has {len(svc.allocations)} allocations; a benchmark of it "
                                 "cannot say which one served each request", Location(plan_path, path="spec.services"),
                                 "measure one allocation's pods on their own and name it with --allocation N, or "
                                 "give the deployment with --model/--device/--framework/--tp"))
    return allocation_deployment(svc, alloc)


def measured_deployment(plan: Any, plan_path: str | Path | None, service: str | None, allocation: int | None,
                        given: dict[str, Any] | None) -> dict[str, Any] | None:
    """The deployment fields a measurement is filed under: the plan's service (its `allocation`), overridden by
    the `given` fields that are set; None when neither says anything."""
    fields = {k: v for k, v in (given or {}).items() if v is not None}
    unknown = sorted(set(fields) - set(DEPLOYMENT_FIELDS))
    if unknown:
        raise InfraError(Problem(f"{', '.join(unknown)} do not describe a deployment", Location(path="deployment"),
                                 f"use {', '.join(DEPLOYMENT_FIELDS)}"))
    base = deployment_of_plan(plan, service, str(plan_path), allocation) if plan is not None else None
    return {**(base or {}), **fields} if base is not None or fields else None


def _read(path: Path) -> bytes:
    try:
        return read_limited(path, "measurement", MAX_BYTES)
    except FileNotFoundError:
        raise InfraError(Problem("measurement file not found", Location(str(path), 1, 1), "check the path")) from None
    except IsADirectoryError:
        raise InfraError(Problem("measurement path is a directory", Location(str(path), 1, 1),
                                 "give the result files inside it")) from None
    except OSError as exc:
        raise InfraError(Problem(f"cannot read measurement file: {exc.strerror}", Location(str(path), 1, 1),
                                 "check the file's permissions")) from None


def _kind(data: bytes) -> str:
    """`silicon-csv`, `infra-bench`, `infra-observe` (a deployment's own traffic, `infra observe`: its case lines
    are labelled `observed`) or `other` (left to `infra.bench.results`)."""
    head = data[:4096].decode("utf-8", errors="replace")
    first = head.splitlines()[0] if head else ""
    if all(c in first.split(",") for c in REQUIRED_COLUMNS):
        return "silicon-csv"
    try:
        obj = json.loads(first)
    except (ValueError, RecursionError):  # a line of brackets is no infra-bench record
        return "other"
    if not isinstance(obj, dict) or obj.get("kind") not in ("request", "case", "summary"):
        return "other"
    return "infra-observe" if obj.get("label") == "observed" else "infra-bench"


def _case(fields: dict[str, Any], where: Location, catalog: Catalog, ttft: float, tpot: float, source: str,
          date: str | None, tails: tuple[tuple[str, str, float], ...] = (), samples: int = 0,
          own_client: bool = False, steady: bool = False) -> Measured:
    """A measured point; `own_client` where `infra bench` measured it, whose closed loop's first wave (every client
    starting at once, measured with the rest) is the clients' share of the `samples` requests (`Case.wave`), or
    none where it was judged past its start-up (`steady`: `measured_wave`)."""
    if own_client and samples and fields.get("concurrency") and not steady:
        fields = {**fields, "requests": samples}
    est: EstimateCase = case_from(fields, where)
    dep = est.deployment(catalog)
    return Measured(Case({"source": source}, f"{dep.framework}/{dep.device}", dep.model, dep, est.workload(), ttft,
                         tpot, recipe=False, wave=measured_wave(est, steady), tails=tails, samples=samples),
                    source, date)


def _as_tails(tails: dict[str, dict[str, float]]) -> tuple[tuple[str, str, float], ...]:
    """`ResultPoint.tails` as `Case.tails`."""
    return tuple((metric.removesuffix("_ms"), pct, ms) for metric in ("ttft_ms", "tpot_ms")
                 for pct, ms in tails.get(metric, {}).items())


def _summary_tails(summary: dict[str, Any]) -> dict[str, dict[str, float]]:
    """The percentiles of TTFT and TPOT an `infra bench` summary (`metrics.summarize`) or case line records."""
    out: dict[str, dict[str, float]] = {}
    for metric in ("ttft_ms", "tpot_ms"):
        stats = summary.get(metric)
        if not isinstance(stats, dict):
            continue
        got = {p: float(v) for p, v in stats.items() if p in PERCENTILES and isinstance(v, (int, float))
               and math.isfinite(v) and v > 0}
        if got:
            out[metric] = got
    return out


def _silicon(path: Path, data: bytes, catalog: Catalog, src: Source) -> None:
    rows = load_rows(path)
    for n, row in enumerate(rows, 2):
        case = to_case(row, catalog)
        if isinstance(case, str):
            src.skipped.append(f"{path}:{n}: {case}")
            continue
        date = next((p.split("=", 1)[1] for p in row.get("silicon_data_source", "").split("; ")
                     if p.startswith("measured=")), None)
        src.points.append(Measured(case, f"{path}:{n}", date))


def _infra_bench(path: Path, data: bytes, deployment: dict[str, Any] | None, catalog: Catalog, src: Source) -> None:
    lines = read_jsonl(path, "measurements file", "give a file written by `infra bench --save`")
    cases = [(n, o) for n, o in lines if o.get("kind") == "case"]
    for n, obj in cases:
        where = Location(str(path), n, 1, "case")
        try:
            ttft, tpot = float(obj["ttft_ms"]), float(obj["tpot_ms"])
            if not (math.isfinite(ttft) and math.isfinite(tpot) and ttft > 0 and tpot > 0):
                raise ValueError
            if not isinstance(obj.get("case"), dict):
                raise KeyError
            pcts = obj.get("percentiles")
            tails = _as_tails(_summary_tails(pcts if isinstance(pcts, dict) else {}))
            src.points.append(_case(obj["case"], where, catalog, ttft, tpot, f"{path}:{n}", obj.get("date"), tails,
                                    int(obj.get("requests") or 0), own_client=True, steady=obj.get("steady") is True))
        except (KeyError, TypeError, ValueError):
            src.skipped.append(f"{path}:{n}: a case line needs a `case` object and positive ttft_ms and tpot_ms")
        except InfraError as exc:
            src.skipped.append(f"{path}:{n}: {exc.problems[0].message}")
    if cases:
        return
    summary = next(((n, o) for n, o in lines if o.get("kind") == "summary"), None)
    if summary is None:
        raise InfraError(Problem("infra-bench run: no case or summary line", Location(str(path), 1, 1),
                                 "give a file written by `infra bench --save`"))
    n, s = summary
    requests = [o for _, o in lines if o.get("kind") == "request" and not o.get("error")]
    if deployment is None:
        raise InfraError(Problem("infra-bench run of an endpoint without a plan: it does not record the deployment",
                                 Location(str(path), n, 1), "give --plan PLAN [--service S], or --model, --device, "
                                 "--framework and the layout (--tp ...)"))
    ins = [float(o["input_tokens"]) for o in requests if o.get("input_tokens")]
    outs = [float(o["output_tokens"]) for o in requests if o.get("output_tokens")]
    load = s.get("load") if isinstance(s.get("load"), dict) else {}
    warm = type(load.get("warm_up")) is int and load["warm_up"] > 0
    varied = bool(ins and outs) and (cv_of(ins) > 0 or cv_of(outs) > 0)
    if warm and not varied:
        # The summary judged what followed the start-up, but clients whose lengths all match stay in step, which
        # the model prices over the whole run with its first wave: every completed request, as `_group_cases`.
        got = {m: distribution(float(v) / 1000 for o in requests if _positive(v := o.get(m)))
               for m in ("ttft_ms", "tpot_ms")}
        s = {**s, **{m: {"mean": d.mean, **d.percentiles} for m, d in got.items()}}
    try:
        ttft, tpot = float(s["ttft_ms"]["mean"]), float(s["tpot_ms"]["mean"])
        if not (ins and outs and ttft > 0 and tpot > 0):
            raise ValueError
    except (KeyError, TypeError, ValueError):
        raise InfraError(Problem("infra-bench run: the summary has no mean ttft_ms and tpot_ms, or no request "
                                 "completed", Location(str(path), n, 1),
                                 "give a run with completed requests")) from None
    steady = warm and varied
    point = ResultPoint(f"{path}:{n}", "infra-bench", ttft, tpot, sum(ins) / len(ins), sum(outs) / len(outs),
                        load.get("concurrency"), load.get("rate_rps"),
                        int(s.get("completed") or 0) if steady else len(requests), s.get("date"), None, None,
                        cv_of(ins), cv_of(outs), tails=_summary_tails(s), prefix_hit=_share(load.get("prefix_hit")),
                        steady=steady)
    _from_point(point, deployment, catalog, src)


def _share(value: Any) -> float:
    """A saved share (0..1), 0 where the file has none."""
    return float(value) if _positive(value) and value <= 1 else 0.0


def _positive(value: Any) -> bool:
    """A measured time: a finite number above 0."""
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) and value > 0


def _from_point(p: ResultPoint, deployment: dict[str, Any] | None, catalog: Catalog, src: Source) -> None:
    fields = dict(deployment or {})
    if "model" not in fields and p.model:
        fields["model"] = p.model
    if "framework" not in fields and p.framework:
        fields["framework"] = p.framework
    missing = [f for f in ("model", "device") if f not in fields]
    if missing:
        raise InfraError(Problem(f"{p.format} result does not record the {' or '.join(missing)} it measured",
                                 Location(p.source), "give --plan PLAN [--service S], or --model, --device, "
                                 "--framework and the layout (--tp ...)"))
    concurrency = p.concurrency
    if concurrency is None and p.rate is None:
        # Every request sent at once: one wave of that many clients.
        concurrency = p.requests
    fields.update(isl=max(1, round(p.isl)), osl=max(1, round(p.osl)), isl_cv=round(p.isl_cv, 4),
                  osl_cv=round(p.osl_cv, 4), **({"prefix_hit": p.prefix_hit} if p.prefix_hit else {}))
    if concurrency is not None:
        fields["concurrency"] = int(concurrency)
    else:
        fields["rate"] = f"{p.rate:.6g}/s"
    try:
        src.points.append(_case(fields, Location(p.source), catalog, p.ttft_ms, p.tpot_ms, p.source, p.date,
                                _as_tails(p.tails), p.requests, own_client=p.format == "infra-bench",
                                steady=p.steady))
    except InfraError as exc:
        src.skipped.append(f"{p.source}: {exc.problems[0].message}")


def _implausible(m: Measured) -> str | None:
    """Why a point's figures cannot be a measurement (`BOUNDS`), or None."""
    wl = m.case.workload
    for name, value in (("ttft_ms", m.case.ttft_ms), ("tpot_ms", m.case.tpot_ms), ("isl", wl.isl), ("osl", wl.osl)):
        lo, hi = BOUNDS[name]
        if not lo <= value <= hi:
            return f"{name} {value:g} is outside {lo:g}..{hi:g}, not a plausible measurement"
    return None


def _implausible_tails(m: Measured) -> str | None:
    """Why a point's percentiles cannot be a measurement: one outside `BOUNDS`, or a higher percentile below a
    lower one of the same metric."""
    last: dict[str, tuple[float, str, float]] = {}
    for metric, pct, ms in sorted(m.case.tails, key=lambda t: (t[0], float(t[1][1:]))):
        lo, hi = BOUNDS[f"{metric}_ms"]
        if not lo <= ms <= hi:
            return f"{metric} {pct} {ms:g} ms is outside {lo:g}..{hi:g}"
        q = float(pct[1:])
        if metric in last and ms < last[metric][2] and q > last[metric][0]:
            return f"{metric} {pct} {ms:g} ms is below its {last[metric][1]} {last[metric][2]:g} ms"
        last[metric] = (q, pct, ms)
    return None


def read_measurements(path: str | Path, deployment: dict[str, Any] | None, catalog: Catalog) -> Source:
    """The measured points of one file, with the deployment given (from a plan or flags) where the file does not
    record it."""
    path = Path(path)
    data = _read(path)
    src = Source(str(path), hashlib.sha256(data).hexdigest(), _kind(data))
    if src.format == "silicon-csv":
        _silicon(path, data, catalog, src)
    elif src.format in ("infra-bench", "infra-observe"):
        _infra_bench(path, data, deployment, catalog, src)
    else:
        results = read_results(path)
        src.format = results.format
        src.skipped += [f"{where}: {why}" for where, why in results.bad]
        for p in results.points:
            _from_point(p, deployment, catalog, src)
    kept = []
    for m in src.points:
        why = _implausible(m)
        if why:
            src.skipped.append(f"{m.source}: {why}")
            continue
        why = _implausible_tails(m)
        if why:
            src.skipped.append(f"{m.source}: its percentiles are not used ({why}); its means are")
            m = replace(m, case=replace(m.case, tails=()))
        kept.append(m)
    src.points = kept
    if not src.points:
        why = f"; {src.skipped[0]}" + (f" (and {len(src.skipped) - 1} more)" if len(src.skipped) > 1 else "") \
            if src.skipped else ""
        raise InfraError(Problem(f"{src.format}: no usable measurement{why}", Location(str(path)),
                                 "give measurements of catalog models and devices"))
    return src


SELF_DESCRIBING = ("infra-bench", "infra-observe", "silicon-csv")
"""Formats whose files record the deployment they measured, so they can be read again without the plan or flags
they were first read with."""


def earlier_measurements(plan: Any) -> list[Path]:
    """The files of the calibration a plan was made with that still hold what it read (same SHA-256) and record
    their own deployment, so that verifying again adds to the measurements rather than replacing them."""
    measured = plan.spec.provenance.calibration.measured
    if measured is None or not Path(measured.path).is_file():
        return []
    try:
        doc = load_calibration(measured.path).doc
    except InfraError:
        return []
    return [Path(s.path) for s in doc.sources if s.format in SELF_DESCRIBING and Path(s.path).is_file()
            and hashlib.sha256(Path(s.path).read_bytes()).hexdigest() == s.sha256]


__all__ = ["DEPLOYMENT_FIELDS", "MAX_BYTES", "SELF_DESCRIBING", "Source", "deployment_of_plan", "earlier_measurements",
           "read_measurements"]
