"""Shared building blocks of the file formats: the strict base model, names, percentiles, metadata."""

from __future__ import annotations

import re
from typing import Annotated, Any

from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict, WithJsonSchema

API_VERSION = "infra.dev/v1alpha1"

_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")


class Strict(BaseModel):
    """Frozen, unknown keys rejected, docstrings become field descriptions (and so the JSON Schema)."""

    model_config = ConfigDict(extra="forbid", frozen=True, use_attribute_docstrings=True, populate_by_name=False)


def _dns_label(value: str) -> str:
    if not _DNS_LABEL.match(value):
        fixed = re.sub(r"[^a-z0-9-]+", "-", value.lower()).strip("-")[:63] or "my-service"
        raise ValueError(
            f"{value!r} is not a valid name: use lowercase letters, digits and '-', at most 63 characters, "
            f"starting and ending with a letter or digit (e.g. {fixed!r})"
        )
    return value


Name = Annotated[
    str,
    AfterValidator(_dns_label),
    WithJsonSchema({"type": "string", "pattern": _DNS_LABEL.pattern, "maxLength": 63,
                    "description": "A DNS label: lowercase letters, digits and '-'."}),
]
"""Names become Kubernetes object names, so they follow RFC 1123 labels."""

_PCT = re.compile(r"^p(\d{1,2}(\.\d+)?)$")


def percentile_value(key: str) -> float:
    """99.9 from `p99.9`."""
    return float(key[1:])


def _percentile(value: Any) -> str:
    text = str(value).strip().lower()
    m = _PCT.match(text)
    if not m or not 0 < float(m.group(1)) < 100:
        raise ValueError(f"{value!r} is not a percentile; write p50, p90, p95, p99 or p99.9")
    return text


Percentile = Annotated[
    str,
    BeforeValidator(_percentile),
    WithJsonSchema({"type": "string", "pattern": r"^[pP]\d{1,2}(\.\d+)?$",
                    "description": "A percentile over requests: p50, p90, p95, p99, p99.9."}),
]


class Metadata(Strict):
    """Identity of the document."""

    name: Name
    """Name of the intent (or profile); used in plan and manifest names."""
    description: str | None = None
    """What this is for, in a sentence."""
    labels: dict[str, str] = {}
    """Free-form labels copied onto every rendered object."""



def require_unique(names: list[str], what: str) -> None:
    """Raise a ValueError naming the repeated names, if any."""
    dup = sorted({n for n in names if names.count(n) > 1})
    if dup:
        raise ValueError(f"{what} names repeat: {', '.join(dup)}; give every {what} its own name")
