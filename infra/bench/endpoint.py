"""`infra bench --endpoint`: the load to send (from flags, an intent or a plan), the run, and its summary.

The workload and objectives come from `--plan` (a service of a DeploymentPlan) or `--intent` (a service of an
intent); flags override their rate or concurrency and their lengths. With neither, the run is a closed loop at
`--concurrency` (1 unless given) or an open Poisson loop at `--rate`, with the fixed lengths of the flags.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from infra.bench.client import BenchRun, ClientOptions, Progress, run
from infra.bench.metrics import RequestRecord, Summary, parse_objective, percentile_q, summarize
from infra.bench.workload import Load, generate
from infra.errors import IntentError, Location, Problem
from infra.intent.models import Workload

DEFAULT_REQUESTS = 100
"""Requests in a run bounded by neither --requests nor --duration."""
DURATION_CAP = 100_000
"""Requests prepared for a closed loop bounded only by --duration."""
DEFAULT_INPUT_TOKENS = 128
DEFAULT_OUTPUT_TOKENS = 64


@dataclass(frozen=True)
class Source:
    """What to send: the workload, its objectives (ms), and where relative trace paths start."""

    workload: Workload
    objectives: dict[str, float]
    base: Path
    service: str | None = None
    origin: str = "flags"


@dataclass
class EndpointResult:
    """A measured run against an endpoint."""

    run: BenchRun
    summary: Summary
    source: Source | None
    objectives: dict[str, float] = field(default_factory=dict)


def _pick(names: list[str], wanted: str | None, file: Path) -> int:
    if wanted is None:
        return 0
    if wanted not in names:
        raise IntentError(Problem(f"no service {wanted!r} (it has {', '.join(names)})", Location(str(file)),
                                  f"give --service one of {', '.join(names)}"))
    return names.index(wanted)


def source_from(intent: Path | None, plan: Path | None, service: str | None) -> Source | None:
    """The workload and objectives of one service of an intent or a plan (the first unless `service` is named)."""
    if intent is not None and plan is not None:
        raise IntentError(Problem("give --intent or --plan, not both", Location(path="--plan"),
                                  "drop one of them"))
    if plan is not None:
        from infra.planner.types import load_plan

        p = load_plan(plan)
        i = _pick([s.name for s in p.spec.services], service, plan)
        svc = p.spec.services[i]
        intent_path = Path(p.spec.provenance.intent)
        base = intent_path.parent if intent_path.is_absolute() else (plan.parent / intent_path).parent
        if not base.exists():
            base = Path(p.spec.provenance.intent).parent
        return Source(Workload.model_validate(svc.workload), dict(svc.objectives), base, svc.name, f"plan {plan}")
    if intent is not None:
        from infra.intent.loader import load_intent_file

        loaded = load_intent_file(intent)
        services = loaded.intent.spec.services
        i = _pick([s.name for s in services], service, intent)
        svc = services[i]
        return Source(svc.workload, {f"{m}_{q}": s * 1000.0 for m, q, s in svc.slo.targets()}, intent.parent,
                      svc.name, f"intent {intent}")
    return None


def parse_objectives(text: str) -> dict[str, float]:
    """`ttft_p99=300,tpot_p50=20` (milliseconds) -> {"ttft_p99": 300.0, ...}."""
    out: dict[str, float] = {}
    for part in filter(None, (p.strip() for p in text.split(","))):
        key, sep, value = part.partition("=")
        try:
            parse_objective(key.strip())
            out[key.strip()] = float(value.removesuffix("ms")) if sep else math.nan
        except ValueError as exc:
            raise IntentError(Problem(f"--slo item {part!r}: {exc}", Location(path="--slo"),
                                      "write e.g. --slo ttft_p99=300,tpot_p99=40 (milliseconds)")) from None
        if not sep or math.isnan(out[key.strip()]) or out[key.strip()] <= 0:
            raise IntentError(Problem(f"--slo item {part!r} has no positive bound in ms", Location(path="--slo"),
                                      "write e.g. --slo ttft_p99=300"))
    return out


def plan_load(source: Source | None, *, concurrency: int | None, rate: float | None, requests: int | None,
              duration_s: float | None, input_tokens: int | None, output_tokens: int | None,
              seed: int = 0) -> Load:
    """The requests to send: the source's workload (or flags alone), with the flags' overrides."""
    if concurrency is not None and rate is not None:
        raise IntentError(Problem("give --concurrency (closed loop) or --rate (open loop), not both",
                                  Location(path="--rate"), "drop one of them"))
    for flag, value in (("--concurrency", concurrency), ("--rate", rate), ("--requests", requests),
                        ("--duration", duration_s), ("--input-tokens", input_tokens),
                        ("--output-tokens", output_tokens)):
        if value is not None and value <= 0:
            raise IntentError(Problem(f"{flag} is {value}; it must be positive", Location(path=flag),
                                      f"give {flag} above 0"))
    if source is None:
        workload = Workload.model_validate({"rate": f"{rate}/s"} if rate is not None else
                                           {"concurrency": concurrency or 1})
        input_tokens = input_tokens or DEFAULT_INPUT_TOKENS
        output_tokens = output_tokens or DEFAULT_OUTPUT_TOKENS
        base = Path(".")
    else:
        workload, base = source.workload, source.base
    if requests is None:
        if duration_s is None:
            requests = DEFAULT_REQUESTS
        else:
            peak = rate or (workload.rate.peak_rps if workload.rate is not None and concurrency is None else None)
            requests = math.ceil(peak * duration_s) + 1 if peak else DURATION_CAP
    return generate(workload, requests=requests, seed=seed, base=base, rate=rate, concurrency=concurrency,
                    input_tokens=input_tokens, output_tokens=output_tokens)


def bench_endpoint(opts: ClientOptions, load: Load, source: Source | None, objectives: dict[str, float] | None = None,
                   progress: Progress | None = None) -> EndpointResult:
    """Run the load and summarise the measured requests against the objectives (the flags' over the source's)."""
    measured = run(load, opts, progress)
    slo = dict(source.objectives if source else {})
    slo.update(objectives or {})
    return EndpointResult(measured, summarize(measured.records, slo), source, slo)


@dataclass(frozen=True)
class ObjectiveCheck:
    """One objective against the measured distribution, failed requests counted as the worst values."""

    key: str
    target_ms: float
    measured_ms: float | None
    """inf when failed requests reach the percentile; None with no sample."""
    n: int
    passed: bool


_FAILED = 1e18
"""Stands for a failed request's latency: larger than any measurement, finite so that interpolation works."""


