"""How a benchmark run and a plan's verification are shown: the terminal table and report.md's section.

Both take the JSON forms (`BenchResult.to_json()`, the plan's `verification`), so a saved run renders the same.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from infra.bench.metrics import distribution
from infra.planner.types import Verification, VerifiedPipeline

_COLS = ("mean", "p50", "p90", "p99")
_STYLE = {"pass": "green", "fail": "red", "inconclusive": "yellow"}


def _ms(v: Any) -> str:
    if v is None:
        return "-"
    if v == "inf" or (isinstance(v, float) and math.isinf(v)):
        return "inf"
    return f"{v:,.1f}" if v < 10_000 else f"{v / 1000:,.1f}s"


def _value(value: float | None, note: str | None) -> str:
    """A figure that may be null because it was infinite (its note then says why: metrics.json_number)."""
    return "inf" if value is None and note else _ms(value)


def _val(o: dict[str, Any], key: str) -> str:
    """`_value` of a field of a result's objective (`<key>_note` its note)."""
    return _value(o.get(key), o.get(f"{key}_note"))


def _unit(text: str) -> str:
    """A figure `_ms` wrote, with its unit: milliseconds unless it already says seconds."""
    return text if text.endswith("s") or text in ("-", "inf") else f"{text}ms"


def _interval(ci: list[float | None] | None, note: str | None) -> str:
    if not ci:
        return "-"
    ends = [_value(x, note) for x in ci]
    return f"{ends[0]} .. {ends[1]}"


def _ci(o: dict[str, Any]) -> str:
    return _interval(o.get("ci_ms"), o.get("ci_ms_note"))


def _failures(verdict: dict[str, Any]) -> str | None:
    """The failed requests' line: how many of which kind, against the share allowed; None when none failed or
    failures were not judged on their own."""
    outcome = verdict.get("failed_verdict")
    if outcome is None or not verdict.get("failed"):
        return None
    kinds = ", ".join(f"{k} {n}" for k, n in (verdict.get("failed_kinds") or {}).items()) or "none"
    return f"failed requests ({kinds}): {verdict['failed_reason']}: {outcome}"


def print_bench(console: Console, r: dict[str, Any]) -> None:
    """The run's metrics by percentile with each objective's target and verdict beside its metric."""
    load = r["load"]
    how = (f"{load['rate_rps']:g} req/s ({load['arrival']})" if "rate_rps" in load
           else f"{load.get('concurrency')} clients (closed loop)")
    console.print(f"{r['source']}: service {r['service']}, {load['requests']} requests at {how}, seed {load['seed']}")
    verdict = r["verdict"]
    by_metric: dict[str, list[dict[str, Any]]] = {}
    for o in verdict["objectives"]:
        by_metric.setdefault(o["key"].partition("_")[0], []).append(o)
    t = Table(title_justify="left")
    t.add_column("metric (ms)")
    for c in _COLS:
        t.add_column(c, justify="right")
    t.add_column("n", justify="right")
    t.add_column("objective")
    t.add_column("measured (95% CI)", justify="right")
    t.add_column("predicted", justify="right")
    t.add_column("verdict")
    for metric in ("ttft", "tpot", "itl", "e2e"):
        d = r[f"{metric}_ms"]
        row = [metric.upper(), *(_ms(d.get(c)) for c in _COLS), str(d.get("n", 0))]
        objs = by_metric.get(metric) or [None]
        for i, o in enumerate(objs):
            cells = row if i == 0 else [""] * len(row)
            if o is None:
                t.add_row(*cells, "", "", "", "")
                continue
            pct = o["key"].partition("_")[2]
            style = _STYLE[o["verdict"]]
            t.add_row(*cells, f"{pct} <= {_ms(o['target_ms'])}", f"{_val(o, 'measured_ms')} ({_ci(o)})",
                      _val(o, "predicted_ms"), f"[{style}]{o['verdict']}[/{style}]")
    console.print(t)
    console.print(f"completed {r['completed']}, failed {r['failed']} over {r['duration_s']:.1f} s: "
                  f"{r['request_throughput']:.3f} req/s, {r['output_token_throughput']:,.0f} output tok/s; "
                  f"goodput {r['goodput_rps']:.3f} req/s, attainment {r['attainment']:.1%} "
                  f"(95% CI {verdict['attainment_ci'][0]:.1%} .. {verdict['attainment_ci'][1]:.1%})")
    failures = _failures(verdict)
    if failures is not None:
        style = _STYLE[verdict["failed_verdict"]]
        head, _, outcome = failures.rpartition(": ")
        console.print(f"{head}: [{style}]{outcome}[/{style}]")
    for o in verdict["objectives"]:
        if o["verdict"] != "pass":
            console.print(f"{o['key']}: {o['verdict']}: {o['reason']}")
    for note in r.get("notes") or []:
        console.print(f"note: {note}")
    style = _STYLE[verdict["overall"]]
    console.print(f"verdict: [{style}]{verdict['overall'].upper()}[/{style}]")


