"""How much of a file infra agrees to read: size, nesting depth and YAML alias expansion, in one place.

Every YAML or JSON file the tools read can come from someone else (a shared intent, a catalog overlay, a plan in a
pull request, a trace). A hostile or broken one must be refused with a located one-line error in well under a
second, never take minutes or gigabytes: a 1 KB "billion laughs" file of nine aliases nested eight deep expands to
43 million nodes, and ten thousand `[` make ruamel's scanner quadratic before Python's recursion limit stops it.

- `read_limited`: a file's bytes, refused past a size bound (read at most one byte past it, so a file that grows
  while read cannot exhaust memory).
- `scan_yaml`: walks libyaml's event stream (C, streamed, so it stops at the first breach) and refuses nesting
  deeper than `MAX_DEPTH` and aliases that would expand to more than `MAX_ALIAS_NODES` nodes, at the exact line of
  the offending node, before the (slower, round-trip) parser ever sees the text.
- `check_tree`: the same two bounds on data already parsed (JSON, PyYAML), counting shared objects the way a
  consumer walking the data would meet them, in time linear in the distinct objects.
- `loads_json`: `json.loads` under those bounds.
- `read_jsonl`: a JSON Lines file (traces, measurements, estimate cases) under the records size bound, each line
  under the depth bound.
"""

from __future__ import annotations

import json
import re
from dataclasses import replace
from pathlib import Path
from typing import Any

from infra.errors import InfraError, Location, Problem

MAX_DOCUMENT_BYTES = 16 << 20
"""Intents, cluster profiles, plans, catalog entries, calibrations, settings: hand-written or generated documents
of a few KB (the largest plan of the examples is 10 KB); 16 MiB leaves room for thousands of nodes and pools."""

MAX_RECORDS_BYTES = 256 << 20
"""JSON Lines traces and measurement files, legitimately large (a day of production requests), read line by line;
the same bound `infra.bench.results` applies to benchmark result files."""

MAX_SCRAPE_BYTES = 64 << 20
"""An engine's /metrics page (some 100 KB for vLLM) or a Prometheus answer (a week in windows of five minutes is a
few MB): past this, what answered is not what it was taken for, and its body is not read further."""

MAX_DEPTH = 64
"""Nesting of mappings and lists; infra's own formats nest at most about ten deep."""

MAX_ALIAS_NODES = 100_000
"""Nodes that YAML aliases (`*name`) may add by expansion; real files use a few anchors for shared settings."""

MAX_SHOWN = 60
"""Characters of a user's value quoted back in a message: a megabyte value is named by its start and length,
never echoed whole into a one-line error."""

_DEPTH_FIX = f"nest mappings and lists at most {MAX_DEPTH} deep; infra's files never need more"
_ALIAS_FIX = "write the values out instead of repeating aliases of aliases (`*name`)"


def read_limited(path: Path | Any, what: str, limit: int = MAX_DOCUMENT_BYTES,
                 error: type[InfraError] = InfraError) -> bytes:
    """The file's bytes; `error` when it holds more than `limit`. OSError (missing, a directory, unreadable) is
    left to the caller, which knows how to word it for its kind of file."""
    # Packaged data comes as an importlib Traversable, which opens but is not always a filesystem Path.
    with (path if hasattr(path, "open") else Path(path)).open("rb") as fh:
        raw = fh.read(limit + 1)
    if len(raw) > limit:
        raise error(Problem(f"{what} file is over the {_size(limit)} limit; refused", Location(str(path), 1, 1),
                            f"give the {what} file itself (under {_size(limit)}), not a log, an archive or "
                            "generated bulk"))
    return raw


def _size(n: int) -> str:
    return f"{n >> 20} MiB" if n >= 1 << 20 else f"{n} bytes"


def too_deep(file: str, line: int | None = None, column: int | None = None, path: str = "",
             error: type[InfraError] = InfraError) -> InfraError:
    """The error for nesting past `MAX_DEPTH` (also what a parser's RecursionError becomes)."""
    return error(Problem(f"nested more than {MAX_DEPTH} levels deep; refused", Location(file, line, column, path),
                         _DEPTH_FIX))


def _too_many_aliases(file: str, line: int | None, column: int | None, path: str = "",
                      error: type[InfraError] = InfraError) -> InfraError:
    return error(Problem(f"YAML aliases expand to more than {MAX_ALIAS_NODES:,} nodes (an alias bomb?); refused",
                         Location(file, line, column, path), _ALIAS_FIX))


