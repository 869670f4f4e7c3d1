"""What `infra calibrate` prints: the files read, the corrections fitted and the error they leave."""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.table import Table

from infra.perf.serving import z_of


def _pct(v: float | None) -> str:
    return "—" if v is None else f"{100 * v:.1f}%"


def _tails(spread: Any) -> str:
    if spread is None:
        return "—"
    return " / ".join("—" if t is None else " ".join(
        ([f"x{t.scale:.2g}"] if t.scale != 1 else []) + ([f"+{100 * t.add * z_of('p99'):.0f}%"] if t.add else []))
        or "x1" for t in (spread.ttft, spread.tpot))


def _errors(console: Console, title: str, blocks: tuple[tuple[str, Any], ...]) -> None:
    e = Table(title=title, title_justify="left")
    for col in ("", "points", "TTFT median", "TTFT p90", "TPOT median", "TPOT p90"):
        e.add_column(col, justify="left" if not col else "right")
    for label, block in blocks:
        if block is None:
            continue
        e.add_row(label, str(block.n), _pct(block.ttft_median_ape), _pct(block.ttft_p90_ape),
                  _pct(block.tpot_median_ape), _pct(block.tpot_p90_ape))
    console.print(e)


def calibration_json(doc: Any) -> dict[str, Any]:
    """The calibration as the file holds it."""
    return doc.model_dump(mode="json", by_alias=True, exclude_none=True)


def print_calibration(console: Console, doc: Any, written: Any) -> None:
    for s in doc.sources:
        console.print(f"{s.path}: {s.format}, {s.points} load point(s) used, {len(s.skipped)} skipped")
        for why in s.skipped[:10]:
            console.print(f"  skipped {why}")
        if len(s.skipped) > 10:
            console.print(f"  ... and {len(s.skipped) - 10} more (all listed in the file)")
    t = Table(title="corrections (multipliers of the packaged model's figures)", title_justify="left")
    tails = any(n.tails for n in doc.corrections)
    numeric = ("step time", "TTFT", *(("tails",) if tails else ()), "points", "deployments", "weight")
    for col in ("level", "key", *numeric, "measured"):
        t.add_column(col, justify="right" if col in numeric else "left")
    for n in doc.corrections:
        when = "undated" if not n.first else n.first if n.first == n.last else f"{n.first}..{n.last}"
        spread = (_tails(n.tails),) if tails else ()
        t.add_row(n.level, n.key, f"x{n.step:.3g}", f"x{n.ttft:.3g}", *spread, str(n.rows), str(n.deployments),
                  f"{n.weight:.2f}", when)
    console.print(t)
    if any(n.level != "deployment" and n.ttft != 1 for n in doc.corrections):
        console.print("TTFT above the deployment level: what keeps the prior's TTFT under that level's step time (a "
                      "deployment's own TTFT miss does not carry to other workloads or layouts)")
    if tails:
        console.print("tails: what the measured percentiles make of the model's TTFT / TPOT spread: x the share "
                      "of it kept, + what they add beyond it at p99, in means of each")
    _errors(console, "error of mean TTFT / TPOT on these measurements",
            (("packaged prior", doc.error.prior), ("calibrated (in-sample)", doc.error.calibrated),
             ("leave one deployment out", doc.error.leave_one_out),
             ("leave one load out", doc.error.leave_one_load_out)))
    if doc.error.tails is not None:
        pcts = sorted({t.percentile for p in doc.points for t in p.tails or ()}, key=lambda p: float(p[1:]))
        _errors(console, f"error of measured TTFT / TPOT percentiles ({', '.join(pcts)}: the highest each point's "
                "requests support)", (("packaged prior", doc.error.tails.prior),
                                      ("calibrated means, model's spread", doc.error.tails.means_only),
                                      ("calibrated (in-sample)", doc.error.tails.calibrated),
                                      ("leave one load out", doc.error.tails.leave_one_load_out)))
    if doc.error.leave_one_out is None:
        console.print("leave one deployment out: needs measurements of two deployments or workloads")
    for note in doc.notes:
        console.print(f"note: {note}")
    if written is not None:
        console.print(f"wrote {written}")
