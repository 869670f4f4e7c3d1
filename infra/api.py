"""Library facade: what the command line does, callable from Python.

Each function takes paths or typed objects and returns typed results; printing is the CLI's business.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from infra.catalog.loader import Catalog, load_catalog
from infra.intent.loader import load_intent_file, load_profile_file, read_document
from infra.intent.profile import ClusterProfile
from infra.intent.resolve import ResolvedIntent, resolve

__all__ = ["Catalog", "CheckResult", "PlanResult", "check", "estimate", "estimate_cases", "load_catalog", "load_intent",
           "plan", "schema"]


def load_intent(path: str | Path, catalog_dirs: tuple[Path, ...] = ()) -> ResolvedIntent:
    """Read, validate and resolve an intent (and its cluster profile) against the catalog."""
    return resolve(load_intent_file(Path(path)), load_catalog(catalog_dirs))


@dataclass(frozen=True)
class CheckResult:
    """Outcome of `check`: a resolved intent, or a cluster profile with its devices looked up."""

    kind: str
    intent: ResolvedIntent | None = None
    profile: ClusterProfile | None = None
    devices: dict[str, str] | None = None
    """Pool name -> catalog device name, for a profile."""


def check(path: str | Path, catalog_dirs: tuple[Path, ...] = ()) -> CheckResult:
    """Validate an intent or a cluster profile file; raises IntentError listing every problem."""
    path = Path(path)
    model, _ = read_document(path)
    if isinstance(model, ClusterProfile):
        from infra.errors import CatalogError, IntentError, Problem

        profile, doc = load_profile_file(path)
        catalog = load_catalog(catalog_dirs)
        devices: dict[str, str] = {}
        problems: list[Problem] = []
        for i, pool in enumerate(profile.spec.pools):
            try:
                devices[pool.name] = catalog.device(pool.device).name
            except CatalogError as exc:
                problems += [Problem(p.message, doc.locate(("spec", "pools", i, "device")), p.fix)
                             for p in exc.problems]
        if problems:
            raise IntentError(problems)
        return CheckResult("ClusterProfile", profile=profile, devices=devices)
    return CheckResult("ServingIntent", intent=load_intent(path, catalog_dirs))


def schema() -> dict[str, Any]:
    """JSON Schema of intent and cluster-profile files."""
    from infra.intent.schema import intent_schema

    return intent_schema()


def estimate(case: dict[str, Any], catalog_dirs: tuple[Path, ...] = ()) -> dict[str, Any]:
    """Predicted metrics (or goodput capacity) of one deployment under one workload, as JSON-ready data.

    `case` holds the fields of `infra.perf.cases.EstimateCase` (the same keys as `infra estimate --cases`)."""
    from infra.errors import Location
    from infra.perf.cases import case_from, run_case

    return run_case(case_from(case, Location(path="")), load_catalog(catalog_dirs))


def estimate_cases(path: str | Path, catalog_dirs: tuple[Path, ...] = ()) -> list[dict[str, Any]]:
    """One result per line of a JSONL file of cases; a line that fails gives `{"line": n, "error": ...}`."""
    from infra.errors import InfraError, Location
    from infra.perf.cases import case_from, read_cases, run_case

    catalog = load_catalog(catalog_dirs)
    out = []
    for n, obj in read_cases(Path(path)):
        try:
            result = run_case(case_from(obj, Location(str(path), n, 1)), catalog)
            out.append({"line": n, **result})
        except InfraError as exc:
            out.append({"line": n, "error": "; ".join(str(p) for p in exc.problems)})
    return out


@dataclass(frozen=True)
class PlanResult:
    """A solved intent: the DeploymentPlan as data, its report, and what was written."""

    plan: dict[str, Any]
    report: str
    considered: list[Any]
    written: list[Path]


def plan(path: str | Path, output: str | Path | None = None, *, top: int = 3,
         catalog_dirs: tuple[Path, ...] = (), progress: Any = None, objective: str = "cost",
         changes: list[dict[str, Any]] | None = None) -> PlanResult:
    """Plan an intent: the cheapest deployment that meets every objective, or InfeasibleError (exit 2) with the
    conflict and the relaxations that would fix it. With `output`, writes plan.yaml and report.md there;
    `progress(done, total)` hears how many services have been scored. `objective` "goodput" plans for a fixed
    inventory: as much of the demand as fits, then the cheapest way to carry it. `changes` (accepted edits of
    the intent, `infra.planner.types.Change` as data) are recorded in the plan's provenance."""
    from infra.errors import InfeasibleError
    from infra.planner.plan import build_plan
    from infra.report.plan import plan_markdown, plan_yaml

    resolved = load_intent(path, catalog_dirs)
    try:
        data, considered = build_plan(resolved, top=top, objective=objective, progress=progress)
    except InfeasibleError as exc:
        if output is not None:
            from infra.files import write_atomic
            from infra.report.plan import infeasible_markdown

            write_atomic(Path(output) / "report.md",
                         infeasible_markdown(resolved.loaded.intent.metadata.name, exc.problems,
                                             getattr(exc, "considered", [])))
        raise
    if changes:
        from infra.planner.types import DeploymentPlan

        data["spec"]["provenance"]["changes"] = changes
        DeploymentPlan.model_validate(data)
    report = plan_markdown(data, considered)
    written: list[Path] = []
    if output is not None:
        from infra.files import write_atomic

        out = Path(output)
        write_atomic(out / "plan.yaml", plan_yaml(data))
        write_atomic(out / "report.md", report)
        written = [out / "plan.yaml", out / "report.md"]
    return PlanResult(data, report, considered, written)


