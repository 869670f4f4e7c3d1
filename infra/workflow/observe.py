"""Measuring a deployment on its own traffic (`infra observe`): from its engine's `/metrics`, over a window
waited out now, or from the Prometheus server that scrapes its engines, over any window it has kept."""

from __future__ import annotations

import dataclasses
import datetime as dt
import hashlib
import json
import math
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx

from infra.bench.measurements import measured_deployment
from infra.bench.observe import (
    EXPORTERS,
    MIN_REQUESTS,
    NEEDED,
    Exporter,
    Observation,
    exporter,
    metrics_url,
    observation,
    observation_lines,
)
from infra.bench.promql import read_windows, selector, total
from infra.bench.replan import plan_loads
from infra.bench.run import pick_service
from infra.bench.scrape import Series, process_starts, snapshot
from infra.catalog.loader import load_catalog
from infra.errors import InfraError, Location, Problem
from infra.files import write_file
from infra.limits import MAX_SCRAPE_BYTES
from infra.perf.cases import case_from
from infra.planner.types import DeploymentPlan, load_plan
from infra.workflow.estimate import estimate

SCRAPE_TIMEOUT_S = 30.0
MAX_WAIT_S = 7 * 86400
"""Longest window observe waits out between two scrapes of an engine (Prometheus keeps longer ones)."""
MAX_WINDOWS = 2000
"""Windows one observation may be split into (a week in windows of five minutes; Prometheus answers a range query
with at most 11,000 points a series)."""


@dataclass(frozen=True)
class ObserveResult:
    """What a deployment served over a window, the windows written as load points, and the file written."""

    observation: Observation
    """The whole window (every window written, together)."""
    windows: tuple[tuple[Observation, dict[str, Any]], ...]
    """Each window written (one load point each) and the deployment that served it."""
    deployment: dict[str, Any]
    written: Path
    skipped: int = 0
    """Windows left out: fewer than `MIN_REQUESTS` finished in them, or no series matched."""
    predicted: tuple[dict[str, float] | None, ...] = ()
    """Each window's metrics (ms by objective key, `ttft_mean`, `tpot_p99` ...) as the performance model predicts
    them at its load, with the calibration `basis` names (None where the model has the load past what the
    deployment sustains)."""
    basis: str = ""
    """What those predictions rest on: the plan's calibration (a path), or the packaged prior ("")."""
    about: tuple[str, ...] = ()
    """What the windows say of the deployment against the plan (replicas counted, load far below the peak): part
    of the observation's notes."""


def _fetch(url: str, fix: str, params: dict[str, str] | None = None) -> str:
    """The body of a GET; a one-line error where it cannot be read or does not answer 200 (Prometheus's API
    answers 400 and 422 with a JSON error, which is returned for `promql.matrix` to word)."""
    try:
        with httpx.stream("GET", url, params=params, timeout=SCRAPE_TIMEOUT_S) as resp:
            if resp.status_code != 200 and not (params is not None and resp.status_code in (400, 422, 503) and
                                                resp.headers.get("content-type", "").startswith("application/json")):
                raise InfraError(Problem(f"answered HTTP {resp.status_code}", Location(url), fix))
            body = bytearray()
            for chunk in resp.iter_bytes():
                body += chunk
                if len(body) > MAX_SCRAPE_BYTES:
                    raise InfraError(Problem(f"answered more than {MAX_SCRAPE_BYTES >> 20} MiB; refused",
                                             Location(url), fix))
            return body.decode(resp.encoding or "utf-8", errors="replace")
    except httpx.HTTPError as exc:
        raise InfraError(Problem(f"cannot be read: {exc}", Location(url), fix)) from None


def end_time(text: str | None) -> dt.datetime:
    """The window's end: now, or an RFC 3339 time (UTC where it names no offset) or Unix seconds."""
    if text is None:
        return dt.datetime.now(dt.timezone.utc).replace(microsecond=0)
    try:
        when = (dt.datetime.fromtimestamp(float(text), dt.timezone.utc) if text.strip().replace(".", "", 1).isdigit()
                else dt.datetime.fromisoformat(text.strip()))
    except (ValueError, OverflowError, OSError):
        raise InfraError(Problem(f"{text!r} is not a time", Location(path="--end"),
                                 "give an RFC 3339 time (2026-12-06T10:00:00Z) or Unix seconds")) from None
    return when if when.tzinfo is not None else when.replace(tzinfo=dt.timezone.utc)


