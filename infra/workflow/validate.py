"""Checking manifests (`infra validate`)."""

from __future__ import annotations

from pathlib import Path

from infra.validators import validate_tree
from infra.validators.findings import Report


def validate(path: str | Path, profile: str | Path | None = None, plan: str | Path | None = None,
             live: bool = False, catalog_dirs: tuple[Path, ...] = ()) -> Report:
    """Check a manifest file or tree: schema, kustomize, semantic and security rules; with `profile` (a
    ClusterProfile file) or `plan` (a plan.yaml, whose spec.cluster also serves as the profile) the cluster and
    plan-consistency rules; with `live` a server-side dry run. Returns an `infra.validators.Report`."""
    return validate_tree(path, profile=profile, plan=plan, live=live, catalog_dirs=catalog_dirs)
