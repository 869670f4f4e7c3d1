"""`infra draft`: a description in words -> an intent file, through a typed draft the model fills.

The model fills `IntentDraft` (flat, every figure in one unit, unknowns left empty). Its answer becomes a
ServingIntent YAML in which every field the model filled is marked `drafted` and every value assumed for a
required field the description did not give is listed at the top. The file is written only if it passes the
same checks as `infra check`; a draft that fails them goes back to the model with the problems (bounded), and a
model that cannot fix them gets nothing written.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from io import StringIO
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from infra.agent.planning import Planning
from infra.catalog.loader import load_catalog
from infra.errors import IntentError, Location, Problem
from infra.files import write_file

ASSUMED_INPUT_TOKENS = 1024
"""Mean prompt length assumed when the description gives none: a chat turn with a short history."""
ASSUMED_OUTPUT_TOKENS = 256
"""Mean reply length assumed when the description gives none."""
ASSUMED_RATE = 1.0
"""Requests per second assumed when the description gives neither a rate nor a number of clients."""


class _Draft(BaseModel):
    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True)


class DraftPool(_Draft):
    """A pool of identical nodes the description names."""

    name: str
    """Short lowercase name, e.g. h100."""
    device: str
    """Device type, one of the catalog's device names."""
    nodes: int = Field(ge=1)
    devices_per_node: int = Field(ge=1)
    price_per_device_hour: float | None = Field(ge=0)
    """Dollars per device-hour, if stated."""


class DraftService(_Draft):
    """One served model. Leave a field null when the description does not state it."""

    name: str
    """Lowercase letters, digits and dashes, e.g. chat."""
    model: str
    """One of the catalog's model names, or a Hugging Face id."""
    rate_per_s: float | None = Field(gt=0)
    """Peak requests per second (open loop)."""
    concurrency: int | None = Field(ge=1)
    """Concurrent clients, each waiting for its reply (closed loop), when stated instead of a rate."""
    input_tokens_mean: int | None = Field(ge=1)
    output_tokens_mean: int | None = Field(ge=1)
    ttft_p99_ms: float | None = Field(gt=0)
    tpot_p99_ms: float | None = Field(gt=0)
    e2e_p99_ms: float | None = Field(gt=0)
    budget_per_hour: float | None = Field(gt=0)
    """Dollars per hour for this service."""
    devices: list[str]
    """Device types the description restricts the service to (catalog names); empty when not restricted."""
    precisions: list[str]
    """Weight precisions the description allows (bf16, fp8, fp4, int8, int4); empty when not stated."""
    min_replicas: int | None = Field(ge=1)


class IntentDraft(_Draft):
    """A serving intent drafted from a description."""

    name: str
    """Name of the intent: lowercase letters, digits and dashes."""
    services: list[DraftService] = Field(min_length=1)
    pools: list[DraftPool]
    """Inventory stated in the description; empty when it states none."""
    unknowns: list[str]
    """What the description leaves open that matters for planning, one short phrase each."""


@dataclass(frozen=True)
class DraftResult:
    path: Path
    unknowns: list[str]
    drafted: int
    """Fields the model filled."""


def _duration(ms: float) -> str:
    return f"{ms / 1000:g}s" if ms >= 1000 else f"{ms:g}ms"


