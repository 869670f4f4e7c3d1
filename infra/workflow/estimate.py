"""The performance of given deployments under given workloads (`infra estimate`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from infra.catalog.loader import load_catalog
from infra.errors import InfraError, Location
from infra.perf.cases import case_from, read_cases, run_case, run_cases
from infra.perf.correction import load_calibration


def estimate(case: dict[str, Any], catalog_dirs: tuple[Path, ...] = (),
             calibration: str | Path | None = None) -> dict[str, Any]:
    """Predicted metrics (or goodput capacity) of one deployment under one workload, as JSON-ready data.

    `case` holds the fields of `infra.perf.cases.EstimateCase` (the same keys as `infra estimate --cases`);
    `calibration` a file of `infra calibrate` whose corrections apply where they match the deployment."""
    cal = load_calibration(calibration) if calibration is not None else None
    return run_case(case_from(case, Location(path="")), load_catalog(catalog_dirs), cal)


def estimate_cases(path: str | Path, catalog_dirs: tuple[Path, ...] = (),
                   calibration: str | Path | None = None) -> list[dict[str, Any]]:
    """One result per line of a JSONL file of cases; a line that fails gives `{"line": n, "error": ...}`. The
    cases' loads, open and closed, are predicted together in vector passes where there are enough of them (the
    same results as one by one)."""
    catalog = load_catalog(catalog_dirs)
    cal = load_calibration(calibration) if calibration is not None else None
    lines: list[int] = []
    cases = []
    out: dict[int, dict[str, Any]] = {}
    for n, obj in read_cases(Path(path)):
        try:
            cases.append(case_from(obj, Location(str(path), n, 1)))
            lines.append(n)
        except InfraError as exc:
            out[n] = {"line": n, "error": "; ".join(str(p) for p in exc.problems)}
    for n, result in zip(lines, run_cases(cases, catalog, cal)):
        out[n] = ({"line": n, "error": "; ".join(str(p) for p in result.problems)} if isinstance(result, InfraError)
                  else {"line": n, **result})
    return [out[n] for n in sorted(out)]
