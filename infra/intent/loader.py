"""Read intent and cluster-profile files into validated models, with every problem located in the file.

All problems of a file are reported together, each as `file:line:col: field.path: what — To fix: how`, with a
"did you mean" for near-miss keys and names.
"""

from __future__ import annotations

import difflib
import os
import types
import typing
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel
from pydantic import ValidationError as PydanticValidationError

from infra.errors import InfraError, IntentError, Location, Problem
from infra.intent.base import API_VERSION
from infra.intent.models import ServingIntent, stage_inputs
from infra.intent.profile import ClusterProfile, ClusterProfileSpec
from infra.intent.yamlio import PathKey, SourceMap, dotted, load_yaml, read_text
from infra.limits import clipped, read_jsonl, shown

KINDS: dict[str, type[BaseModel]] = {"ServingIntent": ServingIntent, "ClusterProfile": ClusterProfile}

_TYPE_WORDS = {
    "int_type": "a whole number", "int_parsing": "a whole number", "int_from_float": "a whole number",
    "float_type": "a number", "float_parsing": "a number", "bool_type": "true or false",
    "bool_parsing": "true or false", "string_type": "a string", "dict_type": "a mapping (key: value lines)",
    "list_type": "a list (lines starting with '- ')", "model_type": "a mapping (key: value lines)",
    "model_attributes_type": "a mapping (key: value lines)",
}


@dataclass(frozen=True)
class Document:
    """A validated file with its source map, for locating later (semantic) problems."""

    path: Path
    data: dict[str, Any]
    source: SourceMap

    def locate(self, path: PathKey) -> Location:
        return self.source.locate(path, self.data)


def _unwrap(annotation: Any) -> list[Any]:
    """Model classes reachable from an annotation through Optional/list/dict/Annotated."""
    origin = typing.get_origin(annotation)
    if origin is typing.Annotated:
        return _unwrap(typing.get_args(annotation)[0])
    if origin in (typing.Union, types.UnionType, list, dict):
        out = []
        for arg in typing.get_args(annotation):
            out.extend(_unwrap(arg))
        return out
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    return []


def _model_at(root: type[BaseModel], path: PathKey) -> type[BaseModel] | None:
    """The model class that validates the mapping at `path` (a real data path), if any."""
    current: type[BaseModel] | None = root
    for step in path:
        if current is None:
            return None
        if isinstance(step, int):
            continue
        field = next((f for n, f in current.model_fields.items() if (f.alias or n) == step), None)
        if field is None:
            return None
        models = _unwrap(field.annotation)
        current = models[0] if models else None
    return current


def _field_doc(root: type[BaseModel], path: PathKey) -> str | None:
    if not path or isinstance(path[-1], int):
        return None
    parent = _model_at(root, path[:-1])
    if parent is None:
        return None
    field = next((f for n, f in parent.model_fields.items() if (f.alias or n) == path[-1]), None)
    if field is None or not field.description:
        return None
    text = " ".join(field.description.split())
    return text.split(". ")[0].rstrip(".")


def _node(data: Any, path: PathKey) -> Any:
    for step in path:
        data = data[step]
    return data


def _allowed_keys(root: type[BaseModel], path: PathKey) -> list[str]:
    cls = _model_at(root, path)
    if cls is None:
        return []
    return [f.alias or n for n, f in cls.model_fields.items()]


def _did_you_mean(word: str, options: list[str]) -> str:
    close = difflib.get_close_matches(str(word), options, n=2, cutoff=0.6)
    return f"; did you mean {' or '.join(repr(c) for c in close)}?" if close else ""


