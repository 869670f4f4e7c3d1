"""Pipelines: every stage of `spec.pipelines[]` is deployed, configured as the plan says, and connected to the
stages it consumes and feeds.

Rendering (infra/render/stages.py) gives every stage a ConfigMap `<stage object name>-stage` with `stage.yaml`
(kind StageConfig): the plan's decisions for the stage and its connectors, `inputs` (the stages it consumes) and
`output` (the stage it feeds), each with its Service and address. These checks read it back: PIP001 it exists,
PIP002 it agrees with the plan, PIP003 the connectors join the stages as the pipeline does and every address is a
Service of the tree on a port it serves, PIP004 CPU stages run on CPU with their cores, PIP005 each stage's
Service selects that stage's pods.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

from infra.catalog.kinds import kind_of
from infra.errors import InfraError
from infra.limits import scan_yaml
from infra.planner.types import DeploymentPlan, PipelinePlan
from infra.validators.findings import Finding
from infra.validators.manifests import Manifest
from infra.validators.pods import PodTemplate, pod_templates, selector_labels, selects
from infra.validators.quantity import parse_quantity
from infra.validators.rules import rule
from infra.validators.semantic import is_extended

STAGE_CONFIG_FILE = "stage.yaml"
STAGE_CONFIG_KIND = "StageConfig"


def stage_names(plan: DeploymentPlan, p: PipelinePlan) -> list[str]:
    """Object name of each stage: its service entry, or `<pipeline>-<stage>` for a stage on CPU."""
    services = {s.name for s in plan.spec.services}
    return [st.unit if st.unit in services else f"{p.service}-{st.name}" for st in p.stages]


def _stage_doc(cm: Manifest) -> tuple[dict[str, Any] | None, str]:
    from ruamel.yaml import YAML
    from ruamel.yaml.error import YAMLError

    data = cm.data.get("data")
    text = data.get(STAGE_CONFIG_FILE) if isinstance(data, dict) else None
    if not isinstance(text, str):
        return None, f"it holds no {STAGE_CONFIG_FILE}"
    try:
        scan_yaml(text, STAGE_CONFIG_FILE)  # nesting and alias bombs refused before the pure-Python parser
        doc = YAML(typ="safe", pure=True).load(text)
    except YAMLError as exc:
        return None, f"its {STAGE_CONFIG_FILE} does not parse ({exc})"
    except InfraError as exc:
        return None, f"its {STAGE_CONFIG_FILE} is refused: {exc.problems[0]}"
    if not isinstance(doc, dict) or doc.get("kind") != STAGE_CONFIG_KIND:
        return None, f"its {STAGE_CONFIG_FILE} is not a {STAGE_CONFIG_KIND}"
    return doc, ""


def check_pipelines(manifests: list[Manifest], plan: DeploymentPlan, plan_path: str,
                    plan_line: Any) -> list[Finding]:
    """Findings of the pipeline checks; `plan_line(path)` gives the plan file's line of a field path."""
    cms = {m.name: m for m in manifests if m.kind == "ConfigMap"}
    services = {m.name: m for m in manifests if m.kind == "Service"}
    out: list[Finding] = []
    for pi, p in enumerate(plan.spec.pipelines):
        names = stage_names(plan, p)
        for si, st in enumerate(p.stages):
            where = ("spec", "pipelines", pi, "stages", si)
            field = f"spec.pipelines[{pi}].stages[{si}]"
            name = names[si]
            stage_ref = f"stage {st.name} of pipeline {p.service}"
            workloads = [m for m in manifests if kind_of(m.kind, m.api_version).serves
                         and m.labels.get("infra.dev/pipeline") == p.service
                         and m.labels.get("infra.dev/stage") == st.name]
            if st.unit not in {s.name for s in plan.spec.services}:
                out += _cpu_stage(plan_path, plan_line(where), field, stage_ref, st, name, workloads)
            cm = cms.get(f"{name}-stage")
            if cm is None:
                out.append(rule("PIP001").at(plan_path, plan_line(where), f"{p.service}/{st.name}",
                                             f"{stage_ref} has no stage config (ConfigMap {name}-stage)",
                                             field=field))
                continue
            doc, why = _stage_doc(cm)
            if doc is None:
                out.append(cm.finding("PIP001", ("data",), f"the stage config of {stage_ref}: {why}"))
                continue
            out += _mounted(workloads, cm.name, stage_ref)
            out += _consistent(cm, doc, plan, p, si, name)
            out += _connectors(cm, doc, names, p, si, services, plan.spec.cluster.namespace)
            if name in services:
                out += _service_selects(services[name], workloads, stage_ref, manifests)
    return out


def _mounted(workloads: list[Manifest], config: str, stage_ref: str) -> list[Finding]:
    """PIP001: the stage's pods mount its config, so the stage can read its connectors."""
    out = []
    for m in workloads:
        for t in pod_templates(m):
            names = {str((v.get("configMap") or {}).get("name")) for v in t.spec.get("volumes") or []
                     if isinstance(v, dict) and isinstance(v.get("configMap"), dict)}
            if config not in names:
                out.append(m.finding("PIP001", t.spec_path + ("volumes",),
                                     f"pods of {stage_ref} do not mount its stage config (ConfigMap {config})",
                                     fix=f"mount ConfigMap {config} (a configMap volume) into the stage's pods"))
    return out


