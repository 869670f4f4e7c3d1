"""YAML in, plain data plus a map of where every value stood.

ruamel.yaml keeps line and column of every key and item; we flatten its round-trip objects into plain dicts and
lists (what pydantic validates) and keep a `SourceMap` from field path to position, so an error deep inside a
validated model still points at the user's line.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from ruamel.yaml import YAML
from ruamel.yaml.comments import CommentedMap, CommentedSeq
from ruamel.yaml.constructor import DuplicateKeyError
from ruamel.yaml.comments import TaggedScalar
from ruamel.yaml.error import MarkedYAMLError, YAMLError
from ruamel.yaml.reader import ReaderError

from infra.errors import IntentError, Location, Problem
from infra.limits import MAX_DOCUMENT_BYTES, check_tree, deep_point, read_limited, scan_yaml, shown, too_deep

PathKey = tuple[str | int, ...]


@dataclass
class SourceMap:
    """Positions (1-based line, column) of keys and values in one YAML document."""

    file: str
    keys: dict[PathKey, tuple[int, int]] = field(default_factory=dict)
    values: dict[PathKey, tuple[int, int]] = field(default_factory=dict)
    base: PathKey = ()
    """Where this map's paths start in the document (`within`); locations name the full field path."""

    def within(self, prefix: PathKey) -> SourceMap:
        """The map of the part of the document at `prefix` (a plan's copy of an intent's workload, validated on
        its own): paths relative to it, locations still naming the whole field path."""
        n = len(prefix)
        return SourceMap(self.file, {k[n:]: v for k, v in self.keys.items() if k[:n] == prefix},
                         {k[n:]: v for k, v in self.values.items() if k[:n] == prefix}, self.base + tuple(prefix))

    def locate(self, path: PathKey, data: Any = None, *, key: bool = False) -> Location:
        """The location of the deepest prefix of `path` that exists in the document.

        Validation paths contain steps that are not in the document (union member names, `[key]`); those are
        skipped when `data` is given, by walking the data alongside.
        """
        real = self.real_path(path, data) if data is not None else tuple(path)
        while True:
            table = self.keys if key else self.values
            pos = table.get(real) or self.keys.get(real) or self.values.get(real)
            if pos or not real:
                break
            real = real[:-1]
        line, col = pos if pos else (None, None)
        return Location(self.file, line, col, dotted(self.base + real))

    @staticmethod
    def real_path(path: PathKey, data: Any) -> PathKey:
        out: list[str | int] = []
        node = data
        for step in path:
            if isinstance(node, dict) and step in node:
                node = node[step]
                out.append(step)
            elif isinstance(node, list) and isinstance(step, int) and 0 <= step < len(node):
                node = node[step]
                out.append(step)
        return tuple(out)


def dotted(path: PathKey) -> str:
    """`spec.services[0].slo.ttft` from `('spec', 'services', 0, 'slo', 'ttft')`."""
    text = ""
    for step in path:
        if isinstance(step, int):
            text += f"[{step}]"
        else:
            text += ("." if text else "") + str(step)
    return text


def _plain(node: Any, path: PathKey, smap: SourceMap) -> Any:
    if isinstance(node, TaggedScalar):
        raise _Tagged(path, str(getattr(node.tag, "value", node.tag)))
    if isinstance(node, CommentedMap):
        out: dict[Any, Any] = {}
        for k, v in node.items():
            sub = path + (k if isinstance(k, (str, int)) else str(k),)
            try:
                kl, kc, vl, vc = node.lc.data[k]
                smap.keys[sub] = (kl + 1, kc + 1)
                smap.values[sub] = (vl + 1, vc + 1)
            except (KeyError, TypeError, ValueError):
                pass
            # A key that cannot be encoded is shown by its parent's path (the error must print).
            _encodable(str(k), sub, shown=path + ("<key>",))
            out[k if isinstance(k, (str, int)) else str(k)] = _plain(v, sub, smap)
        return out
    if isinstance(node, CommentedSeq):
        items = []
        for i, v in enumerate(node):
            sub = path + (i,)
            try:
                vl, vc = node.lc.data[i]
                smap.values[sub] = (vl + 1, vc + 1)
                smap.keys[sub] = (vl + 1, vc + 1)
            except (KeyError, TypeError, ValueError, IndexError):
                pass
            items.append(_plain(v, sub, smap))
        return items
    if isinstance(node, str):
        _encodable(str(node), path)
        return str(node)
    if isinstance(node, bool):
        return bool(node)
    if isinstance(node, int):
        return int(node)
    if isinstance(node, float):
        return float(node)
    return node


