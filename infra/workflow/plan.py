"""Planning an intent (`infra plan`): solve, verify in simulation and re-plan while objectives fail, render and
validate the manifests in a scratch directory, then write everything or nothing."""

from __future__ import annotations

import re
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from infra.bench.client import Progress
from infra.bench.verify import VERIFY_REQUESTS, verify_plan
from infra.catalog.targets import check_target
from infra.errors import InfeasibleError, IntentError, Location, Problem, ValidationError
from infra.files import plan_writes, write_files
from infra.intent.resolve import ResolvedIntent
from infra.planner.candidates import Considered, Corrections
from infra.planner.plan import build_plan
from infra.planner.types import Change, DeploymentPlan, Verification
from infra.render import render_tree
from infra.report.bench import verification_markdown
from infra.report.plan import infeasible_markdown, plan_markdown, plan_yaml
from infra.validators import validate_tree
from infra.workflow.intent import load_intent


@dataclass(frozen=True)
class PlanResult:
    """A solved intent: its plan, its report, and what was written."""

    plan: DeploymentPlan
    report: str
    considered: list[Considered]
    written: list[Path]
    verification: Verification | None = None
    """The plan's verification section when it was verified (`verdict` pass, fail or inconclusive)."""
    notes: tuple[str, ...] = ()
    """What the rendered manifests still need from the user (written with `output`)."""


def plan(path: str | Path, output: str | Path | None = None, *, top: int = 3,
         catalog_dirs: tuple[Path, ...] = (), progress: Progress | None = None, objective: str = "cost",
         verify: bool = False, verify_requests: int | None = None, seed: int = 0,
         templates: str | Path | None = None, changes: list[dict[str, Any]] | None = None,
         calibration: str | Path | None = None, force: bool = False, target: str = "kubernetes") -> PlanResult:
    """Plan an intent: the cheapest deployment that meets every objective, or InfeasibleError (exit 2) with the
    conflict and the relaxations that would fix it. With `output`, writes plan.yaml, report.md and the rendered
    manifests (`manifests/`, from `templates` over the packaged ones) there, all or nothing, replacing only what
    infra wrote there before (`infra.files.write_files`; `force` overrules that check);
    `progress(done, total)` hears how many services have been scored. `objective` "goodput" plans for a fixed
    inventory: as much of the demand as fits, then the cheapest way to carry it. With `verify`, the plan is
    simulated and re-planned while objectives fail (`infra.bench.verify`); the result's `verification` says how
    it ended (`verdict` "fail" is exit 3 on the command line). `changes` (accepted edits of the intent,
    `infra.planner.types.Change` as data) are recorded in the plan's provenance. `calibration` is a file of
    `infra calibrate` whose corrections every estimate takes (else the cluster profile's, if it names one).
    `target` is the stack the manifests are for (`infra.render.render_tree`)."""
    check_target(target)
    resolved = load_intent(path, catalog_dirs, calibration)
    if output is not None:  # refused now rather than after the search
        plan_writes(output, {"plan.yaml": None, "report.md": None}, force=force)
    try:
        planned, considered = build_plan(resolved, top=top, objective=objective, progress=progress)
        verification = None
        if verify:
            planned, considered, verification = _verify(resolved, planned, considered, top=top, objective=objective,
                                                        requests=verify_requests, seed=seed)
    except InfeasibleError as exc:
        if output is not None:
            left = [n for n in ("plan.yaml", "manifests/") if (Path(output) / n.rstrip("/")).exists()]
            write_files(output, {"report.md": infeasible_markdown(
                resolved.loaded.intent.metadata.name, exc.problems, getattr(exc, "considered", []),
                " and ".join(left) or None)}, force=force)
        raise
    if changes:
        recorded = [Change.model_validate(c) for c in changes]
        planned = planned.with_spec(provenance=planned.spec.provenance.model_copy(update={"changes": recorded}))
    report = plan_markdown(planned, considered)
    if verification is not None:
        report = report.rstrip("\n") + "\n\n" + verification_markdown(verification) + "\n"
    written: list[Path] = []
    notes: tuple[str, ...] = ()
    if output is not None:
        out = Path(output)
        # Rendered and validated before anything is written, so that a template error or a broken rule leaves
        # the directory as it was.
        try:
            rendered = render_tree(planned, templates=Path(templates) if templates is not None else None,
                                   catalog_dirs=tuple(catalog_dirs), plan_file=str(out / "plan.yaml"),
                                   target=target)
        except IntentError as exc:
            # The plan is not written: what the target refuses is told at the intent's service.
            raise IntentError([Problem(f"{p.message} (nothing was written)", _at_intent(resolved, planned, p.location),
                                       p.fix) for p in exc.problems]) from None
        plan_text = plan_yaml(planned)
        validation = _validate_rendered(rendered.files, plan_text, out, catalog_dirs)
        write_files(out, {"plan.yaml": plan_text, "report.md": report,
                          **{f"manifests/{rel}": text for rel, text in rendered.files.items()}},
                    force=force, prune=("manifests/",))
        written = [out / "plan.yaml", out / "report.md", out / "manifests"]
        notes = tuple(rendered.notes) + ((validation,) if validation else ())
    return PlanResult(planned, report, considered, written, verification, notes)


