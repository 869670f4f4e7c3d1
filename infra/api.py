"""Library facade: what the command line does, callable from Python.

Each function takes paths or typed objects and returns typed results; printing is the CLI's business.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from infra.catalog.loader import Catalog, load_catalog
from infra.errors import EndpointError, InfeasibleError, InfraError, IntentError, Location, Problem, ValidationError
from infra.files import plan_writes, write_file, write_files
from infra.intent.loader import load_intent_file, load_profile_file, read_document
from infra.intent.profile import ClusterProfile
from infra.intent.resolve import CheckResult, ResolvedIntent, resolve

__all__ = ["Catalog", "CheckResult", "PlanResult", "check", "estimate", "estimate_cases", "load_catalog", "load_intent",
           "plan", "schema"]


def load_intent(path: str | Path, catalog_dirs: tuple[Path, ...] = (),
                calibration: str | Path | None = None) -> ResolvedIntent:
    """Read, validate and resolve an intent (and its cluster profile) against the catalog, with the user's
    calibration: the file given, else the one the cluster profile names (`spec.calibration`), else none."""
    import dataclasses
    import os

    from infra.perf.correction import load_calibration

    resolved = resolve(load_intent_file(Path(path)), load_catalog(catalog_dirs))
    named = resolved.loaded.cluster.calibration
    if calibration is None and named is not None:
        doc = resolved.loaded.cluster_document()
        ref = Path(named)
        # Normalised (`profiles/../calibrations/x.yaml` -> `calibrations/x.yaml`): plans record the path.
        calibration = ref if ref.is_absolute() else Path(os.path.normpath(doc.path.parent / ref))
        if not Path(calibration).is_file():
            raise IntentError(Problem(f"calibration {named!r} not found (looked at {calibration})",
                                      doc.locate(resolved.loaded.cluster_path() + ("calibration",)),
                                      "give the path of a file written by `infra calibrate`, relative to this "
                                      "profile"))
    if calibration is None:
        return resolved
    return dataclasses.replace(resolved, calibration=load_calibration(calibration))


def check(path: str | Path, catalog_dirs: tuple[Path, ...] = ()) -> CheckResult:
    """Validate an intent or a cluster profile file; raises IntentError listing every problem."""
    path = Path(path)
    model, _ = read_document(path)
    if isinstance(model, ClusterProfile):
        from infra.errors import CatalogError, IntentError, Problem

        profile, doc = load_profile_file(path)
        catalog = load_catalog(catalog_dirs)
        devices: dict[str, str] = {}
        problems: list[Problem] = []
        for i, pool in enumerate(profile.spec.pools):
            try:
                devices[pool.name] = catalog.device(pool.device).name
            except CatalogError as exc:
                problems += [Problem(p.message, doc.locate(("spec", "pools", i, "device")), p.fix)
                             for p in exc.problems]
        if problems:
            raise IntentError(problems)
        return CheckResult("ClusterProfile", profile=profile, devices=devices)
    return CheckResult("ServingIntent", intent=load_intent(path, catalog_dirs))


def schema(kind: str = "intent") -> dict[str, Any]:
    """JSON Schema of intent and cluster-profile files (`kind` "intent") or of calibration files
    ("calibration")."""
    from infra.intent.schema import intent_schema
    from infra.perf.correction import schema as calibration_schema

    return calibration_schema() if kind == "calibration" else intent_schema()


def estimate(case: dict[str, Any], catalog_dirs: tuple[Path, ...] = (),
             calibration: str | Path | None = None) -> dict[str, Any]:
    """Predicted metrics (or goodput capacity) of one deployment under one workload, as JSON-ready data.

    `case` holds the fields of `infra.perf.cases.EstimateCase` (the same keys as `infra estimate --cases`);
    `calibration` a file of `infra calibrate` whose corrections apply where they match the deployment."""
    from infra.perf.cases import case_from, run_case
    from infra.perf.correction import load_calibration

    cal = load_calibration(calibration) if calibration is not None else None
    return run_case(case_from(case, Location(path="")), load_catalog(catalog_dirs), cal)


def estimate_cases(path: str | Path, catalog_dirs: tuple[Path, ...] = (),
                   calibration: str | Path | None = None) -> list[dict[str, Any]]:
    """One result per line of a JSONL file of cases; a line that fails gives `{"line": n, "error": ...}`."""
    from infra.perf.cases import case_from, read_cases, run_cases
    from infra.perf.correction import load_calibration

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


@dataclass(frozen=True)
class PlanResult:
    """A solved intent: the DeploymentPlan as data, its report, and what was written."""

    plan: dict[str, Any]
    report: str
    considered: list[Any]
    written: list[Path]
    verification: dict[str, Any] | None = None
    """The plan's verification section when it was verified (`verdict` pass, fail or inconclusive)."""
    notes: tuple[str, ...] = ()
    """What the rendered manifests still need from the user (written with `output`)."""