def _deployment(plan_doc: DeploymentPlan | None, plan: str | Path | None, service: str | None,
                allocation: int | None, deployment: dict[str, Any] | None,
                catalog_dirs: tuple[Path, ...]) -> dict[str, Any]:
    """The deployment observed, checked before any window is read or waited out."""
    fields = measured_deployment(plan_doc, plan, service, allocation, deployment) or {}
    missing = [f for f in ("model", "device") if f not in fields]
    if missing:
        raise InfraError(Problem(f"the deployment observed has no {' or '.join(missing)}", Location(path="--plan"),
                                 "give --plan PLAN [--service S] [--allocation N], or --model, --device, --framework "
                                 "and the layout (--tp ...)"))
    case_from({**fields, "isl": 1, "osl": 1, "rate": "1/s"}, Location(path="deployment")).deployment(
        load_catalog(catalog_dirs))
    return fields


def _whole_requests(fields: dict[str, Any], e: Exporter | None, where: str) -> None:
    """Refuse an engine's own series for a disaggregated deployment: each of its engines serves part of a request
    (a decode engine's TTFT starts once the remote prefill is done), so only a frontend that sees whole requests
    (Dynamo's) measures the deployment the plan predicts."""
    if fields.get("mode") == "disagg" and e is not None and not e.whole_requests:
        raise InfraError(Problem(f"{e.engine}'s engine metrics see part of each request of a disaggregated "
                                 "deployment (a decode engine's TTFT starts after the remote prefill)", Location(where),
                                 "observe the deployment's frontend (a Dynamo frontend's metrics), or measure its "
                                 "endpoint: infra verify PLAN --endpoint URL"))


