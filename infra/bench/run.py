"""A benchmark run of one service of a plan: drive the load, summarise it, judge it, save it.

The source of measurements is a choice (`simulate` here: the discrete-event simulator of `infra.bench.simulate`);
whatever the source, the run ends as RequestRecords, one summary and one verdict, and saves in one format that
calibration reads back (`infra.perf.cases.read_measured`).
"""

from __future__ import annotations

import datetime as dt
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from infra.bench.client import MAX_USAGE_TOKENS
from infra.bench.engine import plan_allocation
from infra.bench.metrics import METRICS, RequestRecord, Summary, distribution, summarize
from infra.bench.simulate import plan_policy, simulate_plan
from infra.bench.verdict import Verdict, judge
from infra.errors import IntentError, Location, Problem
from infra.files import write_file
from infra.intent.models import MAX_CLIENTS

DEFAULT_REQUESTS = 2000
MAX_SIMULATED_REQUESTS = 100_000
"""Most requests one simulated run takes: a minute or so of simulation (the default is 2,000); each request's
record stays in memory."""
"""Enough for a p99 objective to be judged (1,000 requests) with room for its interval."""


@dataclass
class BenchResult:
    """A finished run: where its numbers came from, the records, their summary and the verdict."""

    source: str
    """`simulation` (or an endpoint URL)."""
    service: str
    records: list[RequestRecord]
    summary: Summary
    verdict: Verdict
    load: dict[str, Any]
    """How the load was driven: requests, rate or concurrency, arrival process, seed."""
    itl_pool: tuple[np.ndarray, np.ndarray] | None = None
    groups: list[dict[str, Any]] | None = None
    """Per allocation: its label, the requests it served and their mean TTFT/TPOT, with the estimate case that
    describes it (simulation only)."""
    notes: list[str] | None = None

    def to_json(self) -> dict[str, Any]:
        s = self.summary.to_json()
        out: dict[str, Any] = {
            "source": self.source, "service": self.service, "load": self.load,
            **{k: s[k] for k in ("completed", "failed", "duration_s", "request_throughput",
                                 "output_token_throughput", "good", "goodput_rps", "attainment", "errors")},
        }
        for m in METRICS:
            out[f"{m}_ms"] = s[f"{m}_ms"]
        out["verdict"] = self.verdict.to_json()
        out["notes"] = list(self.notes or [])
        return out


def pick_service(plan: Any, service: str | None, plan_path: str | Path | None = None) -> str:
    """The service to run: the one named, or the plan's only one run by LLM engines (a pipeline runs as a whole:
    `infra.bench.pipeline`)."""
    names = [s.name for s in plan.spec.services if s.runs_llm_engine]
    if service is not None:
        svc, _ = plan_allocation(plan, service, 0)
        if not svc.runs_llm_engine:
            raise IntentError(Problem(
                f"service {service} is the {svc.kind} stage {svc.stage} of pipeline {svc.pipeline}, which runs "
                "only inside its pipeline", Location(str(plan_path) if plan_path else None, path="spec.services"),
                f"bench the pipeline with --service {svc.pipeline}"))
        return service
    if len(names) == 1:
        return names[0]
    pipelines = [p.service for p in plan.spec.pipelines]
    runs = [n for n in names if not any(s.name == n and s.pipeline for s in plan.spec.services)] + pipelines
    if not runs:
        raise IntentError(Problem("the plan has no service an LLM engine runs", Location(
            str(plan_path) if plan_path else None, path="spec.services"), "plan the intent again with `infra plan`"))
    raise IntentError(Problem(f"the plan has {len(runs)} services to run ({', '.join(runs)})",
                              Location(str(plan_path) if plan_path else None, path="spec.services"),
                              f"pick one with --service, e.g. --service {runs[0]}"))


def predicted(svc: Any) -> dict[str, float]:
    """The plan's prediction per objective for the whole service: the slowest of its allocations."""
    out: dict[str, float] = {}
    for alloc in svc.allocations:
        for key, obj in alloc.predicted.items():
            out[key] = max(out.get(key, 0.0), obj.predicted_ms)
    return out