def problems_from_pydantic(exc: PydanticValidationError, root: type[BaseModel], data: dict[str, Any],
                           smap: SourceMap) -> list[Problem]:
    """Turn pydantic's errors into located problems, one per distinct place."""
    problems: list[Problem] = []
    seen: set[tuple[str, str]] = set()
    errors = exc.errors(include_url=False)
    reals = [SourceMap.real_path(tuple(e["loc"]), data) for e in errors]
    extras = {(r[:-1], str(e["loc"][-1])) for e, r in zip(errors, reals) if e["type"] == "extra_forbidden"}
    kept = []
    for err, real in zip(errors, reals):
        kind = err["type"]
        # A union (a count or a list of nodes) reports every member's complaint; when the value is a mapping or
        # a list, the scalar members' "expected a number" is noise next to the real problem deeper down.
        if kind in _TYPE_WORDS and isinstance(err.get("input"), (dict, list)) and any(
                len(r) > len(real) and r[:len(real)] == real for r in reals):
            continue
        # A misspelt key is reported once, as the unknown key with its "did you mean", not also as missing.
        if kind == "missing" and any(parent == SourceMap.real_path(tuple(err["loc"][:-1]), data) and
                                     difflib.get_close_matches(str(err["loc"][-1]), [key], n=1, cutoff=0.6)
                                     for parent, key in extras):
            continue
        kept.append(err)
    for err in kept:
        loc = tuple(err["loc"])
        real = SourceMap.real_path(loc, data)
        kind = err["type"]
        msg = str(err["msg"]).removeprefix("Value error, ").removeprefix("Assertion failed, ")
        fix: str | None = None
        location = smap.locate(real)
        if kind == "extra_forbidden":
            key = loc[-1]
            parent = SourceMap.real_path(loc[:-1], data)
            allowed = _allowed_keys(root, parent)
            msg = f"unknown field {key!r}" + _did_you_mean(str(key), allowed)
            fix = (f"remove it or use one of: {', '.join(allowed)}" if allowed else "remove it")
            location = smap.locate(real, key=True)
        elif kind == "missing":
            name = loc[-1]
            parent = SourceMap.real_path(loc[:-1], data)
            doc = _field_doc(root, parent + (name,)) if isinstance(name, str) else None
            msg = f"missing required field {name!r}"
            fix = f"add `{name}:`" + (f" ({doc})" if doc else "")
            location = smap.locate(parent, key=True)
            line, column = (location.line, location.column) if location.line else (1, 1)
            location = Location(location.file, line, column, dotted(smap.base + parent + (name,)))
        elif kind == "literal_error":
            expected = str(err.get("ctx", {}).get("expected", ""))
            options = [o.strip().strip("'") for o in expected.replace(" or ", ",").split(",") if o.strip()]
            got = err.get("input")
            msg = f"{got!r} is not allowed here" + _did_you_mean(str(got), options)
            fix = f"use one of: {', '.join(options)}"
        elif kind in _TYPE_WORDS:
            got = err.get("input")
            shown = "nothing" if got is None else repr(got) if not isinstance(got, (dict, list)) else \
                ("a mapping" if isinstance(got, dict) else "a list")
            msg = f"expected {_TYPE_WORDS[kind]}, got {shown}"
            doc = _field_doc(root, real if len(real) == len([s for s in loc if s in real]) else real)
            fix = doc and f"this field is: {doc}"
        elif kind in ("greater_than", "greater_than_equal", "less_than", "less_than_equal", "too_short",
                      "string_pattern_mismatch", "too_long"):
            doc = _field_doc(root, real)
            fix = f"this field is: {doc}" if doc else None
        elif kind == "value_error":
            if "; " in msg:
                msg, fix = msg.rsplit("; ", 1)
            # A check over a whole mapping or list points at its key, not at its first entry.
            if isinstance(_node(data, real), (dict, list)) and real:
                location = smap.locate(real, key=True)
        if fix is None:
            doc = _field_doc(root, real)
            fix = f"this field is: {doc}" if doc else "see `infra schema` for the accepted forms"
        key = (location.prefix(), msg)
        if key in seen:
            continue
        seen.add(key)
        problems.append(Problem(msg, location, fix))
    return clipped(problems)


def read_document(path: Path, expected_kind: str | None = None) -> tuple[BaseModel, Document]:
    """Parse and validate one intent or profile file."""
    file = str(path)
    text = read_text(path, "intent" if expected_kind != "ClusterProfile" else "cluster profile")
    data, smap = load_yaml(text, file)
    doc = Document(path, data, smap)
    api = data.get("apiVersion")
    if api != API_VERSION:
        loc = smap.locate(("apiVersion",)) if "apiVersion" in data else Location(file, 1, 1, "apiVersion")
        msg = "missing apiVersion" if api is None else f"unsupported apiVersion {shown(api)}"
        raise IntentError(Problem(msg, loc, f"start the file with `apiVersion: {API_VERSION}`"))
    kind = data.get("kind")
    if not isinstance(kind, str) or kind not in KINDS:  # a list or mapping here is not even hashable
        loc = smap.locate(("kind",)) if "kind" in data else Location(file, 1, 1, "kind")
        msg = "missing kind" if kind is None else f"unknown kind {shown(kind)}" + _did_you_mean(str(kind), list(KINDS))
        raise IntentError(Problem(msg, loc, f"use kind: {' or kind: '.join(KINDS)}"))
    if expected_kind and kind != expected_kind:
        raise IntentError(Problem(f"expected a {expected_kind}, this file is a {kind}", smap.locate(("kind",)),
                                  f"pass a {expected_kind} file here"))
    cls = KINDS[kind]
    try:
        model = cls.model_validate(data)
    except PydanticValidationError as exc:
        raise IntentError(problems_from_pydantic(exc, cls, data, smap)) from None
    return model, doc