def plan(path: str | Path, output: str | Path | None = None, *, top: int = 3,
         catalog_dirs: tuple[Path, ...] = (), progress: Any = None, objective: str = "cost",
         verify: bool = False, verify_requests: int | None = None, seed: int = 0,
         templates: str | Path | None = None, changes: list[dict[str, Any]] | None = None,
         calibration: str | Path | None = None, force: bool = False, target: str = "kubernetes") -> PlanResult:
    """Plan an intent: the cheapest deployment that meets every objective, or InfeasibleError (exit 2) with the
    conflict and the relaxations that would fix it. With `output`, writes plan.yaml, report.md and the rendered
    manifests (`manifests/`, from `templates` over the packaged ones) there, all or nothing, replacing only what
    infra wrote there before (`infra.files.write_files`; `force` overrules that check);
    `progress(done, total)` hears how many services have been scored. `objective` "goodput" plans for a fixed
    inventory: as much of the demand as fits, then the cheapest way to carry it. With `verify`, the plan is
    simulated and re-planned while objectives fail (`infra.bench.verify`); the result's `verification` says how
    it ended (`verdict` "fail" is exit 3 on the command line). `changes` (accepted edits of the intent,
    `infra.planner.types.Change` as data) are recorded in the plan's provenance. `calibration` is a file of
    `infra calibrate` whose corrections every estimate takes (else the cluster profile's, if it names one).
    `target` is the stack the manifests are for (`infra.render.render_tree`)."""
    from infra.catalog.targets import check_target
    from infra.planner.plan import build_plan
    from infra.report.plan import plan_markdown, plan_yaml

    check_target(target)
    resolved = load_intent(path, catalog_dirs, calibration)
    if output is not None:  # refused now rather than after the search
        plan_writes(output, {"plan.yaml": None, "report.md": None}, force=force)
    try:
        data, considered = build_plan(resolved, top=top, objective=objective, progress=progress)
        verification = None
        if verify:
            data, considered, verification = _verify(resolved, data, considered, top=top, objective=objective,
                                                     requests=verify_requests, seed=seed)
    except InfeasibleError as exc:
        if output is not None:
            from infra.report.plan import infeasible_markdown

            left = [n for n in ("plan.yaml", "manifests/") if (Path(output) / n.rstrip("/")).exists()]
            write_files(output, {"report.md": infeasible_markdown(
                resolved.loaded.intent.metadata.name, exc.problems, getattr(exc, "considered", []),
                " and ".join(left) or None)}, force=force)
        raise
    if changes:
        from infra.planner.types import DeploymentPlan

        data["spec"]["provenance"]["changes"] = changes
        DeploymentPlan.model_validate(data)
    report = plan_markdown(data, considered)
    if verification is not None:
        from infra.report.bench import verification_markdown

        report = report.rstrip("\n") + "\n\n" + verification_markdown(verification) + "\n"
    written: list[Path] = []
    notes: tuple[str, ...] = ()
    if output is not None:
        from infra.planner.types import DeploymentPlan
        from infra.render import render_tree

        out = Path(output)
        # Rendered and validated before anything is written, so that a template error or a broken rule leaves
        # the directory as it was.
        try:
            rendered = render_tree(DeploymentPlan.model_validate(data),
                                   templates=Path(templates) if templates is not None else None,
                                   catalog_dirs=tuple(catalog_dirs), plan_file=str(out / "plan.yaml"),
                                   target=target)
        except IntentError as exc:
            # The plan is not written: what the target refuses is told at the intent's service.
            raise IntentError([Problem(f"{p.message} (nothing was written)", _at_intent(resolved, data, p.location),
                                       p.fix) for p in exc.problems]) from None
        validation = _validate_rendered(rendered.files, plan_yaml(data), out, catalog_dirs)
        write_files(out, {"plan.yaml": plan_yaml(data), "report.md": report,
                          **{f"manifests/{rel}": text for rel, text in rendered.files.items()}},
                    force=force, prune=("manifests/",))
        written = [out / "plan.yaml", out / "report.md", out / "manifests"]
        notes = tuple(rendered.notes) + ((validation,) if validation else ())
    return PlanResult(data, report, considered, written, verification, notes)


