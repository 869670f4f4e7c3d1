"""Reading an intent or a cluster profile: validated, resolved against the catalog, with the user's calibration."""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path
from typing import Any

from infra.catalog.loader import load_catalog
from infra.errors import CatalogError, IntentError, Problem
from infra.intent.loader import load_intent_file, load_profile_file, read_document
from infra.intent.profile import ClusterProfile
from infra.intent.resolve import CheckResult, ResolvedIntent, resolve
from infra.intent.schema import intent_schema
from infra.perf.correction import load_calibration
from infra.perf.correction import schema as calibration_schema


def load_intent(path: str | Path, catalog_dirs: tuple[Path, ...] = (),
                calibration: str | Path | None = None) -> ResolvedIntent:
    """Read, validate and resolve an intent (and its cluster profile) against the catalog, with the user's
    calibration: the file given, else the one the cluster profile names (`spec.calibration`), else none."""
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
    return calibration_schema() if kind == "calibration" else intent_schema()