def explain(plan_path: str | Path, *, llm: bool = False) -> Any:
    """Explain a plan.yaml from its facts (binding constraints, SLO margins, cost, alternatives); with `llm`, a
    configured model rephrases it and every number it writes is checked against those facts (a mismatch or a
    failing endpoint gives the template, with a note). Returns `infra.agent.explain.Explanation`."""
    from infra.agent.explain import explain as _explain

    return _explain(plan_path, use_llm=llm)


def draft(text: str, output: str | Path, *, profile: str | Path | None = None,
          catalog_dirs: tuple[Path, ...] = (), force: bool = False) -> Any:
    """Draft an intent from a description with the configured LLM; writes `output` only when it passes `check`
    (fields the model filled are marked `drafted`, unknowns listed at the top); an existing file only with
    `force`. Raises EndpointError when no endpoint is configured or it fails. Returns
    `infra.agent.draft.DraftResult`."""
    from infra.agent.draft import draft as _draft

    return _draft(text, output, profile=profile, catalog_dirs=catalog_dirs, force=force)


def plan_agent(path: str | Path, baseline: dict[str, Any] | None, conflict: list[str], *, goal: str | None = None,
               yes: bool = False, output: str | Path | None = None, console: Any, ask: Any,
               catalog_dirs: tuple[Path, ...] = (), objective: str = "cost") -> Any:
    """The configured LLM proposes typed intent patches for a planned (or, with `conflict`, infeasible) intent;
    each is solved by the planner and shown next to the baseline on `console`; the one the user accepts through
    `ask(question) -> answer` (or the recommended one with `yes`) is written to the intent and re-planned into
    `output` with the change in the plan's provenance. Returns `infra.agent.plan_agent.AgentOutcome`."""
    from infra.agent.plan_agent import run_plan_agent

    return run_plan_agent(Path(path), baseline, conflict, goal=goal, yes=yes,
                          output=Path(output) if output is not None else None, console=console, ask=ask,
                          catalog_dirs=catalog_dirs, objective=objective)


def review(plan_path: str | Path, *, console: Any, script: str | Path | None = None,
           intent_path: str | Path | None = None, catalog_dirs: tuple[Path, ...] = ()) -> int:
    """A review conversation about a plan.yaml on `console`, read from the terminal or, with `script`, from a
    file (one input per line, confirmations included): slash commands (/why, /what-if, /diff, /alternatives,
    /accept, /export, /exit) work without an LLM; other lines go to the configured LLM through read-only tools.
    Returns 1 when a command failed, else 0."""
    from infra.agent.review import Review, console_reader, script_reader

    read = script_reader(Path(script), console) if script is not None else console_reader(console)
    return Review(Path(plan_path), console, read, intent_path=Path(intent_path) if intent_path else None,
                  catalog_dirs=catalog_dirs).run()
