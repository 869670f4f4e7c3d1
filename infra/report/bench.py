"""What `infra bench --endpoint` reports: a table, one JSON object, and a markdown file with plots."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np
from rich.console import Console
from rich.table import Table

from infra.bench.endpoint import EndpointResult, check_objectives, passed
from infra.bench.metrics import distribution

_COLS = ("mean", "p50", "p90", "p99")
APPROX_NOTE = ("output tokens of {n} request(s) were counted as stream chunks: the server sent no usage, and a "
               "chunk may carry several tokens, so their TPOT is approximate")
PROMPT_NOTE = ("prompts are built as N short common words for N input tokens (about one token each in current "
               "LLM vocabularies); the server's usage.prompt_tokens is what input tokens report")


def _ms(x: float | None) -> Any:
    if x is None:
        return None
    return "inf" if math.isinf(x) else round(x, 3)


def bench_json(result: EndpointResult) -> dict[str, Any]:
    """The run as one JSON-ready object (summary, load, objectives and verdict)."""
    run, s = result.run, result.summary
    load = run.load
    out = s.to_json()
    checks = check_objectives(run.records, result.objectives)
    out.update({
        "endpoint": run.url, "model": run.model, "api": run.api,
        "load": {"arrival": load.arrival, "rate": load.rate, "concurrency": load.concurrency,
                 "requests": len(load.requests), "sent": len(run.records), "warmup": len(run.warmup)},
        "source": result.source.origin if result.source else "flags",
        "service": result.source.service if result.source else None,
        "input_tokens_mean": round(float(np.mean([r.input_tokens for r in run.records])), 3) if run.records else None,
        "output_tokens_mean": (round(float(np.mean([r.output_tokens for r in run.records if r.ok])), 3)
                               if s.completed else None),
        "ttft_any_ms": distribution([r.ttft_any for r in run.records if r.ok and r.ttft_any is not None],
                                    _COLS[1:]).to_json(),
        "client_queue_ms": distribution(run.client_queue_s, _COLS[1:]).to_json(),
        "wall_s": round(run.wall_s, 6),
        "server": run.server,
        "objectives": [{"objective": c.key, "target_ms": c.target_ms, "measured_ms": _ms(c.measured_ms), "n": c.n,
                        "passed": c.passed} for c in checks],
        "verdict": "pass" if passed(result) else "fail",
    })
    return out


def _fmt(v: Any) -> str:
    if v is None:
        return "-"
    if v == "inf":
        return "inf"
    return f"{v:,.1f}" if v < 10_000 else f"{v / 1000:,.1f}s"


def print_bench(console: Console, data: dict[str, Any]) -> None:
    """The table a person reads."""
    load = data["load"]
    how = (f"closed loop, {load['concurrency']} client(s)" if load["concurrency"] is not None
           else f"open loop, {load['arrival']} arrivals at {load['rate']:g}/s")
    console.print(f"{data['endpoint']} model {data['model']} ({data['api']}): {how}; {load['sent']} request(s) "
                  f"measured after {load['warmup']} warm-up")
    t = Table(title_justify="left")
    t.add_column("ms")
    t.add_column("n", justify="right")
    for c in _COLS:
        t.add_column(c, justify="right")
    for metric in ("ttft", "tpot", "itl", "e2e", "ttft_any", "client_queue"):
        d = data[f"{metric}_ms"]
        t.add_row(metric.upper() if "_" not in metric else metric, str(d["n"]),
                  *(_fmt(d.get(c)) for c in _COLS))
    console.print(t)
    console.print(f"completed {data['completed']}, failed {data['failed']} in {data['duration_s']:.2f} s: "
                  f"{data['request_throughput']:.3f} req/s, {data['output_token_throughput']:,.1f} output tok/s; "
                  f"goodput {data['goodput_rps']:.3f} req/s (attainment {data['attainment']:.1%})")
    if data["server"]:
        console.print("engine's own /metrics (means): " + server_line(data["server"]))
    if data["errors"]:
        console.print("errors: " + ", ".join(f"{k} x{v}" for k, v in data["errors"].items()))
    for note in notes(data):
        console.print(f"note: {note}")
    if data["objectives"]:
        v = Table(title="objectives (failed requests count as slower than any bound)", title_justify="left")
        for col in ("objective", "target ms", "measured ms", "n", ""):
            v.add_column(col, justify="left" if col == "objective" else "right")
        for c in data["objectives"]:
            v.add_row(c["objective"], _fmt(c["target_ms"]), _fmt(c["measured_ms"]), str(c["n"]),
                      "[green]pass[/green]" if c["passed"] else "[red]FAIL[/red]")
        console.print(v)
    colour = "green" if data["verdict"] == "pass" else "red"
    console.print(f"verdict: [{colour}]{data['verdict']}[/{colour}]")


def server_line(server: dict[str, dict[str, float]]) -> str:
    return ", ".join(f"{k.upper()} {v['mean_ms']:,.1f} ms (n={v['n']})" for k, v in server.items())


def notes(data: dict[str, Any]) -> list[str]:
    out = [PROMPT_NOTE]
    if data["approximate_tokens"]:
        out.append(APPROX_NOTE.format(n=data["approximate_tokens"]))
    return out


def _plots(result: EndpointResult, out: Path) -> tuple[list[str], str | None]:
    """Write the PNG plots beside `out`; returns their file names, or why there are none."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return [], "plots need matplotlib: pip install 'infra[plots]'"
    from infra.files import write_atomic

    records = [r for r in result.run.records if r.ok]
    if not records:
        return [], "no completed request to plot"
    names = []
    fig, ax = plt.subplots(figsize=(7, 4), dpi=100)
    series = {"TTFT": [r.ttft for r in records], "TPOT": [t for r in records if (t := r.tpot) is not None],
              "ITL": [g for r in records for g in r.itl], "E2E": [r.e2e for r in records]}
    for label, values in series.items():
        if values:
            v = np.sort(np.asarray(values, dtype=float)) * 1000
            ax.plot(v, np.arange(1, v.size + 1) / v.size, label=f"{label} (n={v.size})")
    ax.set_xscale("log")
    ax.set_xlabel("latency (ms)")
    ax.set_ylabel("fraction of samples")
    ax.set_title("latency CDFs")
    ax.grid(True, alpha=0.3)
    ax.legend()
    names.append(_save(fig, out, "latency-cdf", write_atomic))
    t0 = min(r.t_send for r in result.run.records)
    ends = np.asarray([r.end - t0 for r in records])
    tokens = np.asarray([r.output_tokens for r in records], dtype=float)
    edges = np.arange(0.0, math.floor(ends.max()) + 2.0)
    fig, ax = plt.subplots(figsize=(7, 4), dpi=100)
    done, _ = np.histogram(ends, bins=edges)
    toks, _ = np.histogram(ends, bins=edges, weights=tokens)
    ax.step(edges[:-1], done, where="post", label="completed requests/s")
    ax2 = ax.twinx()
    ax2.step(edges[:-1], toks, where="post", color="tab:orange", label="output tokens/s")
    ax.set_xlabel("seconds since the first request (bucket: 1 s, by completion)")
    ax.set_ylabel("requests/s")
    ax2.set_ylabel("output tokens/s")
    ax.set_title("throughput over time")
    ax.grid(True, alpha=0.3)
    fig.legend(loc="upper right")
    names.append(_save(fig, out, "throughput", write_atomic))
    return names, None


