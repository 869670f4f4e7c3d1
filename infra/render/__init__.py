"""Plans into Kubernetes manifests: a kustomize tree per service (MANIFESTS.md), from user-overridable templates.

`render_plan(plan)` gives the files as text; `render_tree` adds the notes a user must act on; `infra.files.write_files`
writes them.
"""

from __future__ import annotations

from pathlib import Path

from infra.catalog.loader import load_catalog
from infra.catalog.targets import DEFAULT_TARGET, check_target
from infra.intent.yamlio import load_yaml
from infra.planner.types import DeploymentPlan
from infra.render import targets
from infra.render.build import build
from infra.render.context import path_only
from infra.render.env import Templates
from infra.render.settings import load_settings
from infra.render.tree import Rendered, assemble

__all__ = ["Rendered", "render_plan", "render_tree"]


def render_tree(plan: DeploymentPlan, *, templates: Path | None = None, catalog_dirs: tuple[Path, ...] = (),
                plan_file: str | None = None, target: str = "kubernetes") -> Rendered:
    """Manifests and notes for a plan; `templates` overrides packaged templates (and settings.yaml) by file name.
    `plan_file`, the file the plan was read from, lets problems with the plan name their line. `target` is the
    stack the objects are for (`infra.catalog.targets.TARGETS`): infra's own workloads (`kubernetes`), or NVIDIA
    Dynamo, llm-d or KServe resources (infra.render.targets), which refuse what they cannot express."""

    check_target(target)
    tpl = Templates(Path(templates) if templates is not None else None)
    settings = load_settings(tpl.override_dir)
    catalog = load_catalog(tuple(catalog_dirs))
    if target == DEFAULT_TARGET:
        built = build(plan, catalog, settings, _locator(plan_file))
        return assemble(built, tpl, plan.spec.cluster.name, plan.spec.cluster.namespace)

    built, values = targets.build(plan, catalog, settings, _locator(plan_file), target)
    return assemble(built, tpl, plan.spec.cluster.name, plan.spec.cluster.namespace, values)


def render_plan(plan: DeploymentPlan, *, templates: Path | None = None,
                catalog_dirs: tuple[Path, ...] | list[Path] = (), target: str = "kubernetes") -> dict[str, str]:
    """Relative posix path -> file text of every manifest for `plan` (same plan, same bytes)."""
    return render_tree(plan, templates=templates, catalog_dirs=tuple(catalog_dirs), target=target).files


def _locator(plan_file: str | None):
    """Field path -> file:line of the plan file when there is one to read, else the path alone."""

    if plan_file is None or not Path(plan_file).is_file():
        return path_only(plan_file)

    _, smap = load_yaml(Path(plan_file).read_text(encoding="utf-8"), plan_file)
    return smap.locate
