"""A plan's manifests as a pull request on a GitOps repository (`infra pr`)."""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path

from infra.bench.client import Progress
from infra.catalog.targets import DEFAULT_TARGET, check_target
from infra.gitops.github import DEFAULT_API
from infra.gitops.pr import (
    PrRequest,
    PrResult,
    check_fingerprint,
    intent_records,
    preflight,
    prepare,
    reproduce_command,
)
from infra.planner.plan import fingerprint
from infra.planner.types import DeploymentPlan, load_plan
from infra.render import render_tree
from infra.report.plan import plan_yaml
from infra.workflow.intent import load_intent
from infra.workflow.plan import plan


def open_pr(intent: str | Path, repo: str | Path, *, plan_path: str | Path | None = None, root: str = "deploy",
            cluster: str | None = None, base: str = "main", branch: str | None = None, push: bool = False,
            github: str | None = None, github_api: str | None = None, allow_dirty: bool = False,
            sync: str | None = None, catalog_dirs: tuple[Path, ...] = (), body_file: str | Path | None = None,
            progress: Progress | None = None, verify: bool = True, calibration: str | Path | None = None,
            force: bool = False, target: str = "kubernetes") -> PrResult:
    """Turn an intent's plan into a pull request on a GitOps repository: plan (or take `plan_path`, whose
    fingerprint must match the intent), render into `<root>/<service>/{base,overlays/<cluster>}`, keep the plan
    and intent under `<root>/.infra/<plan name>/`, commit on the PR branch when anything changed, and with `push`
    push it and open or update the PR (a GitHub token in GITHUB_TOKEN or GH_TOKEN). Returns
    `infra.gitops.pr.PrResult`."""
    token = (os.environ.get("GITHUB_TOKEN") or os.environ.get("GH_TOKEN")) if push else None
    req = PrRequest(repo=Path(repo), root=root, cluster=cluster, base=base, branch=branch, push=push, github=github,
                    github_api=github_api or os.environ.get("GITHUB_API_URL") or DEFAULT_API,
                    allow_dirty=allow_dirty, sync=sync, body_file=Path(body_file) if body_file else None,
                    force=force, token=token or None)

    check_target(target)
    req = dataclasses.replace(req, command=reproduce_command(str(intent), req, tuple(str(d) for d in catalog_dirs),
                                                             str(calibration) if calibration is not None else None)
                              + (f" --target {target}" if target != DEFAULT_TARGET else ""))
    preflight(req)  # a dirty or missing repository is refused before planning, which takes seconds
    resolved = load_intent(intent, catalog_dirs, calibration)
    if plan_path is not None:
        typed = load_plan(plan_path)
        check_fingerprint(typed, fingerprint(resolved), plan_path, str(intent))
    else:
        # The same plan `infra plan` makes, verified by default, so that the PR body carries the verdict.
        typed = plan(intent, catalog_dirs=catalog_dirs, progress=progress, verify=verify,
                     calibration=calibration).plan

    def render_files(p: DeploymentPlan) -> tuple[dict[str, str], list[str]]:
        rendered = render_tree(p, catalog_dirs=tuple(catalog_dirs), target=target)
        return rendered.files, rendered.notes

    return prepare(typed, plan_yaml(typed), render_files, intent_records(resolved), req)
