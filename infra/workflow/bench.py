"""Benchmarking a service (`infra bench`): simulated from its plan, or measured on an OpenAI-compatible endpoint."""

from __future__ import annotations

import os
from pathlib import Path

from infra.bench.client import ClientOptions, Progress
from infra.bench.endpoint import EndpointResult, check_client_flags, parse_objectives, plan_load, source_from
from infra.bench.endpoint import bench_endpoint as run_bench
from infra.bench.pipeline import PipelineBench, bench_pipeline
from infra.bench.run import DEFAULT_REQUESTS, BenchResult, check_load, saved_text, simulate_service
from infra.bench.run import save as save_run
from infra.bench.verdict import DEFAULT_MAX_FAILED
from infra.catalog.loader import load_catalog
from infra.errors import IntentError, Location, Problem
from infra.files import plan_writes, write_file, write_files
from infra.perf.correction import load_calibration
from infra.planner.types import load_plan
from infra.report.bench import endpoint_json, endpoint_markdown, plot_names


def bench(*, simulate: str | Path | None = None, service: str | None = None, concurrency: int | None = None,
          rate: float | None = None, requests: int | None = None, input_tokens: int | None = None,
          output_tokens: int | None = None, seed: int = 0, intent: str | Path | None = None,
          save: str | Path | None = None, router: str | None = None, catalog_dirs: tuple[Path, ...] = (),
          calibration: str | Path | None = None, force: bool = False) -> BenchResult | PipelineBench:
    """Drive one service of a plan and judge it against its objectives: a `infra.bench.run.BenchResult` (for a
    pipeline service, a `infra.bench.pipeline.PipelineBench`, stage by stage).
    `simulate` names the plan to simulate (the embedded default source); `save` writes the measurements as JSON
    Lines that calibration reads back (replacing a file with other content only with `force`); `calibration` (a
    file of `infra calibrate`) corrects the simulated engines."""
    if simulate is None:
        raise IntentError(Problem("nothing to benchmark", Location(path="--simulate"),
                                  "give --simulate PLAN (a plan.yaml from `infra plan`) or --endpoint URL"))

    plan_doc = load_plan(simulate)
    cal = load_calibration(calibration) if calibration is not None else None
    if save is not None:
        write_file(save, None, force=force)
    pipelines = [p.service for p in plan_doc.spec.pipelines]
    if service is None and len(pipelines) == 1 and all(s.pipeline for s in plan_doc.spec.services):
        service = pipelines[0]
    if service is not None and service in pipelines:
        if cal is not None:
            raise IntentError(Problem(f"--calibration corrects LLM engines; pipeline {service} is simulated stage by "
                                      "stage with the packaged figures", Location(path="--calibration"),
                                      "drop --calibration, or bench one LLM stage of the pipeline with --service"))
        for flag, value in (("--input-tokens", input_tokens), ("--output-tokens", output_tokens), ("--save", save)):
            if value is not None:
                raise IntentError(Problem(f"{flag} does not apply to pipeline {service}, whose stages take their "
                                          "lengths and work from the plan", Location(path=flag),
                                          f"drop {flag}, or bench one LLM stage of the pipeline with --service"))
        check_load(rate=rate, concurrency=concurrency, requests=requests)
        return bench_pipeline(plan_doc, service, requests=DEFAULT_REQUESTS if requests is None else requests,
                              seed=seed, rate=rate, clients=concurrency, catalog=load_catalog(catalog_dirs),
                              intent=intent, plan_path=simulate)
    result = simulate_service(plan_doc, service=service, requests=DEFAULT_REQUESTS if requests is None else requests,
                              seed=seed, rate=rate, concurrency=concurrency, input_tokens=input_tokens,
                              output_tokens=output_tokens, intent=intent, plan_path=simulate, router=router,
                              catalog=load_catalog(catalog_dirs), calibration=cal)
    if save is not None:
        save_run(result, save, force=force)
    return result


def bench_endpoint(url: str, *, model: str | None = None, api: str = "chat", concurrency: int | None = None,
                   rate: float | None = None, requests: int | None = None, duration_s: float | None = None,
                   input_tokens: int | None = None, output_tokens: int | None = None,
                   intent: str | Path | None = None, plan: str | Path | None = None, service: str | None = None,
                   slo: str | None = None, warmup: int = 1, timeout_s: float = 60.0, seed: int = 0,
                   ignore_eos: bool = True, min_tokens: bool = False, progress: Progress | None = None,
                   max_failed: float | None = None, save: str | Path | None = None,
                   markdown: str | Path | None = None, force: bool = False) -> EndpointResult:
    """Drive load against an OpenAI-compatible endpoint and measure it (`infra.bench.endpoint.EndpointResult`).

    The workload and objectives come from a plan's or an intent's service when given; the flags override them.
    `max_failed` is the share of requests that may fail (None: `infra.bench.verdict.DEFAULT_MAX_FAILED`).
    `save` (the measurements, JSON Lines) and `markdown` (a report with PNG plots beside it) are checked before
    any request is sent and written after the run; a file there with other content is replaced only with `force`.
    The API key comes from INFRA_BENCH_API_KEY or OPENAI_API_KEY. An unreachable endpoint raises EndpointError."""
    if api not in ("chat", "completions"):
        raise IntentError(Problem(f"--api {api!r} is not known", Location(path="--api"), "use chat or completions"))

    check_client_flags(warmup=warmup, timeout_s=timeout_s, max_failed=max_failed)
    if save is not None:
        write_file(save, None, force=force)
    if markdown is not None:
        markdown = Path(markdown)
        plan_writes(markdown.parent, dict.fromkeys([markdown.name, *plot_names(markdown)]), force=force,
                    keep_foreign=True)
    source = source_from(Path(intent) if intent else None, Path(plan) if plan else None, service)
    load = plan_load(source, concurrency=concurrency, rate=rate, requests=requests, duration_s=duration_s,
                     input_tokens=input_tokens, output_tokens=output_tokens, seed=seed)
    opts = ClientOptions(url=url, model=model, api=api, timeout_s=timeout_s,  # type: ignore[arg-type]
                         api_key=os.environ.get("INFRA_BENCH_API_KEY") or os.environ.get("OPENAI_API_KEY"),
                         ignore_eos=ignore_eos, min_tokens=min_tokens, warmup=warmup, duration_s=duration_s,
                         seed=seed)
    result = run_bench(opts, load, source, parse_objectives(slo) if slo else None, progress,
                       DEFAULT_MAX_FAILED if max_failed is None else max_failed)
    if save is not None:
        write_file(save, saved_text(result.bench), force=force)
    if markdown is not None:
        write_files(markdown.parent, endpoint_markdown(result, endpoint_json(result), markdown), force=force,
                    keep_foreign=True, record=False)
    return result
