"""One validation run over a manifest tree: read, then every layer, then a sorted report."""

from __future__ import annotations

import time
from pathlib import Path

from infra.catalog.loader import load_catalog
from infra.errors import Location, Problem, ValidationError
from infra.planner.types import load_plan
from infra.validators.cluster import ClusterView, device_names, from_plan, from_profile
from infra.validators.findings import Report
from infra.validators.kustomize import check_builds, check_kustomization, check_unlisted, patch_files
from infra.validators.live import client, dry_run
from infra.validators.manifests import read_tree
from infra.validators.plan import check_plan
from infra.validators.profile import check_profile
from infra.validators.schema import check_object, check_values, kubernetes_version
from infra.validators.security import check_security
from infra.validators.semantic import check_semantic
from infra.validators.targets import charted_pod_labels, check_target_plan, detect_target, operated_pod_labels


def validate_tree(path: str | Path, profile: str | Path | None = None, plan: str | Path | None = None,
                  live: bool = False, catalog_dirs: tuple[Path, ...] = ()) -> Report:
    """Validate every manifest under `path` (a file or a directory); raises ValidationError only for inputs that
    stop validation altogether (a missing path, an unreadable profile or plan, `live` without a cluster).
    `catalog_dirs` are catalog overlays: frameworks (how engine arguments are spelled) and devices."""
    started = time.perf_counter()
    root = Path(path)
    if not root.exists():
        raise ValidationError(Problem("manifest path does not exist", Location(str(root)),
                                      "give a manifest file or a directory of manifests (e.g. OUT/manifests)"))
    catalog = load_catalog(tuple(catalog_dirs))
    loaded_plan = None
    cluster: ClusterView | None = None
    if plan is not None:

        loaded_plan = load_plan(plan)
        cluster = from_plan(loaded_plan, str(plan))
    if profile is not None:
        cluster = from_profile(Path(profile), catalog)
    live_client = None
    if live:

        live_client = client()
    tree = read_tree(root, patch_files)
    report = Report(path=str(root), files=len(tree.files), objects=len(tree.manifests))
    report.findings += tree.findings
    report.checks = ["schema", "kustomize", "semantic", "security"]
    report.notes.append(f"built-in kinds checked against Kubernetes {kubernetes_version()} (strict)")
    for m in tree.manifests:
        report.findings += check_object(m)
        report.findings += check_security(m)
    for v in tree.values:
        report.findings += check_values(v, v.chart)
    for k in tree.kustomizations:
        report.findings += check_kustomization(k)
    report.findings += check_unlisted(tree.kustomizations, tree.files)
    built, notes = check_builds(tree.kustomizations)
    report.findings += built
    report.notes += notes
    names = device_names(cluster, catalog)
    report.findings += check_semantic(tree.manifests, names, catalog,
                                      charted_pod_labels(tree.values) + operated_pod_labels(tree.manifests))
    if cluster is not None:
        report.checks.append("profile")
        for m in tree.manifests:
            report.findings += check_profile(m, cluster, names)
    if loaded_plan is not None:
        report.checks.append("plan")
        # A tree rendered for another deployment target (Dynamo, llm-d, KServe) is checked in that target's terms.
        target = detect_target(tree.manifests, tree.values)
        findings, notes = check_plan(tree.manifests, loaded_plan, str(plan), catalog) if target is None else \
            check_target_plan(target, tree.manifests, tree.values, loaded_plan, str(plan), catalog)
        report.findings += findings
        report.notes += notes
    if live_client is not None:

        report.checks.append("live")
        report.findings += dry_run(live_client, tree.manifests)
    report.sort()
    report.seconds = time.perf_counter() - started
    return report