def _at_intent(resolved: ResolvedIntent, data: dict[str, Any], where: Location) -> Location:
    """The intent's line of the service a location in the (unwritten) plan `data` names, else the intent file."""
    doc = resolved.loaded.document
    found = re.match(r"spec\.services\[(\d+)\]", where.path or "")
    services = data["spec"]["services"]
    if found and int(found.group(1)) < len(services):
        svc = services[int(found.group(1))]
        name = svc.get("pipeline") or svc["name"]
        names = [s.name for s in resolved.loaded.intent.spec.services]
        if name in names:
            return doc.locate(("spec", "services", names.index(name)))
    return Location(str(doc.path), 1, 1)


def _validate_rendered(files: dict[str, str], plan_text: str, out: Path, catalog_dirs: tuple[Path, ...]) -> str:
    """Validate a rendered tree against its plan in a scratch directory; raise ValidationError (exit 1) naming the
    files as they would be written under `out` when a rule breaks; otherwise a one-line summary."""
    import tempfile

    from infra.validators import validate_tree

    if not files:
        return ""
    with tempfile.TemporaryDirectory() as tmp:
        stage = Path(tmp) / "out"
        write_files(stage, {"plan.yaml": plan_text, **{f"manifests/{rel}": text for rel, text in files.items()}},
                    record=False)
        report = validate_tree(stage / "manifests", plan=stage / "plan.yaml", catalog_dirs=tuple(catalog_dirs))

        def where(path: str) -> str:
            return path.replace(str(stage), str(out), 1)

        if report.errors:
            raise ValidationError([Problem(f"{f.rule}: {f.object}: {f.message}",
                                           Location(where(f.file), f.line or None), f.fix or "re-render the plan")
                                   for f in report.errors])
    return (f"validated {report.objects} objects in {report.files} files against the plan: no errors, "
            f"{len(report.warnings)} warnings (`infra validate {out / 'manifests'} --plan {out / 'plan.yaml'}` "
            "lists them)")


def _verify(resolved: ResolvedIntent, data: dict[str, Any], considered: list[Any], *, top: int, objective: str,
            requests: int | None, seed: int) -> tuple[dict[str, Any], list[Any], dict[str, Any]]:
    """Simulate the plan and re-plan with corrections while objectives fail (the loop lives above the planner)."""
    from infra.bench.verify import VERIFY_REQUESTS, verify_plan
    from infra.planner.plan import build_plan

    def replan(corrections: Any) -> tuple[dict[str, Any], list[Any]]:
        return build_plan(resolved, top=top, objective=objective, corrections=corrections, explain=False)

    final, extra, section = verify_plan(data, replan, intent=str(resolved.loaded.document.path),
                                        catalog=resolved.catalog, requests=requests or VERIFY_REQUESTS, seed=seed,
                                        calibration=resolved.calibration)
    return final, extra if extra is not None else considered, section


