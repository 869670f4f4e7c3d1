"""Load the packaged catalog, overlay a user's directories, and resolve names.

A user's `--catalog DIR` has the same layout as the packaged data (`models/`, `devices/`, `frameworks/`,
`conventions/`). An entry whose `name` matches a packaged one is merged into it key by key (so a file holding only
`name` and `reference_price_per_hour` re-prices a card); an entry with a new name must be complete.
"""

from __future__ import annotations

import difflib
import json
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any, TypeVar

import yaml
from pydantic import BaseModel
from pydantic import ValidationError as PydanticValidationError

from infra.catalog.hf import model_from_hf_config
from infra.catalog.hfids import repo_name, strip_format
from infra.catalog.schema import DeviceSpec, FrameworkSpec, ModelSpec
from infra.errors import CatalogError, Location, Problem
from infra.limits import MAX_DOCUMENT_BYTES, check_tree, read_limited, scan_yaml, shown

T = TypeVar("T", bound=BaseModel)

KINDS: dict[str, type[BaseModel]] = {"models": ModelSpec, "devices": DeviceSpec, "frameworks": FrameworkSpec}


def _key(name: str) -> str:
    return "".join(ch for ch in name.lower() if ch.isalnum() or ch in "./")


def _merge(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for k, v in over.items():
        out[k] = _merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


class _StrictLoader(getattr(yaml, "CSafeLoader", yaml.SafeLoader)):  # type: ignore[misc]
    """libyaml's safe loader (the catalog is read on every command; ruamel's pure-Python parser took most of a
    second for it) that still refuses a key given twice."""

    def construct_mapping(self, node: Any, deep: bool = False) -> dict[Any, Any]:
        seen = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)
            if key in seen:
                raise yaml.constructor.ConstructorError(None, None, f"found duplicate key {key!r}",
                                                        key_node.start_mark)
            seen.add(key)
        return super().construct_mapping(node, deep)


def _read(path: Path | Any) -> tuple[dict[str, Any], str]:
    name = str(path)
    try:
        text = read_limited(path, "catalog", error=CatalogError).decode("utf-8")
        # Overlays are users' files: bound nesting and aliases before PyYAML builds (and pydantic walks) them.
        scan_yaml(text, name, CatalogError)
        data = yaml.load(text, Loader=_StrictLoader)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        loc = Location(name, mark.line + 1, mark.column + 1) if mark else Location(name)
        raise CatalogError(Problem(f"YAML syntax error: {getattr(exc, 'problem', exc)}", loc,
                                   "fix the catalog file's syntax")) from None
    except UnicodeDecodeError as exc:
        line = exc.object[:exc.start].count(b"\n") + 1
        raise CatalogError(Problem("catalog file is not UTF-8 text", Location(name, line),
                                   "save the file as UTF-8")) from None
    except TypeError as exc:
        # PyYAML builds a complex key (`? [a, b]: c`) and then cannot hash it.
        raise CatalogError(Problem(f"YAML value cannot be read: {exc}", Location(name, 1, 1),
                                   "write plain `key: value` entries")) from None
    except OSError as exc:
        raise CatalogError(Problem(f"cannot read catalog file: {exc.strerror}", Location(name))) from None
    if not isinstance(data, dict):
        raise CatalogError(Problem("a catalog file holds one mapping", Location(name, 1, 1),
                                   "write one entry per file, starting with `name:`"))
    check_tree(data, name, error=CatalogError)
    return data, name


def _validate(cls: type[T], data: dict[str, Any], file: str) -> T:
    try:
        return cls.model_validate(data)
    except PydanticValidationError as exc:
        problems = []
        for err in exc.errors():
            path = ".".join(str(p) for p in err["loc"])
            msg = err["msg"].removeprefix("Value error, ")
            if err["type"] == "extra_forbidden":
                msg = "unknown field"
            problems.append(Problem(msg, Location(file, path=path),
                                    f"see the {cls.__name__} fields in `infra catalog --help`"))
        raise CatalogError(problems) from None