def _at_intent(resolved: ResolvedIntent, planned: DeploymentPlan, where: Location) -> Location:
    """The intent's line of the service a location in the (unwritten) plan names, else the intent file."""
    doc = resolved.loaded.document
    found = re.match(r"spec\.services\[(\d+)\]", where.path or "")
    services = planned.spec.services
    if found and int(found.group(1)) < len(services):
        svc = services[int(found.group(1))]
        name = svc.pipeline or svc.name
        names = [s.name for s in resolved.loaded.intent.spec.services]
        if name in names:
            return doc.locate(("spec", "services", names.index(name)))
    return Location(str(doc.path), 1, 1)


def _validate_rendered(files: dict[str, str], plan_text: str, out: Path, catalog_dirs: tuple[Path, ...]) -> str:
    """Validate a rendered tree against its plan in a scratch directory; raise ValidationError (exit 1) naming the
    files as they would be written under `out` when a rule breaks; otherwise a one-line summary."""
    if not files:
        return ""
    with tempfile.TemporaryDirectory() as tmp:
        stage = Path(tmp) / "out"
        write_files(stage, {"plan.yaml": plan_text, **{f"manifests/{rel}": text for rel, text in files.items()}},
                    record=False)
        report = validate_tree(stage / "manifests", plan=stage / "plan.yaml", catalog_dirs=tuple(catalog_dirs))

        def where(path: str) -> str:
            return path.replace(str(stage), str(out), 1)

        if report.errors:
            raise ValidationError([Problem(f"{f.rule}: {f.object}: {f.message}",
                                           Location(where(f.file), f.line or None), f.fix or "re-render the plan")
                                   for f in report.errors])
    return (f"validated {report.objects} objects in {report.files} files against the plan: no errors, "
            f"{len(report.warnings)} warnings (`infra validate {out / 'manifests'} --plan {out / 'plan.yaml'}` "
            "lists them)")


def _verify(resolved: ResolvedIntent, planned: DeploymentPlan, considered: list[Considered], *, top: int,
            objective: str, requests: int | None, seed: int
            ) -> tuple[DeploymentPlan, list[Considered], Verification]:
    """Simulate the plan and re-plan with corrections while objectives fail (the loop lives above the planner)."""
    def replan(corrections: Corrections) -> tuple[DeploymentPlan, list[Considered]]:
        return build_plan(resolved, top=top, objective=objective, corrections=corrections, explain=False)

    final, extra, section = verify_plan(planned, replan, intent=str(resolved.loaded.document.path),
                                        catalog=resolved.catalog, requests=requests or VERIFY_REQUESTS, seed=seed,
                                        calibration=resolved.calibration)
    return final, extra if extra is not None else considered, section