def bench(*, simulate: str | Path | None = None, service: str | None = None, concurrency: int | None = None,
          rate: float | None = None, requests: int | None = None, input_tokens: int | None = None,
          output_tokens: int | None = None, seed: int = 0, intent: str | Path | None = None,
          save: str | Path | None = None, router: str | None = None, catalog_dirs: tuple[Path, ...] = (),
          calibration: str | Path | None = None, force: bool = False) -> Any:
    """Drive one service of a plan and judge it against its objectives: a `infra.bench.run.BenchResult` (for a
    pipeline service, a `infra.bench.pipeline.PipelineBench`, stage by stage).
    `simulate` names the plan to simulate (the embedded default source); `save` writes the measurements as JSON
    Lines that calibration reads back (replacing a file with other content only with `force`); `calibration` (a
    file of `infra calibrate`) corrects the simulated engines."""
    from infra.bench.run import DEFAULT_REQUESTS, check_load, simulate_service
    from infra.bench.run import save as save_run
    from infra.planner.types import load_plan

    if simulate is None:
        raise IntentError(Problem("nothing to benchmark", Location(path="--simulate"),
                                  "give --simulate PLAN (a plan.yaml from `infra plan`) or --endpoint URL"))
    from infra.perf.correction import load_calibration

    plan_doc = load_plan(simulate)
    cal = load_calibration(calibration) if calibration is not None else None
    if save is not None:
        write_file(save, None, force=force)
    pipelines = [p.service for p in plan_doc.spec.pipelines]
    if service is None and len(pipelines) == 1 and all(s.pipeline for s in plan_doc.spec.services):
        service = pipelines[0]
    if service is not None and service in pipelines:
        from infra.bench.pipeline import bench_pipeline

        if cal is not None:
            raise IntentError(Problem(f"--calibration corrects LLM engines; pipeline {service} is simulated stage by "
                                      "stage with the packaged figures", Location(path="--calibration"),
                                      "drop --calibration, or bench one LLM stage of the pipeline with --service"))
        for flag, value in (("--input-tokens", input_tokens), ("--output-tokens", output_tokens), ("--save", save)):
            if value is not None:
                raise IntentError(Problem(f"{flag} does not apply to pipeline {service}, whose stages take their "
                                          "lengths and work from the plan", Location(path=flag),
                                          f"drop {flag}, or bench one LLM stage of the pipeline with --service"))
        check_load(rate=rate, concurrency=concurrency, requests=requests)
        return bench_pipeline(plan_doc, service, requests=DEFAULT_REQUESTS if requests is None else requests,
                              seed=seed, rate=rate, clients=concurrency, catalog=load_catalog(catalog_dirs),
                              intent=intent, plan_path=simulate)
    result = simulate_service(plan_doc, service=service, requests=DEFAULT_REQUESTS if requests is None else requests,
                              seed=seed, rate=rate, concurrency=concurrency, input_tokens=input_tokens,
                              output_tokens=output_tokens, intent=intent, plan_path=simulate, router=router,
                              catalog=load_catalog(catalog_dirs), calibration=cal)
    if save is not None:
        save_run(result, save, force=force)
    return result


__all__ += ["bench"]


@dataclass(frozen=True)
class RenderResult:
    """Manifests of a plan: the files written (or that would be), and what the user must still do."""

    files: dict[str, str]
    notes: list[str]
    written: list[Path]


def render(plan_path: str | Path, output: str | Path | None = None, templates: str | Path | None = None,
           catalog_dirs: tuple[Path, ...] = (), *, force: bool = False, target: str = "kubernetes") -> RenderResult:
    """Render a plan.yaml into a kustomize tree (MANIFESTS.md) for `target` (kubernetes, dynamo, llm-d, kserve);
    with `output`, write it there all or nothing, replacing and deleting only what infra wrote there before
    (`infra.files.write_files`) unless `force`."""
    from infra.planner.types import load_plan
    from infra.render import render_tree

    from infra.catalog.targets import check_target

    check_target(target)
    plan_obj = load_plan(plan_path)
    if output is not None:
        plan_writes(output, {}, force=force)
    rendered = render_tree(plan_obj, templates=Path(templates) if templates is not None else None,
                           catalog_dirs=tuple(catalog_dirs), plan_file=str(plan_path), target=target)
    written = write_files(output, rendered.files, force=force, prune=("",)) if output is not None else []
    return RenderResult(rendered.files, rendered.notes, written)


