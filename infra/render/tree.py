"""The manifest tree (MANIFESTS.md): `<service>/base/` with one object per file and a kustomization, and
`<service>/overlays/<cluster>/` for what differs per cluster (written by `infra.files.write_files`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from infra.errors import Location, Problem
from infra.render.context import Built
from infra.render.env import TemplateError, Templates
from infra.render.yamlout import dump_yaml

KUSTOMIZE_API = "kustomize.config.k8s.io/v1beta1"


@dataclass(frozen=True)
class Rendered:
    """Manifest files (relative posix path -> text) and what the user must know about them."""

    files: dict[str, str]
    notes: list[str]


def assemble(built: Built, templates: Templates, cluster: str, namespace: str,
             values: tuple[Any, ...] | list[Any] = ()) -> Rendered:
    """Render every object, file it under its service, and add the kustomizations; `values` are files that are no
    Kubernetes objects (Helm values, infra.render.targets.ValuesFile), written where they say, outside the
    kustomize tree."""
    files: dict[str, str] = {}
    for v in values:
        header = "".join(f"# {line}\n" for line in v.header)
        files[v.path] = header + dump_yaml(templates.render_data(v.template, v.context))
    by_service: dict[str, list[str]] = {}
    origin: dict[str, str] = {}
    for doc in built.docs:
        data = templates.render(doc.template, doc.context)
        name = f"{data['kind'].lower()}-{data['metadata']['name']}.yaml"
        path = f"{doc.service}/base/{name}"
        if path in files:
            raise TemplateError(Problem(
                f"{doc.template} and {origin[path]} both render {data['kind']} {data['metadata']['name']}",
                Location(templates.origin(doc.template)), "give each object its own name"))
        origin[path] = doc.template
        header = "".join(f"# {line}\n" for line in doc.header)
        files[path] = header + dump_yaml(data)
        by_service.setdefault(doc.service, []).append(name)
    for service, names in by_service.items():
        files[f"{service}/base/kustomization.yaml"] = dump_yaml({
            "apiVersion": KUSTOMIZE_API, "kind": "Kustomization", "resources": sorted(names)})
        files[f"{service}/overlays/{cluster}/kustomization.yaml"] = dump_yaml({
            "apiVersion": KUSTOMIZE_API, "kind": "Kustomization", "namespace": namespace,
            "resources": ["../../base"]})
    return Rendered(dict(sorted(files.items())), list(built.notes))
