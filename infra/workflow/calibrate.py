"""Fitting corrections of the performance model to measurements (`infra calibrate`)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from infra.bench.measurements import measured_deployment, read_measurements
from infra.catalog.loader import load_catalog
from infra.errors import InfraError, Location, Problem
from infra.files import write_file
from infra.perf.correction import CalibrationFile, dump
from infra.perf.recalibrate import document, prepare
from infra.planner.types import load_plan


@dataclass(frozen=True)
class CalibrateResult:
    """A calibration fitted to measurements: the file's content and text, and where it was written."""

    doc: CalibrationFile
    """`infra.perf.correction.CalibrationFile`."""
    text: str
    written: Path | None


def calibrate(measurements: list[str | Path], output: str | Path | None = None, *, name: str | None = None,
              plan: str | Path | None = None, service: str | None = None, allocation: int | None = None,
              deployment: dict[str, Any] | None = None, catalog_dirs: tuple[Path, ...] = (),
              force: bool = False) -> CalibrateResult:
    """Fit corrections of the performance model to measured load points (`infra.perf.recalibrate`) and, with
    `output`, write the calibration file there. Files that do not record the deployment they measured take it
    from `plan` (its `service`) and the `deployment` fields given (an estimate case's: model, device, framework,
    precision, tp ...), which override the plan's. An existing `output` with other content is replaced only with
    `force`."""
    if not measurements:
        raise InfraError(Problem("no measurement files given", Location(path="MEASUREMENTS"),
                                 "give the files of `infra bench --save`, a benchmark's results or a silicon CSV"))
    catalog = load_catalog(catalog_dirs)
    base = measured_deployment(load_plan(plan) if plan is not None else None, plan, service, allocation, deployment)
    sources = [read_measurements(p, base, catalog) for p in measurements]
    points = [m for s in sources for m in s.points]
    rows, skipped = prepare(points, catalog)
    for where, why in skipped:
        for s in sources:
            if where.startswith(s.path):
                s.skipped.append(f"{where}: {why}")
    if not rows:
        first = next((x for s in sources for x in s.skipped), "")
        raise InfraError(Problem(f"no measured point the performance model can replay; {first}",
                                 Location(str(measurements[0])), "give measurements of deployments that fit "
                                 "their devices, at loads they sustain"))
    label = name or (Path(output).stem if output is not None else "calibration")
    doc = document(label, rows, [s.record() for s in sources])
    text = dump(doc)
    if output is not None:
        write_file(output, text, force=force)
    return CalibrateResult(doc, text, Path(output) if output is not None else None)