def open_pr(intent: str | Path, repo: str | Path, *, plan_path: str | Path | None = None, root: str = "deploy",
            cluster: str | None = None, base: str = "main", branch: str | None = None, push: bool = False,
            github: str | None = None, github_api: str | None = None, allow_dirty: bool = False,
            sync: str | None = None, catalog_dirs: tuple[Path, ...] = (), body_file: str | Path | None = None,
            progress: Any = None, verify: bool = True, calibration: str | Path | None = None,
            force: bool = False, target: str = "kubernetes") -> Any:
    """Turn an intent's plan into a pull request on a GitOps repository: plan (or take `plan_path`, whose
    fingerprint must match the intent), render into `<root>/<service>/{base,overlays/<cluster>}`, keep the plan
    and intent under `<root>/.infra/<plan name>/`, commit on the PR branch when anything changed, and with `push`
    push it and open or update the PR (a GitHub token in GITHUB_TOKEN or GH_TOKEN). Returns
    `infra.gitops.pr.PrResult`."""
    import dataclasses
    import os

    from infra.gitops.github import DEFAULT_API
    from infra.gitops.pr import PrRequest, check_fingerprint, intent_records, preflight, prepare, reproduce_command
    from infra.planner.plan import fingerprint
    from infra.planner.types import DeploymentPlan, load_plan
    from infra.report.plan import plan_yaml

    token = (os.environ.get("GITHUB_TOKEN") or os.environ.get("GH_TOKEN")) if push else None
    req = PrRequest(repo=Path(repo), root=root, cluster=cluster, base=base, branch=branch, push=push, github=github,
                    github_api=github_api or os.environ.get("GITHUB_API_URL") or DEFAULT_API,
                    allow_dirty=allow_dirty, sync=sync, body_file=Path(body_file) if body_file else None,
                    force=force, token=token or None)
    from infra.catalog.targets import DEFAULT_TARGET, check_target

    check_target(target)
    req = dataclasses.replace(req, command=reproduce_command(str(intent), req, tuple(str(d) for d in catalog_dirs),
                                                             str(calibration) if calibration is not None else None)
                              + (f" --target {target}" if target != DEFAULT_TARGET else ""))
    preflight(req)  # a dirty or missing repository is refused before planning, which takes seconds
    resolved = load_intent(intent, catalog_dirs, calibration)
    if plan_path is not None:
        typed = load_plan(plan_path)
        check_fingerprint(typed, fingerprint(resolved), plan_path, str(intent))
    else:
        # The same plan `infra plan` makes, verified by default, so that the PR body carries the verdict.
        typed = DeploymentPlan.model_validate(plan(intent, catalog_dirs=catalog_dirs, progress=progress,
                                                   verify=verify, calibration=calibration).plan)

    def render_files(p: DeploymentPlan) -> tuple[dict[str, str], list[str]]:
        from infra.render import render_tree

        rendered = render_tree(p, catalog_dirs=tuple(catalog_dirs), target=target)
        return rendered.files, rendered.notes

    return prepare(typed, plan_yaml(typed.model_dump(mode="json", by_alias=True, exclude_none=True)), render_files,
                   intent_records(resolved), req)


def validate(path: str | Path, profile: str | Path | None = None, plan: str | Path | None = None,
             live: bool = False, catalog_dirs: tuple[Path, ...] = ()) -> Any:
    """Check a manifest file or tree: schema, kustomize, semantic and security rules; with `profile` (a
    ClusterProfile file) or `plan` (a plan.yaml, whose spec.cluster also serves as the profile) the cluster and
    plan-consistency rules; with `live` a server-side dry run. Returns an `infra.validators.Report`."""
    from infra.validators import validate_tree

    return validate_tree(path, profile=profile, plan=plan, live=live, catalog_dirs=catalog_dirs)
__all__ += ["bench_endpoint", "emulate"]