def _from_engine(url: str, seconds: float, model_name: str | None, fields: dict[str, Any]) -> Observation:
    """Scrape the engine's /metrics, wait `seconds`, scrape again."""
    url = metrics_url(url)

    def scrape() -> tuple[dict[str, Series], tuple[float, ...]]:
        text = _fetch(url, "give the engine's base URL (http://HOST:PORT or .../v1); its /metrics must be reachable "
                           "from here (kubectl port-forward)")
        try:
            return snapshot(text, model_name), process_starts(text)
        except ValueError as exc:
            raise InfraError(Problem(f"not Prometheus text: {exc}", Location(url),
                                     "point at the /metrics of a vLLM engine or of `infra emulate`")) from None

    before, started = scrape()
    _whole_requests(fields, exporter(before), url)
    time.sleep(seconds)
    after, restarted = scrape()
    if started != restarted:
        raise InfraError(Problem("the two scrapes reached different engine processes (a restart, or a Service "
                                 "answering from another pod)", Location(url),
                                 "scrape one pod (kubectl port-forward pod/NAME), or read every replica's series "
                                 "from Prometheus (--prometheus)"))
    return observation(before, after, seconds, url, dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"))


def _spans(seconds: float, step: float | None) -> tuple[int, int]:
    """(how many windows, each one's seconds): the window, or as many whole steps as fit in it."""
    span = max(1, round(seconds))
    each = span if step is None else round(step)
    if each < 1 or each > span:
        raise InfraError(Problem(f"a step of {step:g} s does not split a window of {span} s", Location(path="--step"),
                                 "give a step of at least 1 s and at most --duration"))
    n = span // each
    if n > MAX_WINDOWS:
        raise InfraError(Problem(f"{n} windows of {each} s", Location(path="--step"),
                                 f"split the window into at most {MAX_WINDOWS} (a longer --step)"))
    return n, each


def _from_prometheus(base: str, seconds: float, step: float | None, labels: str | None, model_name: str | None,
                     end: dt.datetime, fields: dict[str, Any]
                     ) -> tuple[list[tuple[Observation, int]], Observation, int]:
    """The windows (`_spans`) ending at `end`, queried from a Prometheus server, each with the instances that
    served in it; those windows together; and how many were left out. Where one window is asked for, what keeps
    it out is an error."""
    parts = urlsplit(base)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise InfraError(Problem(f"{base!r} is not an http(s) URL", Location(path="--prometheus"),
                                 "give the Prometheus server's address, e.g. http://prometheus:9090"))
    api = base.rstrip("/").removesuffix("/api/v1") + "/api/v1/query_range"
    n, each = _spans(seconds, step)
    fix = "give the Prometheus server's address (http://HOST:9090); its API must be reachable from here"
    last = end.timestamp()
    params = {"start": f"{last - (n - 1) * each:.3f}", "end": f"{last:.3f}", "step": f"{each}s"}

    def ask(query: str) -> str:
        return _fetch(api, fix, {"query": query, **params})

    found: list[tuple[float, dict[str, Series], int]] = []
    for e in EXPORTERS:
        sel = selector(labels, model_name, e.latency.model_label)
        try:
            got = read_windows(ask, e.histograms, e.counters, sel, each, e.latency.ttft)
        except ValueError as exc:
            raise InfraError(Problem(f"Prometheus refused a query: {exc}", Location(api),
                                     "check --selector: label matchers as PromQL writes them, e.g. "
                                     "'namespace=\"llm\",service=\"chat\"'")) from None
        found = [(t, series, instances) for t, series, instances in got if exporter(series) is e]
        if found:
            _whole_requests(fields, e, api)
            break
    if not found:
        asked = selector(labels, model_name) or "any selector"
        raise InfraError(Problem(f"no series of {', '.join(NEEDED)} match {asked} in the {n * each} s before "
                                 f"{end.isoformat()}, nor SGLang's or Dynamo's",
                                 Location(api), "check --selector and --end, that Prometheus scrapes the engines "
                                 "(vLLM's request-level histograms, SGLang's metrics or a Dynamo frontend's), and "
                                 "that each window spans two scrapes or more"))
    source = f"{base.rstrip('/')} {sel or '{}'}"
    note = ("read from Prometheus: increase() over the window, every matching series added (its counts are "
            "extrapolated to the window's edges)")
    out, kept = [], []
    for t, series, instances in found:
        when = dt.datetime.fromtimestamp(t, dt.timezone.utc).isoformat(timespec="seconds")
        try:
            obs = observation({}, series, each, source, when)
        except InfraError:
            if n == 1:
                raise
            continue
        out.append((dataclasses.replace(obs, notes=obs.notes + (note,)), instances))
        kept.append(series)
    if not out:
        raise InfraError(Problem(f"none of the {n} windows of {each} s before {end.isoformat()} holds "
                                 f"{MIN_REQUESTS} finished requests", Location(api),
                                 "give a longer --step, or a --duration and --end where the deployment was busy"))
    whole = out[0][0]
    if len(out) > 1:
        whole = observation({}, total(kept), len(out) * each, source, out[-1][0].date)
        whole = dataclasses.replace(whole, notes=whole.notes + (note, f"{len(out)} windows of {each} s, each a load "
                                                                      "point; this summary is them together"))
    return out, whole, n - len(out)


def _plan_calibration(plan_doc: DeploymentPlan | None) -> str:
    """The calibration file the plan was made with, where it is still there unchanged; "" where there is none."""
    measured = plan_doc.spec.provenance.calibration.measured if plan_doc is not None else None
    if measured is None or not Path(measured.path).is_file():
        return ""
    return measured.path if hashlib.sha256(Path(measured.path).read_bytes()).hexdigest() == measured.sha256 else ""


def _predictions(windows: list[tuple[Observation, dict[str, Any]]], calibration: str,
                 catalog_dirs: tuple[Path, ...]) -> tuple[dict[str, float] | None, ...]:
    """Each window's metrics as the model predicts them for the deployment that served it at the load it served
    (ms by objective key: `ttft_mean`, `ttft_p99`, ... for TTFT, TPOT, ITL and E2E): what the measurement says of
    the figures a plan rests on, before calibrating on it."""
    out: list[dict[str, float] | None] = []
    for obs, deployment in windows:
        case = {**deployment, "isl": obs.isl, "osl": max(obs.osl, 1.0), "isl_cv": obs.isl_cv, "osl_cv": obs.osl_cv,
                "rate": obs.rate, "arrival_cv": 1.0, "prefix_hit": obs.prefix_hit}
        try:
            got = estimate(case, catalog_dirs, calibration=calibration or None)
        except InfraError:
            out.append(None)
            continue
        out.append({f"{metric}_{stat}": value for metric in ("ttft", "tpot", "itl", "e2e")
                    for stat, value in got[f"{metric}_ms"].items() if value is not None}
                   if got.get("stable") else None)
    return tuple(out)


FAR_BELOW_PEAK = 0.5
"""Share of the plan's peak rate below which every window's load is said to be far from it."""


def _against_peak(plan_doc: DeploymentPlan, service: str | None, allocation: int | None,
                  windows: list[tuple[Observation, dict[str, Any]]], plan: str | Path | None) -> tuple[str, ...]:
    """A note where every window served far less than the peak the plan sized the deployment for: the
    calibration is measured at the windows' loads and carried to the peak by the model."""
    name = pick_service(plan_doc, service, plan)
    peak = plan_loads(plan_doc, name, allocation)[0][1]
    busiest = max(obs.rate for obs, _ in windows)
    if peak is None or busiest >= FAR_BELOW_PEAK * peak:
        return ()
    return (f"the busiest window served {busiest:.3g}/s, {busiest / peak:.0%} of the {peak:.3g}/s peak the plan "
            "sized for: a calibration from it is measured at that load and carried to the peak by the model "
            "(a window of peak traffic measures the peak)",)


def _replicas(fields: dict[str, Any], windows: list[tuple[Observation, int]]
              ) -> tuple[list[tuple[Observation, dict[str, Any]]], tuple[str, ...]]:
    """The deployment that served each window: where neither the plan nor --workers says how many replicas, as
    many as instances served in it; and notes where they differ from the deployment's."""
    out, differ = [], []
    for obs, instances in windows:
        if "workers" not in fields and instances > 1:
            out.append((obs, {**fields, "workers": instances}))
        else:
            out.append((obs, fields))
            if instances and instances != fields.get("workers", 1):
                differ.append(instances)
    notes = []
    counted = sorted({dep.get("workers", 1) for _, dep in out})
    if "workers" not in fields and counted != [1]:
        notes.append(f"the deployment is taken as the instances that served each window: "
                     f"{', '.join(map(str, counted))} replica(s)")
    if differ:
        notes.append(f"{', '.join(map(str, sorted(set(differ))))} instance(s) served in {len(differ)} of "
                     f"{len(out)} window(s), the deployment has {fields.get('workers', 1)} replica(s): a scale-out "
                     "or pods replaced within them, or a selector wider than the deployment")
    return out, tuple(notes)


def observe(url: str | None, seconds: float, output: str | Path, *, plan: str | Path | None = None,
            service: str | None = None, allocation: int | None = None, deployment: dict[str, Any] | None = None,
            model_name: str | None = None, catalog_dirs: tuple[Path, ...] = (), force: bool = False,
            prometheus: str | None = None, labels: str | None = None, end: str | None = None,
            step: float | None = None) -> ObserveResult:
    """Write what a deployment served over a window as a measurement file `infra calibrate` reads
    (`infra.bench.observe`): from its engine's /metrics at `url` (scraped, `seconds` waited, scraped again), or
    from the Prometheus server at `prometheus` (the `seconds` before `end`, now by default, of the series the
    `labels` matchers select, every replica's added; split into windows of `step` seconds, each a load point).
    The deployment comes from `plan` (its `service`, `allocation`) and the `deployment` fields given, which
    override the plan's; `model_name` keeps the series of one served model. Nothing is written unless a window
    holds a measurement."""
    if (url is None) == (prometheus is None):
        raise InfraError(Problem("observe reads one source", Location(path="URL"),
                                 "give the engine's URL, or --prometheus URL (with --selector), not both"))
    if url is not None and (labels, end, step) != (None, None, None):
        flag = "--selector" if labels is not None else "--end" if end is not None else "--step"
        raise InfraError(Problem(f"{flag} reads Prometheus series", Location(path="--prometheus"),
                                 "give --prometheus URL, or leave it out"))
    if not (seconds > 0 and math.isfinite(seconds)):
        raise InfraError(Problem(f"a window of {seconds:g} s observes nothing", Location(path="--duration"),
                                 "give the window in seconds, e.g. --duration 600"))
    if url is not None and seconds > MAX_WAIT_S:
        raise InfraError(Problem(f"a window of {seconds:g} s is longer than observe waits ({MAX_WAIT_S:,} s)",
                                 Location(path="--duration"), "read a longer window from Prometheus (--prometheus)"))
    if step is not None and not (step > 0 and math.isfinite(step)):
        raise InfraError(Problem(f"a step of {step:g} s splits nothing", Location(path="--step"),
                                 "give the windows' length in seconds, e.g. --step 900"))
    ends = end_time(end)
    plan_doc = load_plan(plan) if plan is not None else None
    fields = _deployment(plan_doc, plan, service, allocation, deployment, catalog_dirs)
    if prometheus is not None:
        found, whole, skipped = _from_prometheus(prometheus, seconds, step, labels, model_name, ends, fields)
        windows, notes = _replicas(fields, found)
    else:
        whole, skipped, notes = _from_engine(str(url), seconds, model_name, fields), 0, ()
        windows = [(whole, fields)]
    if plan_doc is not None:
        notes += _against_peak(plan_doc, service, allocation, windows, plan)
    whole = dataclasses.replace(whole, notes=whole.notes + notes)
    basis = _plan_calibration(plan_doc)
    predicted = _predictions(windows, basis, catalog_dirs)
    lines = observation_lines(windows, whole, service)
    write_file(output, "".join(json.dumps(x, sort_keys=True) + "\n" for x in lines), force=force)
    return ObserveResult(whole, tuple(windows), fields, Path(output), skipped, predicted, basis, notes)


__all__ = ["ObserveResult", "end_time", "observe"]