def _save(fig: Any, out: Path, what: str, write_atomic: Any) -> str:
    import io

    import matplotlib.pyplot as plt

    buf = io.BytesIO()
    fig.tight_layout()
    fig.savefig(buf, format="png", metadata={"Software": None})
    plt.close(fig)
    name = f"{out.stem}-{what}.png"
    write_atomic(out.parent / name, buf.getvalue())
    return name


def write_markdown(result: EndpointResult, data: dict[str, Any], out: Path) -> list[Path]:
    """A markdown report at `out` with its plots beside it; returns what was written."""
    from infra.files import write_atomic

    plots, why = _plots(result, out)
    load = data["load"]
    how = f"rate {load['rate']:g}/s" if load["rate"] else f"concurrency {load['concurrency']}"
    lines = [f"# Benchmark of {data['endpoint']}", "",
             f"Model `{data['model']}` over the {data['api']} API; load from {data['source']}: "
             f"{load['arrival']} ({how}), {load['sent']} request(s) measured after {load['warmup']} warm-up.", "",
             "| metric (ms) | n | " + " | ".join(_COLS) + " |", "|---|---:|" + "---:|" * len(_COLS)]
    for metric in ("ttft", "tpot", "itl", "e2e", "ttft_any", "client_queue"):
        d = data[f"{metric}_ms"]
        lines.append(f"| {metric} | {d['n']} | " + " | ".join(_fmt(d.get(c)) for c in _COLS) + " |")
    lines += ["", f"Completed {data['completed']}, failed {data['failed']} in {data['duration_s']:.2f} s: "
                  f"{data['request_throughput']:.3f} req/s, {data['output_token_throughput']:,.1f} output tok/s; "
                  f"goodput {data['goodput_rps']:.3f} req/s, attainment {data['attainment']:.1%}.", ""]
    if data["server"]:
        lines += ["The engine's own `/metrics` (means over the measured requests): " + server_line(data["server"])
                  + ".", ""]
    if data["errors"]:
        lines += ["Errors: " + ", ".join(f"{k} x{v}" for k, v in data["errors"].items()) + ".", ""]
    if data["objectives"]:
        lines += ["| objective | target ms | measured ms | n | verdict |", "|---|---:|---:|---:|---|"]
        lines += [f"| {c['objective']} | {_fmt(c['target_ms'])} | {_fmt(c['measured_ms'])} | {c['n']} | "
                  f"{'pass' if c['passed'] else 'FAIL'} |" for c in data["objectives"]]
        lines.append("")
    lines += [f"**Verdict: {data['verdict']}**", ""]
    lines += [f"- {n}" for n in notes(data)] + [""]
    lines += [f"![{p}]({p})" for p in plots] if plots else [f"_No plots: {why}._"]
    write_atomic(out, "\n".join(lines) + "\n")
    return [out] + [out.parent / p for p in plots]