def _position(text: str, offset: int) -> tuple[int, int]:
    before = text[:offset]
    return before.count("\n") + 1, offset - (before.rfind("\n") + 1) + 1


class _Tagged(Exception):
    """A value carrying a custom YAML tag, found while flattening."""

    def __init__(self, path: PathKey, tag: str):
        self.path, self.tag = path, tag


class _Unencodable(Exception):
    """A key or value holding an unpaired surrogate (a YAML escape such as "\\ud800"), found while flattening:
    no UTF-8 file, manifest or report can carry it."""

    def __init__(self, path: PathKey, shown: PathKey):
        self.path, self.shown = path, shown


def _encodable(text: str, path: PathKey, shown: PathKey | None = None) -> None:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise _Unencodable(path, path if shown is None else shown) from None


def _unencodable_problem(exc: _Unencodable, smap: SourceMap) -> Problem:
    where = replace(smap.locate(exc.path, key=exc.shown != exc.path), path=dotted(exc.shown))
    return Problem("the text holds a surrogate escape (\\ud800-\\udfff), which no UTF-8 text can carry", where,
                   "write the character itself, or its \\U escape (\\U0001F600)")


def read_text(path: Path, what: str, limit: int = MAX_DOCUMENT_BYTES) -> str:
    """The file's text, or an IntentError that says why it cannot be read (missing, too big, not UTF-8)."""
    try:
        return read_limited(path, what, limit, IntentError).decode("utf-8")
    except FileNotFoundError:
        raise IntentError(Problem(f"{what} file not found", Location(str(path), 1, 1),
                                  "check the path (relative paths are resolved from the current directory "
                                  "for the command line and from the referring file inside a file)")) from None
    except IsADirectoryError:
        raise IntentError(Problem(f"{what} path is a directory, not a file", Location(str(path), 1, 1),
                                  "give the path of a YAML file")) from None
    except UnicodeDecodeError as exc:
        before = exc.object[: exc.start]
        line = before.count(b"\n") + 1
        column = exc.start - (before.rfind(b"\n") + 1) + 1
        raise IntentError(Problem(f"{what} is not UTF-8 text (byte 0x{exc.object[exc.start]:02x}: {exc.reason})",
                                  Location(str(path), line, column), "save the file as UTF-8")) from None
    except OSError as exc:
        raise IntentError(Problem(f"cannot read {what}: {exc.strerror}", Location(str(path), 1, 1),
                                  "check the file's permissions")) from None
    except ValueError:
        # open() refuses a path holding a NUL character before asking the operating system
        raise IntentError(Problem(f"{what} path holds a NUL character", Location(shown(str(path))),
                                  "give the path of a YAML file")) from None