def allocation_deployment(svc: Any, alloc: Any) -> dict[str, Any]:
    """The deployment fields of an estimate case (`infra.perf.cases.EstimateCase`) for one allocation of a plan's
    service: what its requests ran on, for the measured cases calibration reads."""
    engine = next(iter(alloc.engines.values()))
    par = alloc.parallel
    layout = {"tp": par.tp, "pp": par.pp, "ep": par.ep, "moe_tp": par.moe_tp, "dp": par.attention_dp}
    out: dict[str, Any] = {"model": svc.model, "device": alloc.device, "framework": alloc.framework,
                           "precision": alloc.precision, "mode": alloc.mode,
                           "memory_utilization": engine.memory_utilization}
    if alloc.mode == "agg":
        e = alloc.engines["agg"]
        out.update(layout, batch=e.max_num_seqs, workers=alloc.replicas, max_num_tokens=e.max_num_batched_tokens)
    else:
        for role, workers in (("prefill", alloc.prefill_workers or 1), ("decode", alloc.decode_workers or 1)):
            e = alloc.engines[role]
            out[role] = {**layout, "batch": e.max_num_seqs, "workers": workers * alloc.replicas,
                         "max_num_tokens": e.max_num_batched_tokens}
    return out


def _group_cases(plan: Any, service: str, sim: Any, judged: list[RequestRecord],
                 left_out: int) -> list[dict[str, Any]]:
    """Per allocation, the estimate case it ran as and the mean TTFT/TPOT of its `judged` requests (with their
    percentiles); `steady` where `left_out` requests of a start-up went before them (`past_start_up`) and the
    lengths vary."""
    svc, _ = plan_allocation(plan, service, 0)
    lengths_in = np.array([s.input_tokens for s in sim.load.requests], dtype=float)
    lengths_out = np.array([s.output_tokens for s in sim.load.requests], dtype=float)
    if left_out and lengths_in.std() == 0 and lengths_out.std() == 0:
        # Clients whose lengths all match stay in step, which the model prices over the whole run with its first
        # wave (`infra.perf.cases.measured_wave`): every request.
        judged, left_out = sim.records, 0
    duration = max((r.end for r in judged if r.ok), default=0.0) - min(r.t_send for r in judged)
    out = []
    for g, alloc in enumerate(svc.allocations):
        mine = [r for r in judged if sim.group[r.index] == g]
        ok = [r for r in mine if r.ok]
        tpots = [t for r in ok if (t := r.tpot) is not None]
        entry: dict[str, Any] = {"group": g, "label": sim.groups[g], "requests": len(mine), "completed": len(ok),
                                 **({"steady": True} if left_out else {})}
        if ok and tpots:
            idx = np.array([r.index for r in mine])
            wl = svc.workload
            case: dict[str, Any] = {
                **allocation_deployment(svc, alloc),
                "isl": round(float(lengths_in[idx].mean())), "osl": round(float(lengths_out[idx].mean())),
                "isl_cv": round(float(lengths_in[idx].std() / lengths_in[idx].mean()), 4),
                "osl_cv": round(float(lengths_out[idx].std() / lengths_out[idx].mean()), 4),
                "prefix_hit": round(float(sim.cached_tokens[idx].sum() / lengths_in[idx].sum()), 4),
            }
            if sim.load.concurrency is not None:
                case["concurrency"] = max(1, round(sim.load.concurrency * len(mine) / len(judged)))
            else:
                case["rate"] = round(len(mine) / duration, 6) if duration > 0 else 0.0
                case["arrival_cv"] = {"constant": 0.0, "gamma": float((wl.get("arrival") or {}).get("cv", 1.0))}.get(
                    sim.load.arrival, 1.0)
            ttft = distribution([r.ttft for r in ok])
            tpot = distribution(tpots)
            entry.update(case=case, ttft_ms=round(float(ttft.mean or 0.0), 4),
                         tpot_ms=round(float(tpot.mean or 0.0), 4),
                         percentiles={name: {p: round(v, 4) for p, v in d.percentiles.items() if v is not None}
                                      for name, d in (("ttft_ms", ttft), ("tpot_ms", tpot))})
        out.append(entry)
    return out


