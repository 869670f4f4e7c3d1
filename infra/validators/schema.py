"""Schema validation, routed by the exact apiVersion.

Built-in kinds are checked against the JSON Schemas kubernetes-validate bundles, in their strict variant (unknown
fields are errors, as with the API server's `fieldValidation=Strict`). kubernetes-validate finds a schema by the
*first label* of the API group, so `scheduling.volcano.sh/v1beta1 PodGroup` would be checked against Kubernetes'
own `scheduling.k8s.io/v1beta1 PodGroup`; the schema found that way is used only when its apiVersion enum holds the
object's exact apiVersion. Everything else goes to the custom-resource registry (`crds/*.yaml`: the
`openAPIV3Schema` of upstream CRDs at pinned versions); a kind neither knows is an error, never a silent pass.
"""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources
from typing import Any

import jsonschema
from referencing import Registry, Resource
from referencing.jsonschema import DRAFT202012

from infra.validators.findings import Finding
from infra.validators.manifests import Manifest

DEFS_URI = "https://kubernetes.io/api/_definitions.json"
MAX_ERRORS_PER_OBJECT = 20


def kubernetes_version() -> str:
    """The newest Kubernetes version whose schemas kubernetes-validate bundles, e.g. `1.37.0`."""
    from kubernetes_validate.utils import latest_version

    return latest_version()


def _k8s_file(name: str) -> Any:
    from kubernetes_validate.utils import schema_contents

    version = kubernetes_version()
    return schema_contents(f"kubernetes-json-schema/v{version}-local-strict/{name}", version)


@lru_cache(maxsize=1)
def _registry() -> Registry:
    return Resource.from_contents(_k8s_file("_definitions.json")) @ Registry()


@lru_cache(maxsize=None)
def builtin_validator(api_version: str, kind: str) -> jsonschema.protocols.Validator | None:
    """Strict validator of a built-in kind at exactly this apiVersion, or None when it is not built in."""
    # kubernetes-validate's naming: group's first label and version, e.g. rbac.authorization.k8s.io/v1 -> rbac-v1.
    flat = re.sub(r"^([^./]*)(?:\.[^/]*)?/", r"\1-", api_version)
    try:
        schema = _k8s_file(f"{kind.lower()}-{flat}.json")
    except FileNotFoundError:
        return None
    props = schema.get("properties", {})
    if api_version not in (props.get("apiVersion", {}).get("enum") or []) or \
            kind not in (props.get("kind", {}).get("enum") or []):
        return None
    return jsonschema.Draft202012Validator(schema, registry=_registry())


@dataclass(frozen=True)
class Crd:
    """A custom resource's schema as shipped: where it comes from and which version."""

    group: str
    kind: str
    version: str
    """Served version, e.g. `v1` (the apiVersion is `group/version`)."""
    release: str
    """Upstream release the schema was taken from, e.g. `lws v0.7.0`."""
    source: str
    """URL of the CRD file at that release."""
    file: str

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}"


def _crd_files() -> list[Any]:
    folder = resources.files("infra.validators") / "crds"
    return sorted((f for f in folder.iterdir() if f.name.endswith(".yaml")), key=lambda f: f.name)


@lru_cache(maxsize=1)
def _crd_documents() -> dict[str, dict[str, Any]]:
    from ruamel.yaml import YAML

    yaml = YAML(typ="safe", pure=True)
    return {f.name: yaml.load(f.read_text(encoding="utf-8")) for f in _crd_files()}


@lru_cache(maxsize=1)
def crds() -> dict[tuple[str, str], Crd]:
    """(apiVersion, kind) -> Crd for every shipped custom-resource schema."""
    out = {}
    for name, doc in _crd_documents().items():
        for version in doc["versions"]:
            crd = Crd(doc["group"], doc["kind"], version, doc["release"], doc["source"], name)
            out[(crd.api_version, crd.kind)] = crd
    return out


def structural(node: Any, strict: bool = True) -> Any:
    """A Kubernetes structural schema as JSON Schema: int-or-string and nullable spelled out, and (strict) unknown
    fields refused unless the schema preserves them, as the API server does with `fieldValidation=Strict`."""
    if isinstance(node, list):
        return [structural(x, strict) for x in node]
    if not isinstance(node, dict):
        return node
    out: dict[str, Any] = {}
    for key, value in node.items():
        if key in ("description", "default", "example") or (key.startswith("x-kubernetes-")):
            continue
        if key == "properties" and isinstance(value, dict):
            out[key] = {k: structural(v, strict) for k, v in value.items()}
        elif key in ("items", "additionalProperties", "not") and isinstance(value, dict):
            out[key] = structural(value, strict)
        elif key in ("allOf", "anyOf", "oneOf"):
            out[key] = structural(value, strict)
        else:
            out[key] = value
    if node.get("x-kubernetes-int-or-string"):
        out.pop("type", None)
        out["anyOf"] = [{"type": "integer"}, {"type": "string"}]
    if node.get("nullable") and isinstance(out.get("type"), str):
        out["type"] = [out["type"], "null"]
    out.pop("nullable", None)
    preserve = node.get("x-kubernetes-preserve-unknown-fields")
    if strict and not preserve and "properties" in out and "additionalProperties" not in out:
        out["additionalProperties"] = False
    return out


def crd_uri(api_version: str, kind: str) -> str:
    """Where a shipped CRD schema can be referenced from another (a DisaggregatedSet role holds a LeaderWorkerSet
    spec): `https://infra.dev/crds/<group>/<version>/<Kind>.json`."""
    return f"https://infra.dev/crds/{api_version}/{kind}.json"