def print_pipeline_bench(console: Console, r: dict[str, Any]) -> None:
    """A pipeline run: its objectives end to end, each stage on its budget, and each stage's load and bubble."""
    load = r["load"]
    how = (f"{load['rate_rps']:g} req/s ({load['arrival']})" if "rate_rps" in load
           else f"{load['concurrency']} clients (closed loop)" if "concurrency" in load else load["arrival"])
    console.print(f"{r['source']}: pipeline {r['pipeline']}, {load['requests']} requests at {how}, seed "
                  f"{load['seed']}, {r['duration_s']:.1f} s")
    t = Table(title_justify="left")
    for c in ("scope", "objective", "target ms", "measured (95% CI)", "predicted", "verdict"):
        t.add_column(c, justify="right" if c in ("target ms", "predicted") else "left")
    rows = [(r["pipeline"], o) for o in r["verdict"]["objectives"]]
    rows += [(u, o) for u, v in r["units"].items() for o in v["objectives"]]
    for scope, o in rows:
        style = _STYLE[o["verdict"]]
        t.add_row(scope, o["key"], _ms(o["target_ms"]), f"{_val(o, 'measured_ms')} ({_ci(o)})",
                  _val(o, "predicted_ms"), f"[{style}]{o['verdict']}[/{style}]")
    console.print(t)
    s = Table(title_justify="left")
    for c in ("stage", "kind", "servers", "busy", "queue mean/p99 ms", "bubble mean/p99 ms", "bubble share"):
        s.add_column(c, justify="left" if c in ("stage", "kind") else "right")
    for st in r["stages"]:
        wait, bub = st.get("wait_ms") or {}, st.get("bubble_ms") or {}
        s.add_row(st["name"], st["kind"], str(st["servers"]), f"{st['utilisation']:.0%}",
                  f"{_ms(wait.get('mean'))} / {_ms(wait.get('p99'))}" if wait else "in TTFT",
                  f"{_ms(bub.get('mean'))} / {_ms(bub.get('p99'))}", f"{st['bubble_share']:.0%}")
    console.print(s)
    for note in r["verdict"].get("notes") or []:
        console.print(f"note: {note}")
    overall = r["verdict"]["overall"]
    console.print(f"verdict: [{_STYLE[overall]}]{overall.upper()}[/{_STYLE[overall]}]")


def print_verification(console: Console, v: Verification) -> None:
    """One line per round: its verdict, the objectives that did not pass, and why the loop stopped."""
    for rnd in v.rounds:
        style = _STYLE[rnd.verdict]
        misses = "; ".join(f"{s.service} {o.key} {_unit(_value(o.measured_ms, o.measured_ms_note))} vs "
                           f"{_unit(_ms(o.target_ms))} ({o.verdict})"
                           for s in [*rnd.services, *rnd.pipelines] for o in s.objectives if o.verdict != "pass")
        misses += "".join(f"{'; ' if misses else ''}{s.service} attainment {s.attainment:.1%} vs "
                          f"{s.attainment_target:.1%} ({s.attainment_verdict})" for s in rnd.services
                          if s.attainment_verdict not in (None, "pass"))
        console.print(f"verification round {rnd.round} ({v.method}, {v.requests} requests per service): "
                      f"[{style}]{rnd.verdict}[/{style}]" + (f": {misses}" if misses else ""))
        for p in rnd.pipelines:
            console.print(f"  pipeline {p.service}: " + ", ".join(
                f"{st.name} {st.utilisation:.0%} busy" + (
                    f", bubble {st.bubble_share:.0%}" if st.bubble_share else "") for st in p.stages))
        if rnd.corrections:
            console.print("  re-planned with objectives tightened: " + ", ".join(
                f"{c.service} {c.objective} x{c.scale:g}" for c in rnd.corrections))
        if rnd.outcome:
            console.print(f"  {rnd.outcome}")
    if len(v.rounds) > 1:
        console.print(f"kept the plan of round {v.plan_round}: {v.verdict}")