def bench_endpoint(url: str, *, model: str | None = None, api: str = "chat", concurrency: int | None = None,
                   rate: float | None = None, requests: int | None = None, duration_s: float | None = None,
                   input_tokens: int | None = None, output_tokens: int | None = None,
                   intent: str | Path | None = None, plan: str | Path | None = None, service: str | None = None,
                   slo: str | None = None, warmup: int = 1, timeout_s: float = 60.0, seed: int = 0,
                   ignore_eos: bool = True, min_tokens: bool = False, progress: Any = None,
                   max_failed: float | None = None, save: str | Path | None = None,
                   markdown: str | Path | None = None, force: bool = False) -> Any:
    """Drive load against an OpenAI-compatible endpoint and measure it (`infra.bench.endpoint.EndpointResult`).

    The workload and objectives come from a plan's or an intent's service when given; the flags override them.
    `max_failed` is the share of requests that may fail (None: `infra.bench.verdict.DEFAULT_MAX_FAILED`).
    `save` (the measurements, JSON Lines) and `markdown` (a report with PNG plots beside it) are checked before
    any request is sent and written after the run; a file there with other content is replaced only with `force`.
    The API key comes from INFRA_BENCH_API_KEY or OPENAI_API_KEY. An unreachable endpoint raises EndpointError."""
    import os

    from infra.bench.client import ClientOptions
    from infra.bench.endpoint import bench_endpoint as run_bench
    from infra.bench.endpoint import check_client_flags, parse_objectives, plan_load, source_from
    from infra.bench.verdict import DEFAULT_MAX_FAILED

    if api not in ("chat", "completions"):
        raise IntentError(Problem(f"--api {api!r} is not known", Location(path="--api"), "use chat or completions"))
    from infra.bench.run import saved_text
    from infra.report.bench import endpoint_json, endpoint_markdown, plot_names

    check_client_flags(warmup=warmup, timeout_s=timeout_s, max_failed=max_failed)
    if save is not None:
        write_file(save, None, force=force)
    if markdown is not None:
        markdown = Path(markdown)
        plan_writes(markdown.parent, dict.fromkeys([markdown.name, *plot_names(markdown)]), force=force,
                    keep_foreign=True)
    source = source_from(Path(intent) if intent else None, Path(plan) if plan else None, service)
    load = plan_load(source, concurrency=concurrency, rate=rate, requests=requests, duration_s=duration_s,
                     input_tokens=input_tokens, output_tokens=output_tokens, seed=seed)
    opts = ClientOptions(url=url, model=model, api=api, timeout_s=timeout_s,  # type: ignore[arg-type]
                         api_key=os.environ.get("INFRA_BENCH_API_KEY") or os.environ.get("OPENAI_API_KEY"),
                         ignore_eos=ignore_eos, min_tokens=min_tokens, warmup=warmup, duration_s=duration_s,
                         seed=seed)
    result = run_bench(opts, load, source, parse_objectives(slo) if slo else None, progress,
                       DEFAULT_MAX_FAILED if max_failed is None else max_failed)
    if save is not None:
        write_file(save, saved_text(result.bench), force=force)
    if markdown is not None:
        write_files(markdown.parent, endpoint_markdown(result, endpoint_json(result), markdown), force=force,
                    keep_foreign=True, record=False)
    return result


def emulate(plan: str | Path | None, *, port: int, host: str = "127.0.0.1", service: str | None = None,
            ttft_ms: float | None = None, itl_ms: float | None = None, error_rate: float = 0.0,
            stall_ms: float = 0.0, stall_rate: float = 0.0, disconnect_rate: float = 0.0, slow_start_s: float = 0.0,
            tokens_per_chunk: int = 1, usage: bool = True, seed: int = 0, on_ready: Any = None) -> None:
    """Serve an emulated OpenAI-compatible endpoint until interrupted; `on_ready(url)` hears its address."""
    from infra.bench.emulator import Emulator, Faults, FixedTiming, bind, check_options, serve

    check_options(port=port, ttft_ms=ttft_ms, itl_ms=itl_ms, error_rate=error_rate, stall_ms=stall_ms,
                  stall_rate=stall_rate, disconnect_rate=disconnect_rate, slow_start=slow_start_s,
                  tokens_per_chunk=tokens_per_chunk)
    if (ttft_ms is None) != (itl_ms is None):
        raise IntentError(Problem("fixed timing needs both --ttft-ms and --itl-ms", Location(path="--itl-ms"),
                                  "give both, or neither to time tokens with the plan's engine model"))
    names = ["emulated"]
    timing: Any
    if ttft_ms is not None and itl_ms is not None:
        timing = FixedTiming(ttft_ms, itl_ms)
        if plan is not None:
            from infra.bench.engine import plan_allocation
            from infra.planner.types import load_plan

            p = load_plan(plan)
            if service is not None and service in {x.service for x in p.spec.pipelines}:
                names = [service]  # fixed timing serves the pipeline's endpoint as one
            else:
                names = [plan_allocation(p, service, 0)[0].name] if service else [s.name for s in p.spec.services]
    elif plan is None:
        raise IntentError(Problem("nothing to time the tokens with", Location(path="PLAN"),
                                  "give a plan.yaml (its engine model times the tokens), or --ttft-ms and --itl-ms"))
    else:
        from infra.bench.emulator import EngineTiming
        from infra.bench.engine import plan_allocation
        from infra.bench.run import pick_service
        from infra.bench.simulate import plan_groups, plan_policy
        from infra.planner.types import load_plan

        p = load_plan(plan)
        if service is not None and service in {x.service for x in p.spec.pipelines}:
            from infra.bench.pipeline_emulator import PipelineTiming

            timing = PipelineTiming(p, service, seed=seed)
            names = [service]
        else:
            llm = [x.name for x in p.spec.services if x.runs_llm_engine]
            name = pick_service(p, service or (llm[0] if llm else p.spec.services[0].name), plan)
            svc, _ = plan_allocation(p, name, 0)
            timing = EngineTiming(plan_groups(p, name), plan_policy(p, name))
            names = [name] + ([svc.model_id] if getattr(svc, "model_id", None) and svc.model_id != name else [])
    try:
        sock = bind(host, port)
    except OSError as exc:
        raise EndpointError(Problem(f"cannot listen on {host}:{port}: {exc.strerror}", Location(path="--port"),
                                    "choose a free port (0 picks one)")) from None
    emu = Emulator(names, timing, Faults(error_rate, stall_ms, stall_rate, disconnect_rate, slow_start_s), seed,
                   tokens_per_chunk, usage)
    serve(emu, sock, on_ready)


