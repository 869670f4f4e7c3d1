"""`infra bench --endpoint`: the load to send (from flags, an intent or a plan), the run, and its summary.

The workload and objectives come from `--plan` (a service of a DeploymentPlan) or `--intent` (a service of an
intent); flags override their rate or concurrency and their lengths. With neither, the run is a closed loop at
`--concurrency` (1 unless given) or an open Poisson loop at `--rate`, with the fixed lengths of the flags.

Every flag is bounded (`LIMITS`), so that no run is endless or asks for more memory than a machine has: rates
from `MIN_RATE_RPS` to `MAX_RATE_RPS`, at most `MAX_REQUESTS` requests, and a run without `--duration` stops
sending after `client.RUN_CAP_S` (its note says so). Failed requests beyond `--max-failed` (default
`DEFAULT_MAX_FAILED`) fail the run, with or without objectives (the rule: `infra.bench.verdict`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np

from infra.bench.client import MAX_USAGE_TOKENS, BenchRun, ClientOptions, Progress, run
from infra.bench.engine import plan_allocation
from infra.bench.metrics import RequestRecord, Summary, parse_objective, summarize
from infra.bench.run import BenchResult, _group_cases, past_start_up, predicted, warm_up_notes
from infra.bench.verdict import DEFAULT_MAX_FAILED, judge
from infra.bench.workload import Load, generate
from infra.errors import IntentError, Location, Problem
from infra.intent.loader import load_intent_file
from infra.intent.models import Workload
from infra.intent.units import MAX_RATE_RPS, parse_duration
from infra.perf.cases import parse_slo
from infra.planner.types import load_plan

DEFAULT_REQUESTS = 100
"""Requests in a run bounded by neither --requests nor --duration."""
ROUNDS_PER_CLIENT = 10
"""Requests per client a closed loop bounded by neither sends, when that is more than `DEFAULT_REQUESTS`: its
verdict leaves out the start-up (`infra.bench.run.past_start_up`), a round or two, and a run of no more than
twice its clients would be judged with its start-up wave in it."""
DURATION_CAP = 100_000
"""Requests prepared for a closed loop bounded only by --duration."""
DEFAULT_INPUT_TOKENS = 128
DEFAULT_OUTPUT_TOKENS = 64
PROMPT_NOTE = ("prompts are built as N short common words for N input tokens (about one token each in current "
               "LLM vocabularies); input tokens report the server's usage.prompt_tokens")
APPROX_NOTE = ("output tokens of {n} request(s) were counted as stream chunks: the server sent no usable usage, "
               "and a chunk may carry several tokens, so their TPOT is approximate")
BAD_USAGE_NOTE = ("{n} request(s) reported usage that cannot be token counts (e.g. {example}); it was treated as "
                  "not reported: input tokens are the prompt's words, output tokens the stream's chunks")
MIN_RATE_RPS = 1e-3
"""Slowest open loop: one request every 1,000 s; the default 100 requests at that rate already take 28 hours."""
MAX_REQUESTS = 1_000_000
"""Most requests one run prepares (their specs and records stay in memory: hundreds of MB at this size)."""
MAX_CONCURRENCY = 10_000
"""Most closed-loop clients: each holds a connection, and a process's descriptors run out in the tens of
thousands."""
MAX_DURATION_S = 7 * 86_400.0
"""Longest --duration: a week, longer than any soak test run from one client."""
MAX_WARMUP = 1_000
MAX_TIMEOUT_S = 3_600.0
"""Longest --timeout: an hour per request, far beyond any streamed answer a client waits for."""

LIMITS: dict[str, tuple[float, float, bool, str]] = {
    "--concurrency": (1, MAX_CONCURRENCY, False, ""), "--rate": (MIN_RATE_RPS, MAX_RATE_RPS, False, "/s"),
    "--requests": (1, MAX_REQUESTS, False, ""), "--duration": (0.0, MAX_DURATION_S, True, " s"),
    "--input-tokens": (1, MAX_USAGE_TOKENS, False, ""), "--output-tokens": (1, MAX_USAGE_TOKENS, False, ""),
    "--warmup": (0, MAX_WARMUP, False, ""), "--timeout": (0.0, MAX_TIMEOUT_S, True, " s"),
    "--max-failed": (0.0, 1.0, False, ""),
}
"""flag -> (lowest, highest, whether the lowest itself is refused, unit)."""


@dataclass(frozen=True)
class Source:
    """What to send: the workload, its objectives (ms), and where relative trace paths start."""

    workload: Workload
    objectives: dict[str, float]
    base: Path
    service: str | None = None
    origin: str = "flags"
    predicted: dict[str, float] | None = None
    """The plan's predicted value per objective (ms), shown beside the measurement."""
    attainment: float | None = None
    """The intent's attainment target."""
    plan: Any = None
    """The DeploymentPlan the workload came from, if any."""