def check_objectives(records: list[RequestRecord], objectives: dict[str, float]) -> list[ObjectiveCheck]:
    """Each `metric_pNN` objective (ms) against the percentile of its distribution. TTFT, TPOT and E2E take one
    value per request, with every failed request counted as slower than any bound; ITL pools the gaps of the
    completed requests."""
    out = []
    done = [r for r in records if r.ok]
    n_failed = len(records) - len(done)
    for key, target in sorted(objectives.items()):
        metric, pct = parse_objective(key)
        if metric == "itl":
            values = np.fromiter((g for r in done for g in r.itl), dtype=float)
        else:
            per = {"ttft": lambda r: r.ttft, "tpot": lambda r: r.tpot, "e2e": lambda r: r.e2e}[metric]
            values = np.asarray([v for r in done if (v := per(r)) is not None] + [_FAILED] * n_failed, dtype=float)
        if values.size == 0:
            out.append(ObjectiveCheck(key, target, None, 0, False))
            continue
        value = float(np.percentile(values, percentile_q(pct)))
        measured = math.inf if value >= _FAILED / 10 else value * 1000.0
        out.append(ObjectiveCheck(key, target, measured, int(values.size), measured <= target))
    return out


def passed(result: EndpointResult) -> bool:
    """The verdict: every objective met; a run without objectives passes when no request failed."""
    if not result.objectives:
        return result.summary.failed == 0
    return all(c.passed for c in check_objectives(result.run.records, result.objectives))
