"""Hostile and extreme input: seeded mutations of every input the tools read, run through the real command line.

    python benchmarks/fuzz.py [--n N] [--seed S] [--json] [--timeout SECONDS] [--workers W] [--target T]

Mutates (deterministically: case i depends only on the seed and i) every example intent (`examples/*.yaml`), every
cluster profile (`examples/profiles/*`), plans made by `infra plan` at start, and the numeric flags of `infra plan`,
`estimate`, `bench --simulate` and `render`; and it runs `infra bench --endpoint` against a hostile server
(`benchmarks/hostile_server.py`: HTTP errors, broken event streams, absurd `usage`, stalls, cut connections,
broken `/v1/models` and `/metrics`). Mutation kinds: wrong types, extremes (0, -1, +-1e308, nan, inf, huge
ints, 1e-300), unit strings (`5/s`, `1e-300/s`, `100%`, `0ms`, bogus units), unknown and duplicate keys, structure
(list<->map, deleted keys, deep nesting), encodings (BOM, UTF-16, invalid UTF-8, NUL, tabs), YAML aliases, anchors,
tags and bombs, very long strings.

Each case runs in a worker process through `infra.cli.main(argv)` (in-process, so no interpreter start per case):
`check` on an intent, then `plan -o DIR` when the check passes (`--no-verify`, but with verification on a sample);
`render` and `bench --simulate` on a plan; the one command of a flag case. A case that outlives `--timeout` has its
worker killed and replaced. Each case is classified:

- ok: exit 0, 2 or 3 with sane output (JSON that parses and holds no NaN/Infinity, a plan.yaml without .nan/.inf),
  or exit 1 with a located one-line error (`error: FILE:LINE...` for files, `error: ... — To fix:` for flags);
- tracebacks: an uncaught exception, "Traceback" in the output, an exit code other than 0-3, a worker that died;
- timeouts: the case ran past `--timeout`;
- wrong_exit: exit 0/2/3 with non-finite or unparsable JSON or plan values; exit 1 without a located message.

`--json` prints one object: tried, ok, errors, tracebacks, timeouts, wrong_exit, seconds, the figures per target,
the distinct failures (by exception and place) with a count, and the first failing cases with a reproduction.
Exits 1 when any case failed, so that it can gate a pipeline.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import dataclasses
import io
import json
import math
import os
import random
import re
import shutil
import subprocess
import sys
import tempfile
import time
import traceback
from collections import Counter
from dataclasses import dataclass, field
from multiprocessing import get_context
from multiprocessing.connection import wait
from pathlib import Path
from typing import Any

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))
import hostile_server  # noqa: E402 - beside this script, not a package

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples"
PLANNED = ("chat-mixed-fleet", "pd-across-devices", "omni-speech")
"""Examples planned at start whose plans are mutated: one aggregated, one disaggregated, one pipeline."""

# --- value pools ------------------------------------------------------------------------------------------------

EXTREMES: list[Any] = [0, -1, 1e308, -1e308, math.nan, math.inf, -math.inf, 2 ** 64, 10 ** 30, -(2 ** 63),
                       10 ** 400, 1e-300, 5e-324, -0.0, 1]
UNITS = ["5/s", "1e-300/s", "100%", "0ms", "2h", "1e308/s", "-5/s", "nan/s", "inf/s", "5 parsecs", "$1e308/h",
         "8k", "1e999", "0x1F", "1_000", "5/s/s", "ms", "", " ", "-0ms", "1e-300ms", "99999999999999999999999h",
         "300 ms", "3e2ms", "∞", "½", "nan", "inf", "-inf", "$-5/h", "150%", "0.0001%", "1e308GiB", "0GiB",
         "5Gbps", "NaNms", "1e-320s", "5/min", "1e308k", "-8k", "2024-01-01", "yes", "~", "0o17", "1:20"]
WRONG_TYPES: list[Any] = [[], {}, [1, 2], {"a": 1}, "abc", True, False, None, 3, 2.5, [[]], {"": None}]
NUMERIC_FLAGS = ["0", "-1", "1e308", "-1e308", "nan", "inf", "-inf", "99999999999999999999999", "1e-300", "abc",
                 "", "3.5", "0x10", "1_000", "5/s", "1e-300/s", "100%", "0ms", "2h", "5 parsecs", " 7 ", "١٢",
                 "1e400", "-0", "2", "64", "1000000", "1e-300ms", "nan/s", "0/s"]
TAGS = ["!!python/object/apply:os.system ['true']", "!!binary aGVsbG8=", "!custom x", "!!int two", "!!float x",
        "!!str 5", "!!timestamp 2001-12-14", "!!set {a: null}", "!!omap [a: 1]", "!!null ''", "!!bool maybe",
        "!<tag:yaml.org,2002:int> 3"]
ODD_SCALARS = ["2001-12-14t21:59:43.10-05:00", "0o17", "0b101", ".NaN", "~", "yes", "off", "1:20", "2024-01-01",
               "'\\x00'", '"\\u0000"', '"\\ud800"', "@x", "`x", "%x", "? x", "- - x", "{a: 1", "[1, 2"]
BOMB = "".join(f"x-bomb{i}: &b{i} [{', '.join([f'*b{i - 1}' if i else 'lol'] * 9)}]\n" for i in range(9))
"""Nine aliases nested eight deep: 43 million nodes from about 600 bytes."""


# --- mutations of a parsed document ---------------------------------------------------------------------------

def _paths(node: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    items = node.items() if isinstance(node, dict) else enumerate(node) if isinstance(node, list) else ()
    out: list[tuple[Any, ...]] = []
    for key, child in items:
        out.append(prefix + (key,))
        out += _paths(child, prefix + (key,))
    return out


def _get(data: Any, path: tuple[Any, ...]) -> Any:
    for step in path:
        data = data[step]
    return data


def _set(data: Any, path: tuple[Any, ...], value: Any) -> None:
    _get(data, path[:-1])[path[-1]] = value


def _dotted(path: tuple[Any, ...]) -> str:
    return "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in path).lstrip(".") or "(top)"


def _leaf(data: Any, rng: random.Random) -> tuple[Any, ...]:
    """A random path, preferring scalars (where units and numbers live)."""
    paths = _paths(data)
    leaves = [p for p in paths if not isinstance(_get(data, p), (dict, list))]
    return rng.choice(leaves if leaves and rng.random() < 0.8 else paths)


def _containers(data: Any, kind: type) -> list[tuple[Any, ...]]:
    return [p for p in _paths(data) if isinstance(_get(data, p), kind)]


def mutate_wrong_type(data: Any, rng: random.Random) -> str:
    path, value = _leaf(data, rng), copy.deepcopy(rng.choice(WRONG_TYPES))
    _set(data, path, value)
    return f"wrong type: {_dotted(path)} = {value!r}"


def mutate_extreme(data: Any, rng: random.Random) -> str:
    path, value = _leaf(data, rng), rng.choice(EXTREMES)
    _set(data, path, value)
    return f"extreme: {_dotted(path)} = {value!r}"


def mutate_unit(data: Any, rng: random.Random) -> str:
    path, value = _leaf(data, rng), rng.choice(UNITS)
    _set(data, path, value)
    return f"unit string: {_dotted(path)} = {value!r}"


SCALES = ["0", "1e-300", "1e-9", "0.001", "0.5", "1", "3", "99.99", "99.9999999", "1000", "1e9", "1e15", "1e308",
          "4294967297"]
"""Numbers a quantity is set to; 99.99 and 99.9999999 put shares (`attainment: 99%`) a hair below their limit."""
_QUANTITY = re.compile(r"^(\$?)([0-9.]+(?:[eE][+-]?\d+)?)(\s*[A-Za-z/%]*.*)$")


def mutate_scaled(data: Any, rng: random.Random) -> str:
    """A number (or the number of a quantity such as `150ms`) set to an extreme the schema may still accept, so
    that the planner, the performance model and the simulator meet it, not only validation."""
    numeric = [p for p in _paths(data) if isinstance(_get(data, p), (int, float)) and not isinstance(
        _get(data, p), bool) or isinstance(_get(data, p), str) and _QUANTITY.match(_get(data, p))]
    if not numeric:
        return mutate_extreme(data, rng)
    path, scale = rng.choice(numeric), rng.choice(SCALES)
    old = _get(data, path)
    m = _QUANTITY.match(old) if isinstance(old, str) else None
    value: Any = f"{m.group(1)}{scale}{m.group(3)}" if m else (int(float(scale)) if isinstance(old, int) and
                                                                  float(scale).is_integer() else float(scale))
    _set(data, path, value)
    return f"scaled: {_dotted(path)} = {value!r} (was {old!r})"


def _typo(word: str, rng: random.Random) -> str:
    if len(word) < 3:
        return word + "x"
    i = rng.randrange(len(word) - 1)
    return rng.choice([word[:i] + word[i + 1:], word[:i] + word[i + 1] + word[i] + word[i + 2:], word.upper(),
                       word + "s", word.replace("_", "-")])


def mutate_unknown_key(data: Any, rng: random.Random) -> str:
    maps = [()] + _containers(data, dict)
    path = rng.choice(maps)
    target = _get(data, path)
    near = [k for k in target if isinstance(k, str)]
    key = _typo(rng.choice(near), rng) if near and rng.random() < 0.6 else rng.choice(
        ["bogus", "x" * 300, "", "spec", "apiVersion", "<<", "null", "1"])
    target[key] = rng.choice(["x", 1, None, {"a": 1}])
    return f"unknown key: {_dotted(path + (key,))}"


def mutate_structure(data: Any, rng: random.Random) -> str | tuple[str, Any]:
    kind = rng.choice(["list_to_map", "map_to_list", "delete", "delete", "empty", "deep", "root"])
    if kind == "list_to_map" and _containers(data, list):
        path = rng.choice(_containers(data, list))
        _set(data, path, {i: v for i, v in enumerate(_get(data, path))})
    elif kind == "map_to_list" and _containers(data, dict):
        path = rng.choice(_containers(data, dict))
        node = _get(data, path)
        _set(data, path, rng.choice([list(node.values()), [{k: v} for k, v in node.items()], list(node)]))
    elif kind == "empty":
        path = _leaf(data, rng)
        _set(data, path, rng.choice([{}, [], None, ""]))
    elif kind == "deep":
        path = _leaf(data, rng)
        _set(data, path, f"__DEEP_{rng.choice([10, 63, 65, 100, 300, 5000])}_{rng.choice('[{-')}__")
    elif kind == "root":
        value = rng.choice([[], None, "text", 5, [data]])
        return f"structure: whole document replaced by {type(value).__name__}", value
    else:
        kind, path = "delete", _leaf(data, rng)
        del _get(data, path[:-1])[path[-1]]
    return f"structure {kind}: {_dotted(path)}"


def mutate_alias(data: Any, rng: random.Random) -> str:
    """Shared nodes (PyYAML writes them as &anchor/*alias), or a placeholder the text stage turns into a bomb, a
    recursive, unknown or merge alias, a tag or an odd YAML scalar."""
    kind = rng.choice(["share", "bomb", "recursive", "unknown", "merge", "tag", "odd"])
    containers = _containers(data, dict) + _containers(data, list)
    path = _leaf(data, rng)
    if kind in ("share", "merge") and containers:
        source = rng.choice(containers)
        if source[:len(path)] != path and path[:len(source)] != source:
            _set(data, path, _get(data, source))
            return f"alias {kind}: {_dotted(path)} = *{_dotted(source)}" + ("" if kind == "share" else " (as <<)")
        kind = "bomb"
    if kind in ("share", "merge"):
        kind = "bomb"
    value = {"tag": rng.choice(TAGS), "odd": rng.choice(ODD_SCALARS)}.get(kind, "")
    _set(data, path, f"__{kind.upper()}__{value}")
    return f"alias {kind}: {_dotted(path)}" + (f" = {value}" if value else "")


def mutate_long(data: Any, rng: random.Random) -> str:
    path = _leaf(data, rng)
    size = rng.choice([10_000, 100_000, 1_000_000])
    value = rng.choice(["x" * size, "9" * min(size, 50_000), "é" * size, ("a b " * size)[:size],
                        "ab\\u0000" * (size // 8)])
    if rng.random() < 0.3 and isinstance(_get(data, path[:-1]), dict):
        parent = _get(data, path[:-1])
        parent[value[:size]] = parent.pop(path[-1])
        return f"long key ({size} chars) instead of {_dotted(path)}"
    _set(data, path, value)
    return f"long string: {_dotted(path)} = {len(value)} chars of {value[:6]!r}"


# Each mutates the document in place and says what it did; a mutation that replaces the whole document returns
# (what it did, the new document).
DATA_MUTATIONS = [mutate_wrong_type, mutate_extreme, mutate_scaled, mutate_unit, mutate_unknown_key,
                  mutate_structure, mutate_alias, mutate_long]


# --- mutations of the text ------------------------------------------------------------------------------------

def _expand_placeholders(text: str) -> str:
    """Turn the placeholders of `mutate_alias` and `mutate_structure` into the YAML they stand for."""
    def deep(m: re.Match[str]) -> str:
        depth, kind = int(m.group(1)), m.group(2)
        if kind == "[":
            return "[" * depth + "1" + "]" * depth
        if kind == "{":
            return "{a: " * depth + "1" + "}" * depth
        # alternating mappings and lists
        return "".join("[" if i % 2 else "{a: " for i in range(depth)) + "1" + \
            "".join("]" if i % 2 else "}" for i in reversed(range(depth)))

    text = re.sub(r"'?__DEEP_(\d+)_(.)__'?", deep, text)
    if "__BOMB__" in text:
        text = BOMB + re.sub(r"'?__BOMB__'?", "*b8", text)
    text = re.sub(r"'?__RECURSIVE__'?", "&r [*r, 1]", text)
    text = re.sub(r"'?__UNKNOWN__'?", "*nope", text)
    text = re.sub(r"'?__(TAG|ODD)__(.*?)'?$", lambda m: m.group(2).replace("''", "'"), text, flags=re.M)
    return text


def _merge(text: str) -> str:
    """Write the first alias of a mapping as a merge key (`<<: *id001`) one level down."""
    m = re.search(r"^( *)(- )?([^\s:#][^:\n]*): (\*id\d+)$", text, flags=re.M)
    if not m:
        return text
    indent = " " * (len(m.group(1)) + (2 if m.group(2) else 0) + 2)
    return text[:m.start()] + f"{m.group(1)}{m.group(2) or ''}{m.group(3)}:\n{indent}<<: {m.group(4)}" + \
        text[m.end():]


def text_duplicate_key(text: str, rng: random.Random) -> tuple[bytes, str]:
    lines = text.splitlines(keepends=True)
    candidates = [i for i, ln in enumerate(lines) if re.match(r"^\s*[A-Za-z_]+: \S", ln)]
    if not candidates:
        return text.encode(), "duplicate key: none possible"
    i = rng.choice(candidates)
    lines.insert(i + 1, lines[i])
    return "".join(lines).encode(), f"duplicate key at line {i + 2}: {lines[i].strip()!r}"


def text_encoding(text: str, rng: random.Random) -> tuple[bytes, str]:
    raw = text.encode()
    at = rng.randrange(len(raw) + 1)
    kind = rng.choice(["bom", "utf16", "utf16le", "invalid_utf8", "nul", "tab", "crlf", "cr", "nbsp", "zwsp",
                       "latin1", "control"])
    if kind == "bom":
        return b"\xef\xbb\xbf" + raw, "encoding: UTF-8 BOM"
    if kind == "utf16":
        return text.encode("utf-16"), "encoding: UTF-16 with BOM"
    if kind == "utf16le":
        return text.encode("utf-16-le"), "encoding: UTF-16-LE without BOM"
    if kind == "invalid_utf8":
        return raw[:at] + rng.choice([b"\xff", b"\xc3\x28", b"\xed\xa0\x80", b"\x80"]) + raw[at:], \
            f"encoding: invalid UTF-8 at byte {at}"
    if kind == "nul":
        return raw[:at] + b"\x00" + raw[at:], f"encoding: NUL byte at byte {at}"
    if kind == "control":
        return raw[:at] + bytes([rng.choice([1, 7, 8, 0x1b, 0x7f])]) + raw[at:], f"encoding: control byte at {at}"
    lines = text.splitlines(keepends=True)
    indented = [i for i, ln in enumerate(lines) if ln.startswith("  ")] or [0]
    i = rng.choice(indented)
    if kind == "tab":
        lines[i] = "\t" + lines[i].lstrip(" ")
        return "".join(lines).encode(), f"encoding: tab indentation at line {i + 1}"
    if kind in ("crlf", "cr"):
        return text.replace("\n", "\r\n" if kind == "crlf" else "\r").encode(), f"encoding: {kind} line ends"
    if kind in ("nbsp", "zwsp"):
        lines[i] = lines[i].replace(" ", "\u00a0" if kind == "nbsp" else "\u200b", 1)
        return "".join(lines).encode(), f"encoding: {kind} at line {i + 1}"
    return text.encode("latin-1", errors="replace") + "é: 1\n".encode("latin-1"), "encoding: Latin-1"


def build_document(base: Any, rng: random.Random) -> tuple[bytes, list[str]]:
    """A mutated YAML document: one to three data mutations, then sometimes a text mutation."""
    data, notes = copy.deepcopy(base), []
    # A third of the documents get only in-range extremes, which validation tends to let through to the solver.
    mutations = [mutate_scaled] * rng.choice([1, 2]) if rng.random() < 0.35 else \
        rng.sample(DATA_MUTATIONS, rng.choice([1, 1, 1, 2, 3]))
    for mutation in mutations:
        try:
            note = mutation(data, rng)
        except (IndexError, KeyError, TypeError):
            continue  # the document no longer has what this mutation needs (an earlier one replaced it)
        if isinstance(note, tuple):
            note, data = note
        notes.append(note)
    text = _expand_placeholders(yaml.safe_dump(data, sort_keys=False, allow_unicode=True, width=4096))
    if any("as <<" in n for n in notes):
        text = _merge(text)
    roll = rng.random()
    if roll < 0.12:
        raw, note = text_duplicate_key(text, rng)
    elif roll < 0.3:
        raw, note = text_encoding(text, rng)
    else:
        return text.encode(), notes
    return raw, notes + [note]


# --- cases ------------------------------------------------------------------------------------------------------

@dataclass
class Case:
    """One mutated input and the commands to run on it; `gate`: later commands run only if the first exits 0."""

    index: int
    target: str
    source: str
    notes: list[str]
    files: dict[Path, bytes] = field(default_factory=dict)
    commands: list[list[str]] = field(default_factory=list)
    gate: bool = False
    flag_case: bool = False


@dataclass
class Inputs:
    """What the cases mutate: parsed bases and where the working copies lie."""

    work: Path
    intents: dict[str, Any]
    profiles: dict[str, Any]
    users: dict[str, str]  # profile file name -> an intent that references it
    plans: dict[str, tuple[Any, list[str]]]  # plan name -> (data, extra bench flags)
    endpoint: str = ""  # the hostile server's base URL (`hostile_server.py`)
    seed: int = 0


def _intent_case(case: Case, inputs: Inputs, rng: random.Random) -> None:
    name = rng.choice(sorted(inputs.intents))
    raw, notes = build_document(inputs.intents[name], rng)
    path = inputs.work / "ex" / f"fuzz-{case.index}.yaml"
    case.source, case.notes, case.files = f"examples/{name}", notes, {path: raw}
    _check_then_plan(case, path)


def _profile_case(case: Case, inputs: Inputs, rng: random.Random) -> None:
    name = rng.choice(sorted(inputs.profiles))
    raw, notes = build_document(inputs.profiles[name], rng)
    profile = inputs.work / "ex" / "profiles" / f"fuzz-{case.index}.yaml"
    user = inputs.users[name]
    intent = (EXAMPLES / user).read_text(encoding="utf-8").replace(f"profiles/{name}", f"profiles/{profile.name}")
    path = inputs.work / "ex" / f"fuzz-{case.index}.yaml"
    case.source, case.notes = f"examples/profiles/{name} (used by examples/{user})", notes
    case.files = {profile: raw, path: intent.encode()}
    _check_then_plan(case, path)


def _check_then_plan(case: Case, path: Path) -> None:
    human = case.index % 3 == 0  # the human output (rich tables) meets the values too
    case.commands.append(["check", str(path)] + ([] if human else ["--json"]))
    verify = ["--verify"] if case.index % 10 == 0 else ["--no-verify"]
    out = path.parent.parent / "out" / str(case.index)
    case.commands.append(["plan", str(path), "-o", str(out)] + verify + ([] if human else ["--json"]))
    case.gate = True


def _plan_case(case: Case, inputs: Inputs, rng: random.Random) -> None:
    name = rng.choice(sorted(inputs.plans))
    base, bench_flags = inputs.plans[name]
    raw, notes = build_document(base, rng)
    path = inputs.work / "plans" / name / f"fuzz-{case.index}.yaml"
    case.source, case.notes, case.files = f"plan of examples/{name}.yaml", notes, {path: raw}
    out = inputs.work / "out" / str(case.index)
    case.commands = [["render", str(path), "-o", str(out)],
                     ["bench", "--simulate", str(path), "--requests", "30", "--json"] + bench_flags]


ESTIMATE = ["estimate", "--model", "Llama-3.1-8B-Instruct", "--device", "H100-SXM", "--isl", "2k", "--osl", "256",
            "--rate", "5/s", "--json"]
ESTIMATE_FLAGS = ["--tp", "--pp", "--ep", "--moe-tp", "--dp", "--batch", "--workers", "--max-num-tokens", "--isl",
                  "--osl", "--isl-cv", "--osl-cv", "--concurrency", "--requests", "--rate", "--arrival-cv",
                  "--prefix-hit"]
BENCH_FLAGS = ["--requests", "--rate", "--concurrency", "--seed", "--input-tokens", "--output-tokens"]


def _flag_case(case: Case, inputs: Inputs, rng: random.Random) -> None:
    """One command with one to three numeric flags set to hostile values."""
    command = rng.choice(["plan", "estimate", "estimate", "bench", "bench", "render"])
    plan_name = rng.choice(sorted(inputs.plans))
    plan_path = str(inputs.work / "plans" / plan_name / "plan.yaml")
    values = [rng.choice(NUMERIC_FLAGS) for _ in range(rng.choice([1, 1, 2, 3]))]
    if command == "plan":
        intent = str(inputs.work / "ex" / f"{rng.choice(sorted(inputs.intents))}")
        argv = ["plan", intent, "--no-verify", "--json", "--top", values[0]]
        if len(values) > 1:
            argv += ["--objective", rng.choice(["cost", "goodput", values[1]])]
    elif command == "estimate":
        argv = list(ESTIMATE)
        for value in values:
            argv += [rng.choice(ESTIMATE_FLAGS), value]
        if rng.random() < 0.2:
            argv += ["--max-rate", "--slo", f"ttft_p99={rng.choice(values)}ms"]
        if rng.random() < 0.15:
            # Half of them on a layout that runs, so that the hostile flags reach the disaggregated model itself.
            layout = rng.choice([(f"tp={values[0]}", f"tp=1,batch={values[-1]}"), ("tp=2", "tp=1")])
            argv += ["--mode", "disagg", "--prefill", layout[0], "--decode", layout[1]]
    elif command == "bench":
        argv = ["bench", "--simulate", plan_path, "--requests", "30", "--json"] + inputs.plans[plan_name][1]
        for value in values:
            argv += [rng.choice(BENCH_FLAGS), value]
    else:
        out = inputs.work / "out" / str(case.index)
        argv = ["render", plan_path, "-o", rng.choice([str(out), values[0], str(out) + "/" + "x" * 300])]
        if len(values) > 1:
            argv += [rng.choice(["--templates", "--force", "--bogus"]), values[1]]
    case.source, case.notes, case.commands, case.flag_case = f"{command} flags", [" ".join(argv[1:])], [argv], True


def _client_case(case: Case, inputs: Inputs, rng: random.Random) -> None:
    """`bench --endpoint` against the hostile server, which misbehaves as `hostile_server.answer` says."""
    url = f"{inputs.endpoint}/c/{inputs.seed}/{case.index}/v1"
    argv = ["bench", "--endpoint", url, "--requests", str(rng.choice([1, 3, 5])), "--concurrency",
            str(rng.choice([1, 2])), "--warmup", str(rng.choice([0, 0, 1])), "--timeout", "2", "--output-tokens", "4"]
    argv += rng.choice([[], ["--slo", "ttft_p99=1s,tpot_p50=100ms"], ["--api", "completions"],
                        ["--model", "fuzz-model"], ["--duration", "3"]])
    argv += ["--json"] if case.index % 3 else []
    case.source, case.notes = "bench client", [hostile_server.describe(inputs.seed, case.index)]
    case.commands, case.flag_case = [argv], True


TARGETS = [(_intent_case, 0.4), (_profile_case, 0.18), (_plan_case, 0.18), (_flag_case, 0.14), (_client_case, 0.1)]


def _target_name(builder: Any) -> str:
    return builder.__name__.strip("_").removesuffix("_case")


def make_case(index: int, seed: int, inputs: Inputs, only: tuple[str, ...] = ()) -> Case:
    """Case `index`: the same for the same seed (and `only`, the targets to draw from), whatever ran before it."""
    rng = random.Random(f"{seed}/{index}")
    targets = [(t, w) for t, w in TARGETS if not only or _target_name(t) in only]
    builder = rng.choices([t for t, _ in targets], weights=[w for _, w in targets])[0]
    case = Case(index, _target_name(builder), "", [])
    builder(case, inputs, rng)
    return case


# --- running (worker side) ------------------------------------------------------------------------------------

def _run_command(argv: list[str]) -> dict[str, Any]:
    """Run one command line in this process, as the console script would, and record what came out."""
    from infra.cli import main

    out, err = io.StringIO(), io.StringIO()
    code: Any = 0
    started = time.perf_counter()
    exc_info: dict[str, str] | None = None
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            main(argv)
        except SystemExit as exc:
            code = 0 if exc.code is None else exc.code
        except BaseException as exc:  # any escape, MemoryError and RecursionError included, is what we look for
            frames = traceback.extract_tb(exc.__traceback__)
            last = frames[-1] if frames else None
            ours = next((f for f in reversed(frames) if "/infra/" in f.filename), last)
            exc_info = {"type": type(exc).__name__, "message": str(exc)[:300],
                        "where": f"{_short(ours.filename)}:{ours.lineno} in {ours.name}" if ours else "",
                        "tail": "".join(traceback.format_exception(exc)[-3:])[-1200:]}
    if isinstance(code, str):  # sys.exit("message") prints it and exits 1
        err.write(code + "\n")
        code = 1
    stdout = out.getvalue()
    # Judged here, on the whole output, rather than shipping megabytes back to the parent.
    json_problem = _json_problem(stdout) if "--json" in argv and code in (0, 2, 3) else None
    return {"argv": argv, "code": code, "stdout": _ends(stdout), "stderr": _ends(err.getvalue()),
            "exception": exc_info, "seconds": time.perf_counter() - started, "json_problem": json_problem,
            "plan_nonfinite": _plan_nonfinite(argv)}


def _ends(text: str, keep: int = 4000) -> str:
    """Head and tail of a long output: the first error line and the last words both matter."""
    return text if len(text) <= 2 * keep else text[:keep] + "\n[...]\n" + text[-keep:]


def _short(filename: str) -> str:
    marker = filename.rfind("/infra/")
    return filename[marker + 1:] if marker >= 0 else filename


def _plan_nonfinite(argv: list[str]) -> bool:
    """Whether `plan -o DIR` wrote a plan.yaml holding .nan or .inf."""
    if argv[0] != "plan" or "-o" not in argv:
        return False
    path = Path(argv[argv.index("-o") + 1]) / "plan.yaml"
    text = path.read_text(encoding="utf-8", errors="replace") if path.is_file() else ""
    return bool(re.search(r"\.(nan|inf)\b", text, re.I))


def _worker(conn: Any, work: str, memory_mb: int) -> None:
    """Serve cases until told to stop; memory is capped so that a bomb fails here instead of taking the host."""
    import resource

    if memory_mb:
        resource.setrlimit(resource.RLIMIT_AS, (memory_mb << 20, memory_mb << 20))
    os.chdir(work)
    sys.path.insert(0, str(ROOT))
    import infra.cli  # noqa: F401 - imported once per worker, not per case

    while True:
        commands, gate = conn.recv()
        if commands is None:
            return
        results = []
        for i, argv in enumerate(commands):
            results.append(_run_command(argv))
            if gate and i == 0 and results[0]["code"] != 0:
                break
        conn.send(results)


# --- classification -----------------------------------------------------------------------------------------------

LOCATED = re.compile(r"^error: [^\s:][^:]*:\d+(:\d+)?: ", re.M)
NAMES_FILE = re.compile(r"^error: [^\s:]*\.(ya?ml|jsonl?|csv|j2)(:|\s|$)")
"""An error whose first word is a file: it is about that file, so it must give the line, flag case or not."""


def _reject_constant(token: str) -> Any:
    raise ValueError(f"non-finite number {token} in JSON output")


def _json_problem(stdout: str) -> str | None:
    """Why the JSON on stdout is not sane, if it is not: unparsable, or holding NaN/Infinity."""
    text = stdout.strip()
    if not text:
        return None
    starts = [0] + [m.start() + 1 for m in re.finditer(r"\n[{\[]", text)]
    last_error = "no JSON document"
    for start in starts:  # `bench --json` ends with its object, after any progress lines
        try:
            json.loads(text[start:], parse_constant=_reject_constant)
            return None
        except ValueError as exc:
            last_error = str(exc)
            if "non-finite" in last_error:
                return last_error
    lines = [ln for ln in text.splitlines() if ln.strip()]
    try:  # `estimate --cases` prints one object per line
        for line in lines:
            json.loads(line, parse_constant=_reject_constant)
        return None
    except ValueError:
        return f"JSON output does not parse: {last_error[:120]}"


def classify(case: Case, results: list[dict[str, Any]]) -> tuple[str, str]:
    """(verdict, what) for one finished case: ok, error, traceback or wrong_exit."""
    for r in results:
        verdict = _classify_one(case, r)
        if verdict[0] not in ("ok", "error"):
            return verdict
    return ("error", "") if any(r["code"] == 1 for r in results) else ("ok", "")


def _classify_one(case: Case, r: dict[str, Any]) -> tuple[str, str]:
    cmd = r["argv"][0]
    if r["exception"]:
        e = r["exception"]
        return "traceback", f"{cmd}: {e['type']}: {e['message'][:200]} (at {e['where']})"
    output = r["stdout"] + r["stderr"]
    if "Traceback (most recent call last)" in output:
        return "traceback", f"{cmd}: 'Traceback' in output: {output[output.find('Traceback'):][-300:]}"
    if r["code"] not in (0, 1, 2, 3):
        return "traceback", f"{cmd}: exit code {r['code']}"
    if r["code"] == 1:
        return _classify_error(case, cmd, r["stderr"])
    if r["json_problem"]:
        return "wrong_exit", f"{cmd}: exit {r['code']} with {r['json_problem']}"
    if r["plan_nonfinite"]:
        return "wrong_exit", f"{cmd}: exit {r['code']} wrote a plan.yaml holding .nan/.inf"
    return "ok", ""


def _classify_error(case: Case, cmd: str, stderr: str) -> tuple[str, str]:
    first = next((ln for ln in stderr.splitlines() if ln.startswith("error:")), "")
    if not first:
        return "wrong_exit", f"{cmd}: exit 1 without an `error:` line: {stderr.strip()[-200:]!r}"
    if case.flag_case and " — To fix: " in first and not NAMES_FILE.match(first):
        return "error", ""
    if LOCATED.match(first):
        return "error", ""
    return "wrong_exit", f"{cmd}: exit 1 without a located message: {first[:240]}"


# --- the run ------------------------------------------------------------------------------------------------------

def prepare(work: Path) -> Inputs:
    """Copy the examples into `work` (so relative profile and trace paths resolve) and plan the examples whose
    plans are mutated."""
    shutil.copytree(EXAMPLES, work / "ex")
    intents = {p.name: yaml.safe_load(p.read_text(encoding="utf-8")) for p in sorted(EXAMPLES.glob("*.yaml"))}
    profiles = {p.name: yaml.safe_load(p.read_text(encoding="utf-8"))
                for p in sorted((EXAMPLES / "profiles").glob("*.y*ml"))}
    users = {}
    for name in sorted(intents):
        ref = ((intents[name].get("spec") or {}).get("cluster") or {}).get("profile")
        if ref:
            users.setdefault(Path(ref).name, name)
    plans = {}
    for name in PLANNED:
        out = work / "plans" / name
        done = subprocess.run([sys.executable, "-m", "infra", "plan", str(work / "ex" / f"{name}.yaml"), "-o",
                               str(out), "--no-verify"], cwd=ROOT, capture_output=True, text=True)
        if done.returncode != 0:
            raise SystemExit(f"cannot plan examples/{name}.yaml for the plan cases:\n{done.stderr}")
        data = yaml.safe_load((out / "plan.yaml").read_text(encoding="utf-8"))
        plans[name] = (data, _bench_service(data))
    return Inputs(work, intents, {k: v for k, v in profiles.items() if k in users}, users, plans)


def _bench_service(plan: dict[str, Any]) -> list[str]:
    """`--service` for a plan of several services: its pipeline when it has one (stages run only inside it)."""
    spec = plan.get("spec") or {}
    pipelines, services = spec.get("pipelines") or [], spec.get("services") or []
    if pipelines:
        return ["--service", pipelines[0]["service"]]
    return ["--service", services[0]["name"]] if len(services) > 1 else []


@dataclass
class Worker:
    process: Any
    conn: Any
    case: Case | None = None
    started: float = 0.0
    served: int = 0


class Pool:
    """Worker processes that each run one case at a time; one that outlives the timeout is killed and replaced."""

    RECYCLE = 300  # cases per worker, so that caches keyed by the ever-new file names stay small

    def __init__(self, size: int, work: Path, memory_mb: int):
        self.ctx, self.work, self.memory_mb = get_context("spawn"), work, memory_mb
        self.workers = [self._start() for _ in range(size)]

    def _start(self) -> Worker:
        parent, child = self.ctx.Pipe()
        process = self.ctx.Process(target=_worker, args=(child, str(self.work), self.memory_mb), daemon=True)
        process.start()
        child.close()
        return Worker(process, parent)

    def _replace(self, w: Worker) -> Worker:
        w.process.kill()
        w.process.join()
        fresh = self._start()
        self.workers[self.workers.index(w)] = fresh
        return fresh

    def idle(self) -> list[Worker]:
        return [w for w in self.workers if w.case is None]

    def submit(self, w: Worker, case: Case) -> None:
        if w.served >= self.RECYCLE:
            w.conn.send((None, False))
            w.process.join(timeout=10)
            w = self._replace(w)
        w.case, w.started, w.served = case, time.monotonic(), w.served + 1
        w.conn.send((case.commands, case.gate))

    def collect(self, timeout: float) -> list[tuple[Case, list[dict[str, Any]] | str]]:
        """Finished cases: their results, or "timeout" / "died: ..." for a worker that was lost."""
        busy = {w.conn: w for w in self.workers if w.case is not None}
        done: list[tuple[Case, list[dict[str, Any]] | str]] = []
        for conn in wait(list(busy), timeout=0.2):
            w = busy[conn]
            try:
                result: list[dict[str, Any]] | str = conn.recv()
                served = w.served
            except (EOFError, OSError):
                result, w = f"died: worker exit code {w.process.exitcode}", self._replace(w)
                served = 0
            case, w.case, w.served = w.case, None, served
            done.append((case, result))
        for w in [w for w in self.workers if w.case is not None and time.monotonic() - w.started > timeout]:
            case = w.case
            self._replace(w)
            done.append((case, "timeout"))
        return done

    def close(self) -> None:
        for w in self.workers:
            w.process.kill()
            w.process.join()


@dataclass
class Tally:
    counts: Counter = field(default_factory=Counter)
    per_target: dict[str, Counter] = field(default_factory=dict)
    failures: list[dict[str, Any]] = field(default_factory=list)
    distinct: dict[str, dict[str, Any]] = field(default_factory=dict)

    def add(self, case: Case, verdict: str, what: str) -> None:
        self.counts[verdict] += 1
        self.per_target.setdefault(case.target, Counter())[verdict] += 1
        if verdict in ("ok", "error"):
            return
        record = {"case": case.index, "verdict": verdict, "target": case.target, "source": case.source,
                  "mutations": case.notes, "argv": _shown_argv(case), "last_line": what,
                  "input_head": _input_head(case)}
        self.failures.append(record)
        key = f"{verdict}: {_signature(what)}"
        entry = self.distinct.setdefault(key, {"count": 0, "example": record})
        entry["count"] += 1


def _signature(what: str) -> str:
    """What groups failures of one cause: the command, exception type and place, without the values, the case's
    file or the field it was in."""
    m = re.match(r"(\w+): (\w+): .*\(at (.*)\)$", what, flags=re.S)
    if m:
        return f"{m.group(1)}: {m.group(2)} at {m.group(3)}"
    what = re.sub(r"\S*/fuzz-\d+\.yaml(:\d+)*: (spec|metadata)[^:]*: ", "PLAN: FIELD: ", what)
    what = re.sub(r"'[^']*'|\"[^\"]*\"", "'…'", what)
    return re.sub(r"\d+(\.\d+)?(e[+-]?\d+)?", "N", what)[:140]


def _shown_argv(case: Case) -> list[str]:
    return [" ".join(["infra"] + argv) for argv in case.commands]


def _input_head(case: Case) -> str | None:
    mutated = [raw for path, raw in case.files.items() if "profiles" in path.parts] or list(case.files.values())
    return repr(mutated[0][:600]) if mutated else None


def run(args: argparse.Namespace) -> dict[str, Any]:
    work = Path(tempfile.mkdtemp(prefix="infra-fuzz-"))
    started = time.perf_counter()
    tally = Tally()
    endpoint, stop_server = hostile_server.start()
    try:
        inputs = dataclasses.replace(prepare(work), endpoint=endpoint, seed=args.seed)
        pool = Pool(args.workers, work, args.memory_mb)
        try:
            _drive(pool, inputs, args, tally)
        finally:
            pool.close()
    finally:
        stop_server()
        shutil.rmtree(work, ignore_errors=True)
    c = tally.counts
    return {"tried": sum(c.values()), "ok": c["ok"], "errors": c["error"], "tracebacks": c["traceback"],
            "timeouts": c["timeout"], "wrong_exit": c["wrong_exit"], "seconds": round(time.perf_counter() - started, 1),
            "seed": args.seed, "workers": args.workers, "timeout_s": args.timeout,
            "per_target": {t: dict(v) for t, v in sorted(tally.per_target.items())},
            "distinct": [{"signature": k, **v}
                         for k, v in sorted(tally.distinct.items(), key=lambda kv: -kv[1]["count"])],
            "failures": tally.failures[:args.show]}


def _drive(pool: Pool, inputs: Inputs, args: argparse.Namespace, tally: Tally) -> None:
    next_index, finished = 0, 0
    while finished < args.n:
        for w in pool.idle():
            if next_index >= args.n:
                break
            case = make_case(next_index, args.seed, inputs, tuple(args.target or ()))
            for path, raw in case.files.items():
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_bytes(raw)
            pool.submit(w, case)
            next_index += 1
        for case, result in pool.collect(args.timeout):
            finished += 1
            if result == "timeout":
                verdict, what = "timeout", f"{' then '.join(c[0] for c in case.commands)} over {args.timeout:g} s"
            elif isinstance(result, str):
                verdict, what = "traceback", result
            else:
                verdict, what = classify(case, result)
            tally.add(case, verdict, what)
            _clean(case, inputs.work)
            if args.progress and finished % 100 == 0:
                print(f"{finished}/{args.n} {dict(tally.counts)}", file=sys.stderr, flush=True)


def _clean(case: Case, work: Path) -> None:
    for path in case.files:
        if path.name.startswith("fuzz-"):
            path.unlink(missing_ok=True)
    shutil.rmtree(work / "out" / str(case.index), ignore_errors=True)


def print_human(report: dict[str, Any]) -> None:
    print(f"infra fuzz: {report['tried']} mutations (seed {report['seed']}) in {report['seconds']} s on "
          f"{report['workers']} workers, {report['timeout_s']:g} s per case")
    cols = ["ok", "error", "traceback", "timeout", "wrong_exit"]
    print(f"{'target':<10}" + "".join(f"{c:>12}" for c in ["cases"] + cols))
    for target, counts in report["per_target"].items():
        print(f"{target:<10}{sum(counts.values()):>12}" + "".join(f"{counts.get(c, 0):>12}" for c in cols))
    print(f"{'total':<10}{report['tried']:>12}{report['ok']:>12}{report['errors']:>12}{report['tracebacks']:>12}"
          f"{report['timeouts']:>12}{report['wrong_exit']:>12}")
    if report["distinct"]:
        print("\ndistinct failures (count, first case):")
        for d in report["distinct"]:
            ex = d["example"]
            print(f"  {d['count']:>5} x {d['signature']}")
            print(f"        case {ex['case']} {ex['source']}: {'; '.join(ex['mutations'])[:200]}")
            print(f"        {ex['argv'][-1][:200]}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=500, help="mutations to try")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", action="store_true", help="print one JSON object")
    ap.add_argument("--timeout", type=float, default=30.0, help="seconds one case may take")
    ap.add_argument("--workers", type=int, default=os.cpu_count() or 2)
    ap.add_argument("--memory-mb", type=int, default=4096, help="address-space cap per worker (0: none)")
    ap.add_argument("--show", type=int, default=10, help="failing cases to list in the JSON")
    ap.add_argument("--progress", action="store_true", help="report every 100 cases on stderr")
    ap.add_argument("--target", action="append", choices=[_target_name(t) for t, _ in TARGETS],
                    help="draw cases from this target only (repeatable; default: all, weighted)")
    args = ap.parse_args()
    report = run(args)
    if args.json:
        print(json.dumps(report, indent=2, sort_keys=True))
    else:
        print_human(report)
    return 1 if report["tracebacks"] or report["timeouts"] or report["wrong_exit"] else 0


if __name__ == "__main__":
    sys.exit(main())