@dataclass
class EndpointResult:
    """A measured run against an endpoint: the client's view (`run`) and the judged result (`bench`), in the same
    form as a simulated run."""

    run: BenchRun
    bench: BenchResult
    source: Source | None
    objectives: dict[str, float] = field(default_factory=dict)

    @property
    def summary(self) -> Summary:
        return self.bench.summary


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

        p = load_plan(plan)
        i = _pick([s.name for s in p.spec.services], service, plan)
        svc = p.spec.services[i]
        intent_path = Path(p.spec.provenance.intent)
        base = intent_path.parent if intent_path.is_absolute() else (plan.parent / intent_path).parent
        if not base.exists():
            base = Path(p.spec.provenance.intent).parent
        return Source(Workload.model_validate(svc.workload), dict(svc.objectives), base, svc.name, f"plan {plan}",
                      predicted(svc), attainment=svc.attainment, plan=p)
    if intent is not None:

        loaded = load_intent_file(intent)
        services = loaded.intent.spec.services
        i = _pick([s.name for s in services], service, intent)
        svc = services[i]
        return Source(svc.workload, {f"{m}_{q}": s * 1000.0 for m, q, s in svc.slo.targets()}, intent.parent,
                      svc.name, f"intent {intent}", attainment=svc.slo.attainment)
    return None


def parse_objectives(text: str) -> dict[str, float]:
    """`ttft_p99=300ms,tpot_p50=20ms` (as `infra estimate --slo` takes them) -> {"ttft_p99": 300.0, ...} in ms."""

    out: dict[str, float] = {}
    for key, value in parse_slo(text).items():
        try:
            parse_objective(key)
        except ValueError as exc:
            raise IntentError(Problem(str(exc), Location(path="--slo"),
                                      "write e.g. --slo ttft_p99=300ms,tpot_p99=40ms")) from None
        out[key] = parse_duration(value) * 1000.0
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
        check_flag(flag, value)
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
            clients = concurrency or (workload.concurrency if rate is None else None) or 0
            requests = max(DEFAULT_REQUESTS, min(ROUNDS_PER_CLIENT * clients, MAX_REQUESTS))
        else:
            peak = rate or (workload.rate.peak_rps if workload.rate is not None and concurrency is None else None)
            requests = math.ceil(peak * duration_s) + 1 if peak else DURATION_CAP
            if requests > MAX_REQUESTS:
                raise IntentError(Problem(f"--duration {duration_s:g} s at {peak:g}/s is {requests:,} requests, "
                                          f"above the {MAX_REQUESTS:,} a run may send", Location(path="--duration"),
                                          "give a shorter --duration or a lower --rate"))
    return generate(workload, requests=requests, seed=seed, base=base, rate=rate, concurrency=concurrency,
                    input_tokens=input_tokens, output_tokens=output_tokens)


def check_flag(flag: str, value: float | None) -> None:
    """Refuse a value of `flag` outside its `LIMITS` (NaN and infinity included) in one line naming it."""
    if value is None:
        return
    low, high, open_low, unit = LIMITS[flag]
    if math.isfinite(value) and (low < value if open_low else low <= value) and value <= high:
        return
    span = f"above {_num(low)}{unit} and at most {_num(high)}{unit}" if open_low else \
        f"from {_num(low)}{unit} to {_num(high)}{unit}"
    what = f"{value} is not a finite number" if not math.isfinite(value) else \
        f"{_num(value)}{unit} is {'too high' if value > high else 'too low'}"
    raise IntentError(Problem(what, Location(path=flag), f"give {flag} {span}"))


def _num(x: float) -> str:
    """Whole numbers with thousands separators (1,000,000 reads better than 1e+06), others in short form."""
    return f"{int(x):,}" if float(x).is_integer() and abs(x) < 1e15 else f"{x:g}"


