"""Shared building blocks of the file formats: the strict base model, names, percentiles, metadata."""

from __future__ import annotations

import re
from typing import Annotated, Any

from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict, WithJsonSchema

from infra.limits import shown

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

# Kubernetes' own syntax for what the manifests carry verbatim: a value outside it makes a manifest the API server
# rejects (or, past 1024 characters as a mapping key, one that is not even YAML).
_LABEL_NAME = r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?"
_SUBDOMAIN = r"[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?"
_QUALIFIED = re.compile(rf"^({_SUBDOMAIN}/)?{_LABEL_NAME}$")
_LABEL_VALUE = re.compile(rf"^({_LABEL_NAME})?$")
_SUBDOMAIN_RE = re.compile(rf"^{_SUBDOMAIN}$")
_API_VERSION = re.compile(rf"^({_SUBDOMAIN}/)?v\d+((alpha|beta)\d+)?$")


def _kubernetes(pattern: re.Pattern[str], what: str, rule: str, example: str, placeholder: str = "") -> Any:
    """A string type checked against one of Kubernetes' name syntaxes, with its pattern in the schema.
    `placeholder` (HAMi's `{chip}`) stands for a name part filled in per device, so it is checked as one."""

    def check(value: str) -> str:
        if not pattern.match(value.replace(placeholder, "x") if placeholder else value):
            raise ValueError(f"{shown(value)} is not a valid {what}: {rule}; write e.g. {example}")
        return value

    schema = {"type": "string", "description": f"A {what}."}
    return Annotated[str, AfterValidator(check),
                     WithJsonSchema(schema if placeholder else {**schema, "pattern": pattern.pattern})]


LabelKey = _kubernetes(_QUALIFIED, "Kubernetes label key", "an optional DNS prefix and '/', then at most 63 "
                       "letters, digits, '-', '_' or '.', starting and ending with a letter or digit",
                       "node.kubernetes.io/instance-type")
LabelValue = _kubernetes(_LABEL_VALUE, "Kubernetes label value", "empty, or at most 63 letters, digits, '-', '_' "
                         "or '.', starting and ending with a letter or digit", "hgx-h100")
ResourceName = _kubernetes(_QUALIFIED, "Kubernetes resource name", "a DNS prefix, '/' and a name of at most 63 "
                           "letters, digits, '-', '_' or '.'", "nvidia.com/gpu", "{chip}")
Subdomain = _kubernetes(_SUBDOMAIN_RE, "Kubernetes object name", "at most 253 lowercase letters, digits, '-' or '.', "
                        "starting and ending with a letter or digit", "hami-scheduler")
ApiVersion = _kubernetes(_API_VERSION, "Kubernetes API version", "GROUP/VERSION", "leaderworkerset.x-k8s.io/v1")

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


def statistic(value: Any) -> str:
    """`mean`, or a percentile key (`p99`); ValueError otherwise."""
    if str(value).strip().lower() == "mean":
        return "mean"
    try:
        return _percentile(value)
    except ValueError:
        raise ValueError(f"{value!r} is neither mean nor a percentile; write mean, p50, p90, p95, p99 or p99.9") \
            from None


def statistic_order(key: str) -> float:
    """Where a statistic sorts among an objective's: the mean first, then the percentiles in order."""
    return -1.0 if key == "mean" else percentile_value(key)


Statistic = Annotated[
    str,
    BeforeValidator(statistic),
    WithJsonSchema({"type": "string", "pattern": r"^([mM][eE][aA][nN]|[pP]\d{1,2}(\.\d+)?)$",
                    "description": "The mean over requests, or a percentile: mean, p50, p90, p95, p99, p99.9."}),
]
"""What a latency objective bounds: the mean (as AIConfigurator and Dynamo state TTFT and TPOT) or a
percentile."""


class Metadata(Strict):
    """Identity of the document."""

    name: Name
    """Name of the intent (or profile); used in plan and manifest names."""
    description: str | None = None
    """What this is for, in a sentence."""
    labels: dict[LabelKey, LabelValue] = {}
    """Free-form labels copied onto every rendered object."""



def require_unique(names: list[str], what: str) -> None:
    """Raise a ValueError naming the repeated names, if any."""
    dup = sorted({n for n in names if names.count(n) > 1})
    if dup:
        raise ValueError(f"{what} names repeat: {', '.join(dup)}; give every {what} its own name")