@dataclass(frozen=True)
class LoadedIntent:
    """An intent with its inventory resolved and the documents it came from."""

    intent: ServingIntent
    cluster: ClusterProfileSpec
    document: Document
    profile_document: Document | None
    profile_name: str

    def cluster_path(self) -> PathKey:
        """Field path prefix of the pools: in the profile file or inline in the intent."""
        return ("spec",) if self.profile_document else ("spec", "cluster")

    def cluster_document(self) -> Document:
        return self.profile_document or self.document


def _trace_problems(intent: ServingIntent, doc: Document) -> list[Problem]:
    """Trace files named by length distributions exist and hold `input_tokens`/`output_tokens` records."""
    problems: list[Problem] = []
    checked: dict[str, Problem | None] = {}
    places: list[tuple[PathKey, Any]] = []
    for si, svc in enumerate(intent.spec.services):
        base = ("spec", "services", si)
        places += [(base + ("workload", f), getattr(svc.workload, f)) for f in ("input_tokens", "output_tokens")]
        for ti, stage in enumerate(svc.pipeline or []):
            places += [(base + ("pipeline", ti, "work", f), getattr(stage.work, f))
                       for f in ("input_tokens", "output_tokens")]
    for where, dist in places:
        if dist is None or dist.trace is None:
            continue
        if dist.trace not in checked:
            checked[dist.trace] = _check_trace(doc.path.parent / dist.trace, dist.trace)
        problem = checked[dist.trace]
        if problem is not None:
            problems.append(Problem(problem.message, doc.locate(where + ("trace",)), problem.fix))
    return problems


def _check_trace(path: Path, name: str) -> Problem | None:
    unusable = _unusable(path)
    if unusable:
        return Problem(f"trace file {shown(name)} cannot be opened: {unusable}",
                       fix="give the JSONL file's path relative to the intent file")
    try:
        records = read_jsonl(path, f"trace file {name!r}",
                             "give the JSONL file's path relative to the intent file")
    except InfraError as exc:
        p = exc.problems[0]
        if not path.exists():
            return Problem(f"trace file {name!r} not found (looked at {path})", fix=p.fix)
        return Problem(f"{p.location.prefix()}: {p.message}", fix=p.fix)
    for n, rec in records:
        if not all(isinstance(rec.get(k), int) and not isinstance(rec.get(k), bool) and rec[k] >= 0
                   for k in ("input_tokens", "output_tokens")):
            return Problem(f"{path}:{n}: a trace line needs whole-number input_tokens and output_tokens",
                           fix='write lines like {"timestamp": 0.5, "input_tokens": 812, "output_tokens": 96}')
    if not records:
        return Problem(f"trace file {name!r} holds no requests", fix="record at least one request per line")
    return None


def _name_problems(intent: ServingIntent, doc: Document) -> list[Problem]:
    """Names that repeat and stages that run after stages that do not precede them, located exactly."""
    problems: list[Problem] = []
    seen: dict[str, int] = {}
    for si, svc in enumerate(intent.spec.services):
        if svc.name in seen:
            problems.append(Problem(f"service names repeat: {svc.name} (also service {seen[svc.name]})",
                                    doc.locate(("spec", "services", si, "name")),
                                    "give every service its own name"))
        seen.setdefault(svc.name, si)
        names = [st.name for st in svc.pipeline or []]
        for ti, stage in enumerate(svc.pipeline or []):
            where = ("spec", "services", si, "pipeline", ti)
            if stage.name in names[:ti]:
                problems.append(Problem(f"stage names repeat: {stage.name}", doc.locate(where + ("name",)),
                                        "give every stage of the pipeline its own name"))
            for ai, up in enumerate(stage.after or []):
                if up in names[:ti]:
                    continue
                hint = "it is not a stage" if up not in names else "it comes later"
                problems.append(Problem(f"stage {stage.name!r} runs after {up!r}, but {hint}",
                                        doc.locate(where + ("after", ai)),
                                        f"name an earlier stage ({', '.join(names[:ti]) or 'none'}) or list the "
                                        "stages in the order data flows"))
        problems += _graph_problems(svc, si, doc)
    return problems


