"""An emulated OpenAI-compatible endpoint for a plan's services (`infra emulate`)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from infra.bench.emulator import METRICS, Emulator, EngineTiming, Faults, FixedTiming, bind, check_options, serve
from infra.bench.engine import plan_allocation
from infra.bench.pipeline_emulator import PipelineTiming
from infra.bench.run import pick_service
from infra.bench.simulate import plan_groups, plan_policy
from infra.errors import EndpointError, IntentError, Location, Problem
from infra.planner.types import load_plan


def emulate(plan: str | Path | None, *, port: int, host: str = "127.0.0.1", service: str | None = None,
            ttft_ms: float | None = None, itl_ms: float | None = None, error_rate: float = 0.0,
            stall_ms: float = 0.0, stall_rate: float = 0.0, disconnect_rate: float = 0.0, slow_start_s: float = 0.0,
            tokens_per_chunk: int = 1, usage: bool = True, seed: int = 0, metrics: str = "vllm",
            on_ready: Callable[[str], None] | None = None) -> None:
    """Serve an emulated OpenAI-compatible endpoint until interrupted; `on_ready(url)` hears its address. Its
    `/metrics` are a vLLM engine's, or an NVIDIA Dynamo frontend's (`metrics="dynamo"`)."""
    if metrics not in METRICS:
        raise IntentError(Problem(f"unknown metrics {metrics!r}", Location(path="--metrics"),
                                  f"use one of {', '.join(METRICS)}"))
    check_options(port=port, ttft_ms=ttft_ms, itl_ms=itl_ms, error_rate=error_rate, stall_ms=stall_ms,
                  stall_rate=stall_rate, disconnect_rate=disconnect_rate, slow_start=slow_start_s,
                  tokens_per_chunk=tokens_per_chunk)
    if (ttft_ms is None) != (itl_ms is None):
        raise IntentError(Problem("fixed timing needs both --ttft-ms and --itl-ms", Location(path="--itl-ms"),
                                  "give both, or neither to time tokens with the plan's engine model"))
    names = ["emulated"]
    timing: FixedTiming | PipelineTiming | EngineTiming
    if ttft_ms is not None and itl_ms is not None:
        timing = FixedTiming(ttft_ms, itl_ms)
        if plan is not None:
            p = load_plan(plan)
            if service is not None and service in {x.service for x in p.spec.pipelines}:
                names = [service]  # fixed timing serves the pipeline's endpoint as one
            else:
                names = [plan_allocation(p, service, 0)[0].name] if service else [s.name for s in p.spec.services]
    elif plan is None:
        raise IntentError(Problem("nothing to time the tokens with", Location(path="PLAN"),
                                  "give a plan.yaml (its engine model times the tokens), or --ttft-ms and --itl-ms"))
    else:
        p = load_plan(plan)
        if service is not None and service in {x.service for x in p.spec.pipelines}:
            timing = PipelineTiming(p, service, seed=seed)
            names = [service]
        else:
            llm = [x.name for x in p.spec.services if x.runs_llm_engine]
            name = pick_service(p, service or (llm[0] if llm else p.spec.services[0].name), plan)
            svc, _ = plan_allocation(p, name, 0)
            timing = EngineTiming(plan_groups(p, name), plan_policy(p, name))
            names = [name] + ([svc.model_id] if getattr(svc, "model_id", None) and svc.model_id != name else [])
    try:
        sock = bind(host, port)
    except OSError as exc:
        raise EndpointError(Problem(f"cannot listen on {host}:{port}: {exc.strerror}", Location(path="--port"),
                                    "choose a free port (0 picks one)")) from None
    emu = Emulator(names, timing, Faults(error_rate, stall_ms, stall_rate, disconnect_rate, slow_start_s), seed,
                   tokens_per_chunk, usage, metrics)
    serve(emu, sock, on_ready)
