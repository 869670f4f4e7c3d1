"""Measuring a deployment on its own traffic (`infra observe`)."""

from __future__ import annotations

import datetime as dt
import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from infra.bench.measurements import measured_deployment
from infra.bench.observe import Observation, metrics_url, observation, observation_lines
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


def _fetch(url: str) -> str:
    try:
        resp = httpx.get(url, timeout=SCRAPE_TIMEOUT_S)
    except httpx.HTTPError as exc:
        raise InfraError(Problem(f"cannot be read: {exc}", Location(url),
                                 "give the engine's base URL (http://HOST:PORT or .../v1); its /metrics must be "
                                 "reachable from here (kubectl port-forward)")) from None
    if resp.status_code != 200:
        raise InfraError(Problem(f"answered HTTP {resp.status_code}", Location(url),
                                 "give the engine's base URL; vLLM serves /metrics beside /v1"))
    return resp.text


def observe(url: str, seconds: float, output: str | Path, *, plan: str | Path | None = None,
            service: str | None = None, allocation: int | None = None, deployment: dict[str, Any] | None = None,
            model_name: str | None = None, catalog_dirs: tuple[Path, ...] = (), force: bool = False) -> ObserveResult:
    """Scrape a deployed engine's /metrics, wait `seconds`, scrape again, and write what it served in between as
    a measurement file `infra calibrate` reads (`infra.bench.observe`). The deployment comes from `plan` (its
    `service`, `allocation`) and the `deployment` fields given, which override the plan's; `model_name` keeps the
    series of one served model. Nothing is written unless the window holds a measurement."""
    if not seconds > 0:
        raise InfraError(Problem(f"a window of {seconds:g} s observes nothing", Location(path="--duration"),
                                 "give the window in seconds, e.g. --duration 600"))
    fields = measured_deployment(load_plan(plan) if plan is not None else None, plan, service, allocation,
                                 deployment) or {}
    missing = [f for f in ("model", "device") if f not in fields]
    if missing:
        raise InfraError(Problem(f"the deployment observed has no {' or '.join(missing)}", Location(path="--plan"),
                                 "give --plan PLAN [--service S] [--allocation N], or --model, --device, --framework "
                                 "and the layout (--tp ...)"))
    # The deployment is checked before the window is waited out, not after.
    case_from({**fields, "isl": 1, "osl": 1, "rate": "1/s"}, Location(path="deployment")).deployment(
        load_catalog(catalog_dirs))
    url = metrics_url(url)

    def scrape() -> Any:
        try:
            return snapshot(_fetch(url), model_name)
        except ValueError as exc:
            raise InfraError(Problem(f"not Prometheus text: {exc}", Location(url),
                                     "point at the /metrics of a vLLM engine or of `infra emulate`")) from None

    before = scrape()
    time.sleep(seconds)
    obs = observation(before, scrape(), seconds, url,
                      dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"))
    lines = observation_lines(obs, fields, service)
    write_file(output, "".join(json.dumps(x, sort_keys=True) + "\n" for x in lines), force=force)
    return ObserveResult(obs, fields, Path(output))


__all__ = ["ObserveResult", "observe"]