def verification_markdown(v: Verification) -> str:
    """report.md's section on a plan's verification: each round, per service and objective."""
    method = (f"Method: {v.method} of {v.requests} requests per service at the intent's peak workload "
              f"(seed {v.seed}); {len(v.rounds)} round(s); this is the plan of round {v.plan_round}, "
              f"verdict **{v.verdict}**.")
    out = ["## Verification", "", method, ""]
    for rnd in v.rounds:
        out.append(f"### Round {rnd.round}: {rnd.verdict}")
        out.append("")
        out.append("| service | objective | target ms | predicted ms | measured ms | 95% CI | verdict |")
        out.append("|---|---|---:|---:|---:|---|---|")
        for svc in [*rnd.pipelines, *rnd.services]:
            for o in svc.objectives:
                out.append(f"| {svc.service} | {o.key} | {_ms(o.target_ms)} | {_value(o.predicted_ms, None)} | "
                           f"{_value(o.measured_ms, o.measured_ms_note)} | {_interval(o.ci_ms, o.ci_ms_note)} | "
                           f"{o.verdict} |")
        out.append("")
        for p in rnd.pipelines:
            out += _pipeline_stages(p)
        for s in rnd.services:
            extra = "; ".join(s.notes)
            target = (f" (target {s.attainment_target:.1%}, 95% CI {s.attainment_ci[0]:.1%} .. "
                      f"{s.attainment_ci[1]:.1%}: {s.attainment_verdict})"
                      if s.attainment_verdict and s.attainment_target is not None and s.attainment_ci else "")
            out.append(f"- {s.service}: attainment {s.attainment:.1%}{target}, goodput "
                       f"{s.goodput_rps:.3f} req/s, {s.failed} failed" + (f"; {extra}" if extra else ""))
        if rnd.corrections:
            fixes = ", ".join(f"{c.service} {c.objective} x{c.scale:g}" for c in rnd.corrections)
            out.append(f"- corrections for the next round (objective used in scoring, scaled): {fixes}")
        if rnd.outcome:
            out.append(f"- {rnd.outcome}")
        out.append("")
    return "\n".join(out)


def _pipeline_stages(p: VerifiedPipeline) -> list[str]:
    """A pipeline's stages as the simulation ran them: how busy, how long requests queued, how long they waited
    on the stage before (the bubble)."""
    out = [(f"Pipeline {p.service} end to end ({p.failed} requests failed): per stage, servers are engines "
            "(LLM), replicas or cores; busy is busy time over servers x the run; the bubble is time a request sat "
            "in the stage waiting for the stage before it."), "",
           "| stage | kind | servers | busy | queue mean / p99 ms | bubble mean / p99 ms | bubble share |",
           "|---|---|---:|---:|---:|---:|---:|"]
    for st in p.stages:
        wait, bub = st.wait_ms, st.bubble_ms
        queue = f"{_ms(wait.get('mean'))} / {_ms(wait.get('p99'))}" if wait else "in TTFT"
        out.append(f"| {st.name} | {st.kind} | {st.servers} | {st.utilisation:.0%} | {queue} | "
                   f"{_ms(bub.get('mean'))} / {_ms(bub.get('p99'))} | {st.bubble_share:.0%} |")
    return out + [""] + [f"- {n}" for n in p.notes] + ([""] if p.notes else [])


