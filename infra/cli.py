"""The `infra` command line: parse arguments, call `infra.api`, print. No logic lives here.

Exit codes: 0 ok, 1 bad input (a file, a flag, a name), 2 infeasible intent, 3 verification failed.
"""

from __future__ import annotations

import gc
import inspect
import json
import sys
import warnings
from pathlib import Path
from typing import Annotated, Any, Optional

import typer

from infra.errors import EXIT_BAD_INPUT, EXIT_INFEASIBLE, EXIT_VERIFICATION_FAILED, InfraError

app = typer.Typer(
    name="infra",
    help="Intent compiler for LLM serving: declare model, load, SLOs, budget and inventory; get a deployment.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)

_state = {"debug": False, "wide": False}

CatalogOpt = Annotated[
    Optional[list[Path]],
    typer.Option("--catalog", help="Directory of catalog overlays (models/, devices/, frameworks/); repeatable.",
                 show_default=False),
]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print machine-readable JSON.")]
TargetOpt = Annotated[
    str,
    typer.Option("--target", help="Deployment target of the manifests: kubernetes (infra's own Deployments and "
                 "LeaderWorkerSets), dynamo (NVIDIA Dynamo DynamoGraphDeployment), llm-d (llm-d model-service "
                 "values with an InferencePool and endpoint picker) or kserve (KServe LLMInferenceService)."),
]
CalibrationOpt = Annotated[
    Optional[Path],
    typer.Option("--calibration", help="Calibration file from `infra calibrate`: correct the performance model "
                 "with your own measurements where they match (overrides the cluster profile's).",
                 show_default=False),
]


def _console():
    from infra.report.console import make_console

    return make_console(wide=_state["wide"])


@app.callback()
def _main(
    debug: Annotated[bool, typer.Option("--debug", help="Show tracebacks for errors.")] = False,
    wide: Annotated[bool, typer.Option("--wide", help="Print tables at their full width (by default a table is "
                                       "at most 100 columns, its cells wrapped).")] = False,
) -> None:
    _state["debug"] = debug
    _state["wide"] = wide


@app.command()
def plan(
    path: Annotated[Path, typer.Argument(help="Intent YAML file.", show_default=False)],
    output: Annotated[Optional[Path], typer.Option("-o", "--output", help="Write plan.yaml and report.md here.",
                                                   show_default=False)] = None,
    top: Annotated[int, typer.Option(help="Alternatives of another kind to report.")] = 3,
    objective: Annotated[str, typer.Option(help="cost: cheapest plan serving all demand; goodput: serve the most "
                                                "the inventory and budgets allow, then cheapest.")] = "cost",
    catalog: CatalogOpt = None,
    as_json: JsonOpt = False,
    verify: Annotated[bool, typer.Option("--verify/--no-verify", help="Simulate the plan under the intent's peak "
                                         "workload and re-plan while objectives fail (exit 3 if they still do).")] = True,
    templates: Annotated[Optional[Path], typer.Option("--templates", help="Directory of manifest templates (and "
                                                      "settings.yaml) overriding the packaged ones by file name.",
                                                      show_default=False)] = None,
    agent: Annotated[bool, typer.Option("--agent", help="Then let the configured LLM propose intent changes; each "
                                                        "is solved and shown next to this plan, and applied only "
                                                        "if you accept it.")] = False,
    goal: Annotated[Optional[str], typer.Option(help="With --agent: what to aim for, in words.",
                                                show_default=False)] = None,
    yes: Annotated[bool, typer.Option("--yes", help="With --agent: apply the model's recommended change without "
                                                    "asking (for scripts).")] = False,
    calibration: CalibrationOpt = None,
    target: TargetOpt = "kubernetes",
    force: Annotated[bool, typer.Option("--force", help="With -o: write into a directory infra did not write, and "
                                                        "replace files there that infra did not write (or that "
                                                        "were changed since).")] = False,
) -> None:
    """Solve an intent: the cheapest deployment meeting every objective, or why none does and what to relax."""
    if objective not in ("cost", "goodput"):
        raise InfraError(f"--objective {objective!r} is not known — To fix: use --objective cost or goodput")
    from contextlib import nullcontext

    from infra import api

    live = None
    if sys.stderr.isatty() and not as_json:  # a progress bar only for a person watching
        from rich.console import Console
        from rich.progress import Progress

        live = Progress(console=Console(stderr=True), transient=True)
    with live or nullcontext():
        task = live.add_task("scoring candidates", total=None) if live else None

        def progress(done: int, total: int) -> None:
            if live is not None:
                live.update(task, completed=done, total=total)

        try:
            result = api.plan(path, output, top=top, catalog_dirs=tuple(catalog or ()), progress=progress,
                              objective=objective, verify=verify, templates=templates, calibration=calibration,
                              force=force, target=target)
        except InfraError as exc:
            if not agent or exc.exit_code != EXIT_INFEASIBLE:
                raise
            result = exc
    if agent:
        _plan_agent(path, result, output, goal, yes, tuple(catalog or ()), objective, as_json, calibration)
        return
    if as_json:
        print(json.dumps(result.plan.document(), indent=2, sort_keys=True))
    else:
        from infra.report.plan import print_plan

        print_plan(_console(), result.plan, result.considered, result.written)
        for note in result.notes:
            _console().print(f"note: {note}")
        if result.verification is not None:
            from infra.report.bench import print_verification

            print_verification(_console(), result.verification)
    if result.verification is not None and result.verification.verdict == "fail":
        sys.exit(EXIT_VERIFICATION_FAILED)


@app.command()
def check(
    path: Annotated[Path, typer.Argument(help="Intent (or cluster profile) YAML file.", show_default=False)],
    catalog: CatalogOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Validate an intent and its cluster profile (or a profile alone) against the language and the catalog."""
    from infra import api
    from infra.report.check import check_json, print_check

    result = api.check(path, tuple(catalog or ()))
    if as_json:
        print(json.dumps(check_json(result), indent=2, sort_keys=True))
    else:
        print_check(_console(), path, result)


@app.command()
def schema(
    output: Annotated[Optional[Path], typer.Option("-o", "--output", help="Write to this file instead of stdout.",
                                                   show_default=False)] = None,
    kind: Annotated[str, typer.Option(help="intent (intent and cluster-profile files) or calibration (files of "
                                      "`infra calibrate`).")] = "intent",
    force: Annotated[bool, typer.Option("--force", help="Replace the output file if it holds something else.")] = False,
) -> None:
    """Print the JSON Schema of intent and cluster-profile files, or of calibration files (for editors:
    yaml-language-server)."""
    from infra import api

    if kind not in ("intent", "calibration"):
        raise InfraError(f"--kind {kind!r} is not known — To fix: use --kind intent or --kind calibration")
    text = json.dumps(api.schema(kind), indent=2, sort_keys=True) + "\n"
    if output is None:
        sys.stdout.write(text)
        return
    from infra.files import write_file

    write_file(output, text, force=force)
    _console().print(f"wrote {output}")


@app.command(name="catalog")
def catalog_cmd(
    kind: Annotated[Optional[str], typer.Argument(help="models, devices, frameworks or conventions.",
                                                  show_default=False)] = None,
    name: Annotated[Optional[str], typer.Argument(help="Show one entry with its sources.",
                                                  show_default=False)] = None,
    catalog: CatalogOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """List what the catalog knows (models, devices, frameworks, conventions), or show one entry with sources."""
    from infra import api
    from infra.report.catalog import catalog_json, print_catalog

    cat = api.load_catalog(tuple(catalog or ()))
    if as_json:
        print(json.dumps(catalog_json(cat, kind, name), indent=2, sort_keys=True))
    else:
        print_catalog(_console(), cat, kind, name)


def _role_option(text: str | None, flag: str) -> dict[str, Any] | None:
    if text is None:
        return None
    out: dict[str, Any] = {}
    for part in filter(None, (p.strip() for p in text.split(","))):
        key, sep, value = part.partition("=")
        if not sep:
            raise InfraError(f"{flag} item {part!r} has no '=' — To fix: write e.g. {flag} tp=4,ep=4,workers=2")
        out[key.strip().replace("-", "_")] = value.strip()
    return out


@app.command()
def estimate(
    model: Annotated[Optional[str], typer.Option(help="Model: catalog name, Hugging Face id or config.json.",
                                                 show_default=False)] = None,
    device: Annotated[Optional[str], typer.Option(help="Device (catalog name).", show_default=False)] = None,
    framework: Annotated[str, typer.Option(help="Serving framework.")] = "vllm",
    precision: Annotated[Optional[str], typer.Option(help="Weight precision (default: the model's).",
                                                     show_default=False)] = None,
    tp: Annotated[int, typer.Option(help="Tensor parallel size.")] = 1,
    pp: Annotated[int, typer.Option(help="Pipeline parallel size.")] = 1,
    ep: Annotated[int, typer.Option(help="Expert parallel size.")] = 1,
    moe_tp: Annotated[Optional[int], typer.Option(
        "--moe-tp", help="Tensor parallel size inside experts (default: tp / ep, as the engines shard them).",
        show_default=False)] = None,
    dp: Annotated[int, typer.Option(help="Attention data-parallel groups.")] = 1,
    batch: Annotated[Optional[int], typer.Option(help="Batch cap per attention group.", show_default=False)] = None,
    workers: Annotated[Optional[int], typer.Option(help="Replicas.", show_default=False)] = None,
    max_num_tokens: Annotated[str, typer.Option("--max-num-tokens", help="Tokens per step.")] = "8192",
    mode: Annotated[str, typer.Option(help="agg or disagg.")] = "agg",
    prefill: Annotated[Optional[str], typer.Option(help="Disagg prefill layout, e.g. tp=4,ep=4,workers=2.",
                                                   show_default=False)] = None,
    decode: Annotated[Optional[str], typer.Option(help="Disagg decode layout, e.g. tp=8,batch=128.",
                                                  show_default=False)] = None,
    isl: Annotated[Optional[str], typer.Option(help="Input tokens per request (mean), e.g. 2k.",
                                               show_default=False)] = None,
    osl: Annotated[Optional[str], typer.Option(help="Output tokens per request (mean).", show_default=False)] = None,
    isl_cv: Annotated[float, typer.Option("--isl-cv", help="Input-length coefficient of variation.")] = 0.0,
    osl_cv: Annotated[float, typer.Option("--osl-cv", help="Output-length coefficient of variation.")] = 0.0,
    concurrency: Annotated[Optional[int], typer.Option(help="Closed loop: concurrent clients.",
                                                       show_default=False)] = None,
    requests: Annotated[Optional[int], typer.Option(
        help="Closed loop: requests the run sends in all; its clients start at once, and their share of the "
             "requests is that first wave (as `infra bench --requests` measures it). Default: the deployment serving "
             "the load for good, as a plan prices it (no first wave where the lengths vary; where they all "
             "match, the clients stay in step, at the share fitted to such measured loops).",
        show_default=False)] = None,
    rate: Annotated[Optional[str], typer.Option(help="Open loop: request rate, e.g. 20/s.",
                                                show_default=False)] = None,
    arrival_cv: Annotated[float, typer.Option("--arrival-cv", help="Inter-arrival CV (1 = Poisson).")] = 1.0,
    prefix_hit: Annotated[str, typer.Option("--prefix-hit", help="Prefix-cache hit fraction.")] = "0",
    max_rate: Annotated[bool, typer.Option("--max-rate", help="Report the largest rate meeting --slo.")] = False,
    slo: Annotated[Optional[str], typer.Option(help="Objectives, e.g. ttft_p99=300ms,tpot_p99=40ms: what --max-rate "
                                                    "must meet, else each is checked at the load given.",
                                               show_default=False)] = None,
    cases: Annotated[Optional[Path], typer.Option(help="JSONL file of cases (same keys as the flags); one JSON "
                                                       "result per line.", show_default=False)] = None,
    catalog: CatalogOpt = None,
    as_json: JsonOpt = False,
    calibration: CalibrationOpt = None,
) -> None:
    """Predict TTFT, TPOT, ITL, E2E and throughput of one deployment under one workload (or many, with --cases)."""
    from infra import api

    dirs = tuple(catalog or ())
    if cases is not None:
        results = api.estimate_cases(cases, dirs, calibration)
        for result in results:
            sys.stdout.write(json.dumps(result, sort_keys=True) + "\n")
        if any("error" in r for r in results):
            sys.exit(EXIT_BAD_INPUT)
        return
    from infra.perf.cases import parse_slo

    case: dict[str, Any] = {
        "model": model, "device": device, "framework": framework, "precision": precision, "tp": tp, "pp": pp,
        "ep": ep, "moe_tp": moe_tp, "dp": dp, "batch": batch, "workers": workers, "max_num_tokens": max_num_tokens,
        "mode": mode, "prefill": _role_option(prefill, "--prefill"), "decode": _role_option(decode, "--decode"),
        "isl": isl, "osl": osl, "isl_cv": isl_cv, "osl_cv": osl_cv, "concurrency": concurrency, "rate": rate,
        "requests": requests, "arrival_cv": arrival_cv, "prefix_hit": prefix_hit, "max_rate": max_rate,
        "slo": parse_slo(slo) if slo else {},
    }
    missing = [flag for flag, key in (("--model", "model"), ("--device", "device"), ("--isl", "isl"),
                                      ("--osl", "osl")) if case[key] is None]
    if missing:
        raise InfraError(f"missing {', '.join(missing)} — To fix: give them, or --cases FILE.jsonl")
    result = api.estimate({k: v for k, v in case.items() if v is not None}, dirs, calibration)
    if as_json:
        print(json.dumps(result, indent=2, sort_keys=True))
    else:
        from infra.report.estimate import print_estimate

        print_estimate(_console(), result)


@app.command()
def calibrate(
    measurements: Annotated[list[Path], typer.Argument(help="Measurement files: `infra bench --save` runs, silicon "
                                                       "CSVs, vLLM/SGLang bench results, GenAI-Perf/AIPerf "
                                                       "exports, GuideLLM reports.", show_default=False)],
    output: Annotated[Optional[Path], typer.Option("-o", "--output", help="Write the calibration file here.",
                                                   show_default=False)] = None,
    name: Annotated[Optional[str], typer.Option(help="Name of the calibration (default: the output file's stem).",
                                                show_default=False)] = None,
    plan_file: Annotated[Optional[Path], typer.Option("--plan", help="The plan whose service was measured, for files "
                                                      "that do not record their deployment.",
                                                      show_default=False)] = None,
    service: Annotated[Optional[str], typer.Option(help="With --plan: the service measured (default: its only "
                                                   "one).", show_default=False)] = None,
    allocation: Annotated[Optional[int], typer.Option(help="With --plan: the allocation measured on its own (index "
                                                      "in the service's allocations), for a service of several.",
                                                      show_default=False)] = None,
    model: Annotated[Optional[str], typer.Option(help="Model measured (catalog name or Hugging Face id).",
                                                 show_default=False)] = None,
    device: Annotated[Optional[str], typer.Option(help="Device measured (catalog name).", show_default=False)] = None,
    framework: Annotated[Optional[str], typer.Option(help="Serving framework measured.", show_default=False)] = None,
    precision: Annotated[Optional[str], typer.Option(help="Weight precision measured.", show_default=False)] = None,
    tp: Annotated[Optional[int], typer.Option(help="Tensor parallel size measured.", show_default=False)] = None,
    pp: Annotated[Optional[int], typer.Option(help="Pipeline parallel size measured.", show_default=False)] = None,
    ep: Annotated[Optional[int], typer.Option(help="Expert parallel size measured.", show_default=False)] = None,
    dp: Annotated[Optional[int], typer.Option(help="Attention data-parallel groups measured.",
                                              show_default=False)] = None,
    batch: Annotated[Optional[int], typer.Option(help="Batch cap (max_num_seqs) measured.", show_default=False)] = None,
    workers: Annotated[Optional[int], typer.Option(help="Replicas behind the measured endpoint.",
                                                   show_default=False)] = None,
    catalog: CatalogOpt = None,
    as_json: JsonOpt = False,
    force: Annotated[bool, typer.Option("--force", help="Replace the output file if it holds something else.")] = False,
) -> None:
    """Fit corrections of the performance model to your measurements and write a calibration file for plan,
    estimate, bench --simulate and pr (--calibration FILE, or spec.calibration in a cluster profile)."""
    from infra import api
    from infra.report.calibration import calibration_json, print_calibration

    fields = {"model": model, "device": device, "framework": framework, "precision": precision, "tp": tp, "pp": pp,
              "ep": ep, "dp": dp, "batch": batch, "workers": workers}
    result = api.calibrate(list(measurements), output, name=name, plan=plan_file, service=service,
                           allocation=allocation, deployment=fields, catalog_dirs=tuple(catalog or ()), force=force)
    if as_json:
        print(json.dumps(calibration_json(result.doc), indent=2, sort_keys=True))
    else:
        print_calibration(_console(), result.doc, result.written)


@app.command()
def observe(
    output: Annotated[Path, typer.Option("-o", "--output", help="Write the measurement here (JSON Lines, as "
                                         "`infra bench --save`; `infra calibrate` reads it).", show_default=False)],
    url: Annotated[Optional[str], typer.Argument(help="The deployed engine: http://HOST:PORT, its /v1 or its "
                                                 "/metrics (vLLM, SGLang, a Dynamo frontend, or `infra "
                                                 "emulate`). Or give --prometheus.",
                                                 show_default=False)] = None,
    duration: Annotated[float, typer.Option(help="Seconds of traffic: waited out between two scrapes of the engine, "
                                            "or read back from Prometheus up to --end.")] = 600.0,
    prometheus: Annotated[Optional[str], typer.Option("--prometheus", help="Read the window from this Prometheus "
                                                      "server (http://HOST:9090), which scrapes the engines: every "
                                                      "replica added, no waiting.", show_default=False)] = None,
    selector: Annotated[Optional[str], typer.Option("--selector", help="With --prometheus: the label matchers of "
                                                    "the deployment's series, e.g. 'namespace=\"llm\",service="
                                                    "\"chat\"'.", show_default=False)] = None,
    end: Annotated[Optional[str], typer.Option("--end", help="With --prometheus: when the window ends (RFC 3339 or "
                                               "Unix seconds; default now).", show_default=False)] = None,
    step: Annotated[Optional[float], typer.Option("--step", help="With --prometheus: split the window into windows "
                                                  "of this many seconds, each a load point (those with fewer than "
                                                  "30 requests left out).", show_default=False)] = None,
    plan_file: Annotated[Optional[Path], typer.Option("--plan", help="The plan the engine was deployed from.",
                                                      show_default=False)] = None,
    service: Annotated[Optional[str], typer.Option(help="With --plan: the service observed (default: its only "
                                                   "one).", show_default=False)] = None,
    allocation: Annotated[Optional[int], typer.Option(help="With --plan: the allocation whose pods are observed, for "
                                                      "a service of several.", show_default=False)] = None,
    model_name: Annotated[Optional[str], typer.Option("--model-name", help="Keep the series of this served model "
                                                      "(the model_name label) only.", show_default=False)] = None,
    model: Annotated[Optional[str], typer.Option(help="Model deployed (catalog name or Hugging Face id).",
                                                 show_default=False)] = None,
    device: Annotated[Optional[str], typer.Option(help="Device deployed on (catalog name).",
                                                  show_default=False)] = None,
    framework: Annotated[Optional[str], typer.Option(help="Serving framework.", show_default=False)] = None,
    precision: Annotated[Optional[str], typer.Option(help="Weight precision.", show_default=False)] = None,
    tp: Annotated[Optional[int], typer.Option(help="Tensor parallel size.", show_default=False)] = None,
    batch: Annotated[Optional[int], typer.Option(help="Batch cap (max_num_seqs).", show_default=False)] = None,
    workers: Annotated[Optional[int], typer.Option(help="Replicas behind the scraped metrics.",
                                                   show_default=False)] = None,
    catalog: CatalogOpt = None,
    as_json: JsonOpt = False,
    force: Annotated[bool, typer.Option("--force", help="Replace the output file if it holds something else.")] = False,
) -> None:
    """Measure a deployment on its own traffic: scrape its engine's Prometheus /metrics, wait --duration, scrape
    again (or ask the Prometheus server that scrapes its engines for a window it has kept), and write what it
    served (mean TTFT and TPOT, percentiles where the buckets resolve them, lengths and rate) as a measurement
    `infra calibrate` reads. No request is sent."""
    from infra import api
    from infra.report.observe import observe_json, print_observe

    fields = {"model": model, "device": device, "framework": framework, "precision": precision, "tp": tp,
              "batch": batch, "workers": workers}
    result = api.observe(url, duration, output, plan=plan_file, service=service, allocation=allocation,
                         deployment=fields, model_name=model_name, catalog_dirs=tuple(catalog or ()), force=force,
                         prometheus=prometheus, labels=selector, end=end, step=step)
    if as_json:
        print(json.dumps(observe_json(result), sort_keys=True))
    else:
        print_observe(_console(), result)


@app.command()
def bench(
    simulate: Annotated[Optional[Path], typer.Option("--simulate", help="Simulate this plan (plan.yaml): the "
                                                     "embedded default, no endpoint needed.",
                                                     show_default=False)] = None,
    service: Annotated[Optional[str], typer.Option(help="Service of the plan (default: its only one); a pipeline "
                                                   "service runs stage by stage.", show_default=False)] = None,
    concurrency: Annotated[Optional[int], typer.Option(help="Closed loop: concurrent clients (default: the "
                                                       "workload's).", show_default=False)] = None,
    rate: Annotated[Optional[str], typer.Option(help="Open loop: request rate, e.g. 20/s (default: the workload's "
                                                "peak).", show_default=False)] = None,
    requests: Annotated[Optional[int], typer.Option(help="Requests to send (default 2000 simulated; against an "
                                                    "endpoint 100, ten per client of a larger closed loop, or "
                                                    "what --duration allows).",
                                                    show_default=False)] = None,
    input_tokens: Annotated[Optional[str], typer.Option("--input-tokens", help="Fixed prompt length instead of the "
                                                        "workload's distribution.", show_default=False)] = None,
    output_tokens: Annotated[Optional[str], typer.Option("--output-tokens", help="Fixed output length.",
                                                         show_default=False)] = None,
    seed: Annotated[int, typer.Option(help="Seed of arrivals, lengths and confidence intervals.")] = 0,
    intent: Annotated[Optional[Path], typer.Option(help="The intent the plan was made from, when its traces are not "
                                                   "where the plan says; with --endpoint, the intent whose "
                                                   "workload and objectives to test.", show_default=False)] = None,
    save: Annotated[Optional[Path], typer.Option(help="Write the measurements here (JSON Lines; calibration reads "
                                                 "them with --extra).", show_default=False)] = None,
    router: Annotated[Optional[str], typer.Option(
        help="How the simulator spreads requests over replicas; default: as the plan's manifests route "
             "(spec.services[].routing). least-loaded (endpoint picker) or round-robin, both weighted by planned "
             "capacity; weighted (HTTPRoute weights, random per request); random (a Service, even over pods).",
        show_default=False)] = None,
    catalog: CatalogOpt = None,
    as_json: JsonOpt = False,
    endpoint: Annotated[Optional[str], typer.Option(help="Measure this OpenAI-compatible server instead, e.g. "
                                                    "http://127.0.0.1:8000/v1 (API key from INFRA_BENCH_API_KEY or "
                                                    "OPENAI_API_KEY).", show_default=False)] = None,
    plan_file: Annotated[Optional[Path], typer.Option("--plan", help="With --endpoint: the plan whose service's "
                                                      "workload and objectives to test.", show_default=False)] = None,
    model: Annotated[Optional[str], typer.Option(help="With --endpoint: served model name (default: the first "
                                                 "/v1/models lists).", show_default=False)] = None,
    api_kind: Annotated[str, typer.Option("--api", help="With --endpoint: chat or completions.")] = "chat",
    duration: Annotated[Optional[float], typer.Option(help="With --endpoint: send no request after this many "
                                                      "seconds (without it, a run stops sending after an hour and "
                                                      "says so).", show_default=False)] = None,
    max_failed: Annotated[Optional[str], typer.Option("--max-failed", help="With --endpoint: share of requests "
                                                      "that may fail, e.g. 1% or 0.01 (default 1%); more, for "
                                                      "certain, fails the run (exit 3), with or without --slo.",
                                                      show_default=False)] = None,
    slo: Annotated[Optional[str], typer.Option(help="With --endpoint: objectives, e.g. "
                                               "ttft_p99=300ms,tpot_p50=40ms (over the intent's or plan's).",
                                               show_default=False)] = None,
    warmup: Annotated[int, typer.Option(help="With --endpoint: warm-up requests, not measured.")] = 1,
    timeout: Annotated[float, typer.Option(help="With --endpoint: seconds one request may take before it "
                                           "fails.")] = 60.0,
    ignore_eos: Annotated[bool, typer.Option("--ignore-eos/--no-ignore-eos", help="With --endpoint: ask the "
                                             "server to run to max_tokens.")] = True,
    min_tokens: Annotated[bool, typer.Option("--min-tokens", help="With --endpoint: also send min_tokens = "
                                             "max_tokens.")] = False,
    markdown: Annotated[Optional[Path], typer.Option(help="With --endpoint: write a markdown report here (PNG "
                                                     "plots beside it when matplotlib is installed).",
                                                     show_default=False)] = None,
    calibration: CalibrationOpt = None,
    force: Annotated[bool, typer.Option("--force", help="Replace a --save or --markdown file (and its plots) that "
                                        "holds something else.")] = False,
) -> None:
    """Drive load at a deployment, report TTFT/TPOT/ITL/E2E and goodput, and judge each objective (exit 3 on fail).

    --simulate PLAN runs the embedded simulator; --endpoint URL measures a real (or emulated) server, with the
    workload of --intent, --plan or the flags."""
    from infra import api
    from infra.intent.units import parse_count, parse_fraction, parse_rate

    def parsed(parse: Any, value: str | None, flag: str, example: str) -> Any:
        if value is None:
            return None
        try:
            return parse(value)
        except ValueError as exc:
            raise InfraError(f"{flag} {value!r}: {exc} — To fix: e.g. {flag} {example}") from None

    if endpoint is not None:
        if simulate is not None:
            raise InfraError("give --simulate PLAN or --endpoint URL, not both — To fix: drop one of them")
        if calibration is not None:
            raise InfraError("--calibration corrects the simulator; an endpoint is measured as it is — To fix: drop "
                             "--calibration, or use --simulate PLAN")
        _bench_endpoint(endpoint, model=model, api_kind=api_kind, concurrency=concurrency,
                        rate=parsed(parse_rate, rate, "--rate", "20/s"), requests=requests, duration=duration,
                        input_tokens=parsed(parse_count, input_tokens, "--input-tokens", "2k"),
                        output_tokens=parsed(parse_count, output_tokens, "--output-tokens", "256"), intent=intent,
                        plan_file=plan_file, service=service, slo=slo, warmup=warmup, timeout=timeout,
                        ignore_eos=ignore_eos, min_tokens=min_tokens, seed=seed, save=save, markdown=markdown,
                        as_json=as_json, max_failed=parsed(parse_fraction, max_failed, "--max-failed", "1%"),
                        force=force)
        return
    result = api.bench(simulate=simulate, service=service, concurrency=concurrency,
                       rate=parsed(parse_rate, rate, "--rate", "20/s"), requests=requests,
                       input_tokens=parsed(parse_count, input_tokens, "--input-tokens", "2k"),
                       output_tokens=parsed(parse_count, output_tokens, "--output-tokens", "256"), seed=seed,
                       intent=intent, save=save, router=router, catalog_dirs=tuple(catalog or ()),
                       calibration=calibration, force=force)
    data = result.to_json()
    if as_json:
        print(json.dumps(data, sort_keys=True))
    elif "pipeline" in data:
        from infra.report.bench import print_pipeline_bench

        print_pipeline_bench(_console(), data)
    else:
        from infra.report.bench import print_bench

        print_bench(_console(), data)
        if save is not None:
            _console().print(f"wrote {save}")
    if data["verdict"]["overall"] == "fail":
        sys.exit(EXIT_VERIFICATION_FAILED)


@app.command()
def render(
    plan_path: Annotated[Path, typer.Argument(help="plan.yaml written by `infra plan`.", show_default=False)],
    output: Annotated[Path, typer.Option("-o", "--output", help="Directory to write the manifest tree into.",
                                         show_default=False)],
    templates: Annotated[Optional[Path], typer.Option("--templates", help="Directory of templates (and "
                                                      "settings.yaml) overriding the packaged ones by file name.",
                                                      show_default=False)] = None,
    force: Annotated[bool, typer.Option("--force", help="Write into a directory infra did not write, and replace "
                                                        "or delete files there that infra did not write (or that "
                                                        "were changed since).")] = False,
    catalog: CatalogOpt = None,
    as_json: JsonOpt = False,
    target: TargetOpt = "kubernetes",
) -> None:
    """Render a plan into Kubernetes manifests: a kustomize base and a per-cluster overlay for every service."""
    from infra import api

    result = api.render(plan_path, output, templates, tuple(catalog or ()), force=force, target=target)
    if as_json:
        print(json.dumps({"files": sorted(result.files), "notes": result.notes, "output": str(output)},
                         indent=2, sort_keys=True))
        return
    console = _console()
    console.print(f"wrote {len(result.files)} files to {output}")
    for note in result.notes:
        console.print(f"note: {note}")


@app.command(name="pr")
def pr_cmd(
    path: Annotated[Path, typer.Argument(help="Intent YAML file.", show_default=False)],
    repo: Annotated[Path, typer.Option(help="Clone of the GitOps repository.", show_default=False)],
    plan_file: Annotated[Optional[Path], typer.Option("--plan", help="Use this plan.yaml (its fingerprint must "
                                                      "match the intent) instead of planning.",
                                                      show_default=False)] = None,
    root: Annotated[str, typer.Option(help="Directory of the repository the manifests go under.")] = "deploy",
    cluster: Annotated[Optional[str], typer.Option(help="Overlay name (default: the plan's cluster).",
                                                   show_default=False)] = None,
    base: Annotated[str, typer.Option(help="Branch the pull request goes into.")] = "main",
    branch: Annotated[Optional[str], typer.Option(help="PR branch (default: infra/<plan name>).",
                                                  show_default=False)] = None,
    push: Annotated[bool, typer.Option(help="Push the branch; with GITHUB_TOKEN or GH_TOKEN set, open or update "
                                            "the pull request.")] = False,
    github: Annotated[Optional[str], typer.Option(help="OWNER/REPO on GitHub (default: from a github.com remote).",
                                                  show_default=False)] = None,
    github_api: Annotated[Optional[str], typer.Option("--github-api", help="GitHub API URL (GitHub Enterprise: "
                                                      "https://HOST/api/v3; default: $GITHUB_API_URL or "
                                                      "https://api.github.com).", show_default=False)] = None,
    allow_dirty: Annotated[bool, typer.Option("--allow-dirty", help="Go ahead with uncommitted changes in the "
                                                                    "repository (they stay out of the PR).")] = False,
    argocd: Annotated[bool, typer.Option("--argocd", help="Also write an Argo CD Application per overlay.")] = False,
    flux: Annotated[bool, typer.Option("--flux", help="Also write a Flux Kustomization per overlay.")] = False,
    body_file: Annotated[Optional[Path], typer.Option("--body-file", help="Where to write the PR body when it is "
                                                      "not sent (default: under the repository's .git).",
                                                      show_default=False)] = None,
    force: Annotated[bool, typer.Option("--force", help="Replace a --body-file that holds something else.")] = False,
    verify: Annotated[bool, typer.Option("--verify/--no-verify", help="Verify the plan by simulation first (as "
                                         "`infra plan` does), so that the PR body carries the verdict.")] = True,
    catalog: CatalogOpt = None,
    as_json: JsonOpt = False,
    calibration: CalibrationOpt = None,
    target: TargetOpt = "kubernetes",
) -> None:
    """Turn the intent's plan into a pull request on a GitOps repository: manifests, plan and a reviewable body."""
    if argocd and flux:
        raise InfraError("--argocd and --flux exclude each other — To fix: pick the controller the cluster runs")
    from infra import api

    result = api.open_pr(path, repo, plan_path=plan_file, root=root, cluster=cluster, base=base, branch=branch,
                         push=push, github=github, github_api=github_api, allow_dirty=allow_dirty,
                         sync="argocd" if argocd else "flux" if flux else None, catalog_dirs=tuple(catalog or ()),
                         body_file=body_file, verify=verify, calibration=calibration, force=force,
                         target=target)
    from infra.report.pr import pr_json, print_pr

    if as_json:
        print(json.dumps(pr_json(result), indent=2, sort_keys=True))
    else:
        print_pr(_console(), result)
@app.command()
def verify(
    plan_file: Annotated[Path, typer.Argument(help="The plan (plan.yaml) that was deployed.",
                                              show_default=False)],
    endpoint: Annotated[Optional[str], typer.Option(help="The deployed service's OpenAI-compatible URL, e.g. "
                                                    "http://chat.example:8000/v1: send it the planned loads. Or "
                                                    "give --prometheus.", show_default=False)] = None,
    prometheus: Annotated[Optional[str], typer.Option("--prometheus", help="Verify on the service's own traffic "
                                                      "instead: read it from this Prometheus server "
                                                      "(http://HOST:9090), which scrapes its engines; no request "
                                                      "is sent.", show_default=False)] = None,
    selector: Annotated[Optional[str], typer.Option("--selector", help="With --prometheus: the label matchers of "
                                                    "the service's series, e.g. 'namespace=\"llm\"'.",
                                                    show_default=False)] = None,
    end: Annotated[Optional[str], typer.Option("--end", help="With --prometheus: when the window ends (RFC 3339 or "
                                               "Unix seconds; default now).", show_default=False)] = None,
    step: Annotated[Optional[float], typer.Option("--step", help="With --prometheus: split the window into windows "
                                                  "of this many seconds, each a load point to calibrate on.",
                                                  show_default=False)] = None,
    service: Annotated[Optional[str], typer.Option(help="Service of the plan deployed there (default: its only "
                                                   "one).", show_default=False)] = None,
    allocation: Annotated[Optional[int], typer.Option(help="For a service of several allocations: the one the "
                                                      "endpoint serves on its own (its index), measured at its "
                                                      "share of the load.", show_default=False)] = None,
    intent: Annotated[Optional[Path], typer.Option(help="The intent to re-plan (default: the one the plan records).",
                                                   show_default=False)] = None,
    requests: Annotated[Optional[int], typer.Option(help="Requests per load (default 100, ten per client of a "
                                                    "larger closed loop, or what --duration allows).",
                                                    show_default=False)] = None,
    duration: Annotated[Optional[float], typer.Option(help="Send no request after this many seconds per load; with "
                                                      "--prometheus, the seconds of traffic read (default 3600).",
                                                      show_default=False)] = None,
    model: Annotated[Optional[str], typer.Option(help="Served model name (default: the first /v1/models lists; "
                                                 "with --prometheus, every model's series).",
                                                 show_default=False)] = None,
    api_kind: Annotated[str, typer.Option("--api", help="chat or completions.")] = "chat",
    timeout: Annotated[float, typer.Option(help="Seconds one request may take before it fails.")] = 60.0,
    warmup: Annotated[int, typer.Option(help="Warm-up requests per load, not measured.")] = 1,
    seed: Annotated[int, typer.Option(help="Seed of arrivals and lengths.")] = 0,
    write: Annotated[Optional[Path], typer.Option("--write", help="Write measurements/, calibration.yaml and the "
                                                  "new plan (plan/) here.", show_default=False)] = None,
    catalog: CatalogOpt = None,
    as_json: JsonOpt = False,
    force: Annotated[bool, typer.Option("--force", help="With --write: write into a directory infra did not "
                                                        "write, and replace files there that infra did not write "
                                                        "(or that were changed since).")] = False,
) -> None:
    """Measure a deployed plan at its planned loads (or on its own traffic, from Prometheus), judge its objectives,
    calibrate on the measurements and re-plan: what would change and why (exit 3 when an objective fails)."""
    from contextlib import nullcontext

    from infra import api
    from infra.report.verify import print_verify, verify_json

    live = None
    if sys.stderr.isatty() and not as_json:  # a progress bar only for a person watching
        from rich.console import Console
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

        live = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                        console=Console(stderr=True), transient=True)
    with live or nullcontext():
        task = live.add_task("measuring", total=None) if live else None

        def progress(done: int, total: int, load: str) -> None:
            if live is not None:
                live.update(task, description=f"{load} load, requests", completed=done, total=total)

        result = api.verify(plan_file, endpoint, service=service, allocation=allocation, intent=intent,
                            requests=requests, duration_s=duration, model=model, api_kind=api_kind,
                            timeout_s=timeout, warmup=warmup, seed=seed, write=write,
                            catalog_dirs=tuple(catalog or ()), progress=progress, force=force,
                            prometheus=prometheus, labels=selector, end=end, step=step)
    if as_json:
        print(json.dumps(verify_json(result), indent=2, sort_keys=True))
    else:
        print_verify(_console(), result)
    if not result.passed:
        sys.exit(EXIT_VERIFICATION_FAILED)


def _bench_endpoint(endpoint: str, *, save: Path | None, markdown: Path | None, as_json: bool,
                    **kw: Any) -> None:
    from contextlib import nullcontext

    from infra import api
    from infra.report.bench import endpoint_json, print_endpoint

    live = None
    if sys.stderr.isatty() and not as_json:
        from rich.console import Console
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

        live = Progress(TextColumn("requests"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                        console=Console(stderr=True), transient=True)
    with live or nullcontext():
        task = live.add_task("requests", total=None) if live else None

        def progress(done: int, total: int) -> None:
            if live is not None:
                live.update(task, completed=done, total=total)

        result = api.bench_endpoint(endpoint, model=kw["model"], api=kw["api_kind"], concurrency=kw["concurrency"],
                                    rate=kw["rate"], requests=kw["requests"], duration_s=kw["duration"],
                                    input_tokens=kw["input_tokens"], output_tokens=kw["output_tokens"],
                                    intent=kw["intent"], plan=kw["plan_file"], service=kw["service"], slo=kw["slo"],
                                    warmup=kw["warmup"], timeout_s=kw["timeout"], seed=kw["seed"],
                                    ignore_eos=kw["ignore_eos"], min_tokens=kw["min_tokens"], progress=progress,
                                    max_failed=kw["max_failed"], save=save, markdown=markdown, force=kw["force"])
    data = endpoint_json(result)
    if as_json:
        print(json.dumps(data, sort_keys=True, separators=(",", ":")))
    else:
        print_endpoint(_console(), data)
    if data["verdict"]["overall"] == "fail":
        sys.exit(EXIT_VERIFICATION_FAILED)


@app.command()
def emulate(
    plan_file: Annotated[Optional[Path], typer.Argument(help="Plan whose services to serve (optional with fixed "
                                                             "timing).", show_default=False)] = None,
    port: Annotated[int, typer.Option(help="Port to listen on (0 picks a free one).")] = 8000,
    host: Annotated[str, typer.Option(help="Address to listen on.")] = "127.0.0.1",
    service: Annotated[Optional[str], typer.Option(help="Serve only this service of the plan (a pipeline service runs "
                                                   "its stages in turn).",
                                                   show_default=False)] = None,
    ttft_ms: Annotated[Optional[float], typer.Option("--ttft-ms", help="Fixed timing: first token after this "
                                                                       "many ms.", show_default=False)] = None,
    itl_ms: Annotated[Optional[float], typer.Option("--itl-ms", help="Fixed timing: ms between tokens.",
                                                    show_default=False)] = None,
    error_rate: Annotated[float, typer.Option("--error-rate", help="Share of requests answered HTTP 500.")] = 0.0,
    stall_ms: Annotated[float, typer.Option("--stall-ms", help="Length of an injected stall.")] = 0.0,
    stall_rate: Annotated[float, typer.Option("--stall-rate", help="Share of streams that stall once.")] = 0.0,
    disconnect_rate: Annotated[float, typer.Option("--disconnect-rate", help="Share of streams cut short with no "
                                                                            "finish_reason.")] = 0.0,
    slow_start: Annotated[float, typer.Option("--slow-start", help="Seconds of HTTP 503 after start.")] = 0.0,
    tokens_per_chunk: Annotated[int, typer.Option("--tokens-per-chunk", help="Tokens per SSE chunk.")] = 1,
    usage: Annotated[bool, typer.Option("--usage/--no-usage", help="Send usage in streams when asked.")] = True,
    seed: Annotated[int, typer.Option(help="Seed of the fault draws.")] = 0,
    metrics: Annotated[str, typer.Option("--metrics", help="Series /metrics exports: vllm (an engine's) or dynamo "
                                                          "(an NVIDIA Dynamo frontend's).")] = "vllm",
) -> None:
    """Serve an emulated OpenAI-compatible endpoint (with /metrics and fault injection) until interrupted."""
    from infra import api

    def ready(url: str) -> None:
        print(f"serving {url}/v1", flush=True)

    api.emulate(plan_file, port=port, host=host, service=service, ttft_ms=ttft_ms, itl_ms=itl_ms,
                error_rate=error_rate, stall_ms=stall_ms, stall_rate=stall_rate, disconnect_rate=disconnect_rate,
                slow_start_s=slow_start, tokens_per_chunk=tokens_per_chunk, usage=usage, seed=seed, metrics=metrics,
                on_ready=ready)


@app.command(name="validate")
def validate_cmd(
    path: Annotated[Optional[Path], typer.Argument(help="Manifest file or directory (walked in sorted order).",
                                                   show_default=False)] = None,
    profile: Annotated[Optional[Path], typer.Option("--profile", help="ClusterProfile YAML: check resource names, "
                                                    "node labels, fit and installed CRDs.", show_default=False)] = None,
    plan_file: Annotated[Optional[Path], typer.Option("--plan", help="plan.yaml: check replicas, engine arguments "
                                                      "and device requests against it (its cluster also serves as "
                                                      "the profile).", show_default=False)] = None,
    live: Annotated[bool, typer.Option("--live", help="Also dry-run every object on the cluster of the current "
                                                      "kubeconfig (dryRun=All, fieldValidation=Strict).")] = False,
    rules: Annotated[bool, typer.Option("--rules", help="List the rules (id, severity, fix) and exit.")] = False,
    catalog: CatalogOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Check manifests: schema (strict), kustomize, semantic, security, cluster-profile and plan rules. Exit 1 on
    errors; warnings alone exit 0."""
    from infra.report.validate import print_report, print_rules, report_json, rules_json

    if rules:
        if as_json:
            print(json.dumps(rules_json(), indent=2, sort_keys=True))
        else:
            print_rules(_console())
        return
    if path is None:
        raise InfraError("missing PATH — To fix: give a manifest file or directory, e.g. `infra validate out/manifests`")
    from infra import api

    report = api.validate(path, profile=profile, plan=plan_file, live=live, catalog_dirs=tuple(catalog or ()))
    if as_json:
        print(json.dumps(report_json(report), indent=2, sort_keys=True))
    else:
        print_report(_console(), report)
    if not report.ok:
        sys.exit(EXIT_BAD_INPUT)


# --- LLM assistant: explain, draft, review (agent features; `infra.agent` is imported only inside these) ---


@app.command()
def explain(
    path: Annotated[Path, typer.Argument(help="plan.yaml written by `infra plan`.", show_default=False)],
    llm: Annotated[bool, typer.Option("--llm", help="Have the configured model rephrase it; every number it "
                                                    "writes is checked against the plan.")] = False,
    as_json: JsonOpt = False,
) -> None:
    """Why this plan: binding constraints, SLO margins, cost breakdown and the next-best alternatives."""
    from infra import api

    result = api.explain(path, llm=llm)
    if as_json:
        print(json.dumps({"text": result.text, "source": result.source, "note": result.note}, indent=2,
                         sort_keys=True))
        return
    if result.note:
        sys.stderr.write(f"note: {result.note}\n")
    sys.stdout.write(result.text)


@app.command()
def draft(
    text: Annotated[str, typer.Argument(help="What to serve, in words: model, load, latency, budget, devices.",
                                        show_default=False)],
    output: Annotated[Path, typer.Option("-o", "--output", help="Intent file to write.")] = Path("intent.yaml"),
    profile: Annotated[Optional[Path], typer.Option(help="ClusterProfile file to plan on (else the description "
                                                         "must name the pools).", show_default=False)] = None,
    force: Annotated[bool, typer.Option("--force", help="Replace the output file if it exists.")] = False,
    catalog: CatalogOpt = None,
) -> None:
    """Draft an intent from a description with the configured LLM; the file is written only if it passes check."""
    from infra import api

    result = api.draft(text, output, profile=profile, catalog_dirs=tuple(catalog or ()), force=force)
    console = _console()
    console.print(f"wrote {result.path}: {result.drafted} drafted fields to confirm")
    for item in result.unknowns:
        console.print(f"  unknown: {item}")
    console.print(f"next: review it, then `infra plan {result.path}`")


def _ask(question: str) -> Optional[str]:
    sys.stderr.write(question)
    sys.stderr.flush()
    line = sys.stdin.readline()
    return line if line else None  # None: the input ended, which is no answer (and so no consent)


def _plan_agent(path: Path, result: Any, output: Optional[Path], goal: Optional[str], yes: bool,
                catalog: tuple[Path, ...], objective: str, as_json: bool, calibration: Optional[Path]) -> None:
    from rich.console import Console

    from infra import api
    from infra.report.plan import print_plan

    console = Console(stderr=True) if as_json else _console()
    infeasible = isinstance(result, InfraError)
    if infeasible:
        for problem in result.problems:
            console.print(f"infeasible: {problem}", markup=False, highlight=False)
    elif not as_json:
        print_plan(console, result.plan, result.considered, result.written)
    outcome = api.plan_agent(path, None if infeasible else result.plan,
                             [str(p) for p in result.problems] if infeasible else [], goal=goal, yes=yes,
                             output=output, console=console, ask=_ask, catalog_dirs=catalog, objective=objective,
                             calibration=calibration)
    final = outcome.replanned.plan if outcome.replanned is not None else (None if infeasible else result.plan)
    if as_json and final is not None:
        print(json.dumps(final.document(), indent=2, sort_keys=True))
    if final is None:
        raise result


@app.command()
def review(
    path: Annotated[Path, typer.Argument(help="plan.yaml written by `infra plan`.", show_default=False)],
    script: Annotated[Optional[Path], typer.Option(help="Run the conversation in this file (one line per input, "
                                                        "answers to confirmations included) instead of asking.",
                                                   show_default=False)] = None,
    intent: Annotated[Optional[Path], typer.Option(help="The intent the plan was made from (default: the one its "
                                                        "provenance names).", show_default=False)] = None,
    catalog: CatalogOpt = None,
) -> None:
    """Talk about a plan: /why, /what-if, /diff, /alternatives, /accept, /export; questions go to the LLM."""
    from infra import api

    code = api.review(path, console=_console(), script=script, intent_path=intent, catalog_dirs=tuple(catalog or ()))
    if code:
        sys.exit(code)


def _flowed(doc: str) -> str:
    """A docstring's paragraphs each on one line: rich help prints a docstring's lines as they are wrapped in the
    source, mid-sentence, where a terminal wraps them again."""
    return "\n\n".join(" ".join(p.split()) for p in inspect.cleandoc(doc).split("\n\n"))


for _info in app.registered_commands:
    if _info.help is None and _info.callback is not None and _info.callback.__doc__:
        _info.help = _flowed(_info.callback.__doc__)


def _fail(message: str, code: int) -> None:
    sys.stderr.write(message.rstrip("\n") + "\n")
    sys.exit(code)


def main(argv: list[str] | None = None) -> Any:
    """Console-script entry: run the app, turn every expected error into a message and an exit code."""
    # An anchor defined twice is valid YAML (an alias takes the latest); ruamel's warning about it would reach the
    # terminal as a Python warning with the library's source line.
    warnings.filterwarnings("ignore", message=r"\s*found duplicate anchor")
    try:
        return app(args=argv, standalone_mode=False)
    except InfraError as exc:
        if _state["debug"]:
            raise
        _fail("\n".join(f"error: {p}" for p in exc.problems), exc.exit_code)
    except typer.Abort:
        _fail("aborted", EXIT_BAD_INPUT)
    except typer.Exit as exc:
        sys.exit(exc.exit_code)
    except typer.TyperException as exc:
        ctx = getattr(exc, "ctx", None)
        hint = f" — To fix: see `{ctx.command_path} --help`" if ctx is not None else ""
        _fail(f"error: {exc.format_message()}{hint}", EXIT_BAD_INPUT)
    except KeyboardInterrupt:
        _fail("interrupted", 130)
    except BrokenPipeError:
        sys.exit(0)


def run() -> Any:
    """The `infra` command (console script and `python -m infra`): `main`, and then the process ends. The
    interpreter's last collection would walk every object the command made to free nothing the exit does not (a
    second after planning 50 services, ten after 500): the collector is told to leave them (`gc.freeze`)."""
    try:
        return main()
    finally:
        gc.freeze()