def _graph_problems(svc: Any, si: int, doc: Document) -> list[Problem]:
    """A pipeline's stages form a tree into its last stage: each other stage hands on to exactly one later stage."""
    if not svc.pipeline:
        return []
    names = [st.name for st in svc.pipeline]
    inputs = stage_inputs(names, [st.after for st in svc.pipeline])
    out: list[Problem] = []
    taken: dict[int, int] = {}
    for j, ins in enumerate(inputs):
        for i in ins:
            if i in taken:
                ai = (svc.pipeline[j].after or []).index(names[i])
                out.append(Problem(f"stage {names[j]!r} consumes {names[i]!r}, whose output already goes to "
                                   f"{names[taken[i]]!r}; a stage hands on to one stage",
                                   doc.locate(("spec", "services", si, "pipeline", j, "after", ai)),
                                   f"remove {names[i]!r} here, or give each consumer its own copy of the stage"))
            taken.setdefault(i, j)
    for i, name in enumerate(names[:-1]):
        if i not in taken:
            out.append(Problem(f"stage {name!r} hands its output to no stage; the last stage listed is the "
                               "pipeline's output", doc.locate(("spec", "services", si, "pipeline", i, "name")),
                               f"name {name!r} in the `after` of the stage it feeds, or remove it"))
    return out


def _unusable(path: Path) -> str | None:
    """Why the operating system cannot even look a path up (a NUL character, a name too long), if it cannot;
    Path.exists() answers False for a NUL and raises for a name too long, neither of which says what is wrong."""
    try:
        os.stat(path)
    except ValueError:
        return "the path holds a NUL character"
    except (FileNotFoundError, NotADirectoryError):
        return None  # missing: the callers say so in their own words
    except OSError as exc:
        return (exc.strerror or str(exc)).lower()
    return None


def load_intent_file(path: Path) -> LoadedIntent:
    """Read an intent and the cluster profile it references; syntax and in-file checks only."""
    model, doc = read_document(Path(path), "ServingIntent")
    assert isinstance(model, ServingIntent)
    problems = _name_problems(model, doc) + _trace_problems(model, doc)
    if problems:
        raise IntentError(clipped(problems))
    source = model.spec.cluster
    if source.profile is not None:
        ref = Path(source.profile)
        profile_path = ref if ref.is_absolute() else Path(path).parent / ref
        here = doc.locate(("spec", "cluster", "profile"))
        unusable = _unusable(profile_path)
        if unusable:
            raise IntentError(Problem(f"cluster profile {shown(source.profile)} cannot be opened: {unusable}", here,
                                      "give the profile's path relative to this intent file"))
        if not profile_path.exists():
            raise IntentError(Problem(f"cluster profile {shown(source.profile)} not found (looked at "
                                      f"{profile_path})", here, "give the profile's path relative to this intent "
                                      "file"))
        if profile_path.is_dir():
            raise IntentError(Problem(f"cluster profile {shown(source.profile)} is a directory", here,
                                      "give the path of the ClusterProfile YAML file inside it"))
        try:
            profile, pdoc = read_document(profile_path, "ClusterProfile")
        except IntentError as exc:
            first = exc.problems[0]
            if first.message.startswith("expected a ClusterProfile"):
                raise IntentError(Problem(f"{shown(source.profile)} is not a cluster profile "
                                          f"({first.message.split(', ')[-1]})", here,
                                          "point profile at a file with kind: ClusterProfile")) from None
            raise exc
        assert isinstance(profile, ClusterProfile)
        return LoadedIntent(model, profile.spec, doc, pdoc, profile.metadata.name)
    spec = source.inline_spec()
    assert spec is not None
    return LoadedIntent(model, spec, doc, None, model.metadata.name)


def load_profile_file(path: Path) -> tuple[ClusterProfile, Document]:
    model, doc = read_document(Path(path), "ClusterProfile")
    assert isinstance(model, ClusterProfile)
    return model, doc
