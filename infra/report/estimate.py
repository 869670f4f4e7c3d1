"""What `infra estimate` prints: metrics by percentile, throughput, memory, and how far to trust them."""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.table import Table

_COLS = ("mean", "p50", "p90", "p99", "p99.9")


def _fmt(ms: float | None) -> str:
    if ms is None:
        return "—"
    return f"{ms:,.1f}" if ms < 10_000 else f"{ms / 1000:,.1f}s"


def _with_unit(ms: float) -> str:
    return f"{ms:,.1f} ms" if ms < 10_000 else f"{ms / 1000:,.1f} s"


def _metrics(console: Console, r: dict[str, Any], title: str) -> None:
    t = Table(title=title, title_justify="left")
    t.add_column("ms")
    for c in _COLS:
        t.add_column(c, justify="right")
    for metric in ("ttft", "tpot", "itl", "e2e"):
        values = r[f"{metric}_ms"]
        t.add_row(metric.upper(), *(_fmt(values[c]) for c in _COLS))
    console.print(t)
    load = "—" if r["load"] is None else f"{r['load']:.0%}"
    console.print(f"throughput {r['throughput_rps']:.3f} req/s, {r['output_tokens_per_s']:,.0f} output tok/s; "
                  f"batch {r['batch_per_group']:.1f} per attention group, load {load}; "
                  f"{r['devices']} device(s), workers {r['workers']}")
    for role, m in r["memory"].items():
        console.print(f"memory ({role}): {m['weights_gb']:.1f} GB weights per device, {m['kv_gb']:.1f} GB KV cache "
                      f"= {m['kv_tokens']:,} tokens")
    cal = "calibrated" if r["calibrated"] else f"NOT calibrated ({r['calibration_source']})"
    console.print(f"efficiency factors: {cal}")
    band = r.get("error_band")
    if band:
        span = {m: "–".join(_with_unit(v) for v in band[f"{m}_mean_ms"]) for m in ("ttft", "tpot")}
        held = band["held_for_a_left_out_model"]
        kept = (f"; such a band held {held['ttft']:.0%} (TTFT) and {held['tpot']:.0%} (TPOT) of a left-out model's "
                "measurements" if held["ttft"] is not None and held["tpot"] is not None else "")
        extra = "; wider here, the factors are borrowed" if not r["calibrated"] else ""
        console.print(f"error band: mean TTFT {span['ttft']}, TPOT {span['tpot']} (p5..p95 of measured / predicted"
                      f"{kept}{extra}; {band['basis']})")
    for note in r["notes"]:
        console.print(f"note: {note}")
    if not r["stable"]:
        console.print("[red]unstable: the load exceeds what this deployment sustains[/red]")


def print_estimate(console: Console, r: dict[str, Any]) -> None:
    if "max_rate_rps" in r:
        slo = ", ".join(f"{k} {v:g}ms" for k, v in r["slo_ms"].items())
        if "at_max_rate" in r:
            console.print(f"goodput capacity: {r['max_rate_rps']:.3f} req/s meets {slo}")
            _metrics(console, r["at_max_rate"], "at that rate")
            return
        missed = ", ".join(f"{k} {'unstable' if v is None else _with_unit(v)}"
                           for k, v in r["missed_at_trickle_ms"].items())
        console.print(f"[red]goodput capacity: no rate meets {slo}[/red]; even at {r['trickle_rps']:g} req/s the "
                      f"prediction is {missed}: relax what it misses or change the deployment")
        return
    _metrics(console, r, f"{r['model']} {r['precision']} on {r['device']} with {r['framework']} ({r['mode']})")
    for key, o in r.get("slo_check", {}).items():
        got = "unstable" if o["predicted_ms"] is None else _with_unit(o["predicted_ms"])
        verdict = "[green]met[/green]" if o["met"] else "[red]missed[/red]"
        console.print(f"objective {key} {_with_unit(o['target_ms'])}: predicted {got}, {verdict}")