def _crd_schema(crd: Crd) -> dict[str, Any]:
    schema = structural(_crd_documents()[crd.file]["versions"][crd.version])
    props = schema.setdefault("properties", {})
    props["apiVersion"] = {"const": crd.api_version}
    props["kind"] = {"const": crd.kind}
    # The API server checks metadata of custom resources like any object's.
    props["metadata"] = {"$ref": f"{DEFS_URI}#/$defs/io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"}
    schema["required"] = sorted(set(schema.get("required", [])) | {"apiVersion", "kind"})
    schema["$id"] = crd_uri(crd.api_version, crd.kind)
    return schema


@lru_cache(maxsize=1)
def _crd_registry() -> Registry:
    registry = _registry()
    for crd in crds().values():
        registry = Resource.from_contents(_crd_schema(crd), default_specification=DRAFT202012) @ registry
    return registry


@lru_cache(maxsize=None)
def crd_validator(api_version: str, kind: str) -> jsonschema.protocols.Validator | None:
    crd = crds().get((api_version, kind))
    if crd is None:
        return None
    return jsonschema.Draft202012Validator(_crd_schema(crd), registry=_crd_registry())


def _best(error: jsonschema.ValidationError) -> jsonschema.ValidationError:
    """The most specific sub-error of an anyOf/oneOf failure (an int-or-string, a quantity)."""
    if error.context:
        deepest = max(error.context, key=lambda e: (len(e.absolute_path), -len(e.message)))
        if len(deepest.absolute_path) > len(error.absolute_path):
            return _best(deepest)
    return error


def _unknown_fields(error: jsonschema.ValidationError) -> list[str]:
    if error.validator != "additionalProperties" or not isinstance(error.instance, dict):
        return []
    allowed = set(error.schema.get("properties", {}))
    return sorted(k for k in error.instance if k not in allowed)


def _describe(error: jsonschema.ValidationError) -> str:
    message = error.message
    if len(message) > 300:
        message = message[:297] + "..."
    return message


def check_object(m: Manifest) -> list[Finding]:
    """Schema findings of one object: built-in schema, else its CRD, else unknown kind."""
    validator = builtin_validator(m.api_version, m.kind)
    rule_id = "SCH001"
    if validator is None:
        validator = crd_validator(m.api_version, m.kind)
        rule_id = "SCH002"
    if validator is None:
        known = sorted({f"{c.api_version} {c.kind}" for c in crds().values()})
        same_kind = [k for k in known if k.endswith(f" {m.kind}")]
        hint = (f"this kind is known as {', '.join(same_kind)}" if same_kind else
                f"use a built-in kind (Kubernetes {kubernetes_version()}) or a custom resource infra knows: "
                + ", ".join(known))
        return [m.finding("SCH003", ("apiVersion",), f"no schema for kind {m.kind} in apiVersion {m.api_version}; "
                                               "it cannot be validated", fix=hint)]
    return _schema_findings(m, validator, rule_id, "field")


def _schema_findings(m: Manifest, validator: Any, rule_id: str, word: str) -> list[Finding]:
    """A document's schema errors as findings of `rule_id` (an unknown `word` named with its nearest known one),
    at most MAX_ERRORS_PER_OBJECT."""
    out = []
    for error in sorted(validator.iter_errors(m.data), key=lambda e: [str(p) for p in e.absolute_path]):
        error = _best(error)
        path = tuple(error.absolute_path)
        unknown = _unknown_fields(error)
        if unknown:
            allowed = sorted(error.schema.get("properties", {}))
            for key in unknown:
                near = difflib.get_close_matches(key, allowed, n=1)
                fix = f"did you mean {near[0]!r}?" if near else f"known {word}s here: {', '.join(allowed)}"
                out.append(m.finding(rule_id, path + (key,), f"unknown {word} {key!r}", fix=fix, key=True))
        else:
            out.append(m.finding(rule_id, path, _describe(error)))
        if len(out) >= MAX_ERRORS_PER_OBJECT:
            break
    return out


# --- Helm chart values --------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Chart:
    """A Helm chart's values schema as shipped (`charts/<chart>.values.schema.yaml`)."""

    name: str
    release: str
    source: str
    schema: dict[str, Any]


@lru_cache(maxsize=1)
def charts() -> dict[str, Chart]:
    """Chart name -> its pinned values schema."""
    from ruamel.yaml import YAML

    yaml = YAML(typ="safe", pure=True)
    folder = resources.files("infra.validators") / "charts"
    out = {}
    for f in sorted((f for f in folder.iterdir() if f.name.endswith(".values.schema.yaml")), key=lambda f: f.name):
        doc = yaml.load(f.read_text(encoding="utf-8"))
        out[doc["chart"]] = Chart(doc["chart"], doc["release"], doc["source"], doc["schema"])
    return out


@lru_cache(maxsize=None)
def values_validator(chart: str) -> jsonschema.protocols.Validator | None:
    c = charts().get(chart)
    return jsonschema.Draft7Validator(c.schema) if c is not None else None


def check_values(v: Manifest, chart: str) -> list[Finding]:
    """SCH004 findings of one Helm values file against its chart's pinned values schema (none for a chart infra
    ships no schema of)."""
    validator = values_validator(chart)
    if validator is None:
        return []
    return _schema_findings(v, validator, "SCH004", "key")
