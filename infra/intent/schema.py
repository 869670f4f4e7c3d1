"""JSON Schema of the intent and cluster-profile files, for editors and validation.

Generated from the pydantic models (their docstrings become descriptions), then widened where the loader accepts
shorthand: a scalar for a length distribution, a rate or an arrival process, booleans for disaggregation and spot.
"""

from __future__ import annotations

import copy
from typing import Any

from infra.intent.models import ServingIntent
from infra.intent.profile import ClusterProfile

_SHORTHAND: dict[str, dict[str, Any]] = {
    "LengthDistribution": {"anyOf": [{"type": "integer", "minimum": 0}, {"type": "string"}],
                           "description": "A fixed length, e.g. 2k."},
    "RateSpec": {"anyOf": [{"type": "number", "minimum": 0}, {"type": "string"}],
                 "description": "A peak rate, e.g. 40/s."},
    "Arrival": {"enum": ["poisson", "gamma", "constant"], "description": "A process without parameters."},
}


def _widen(schema: dict[str, Any]) -> dict[str, Any]:
    defs = schema.get("$defs", {})
    for name, alt in _SHORTHAND.items():
        if name in defs:
            original = defs[name]
            defs[name] = {"anyOf": [{k: v for k, v in original.items() if k != "description"}, alt],
                          "title": original.get("title", name), "description": original.get("description", "")}
    prefs = defs.get("Preferences", {}).get("properties", {})
    for key in ("disaggregation", "spot"):
        if key in prefs:
            prefs[key] = {"anyOf": [copy.deepcopy(prefs[key]), {"type": "boolean"}],
                          "description": prefs[key].get("description", ""), "default": prefs[key].get("default")}
    return schema


def intent_schema() -> dict[str, Any]:
    """Schema of a file that is either a ServingIntent or a ClusterProfile."""
    intent = _widen(ServingIntent.model_json_schema(by_alias=True, mode="validation"))
    profile = _widen(ClusterProfile.model_json_schema(by_alias=True, mode="validation"))
    defs = {**profile.pop("$defs", {}), **intent.pop("$defs", {})}
    defs["ServingIntent"] = intent
    defs["ClusterProfile"] = profile
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": "https://infra.dev/schemas/v1alpha1/intent.json",
        "title": "infra intent or cluster profile",
        "description": "A ServingIntent (what to serve, how fast, at what cost) or a ClusterProfile (inventory "
                       "and conventions), apiVersion infra.dev/v1alpha1.",
        "oneOf": [{"$ref": "#/$defs/ServingIntent"}, {"$ref": "#/$defs/ClusterProfile"}],
        "$defs": defs,
    }