def explain(plan_path: str | Path, *, llm: bool = False) -> Any:
    """Explain a plan.yaml from its facts (binding constraints, SLO margins, cost, alternatives); with `llm`, a
    configured model rephrases it and every number it writes is checked against those facts (a mismatch or a
    failing endpoint gives the template, with a note). Returns `infra.agent.explain.Explanation`."""
    from infra.agent.explain import explain as _explain

    return _explain(plan_path, use_llm=llm)


def draft(text: str, output: str | Path, *, profile: str | Path | None = None,
          catalog_dirs: tuple[Path, ...] = (), force: bool = False) -> Any:
    """Draft an intent from a description with the configured LLM; writes `output` only when it passes `check`
    (fields the model filled are marked `drafted`, unknowns listed at the top); an existing file only with
    `force`. Raises EndpointError when no endpoint is configured or it fails. Returns
    `infra.agent.draft.DraftResult`."""
    from infra.agent.draft import draft as _draft

    return _draft(text, output, planning=_planning(None), profile=profile, catalog_dirs=catalog_dirs, force=force)


def plan_agent(path: str | Path, baseline: dict[str, Any] | None, conflict: list[str], *, goal: str | None = None,
               yes: bool = False, output: str | Path | None = None, console: Any, ask: Any,
               catalog_dirs: tuple[Path, ...] = (), objective: str = "cost",
               calibration: str | Path | None = None) -> Any:
    """The configured LLM proposes typed intent patches for a planned (or, with `conflict`, infeasible) intent;
    each is solved by the planner and shown next to the baseline on `console`; the one the user accepts through
    `ask(question) -> answer` (or the recommended one with `yes`) is written to the intent and re-planned into
    `output` with the change in the plan's provenance. Every plan takes the user's `calibration` as the baseline
    did. Returns `infra.agent.plan_agent.AgentOutcome`."""
    from infra.agent.plan_agent import run_plan_agent

    return run_plan_agent(Path(path), baseline, conflict, planning=_planning(calibration), goal=goal, yes=yes,
                          output=Path(output) if output is not None else None, console=console, ask=ask,
                          catalog_dirs=catalog_dirs, objective=objective)


