"""What `infra check` prints: the intent as infra understood it, in canonical units."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from infra.intent.resolve import CheckResult
from infra.intent.models import LengthDistribution, Service


def _ms(seconds: float) -> str:
    return f"{seconds * 1000:g}ms" if seconds < 1 else f"{seconds:g}s"


def _lengths(d: LengthDistribution | None) -> str:
    if d is None:
        return "-"
    if d.fixed is not None:
        return f"{d.fixed}"
    if d.histogram is not None:
        return f"histogram of {len(d.histogram)} bars"
    if d.trace is not None:
        return f"trace {d.trace}"
    parts = [f"mean {d.mean}"] if d.mean is not None else []
    parts += [f"{k} {v}" for k, v in sorted(d.percentiles.items(), key=lambda kv: float(kv[0][1:]))]
    return ", ".join(parts)


def _load(svc: Service) -> str:
    w = svc.workload
    if w.rate is not None:
        text = f"{w.rate.peak_rps:g}/s peak"
        if w.rate.baseline_rps != w.rate.peak_rps:
            text += f", {w.rate.baseline_rps:g}/s baseline"
        arrival = w.arrival.process + (f" cv={w.arrival.cv:g}" if w.arrival.cv else "")
        return f"{text} ({arrival})"
    return f"{w.concurrency} concurrent clients"


def _slo(svc: Service) -> str:
    parts = [f"{m} {k} {_ms(v)}" for m, k, v in svc.slo.targets()]
    if svc.slo.attainment is not None:
        parts.append(f"attainment {svc.slo.attainment:.2%}")
    return ", ".join(parts) or "none"


def _budget(b: Any) -> str:
    parts = []
    if b.per_hour is not None:
        parts.append(f"${b.per_hour:g}/h")
    if b.per_million_tokens is not None:
        parts.append(f"${b.per_million_tokens:g}/Mtok")
    if b.per_request is not None:
        parts.append(f"${b.per_request:g}/request")
    return ", ".join(parts) or "none"


def print_check(console: Console, path: Path, result: CheckResult) -> None:
    if result.profile is not None:
        table = Table(title=f"cluster profile {result.profile.metadata.name}", title_justify="left")
        for col in ("pool", "device", "nodes", "devices", "price/device-h", "zone"):
            table.add_column(col)
        for pool in result.profile.spec.pools:
            table.add_row(pool.name, (result.devices or {}).get(pool.name, pool.device), str(pool.node_count),
                          str(pool.device_count), "-" if pool.price is None else f"${pool.price:g}",
                          pool.topology.zone or "-")
        console.print(table)
        console.print(f"[green]ok[/green] {path}: valid cluster profile")
        return
    resolved = result.intent
    assert resolved is not None
    intent = resolved.loaded.intent
    table = Table(title=f"intent {intent.metadata.name}", title_justify="left")
    for col in ("service", "model", "load", "input / output tokens", "SLOs", "budget"):
        table.add_column(col)
    for rs in resolved.services:
        svc = rs.service
        model = rs.model.name if rs.model else " -> ".join(f"{s.name}({rs.stages[s.name].name if s.name in rs.stages else 'cpu'})" for s in svc.pipeline or [])
        table.add_row(svc.name, model, _load(svc),
                      f"{_lengths(svc.workload.input_tokens)} / {_lengths(svc.workload.output_tokens)}",
                      _slo(svc), _budget(svc.budget))
    console.print(table)
    pools = Table(title=f"inventory {resolved.loaded.profile_name}", title_justify="left")
    for col in ("pool", "device", "devices", "price/device-h", "zone"):
        pools.add_column(col)
    for pool in resolved.loaded.cluster.pools:
        dev = resolved.pools[pool.name]
        price = pool.price if pool.price is not None else dev.reference_price_per_hour.value
        src = "" if pool.price is not None else " (catalog)"
        pools.add_row(pool.name, dev.name, str(pool.device_count), f"${price:g}{src}", pool.topology.zone or "-")
    console.print(pools)
    if intent.spec.budget.per_hour or intent.spec.budget.per_million_tokens or intent.spec.budget.per_request:
        console.print(f"total budget: {_budget(intent.spec.budget)}")
    console.print(f"[green]ok[/green] {path}: valid intent, {len(resolved.services)} service(s)")


def check_json(result: CheckResult) -> dict[str, Any]:
    if result.profile is not None:
        return {"kind": "ClusterProfile", "valid": True, "devices": result.devices,
                "profile": result.profile.model_dump(mode="json", by_alias=True)}
    resolved = result.intent
    assert resolved is not None
    return {
        "kind": "ServingIntent",
        "valid": True,
        "intent": resolved.loaded.intent.model_dump(mode="json", by_alias=True),
        "cluster": resolved.loaded.cluster.model_dump(mode="json", by_alias=True),
        "resolved": {
            "pools": {name: dev.name for name, dev in sorted(resolved.pools.items())},
            "services": {
                rs.service.name: {
                    "model": rs.model.name if rs.model else None,
                    "stages": {k: v.name for k, v in rs.stages.items()},
                    "devices": rs.devices,
                    "frameworks": [f.name for f in rs.frameworks],
                }
                for rs in resolved.services
            },
        },
    }
