"""Deterministic YAML text: block style, keys in the order they were built, LF endings, trailing newline."""

from __future__ import annotations

import io
from typing import Any

from ruamel.yaml import YAML


def _yaml() -> YAML:
    y = YAML(typ="safe")
    y.default_flow_style = False
    y.sort_base_mapping_type_on_output = False  # keep the template's key order
    y.width = 4096  # never fold a long argument over two lines
    y.allow_unicode = True
    y.representer.add_representer(str, _str)
    return y


def _str(representer, value: str):
    # Multi-line strings (files inside ConfigMaps) as literal blocks, so they read as the files they are.
    style = "|" if "\n" in value and not value.startswith(" ") else None
    return representer.represent_scalar("tag:yaml.org,2002:str", value, style=style)


def dump_yaml(data: Any) -> str:
    """One YAML document as text."""
    buf = io.StringIO()
    _yaml().dump(data, buf)
    return buf.getvalue()


def load_yaml_text(text: str) -> Any:
    """Parse one YAML document (plain data)."""
    return YAML(typ="safe").load(text)
