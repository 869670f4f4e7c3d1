"""Where a plan's files go in a GitOps repository, under the configured root:

    <service>/base/...                      rendered manifests (MANIFESTS.md layout)
    <service>/overlays/<cluster>/...
    clusters/<cluster>/<service>.yaml       optional: an Argo CD Application or a Flux Kustomization per overlay
    .infra/<plan name>/plan.yaml            the plan itself, so the next pull request diffs against it
    .infra/<plan name>/intent.yaml          the intent as written, and beside it every file it reads (cluster
                                            profile, calibration, traces) where it points, so the copy checks in
                                            place (infra.gitops.inputs)
    .infra/<plan name>/files.txt            every file above that the plan owns, so a re-plan removes stale ones

The `.infra` directory sits beside the applications, never inside a path a controller applies.
"""

from __future__ import annotations

from infra.errors import InfraError, Location, Problem
from infra.gitops.paths import STATE_DIR, check_name, clean_relative
from infra.planner.types import DeploymentPlan
from infra.report.plan import dump_yaml

CLUSTERS_DIR = "clusters"
ARGOCD_NAMESPACE = "argocd"
FLUX_NAMESPACE = "flux-system"
FLUX_SOURCE = "flux-system"
"""The GitRepository `flux bootstrap` creates for the repository it manages."""


def state_dir(plan: DeploymentPlan) -> str:
    return f"{STATE_DIR}/{plan.metadata.name}"


def directories(plan: DeploymentPlan) -> list[str]:
    """The tree's top directories: one per service, and one per CPU stage of a pipeline (`<pipeline>-<stage>`),
    which renders its own workload without being a service of the plan."""
    services = [s.name for s in plan.spec.services]
    cpu = [f"{p.service}-{st.name}" for p in plan.spec.pipelines for st in p.stages if st.unit not in services]
    return services + sorted(set(cpu) - set(services))


def place_rendered(plan: DeploymentPlan, rendered: dict[str, str], cluster: str) -> dict[str, str]:
    """Rendered files keyed by path under the root, with the overlay renamed to `cluster` when it differs from the
    plan's cluster; every path must be a plain relative one inside a directory of one of the plan's services."""
    services = set(directories(plan))
    for name in services:
        check_name(name, "service", "plan")
        if name == CLUSTERS_DIR:
            raise InfraError(Problem(f"service {name!r} would share its directory with the GitOps objects",
                                     Location("plan", path="spec.services"), "rename the service in the intent"))
    own = plan.spec.cluster.name
    out = {}
    for path, text in rendered.items():
        rel = clean_relative(path, "rendered file", "render")
        parts = rel.split("/")
        if parts[0] not in services or len(parts) < 2:
            raise InfraError(Problem(f"rendered file {path!r} is outside the directories of the plan's services",
                                     Location("render"), "render only <service>/base and <service>/overlays"))
        if cluster != own and parts[1:3] == ["overlays", own]:
            parts[2] = cluster
        out["/".join(parts)] = text
    return out


def _labels(plan: DeploymentPlan, service: str) -> dict[str, str]:
    return {"app.kubernetes.io/name": service, "app.kubernetes.io/part-of": plan.metadata.name,
            "app.kubernetes.io/managed-by": "infra", "infra.dev/service": service}


def sync_objects(plan: DeploymentPlan, *, cluster: str, root: str, flavour: str, repo_url: str | None,
                 revision: str) -> dict[str, str]:
    """One Argo CD Application (`flavour` "argocd") or Flux Kustomization ("flux") per overlay, keyed by path
    under the root. Argo CD needs the repository's URL (from its remote); Flux uses the bootstrap source."""
    out = {}
    for name in directories(plan):
        overlay = f"{name}/overlays/{cluster}" if root == "." else f"{root}/{name}/overlays/{cluster}"
        meta = {"name": f"{name}-{cluster}", "labels": _labels(plan, name)}
        if flavour == "argocd":
            if not repo_url:
                raise InfraError(Problem("an Argo CD Application needs the repository's URL, and it has no remote",
                                         Location("--argocd"), "add the remote: git remote add origin URL"))
            obj = {"apiVersion": "argoproj.io/v1alpha1", "kind": "Application",
                   "metadata": {**meta, "namespace": ARGOCD_NAMESPACE},
                   "spec": {"project": "default",
                            "source": {"repoURL": repo_url, "targetRevision": revision, "path": overlay},
                            "destination": {"server": "https://kubernetes.default.svc",
                                            "namespace": plan.spec.cluster.namespace}}}
        else:
            obj = {"apiVersion": "kustomize.toolkit.fluxcd.io/v1", "kind": "Kustomization",
                   "metadata": {**meta, "namespace": FLUX_NAMESPACE},
                   "spec": {"interval": "10m", "path": f"./{overlay}", "prune": True,
                            "sourceRef": {"kind": "GitRepository", "name": FLUX_SOURCE}}}
        out[f"{CLUSTERS_DIR}/{cluster}/{name}.yaml"] = dump_yaml(obj)
    return out


def state_files(plan: DeploymentPlan, plan_text: str, records: dict[str, str], owned: list[str]) -> dict[str, str]:
    """The plan, the records of its inputs and the list of owned files, keyed by path under the root."""
    d = state_dir(plan)
    out = {f"{d}/plan.yaml": plan_text, f"{d}/files.txt": "".join(f"{p}\n" for p in sorted(owned))}
    out.update({f"{d}/{name}": text for name, text in records.items()})
    return out


def owned_from(text: str | None, where: str) -> list[str]:
    """Paths listed in a files.txt (under the root); none when there is no such file. A listed path that is not a
    plain relative one is refused, so an edited list cannot make a re-plan remove files outside the root."""
    if not text:
        return []
    return [clean_relative(line.strip(), "listed file", where) for line in text.splitlines() if line.strip()]
