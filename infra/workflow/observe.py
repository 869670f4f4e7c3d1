"""Measuring a deployment on its own traffic (`infra observe`): from its engine's `/metrics`, over a window
waited out now, or from the Prometheus server that scrapes its engines, over any window it has kept."""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx

from infra.bench.measurements import measured_deployment
from infra.bench.observe import NEEDED, TTFT, Observation, metrics_url, observation, observation_lines
from infra.bench.promql import read_window, selector
from infra.bench.scrape import snapshot
from infra.catalog.loader import load_catalog
from infra.errors import InfraError, Location, Problem
from infra.files import write_file
from infra.perf.cases import case_from
from infra.planner.types import load_plan

SCRAPE_TIMEOUT_S = 30.0


@dataclass(frozen=True)
class ObserveResult:
    """A window of a deployment's traffic and the measurement file written of it."""

    observation: Observation
    deployment: dict[str, Any]
    written: Path


def _fetch(url: str, fix: str, params: dict[str, str] | None = None) -> str:
    """The body of a GET; a one-line error where it cannot be read or does not answer 200 (Prometheus's API
    answers 400 and 422 with a JSON error, which is returned for `promql.vector` to word)."""
    try:
        resp = httpx.get(url, params=params, timeout=SCRAPE_TIMEOUT_S)
    except httpx.HTTPError as exc:
        raise InfraError(Problem(f"cannot be read: {exc}", Location(url), fix)) from None
    if resp.status_code != 200 and not (params is not None and resp.status_code in (400, 422, 503)
                                        and resp.headers.get("content-type", "").startswith("application/json")):
        raise InfraError(Problem(f"answered HTTP {resp.status_code}", Location(url), fix))
    return resp.text


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


def _deployment(plan: str | Path | None, service: str | None, allocation: int | None,
                deployment: dict[str, Any] | None, catalog_dirs: tuple[Path, ...]) -> dict[str, Any]:
    """The deployment observed, checked before any window is read or waited out."""
    fields = measured_deployment(load_plan(plan) if plan is not None else None, plan, service, allocation,
                                 deployment) or {}
    missing = [f for f in ("model", "device") if f not in fields]
    if missing:
        raise InfraError(Problem(f"the deployment observed has no {' or '.join(missing)}", Location(path="--plan"),
                                 "give --plan PLAN [--service S] [--allocation N], or --model, --device, --framework "
                                 "and the layout (--tp ...)"))
    case_from({**fields, "isl": 1, "osl": 1, "rate": "1/s"}, Location(path="deployment")).deployment(
        load_catalog(catalog_dirs))
    return fields