def past_start_up(records: list[RequestRecord], clients: int | None) -> tuple[list[RequestRecord], int]:
    """(the requests a run's verdict judges, how many it leaves out). A closed loop's clients all send their first
    request at once onto empty caches, and the queue that start-up wave makes delays the requests sent while it
    lasts (a wave of long prompts, the next round's too); that is warm-up (as `--warmup`'s requests are), not the
    steady state a plan prices (`infra.perf.estimate.Compiled.serving`). Left out: every request sent before the
    first wave's last one ended, by when each client has left the start-up behind, but never more than half the
    run, and never a failed one (a failure is one whenever it happens: verdicts cannot flatter); a run of no
    more than twice its clients, or an open loop, is judged whole."""
    if not clients or len(records) <= 2 * clients:
        return records, 0
    order = sorted(records, key=lambda r: (r.t_send, r.index))
    settled = max(r.end for r in order[:clients])
    cut = min(max(clients, sum(1 for r in order if r.t_send < settled)), len(order) // 2)
    judged = [r for i, r in enumerate(order) if i >= cut or not r.ok]
    return judged, len(order) - len(judged)


def warm_up_notes(left_out: int, clients: int | None) -> list[str]:
    """What a reader of a verdict must know of the start-up `past_start_up` left out."""
    if not left_out:
        return []
    return [f"{left_out} requests completed of those sent before the last of the {clients} clients' first "
            "requests (sent at once) ended are the start-up's warm-up: not judged, nor taken by --save's case lines "
            "(a failed one is judged)"]


def simulator_notes(svc: Any, load: Any) -> list[str]:
    """Where the simulator's verdict is known to part from measured engines (`benchmarks/sim_fidelity.py`, the
    calibration set replayed through it): a reader of a simulated pass or fail must weigh it."""
    notes = []
    objectives = {**svc.objectives, **svc.attainment_objectives}
    if any(a.mode == "disagg" for a in svc.allocations) and any(k.startswith("ttft") for k in objectives):
        notes.append("disaggregated: on the published P/D deployments the simulator's TTFT ran under what their "
                     "engines measured once their clients queued (benchmarks/sim_fidelity.py); a TTFT objective met "
                     "here under load is weaker evidence than the plan's prediction or a run against the "
                     "endpoint")
    specs = load.requests
    if (load.concurrency or 0) > 1 and specs and len({(r.input_tokens, r.output_tokens) for r in specs}) == 1:
        notes.append("every request has the same lengths: the simulated clients stay in step, their prompts "
                     "prefilled together every round, which measured engines' clients did not (their TTFT ran under "
                     "the simulated, benchmarks/sim_fidelity.py); give the lengths' spread to judge the steady state")
    return notes


def check_load(*, rate: float | None = None, concurrency: int | None = None, input_tokens: int | None = None,
               output_tokens: int | None = None, requests: int | None = None) -> None:
    """The load flags of a simulated run: a rate or a concurrency, not both, every one given above 0, and none
    above what an intent may state (concurrency, lengths) or a simulation takes (`MAX_SIMULATED_REQUESTS`)."""

    if rate is not None and concurrency is not None:
        raise IntentError(Problem("give either a rate or a concurrency, not both", Location(path="--rate"),
                                  "drop --rate (closed loop) or --concurrency (open loop)"))
    for flag, value, most in (("--rate", rate, None), ("--concurrency", concurrency, MAX_CLIENTS),
                              ("--input-tokens", input_tokens, MAX_USAGE_TOKENS),
                              ("--output-tokens", output_tokens, MAX_USAGE_TOKENS),
                              ("--requests", requests, MAX_SIMULATED_REQUESTS)):
        if value is not None and value <= 0:
            raise IntentError(Problem(f"{value:g} is not positive", Location(path=flag),
                                      f"give {flag} above 0, or leave it out to use the plan's workload"))
        if value is not None and most is not None and value > most:
            raise IntentError(Problem(f"{value:,} is above the {most:,} a simulated run takes", Location(path=flag),
                                      f"give {flag} {most} or less"))


def simulate_service(plan: Any, *, service: str | None = None, requests: int = DEFAULT_REQUESTS, seed: int = 0,
                     rate: float | None = None, concurrency: int | None = None, input_tokens: int | None = None,
                     output_tokens: int | None = None, intent: str | Path | None = None,
                     plan_path: str | Path | None = None, router: str | None = None,
                     catalog: Any = None, calibration: Any = None) -> BenchResult:
    """Simulate one service of a plan under its workload (or the given load) and judge it, routed as its manifests
    route (`router` overrides: one of `infra.bench.simulate.POLICIES`); with the user's `calibration`
    (`infra.perf.correction.UserCalibration`), its engines corrected by it."""

    check_load(rate=rate, concurrency=concurrency, input_tokens=input_tokens, output_tokens=output_tokens,
               requests=requests)
    name = pick_service(plan, service, plan_path)
    svc, _ = plan_allocation(plan, name, 0)
    router = router or plan_policy(plan, name)
    sim = simulate_plan(plan, name, requests=requests, seed=seed, router=router, catalog=catalog,  # type: ignore[arg-type]
                        rate=rate, concurrency=concurrency, input_tokens=input_tokens, output_tokens=output_tokens,
                        intent=intent, plan_path=plan_path, calibration=calibration)
    judged, warm = past_start_up(sim.records, sim.load.concurrency)
    # What the plan held each replica to for its attainment is judged with the stated objectives, so that a miss
    # says which metric's tail to tighten.
    held = {**svc.objectives, **svc.attainment_objectives}
    summary = summarize(judged, held, itl_pool=sim.itl_pool)
    verdict = judge(judged, held, itl_pool=sim.itl_pool, predicted=predicted(svc), seed=seed,
                    attainment_target=svc.attainment)
    load = {"requests": requests, "seed": seed, "arrival": sim.load.arrival, "router": router,
            **({"rate_rps": sim.load.rate} if sim.load.rate is not None else {}),
            **({"concurrency": sim.load.concurrency} if sim.load.concurrency is not None else {}),
            **({"warm_up": warm} if warm else {})}
    notes = list(verdict.notes) + warm_up_notes(warm, sim.load.concurrency) + simulator_notes(svc, sim.load)
    if sim.preemptions:
        notes.append(f"{sim.preemptions} preemptions (KV cache full; requests recomputed)")
    if sim.truncated:
        notes.append(f"{sim.truncated} requests' output cut at max_model_len")
    return BenchResult("simulation", name, sim.records, summary, verdict, load, sim.itl_pool,
                       _group_cases(plan, name, sim, judged, warm), notes)


def save(result: BenchResult, path: str | Path, *, force: bool = False) -> Path:
    """Write a run to the file the user named (`saved_text`); one with other content there is replaced only with
    `force`, for it may hold measurements no one can take again."""
    return write_file(path, saved_text(result), force=force)


def saved_text(result: BenchResult) -> str:
    """A run as JSON Lines: one `request` line per request, one `case` line per allocation (what
    `benchmarks/calibrate.py --extra` reads back as measured cases), and a closing `summary` line."""
    lines = []
    for r in result.records:
        lines.append({"kind": "request", "index": r.index, "t_sched": round(r.t_sched, 6),
                      "t_send": round(r.t_send, 6),
                      "ttft_ms": None if r.ttft is None else round(r.ttft * 1000, 4),
                      "e2e_ms": None if r.e2e is None else round(r.e2e * 1000, 4),
                      "tpot_ms": None if r.tpot is None else round(r.tpot * 1000, 4),
                      "input_tokens": r.input_tokens, "output_tokens": r.output_tokens, "error": r.error})
    # A measured run says when it ran (what a calibration made from it is dated by); a simulation is the same
    # whatever the day, and its file stays the same bytes.
    when = {} if result.source == "simulation" else {
        "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")}
    for g in result.groups or []:
        if "case" in g:
            lines.append({"kind": "case", "source": result.source, "service": result.service, "label": g["label"],
                          "requests": g["completed"], "case": g["case"], "ttft_ms": g["ttft_ms"],
                          "tpot_ms": g["tpot_ms"], "percentiles": g["percentiles"],
                          **({"steady": True} if g.get("steady") else {}), **when})
    lines.append({"kind": "summary", **result.to_json(), **when})
    return "".join(json.dumps(x, sort_keys=True) + "\n" for x in lines)


__all__ = ["DEFAULT_REQUESTS", "MAX_SIMULATED_REQUESTS", "BenchResult", "allocation_deployment", "check_load",
           "past_start_up", "pick_service", "predicted", "save", "saved_text", "simulate_service",
           "simulator_notes", "warm_up_notes"]
