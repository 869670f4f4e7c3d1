"""Reading a manifest tree: every YAML file under a path (sorted), every document in it, with line numbers.

A file that cannot be read or parsed, and a document that is not a Kubernetes object, become findings; reading
never stops at the first bad file.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ruamel.yaml import YAML
from ruamel.yaml.error import MarkedYAMLError, YAMLError

from infra.errors import InfraError, IntentError
from infra.intent.yamlio import PathKey, SourceMap, dotted, flatten
from infra.limits import MAX_DEPTH, deep_point, read_limited, scan_yaml
from infra.validators.findings import Finding
from infra.validators.rules import rule

KUSTOMIZATION_FILES = ("kustomization.yaml", "kustomization.yml", "Kustomization")
# Documents of infra's own kinds (a plan.yaml next to manifests/) are inputs, not manifests.
OWN_API_GROUP = "infra.dev/"


@dataclass
class Manifest:
    """One Kubernetes object as written in a file."""

    file: str
    index: int
    """Position of the document in its file (0-based)."""
    data: dict[str, Any]
    source: SourceMap

    @property
    def api_version(self) -> str:
        return str(self.data.get("apiVersion") or "")

    @property
    def kind(self) -> str:
        return str(self.data.get("kind") or "")

    @property
    def name(self) -> str:
        meta = self.data.get("metadata")
        return str(meta.get("name") or "") if isinstance(meta, dict) else ""

    @property
    def namespace(self) -> str:
        meta = self.data.get("metadata")
        return str(meta.get("namespace") or "") if isinstance(meta, dict) else ""

    @property
    def labels(self) -> dict[str, str]:
        meta = self.data.get("metadata")
        labels = meta.get("labels") if isinstance(meta, dict) else None
        return {str(k): str(v) for k, v in labels.items()} if isinstance(labels, dict) else {}

    @property
    def annotations(self) -> dict[str, str]:
        meta = self.data.get("metadata")
        notes = meta.get("annotations") if isinstance(meta, dict) else None
        return {str(k): str(v) for k, v in notes.items()} if isinstance(notes, dict) else {}

    @property
    def ref(self) -> str:
        """`Kind/name`, how findings name the object."""
        return f"{self.kind or '?'}/{self.name or '?'}"

    def line(self, path: PathKey, key: bool = False) -> int:
        """Line of the deepest existing prefix of `path` (the offending field, else its parent); with `key`, the
        line of the key rather than of its value (they differ for a nested mapping)."""
        return self.source.locate(path, self.data, key=key).line or 1

    def finding(self, rule_id: str, path: PathKey, message: str, *, key: bool = False, **kw: Any) -> Finding:

        return rule(rule_id).at(self.file, self.line(path, key), self.ref, message, field=dotted(path), **kw)


class ValuesFile(Manifest):
    """The values of one Helm release (`helm/<chart>/<release>.values.yaml`, as the `llm-d` target writes them):
    no Kubernetes object, checked against the chart's values schema."""

    @property
    def ref(self) -> str:
        return f"HelmValues/{self.release}"

    @property
    def chart(self) -> str:
        return Path(self.file).parent.name

    @property
    def release(self) -> str:
        return Path(self.file).name.removesuffix(VALUES_SUFFIX)


VALUES_SUFFIX = ".values.yaml"
VALUES_DIR = "helm"


def is_values_file(path: Path) -> bool:
    """`helm/<chart>/<release>.values.yaml`."""
    return path.name.endswith(VALUES_SUFFIX) and path.parent.parent.name == VALUES_DIR


@dataclass
class Tree:
    """Everything read under one path."""

    root: Path
    files: list[Path]
    manifests: list[Manifest]
    kustomizations: list[Manifest]
    findings: list[Finding]
    values: list[ValuesFile] = field(default_factory=list)
    """Helm values files (`helm/*.values.yaml`), which are not manifests."""


def yaml_files(root: Path) -> list[Path]:
    """YAML files under `root` (or `root` itself), sorted by relative path; hidden directories are skipped."""
    if root.is_file():
        return [root]
    out = []
    for path in root.rglob("*"):
        rel = path.relative_to(root)
        if any(part.startswith(".") for part in rel.parts):
            continue
        if path.is_file() and (path.suffix in (".yaml", ".yml") or path.name == "Kustomization"):
            out.append(path)
    return sorted(out, key=lambda p: p.relative_to(root).as_posix())


def _yaml_error(file: str, exc: Exception) -> Finding:
    if isinstance(exc, MarkedYAMLError):
        mark = exc.problem_mark or exc.context_mark
        what = " ".join(x for x in ((exc.context or "").strip(), (exc.problem or "").strip()) if x)
        return rule("YAML001").at(file, (mark.line + 1) if mark else 1, "-", f"YAML syntax error: {what}")
    return rule("YAML001").at(file, 1, "-", f"YAML error: {exc}")


