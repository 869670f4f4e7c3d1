"""Deterministic YAML text: block style, keys in the order they were built, LF endings, trailing newline.

Rendering parses every template's output and dumps it again, dozens of objects per plan, so this uses PyYAML's
libyaml bindings (about fifteen times faster here than a pure-Python parser) when they are installed.
"""

from __future__ import annotations

from typing import Any

import yaml

_Loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
_BaseDumper = getattr(yaml, "CSafeDumper", yaml.SafeDumper)


class _Dumper(_BaseDumper):  # type: ignore[misc, valid-type]
    pass


def _str(dumper: Any, value: str) -> Any:
    # Multi-line strings (files inside ConfigMaps) as literal blocks, so they read as the files they are.
    style = "|" if "\n" in value and not value.startswith(" ") else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_Dumper.add_representer(str, _str)


def dump_yaml(data: Any) -> str:
    """One YAML document as text."""
    return yaml.dump(data, Dumper=_Dumper, sort_keys=False, default_flow_style=False, width=4096,
                     allow_unicode=True)


def load_yaml_text(text: str) -> Any:
    """Parse one YAML document (plain data); raises yaml.YAMLError with a problem_mark on bad input."""
    return yaml.load(text, Loader=_Loader)