@dataclass
class Table:
    """Entries of one kind, with every name and alias indexed."""

    kind: str
    entries: dict[str, Any] = field(default_factory=dict)
    index: dict[str, str] = field(default_factory=dict)
    files: dict[str, str] = field(default_factory=dict)

    def add(self, entry: Any, file: str) -> None:
        names = [entry.name] + list(entry.aliases)
        if isinstance(entry, ModelSpec):
            names.append(entry.hf_id)
        for n in names:
            k = _key(n)
            owner = self.index.get(k)
            if owner is not None and owner != entry.name:
                raise CatalogError(Problem(f"name {n!r} is already used by {owner!r}", Location(file, path="aliases"),
                                           "remove the alias from one of the two entries"))
            self.index[k] = entry.name
        self.entries[entry.name] = entry
        self.files[entry.name] = file

    def find(self, ref: str) -> Any | None:
        name = self.index.get(_key(ref))
        return self.entries.get(name) if name else None

    def find_checkpoint(self, ref: str) -> tuple[Any | None, list[str]]:
        """The entry a published Hugging Face id was made from, for an id with no exact match: first the id
        without its quantization suffix (`Qwen/Qwen3-32B-FP8` -> `Qwen/Qwen3-32B`), then its repository name under
        any organisation (`nvidia/Qwen3-32B-NVFP4` -> `Qwen3-32B`), as written or without the suffix. Returns
        (entry, []) when exactly one entry fits, (None, names) when several do, which is never guessed between,
        and (None, []) when none does."""
        base = strip_format(ref)
        if base != ref and (entry := self.find(base)) is not None:
            return entry, []
        repos = {_key(repo_name(ref)), _key(repo_name(base))}
        owners = sorted({name for k, name in self.index.items() if k.rsplit("/", 1)[-1] in repos})
        if len(owners) == 1:
            return self.entries[owners[0]], []
        return None, owners

    def suggest(self, ref: str, n: int = 3) -> list[str]:
        # The repository name without its format suffix comes first: `nvidia/Qwen3-33B-NVFP4` is closest to
        # Qwen3-32B, not to another nvidia/*-NVFP4 id.
        keys = [k for q in dict.fromkeys((_key(repo_name(strip_format(ref))), _key(ref)))
                for k in difflib.get_close_matches(q, list(self.index), n=n * 3, cutoff=0.5)]
        out: list[str] = []
        for k in keys:
            name = self.index[k]
            if name not in out:
                out.append(name)
        return out[:n]


def _check_config_path(path: Path) -> None:
    """Refuse a config.json the operating system cannot look up (a NUL character, a name too long) or that is
    too big, before the Hugging Face reader opens it."""
    why = None
    try:
        size = path.stat().st_size
    except FileNotFoundError:
        return  # the reader says "not found" in its own words
    except ValueError:
        why = "its path holds a NUL character"
    except OSError as exc:
        why = (exc.strerror or str(exc)).lower()
    else:
        if size > MAX_DOCUMENT_BYTES:
            why = f"it is over the {MAX_DOCUMENT_BYTES >> 20} MiB limit"
    if why:
        raise CatalogError(Problem(f"model config {shown(str(path))} cannot be read: {why}",
                                   fix="give the path of the model's config.json"))


