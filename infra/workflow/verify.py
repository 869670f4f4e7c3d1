"""Verifying a deployed plan (`infra verify`): measure it, judge it, calibrate on it, plan again."""

from __future__ import annotations

import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from infra.bench.measurements import earlier_measurements
from infra.bench.replan import Run, changes, plan_loads
from infra.bench.run import pick_service, saved_text
from infra.errors import InfeasibleError, InfraError
from infra.files import plan_writes, write_files
from infra.perf.correction import CalibrationFile
from infra.planner.types import DeploymentPlan, load_plan
from infra.workflow.bench import bench_endpoint
from infra.workflow.calibrate import calibrate
from infra.workflow.plan import plan


@dataclass(frozen=True)
class VerifyResult:
    """A deployed plan measured, judged, calibrated on and planned again."""

    service: str
    runs: list[Run]
    """`infra.bench.replan.Run` per load measured (peak, then baseline when the workload has one)."""
    calibration: CalibrationFile | None
    """`infra.perf.correction.CalibrationFile` fitted to the runs, or None when the service cannot be calibrated
    on (several allocations)."""
    replanned: DeploymentPlan | None
    """The plan made with that calibration (None when there is none, or the intent is infeasible with it)."""
    changes: list[str]
    """What re-planning changed and why, one line each."""
    passed: bool
    written: list[Path]


def verify(plan_path: str | Path, url: str, *, service: str | None = None, allocation: int | None = None,
           intent: str | Path | None = None, requests: int | None = None, duration_s: float | None = None,
           model: str | None = None, api_kind: str = "chat", timeout_s: float = 60.0, warmup: int = 1, seed: int = 0,
           write: str | Path | None = None, catalog_dirs: tuple[Path, ...] = (),
           progress: Callable[[int, int, str], None] | None = None, force: bool = False) -> VerifyResult:
    """Measure a deployed plan's service at its planned load (the peak, and the baseline when the workload has
    one), judge every objective on the measurements, calibrate on them (`calibrate`, together with the
    still-readable measurement files of the calibration the plan was made with), plan the intent again with that
    calibration and say what would change. `allocation` names the one allocation of a service of several that
    the endpoint serves on its own (measured at its share of the load). With `write`, writes
    `measurements/*.jsonl`, `calibration.yaml` and the new plan (`plan/`) there (each measurement as soon as it
    is taken, for it cannot be taken again; files infra did not write there are replaced only with `force`).
    `progress(done, total, load)` hears each load's requests as they complete (`load` "peak" or "baseline")."""
    plan_doc = load_plan(plan_path)
    name = pick_service(plan_doc, service, plan_path)
    intent_path = Path(intent) if intent is not None else Path(plan_doc.spec.provenance.intent)
    out = Path(write) if write is not None else None
    loads = plan_loads(plan_doc, name, allocation)
    if out is not None:  # refused before minutes of measuring, not after
        plan_writes(out, {**{f"measurements/{label}.jsonl": None for label, _, _ in loads},
                          "calibration.yaml": None}, force=force)
        plan_writes(out / "plan", {"plan.yaml": None, "report.md": None}, force=force)
    with tempfile.TemporaryDirectory(prefix="infra-verify-") as tmp:
        keep = out if out is not None else Path(tmp) / "verify"
        runs, files = [], []
        for label, rate, clients in loads:
            result = bench_endpoint(url, model=model, api=api_kind, rate=rate, concurrency=clients,
                                    requests=requests, duration_s=duration_s, plan=plan_path, service=name,
                                    warmup=warmup, timeout_s=timeout_s, seed=seed,
                                    progress=None if progress is None else
                                    (lambda done, total, label=label: progress(done, total, label)))
            rel = f"measurements/{label}.jsonl"
            write_files(keep, {rel: saved_text(result.bench)}, force=force)
            files.append(keep / rel)
            runs.append(Run(label, rate, clients, result.bench))
        cal, cal_path, replanned, notes = None, None, None, []
        earlier = earlier_measurements(plan_doc)
        if earlier:
            notes.append(f"calibrated together with {len(earlier)} earlier measurement file(s) of the calibration "
                         "the plan was made with")
        try:
            fitted = calibrate(earlier + files, name="calibration", plan=plan_path, service=name,
                               allocation=allocation, catalog_dirs=catalog_dirs)
            write_files(keep, {"calibration.yaml": fitted.text}, force=force)
            cal, cal_path = fitted.doc, keep / "calibration.yaml"
        except InfraError as exc:
            notes.append(f"not calibrated: {exc.problems[0].message}")
        if cal_path is not None:
            try:
                replanned = plan(intent_path, out / "plan" if out is not None else None, catalog_dirs=catalog_dirs,
                                 verify=True, seed=seed, calibration=cal_path, force=force).plan
            except InfeasibleError as exc:
                notes.append(f"re-planned with the calibration: infeasible: {exc.problems[0].message}")
    written = ([*files, out / "calibration.yaml"] if cal is not None else list(files)) if out is not None else []
    if out is not None and replanned is not None:
        written.append(out / "plan")
    failures = [why for r in runs if (why := r.failure())]
    passed = not failures and all(r.bench.verdict.overall != "fail" for r in runs)
    return VerifyResult(name, runs, cal, replanned, failures + notes + changes(plan_doc, replanned, name, runs),
                        passed, written)
