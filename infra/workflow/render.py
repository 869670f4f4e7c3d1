"""Rendering a plan into manifests (`infra render`)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from infra.catalog.targets import check_target
from infra.files import plan_writes, write_files
from infra.planner.types import load_plan
from infra.render import render_tree


@dataclass(frozen=True)
class RenderResult:
    """Manifests of a plan: the files written (or that would be), and what the user must still do."""

    files: dict[str, str]
    notes: list[str]
    written: list[Path]


def render(plan_path: str | Path, output: str | Path | None = None, templates: str | Path | None = None,
           catalog_dirs: tuple[Path, ...] = (), *, force: bool = False, target: str = "kubernetes") -> RenderResult:
    """Render a plan.yaml into a kustomize tree (MANIFESTS.md) for `target` (kubernetes, dynamo, llm-d, kserve);
    with `output`, write it there all or nothing, replacing and deleting only what infra wrote there before
    (`infra.files.write_files`) unless `force`."""
    check_target(target)
    plan_obj = load_plan(plan_path)
    if output is not None:
        plan_writes(output, {}, force=force)
    rendered = render_tree(plan_obj, templates=Path(templates) if templates is not None else None,
                           catalog_dirs=tuple(catalog_dirs), plan_file=str(plan_path), target=target)
    written = write_files(output, rendered.files, force=force, prune=("",)) if output is not None else []
    return RenderResult(rendered.files, rendered.notes, written)