def review(plan_path: str | Path, *, console: Any, script: str | Path | None = None,
           intent_path: str | Path | None = None, catalog_dirs: tuple[Path, ...] = ()) -> int:
    """A review conversation about a plan.yaml on `console`, read from the terminal or, with `script`, from a
    file (one input per line, confirmations included): slash commands (/why, /what-if, /diff, /alternatives,
    /accept, /export, /exit) work without an LLM; other lines go to the configured LLM through read-only tools.
    Returns 1 when a command failed, else 0."""
    from infra.agent.review import Review, console_reader, script_reader
    from infra.planner.types import load_plan

    # What-ifs are planned with the calibration the plan was made with, where its file is still there.
    measured = load_plan(plan_path).spec.provenance.calibration.measured
    calibration = measured.path if measured is not None and Path(measured.path).is_file() else None
    read = script_reader(Path(script), console) if script is not None else console_reader(console)
    return Review(Path(plan_path), console, read, planning=_planning(calibration),
                  intent_path=Path(intent_path) if intent_path else None, catalog_dirs=catalog_dirs).run()


def _planning(calibration: str | Path | None) -> Any:
    """The planning functions handed to the agent (`infra.agent.planning.Planning`), planning with the user's
    calibration when one is given."""
    import functools

    from infra.agent.planning import Planning

    return Planning(check=check, plan=functools.partial(plan, calibration=calibration) if calibration else plan)


__all__ += ["CalibrateResult", "calibrate"]


@dataclass(frozen=True)
class CalibrateResult:
    """A calibration fitted to measurements: the file's content and text, and where it was written."""

    doc: Any
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
    from infra.bench.measurements import DEPLOYMENT_FIELDS, deployment_of_plan, read_measurements
    from infra.perf.correction import dump
    from infra.perf.recalibrate import document, prepare
    from infra.planner.types import load_plan

    if not measurements:
        raise InfraError(Problem("no measurement files given", Location(path="MEASUREMENTS"),
                                 "give the files of `infra bench --save`, a benchmark's results or a silicon CSV"))
    catalog = load_catalog(catalog_dirs)
    given = {k: v for k, v in (deployment or {}).items() if v is not None}
    unknown = sorted(set(given) - set(DEPLOYMENT_FIELDS))
    if unknown:
        raise InfraError(Problem(f"{', '.join(unknown)} do not describe a deployment", Location(path="deployment"),
                                 f"use {', '.join(DEPLOYMENT_FIELDS)}"))
    base = deployment_of_plan(load_plan(plan), service, str(plan), allocation) if plan is not None else None
    if base is not None or given:
        base = {**(base or {}), **given}
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


__all__ += ["VerifyResult", "verify"]


@dataclass(frozen=True)
class VerifyResult:
    """A deployed plan measured, judged, calibrated on and planned again."""

    service: str
    runs: list[Any]
    """`infra.bench.replan.Run` per load measured (peak, then baseline when the workload has one)."""
    calibration: Any
    """`infra.perf.correction.CalibrationFile` fitted to the runs, or None when the service cannot be calibrated
    on (several allocations)."""
    replanned: dict[str, Any] | None
    """The plan made with that calibration (None when there is none, or the intent is infeasible with it)."""
    changes: list[str]
    """What re-planning changed and why, one line each."""
    passed: bool
    written: list[Path]


def verify(plan_path: str | Path, url: str, *, service: str | None = None, allocation: int | None = None,
           intent: str | Path | None = None, requests: int | None = None, duration_s: float | None = None,
           model: str | None = None,
           api_kind: str = "chat", timeout_s: float = 60.0, warmup: int = 1, seed: int = 0,
           write: str | Path | None = None, catalog_dirs: tuple[Path, ...] = (), progress: Any = None,
           force: bool = False) -> VerifyResult:
    """Measure a deployed plan's service at its planned load (the peak, and the baseline when the workload has
    one), judge every objective on the measurements, calibrate on them (`calibrate`, together with the
    still-readable measurement files of the calibration the plan was made with), plan the intent again with that
    calibration and say what would change. `allocation` names the one allocation of a service of several that
    the endpoint serves on its own (measured at its share of the load). With `write`, writes
    `measurements/*.jsonl`, `calibration.yaml` and the new plan (`plan/`) there (each measurement as soon as it
    is taken, for it cannot be taken again; files infra did not write there are replaced only with `force`).
    `progress(done, total, load)` hears each load's requests as they complete (`load` "peak" or "baseline")."""
    import tempfile

    from infra.bench.measurements import earlier_measurements
    from infra.bench.replan import Run, changes, plan_loads
    from infra.bench.run import pick_service, saved_text
    from infra.planner.types import load_plan

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