def _consistent(cm: Manifest, doc: dict[str, Any], plan: DeploymentPlan, p: PipelinePlan, si: int,
                name: str) -> list[Finding]:
    """PIP002: what the stage config states about the stage is what the plan decided."""
    st = p.stages[si]
    want: dict[str, Any] = {"pipeline": p.service, "stage": st.name, "index": si, "stage_kind": st.kind,
                            "streams": st.streams}
    svc = next((s for s in plan.spec.services if s.name == name), None)
    if svc is None:
        want["cpu_cores"] = st.cpu_cores
    else:
        want["model_id"] = svc.model_id
    out = []
    for key, value in want.items():
        if doc.get(key) != value:
            out.append(cm.finding("PIP002", ("data", STAGE_CONFIG_FILE),
                                  f"{STAGE_CONFIG_FILE} says {key}: {doc.get(key)!r}, the plan says {value!r}",
                                  fix=f"set {key}: {value} (or render the plan again)"))
    if svc is None:
        return out
    got = {a.get("id"): a for a in doc.get("allocations") or [] if isinstance(a, dict)}
    for ai, a in enumerate(svc.allocations):
        aid = f"a{ai}"
        entry = got.get(aid)
        if entry is None:
            out.append(cm.finding("PIP002", ("data", STAGE_CONFIG_FILE),
                                  f"{STAGE_CONFIG_FILE} lists no allocation {aid} (pool {a.pool}, {a.device})",
                                  fix="render the plan again"))
            continue
        par = entry.get("parallel") if isinstance(entry.get("parallel"), dict) else {}
        checks = {"pool": (entry.get("pool"), a.pool), "device": (entry.get("device"), a.device),
                  "precision": (entry.get("precision"), a.precision),
                  "parallel.tp": (par.get("tp"), a.parallel.tp), "parallel.pp": (par.get("pp"), a.parallel.pp),
                  "parallel.sp": (par.get("sp"), a.parallel.sp),
                  "devices_per_replica": (entry.get("devices_per_replica"), a.devices_per_worker),
                  "replicas": (entry.get("replicas"), a.replicas)}
        for key, (have, value) in checks.items():
            if have != value:
                out.append(cm.finding("PIP002", ("data", STAGE_CONFIG_FILE),
                                      f"{STAGE_CONFIG_FILE} says {aid} {key}: {have!r}, the plan says {value!r}",
                                      fix=f"set {key}: {value} for {aid} (or render the plan again)"))
    return out


def _connectors(cm: Manifest, doc: dict[str, Any], names: list[str], p: PipelinePlan, si: int,
                services: dict[str, Manifest], namespace: str) -> list[Finding]:
    """PIP003: inputs name the stages this one consumes and output the stage it feeds, at addresses the tree
    serves."""
    out = []
    wanted_inputs = p.inputs()[si]
    consumer = p.consumers()[si]
    links = doc.get("inputs")
    got = [x.get("stage") if isinstance(x, dict) else x for x in links] if isinstance(links, list) else links
    want = [p.stages[i].name for i in wanted_inputs]
    if got != want:
        out.append(cm.finding("PIP003", ("data", STAGE_CONFIG_FILE),
                              f"inputs are {got!r}, but the stage consumes {want!r} in pipeline {p.service}",
                              fix="list the stages it consumes under inputs (render the plan again)"))
    pairs = [("inputs", i, links[n]) for n, i in enumerate(wanted_inputs)] if got == want and links else []
    link = doc.get("output")
    if consumer is None:
        if link is not None:
            out.append(cm.finding("PIP003", ("data", STAGE_CONFIG_FILE),
                                  f"the stage is the last of pipeline {p.service}, but its output names {link!r}",
                                  fix="set output: null"))
    else:
        pairs.append(("output", consumer, link))
    for key, other, link in pairs:
        want_stage, want_service = p.stages[other].name, names[other]
        if not isinstance(link, dict) or link.get("stage") != want_stage or link.get("service") != want_service:
            had = link.get("stage") if isinstance(link, dict) else link
            out.append(cm.finding("PIP003", ("data", STAGE_CONFIG_FILE),
                                  f"{key} names {had!r}, but the stage {'consumes' if key == 'inputs' else 'feeds'} "
                                  f"stage {want_stage} (Service {want_service})",
                                  fix=f"point {key} at stage {want_stage}, service {want_service}"))
            continue
        address = link.get("address")
        if address is None:
            if want_service in services:
                out.append(cm.finding("PIP003", ("data", STAGE_CONFIG_FILE),
                                      f"{key} gives no address, but Service {want_service} serves stage "
                                      f"{want_stage}", fix="render the plan again"))
            continue
        out += _address(cm, key, str(address), want_service, services, namespace)
    final = doc.get("final_output")
    if final is not (consumer is None):
        out.append(cm.finding("PIP003", ("data", STAGE_CONFIG_FILE),
                              f"final_output is {final!r}, but the stage is "
                              f"{'the last' if consumer is None else 'not the last'} of the pipeline",
                              fix=f"set final_output: {'true' if consumer is None else 'false'}"))
    return out


