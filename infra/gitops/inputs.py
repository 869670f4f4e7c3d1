"""The intent and every file it reads, kept under `.infra/<plan name>/` so that the copy checks (and plans) in place.

An intent names other files by path: its cluster profile, trace files of token lengths, config.json models, and
the profile in turn a calibration. The kept copy lays them out as they lie around the intent (`profiles/x.yaml`
beside `intent.yaml` when the intent says `profile: profiles/x.yaml`), so the intent is kept byte for byte and its
plan's fingerprint, which covers the paths as written, stays the same. A file that does not lie below the intent's
directory (`../profiles/x.yaml`, an absolute path) is kept under `inputs/`, and the reference to it is rewritten in
the kept copy of the file that names it, nothing else of that file changing.
"""

from __future__ import annotations

import json
import os
import posixpath
import re
from dataclasses import dataclass
from pathlib import Path

from infra.errors import InfraError, Location, Problem
from infra.intent.resolve import ResolvedIntent
from infra.intent.yamlio import PathKey, read_text
from infra.limits import MAX_RECORDS_BYTES

INTENT = "intent.yaml"
# Names the state directory keeps for itself: an input may not take them.
RESERVED = {INTENT, "plan.yaml", "files.txt"}
INPUTS = "inputs"
_PART = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9._-]*$")
_PLAIN = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_./-]*$")


@dataclass(frozen=True)
class Reference:
    """A path written in one input file, naming another."""

    referrer: str
    """Absolute path of the file holding the reference."""
    where: PathKey
    """Field path of the reference in the referrer."""
    text: str
    """The path as written."""
    target: str
    """Absolute, normalised path of the file named."""


def _absolute(path: Path | str) -> str:
    return os.path.normpath(os.path.abspath(path))


def references(resolved: ResolvedIntent) -> list[Reference]:
    """Every file path the intent (and its cluster profile) names, as later loading resolves it."""
    loaded = resolved.loaded
    intent_path = _absolute(loaded.document.path)
    out: list[Reference] = []

    def add(referrer: str, where: PathKey, text: str | None) -> None:
        if text:
            out.append(Reference(referrer, where, text, _absolute(os.path.join(os.path.dirname(referrer), text))))

    spec = loaded.intent.spec
    add(intent_path, ("spec", "cluster", "profile"), spec.cluster.profile)
    for si, svc in enumerate(spec.services):
        sp: PathKey = ("spec", "services", si)
        if svc.model and svc.model.endswith(".json"):
            add(intent_path, sp + ("model",), svc.model)
        for field in ("input_tokens", "output_tokens"):
            dist = getattr(svc.workload, field)
            add(intent_path, sp + ("workload", field, "trace"), dist.trace if dist is not None else None)
        for ti, stage in enumerate(svc.pipeline or []):
            if stage.model and stage.model.endswith(".json"):
                add(intent_path, sp + ("pipeline", ti, "model"), stage.model)
            for field in ("input_tokens", "output_tokens"):
                dist = getattr(stage.work, field)
                add(intent_path, sp + ("pipeline", ti, "work", field, "trace"),
                    dist.trace if dist is not None else None)
    add(_absolute(loaded.cluster_document().path), loaded.cluster_path() + ("calibration",),
        loaded.cluster.calibration)
    return out


def _kept_name(target: str, base: str, taken: set[str]) -> str:
    """Where a file is kept, relative to the state directory: where it lies relative to the intent when that is
    below it and a plain name, else `inputs/<its name>`."""
    rel = os.path.relpath(target, base).replace(os.sep, "/")
    parts = rel.split("/")
    if (rel not in RESERVED and rel not in taken and all(_PART.match(p) for p in parts) and ".git" not in parts
            and parts[0] != INPUTS):
        return rel
    stem = re.sub(r"[^A-Za-z0-9._-]", "-", os.path.basename(target)).lstrip(".-") or "input"
    name, n = f"{INPUTS}/{stem}", 1
    while name in taken:
        n += 1
        root, ext = posixpath.splitext(stem)
        name = f"{INPUTS}/{root}-{n}{ext}"
    return name


def _scalar(text: str) -> str:
    """A YAML scalar that reads back as `text`."""
    return text if _PLAIN.match(text) and not text.endswith(":") else json.dumps(text)


def _rewrite(text: str, where: str, changes: dict[PathKey, str]) -> str:
    """`text` with the scalars at the given field paths replaced, every other byte kept."""
    from ruamel.yaml import YAML
    from ruamel.yaml.nodes import MappingNode, ScalarNode, SequenceNode

    root = YAML(typ="rt").compose(text)
    spans = []
    for path, value in changes.items():
        node = root
        for step in path:
            if isinstance(node, MappingNode):
                node = next((v for k, v in node.value if isinstance(k, ScalarNode) and k.value == step), None)
            elif isinstance(node, SequenceNode) and isinstance(step, int) and step < len(node.value):
                node = node.value[step]
            else:
                node = None
            if node is None:
                break
        if not isinstance(node, ScalarNode):
            raise InfraError(Problem(f"cannot keep a copy of {where}: no path at {'.'.join(map(str, path))}",
                                     Location(where), "write the path as a plain string"))
        spans.append((node.start_mark.index, node.end_mark.index, _scalar(value)))
    for start, end, value in sorted(spans, reverse=True):
        text = text[:start] + value + text[end:]
    return text


def kept_inputs(resolved: ResolvedIntent) -> dict[str, str]:
    """Name under the state directory -> text, for the intent (`intent.yaml`) and every file it reads, with the
    references between them rewritten only where a file could not be kept where the reference points."""
    intent_path = _absolute(resolved.loaded.document.path)
    base = os.path.dirname(intent_path)
    refs = references(resolved)
    kept = {intent_path: INTENT}
    for ref in refs:
        if ref.target not in kept:
            kept[ref.target] = _kept_name(ref.target, base, set(kept.values()))
    changes: dict[str, dict[PathKey, str]] = {}
    for ref in refs:
        folder = posixpath.dirname(kept[ref.referrer])
        want = kept[ref.target]
        if os.path.isabs(ref.text) or posixpath.normpath(posixpath.join(folder, ref.text)) != want:
            changes.setdefault(ref.referrer, {})[ref.where] = posixpath.relpath(want, folder or ".")
    out = {}
    for path, name in kept.items():
        text = read_text(Path(path), "input", MAX_RECORDS_BYTES)
        if path in changes:
            text = _rewrite(text, path, changes[path])
        out[name] = text
    return out