def intent_yaml(draft: IntentDraft, profile: str | None, source: str) -> tuple[str, list[str]]:
    """The intent file for a draft, with `drafted` marks and the unknowns at the top; also the unknowns."""
    from ruamel.yaml import YAML
    from ruamel.yaml.comments import CommentedMap, CommentedSeq

    drafted = "drafted: confirm"
    unknowns = [f"{u} (the model's note)" for u in draft.unknowns]

    def cmap(items: list[tuple[str, Any, str | None]]) -> CommentedMap:
        m = CommentedMap()
        for key, value, comment in items:
            m[key] = value
            if comment:
                m.yaml_add_eol_comment(comment, key)
        return m

    def flow(values: list[Any]) -> CommentedSeq:
        seq = CommentedSeq(values)
        seq.fa.set_flow_style()
        return seq

    services = CommentedSeq()
    for i, s in enumerate(draft.services):
        at = f"services[{i}] ({s.name})"
        wl = CommentedMap()
        if s.concurrency is not None:
            wl["concurrency"] = s.concurrency
            wl.yaml_add_eol_comment(drafted, "concurrency")
        elif s.rate_per_s is not None:
            wl["rate"] = f"{s.rate_per_s:g}/s"
            wl.yaml_add_eol_comment(drafted, "rate")
        else:
            wl["rate"] = f"{ASSUMED_RATE:g}/s"
            wl.yaml_add_eol_comment("assumed: not stated", "rate")
            unknowns.append(f"{at}: request rate not stated, assumed {ASSUMED_RATE:g}/s")
        for key, value, assumed in (("input_tokens", s.input_tokens_mean, ASSUMED_INPUT_TOKENS),
                                    ("output_tokens", s.output_tokens_mean, ASSUMED_OUTPUT_TOKENS)):
            mean = CommentedMap(mean=value if value is not None else assumed)
            mean.fa.set_flow_style()
            wl[key] = mean
            if value is None:
                wl.yaml_add_eol_comment("assumed: not stated", key)
                unknowns.append(f"{at}: {key} not stated, assumed a mean of {assumed}")
            else:
                wl.yaml_add_eol_comment(drafted, key)
        items: list[tuple[str, Any, str | None]] = [("name", s.name, drafted), ("model", s.model, drafted)]
        if s.precisions:
            items.append(("precisions", flow(s.precisions), drafted))
        items.append(("workload", wl, None))
        slo = CommentedMap()
        for metric, ms in (("ttft", s.ttft_p99_ms), ("tpot", s.tpot_p99_ms), ("e2e", s.e2e_p99_ms)):
            if ms is not None:
                slo[metric] = CommentedMap(p99=_duration(ms))
                slo[metric].fa.set_flow_style()
                slo.yaml_add_eol_comment(drafted, metric)
        if slo:
            items.append(("slo", slo, None))
        else:
            unknowns.append(f"{at}: no latency objective stated (the plan then only carries the load)")
        if s.budget_per_hour is not None:
            items.append(("budget", cmap([("per_hour", f"${s.budget_per_hour:g}/h", drafted)]), None))
        if s.min_replicas is not None:
            items.append(("availability", cmap([("min_replicas", s.min_replicas, drafted)]), None))
        if s.devices:
            items.append(("preferences", cmap([("devices", flow(s.devices), drafted)]), None))
        services.append(cmap(items))

    if profile is not None:
        cluster = cmap([("profile", profile, None)])
    else:
        pools = CommentedSeq()
        for p in draft.pools:
            items = [("name", p.name, drafted), ("device", p.device, drafted), ("nodes", p.nodes, drafted),
                     ("devices_per_node", p.devices_per_node, drafted)]
            if p.price_per_device_hour is not None:
                items.append(("price", f"${p.price_per_device_hour:g}/h", drafted))
            pools.append(cmap(items))
        cluster = cmap([("pools", pools, None)])
    doc = CommentedMap()
    doc["apiVersion"] = "infra.dev/v1alpha1"
    doc["kind"] = "ServingIntent"
    doc["metadata"] = cmap([("name", draft.name, drafted)])
    doc["spec"] = cmap([("cluster", cluster, None), ("services", services, None)])

    head = ["Drafted by `infra draft` from this description (the model's reading; values marked `drafted` are its",
            "reading and `assumed` ones were not stated: confirm each before planning):"]
    head += [f"  {line}" for line in _wrap(source)]
    head.append("Unknowns:" if unknowns else "Unknowns: none")
    head += [f"  - {u}" for u in unknowns]
    yaml = YAML()
    yaml.indent(mapping=2, sequence=4, offset=2)
    yaml.width = 120
    buf = StringIO()
    yaml.dump(doc, buf)
    return "".join(f"# {line}\n".replace("# \n", "#\n") for line in head) + buf.getvalue(), unknowns


def _wrap(text: str, width: int = 110) -> list[str]:
    import textwrap

    return textwrap.wrap(" ".join(text.split()), width) or [""]


def draft(text: str, output: str | Path, *, planning: Planning, profile: str | Path | None = None,
          catalog_dirs: tuple[Path, ...] = (), force: bool = False) -> DraftResult:
    """Draft an intent from `text` with the configured model and write it to `output` once it passes the checks.

    `profile` (a ClusterProfile file) is used as the inventory; without it the description must state one. An
    existing `output` is replaced only with `force`."""
    from infra.agent.client import LLMClient
    from infra.agent.patches import check_text
    from infra.agent.prompts import render
    from infra.agent.settings import require_settings

    settings = require_settings()
    output = write_file(output, None, force=force)  # refused before the model is asked, not after
    rel_profile = None
    pools_text = None
    if profile is not None:
        profile = Path(profile)
        checked = planning.check(profile, catalog_dirs)
        if checked.kind != "ClusterProfile":
            raise IntentError(Problem("is not a ClusterProfile", Location(str(profile)),
                                      "pass a cluster profile file to --profile"))
        rel_profile = os.path.relpath(profile.resolve(), output.resolve().parent)
        if rel_profile.startswith(".."):
            rel_profile = str(profile.resolve())
        pools_text = [{"name": p.name, "device": p.device} for p in checked.profile.spec.pools]
    catalog = load_catalog(catalog_dirs)
    messages = [
        {"role": "system", "content": render("draft_system.j2", models=sorted(catalog.models),
                                             devices=sorted(catalog.devices), pools=pools_text)},
        {"role": "user", "content": render("draft_user.j2", text=text)},
    ]
    result: dict[str, Any] = {}

    def check(d: IntentDraft) -> list[str]:
        if profile is None and not d.pools:
            raise IntentError(Problem("the description states no inventory (pools of devices) to plan on",
                                      Location("draft"), "pass --profile CLUSTER-PROFILE.yaml, or describe the "
                                                         "pools, e.g. '2 nodes of 8 H100-SXM at $2.5/h'"))
        body, unknowns = intent_yaml(d, rel_profile, text)
        result.update(text=body, unknowns=unknowns, draft=d)
        return check_text(body, output, planning, catalog_dirs)

    client = LLMClient(settings)
    client.structured(messages, IntentDraft, check)
    write_file(output, result["text"], force=force)
    return DraftResult(output, result["unknowns"], result["text"].count("# drafted"))
