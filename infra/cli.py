"""The `infra` command line: parse arguments, call `infra.api`, print. No logic lives here.

Exit codes: 0 ok, 1 bad input (a file, a flag, a name), 2 infeasible intent, 3 verification failed.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated, Any, Optional

import typer

from infra.errors import EXIT_BAD_INPUT, EXIT_INFEASIBLE, InfraError

app = typer.Typer(
    name="infra",
    help="Intent compiler for LLM serving: declare model, load, SLOs, budget and inventory; get a deployment.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)

_state = {"debug": False}

CatalogOpt = Annotated[
    Optional[list[Path]],
    typer.Option("--catalog", help="Directory of catalog overlays (models/, devices/, frameworks/); repeatable.",
                 show_default=False),
]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print machine-readable JSON.")]


def _console():
    from rich.console import Console

    import shutil

    # Piped output keeps full table cells rather than folding them to 80 columns.
    width = None if sys.stdout.isatty() else max(shutil.get_terminal_size((200, 24)).columns, 200)
    return Console(highlight=False, width=width)


@app.callback()
def _main(
    debug: Annotated[bool, typer.Option("--debug", help="Show tracebacks for errors.")] = False,
) -> None:
    _state["debug"] = debug


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
    agent: Annotated[bool, typer.Option("--agent", help="Then let the configured LLM propose intent changes; each "
                                                        "is solved and shown next to this plan, and applied only "
                                                        "if you accept it.")] = False,
    goal: Annotated[Optional[str], typer.Option(help="With --agent: what to aim for, in words.",
                                                show_default=False)] = None,
    yes: Annotated[bool, typer.Option("--yes", help="With --agent: apply the model's recommended change without "
                                                    "asking (for scripts).")] = False,
) -> None:
    """Solve an intent: the cheapest deployment meeting every objective, or why none does and what to relax."""
    if objective not in ("cost", "goodput"):
        raise InfraError(f"--objective {objective!r} is not known — To fix: use --objective cost or goodput")
    from infra import api

    from contextlib import nullcontext

    live = None
    if sys.stderr.isatty():
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
                              objective=objective)
        except InfraError as exc:
            if not agent or exc.exit_code != EXIT_INFEASIBLE:
                raise
            result = exc
    if agent:
        _plan_agent(path, result, output, goal, yes, tuple(catalog or ()), objective, as_json)
        return
    if as_json:
        print(json.dumps(result.plan, indent=2, sort_keys=True))
    else:
        from infra.report.plan import print_plan

        print_plan(_console(), result.plan, result.considered, result.written)


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
) -> None:
    """Print the JSON Schema of intent and cluster-profile files (for editors: yaml-language-server)."""
    from infra import api

    text = json.dumps(api.schema(), indent=2, sort_keys=True) + "\n"
    if output is None:
        sys.stdout.write(text)
        return
    from infra.files import write_atomic

    write_atomic(output, text)
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
    moe_tp: Annotated[int, typer.Option("--moe-tp", help="Tensor parallel size inside experts.")] = 1,
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
    rate: Annotated[Optional[str], typer.Option(help="Open loop: request rate, e.g. 20/s.",
                                                show_default=False)] = None,
    arrival_cv: Annotated[float, typer.Option("--arrival-cv", help="Inter-arrival CV (1 = Poisson).")] = 1.0,
    prefix_hit: Annotated[str, typer.Option("--prefix-hit", help="Prefix-cache hit fraction.")] = "0",
    max_rate: Annotated[bool, typer.Option("--max-rate", help="Report the largest rate meeting --slo.")] = False,
    slo: Annotated[Optional[str], typer.Option(help="Objectives, e.g. ttft_p99=300ms,tpot_p99=40ms.",
                                               show_default=False)] = None,
    cases: Annotated[Optional[Path], typer.Option(help="JSONL file of cases (same keys as the flags); one JSON "
                                                       "result per line.", show_default=False)] = None,
    catalog: CatalogOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Predict TTFT, TPOT, ITL, E2E and throughput of one deployment under one workload (or many, with --cases)."""
    from infra import api

    dirs = tuple(catalog or ())
    if cases is not None:
        results = api.estimate_cases(cases, dirs)
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
        "arrival_cv": arrival_cv, "prefix_hit": prefix_hit, "max_rate": max_rate,
        "slo": parse_slo(slo) if slo else {},
    }
    missing = [flag for flag, key in (("--model", "model"), ("--device", "device"), ("--isl", "isl"),
                                      ("--osl", "osl")) if case[key] is None]
    if missing:
        raise InfraError(f"missing {', '.join(missing)} — To fix: give them, or --cases FILE.jsonl")
    result = api.estimate({k: v for k, v in case.items() if v is not None}, dirs)
    if as_json:
        print(json.dumps(result, indent=2, sort_keys=True))
    else:
        from infra.report.estimate import print_estimate

        print_estimate(_console(), result)


def _fail(message: str, code: int) -> None:
    sys.stderr.write(message.rstrip("\n") + "\n")
    sys.exit(code)


def main(argv: list[str] | None = None) -> Any:
    """Console-script entry: run the app, turn every expected error into a message and an exit code."""
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
                catalog: tuple[Path, ...], objective: str, as_json: bool) -> None:
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
                             output=output, console=console, ask=_ask, catalog_dirs=catalog, objective=objective)
    final = outcome.replanned.plan if outcome.replanned is not None else (None if infeasible else result.plan)
    if as_json and final is not None:
        print(json.dumps(final, indent=2, sort_keys=True))
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


if __name__ == "__main__":
    main()