def _bounded_text(path: Path, shown: str) -> tuple[str | None, list[Finding]]:
    """The file's text, or why it is not read: unreadable, not UTF-8, over `infra.limits.MAX_DOCUMENT_BYTES`, or
    nested deeper / aliased wider than `infra.limits` allows (refused from the event stream, before ruamel, whose
    scanner a line of ten thousand `[` makes quadratic)."""
    try:
        text = read_limited(path, "manifest").decode("utf-8")
        scan_yaml(text, shown)
    except UnicodeDecodeError as exc:
        line = exc.object[: exc.start].count(b"\n") + 1
        return None, [rule("YAML001").at(shown, line, "-", f"not UTF-8 text ({exc.reason})",
                                         fix="save the file as UTF-8")]
    except OSError as exc:
        return None, [rule("YAML001").at(shown, 1, "-", f"cannot read the file: {exc.strerror}",
                                         fix="check the path and the file's permissions")]
    except InfraError as exc:
        p = exc.problems[0]
        return None, [rule("YAML001").at(shown, p.location.line or 1, "-", p.message, fix=p.fix)]
    return text, []


def read_file(path: Path, shown: str) -> tuple[list[Manifest], list[Finding]]:
    """The objects of one file and the problems that kept documents from being read."""
    text, unread = _bounded_text(path, shown)
    if text is None:
        return [], unread
    yaml = YAML(typ="rt")
    yaml.allow_duplicate_keys = False
    try:
        docs = list(yaml.load_all(text))
    except (YAMLError, ValueError, TypeError) as exc:
        return [], [_yaml_error(shown, exc)]
    except RecursionError:
        line, _ = deep_point(text)
        return [], [rule("YAML001").at(shown, line, "-", f"nested more than {MAX_DEPTH} levels deep",
                                       fix="nest mappings and lists less deeply")]
    out: list[Manifest] = []
    problems: list[Finding] = []
    starts = _document_lines(text)
    for i, doc in enumerate(docs):
        if doc is None:
            continue
        start = starts[i] if i < len(starts) else 1
        try:
            data, smap = flatten(doc, shown)
        except IntentError as exc:
            p = exc.problems[0]
            problems.append(rule("YAML001").at(shown, p.location.line or start, "-", p.message, fix=p.fix))
            continue
        if not isinstance(data, dict):
            problems.append(rule("YAML002").at(shown, start, "-",
                                               f"document {i + 1} is a {type(data).__name__}, not a mapping"))
            continue
        m = Manifest(shown, i, data, smap)
        if m.api_version.startswith(OWN_API_GROUP):
            continue
        if path.name in KUSTOMIZATION_FILES:
            out.append(m)
            continue
        missing = [k for k in ("apiVersion", "kind") if not isinstance(data.get(k), str) or not data.get(k)]
        if not m.name and not (isinstance(data.get("metadata"), dict) and data["metadata"].get("generateName")):
            missing.append("metadata.name")
        if missing:
            problems.append(rule("YAML002").at(shown, start, m.ref, f"document {i + 1} lacks {', '.join(missing)}"))
            continue
        out.append(m)
    return out, problems


def _document_lines(text: str) -> list[int]:
    """First line of each document (after a `---` separator), for findings about a document as a whole."""
    starts = [1]
    for n, line in enumerate(text.splitlines(), 1):
        if line.startswith("---") and n > 1:
            starts.append(n + 1)
        elif line.startswith("---") and n == 1:
            starts[0] = 2
    return starts


def read_tree(root: Path, patch_files: Callable[[list[Manifest]], set[Path]]) -> Tree:
    """Read every manifest under `root`; file names in findings are shown as given (root-relative). Files a
    kustomization uses as patches (`patch_files` of the kustomizations: `infra.validators.kustomize`, which reads
    them with this module) are partial objects, read by kustomize only, not as manifests."""
    files = yaml_files(root)
    manifests: list[Manifest] = []
    kustomizations: list[Manifest] = []
    findings: list[Finding] = []
    for path in (p for p in files if p.name in KUSTOMIZATION_FILES):
        objs, problems = read_file(path, str(path))
        findings += problems
        kustomizations += objs
    patches = patch_files(kustomizations)
    values: list[ValuesFile] = []
    for path in files:
        if path.name in KUSTOMIZATION_FILES or path.resolve() in patches:
            continue
        if is_values_file(path):
            found, problems = read_values(path, str(path))
            findings += problems
            values += found
            continue
        objs, problems = read_file(path, str(path))
        findings += problems
        manifests += objs
    return Tree(root, files, manifests, kustomizations, findings, values)


def read_values(path: Path, shown: str) -> tuple[list[ValuesFile], list[Finding]]:
    """A Helm values file: one mapping."""
    text, unread = _bounded_text(path, shown)
    if text is None:
        return [], unread
    yaml = YAML(typ="rt")
    yaml.allow_duplicate_keys = False
    try:
        doc = yaml.load(text)
    except (YAMLError, ValueError, TypeError) as exc:
        return [], [_yaml_error(shown, exc)]
    except RecursionError:
        line, _ = deep_point(text)
        return [], [rule("YAML001").at(shown, line, "-", f"nested more than {MAX_DEPTH} levels deep",
                                       fix="nest mappings and lists less deeply")]
    try:
        data, smap = flatten(doc, shown)
    except IntentError as exc:
        p = exc.problems[0]
        return [], [rule("YAML001").at(shown, p.location.line or 1, "-", p.message, fix=p.fix)]
    if not isinstance(data, dict):
        return [], [rule("YAML002").at(shown, 1, "-", "Helm values must be a mapping")]
    return [ValuesFile(shown, 0, data, smap)], []