class Catalog:
    """Models, devices, frameworks and cluster conventions, packaged and overlaid."""

    def __init__(self, overlays: list[Path] | tuple[Path, ...] = ()) -> None:
        self.tables = {kind: Table(kind) for kind in KINDS}
        self.conventions: dict[str, dict[str, Any]] = {}
        raw: dict[str, dict[str, tuple[dict[str, Any], str]]] = {kind: {} for kind in KINDS}
        packaged = resources.files("infra.catalog") / "data"
        for kind in KINDS:
            for item in sorted(packaged.joinpath(kind).iterdir(), key=lambda p: p.name):
                if item.name.endswith((".yaml", ".yml")):
                    data, file = _read(item)
                    raw[kind][str(data.get("name"))] = (data, f"catalog/{kind}/{item.name}")
        self._load_conventions(packaged.joinpath("conventions"))
        for overlay in overlays:
            overlay = Path(overlay)
            if not overlay.is_dir():
                raise CatalogError(Problem("catalog overlay is not a directory", Location(str(overlay)),
                                           "give a directory holding models/, devices/ or frameworks/ YAML files"))
            known = [d for d in (*KINDS, "conventions") if (overlay / d).is_dir()]
            if not known:
                raise CatalogError(Problem("catalog overlay holds none of models/, devices/, frameworks/, "
                                           "conventions/", Location(str(overlay)),
                                           "put each entry in the subdirectory of its kind"))
            for kind in KINDS:
                for item in sorted((overlay / kind).glob("*.y*ml")) if (overlay / kind).is_dir() else []:
                    data, file = _read(item)
                    name = data.get("name")
                    if not isinstance(name, str):
                        raise CatalogError(Problem("entry has no name", Location(file, path="name"),
                                                   "start the entry with `name: ...`"))
                    existing = self.resolve_raw(raw[kind], name)
                    if existing is not None:
                        base, _ = raw[kind].pop(existing)
                        raw[kind][existing] = (_merge(base, {**data, "name": existing}), file)
                    else:
                        raw[kind][name] = (data, file)
            self._load_conventions(overlay / "conventions")
        for kind, cls in KINDS.items():
            for name in sorted(raw[kind]):
                data, file = raw[kind][name]
                self.tables[kind].add(_validate(cls, data, file), file)
        for fw in self.frameworks.values():
            if fw.calibration_from is not None and fw.calibration_from not in self.frameworks:
                raise CatalogError(Problem(
                    f"names no catalog framework: {fw.calibration_from!r}",
                    Location(self.tables["frameworks"].files[fw.name], path="calibration_from"),
                    f"name one of {', '.join(sorted(self.frameworks))}, or leave it out"))

    @staticmethod
    def resolve_raw(entries: dict[str, tuple[dict[str, Any], str]], name: str) -> str | None:
        k = _key(name)
        for existing, (data, _) in entries.items():
            aliases = data.get("aliases")
            # Still raw YAML here: a malformed `aliases` is left for validation to report, located.
            names = [existing, *(aliases if isinstance(aliases, list) else []), data.get("hf_id", "")]
            if any(_key(str(n)) == k for n in names if n):
                return existing
        return None

    def _load_conventions(self, folder: Any) -> None:
        try:
            items = sorted(folder.iterdir(), key=lambda p: p.name)
        except (FileNotFoundError, NotADirectoryError, OSError):
            return
        for item in items:
            if item.name.endswith((".yaml", ".yml")):
                data, file = _read(item)
                devices = data.get("devices") or {}
                if not isinstance(devices, dict):
                    raise CatalogError(Problem("`devices` of a conventions file is a mapping of vendor to its "
                                               "resource names", Location(file, path="devices"),
                                               "write `devices:` followed by `<vendor>: {...}` entries"))
                for vendor, spec in devices.items():
                    self.conventions[vendor] = spec

    # --- lookups -----------------------------------------------------------------------------------------------

    @property
    def models(self) -> dict[str, ModelSpec]:
        return self.tables["models"].entries

    @property
    def devices(self) -> dict[str, DeviceSpec]:
        return self.tables["devices"].entries

    @property
    def frameworks(self) -> dict[str, FrameworkSpec]:
        return self.tables["frameworks"].entries

    def _get(self, kind: str, ref: str, label: str, hint: str) -> Any:
        entry = self.tables[kind].find(ref)
        if entry is not None:
            return entry
        close = self.tables[kind].suggest(ref)
        msg = f"unknown {label} {shown(ref)}"
        if close:
            msg += f"; did you mean {' or '.join(repr(c) for c in close)}?"
        raise CatalogError(Problem(msg, fix=hint))

    def model(self, ref: str, base_dir: Path | None = None) -> ModelSpec:
        """A model by name, alias, Hugging Face id, or path to a config.json (relative to `base_dir`). An id
        with no exact match resolves to the checkpoint it republishes when that is unambiguous
        (`Table.find_checkpoint`): `nvidia/Qwen3-32B-NVFP4` is Qwen3-32B."""
        if ref.endswith(".json"):
            path = Path(ref) if base_dir is None or Path(ref).is_absolute() else base_dir / ref
            _check_config_path(path)
            return model_from_hf_config(path)
        hint = ("use a name from `infra catalog models`, a Hugging Face id of a catalog model, or the path of a "
                "config.json")
        table = self.tables["models"]
        if table.find(ref) is None:
            entry, owners = table.find_checkpoint(ref)
            if entry is not None:
                return entry
            if owners:
                raise CatalogError(Problem(
                    f"unknown model {shown(ref)}: its repository name fits several catalog models; did you mean "
                    f"{' or '.join(repr(o) for o in owners)}?",
                    fix="give the original publisher's Hugging Face id or the catalog name of the one you mean"))
        return self._get("models", ref, "model", hint)

    def device(self, ref: str) -> DeviceSpec:
        return self._get("devices", ref, "device", "use a name from `infra catalog devices`, or add the card with "
                         "--catalog DIR")

    def framework(self, ref: str) -> FrameworkSpec:
        return self._get("frameworks", ref, "framework", "use a name from `infra catalog frameworks`")

    def device_resources(self, vendor: str) -> dict[str, Any] | None:
        """Packaged (or overlaid) default resource names for a vendor's devices."""
        return self.conventions.get(vendor)

    def fingerprint(self) -> str:
        """Content hash of everything loaded, for plan provenance."""
        import hashlib

        blob = json.dumps({kind: {n: e.model_dump(mode="json") for n, e in sorted(t.entries.items())}
                           for kind, t in self.tables.items()} | {"conventions": self.conventions},
                          sort_keys=True)
        return hashlib.sha256(blob.encode()).hexdigest()[:16]


_DEFAULT: Catalog | None = None


def load_catalog(overlays: list[Path] | tuple[Path, ...] = ()) -> Catalog:
    """The packaged catalog (cached) or a fresh one with overlays."""
    global _DEFAULT
    if overlays:
        return Catalog(overlays)
    if _DEFAULT is None:
        _DEFAULT = Catalog()
    return _DEFAULT