def _from_engine(url: str, seconds: float, model_name: str | None) -> Observation:
    """Scrape the engine's /metrics, wait `seconds`, scrape again."""
    url = metrics_url(url)

    def scrape() -> Any:
        text = _fetch(url, "give the engine's base URL (http://HOST:PORT or .../v1); its /metrics must be reachable "
                           "from here (kubectl port-forward)")
        try:
            return snapshot(text, model_name)
        except ValueError as exc:
            raise InfraError(Problem(f"not Prometheus text: {exc}", Location(url),
                                     "point at the /metrics of a vLLM engine or of `infra emulate`")) from None

    before = scrape()
    time.sleep(seconds)
    return observation(before, scrape(), seconds, url,
                       dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"))


def _from_prometheus(base: str, seconds: float, labels: str | None, model_name: str | None, end: dt.datetime
                     ) -> tuple[Observation, int]:
    """The window of `seconds` ending at `end`, queried from a Prometheus server, and the instances that served
    in it."""
    parts = urlsplit(base)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise InfraError(Problem(f"{base!r} is not an http(s) URL", Location(path="--prometheus"),
                                 "give the Prometheus server's address, e.g. http://prometheus:9090"))
    api = base.rstrip("/").removesuffix("/api/v1") + "/api/v1/query"
    span = max(1, round(seconds))
    sel = selector(labels, model_name)
    fix = "give the Prometheus server's address (http://HOST:9090); its API must be reachable from here"

    def ask(query: str) -> str:
        return _fetch(api, fix, {"query": query, "time": f"{end.timestamp():.3f}"})

    source = f"{base.rstrip('/')} {sel or '{}'}"
    try:
        got, instances = read_window(ask, NEEDED, sel, span, TTFT)
    except ValueError as exc:
        raise InfraError(Problem(f"Prometheus refused a query: {exc}", Location(api),
                                 "check --selector: label matchers as PromQL writes them, e.g. "
                                 "'namespace=\"llm\",service=\"chat\"'")) from None
    missing = [name for name in NEEDED if name not in got]
    if missing:
        raise InfraError(Problem(f"no series of {', '.join(missing)} match {sel or 'any selector'} in the "
                                 f"{span} s before {end.isoformat()}", Location(api),
                                 "check --selector and --end, and that Prometheus scrapes the engines (vLLM's "
                                 "request-level histograms)"))
    obs = observation({}, got, span, source, end.isoformat(timespec="seconds"))
    notes = ("read from Prometheus: increase() over the window, every matching series added (its counts are "
             "extrapolated to the window's edges)",)
    return dataclasses.replace(obs, notes=obs.notes + notes), instances


def observe(url: str | None, seconds: float, output: str | Path, *, plan: str | Path | None = None,
            service: str | None = None, allocation: int | None = None, deployment: dict[str, Any] | None = None,
            model_name: str | None = None, catalog_dirs: tuple[Path, ...] = (), force: bool = False,
            prometheus: str | None = None, labels: str | None = None, end: str | None = None) -> ObserveResult:
    """Write what a deployment served over a window as a measurement file `infra calibrate` reads
    (`infra.bench.observe`): from its engine's /metrics at `url` (scraped, `seconds` waited, scraped again), or
    from the Prometheus server at `prometheus` (the `seconds` before `end`, now by default, of the series the
    `labels` matchers select, every replica's added). The deployment comes from `plan` (its `service`,
    `allocation`) and the `deployment` fields given, which override the plan's; `model_name` keeps the series of
    one served model. Nothing is written unless the window holds a measurement."""
    if (url is None) == (prometheus is None):
        raise InfraError(Problem("observe reads one source", Location(path="URL"),
                                 "give the engine's URL, or --prometheus URL (with --selector), not both"))
    if url is not None and (labels is not None or end is not None):
        raise InfraError(Problem(f"{'--selector' if labels is not None else '--end'} selects Prometheus series",
                                 Location(path="--prometheus"), "give --prometheus URL, or leave it out"))
    if not seconds > 0:
        raise InfraError(Problem(f"a window of {seconds:g} s observes nothing", Location(path="--duration"),
                                 "give the window in seconds, e.g. --duration 600"))
    ends = end_time(end)
    fields = _deployment(plan, service, allocation, deployment, catalog_dirs)
    if prometheus is not None:
        obs, instances = _from_prometheus(prometheus, seconds, labels, model_name, ends)
        if "workers" not in fields and instances > 1:
            fields = {**fields, "workers": instances}
            obs = dataclasses.replace(obs, notes=obs.notes + (f"{instances} instances served in the window: the "
                                                              f"deployment is taken as {instances} replicas",))
        elif instances and instances != fields.get("workers", 1):
            obs = dataclasses.replace(obs, notes=obs.notes + (
                f"{instances} instance(s) served in the window, the deployment has {fields.get('workers', 1)} "
                "replica(s): a scale-out or pods replaced within it, or a selector wider than the deployment",))
    else:
        obs = _from_engine(str(url), seconds, model_name)
    lines = observation_lines(obs, fields, service)
    write_file(output, "".join(json.dumps(x, sort_keys=True) + "\n" for x in lines), force=force)
    return ObserveResult(obs, fields, Path(output))


__all__ = ["ObserveResult", "end_time", "observe"]