def check_client_flags(*, warmup: int, timeout_s: float, max_failed: float | None = None) -> None:
    """Refuse warm-up, timeout and failure allowance outside their `LIMITS`."""
    for flag, value in (("--warmup", warmup), ("--timeout", timeout_s), ("--max-failed", max_failed)):
        check_flag(flag, value)


def _run_notes(measured: BenchRun, summary: Summary) -> list[str]:
    """What a reader must know about how the numbers were taken."""
    notes = [PROMPT_NOTE]
    if measured.prefix_hit is not None:
        notes.append(f"the server's prefix cache held {measured.prefix_hit:.1%} of the prompt tokens over the run "
                     "(its /metrics counters): what --save's case lines take the prompts to have found cached")
    elif any(s.prefix_tokens for s in measured.load.requests):
        notes.append("the prompts share prefixes, but the server counts no prefix-cache hits on /metrics: --save's "
                     "case lines take them to have found none")
    bad = [r.bad_usage for r in measured.records if r.bad_usage]
    if bad:
        notes.append(BAD_USAGE_NOTE.format(n=len(bad), example=bad[0]))
    if summary.approximate_tokens:
        notes.append(APPROX_NOTE.format(n=summary.approximate_tokens))
    if measured.cut_short:
        notes.append(f"{measured.cut_short}; what was measured until then is reported")
    return notes


def bench_endpoint(opts: ClientOptions, load: Load, source: Source | None, objectives: dict[str, float] | None = None,
                   progress: Progress | None = None, max_failed: float = DEFAULT_MAX_FAILED) -> EndpointResult:
    """Run the load and judge the measured requests against the objectives (the flags' over the source's) and
    against the share of requests allowed to fail."""
    check_flag("--max-failed", max_failed)
    measured = run(load, opts, progress)
    slo = dict(source.objectives if source else {})
    slo.update(objectives or {})
    judged, warm = past_start_up(measured.records, load.concurrency)
    verdict = judge(judged, slo, predicted=source.predicted if source else None,
                    attainment_target=source.attainment if source else None, max_failed=max_failed, seed=opts.seed)
    summary = summarize(judged, slo)
    info: dict[str, Any] = {"requests": len(load.requests), "sent": len(measured.records),
                            "warmup": len(measured.warmup), "seed": opts.seed, "arrival": load.arrival,
                            **({"rate_rps": load.rate} if load.rate is not None else {}),
                            **({"concurrency": load.concurrency} if load.concurrency is not None else {}),
                            **({"warm_up": warm} if warm else {}),
                            **({"prefix_hit": measured.prefix_hit} if measured.prefix_hit is not None else {})}
    notes = list(verdict.notes) + warm_up_notes(warm, load.concurrency) + _run_notes(measured, summary)
    groups = None
    if source is not None and source.plan is not None and source.service is not None:
        groups = _plan_case(source.plan, source.service, load, measured, judged, warm)
        if groups is None:
            notes.append("the service has several allocations and a client cannot tell which one served a "
                          "request, so --save writes no case for calibration")
    result = BenchResult(measured.url, (source.service if source else None) or measured.model, measured.records,
                         summary, verdict, info, groups=groups, notes=notes)
    return EndpointResult(measured, result, source, slo)


def _plan_case(plan: Any, service: str, load: Load, measured: BenchRun, judged: list[RequestRecord],
               left_out: int) -> list[dict[str, Any]] | None:
    """The estimate case a single-allocation service ran as, with what was measured (the simulator's form, so
    that `--save` writes it for `benchmarks/calibrate.py --extra`); None when the service has several."""
    svc, alloc = plan_allocation(plan, service, 0)
    if len(svc.allocations) != 1 or not measured.records:
        return None
    n = len(load.requests)
    # Prefix-cache hits are the server's business: its counters' share over the run, spread evenly over the
    # prompts, where it counts them; none where it does not.
    hit = measured.prefix_hit or 0.0
    cached = np.array([round(hit * s.input_tokens) for s in load.requests], dtype=np.int64)
    view = SimpleNamespace(load=load, records=measured.records, group=np.zeros(n, dtype=np.int64),
                           groups=[f"{alloc.device}/{alloc.framework}/{alloc.mode}#0"], cached_tokens=cached)
    return _group_cases(plan, service, view, judged, left_out)
