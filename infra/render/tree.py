"""The manifest tree (MANIFESTS.md): `<service>/base/` with one object per file and a kustomization, and
`<service>/overlays/<cluster>/` for what differs per cluster; written whole or not at all."""

from __future__ import annotations

import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

from infra.errors import InfraError, IntentError, Location, Problem
from infra.render.context import Built
from infra.render.env import TemplateError, Templates
from infra.render.yamlout import dump_yaml

MARKER = ".infra-manifests"
"""File at the root of a tree `infra render` wrote; its presence lets a later render replace the tree."""

KUSTOMIZE_API = "kustomize.config.k8s.io/v1beta1"


@dataclass(frozen=True)
class Rendered:
    """Manifest files (relative posix path -> text) and what the user must know about them."""

    files: dict[str, str]
    notes: list[str]


def assemble(built: Built, templates: Templates, cluster: str, namespace: str) -> Rendered:
    """Render every object, file it under its service, and add the kustomizations."""
    files: dict[str, str] = {}
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


def write_tree(files: dict[str, str], output: str | Path, *, force: bool = False) -> list[Path]:
    """Write `files` under `output`, replacing a tree infra wrote before; refuses a non-empty directory that infra
    did not write unless `force`. The new tree is built beside the target and swapped in, so a failure leaves the
    old tree (or nothing) in place, never a mix."""
    out = Path(output)
    if out.exists() and not out.is_dir():
        raise IntentError(Problem("output exists and is not a directory", Location(str(out)),
                                  "give -o a directory path"))
    if out.is_dir() and any(out.iterdir()) and not (out / MARKER).is_file() and not force:
        raise IntentError(Problem("output directory is not empty and was not written by infra",
                                  Location(str(out)), "choose an empty or new directory, or pass --force to "
                                                      "replace its contents"))
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(staging, 0o777 & ~umask)  # mkdtemp makes it private; the tree is an ordinary directory
    except OSError as exc:
        raise InfraError(Problem(f"cannot write: {exc.strerror}", Location(str(out.parent)),
                                 "check that the directory is writable")) from None
    try:
        for rel, text in files.items():
            target = staging / rel
            target.parent.mkdir(parents=True, exist_ok=True)
            with open(target, "w", encoding="utf-8", newline="\n") as fh:
                fh.write(text)
        (staging / MARKER).write_text("Written by `infra render`; the next render replaces this directory.\n",
                                      encoding="utf-8")
        old = None
        if out.exists():
            old = out.parent / f".{out.name}.old-{os.getpid()}"
            os.replace(out, old)
        try:
            os.replace(staging, out)
        except OSError:
            if old is not None:
                os.replace(old, out)  # put the previous tree back where it was
            raise
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
    except OSError as exc:
        shutil.rmtree(staging, ignore_errors=True)
        raise InfraError(Problem(f"cannot write: {exc.strerror}", Location(str(out)),
                                 "check that the directory is writable")) from None
    return [out / rel for rel in files]