# -- runs against an endpoint ------------------------------------------------------------------------------------


def endpoint_json(result: Any) -> dict[str, Any]:
    """A run against an endpoint (`infra.bench.endpoint.EndpointResult`) as one JSON-ready object: the same keys as
    a simulated run, plus what only a client sees (first event of any kind, client-side queueing, the engine's own
    /metrics)."""
    import numpy as np


    run, s = result.run, result.bench.summary
    out = result.bench.to_json()
    done = [r for r in run.records if r.ok]
    out.update({
        "endpoint": run.url, "model": run.model, "api": run.api,
        "workload_from": result.source.origin if result.source else "flags",
        "input_tokens_mean": round(float(np.mean([r.input_tokens for r in run.records])), 3) if run.records else None,
        "output_tokens_mean": round(float(np.mean([r.output_tokens for r in done])), 3) if done else None,
        "approximate_tokens": s.approximate_tokens,
        "ttft_any_ms": distribution([r.ttft_any for r in done if r.ttft_any is not None], _COLS[1:]).to_json(),
        "client_queue_ms": distribution(run.client_queue_s, _COLS[1:]).to_json(),
        "client_loop_lag_ms": distribution(run.loop_lag_s, _COLS[1:]).to_json(),
        "server": run.server, "wall_s": round(run.wall_s, 6),
    })
    return out


def _server_line(server: dict[str, dict[str, float]]) -> str:
    return ", ".join(f"{k.upper()} {v['mean_ms']:,.1f} ms (n={v['n']})" for k, v in server.items())


def print_endpoint(console: Console, r: dict[str, Any]) -> None:
    """The endpoint, what only the client sees, then the same table and verdict as a simulated run."""
    console.print(f"{r['endpoint']}: model {r['model']} over the {r['api']} API, workload from {r['workload_from']}; "
                  f"{r['load']['warmup']} warm-up request(s) not measured")
    extra = Table(title_justify="left")
    extra.add_column("client (ms)")
    for c in _COLS[1:]:
        extra.add_column(c, justify="right")
    extra.add_column("n", justify="right")
    for key, label in (("ttft_any_ms", "first event of any kind"), ("client_queue_ms", "client queue"),
                       ("client_loop_lag_ms", "client event-loop lag")):
        d = r[key]
        extra.add_row(label, *(_ms(d.get(c)) for c in _COLS[1:]), str(d["n"]))
    console.print(extra)
    if r["server"]:
        console.print("the engine's own /metrics (means): " + _server_line(r["server"]))
    print_bench(console, r)


PLOTS = ("latency-cdf", "throughput")


def plot_names(out: Path) -> list[str]:
    """The names of the PNG plots written beside the markdown report `out`."""
    return [f"{out.stem}-{what}.png" for what in PLOTS]