def load_yaml(text: str, file: str) -> tuple[Any, SourceMap]:
    """Parse one YAML document into plain data and its source map, within the bounds of `infra.limits`."""
    scan_yaml(text, file, IntentError)
    yaml = YAML(typ="rt")
    yaml.allow_duplicate_keys = False
    smap = SourceMap(file)
    try:
        docs = [d for d in yaml.load_all(text)]
    except RecursionError:
        raise too_deep(file, *deep_point(text), error=IntentError) from None
    except DuplicateKeyError as exc:
        mark = exc.problem_mark
        key = (exc.problem or "").split('"')[1] if '"' in (exc.problem or "") else "a key"
        raise IntentError(Problem(f"duplicate key {shown(key)}", Location(file, mark.line + 1, mark.column + 1),
                                  "keep one of the two entries")) from None
    except ReaderError as exc:
        line, column = _position(text, exc.position)
        char = f"#x{ord(exc.character):04x}" if isinstance(exc.character, str) else repr(exc.character)
        raise IntentError(Problem(f"YAML syntax error: character {char} is not allowed ({exc.reason})",
                                  Location(file, line, column),
            "remove the control character (a NUL or similar byte) from the file")) from None
    except MarkedYAMLError as exc:
        problem = (exc.problem or "").strip()
        # An unclosed quote or bracket is only noticed at the end of the file; its opening is where to look.
        mark = exc.context_mark if ("end of stream" in problem and exc.context_mark) else (
            exc.problem_mark or exc.context_mark)
        what = " ".join(x for x in ((exc.context or "").strip(), problem) if x) or "invalid YAML"
        loc = Location(file, mark.line + 1, mark.column + 1) if mark else Location(file, 1, 1)
        raise IntentError(Problem(f"YAML syntax error: {what}", loc,
                                  "fix the indentation or quoting at this position (a value containing ': ' "
                                  "or starting with '{', '[', '*' or '&' needs quotes; indent with spaces, "
                                  "not tabs)")) from None
    except YAMLError as exc:
        raise IntentError(Problem(f"YAML error: {exc}", Location(file, 1, 1), "fix the YAML syntax")) from None
    except (ValueError, TypeError, IndexError, KeyError, AttributeError) as exc:
        # ruamel raises plain Python errors for values its explicit tags cannot convert (`!!int two`) and for
        # complex keys; point at the first line that uses one.
        line = next((i for i, t in enumerate(text.splitlines(), 1)
                     if "!!" in t or t.lstrip().startswith("? ")), 1)
        what = "a complex key (`? ...`) is not supported" if "unhashable" in str(exc) else str(exc)
        raise IntentError(Problem(f"YAML value cannot be read: {what}", Location(file, line, 1),
                                  "write plain values without YAML tags (!!int, !!float, ...) or complex keys")) \
            from None
    if len(docs) != 1:
        raise IntentError(Problem(
            "file is empty" if not docs else f"file holds {len(docs)} YAML documents, expected one",
            Location(file, 1, 1),
            "put one intent (or cluster profile) per file" if docs else "write an intent; `infra schema` "
            "describes the format and examples/ has samples"))
    check_tree(docs[0], file, error=IntentError)
    try:
        data = _plain(docs[0], (), smap)
    except _Tagged as exc:
        loc = smap.locate(exc.path)
        raise IntentError(Problem(f"YAML tag {exc.tag} is not supported", loc,
                                  "write the plain value; infra files use no YAML tags")) from None
    except _Unencodable as exc:
        raise IntentError(_unencodable_problem(exc, smap)) from None
    if not isinstance(data, dict):
        raise IntentError(Problem(f"top level is a {type(data).__name__}, expected a mapping",
                                  Location(file, 1, 1), "start the file with `apiVersion: infra.dev/v1alpha1`"))
    return data, smap


def flatten(node: Any, file: str) -> tuple[Any, SourceMap]:
    """Plain data and source map of one already-parsed round-trip document (for multi-document files such as
    Kubernetes manifests); a custom YAML tag raises IntentError at its position."""
    check_tree(node, file, error=IntentError)
    smap = SourceMap(file)
    try:
        return _plain(node, (), smap), smap
    except _Tagged as exc:
        raise IntentError(Problem(f"YAML tag {exc.tag} is not supported", smap.locate(exc.path),
                                  "write the plain value without a YAML tag")) from None
    except _Unencodable as exc:
        raise IntentError(_unencodable_problem(exc, smap)) from None
