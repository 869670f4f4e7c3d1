"""Kustomization files: only kustomize's fields, every path they name exists, and every manifest beside one is
listed in it (a file kustomize never reads is never applied)."""

from __future__ import annotations

import difflib
import os
import shutil
import subprocess
from pathlib import Path

from infra.validators.findings import Finding
from infra.validators.manifests import KUSTOMIZATION_FILES, Manifest
from infra.validators.rules import rule

# Fields of kustomize.config.k8s.io/v1beta1 Kustomization (kustomize v5; deprecated ones still read).
FIELDS = {
    "apiVersion", "kind", "metadata", "resources", "bases", "components", "namespace", "namePrefix", "nameSuffix",
    "commonLabels", "labels", "commonAnnotations", "patches", "patchesStrategicMerge", "patchesJson6902", "images",
    "replicas", "configMapGenerator", "secretGenerator", "generatorOptions", "generators", "transformers",
    "validators", "crds", "vars", "replacements", "helmCharts", "helmGlobals", "buildMetadata", "openapi",
    "sortOptions", "configurations", "nameReference",
}


def _remote(ref: str) -> bool:
    return "://" in ref or ref.startswith(("github.com/", "git@", "gitlab.com/", "bitbucket.org/"))


def _paths(k: Manifest) -> list[tuple[tuple, str, str]]:
    """(field path, referenced path, what) for every local path a kustomization names."""
    d = k.data
    out: list[tuple[tuple, str, str]] = []
    for key in ("resources", "bases", "components", "crds", "configurations", "transformers", "generators",
                "validators"):
        for i, ref in enumerate(d.get(key) or []):
            if isinstance(ref, str):
                out.append(((key, i), ref, key))
    for i, p in enumerate(d.get("patches") or []):
        if isinstance(p, dict) and isinstance(p.get("path"), str):
            out.append((("patches", i, "path"), p["path"], "patch"))
    for i, p in enumerate(d.get("patchesJson6902") or []):
        if isinstance(p, dict) and isinstance(p.get("path"), str):
            out.append((("patchesJson6902", i, "path"), p["path"], "patch"))
    for i, p in enumerate(d.get("patchesStrategicMerge") or []):
        # An entry is a file path unless it is an inline patch (a YAML document in a string).
        if isinstance(p, str) and "\n" not in p:
            out.append((("patchesStrategicMerge", i), p, "patch"))
    for gen in ("configMapGenerator", "secretGenerator"):
        for i, g in enumerate(d.get(gen) or []):
            if not isinstance(g, dict):
                continue
            for key in ("files", "envs"):
                for j, f in enumerate(g.get(key) or []):
                    if isinstance(f, str):
                        out.append(((gen, i, key, j), f.split("=", 1)[-1], f"{gen} {key}"))
            if isinstance(g.get("env"), str):
                out.append(((gen, i, "env"), g["env"], f"{gen} env"))
    return out


def patch_files(kustomizations: list[Manifest]) -> set[Path]:
    """Resolved paths of the files kustomizations apply as patches."""
    return {(Path(k.file).parent / target).resolve() for k in kustomizations for _, target, what in _paths(k)
            if what == "patch" and not _remote(target)}


def check_kustomization(k: Manifest) -> list[Finding]:
    out = []
    ref = f"Kustomization/{Path(k.file).parent.name or '.'}"
    for key in sorted(k.data):
        if key not in FIELDS:
            near = difflib.get_close_matches(str(key), sorted(FIELDS), n=1)
            f = k.finding("KUS002", (key,), f"{key!r} is not a Kustomization field",
                          fix=f"did you mean {near[0]!r}?" if near else None)
            out.append(_renamed(f, ref))
    base = Path(k.file).parent
    for path, target, what in _paths(k):
        if _remote(target):
            continue
        full = base / target
        if not full.exists():
            out.append(_renamed(k.finding("KUS001", path, f"{what} {target!r} does not exist ({full})"), ref))
        elif full.is_dir() and what in ("resources", "bases", "components") and \
                not any((full / n).is_file() for n in KUSTOMIZATION_FILES):
            out.append(_renamed(k.finding("KUS001", path, f"{what} {target!r} is a directory without a "
                                                          "kustomization.yaml"), ref))
    return out


def _renamed(f: Finding, ref: str) -> Finding:
    from dataclasses import replace

    return replace(f, object=ref)


def check_unlisted(kustomizations: list[Manifest], files: list[Path]) -> list[Finding]:
    """KUS003: manifests in a kustomization's directory that it neither lists nor patches with."""

    # Each file's directory resolved once (a tree of a thousand files and a hundred kustomizations otherwise makes
    # a hundred thousand realpath walks).
    by_dir: dict[Path, list[Path]] = {}
    for f in files:
        if f.name not in KUSTOMIZATION_FILES:
            by_dir.setdefault(f.parent.resolve(), []).append(f)
    out = []
    for k in kustomizations:
        base = Path(k.file).parent
        used = {(base / target).resolve() for _, target, _ in _paths(k) if not _remote(target)}
        for f in by_dir.get(base.resolve(), []):
            if f.resolve() not in used:
                out.append(rule("KUS003").at(str(f), 1, f"Kustomization/{base.name or '.'}",
                                             f"{f.name} is not listed in {Path(k.file).name}",
                                             fix=f"add `- {f.name}` to resources, or delete the file"))
    return out


def check_builds(kustomizations: list[Manifest]) -> tuple[list[Finding], list[str]]:
    """KUS004: every top-level kustomization (one no other kustomization of the tree includes, i.e. an overlay)
    builds with `kubectl kustomize`; notes say when no kubectl is there to build with."""
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        return [], ["kustomizations were not built: kubectl is not on PATH"]
    included = {(Path(k.file).parent / target).resolve() for k in kustomizations for _, target, what in _paths(k)
                if what in ("resources", "bases", "components") and not _remote(target)}
    tops = [k for k in kustomizations if Path(k.file).parent.resolve() not in included]
    # Overlays build a few at a time (each kubectl is a process of its own, mostly start-up), read in their order.
    at_once = max(2, os.cpu_count() or 1)
    running: dict[int, subprocess.Popen[str]] = {}
    out: list[Finding] = []

    def start(i: int) -> None:
        if i < len(tops):
            running[i] = subprocess.Popen([kubectl, "kustomize", str(Path(tops[i].file).parent)], text=True,
                                          stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)

    try:
        for i in range(at_once):
            start(i)
        for i, k in enumerate(tops):
            proc = running.pop(i)
            _, stderr = proc.communicate(timeout=120)
            start(i + at_once)
            if proc.returncode != 0:
                folder = Path(k.file).parent
                lines = [x for x in stderr.strip().splitlines() if x.strip()] or ["(no message)"]
                out.append(rule("KUS004").at(k.file, 1, f"Kustomization/{folder.name}",
                                             f"`kubectl kustomize {folder}` fails: {lines[-1][:300]}"))
    except (OSError, subprocess.TimeoutExpired) as exc:
        return out, [f"kustomizations were not built: kubectl failed to run ({exc})"]
    finally:
        for proc in running.values():
            proc.kill()
            proc.wait()
    return out, []