def _flow_too_deep(text: str) -> tuple[int, int] | None:
    """Line and column where flow brackets first nest past MAX_DEPTH, quoted text skipped."""
    depth, quote = 0, ""
    for number, line in enumerate(text.splitlines(), 1):
        for column, char in enumerate(line, 1):
            if quote:
                quote = "" if char == quote else quote
            elif char in "'\"":
                quote = char
            elif char in "[{":
                depth += 1
                if depth > MAX_DEPTH:
                    return number, column
            elif char in "]}":
                depth = max(depth - 1, 0)
        quote = ""  # a quote left open at the end of a line is the parser's error, not ours
    return None


def deep_point(text: str) -> tuple[int, int]:
    """Where to look when a parser gave up on nesting without saying where: the flow brackets nesting past
    MAX_DEPTH, else the start of the most indented line."""
    flow = _flow_too_deep(text)
    if flow:
        return flow
    lines = text.splitlines() or [""]
    number = max(range(len(lines)), key=lambda i: len(lines[i]) - len(lines[i].lstrip(" ")))
    return number + 1, len(lines[number]) - len(lines[number].lstrip(" ")) + 1


def scan_yaml(text: str, file: str, error: type[InfraError] = InfraError) -> None:
    """Refuse deep nesting and alias bombs from the event stream, before any tree is built.

    A syntax error ends the scan silently (but for libyaml's own nesting bound): the caller's own parser reports it
    in its words, and `check_tree` on what that parser builds still bounds anything libyaml and ruamel read
    differently.
    """
    import yaml

    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    counts: list[int] = []            # nodes so far in each open mapping/list, innermost last
    anchors_open: list[str | None] = []
    sizes: dict[str, int] = {}        # anchor -> nodes its expansion produces
    expanded = 0
    try:
        for event in yaml.parse(text, Loader=loader):
            if isinstance(event, yaml.CollectionStartEvent):
                if len(counts) >= MAX_DEPTH:
                    raise too_deep(file, event.start_mark.line + 1, event.start_mark.column + 1, error=error)
                counts.append(1)
                anchors_open.append(event.anchor)
            elif isinstance(event, yaml.CollectionEndEvent):
                size, anchor = counts.pop(), anchors_open.pop()
                _add(counts, size)
                if anchor:
                    sizes[anchor] = size
            elif isinstance(event, yaml.AliasEvent):
                # An unknown alias is the parser's error to report; count it as one node meanwhile.
                size = sizes.get(event.anchor, 1)
                expanded += size
                if expanded > MAX_ALIAS_NODES:
                    raise _too_many_aliases(file, event.start_mark.line + 1, event.start_mark.column + 1,
                                            error=error)
                _add(counts, size)
            elif isinstance(event, yaml.ScalarEvent):
                _add(counts, 1)
                if event.anchor:
                    sizes[event.anchor] = 1
    except yaml.YAMLError as exc:
        # libyaml looks ahead through a flow collection for a possible key, so a deep `[[[[...` ends in its own
        # nesting error before the events above reach MAX_DEPTH.
        mark = getattr(exc, "problem_mark", None)
        if "nesting depth" in str(getattr(exc, "problem", "")) and mark is not None:
            raise too_deep(file, mark.line + 1, mark.column + 1, error=error) from None
        # Stopped early on something ruamel may still read: deep brackets further on would make its scanner
        # quadratic, so they are looked for in the text itself.
        flow = _flow_too_deep(text)
        if flow:
            raise too_deep(file, *flow, error=error) from None


def _add(counts: list[int], size: int) -> None:
    if counts:
        counts[-1] += size


def check_tree(root: Any, file: str, line: int | None = None, error: type[InfraError] = InfraError) -> None:
    """Refuse parsed data nested past `MAX_DEPTH` (a cycle included) or whose shared parts, expanded as a walk over
    the data meets them, exceed `MAX_ALIAS_NODES` nodes. `line` locates data without positions (a JSON line);
    ruamel's data is located at the offending node, or the nearest enclosing one that has a position."""
    sizes: dict[int, int] = {}
    alias_nodes = 0

    def size(node: Any, depth: int, path: tuple[Any, ...], at: tuple[int | None, int | None]) -> int:
        nonlocal alias_nodes
        if not isinstance(node, (dict, list)):
            return 1
        if depth > MAX_DEPTH:
            raise too_deep(file, *at, path=_dotted(path), error=error)
        known = sizes.get(id(node))
        if known is not None:
            alias_nodes += known
            if alias_nodes > MAX_ALIAS_NODES:
                raise _too_many_aliases(file, *at, path=_dotted(path), error=error)
            return known
        items = node.items() if isinstance(node, dict) else enumerate(node)
        total = 1 + sum(size(child, depth + 1, path + (key,), _where(node, key) or at) for key, child in items)
        sizes[id(node)] = total
        return total

    # The recursion is bounded by MAX_DEPTH (a cycle too ends there), far inside Python's own limit.
    size(root, 1, (), (line, None))


