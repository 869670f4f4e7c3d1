"""Checks of an intent against the catalog: names resolve, precisions run somewhere, the model fits somewhere.

These need the catalog, so they run after the in-file checks of `infra.intent.models`. Every problem points at the
line of the intent or profile that caused it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import ValidationError as PydanticValidationError

from infra.catalog.hfids import checkpoint_precision
from infra.catalog.loader import Catalog
from infra.catalog.schema import BYTES_PER_PARAM, DeviceSpec, FrameworkSpec, ModelSpec
from infra.errors import CatalogError, IntentError, Location, Problem
from infra.intent.loader import LoadedIntent
from infra.intent.models import Service
from infra.intent.profile import ClusterProfile, DeviceResources, Pool
from infra.limits import clipped


@dataclass(frozen=True)
class ResolvedService:
    """A service with its catalog entries."""

    service: Service
    model: ModelSpec | None
    stages: dict[str, ModelSpec]
    frameworks: list[FrameworkSpec]
    devices: list[str]
    """Catalog names of the devices this service may use."""
    model_ref: str = ""
    """How later stages look the model up: its catalog name, or the path of the config.json it was read from
    (relative to the current directory, as the intent's path is), which is in no catalog under its name."""

    @property
    def model_key(self) -> str:
        return self.model_ref or (self.model.name if self.model is not None else "")


@dataclass(frozen=True)
class ResolvedIntent:
    """An intent whose every name has been looked up."""

    loaded: LoadedIntent
    pools: dict[str, DeviceSpec]
    services: list[ResolvedService]
    device_resources: dict[str, DeviceResources] = field(default_factory=dict)
    catalog: Catalog | None = None
    """The catalog the names were resolved in (with the user's overlays); later stages use the same one."""
    calibration: Any = None
    """The user's calibration (`infra.perf.correction.UserCalibration`, loaded by the layer that plans: this layer
    sits below the performance model), from `--calibration` or the profile's `spec.calibration`; None plans on the
    packaged prior alone."""


def model_ref(ref: str | None, base_dir: Path) -> str:
    """The path of a config.json model (a service's or a pipeline stage's) as later stages read it: relative to the
    current directory, as the intent's own path is; empty for a catalog model, which is looked up by name."""
    if ref is None or not ref.endswith(".json"):
        return ""
    return ref if Path(ref).is_absolute() else str(base_dir / ref)


def _model_ref(svc: Service, base_dir: Path) -> str:
    """The path of a service's config.json model as later stages read it (empty for a catalog model)."""
    return model_ref(svc.model, base_dir)


def pool_device_memory_gb(pool: Pool, device: DeviceSpec) -> float:
    """Usable memory per device: the pool's allocatable figure when given, else the catalog's."""
    if pool.allocatable_memory is not None:
        return pool.allocatable_memory / 1e9
    return device.memory_gb.value


def _catalog_problem(exc: CatalogError, where: Location) -> list[Problem]:
    """Catalog problems placed at the intent line that asked, unless they point inside a file of their own (a line of
    a config.json), which is then where to look."""
    out = []
    for p in exc.problems:
        if p.location.file and p.location.line:
            out.append(Problem(p.message, p.location, p.fix or "fix the referenced file"))
            continue
        msg = f"{p.location.prefix()}: {p.message}" if p.location.file else p.message
        out.append(Problem(msg, where, p.fix or "check the model reference"))
    return out


def served_checkpoint(ref: str, spec: ModelSpec, stated: list[str],
                      where: Location) -> tuple[ModelSpec, Problem | None]:
    """The model as the checkpoint `ref` publishes it. A quantized re-upload (`nvidia/Qwen3-32B-NVFP4` of
    Qwen3-32B) is served as written, in the precision its format suffix names: the entry with that id and that
    published precision. A checkpoint holds one format, so stated precisions must allow it (`where` points at them);
    any other reference serves the entry's own checkpoint."""
    precision = checkpoint_precision(ref, spec.hf_id)
    if precision is None:
        return spec, None
    served = spec.model_copy(update={"hf_id": ref, "native_precision": precision})
    if stated and precision not in stated:
        return served, Problem(
            f"{ref} publishes {precision} weights, but the precisions allowed are {', '.join(stated)}", where,
            f"allow {precision}, or name the original checkpoint {spec.hf_id} to serve {spec.name} at "
            f"{' or '.join(stated)}")
    return served, None


def resolve(loaded: LoadedIntent, catalog: Catalog) -> ResolvedIntent:
    """Look every name up and run the catalog-dependent checks; raise IntentError with all problems."""
    problems: list[Problem] = []
    doc = loaded.document
    cdoc = loaded.cluster_document()
    cpath = loaded.cluster_path()
    base_dir = loaded.document.path.parent

    pools: dict[str, DeviceSpec] = {}
    for i, pool in enumerate(loaded.cluster.pools):
        try:
            pools[pool.name] = catalog.device(pool.device)
        except CatalogError as exc:
            problems += _catalog_problem(exc, cdoc.locate(cpath + ("pools", i, "device")))

    resources: dict[str, DeviceResources] = {}
    conventions = loaded.cluster.conventions
    for vendor in sorted({d.vendor for d in pools.values()}):
        if vendor in conventions.devices:
            resources[vendor] = conventions.devices[vendor]
            continue
        default = catalog.device_resources(vendor)
        if default is None:
            problems.append(Problem(f"no resource names known for {vendor} devices",
                                    cdoc.locate(cpath + ("conventions",)),
                                    f"add conventions.devices.{vendor} with the count resource name"))
            continue
        try:
            resources[vendor] = DeviceResources.model_validate(default)
        except PydanticValidationError as exc:
            problems.append(Problem(f"packaged conventions for {vendor} are invalid: {exc.errors()[0]['msg']}",
                                    Location("catalog/conventions"), "override them in the cluster profile"))

    zones = sorted({(n.topology.zone if not isinstance(n, int) else None) or p.topology.zone or "(unset)"
                    for p in loaded.cluster.pools
                    for n in (p.nodes if isinstance(p.nodes, list) else [p.nodes])})

    services: list[ResolvedService] = []
    for si, svc in enumerate(loaded.intent.spec.services):
        sp = ("spec", "services", si)
        before = len(problems)
        model: ModelSpec | None = None
        stages: dict[str, ModelSpec] = {}
        pinned: ModelSpec | None = None  # the entry a quantized re-upload named as the model republishes
        if svc.model is not None:
            try:
                model = catalog.model(svc.model, base_dir)
            except CatalogError as exc:
                problems += _catalog_problem(exc, doc.locate(sp + ("model",)))
            else:
                served, problem = served_checkpoint(svc.model, model, list(svc.precisions),
                                                    doc.locate(sp + ("precisions",)))
                problems += [problem] if problem else []
                if served is not model:
                    model, pinned = served, model
                    svc = svc.model_copy(update={"precisions": [served.native_precision]})
        for ti, stage in enumerate(svc.pipeline or []):
            if stage.model is None:
                continue
            try:
                stages[stage.name] = spec = catalog.model(stage.model, base_dir)
            except CatalogError as exc:
                problems += _catalog_problem(exc, doc.locate(sp + ("pipeline", ti, "model")))
                continue
            stated = list(stage.precisions or svc.precisions)
            served, problem = served_checkpoint(stage.model, spec, stated, doc.locate(
                sp + (("pipeline", ti, "precisions") if stage.precisions else ("precisions",))))
            problems += [problem] if problem else []
            if served is not spec:
                stages[stage.name] = served
                pipeline = list(svc.pipeline or [])
                pipeline[ti] = stage.model_copy(update={"precisions": [served.native_precision]})
                svc = svc.model_copy(update={"pipeline": pipeline})
        frameworks: list[FrameworkSpec] = []
        for fi, ref in enumerate(svc.preferences.frameworks):
            try:
                frameworks.append(catalog.framework(ref))
            except CatalogError as exc:
                problems += _catalog_problem(exc, doc.locate(sp + ("preferences", "frameworks", fi)))
        if not svc.preferences.frameworks:
            frameworks = [catalog.frameworks[n] for n in sorted(catalog.frameworks)]
        allowed_devices = sorted({d.name for d in pools.values()})
        if svc.preferences.devices:
            wanted = []
            for di, ref in enumerate(svc.preferences.devices):
                try:
                    dev = catalog.device(ref)
                except CatalogError as exc:
                    problems += _catalog_problem(exc, doc.locate(sp + ("preferences", "devices", di)))
                    continue
                if dev.name not in allowed_devices and pools:
                    problems.append(Problem(
                        f"device {dev.name} is allowed but no pool of the inventory has it "
                        f"(pools have {', '.join(allowed_devices)})",
                        doc.locate(sp + ("preferences", "devices", di)),
                        "add a pool with that device to the cluster profile, or allow a device it has"))
                wanted.append(dev.name)
            allowed_devices = [d for d in allowed_devices if d in wanted]
        if len(problems) > before or not pools:
            services.append(ResolvedService(svc, model, stages, frameworks, allowed_devices, _model_ref(svc, base_dir)))
            continue

        vendors_ok = {d for d in allowed_devices
                      if any(pools_dev.name == d and any(pools_dev.vendor in f.vendors and
                                                         (not f.devices or d in f.devices) for f in frameworks)
                             for pools_dev in pools.values())}
        if not vendors_ok:
            problems.append(Problem(
                f"none of the frameworks {', '.join(f.name for f in frameworks)} runs on the allowed devices "
                f"({', '.join(allowed_devices)})", doc.locate(sp + ("preferences",)),
                "allow a framework for these devices (see `infra catalog frameworks`) or other devices"))

        precisions = list(svc.precisions)
        usable = {p for d in allowed_devices for p in next(x for x in pools.values() if x.name == d).precisions}
        offered = ', '.join(f'{d}: ' + '/'.join(catalog.devices[d].precisions) for d in allowed_devices)
        if pinned is not None and model is not None and not set(precisions) & usable:
            problems.append(Problem(
                f"{model.hf_id} publishes {model.native_precision} weights, which run on none of the allowed devices "
                f"({offered})", doc.locate(sp + ("model",)),
                f"name the original checkpoint {pinned.hf_id} or a re-upload in a precision they run, or add a pool "
                f"of devices that run {model.native_precision}"))
        elif precisions and not set(precisions) & usable:
            problems.append(Problem(
                f"precisions {', '.join(precisions)} run on none of the allowed devices ({offered})",
                doc.locate(sp + ("precisions",)),
                f"allow one of {', '.join(sorted(usable))}, or add a pool of devices that support it"))

        if svc.availability.zones > len([z for z in zones if z != "(unset)"] or [1]):
            problems.append(Problem(
                f"availability.zones is {svc.availability.zones} but the inventory spans "
                f"{len([z for z in zones if z != '(unset)'])} labelled zone(s) ({', '.join(zones)})",
                doc.locate(sp + ("availability", "zones")),
                "lower zones, or set topology.zone on pools in other zones"))

        models = [("model", model)] if model else [(f"pipeline stage {n}", m) for n, m in stages.items()]
        for label, spec in models:
            if spec is None:
                continue
            if svc.max_context is not None and label == "model" and svc.max_context > spec.max_context:
                problems.append(Problem(
                    f"max_context {svc.max_context} exceeds {spec.name}'s longest context {spec.max_context}",
                    doc.locate(sp + ("max_context",)), f"lower max_context to at most {spec.max_context}"))
            candidates = [p for p in (precisions or list(BYTES_PER_PARAM)) if p in usable]
            if not candidates:
                continue
            best = min(candidates, key=lambda p: BYTES_PER_PARAM[p])
            need_gb = spec.params_total_b * BYTES_PER_PARAM[best]
            room = []
            for pool in loaded.cluster.pools:
                dev = pools.get(pool.name)
                if dev is None or dev.name not in allowed_devices:
                    continue
                span = pool.device_count if (pool.multi_node and svc.preferences.multi_node) else \
                    pool.devices_per_node
                room.append((span * pool_device_memory_gb(pool, dev), f"{span} x {dev.name} in pool {pool.name}"))
            if room and max(room)[0] < need_gb:
                cap, where = max(room)
                problems.append(Problem(
                    f"{label} {spec.name} needs {need_gb:.0f} GB for its weights alone at {best} (the smallest "
                    f"allowed precision), but the largest replica the inventory can hold is {where} = {cap:.0f} GB",
                    doc.locate(sp + ("model",) if label == "model" else sp + ("pipeline",)),
                    "add devices with more memory, allow a smaller precision (fp8, int4, fp4), "
                    "or allow multi-node replicas"))
        services.append(ResolvedService(svc, model, stages, frameworks, allowed_devices, _model_ref(svc, base_dir)))

    if problems:
        raise IntentError(clipped(problems))
    return ResolvedIntent(loaded, pools, services, resources, catalog)


@dataclass(frozen=True)
class CheckResult:
    """Outcome of `check`: a resolved intent, or a cluster profile with its devices looked up."""

    kind: str
    intent: ResolvedIntent | None = None
    profile: ClusterProfile | None = None
    devices: dict[str, str] | None = None
    """Pool name -> catalog device name, for a profile."""
