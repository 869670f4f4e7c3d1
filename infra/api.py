"""Library facade: what the command line does, callable from Python.

Each function takes paths or typed objects and returns typed results; printing is the CLI's business. The work is
done in `infra.workflow`; its functions are loaded here on first use, so that importing the facade (or the command
line) does not import the solver, the benchmark clients or the LLM client before a command needs them.
"""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from infra.catalog.loader import Catalog, load_catalog
    from infra.intent.resolve import CheckResult
    from infra.planner.types import DeploymentPlan
    from infra.workflow.bench import bench, bench_endpoint
    from infra.workflow.calibrate import CalibrateResult, calibrate
    from infra.workflow.emulate import emulate
    from infra.workflow.estimate import estimate, estimate_cases
    from infra.workflow.intent import check, load_intent, schema
    from infra.workflow.observe import ObserveResult, observe
    from infra.workflow.plan import PlanResult, plan
    from infra.workflow.pr import open_pr
    from infra.workflow.render import RenderResult, render
    from infra.workflow.validate import validate
    from infra.workflow.verify import VerifyResult, verify

_EXPORTS = {
    "Catalog": "infra.catalog.loader", "load_catalog": "infra.catalog.loader", "CheckResult": "infra.intent.resolve",
    "bench": "infra.workflow.bench", "bench_endpoint": "infra.workflow.bench",
    "CalibrateResult": "infra.workflow.calibrate", "calibrate": "infra.workflow.calibrate",
    "emulate": "infra.workflow.emulate",
    "estimate": "infra.workflow.estimate", "estimate_cases": "infra.workflow.estimate",
    "check": "infra.workflow.intent", "load_intent": "infra.workflow.intent", "schema": "infra.workflow.intent",
    "ObserveResult": "infra.workflow.observe", "observe": "infra.workflow.observe",
    "PlanResult": "infra.workflow.plan", "plan": "infra.workflow.plan",
    "open_pr": "infra.workflow.pr",
    "RenderResult": "infra.workflow.render", "render": "infra.workflow.render",
    "validate": "infra.workflow.validate",
    "VerifyResult": "infra.workflow.verify", "verify": "infra.workflow.verify",
}
"""Name -> the module that defines it."""

__all__ = ["CalibrateResult", "Catalog", "CheckResult", "ObserveResult", "PlanResult", "RenderResult", "VerifyResult",
           "bench", "bench_endpoint", "calibrate", "check", "draft", "emulate", "estimate", "estimate_cases",
           "explain", "load_catalog", "load_intent", "observe", "open_pr", "plan", "plan_agent", "render", "review",
           "schema", "validate", "verify"]


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_EXPORTS})


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

    return _draft(text, output, planning=_planning(None), profile=profile, catalog_dirs=catalog_dirs, force=force)


def plan_agent(path: str | Path, baseline: DeploymentPlan | None, conflict: list[str], *, goal: str | None = None,
               yes: bool = False, output: str | Path | None = None, console: Any, ask: Any,
               catalog_dirs: tuple[Path, ...] = (), objective: str = "cost",
               calibration: str | Path | None = None) -> Any:
    """The configured LLM proposes typed intent patches for a planned (or, with `conflict`, infeasible) intent;
    each is solved by the planner and shown next to the baseline on `console`; the one the user accepts through
    `ask(question) -> answer` (or the recommended one with `yes`) is written to the intent and re-planned into
    `output` with the change in the plan's provenance. Every plan takes the user's `calibration` as the baseline
    did. Returns `infra.agent.plan_agent.AgentOutcome`."""
    from infra.agent.plan_agent import run_plan_agent

    return run_plan_agent(Path(path), baseline, conflict, planning=_planning(calibration), goal=goal, yes=yes,
                          output=Path(output) if output is not None else None, console=console, ask=ask,
                          catalog_dirs=catalog_dirs, objective=objective)


def review(plan_path: str | Path, *, console: Any, script: str | Path | None = None,
           intent_path: str | Path | None = None, catalog_dirs: tuple[Path, ...] = ()) -> int:
    """A review conversation about a plan.yaml on `console`, read from the terminal or, with `script`, from a
    file (one input per line, confirmations included): slash commands (/why, /what-if, /diff, /alternatives,
    /accept, /export, /exit) work without an LLM; other lines go to the configured LLM through read-only tools.
    Returns 1 when a command failed, else 0."""
    from infra.agent.review import Review, console_reader, script_reader
    from infra.planner.types import load_plan

    # What-ifs are planned with the calibration the plan was made with, where its file is still there.
    measured = load_plan(plan_path).spec.provenance.calibration.measured
    calibration = measured.path if measured is not None and Path(measured.path).is_file() else None
    read = script_reader(Path(script), console) if script is not None else console_reader(console)
    return Review(Path(plan_path), console, read, planning=_planning(calibration),
                  intent_path=Path(intent_path) if intent_path else None, catalog_dirs=catalog_dirs).run()


def _planning(calibration: str | Path | None) -> Any:
    """The planning functions handed to the agent (`infra.agent.planning.Planning`), planning with the user's
    calibration when one is given."""
    import functools

    from infra.agent.planning import Planning
    from infra.workflow.intent import check
    from infra.workflow.plan import plan

    return Planning(check=check, plan=functools.partial(plan, calibration=calibration) if calibration else plan)
