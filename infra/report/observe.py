"""What `infra observe` prints: the window (or windows) a deployment served, against what the performance model
predicts at each one's load."""

from __future__ import annotations

from typing import Any

from rich.console import Console


def observe_json(result: Any) -> dict[str, Any]:
    """An `infra.workflow.observe.ObserveResult` as JSON-ready data."""
    o = result.observation
    windows = [{"date": w.date, "requests": w.requests, "rate_rps": round(w.rate, 6),
                "workers": dep.get("workers", 1), "ttft_ms": round(w.ttft_ms, 4), "tpot_ms": round(w.tpot_ms, 4),
                "predicted": {"ttft_ms": round(p["ttft_mean"], 4), "tpot_ms": round(p["tpot_mean"], 4)} if p else None}
               for (w, dep), p in zip(result.windows, result.predicted)]
    return {"source": o.source, "date": o.date, "seconds": o.seconds, "requests": o.requests,
            "rate_rps": round(o.rate, 6), "isl": round(o.isl, 2), "osl": round(o.osl, 2),
            "ttft_ms": round(o.ttft_ms, 4), "tpot_ms": round(o.tpot_ms, 4), "percentiles": o.percentiles,
            "notes": list(o.notes), "windows": windows, "skipped": result.skipped,
            "predicted_with": result.basis or None, "written": str(result.written)}


def _against(w: Any, p: dict[str, float] | None) -> str:
    if p is None:
        return "the model has this load past what the deployment sustains"
    ttft, tpot = p["ttft_mean"], p["tpot_mean"]
    return f"measured {w.ttft_ms / ttft:.2f}x / {w.tpot_ms / tpot:.2f}x the model's {ttft:,.1f} / {tpot:,.1f} ms"


def print_observe(console: Console, result: Any) -> None:
    o = result.observation
    console.print(f"{o.source}: {o.requests} requests finished in {o.seconds:g} s ({o.rate:.4g}/s), prompts "
                  f"{o.isl:,.0f} tokens, answers {o.osl:,.0f} on average")
    for key, label, mean in (("ttft_ms", "TTFT", o.ttft_ms), ("tpot_ms", "TPOT", o.tpot_ms)):
        pcts = ", ".join(f"{p} {v:,.1f}" for p, v in o.percentiles.get(key, {}).items())
        console.print(f"{label} mean {mean:,.1f} ms" + (f" ({pcts})" if pcts else ""))
    basis = f"with {result.basis}" if result.basis else "with the packaged prior"
    if len(result.windows) > 1 or result.skipped:
        console.print(f"{len(result.windows)} windows written as load points"
                      + (f", {result.skipped} left out (too few requests, or no series)" if result.skipped else "")
                      + f"; TTFT / TPOT against the model at each window's load ({basis}):")
        for (w, dep), p in zip(result.windows, result.predicted):
            console.print(f"  until {w.date}: {w.requests} requests ({w.rate:.4g}/s on {dep.get('workers', 1)} "
                          f"replica(s)), TTFT {w.ttft_ms:,.1f} ms, TPOT {w.tpot_ms:,.1f} ms: {_against(w, p)}")
    else:
        console.print(f"TTFT / TPOT at this load {_against(o, result.predicted[0])} ({basis})")
    for note in o.notes:
        console.print(f"note: {note}")
    console.print(f"wrote {result.written}: `infra calibrate {result.written}` fits a calibration to it")


__all__ = ["observe_json", "print_observe"]
