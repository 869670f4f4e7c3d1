"""Reading engine arguments back from a container, with the framework's `cli` entry of the catalog (the same
entry rendering writes them with): which engine it is, the model, and each setting's value."""

from __future__ import annotations

import shlex
from dataclasses import dataclass, field
from typing import Any

from infra.catalog.loader import Catalog
from infra.catalog.schema import EngineCli, FrameworkSpec
from infra.errors import InfraError
from infra.limits import loads_json, scan_yaml

SHELLS = {"sh", "bash", "/bin/sh", "/bin/bash", "/usr/bin/env"}


@dataclass
class EngineArgs:
    """The settings one container passes to its engine."""

    framework: str
    model: str | None
    settings: dict[str, str | bool] = field(default_factory=dict)
    """Setting (catalog EngineSetting) -> value as written (True for a switch that is present, False for its
    negation, e.g. `--no-enable-prefix-caching`)."""
    duplicates: list[str] = field(default_factory=list)
    """Flags given more than once."""
    missing_value: list[str] = field(default_factory=list)
    """Flags that take a value but are followed by another flag or nothing."""

    def int_setting(self, name: str, default: int = 1) -> int | None:
        """An integer setting (parallel sizes), `default` when absent, None when it is not a whole number."""
        value = self.settings.get(name)
        if value is None:
            return default
        try:
            return int(str(value))
        except ValueError:
            return None


def tokens(container: dict[str, Any]) -> list[str]:
    """command + args, with a `sh -c "..."` script split as the shell would split it."""
    words = [str(x) for x in (container.get("command") or []) + (container.get("args") or [])
             if isinstance(x, (str, int, float))]
    for i, w in enumerate(words[:-1]):
        if w == "-c" and i > 0 and words[i - 1] in SHELLS:
            try:
                return words[:i + 1] + shlex.split(words[i + 1]) + words[i + 2:]
            except ValueError:
                return words
    return words


def _find(words: list[str], command: list[str]) -> int | None:
    n = len(command)
    for i in range(len(words) - n + 1):
        if words[i:i + n] == command:
            return i + n
    return None


def parse(words: list[str], fw: FrameworkSpec) -> EngineArgs | None:
    """Settings after the framework's launch command, or None when the command is not in `words`."""
    cli: EngineCli | None = fw.cli
    if cli is None:
        return None
    start = _find(words, list(cli.command))
    if start is None:
        return None
    by_flag = {flag: setting for setting, flag in cli.flags.items()}
    negated = {flag: setting for setting, flag in getattr(cli, "negations", {}).items()}
    switches = set(cli.switches)
    out = EngineArgs(fw.name, None)
    rest = words[start:]
    # Shell operators end the engine's own argument list.
    for stop in ("&&", ";", "||", "|"):
        if stop in rest:
            rest = rest[:rest.index(stop)]
    i = 0
    if cli.model_flag is None and rest and not rest[0].startswith("-"):
        out.model = rest[0]
        i = 1
    seen: set[str] = set()
    while i < len(rest):
        word = rest[i]
        i += 1
        if not word.startswith("--"):
            continue
        flag, eq, inline = word.partition("=")
        if flag in negated:
            if flag in seen:
                out.duplicates.append(flag)
            seen.add(flag)
            out.settings[negated[flag]] = False
            continue
        takes_value = by_flag.get(flag) not in switches
        value: str | None = inline if eq else None
        if takes_value and value is None:
            if i < len(rest) and not rest[i].startswith("--"):
                value = rest[i]
                i += 1
        if flag in seen:
            out.duplicates.append(flag)
        seen.add(flag)
        if flag == cli.model_flag:
            out.model = value
            continue
        setting = by_flag.get(flag)
        if setting is None:
            continue
        if setting in switches:
            out.settings[setting] = True
        elif value is None:
            out.missing_value.append(flag)
        else:
            out.settings[setting] = value
    return out


def engine_args(container: dict[str, Any], catalog: Catalog,
                framework: str | None = None) -> EngineArgs | None:
    """The engine arguments of a container: of `framework` when given, else of the first framework (by name)
    whose launch command the container runs."""
    words = tokens(container)
    if framework is not None:
        return parse(words, catalog.framework(framework))
    # Engines may share a launcher (vLLM and vLLM-Omni both run `vllm serve`): the one that knows the most of the
    # flags given is the one running (`--omni` is vLLM-Omni's), the first by name on a tie.
    best: tuple[int, EngineArgs] | None = None
    for _name, fw in sorted(catalog.frameworks.items()):
        found = parse(words, fw)
        if found is not None:
            known = len(found.settings)
            if best is None or known > best[0]:
                best = (known, found)
    return best[1] if best is not None else None


def _dotted(doc: Any, path: str) -> Any:
    node = doc
    for step in path.split("."):
        if isinstance(node, list) and step.isdigit() and int(step) < len(node):
            node = node[int(step)]
        elif isinstance(node, dict) and step in node:
            node = node[step]
        else:
            return None
    return node


def file_settings(pod_spec: dict[str, Any], cli: EngineCli, config_maps: dict[str, dict[str, Any]]
                  ) -> tuple[dict[str, Any] | None, str]:
    """Settings an engine reads from its config file, as a ConfigMap of the tree mounted into the pod ships it:
    (setting -> value, "") or (None, why they cannot be read)."""
    from ruamel.yaml import YAML
    from ruamel.yaml.error import YAMLError

    cf = cli.config_file
    assert cf is not None
    name = cf.path.rsplit("/", 1)[-1]
    for vol in pod_spec.get("volumes") or []:
        ref = vol.get("configMap") if isinstance(vol, dict) else None
        if not isinstance(ref, dict):
            continue
        data = (config_maps.get(str(ref.get("name"))) or {}).get("data")
        if not isinstance(data, dict) or name not in data:
            continue
        try:
            if cf.format == "json":
                doc = loads_json(str(data[name]), name)
            else:
                scan_yaml(str(data[name]), name)  # nesting and alias bombs refused before the pure-Python parser
                doc = YAML(typ="safe", pure=True).load(data[name])
        except (ValueError, YAMLError) as exc:
            return None, f"{name} in ConfigMap {ref.get('name')} does not parse as {cf.format}: {exc}"
        except InfraError as exc:
            return None, f"{name} in ConfigMap {ref.get('name')} is refused: {exc.problems[0]}"
        return {s: _dotted(doc, p) for s, p in cf.keys.items() if _dotted(doc, p) is not None}, ""
    return None, f"no ConfigMap of the tree mounted into the pod holds {name}"
