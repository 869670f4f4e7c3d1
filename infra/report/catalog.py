"""What `infra catalog` prints: tables of entries, or one entry with the source of every figure."""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.table import Table

from infra.catalog.loader import Catalog
from infra.catalog.schema import DeviceSpec, Figure, FrameworkSpec, ModelSpec
from infra.errors import CatalogError, Problem

KINDS = ("models", "devices", "frameworks", "conventions")


def _kind(kind: str | None) -> str | None:
    if kind is None:
        return None
    k = kind.lower()
    for full in KINDS:
        if full.startswith(k.rstrip("s")):
            return full
    raise CatalogError(Problem(f"unknown catalog section {kind!r}", fix=f"use one of: {', '.join(KINDS)}"))


def _entry(cat: Catalog, kind: str, name: str) -> Any:
    return {"models": cat.model, "devices": cat.device, "frameworks": cat.framework}[kind](name)


def catalog_json(cat: Catalog, kind: str | None, name: str | None) -> Any:
    section = _kind(kind)
    if section == "conventions":
        return {"devices": cat.conventions}
    if section and name:
        return _entry(cat, section, name).model_dump(mode="json")
    sections = [section] if section else ["models", "devices", "frameworks"]
    out: dict[str, Any] = {s: [e.model_dump(mode="json") for _, e in sorted(cat.tables[s].entries.items())]
                           for s in sections}
    if section is None:
        out["conventions"] = {"devices": cat.conventions}
        out["fingerprint"] = cat.fingerprint()
    return out


def _fig(f: Figure | None, unit: str = "") -> str:
    return "-" if f is None else f"{f.value:g}{unit}"


def print_catalog(console: Console, cat: Catalog, kind: str | None, name: str | None) -> None:
    section = _kind(kind)
    if section == "conventions":
        table = Table(title="device resource names (HAMi chart defaults unless overlaid)", title_justify="left")
        for col in ("vendor", "count", "memory (unit)", "cores"):
            table.add_column(col)
        for vendor, spec in sorted(cat.conventions.items()):
            # an empty count: CPU devices, which pods request as Kubernetes' own cpu and memory
            table.add_row(vendor, spec.get("count") or "- (cpu, memory)",
                          f"{spec.get('memory', '-')} ({spec.get('memory_unit', '-')})", spec.get("cores") or "-")
        console.print(table)
        return
    if section and name:
        _print_entry(console, _entry(cat, section, name))
        return
    if section in (None, "models"):
        t = Table(title=f"models ({len(cat.models)})", title_justify="left")
        for col in ("name", "hugging face id", "kind", "params (B) total/active", "layers", "attention", "context"):
            t.add_column(col)
        for m in sorted(cat.models.values(), key=lambda m: m.name.lower()):
            attn = "MLA" if m.mla else f"GQA {m.attention_heads}/{m.kv_heads}"
            if m.moe:
                attn += f", MoE {m.moe.active_experts}/{m.moe.experts}"
            t.add_row(m.name, m.hf_id, m.kind, f"{m.params_total_b:g}/{m.params_active_b:g}", str(m.layers), attn,
                      str(m.max_context))
        console.print(t)
    if section in (None, "devices"):
        t = Table(title=f"devices ({len(cat.devices)})", title_justify="left")
        for col in ("name", "vendor", "memory GB", "HBM TB/s", "bf16 TFLOPS", "fp8", "link", "$/h", "precisions"):
            t.add_column(col)
        for d in sorted(cat.devices.values(), key=lambda d: (d.vendor, d.name)):
            t.add_row(d.name, d.vendor, _fig(d.memory_gb), _fig(d.memory_bandwidth_tbps),
                      _fig(d.tflops.get("bf16") or d.tflops.get("fp16")), _fig(d.tflops.get("fp8")),
                      f"{d.interconnect.kind} {d.interconnect.bandwidth_gbs.value:g}GB/s",
                      _fig(d.reference_price_per_hour), ", ".join(d.precisions))
        console.print(t)
    if section in (None, "frameworks"):
        t = Table(title=f"frameworks ({len(cat.frameworks)})", title_justify="left")
        for col in ("name", "version", "vendors", "precisions", "features"):
            t.add_column(col)
        for f in sorted(cat.frameworks.values(), key=lambda f: f.name):
            t.add_row(f.name, f.version, ", ".join(f.vendors), ", ".join(f.precisions), ", ".join(f.features))
        console.print(t)


def _print_entry(console: Console, entry: ModelSpec | DeviceSpec | FrameworkSpec) -> None:
    t = Table(title=f"{entry.name}", title_justify="left", show_header=True)
    for col in ("field", "value", "confidence", "source"):
        t.add_column(col, overflow="fold")

    def walk(prefix: str, value: Any) -> None:
        if isinstance(value, Figure):
            t.add_row(prefix, f"{value.value:g}" + (f"  ({value.note})" if value.note else ""), value.confidence,
                      value.source)
        elif hasattr(value, "model_fields"):
            for key in type(value).model_fields:
                walk(f"{prefix}.{key}" if prefix else key, getattr(value, key))
        elif isinstance(value, dict):
            for key, v in value.items():
                walk(f"{prefix}.{key}", v)
        elif isinstance(value, list) and value and hasattr(value[0], "model_fields"):
            for i, v in enumerate(value):
                walk(f"{prefix}[{i}]", v)
        elif value not in (None, [], {}):
            text = ", ".join(map(str, value)) if isinstance(value, list) else str(value)
            conf = getattr(entry, "confidence", "") if prefix not in ("source", "confidence") else ""
            src = getattr(entry, "source", "") if isinstance(entry, ModelSpec) and prefix != "source" else ""
            t.add_row(prefix, text, conf if isinstance(entry, ModelSpec) else "", src)

    walk("", entry)
    console.print(t)