def _plots(result: Any, out: Path) -> tuple[dict[str, bytes], str | None]:
    """PNG plots beside `out` (latency CDFs, throughput over time): name -> bytes, or why there are none."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return {}, "plots need matplotlib: pip install 'infra[plots]'"
    import io

    import numpy as np

    records = [r for r in result.run.records if r.ok]
    if not records:
        return {}, "no request completed"
    names = dict(zip(PLOTS, plot_names(out)))
    plots: dict[str, bytes] = {}

    def save(fig: Any, what: str) -> None:
        buf = io.BytesIO()
        fig.tight_layout()
        fig.savefig(buf, format="png", metadata={"Software": None})
        plt.close(fig)
        plots[names[what]] = buf.getvalue()

    fig, ax = plt.subplots(figsize=(7, 4), dpi=100)
    series = {"TTFT": [r.ttft for r in records], "TPOT": [t for r in records if (t := r.tpot) is not None],
              "ITL": [g for r in records for g in r.itl], "E2E": [r.e2e for r in records]}
    for label, values in series.items():
        if values:
            v = np.sort(np.asarray(values, dtype=float)) * 1000
            ax.plot(v, np.arange(1, v.size + 1) / v.size, label=f"{label} (n={v.size})")
    ax.set_xscale("log")
    ax.set(xlabel="latency (ms)", ylabel="fraction of samples", title="latency CDFs")
    ax.grid(True, alpha=0.3)
    ax.legend()
    save(fig, "latency-cdf")
    t0 = min(r.t_send for r in result.run.records)
    ends = np.asarray([r.end - t0 for r in records])
    edges = np.arange(0.0, np.floor(ends.max()) + 2.0)
    done, _ = np.histogram(ends, bins=edges)
    toks, _ = np.histogram(ends, bins=edges, weights=np.asarray([r.output_tokens for r in records], dtype=float))
    fig, ax = plt.subplots(figsize=(7, 4), dpi=100)
    ax.step(edges[:-1], done, where="post", label="completed requests/s")
    ax2 = ax.twinx()
    ax2.step(edges[:-1], toks, where="post", color="tab:orange", label="output tokens/s")
    ax.set(xlabel="seconds since the first request (1 s buckets, by completion)", ylabel="requests/s",
           title="throughput over time")
    ax2.set_ylabel("output tokens/s")
    ax.grid(True, alpha=0.3)
    handles, labels = ax.get_legend_handles_labels()
    more, more_labels = ax2.get_legend_handles_labels()
    ax.legend(handles + more, labels + more_labels, loc="lower center")
    save(fig, "throughput")
    return plots, None


def endpoint_markdown(result: Any, r: dict[str, Any], out: Path) -> dict[str, str | bytes]:
    """A markdown report to write at `out`, with PNG plots beside it (when matplotlib is installed): the files by
    their names in `out`'s directory."""
    plots, why = _plots(result, out)
    load = r["load"]
    how = f"{load['rate_rps']:g} req/s ({load['arrival']})" if "rate_rps" in load else \
        f"{load.get('concurrency')} clients (closed loop)"
    lines = [f"# Benchmark of {r['endpoint']}", "",
             f"Model `{r['model']}` over the {r['api']} API; workload from {r['workload_from']}: {load['sent']} "
             f"request(s) at {how} after {load['warmup']} warm-up.", "",
             "| metric (ms) | n | " + " | ".join(_COLS) + " |", "|---|---:|" + "---:|" * len(_COLS)]
    for metric in ("ttft", "tpot", "itl", "e2e", "ttft_any", "client_queue"):
        d = r[f"{metric}_ms"]
        lines.append(f"| {metric} | {d['n']} | " + " | ".join(_ms(d.get(c)) for c in _COLS) + " |")
    lines += ["", f"Completed {r['completed']}, failed {r['failed']} over {r['duration_s']:.2f} s: "
                  f"{r['request_throughput']:.3f} req/s, {r['output_token_throughput']:,.1f} output tok/s; goodput "
                  f"{r['goodput_rps']:.3f} req/s, attainment {r['attainment']:.1%}.", ""]
    if r["server"]:
        lines += ["The engine's own `/metrics` (means over the measured requests): " + _server_line(r["server"])
                  + ".", ""]
    v = r["verdict"]
    if v["objectives"]:
        lines += ["| objective | target ms | measured ms | 95% CI | predicted ms | verdict |",
                  "|---|---:|---:|---|---:|---|"]
        lines += [f"| {o['key']} | {_ms(o['target_ms'])} | {_val(o, 'measured_ms')} | {_ci(o)} | "
                  f"{_val(o, 'predicted_ms')} | {o['verdict']} |" for o in v["objectives"]]
        lines.append("")
    failures = _failures(v)
    lines += ([f"{failures[0].upper()}{failures[1:]}.", ""] if failures else [])
    lines += [f"**Verdict: {v['overall']}**", ""] + [f"- {n}" for n in r["notes"]] + [""]
    lines += [f"![{p}]({p})" for p in plots] if plots else [f"_No plots: {why}._"]
    return {out.name: "\n".join(lines) + "\n", **plots}


__all__ = ["endpoint_json", "endpoint_markdown", "plot_names", "print_bench", "print_endpoint",
           "print_pipeline_bench", "print_verification", "verification_markdown"]

