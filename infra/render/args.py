"""Engine arguments from the catalog's `EngineCli`: the one place that turns plan settings into flags.

Validation reads container args back with the same catalog entry, so the spelling rules live here only: each
setting the engine lists appears once, as `--flag value` (two items), a switch as `--flag` alone (or its negation
when off), and the model either behind `model_flag` or right after the command.
"""

from __future__ import annotations

from typing import Any

from infra.catalog.schema import EngineCli


def engine_settings(value_of: dict[str, Any], cli: EngineCli) -> list[str]:
    """Flags for the settings in `value_of` (setting -> plan value; None means not passed), in the order the
    catalog lists the engine's flags, so identical plans give identical args."""
    out: list[str] = []
    order = list(cli.flags) + [s for s in cli.negations if s not in cli.flags]
    for setting in order:
        if setting not in value_of or value_of[setting] is None or setting == "model":
            continue
        if cli.config_file is not None and setting in cli.config_file.keys:
            continue
        value = value_of[setting]
        if setting in cli.switches:
            flag = cli.flags.get(setting) if value else cli.negations.get(setting)
            if flag:
                out.append(flag)
            continue
        flag = cli.flags.get(setting)
        if flag is None:
            continue
        out += [flag, spell(setting, value, cli)]
    return out


def spell(setting: str, value: Any, cli: EngineCli) -> str:
    """A plan value as the engine writes it (`fp8` -> `fp8_e4m3` where the catalog says so)."""
    text = format_value(value)
    return cli.values.get(setting, {}).get(text, text)  # type: ignore[call-overload]


def kv_transfer(template: str, prefill: Any, decode: Any) -> str:
    """A role's KV connector JSON (catalog `cli.values.kv_transfer_config`) with the plan's layouts written in:
    `${prefill_tp}`, `${prefill_dp}`, `${decode_tp}`, `${decode_dp}` (tensor-parallel size, attention data-parallel
    groups of each role's workers), for connectors that must know both sides (vllm-ascend's Mooncake)."""
    for role, layout in (("prefill", prefill), ("decode", decode)):
        template = template.replace(f"${{{role}_tp}}", str(layout.tp)).replace(f"${{{role}_dp}}",
                                                                               str(layout.attention_dp))
    return template


def format_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return f"{value:g}"
    return str(value)


def model_args(model: str, cli: EngineCli) -> list[str]:
    """The model argument: `--model-path X` where the engine names it, else X alone (first after the command)."""
    if cli.config_file is not None and "model" in cli.config_file.keys:
        return []
    return [cli.model_flag, model] if cli.model_flag else [model]


def config_file_content(value_of: dict[str, Any], cli: EngineCli) -> dict[str, Any]:
    """The settings an engine reads from its file, nested by their dotted paths (a number indexes a list)."""
    assert cli.config_file is not None
    root: dict[str, Any] = {}
    for path, value in cli.config_file.fixed.items():
        _put(root, path.split("."), value)
    for setting, path in cli.config_file.keys.items():
        if value_of.get(setting) is None:
            continue
        value = value_of[setting]
        if isinstance(value, str) and setting in cli.values:
            value = spell(setting, value, cli)
        _put(root, path.split("."), value)
    return root


def _put(node: Any, steps: list[str], value: Any) -> None:
    head, rest = steps[0], steps[1:]
    key: Any = int(head) if head.isdigit() else head
    if isinstance(key, int):
        while len(node) <= key:
            node.append({} if rest and not rest[0].isdigit() else [])
    if not rest:
        node[key] = value
        return
    if isinstance(key, str) and key not in node:
        node[key] = [] if rest[0].isdigit() else {}
    _put(node[key], rest, value)