def _where(parent: Any, key: Any) -> tuple[int, int] | None:
    """Line and column of `parent[key]` from ruamel's position data, where the parent has it."""
    lc = getattr(parent, "lc", None)
    try:
        pos = lc.data[key] if lc is not None else None
    except (KeyError, IndexError, TypeError, AttributeError):
        return None
    return (pos[-2] + 1, pos[-1] + 1) if pos else None


def _dotted(path: tuple[Any, ...]) -> str:
    return "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in path).lstrip(".")


def loads_json(text: str, file: str, line: int | None = None, error: type[InfraError] = InfraError) -> Any:
    """`json.loads` within the depth bound. json.JSONDecodeError is left to the caller (it words syntax errors
    for its format); nesting deep enough to exhaust the decoder's recursion becomes the depth error."""
    try:
        data = json.loads(text)
    except RecursionError:
        raise too_deep(file, *((line, None) if line is not None else deep_point(text)), error=error) from None
    if line is not None:
        check_tree(data, file, line, error)
        return data
    try:
        check_tree(data, file, None, error)
    except error:
        # JSON keeps no positions, and a JSON document shares no objects, so the breach is its nesting: where the
        # brackets nest too deep in the text.
        raise too_deep(file, *deep_point(text), error=error) from None
    return data


def read_jsonl(path: str | Path, what: str, missing_fix: str = "check the path", limit: int = MAX_RECORDS_BYTES,
               error: type[InfraError] = InfraError) -> list[tuple[int, dict]]:
    """(line number, object) for every non-empty line of a JSON Lines file of at most `limit` bytes, each line
    nested at most `MAX_DEPTH` deep; a located error otherwise."""
    path = Path(path)
    try:
        lines = read_limited(path, what.removesuffix(" file"), limit, error).decode("utf-8").splitlines()
    except FileNotFoundError:
        raise error(Problem(f"{what} not found", Location(str(path), 1, 1), missing_fix)) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise error(Problem(f"cannot read {what}: {exc}", Location(str(path), 1, 1),
                            "save it as UTF-8 text, one JSON object per line")) from None
    out = []
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            obj = loads_json(line, str(path), n, error)
        except json.JSONDecodeError as exc:
            raise error(Problem(f"invalid JSON: {exc.msg}", Location(str(path), n, exc.colno),
                                "write one JSON object per line")) from None
        if not isinstance(obj, dict):
            raise error(Problem("each line must be a JSON object", Location(str(path), n, 1),
                                "write one JSON object per line")) from None
        out.append((n, obj))
    return out


def shown(value: Any) -> str:
    """`repr(value)`, cut after MAX_SHOWN characters with the full length said."""
    text = repr(value)
    if len(text) <= MAX_SHOWN:
        return text
    if isinstance(value, str):
        return f"{text[:MAX_SHOWN]}…{text[-1]} ({len(value):,} characters)"
    return f"{text[:MAX_SHOWN]}… ({len(text):,} characters)"


# A quoted value over twice MAX_SHOWN characters, or a run without spaces (`999…9ms`) too long to be a path.
_LONG = re.compile(r"'[^'\n]{%d,}'|\"[^\"\n]{%d,}\"|[^\s'\"]{%d,}" % (2 * MAX_SHOWN, 2 * MAX_SHOWN, 256))


def clip(text: str | None) -> str | None:
    """A message with every overlong quoted value (or unbroken run) cut as `shown` cuts it."""
    if text is None or len(text) <= 4 * MAX_SHOWN:
        return text
    return _LONG.sub(lambda m: _cut(m.group(0)), text)


def _cut(run: str) -> str:
    if run[0] in "'\"" and run[-1] == run[0]:
        return f"{run[:MAX_SHOWN]}…{run[0]} ({len(run) - 2:,} characters)"
    return f"{run[:MAX_SHOWN]}… ({len(run):,} characters)"


def clipped(problems: list[Problem]) -> list[Problem]:
    """Problems whose message, fix and field path quote no overlong value."""
    return [replace(p, message=clip(p.message) or "", fix=clip(p.fix),
                    location=replace(p.location, path=clip(p.location.path) or "")) for p in problems]


__all__ = ["MAX_ALIAS_NODES", "MAX_DEPTH", "MAX_DOCUMENT_BYTES", "MAX_RECORDS_BYTES", "MAX_SHOWN", "check_tree",
           "clip", "clipped", "deep_point", "loads_json", "read_jsonl", "read_limited", "scan_yaml", "shown",
           "too_deep"]