def _address(cm: Manifest, key: str, address: str, service: str, services: dict[str, Manifest],
             namespace: str) -> list[Finding]:
    """An address must be the Service's in-cluster name on a port that Service exposes (no dangling address)."""
    parts = urlsplit(address)
    host = parts.hostname or ""
    try:
        port = parts.port
    except ValueError:
        port = None
    known = {service, f"{service}.{namespace}", f"{service}.{namespace}.svc",
             f"{service}.{namespace}.svc.cluster.local"}
    obj = services.get(service)
    if host not in known or obj is None:
        why = f"Service {service} is not in the tree" if obj is None else f"it is not Service {service}'s name"
        return [cm.finding("PIP003", ("data", STAGE_CONFIG_FILE), f"{key} address {address} dangles: {why}",
                           fix=f"address http://{service}.{namespace}.svc.cluster.local:<port> and render the "
                               "Service with it")]
    ports = {pt.get("port") for pt in (obj.data.get("spec") or {}).get("ports") or [] if isinstance(pt, dict)}
    if port not in ports:
        return [cm.finding("PIP003", ("data", STAGE_CONFIG_FILE),
                           f"{key} address {address} uses port {port}, but Service {service} exposes "
                           f"{sorted(x for x in ports if x is not None)}",
                           fix=f"use port {min((x for x in ports if x is not None), default='?')}")]
    return []


def _cpu_stage(plan_path: str, line: int, field: str, stage_ref: str, st: Any, name: str,
               workloads: list[Manifest]) -> list[Finding]:
    """PIP004: a CPU stage runs on CPU, requesting its cores and no devices; without an image it cannot run."""

    if not st.image and not workloads:
        return [rule("PIP004").at(plan_path, line, f"{name}", f"{stage_ref} runs on CPU, but the plan names no "
                                  "container image for it, so it has no workload",
                                  field=f"{field}.image", severity="warning",
                                  fix="set image (and command, port) on the stage in the intent to the "
                                      "preprocessing server's image, and plan again")]
    if not workloads:
        return [rule("PIP004").at(plan_path, line, f"{name}", f"{stage_ref} has no workload (Deployment {name})",
                                  field=field, fix="render the plan again")]
    out = []
    for m in workloads:
        for t in pod_templates(m):
            for path, c in t.containers(init=False):
                res = c.get("resources") if isinstance(c.get("resources"), dict) else {}
                requests = res.get("requests") if isinstance(res.get("requests"), dict) else {}
                limits = res.get("limits") if isinstance(res.get("limits"), dict) else {}
                devices = sorted(k for k in {**requests, **limits} if is_extended(str(k)))
                if devices:
                    out.append(m.finding("PIP004", path + ("resources",), f"{stage_ref} runs on CPU but requests "
                                                                         f"{', '.join(devices)}",
                                         fix="remove the device resources"))
                cpu = parse_quantity(requests.get("cpu"))
                if st.cpu_cores and (cpu is None or cpu < st.cpu_cores):
                    out.append(m.finding("PIP004", path + ("resources", "requests"),
                                         f"{stage_ref} requests {requests.get('cpu')} CPU, the plan gives it "
                                         f"{st.cpu_cores} core(s)", fix=f"request cpu: {st.cpu_cores}"))
    return out


def _service_selects(svc: Manifest, workloads: list[Manifest], stage_ref: str,
                     manifests: list[Manifest]) -> list[Finding]:
    """PIP005: the stage's Service selects serving pods of this stage, and only of this stage."""
    sel = selector_labels((svc.data.get("spec") or {}).get("selector"))
    if sel is None:
        return [svc.finding("PIP005", ("spec",), f"the Service of {stage_ref} has no selector",
                            fix="select the stage's pods by infra.dev/service")]
    own = [t for m in workloads for t in _serving(m)]
    if not any(selects(sel, t.labels) for t in own):
        return [svc.finding("PIP005", ("spec", "selector"), f"the Service of {stage_ref} selects none of its pods",
                            fix="select the labels of the stage's pod template")]
    stage = svc.labels.get("infra.dev/stage")
    others = sorted({m.name for m in manifests if kind_of(m.kind, m.api_version).serves and m not in workloads
                     for t in _serving(m) if selects(sel, t.labels)})
    if others:
        return [svc.finding("PIP005", ("spec", "selector"), f"the Service of {stage_ref} also selects pods of "
                                                            f"{', '.join(others)} (not stage {stage})",
                            fix="add infra.dev/service of the stage to the selector")]
    return []


def _serving(m: Manifest) -> list[PodTemplate]:
    return [t for t in pod_templates(m) if t.labels.get("infra.dev/serves", "true") == "true"]
