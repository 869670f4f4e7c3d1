"""What `infra verify` prints: each measured load's verdict, the calibration fitted, and what re-planning changed."""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.table import Table

from infra.report.observe import observe_json


def _run_json(run: Any) -> dict[str, Any]:
    if run.bench is not None:
        return {**run.bench.to_json(), "label": run.label, "planned_load": run.load()}
    return {"label": run.label, "load": run.load(),
            "verdict": {"overall": run.overall, "objectives": [o.to_json() for o in run.objectives]}}


def verify_json(result: Any) -> dict[str, Any]:
    return {"service": result.service, "passed": result.passed,
            "runs": [_run_json(r) for r in result.runs],
            # The window's own file is listed under `written` where it was kept (--write), not at a scratch path.
            "observed": ({k: v for k, v in observe_json(result.observed).items() if k != "written"}
                         if result.observed is not None else None),
            "calibration": (result.calibration.model_dump(mode="json", by_alias=True, exclude_none=True)
                            if result.calibration is not None else None),
            "replanned": result.replanned.document() if result.replanned is not None else None,
            "changes": list(result.changes),
            "written": [str(p) for p in result.written]}


def _measured(o: Any, run: Any) -> str:
    """What was measured: the value, or for a window of traffic whose buckets do not resolve it, its bucket."""
    if o.measured_ms is not None:
        return f"{o.measured_ms:,.1f} ms"
    if run.observed is not None and o.ci_ms is not None:
        lo, hi = o.ci_ms
        return f"{lo:,.0f}–{hi:,.0f} ms" if hi != float("inf") else f"> {lo:,.0f} ms"
    return "—"


def print_verify(console: Console, result: Any) -> None:
    obs = result.observed
    if obs is not None:
        o = obs.observation
        console.print(f"{o.source}: {o.requests:,} requests finished in {o.seconds:g} s until {o.date} "
                      f"({o.rate:.4g}/s), prompts {o.isl:,.0f} tokens, answers {o.osl:,.0f} on average")
        for note in obs.about:
            console.print(f"note: {note}")
    t = Table(title=f"{result.service}: measured against the plan", title_justify="left")
    for col in ("load", "objective", "target", "predicted", "measured", "measured/predicted", "verdict"):
        t.add_column(col, justify="left" if col in ("load", "objective", "verdict") else "right")
    for n, run in enumerate(result.runs):
        for o in run.objectives:
            # The plan predicts its peak; at a lighter load its figures are bounds, not predictions. A window of
            # traffic is predicted at the load it served.
            predicted = o.predicted_ms if n == 0 else None
            ratio = (f"{o.measured_ms / predicted:.2f}x" if o.measured_ms is not None and predicted else "—")
            t.add_row(f"{run.label} {run.load()}", o.key, f"{o.target_ms:,.1f} ms",
                      "—" if predicted is None else f"{predicted:,.1f} ms", _measured(o, run), ratio, o.verdict)
    console.print(t)
    if obs is not None:
        basis = obs.basis or "the packaged prior"
        said = ("not predicted: the model has a window's load past what the deployment sustains"
                if not all(obs.predicted) else f"predicted at the load it served, with {basis}"
                if len(obs.windows) == 1 else f"predicted window by window at the loads they served, with {basis}, "
                f"and pooled as their {len(obs.windows)} windows' requests are")
        console.print(f"{said}; judged on the engines' histograms, which place a percentile within its bucket")
    cal = result.calibration
    if cal is not None:
        before, after, unseen = cal.error.prior, cal.error.calibrated, cal.error.leave_one_load_out
        console.print(f"calibration: {len(cal.points)} measured load point(s); mean TTFT off by "
                      f"{100 * (before.ttft_median_ape or 0):.1f}% before, {100 * (after.ttft_median_ape or 0):.1f}% "
                      f"after; TPOT {100 * (before.tpot_median_ape or 0):.1f}% before, "
                      f"{100 * (after.tpot_median_ape or 0):.1f}% after"
                      + ("" if unseen is None else
                         f"; each measured load predicted from the others: TTFT "
                         f"{100 * (unseen.ttft_median_ape or 0):.1f}%, TPOT {100 * (unseen.tpot_median_ape or 0):.1f}%"
                         " off"))
        tails = cal.error.tails
        if tails is not None:
            pcts = sorted({t.percentile for p in cal.points for t in p.tails or ()}, key=lambda p: float(p[1:]))
            console.print(f"measured percentiles ({', '.join(pcts)}): TTFT off by "
                          f"{100 * (tails.means_only.ttft_median_ape or 0):.1f}% with the model's spread around the "
                          f"calibrated means, {100 * (tails.calibrated.ttft_median_ape or 0):.1f}% with the measured "
                          f"one; TPOT {100 * (tails.means_only.tpot_median_ape or 0):.1f}% -> "
                          f"{100 * (tails.calibrated.tpot_median_ape or 0):.1f}%")
        for note in cal.notes:
            console.print(f"calibration note: {note}")
    for line in result.changes:
        console.print(line)
    for path in result.written:
        console.print(f"wrote {path}")
    if result.observed is not None:
        open_ = sum(o.verdict == "inconclusive" for r in result.runs for o in r.objectives)
        console.print("verification failed: an objective fails on the traffic served" if not result.passed else
                      f"no objective fails on the traffic served; {open_} inconclusive" if open_ else
                      "objectives hold on the traffic served")
        return
    console.print("objectives hold" if result.passed else
                  "verification failed: an objective or the requests fail at the planned load")
