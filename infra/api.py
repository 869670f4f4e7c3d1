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
    notes: tuple[str, ...] = ()
    """What the rendered manifests still need from the user (written with `output`)."""


def plan(path: str | Path, output: str | Path | None = None, *, top: int = 3,
         catalog_dirs: tuple[Path, ...] = (), progress: Any = None, objective: str = "cost",
         templates: str | Path | None = None) -> PlanResult:
    """Plan an intent: the cheapest deployment that meets every objective, or InfeasibleError (exit 2) with the
    conflict and the relaxations that would fix it. With `output`, writes plan.yaml, report.md and the rendered
    manifests (`manifests/`, from `templates` over the packaged ones) there;
    `progress(done, total)` hears how many services have been scored. `objective` "goodput" plans for a fixed
    inventory: as much of the demand as fits, then the cheapest way to carry it."""
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
    report = plan_markdown(data, considered)
    written: list[Path] = []
    if output is not None:
        from infra.files import write_atomic

        out = Path(output)
        write_atomic(out / "plan.yaml", plan_yaml(data))
        write_atomic(out / "report.md", report)
        written = [out / "plan.yaml", out / "report.md"]
        from infra.planner.types import DeploymentPlan
        from infra.render import render_tree, write_tree

        rendered = render_tree(DeploymentPlan.model_validate(data),
                               templates=Path(templates) if templates is not None else None,
                               catalog_dirs=tuple(catalog_dirs), plan_file=str(out / "plan.yaml"))
        write_tree(rendered.files, out / "manifests")
        written.append(out / "manifests")
        return PlanResult(data, report, considered, written, tuple(rendered.notes))
    return PlanResult(data, report, considered, written)


@dataclass(frozen=True)
class RenderResult:
    """Manifests of a plan: the files written (or that would be), and what the user must still do."""

    files: dict[str, str]
    notes: list[str]
    written: list[Path]


def render(plan_path: str | Path, output: str | Path | None = None, templates: str | Path | None = None,
           catalog_dirs: tuple[Path, ...] = (), *, force: bool = False) -> RenderResult:
    """Render a plan.yaml into a kustomize tree (MANIFESTS.md); with `output`, write it there atomically, refusing
    a non-empty directory infra did not write unless `force`."""
    from infra.planner.types import load_plan
    from infra.render import render_tree, write_tree

    plan_obj = load_plan(plan_path)
    rendered = render_tree(plan_obj, templates=Path(templates) if templates is not None else None,
                           catalog_dirs=tuple(catalog_dirs), plan_file=str(plan_path))
    written = write_tree(rendered.files, output, force=force) if output is not None else []
    return RenderResult(rendered.files, rendered.notes, written)


def validate(path: str | Path, profile: str | Path | None = None, plan: str | Path | None = None,
             live: bool = False, catalog_dirs: tuple[Path, ...] = ()) -> Any:
    """Check a manifest file or tree: schema, kustomize, semantic and security rules; with `profile` (a
    ClusterProfile file) or `plan` (a plan.yaml, whose spec.cluster also serves as the profile) the cluster and
    plan-consistency rules; with `live` a server-side dry run. Returns an `infra.validators.Report`."""
    from infra.validators import validate_tree

    return validate_tree(path, profile=profile, plan=plan, live=live, catalog_dirs=catalog_dirs)
