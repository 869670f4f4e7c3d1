"""How a benchmark run and a plan's verification are shown: the terminal table and report.md's section.

Both take the JSON forms (`BenchResult.to_json()`, the plan's `verification`), so a saved run renders the same.
"""

from __future__ import annotations

import math
from typing import Any

from rich.console import Console
from rich.table import Table

_COLS = ("mean", "p50", "p90", "p99")
_STYLE = {"pass": "green", "fail": "red", "inconclusive": "yellow"}


def _ms(v: Any) -> str:
    if v is None:
        return "-"
    if v == "inf" or (isinstance(v, float) and math.isinf(v)):
        return "inf"
    return f"{v:,.1f}" if v < 10_000 else f"{v / 1000:,.1f}s"


def _ci(ci: list[Any] | None) -> str:
    return "-" if not ci else f"{_ms(ci[0])} .. {_ms(ci[1])}"


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
            t.add_row(*cells, f"{pct} <= {_ms(o['target_ms'])}", f"{_ms(o['measured_ms'])} ({_ci(o['ci_ms'])})",
                      _ms(o["predicted_ms"]), f"[{style}]{o['verdict']}[/{style}]")
    console.print(t)
    console.print(f"completed {r['completed']}, failed {r['failed']} over {r['duration_s']:.1f} s: "
                  f"{r['request_throughput']:.3f} req/s, {r['output_token_throughput']:,.0f} output tok/s; "
                  f"goodput {r['goodput_rps']:.3f} req/s, attainment {r['attainment']:.1%} "
                  f"(95% CI {verdict['attainment_ci'][0]:.1%} .. {verdict['attainment_ci'][1]:.1%})")
    for o in verdict["objectives"]:
        if o["verdict"] != "pass":
            console.print(f"{o['key']}: {o['verdict']}: {o['reason']}")
    for note in r.get("notes") or []:
        console.print(f"note: {note}")
    style = _STYLE[verdict["overall"]]
    console.print(f"verdict: [{style}]{verdict['overall'].upper()}[/{style}]")


def print_verification(console: Console, v: dict[str, Any]) -> None:
    """One line per round: its verdict, the objectives that did not pass, and why the loop stopped."""
    for rnd in v["rounds"]:
        style = _STYLE[rnd["verdict"]]
        misses = "; ".join(f"{s['service']} {o['key']} {_ms(o['measured_ms'])}ms vs {_ms(o['target_ms'])}ms "
                           f"({o['verdict']})" for s in rnd["services"] for o in s["objectives"]
                           if o["verdict"] != "pass")
        console.print(f"verification round {rnd['round']} ({v['method']}, {v['requests']} requests per service): "
                      f"[{style}]{rnd['verdict']}[/{style}]" + (f": {misses}" if misses else ""))
        if rnd.get("corrections"):
            console.print("  re-planned with objectives tightened: " + ", ".join(
                f"{c['service']} {c['objective']} x{c['scale']:g}" for c in rnd["corrections"]))
        if rnd.get("outcome"):
            console.print(f"  {rnd['outcome']}")
    if len(v["rounds"]) > 1:
        console.print(f"kept the plan of round {v['plan_round']}: {v['verdict']}")


def verification_markdown(v: dict[str, Any]) -> str:
    """report.md's section on a plan's verification: each round, per service and objective."""
    method = (f"Method: {v['method']} of {v['requests']} requests per service at the intent's peak workload "
              f"(seed {v['seed']}); {len(v['rounds'])} round(s); this is the plan of round {v['plan_round']}, "
              f"verdict **{v['verdict']}**.")
    out = ["## Verification", "", method, ""]
    for rnd in v["rounds"]:
        out.append(f"### Round {rnd['round']}: {rnd['verdict']}")
        out.append("")
        out.append("| service | objective | target ms | predicted ms | measured ms | 95% CI | verdict |")
        out.append("|---|---|---:|---:|---:|---|---|")
        for svc in rnd["services"]:
            for o in svc["objectives"]:
                out.append(f"| {svc['service']} | {o['key']} | {_ms(o['target_ms'])} | {_ms(o['predicted_ms'])} | "
                           f"{_ms(o['measured_ms'])} | {_ci(o['ci_ms'])} | {o['verdict']} |")
        out.append("")
        for svc in rnd["services"]:
            extra = "; ".join(svc.get("notes", []))
            out.append(f"- {svc['service']}: attainment {svc['attainment']:.1%}, goodput {svc['goodput_rps']:.3f} "
                       f"req/s, {svc['failed']} failed" + (f"; {extra}" if extra else ""))
        if rnd.get("corrections"):
            fixes = ", ".join(f"{c['service']} {c['objective']} x{c['scale']:g}" for c in rnd["corrections"])
            out.append(f"- corrections for the next round (objective used in scoring, scaled): {fixes}")
        if rnd.get("outcome"):
            out.append(f"- {rnd['outcome']}")
        out.append("")
    return "\n".join(out)


__all__ = ["print_bench", "print_verification", "verification_markdown"]
