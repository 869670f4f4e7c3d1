"""Verifying a deployed plan (`infra verify`): measure it, judge it, calibrate on it, plan again."""

from __future__ import annotations

import dataclasses
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from infra.bench.measurements import earlier_measurements
from infra.bench.replan import Run, changes, plan_loads
from infra.bench.run import pick_service, saved_text
from infra.bench.window_verdict import judge_window, pooled_prediction
from infra.errors import InfeasibleError, InfraError, Location, Problem
from infra.files import plan_writes, write_files
from infra.perf.correction import CalibrationFile
from infra.planner.types import DeploymentPlan, load_plan
from infra.workflow.bench import bench_endpoint
from infra.workflow.calibrate import calibrate
from infra.workflow.observe import ObserveResult, observe
from infra.workflow.plan import plan

OBSERVED_WINDOW_S = 3600.0
"""The window of its own traffic a deployment is verified on when none is given: the hour before --end."""


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
    observed: ObserveResult | None = None
    """The window of the deployment's own traffic it was verified on, where it was (`--prometheus`)."""


def _observed(plan_path: str | Path, plan_doc: DeploymentPlan, name: str, allocation: int | None, prometheus: str,
              keep: Path, scratch: Path, *, labels: str | None, seconds: float | None, end: str | None,
              step: float | None, model_name: str | None, catalog_dirs: tuple[Path, ...], force: bool
              ) -> tuple[Run, ObserveResult]:
    """The service's own traffic over a window Prometheus has kept, written as `measurements/observed.jsonl`
    under `keep` (by way of `scratch`, so that it is recorded as infra's like the benchmarks' files), and its
    objectives judged on the engines' histograms, each predicted at the load it served (several windows' predictions
    pooled as their requests are; none where the model has a window's load past what the deployment sustains)."""
    got = observe(None, OBSERVED_WINDOW_S if seconds is None else seconds, scratch / "observed.jsonl",
                  plan=plan_path, service=name, allocation=allocation, model_name=model_name,
                  catalog_dirs=catalog_dirs, prometheus=prometheus, labels=labels, end=end, step=step)
    written = write_files(keep, {"measurements/observed.jsonl": got.written.read_text(encoding="utf-8")},
                          force=force)[0]
    got = dataclasses.replace(got, written=written)
    svc = next(s for s in plan_doc.spec.services if s.name == name)
    predicted = None
    if all(p is not None for p in got.predicted):
        # Several windows are judged together: their predictions are pooled as their requests are.
        predicted = got.predicted[0] if len(got.predicted) == 1 else pooled_prediction(
            [p for p in got.predicted if p is not None], [obs.requests for obs, _ in got.windows],
            [obs.requests * max(obs.osl - 1, 0.0) for obs, _ in got.windows])
    judged, overall = judge_window(got.observation, {**svc.objectives, **svc.attainment_objectives}, predicted)
    return Run("observed", got.observation.rate, None, tuple(judged), overall, observed=got.observation,
               predicted=predicted), got


def verify(plan_path: str | Path, url: str | None, *, service: str | None = None, allocation: int | None = None,
           intent: str | Path | None = None, requests: int | None = None, duration_s: float | None = None,
           model: str | None = None, api_kind: str = "chat", timeout_s: float = 60.0, warmup: int = 1, seed: int = 0,
           write: str | Path | None = None, catalog_dirs: tuple[Path, ...] = (),
           progress: Callable[[int, int, str], None] | None = None, force: bool = False,
           prometheus: str | None = None, labels: str | None = None, end: str | None = None,
           step: float | None = None) -> VerifyResult:
    """Measure a deployed plan's service, judge every objective on the measurements, calibrate on them
    (`calibrate`, together with the still-readable measurement files of the calibration the plan was made with),
    plan the intent again with that calibration and say what would change.

    Measured at `url` by sending its planned load (the peak, and the baseline when the workload has one), or,
    with `prometheus`, on its own traffic: the `duration_s` before `end` (the last hour by default) of the series
    the `labels` matchers select, read from the Prometheus server that scrapes its engines (`observe`; `step`
    splits it into load points; `model` keeps one served model's series), its objectives judged on the engines'
    latency histograms (`infra.bench.window_verdict`). `allocation` names the one allocation of a service of
    several that is measured on its own (at its share of the load). With `write`, writes `measurements/*.jsonl`,
    `calibration.yaml` and the new plan (`plan/`) there (each measurement as soon as it is taken, for it cannot
    be taken again; files infra did not write there are replaced only with `force`). `progress(done, total,
    load)` hears each load's requests as they complete (`load` "peak" or "baseline")."""
    if (url is None) == (prometheus is None):
        said = "nothing to measure" if url is None else "verify measures one way"
        raise InfraError(Problem(said, Location(path="--endpoint"),
                                 "give --endpoint URL (send the planned load) or --prometheus URL (read the "
                                 "deployment's own traffic), one of them"))
    if prometheus is not None and requests is not None:
        raise InfraError(Problem("--requests sends load", Location(path="--prometheus"),
                                 "leave --requests out to verify on the traffic served (--duration sets its "
                                 "window), or give --endpoint to send load"))
    if prometheus is None and (labels, end, step) != (None, None, None):
        flag = "--selector" if labels is not None else "--end" if end is not None else "--step"
        raise InfraError(Problem(f"{flag} reads Prometheus series", Location(path="--prometheus"),
                                 "give --prometheus URL instead of --endpoint, or leave it out"))
    plan_doc = load_plan(plan_path)
    name = pick_service(plan_doc, service, plan_path)
    intent_path = Path(intent) if intent is not None else Path(plan_doc.spec.provenance.intent)
    out = Path(write) if write is not None else None
    loads = plan_loads(plan_doc, name, allocation) if prometheus is None else [("observed", None, None)]
    if out is not None:  # refused before minutes of measuring, not after
        plan_writes(out, {**{f"measurements/{label}.jsonl": None for label, _, _ in loads},
                          "calibration.yaml": None}, force=force)
        plan_writes(out / "plan", {"plan.yaml": None, "report.md": None}, force=force)
    observed = None
    with tempfile.TemporaryDirectory(prefix="infra-verify-") as tmp:
        keep = out if out is not None else Path(tmp) / "verify"
        runs, files = [], []
        if prometheus is not None:
            run, observed = _observed(plan_path, plan_doc, name, allocation, prometheus, keep, Path(tmp),
                                      labels=labels, seconds=duration_s, end=end, step=step, model_name=model,
                                      catalog_dirs=catalog_dirs, force=force)
            runs.append(run)
            files.append(observed.written)
        for label, rate, clients in loads if prometheus is None else ():
            result = bench_endpoint(str(url), model=model, api=api_kind, rate=rate, concurrency=clients,
                                    requests=requests, duration_s=duration_s, plan=plan_path, service=name,
                                    warmup=warmup, timeout_s=timeout_s, seed=seed,
                                    progress=None if progress is None else
                                    (lambda done, total, label=label: progress(done, total, label)))
            rel = f"measurements/{label}.jsonl"
            write_files(keep, {rel: saved_text(result.bench)}, force=force)
            files.append(keep / rel)
            runs.append(Run.of_bench(label, rate, clients, result.bench))
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
    passed = not failures and all(r.overall != "fail" for r in runs)
    return VerifyResult(name, runs, cal, replanned, failures + notes + changes(plan_doc, replanned, name, runs),
                        passed, written, observed)
