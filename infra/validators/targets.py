"""Plan consistency of a tree rendered for another deployment target (`infra render --target`): the same rules as
for infra's own workloads (PLN001-PLN008, PLN010), read from where each target keeps them.

- `dynamo`: a DynamoGraphDeployment per service (label infra.dev/service), a worker per allocation role under
  spec.services (`a<i>`, `a<i>-prefill`, `a<i>-decode`): replicas, multinode.nodeCount, resources.limits.gpu (and
  gpuType / custom slice resources), extraPodSpec.nodeSelector, mainContainer image and arguments.
- `kserve`: an LLMInferenceService `<service>-a<i>`: replicas, parallelism, the `main` container of
  template (and prefill.template), worker present exactly when a worker spans nodes, spec.model.uri.
- `llm-d`: a model-service values file `helm/llm-d-modelservice/<service>-a<i>.values.yaml`: decode / prefill
  replicas and containers, nodeSelector, modelArtifacts.uri.

Where the cluster runs the Prometheus Operator, the objective rules are checked as for infra's own workloads
(PLN012), against the objectives the target's series can watch (`infra.catalog.metrics.watching`).

Engine arguments are read back with the launcher the target runs (infra.catalog.targets), as rendering wrote them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from infra.catalog.loader import Catalog
from infra.catalog.targets import MODELSERVICE_CHART, extra_args, kserve_pod_labels, launcher, target_framework
from infra.planner.types import DeploymentPlan
from infra.validators.alerts import check_objective_alerts
from infra.validators.cluster import from_plan
from infra.validators.findings import Finding
from infra.validators.manifests import Manifest
from infra.validators.plan import Expected, _compare_args, _compare_devices, _expected, _get, _PlanFile
from infra.validators.pods import PodTemplate
from infra.validators.rules import rule

DYNAMO_KIND = "DynamoGraphDeployment"
KSERVE_KIND = "LLMInferenceService"


def detect_target(manifests: list[Manifest], values: list[Any]) -> str | None:
    """The deployment target a tree was rendered for, None for infra's own workloads."""
    kinds = {m.kind for m in manifests}
    if DYNAMO_KIND in kinds:
        return "dynamo"
    if KSERVE_KIND in kinds:
        return "kserve"
    if any(getattr(v, "chart", None) == MODELSERVICE_CHART for v in values):
        return "llm-d"
    return None


def charted_pod_labels(values: list[Any]) -> list[dict[str, str]]:
    """Labels of the pods llm-d's model-service chart creates from each values file of the tree: modelArtifacts.labels
    plus llm-d.ai/role per role it creates (the chart's `decodelabels` / `prefilllabels`)."""
    out = []
    for v in values:
        if getattr(v, "chart", None) != MODELSERVICE_CHART:
            continue
        base = _get(v.data, ("modelArtifacts", "labels"))
        base = {str(k): str(x) for k, x in base.items()} if isinstance(base, dict) else {}
        for role in ("decode", "prefill"):
            block = v.data.get(role)
            if isinstance(block, dict) and block.get("create", True) is not False:
                out.append({**base, "llm-d.ai/role": role})
    return out


def operated_pod_labels(manifests: list[Any]) -> list[dict[str, str]]:
    """Labels of the serving pods an operator creates from objects of the tree: KServe's for each
    LLMInferenceService (`infra.catalog.targets.kserve_pod_labels`)."""
    return [labels for m in manifests if m.kind == "LLMInferenceService" and m.name
            for labels in kserve_pod_labels(m.name)]


@dataclass
class SpecTemplate(PodTemplate):
    """A pod spec kept without its template wrapper (LLMInferenceService.template, Dynamo's extraPodSpec, a
    values file's role): its path is the spec's own."""

    @property
    def spec_path(self) -> tuple:
        return self.path


@dataclass
class Found:
    """Where one expected role lives in the tree."""

    m: Manifest
    base: tuple
    """Path of the role's block (its replicas, resources, ... live under it)."""
    template: SpecTemplate
    container: tuple[tuple, dict[str, Any]] | None
    nodes: int
    nodes_path: tuple


def check_target_plan(target: str, manifests: list[Manifest], values: list[Manifest], plan: DeploymentPlan,
                      plan_path: str, catalog: Catalog) -> tuple[list[Finding], list[str]]:
    cluster = from_plan(plan, plan_path)
    pools = {p.name: p for p in cluster.pools}
    vendors = {p.name: p.vendor for p in plan.spec.cluster.pools}
    pf = _PlanFile(plan_path)
    services = {s.name: s for s in plan.spec.services}
    out: list[Finding] = []
    notes = [f"plan consistency read from the {target} target's resources"]
    used: set[tuple[int, tuple]] = set()
    for e in _expected(plan):
        si, ai = e.index
        where = ("spec", "services", si, "allocations", ai)
        found = _find(target, e, manifests, values)
        if found is None:
            out.append(rule("PLN001").at(plan_path, pf.line(where), f"{e.service}/{e.alloc_id}",
                                         f"no {_what(target, e)} for allocation {e.alloc_id} ({e.role}) of service "
                                         f"{e.service}", field=f"spec.services[{si}].allocations[{ai}]",
                                         fix=f"render the plan again (`infra render PLAN -o DIR --target {target}`)"))
            continue
        used.add((id(found.m), found.base))
        m, a = found.m, e.allocation
        got = _get(m.data, found.base + ("replicas",))
        got = 1 if got is None else got
        if got != e.replicas:
            out.append(m.finding("PLN003", found.base + ("replicas",), f"{got} replicas for {e.role}, the plan "
                                                                       f"places {e.replicas}",
                                 fix=f"set replicas: {e.replicas}"))
        if found.nodes != a.nodes_per_worker:
            out.append(m.finding("PLN005", found.nodes_path, f"a worker spans {found.nodes} node(s), the plan gives "
                                                              f"{a.nodes_per_worker}",
                                 fix=_nodes_fix(target, a.nodes_per_worker)))
        out += _fingerprint(target, m, found, plan.spec.fingerprint)
        fw = catalog.framework(a.framework)
        how = launcher(target, fw.name)
        pool = pools.get(a.pool)
        if target == "dynamo":
            out += _dynamo_devices(m, found.base, e, pool)
        else:
            out += _compare_devices(m, found.template, e, pool, manifests)
        if pool is not None and pool.node_selector:
            sel = found.template.spec.get("nodeSelector")
            sel = sel if isinstance(sel, dict) else {}
            missing = {k: v for k, v in pool.node_selector.items() if sel.get(k) != v}
            if missing:
                out.append(m.finding("PLN008", found.template.spec_path + ("nodeSelector",),
                                     f"pods do not select pool {pool.name}'s nodes ({missing} missing)",
                                     fix=f"add {missing} to nodeSelector"))
        if how is None or fw.cli is None or found.container is None:
            out.append(m.finding("PLN006", found.base, f"{target} does not run {fw.name}: its engine arguments were "
                                                       "not checked against the plan"))
            continue
        path, container = found.container
        want_image = how.image or fw.image_for(a.device, vendors.get(a.pool, ""))[0]
        if str(container.get("image")) != want_image:
            out.append(m.finding("PLN010", path + ("image",), f"image {container.get('image')!r}, but {target} runs "
                                                              f"{fw.name} on {a.device} as {want_image!r}",
                                 fix=f"set image: {want_image}"))
        tfw = target_framework(fw, how)
        svc = services[e.service]
        model_id = how.model_path or svc.model_id
        out += _compare_args(m, path, container, found.template, e, tfw, model_id, manifests)
        args = [str(x) for x in container.get("args") or []]
        for flag in extra_args(how, e.role):
            if flag not in args:
                out.append(m.finding("PLN004", path + ("args",), f"{flag} is missing ({target} runs {fw.name}'s "
                                                                 f"{e.role} engine with it)", fix=f"add {flag}"))
        out += _model_uri(target, m, found, svc.model_id)
        if target == "kserve":
            out += _parallelism(m, found.base, e)
    out += _strays(target, manifests, values, plan, used)
    out += check_objective_alerts(manifests, plan, plan_path, pf.line, catalog, target)
    return out, notes


def _what(target: str, e: Expected) -> str:
    if target == "dynamo":
        return f"DynamoGraphDeployment {e.service} worker {_key(e)!r}"
    if target == "kserve":
        return f"LLMInferenceService {e.service}-{e.alloc_id}"
    return f"model-service values {MODELSERVICE_CHART}/{e.service}-{e.alloc_id}.values.yaml"


def _key(e: Expected) -> str:
    return e.alloc_id if e.role == "agg" else f"{e.alloc_id}-{e.role}"


def _nodes_fix(target: str, nodes: int) -> str:
    if target == "dynamo":
        return f"set multinode.nodeCount: {nodes}" if nodes > 1 else "remove multinode"
    if target == "kserve":
        return "give a worker pod spec" if nodes > 1 else "remove worker"
    return "render the plan again"


def _engine(spec: dict[str, Any], base: tuple, name: str | None) -> tuple[tuple, dict[str, Any]] | None:
    items = spec.get("containers")
    if not isinstance(items, list):
        return None
    pick = [(i, c) for i, c in enumerate(items) if isinstance(c, dict) and (name is None or c.get("name") == name)]
    if not pick:
        pick = [(i, c) for i, c in enumerate(items) if isinstance(c, dict)][:1]
    return (base + ("containers", pick[0][0]), pick[0][1]) if pick else None


def _find(target: str, e: Expected, manifests: list[Manifest], values: list[Manifest]) -> Found | None:
    if target == "dynamo":
        for m in manifests:
            if m.kind != DYNAMO_KIND or m.labels.get("infra.dev/service", m.name) != e.service:
                continue
            services = _get(m.data, ("spec", "services"))
            entry = services.get(_key(e)) if isinstance(services, dict) else None
            if not isinstance(entry, dict):
                return None
            base = ("spec", "services", _key(e))
            pod = entry.get("extraPodSpec") if isinstance(entry.get("extraPodSpec"), dict) else {}
            main = pod.get("mainContainer") if isinstance(pod.get("mainContainer"), dict) else None
            spec = {**pod, "containers": [main] if main is not None else []}
            t = SpecTemplate(m, base + ("extraPodSpec",), spec, {})
            container = (base + ("extraPodSpec", "mainContainer"), main) if main is not None else None
            multi = entry.get("multinode")
            nodes = multi.get("nodeCount", 2) if isinstance(multi, dict) else 1
            return Found(m, base, t, container, nodes if isinstance(nodes, int) else 1, base + ("multinode",))
        return None
    if target == "kserve":
        for m in manifests:
            if m.kind != KSERVE_KIND or m.name != f"{e.service}-{e.alloc_id}":
                continue
            base = ("spec", "prefill") if e.role == "prefill" else ("spec",)
            block = _get(m.data, base)
            if not isinstance(block, dict) or not isinstance(block.get("template"), dict):
                return None
            t = SpecTemplate(m, base + ("template",), block["template"], block.get("labels") or {})
            # A worker pod spec makes the workload a LeaderWorkerSet of the plan's nodes per worker (KServe sizes the
            # group from parallelism); none is one node.
            nodes = max(2, e.allocation.nodes_per_worker) if isinstance(block.get("worker"), dict) else 1
            return Found(m, base, t, _engine(block["template"], base + ("template",), "main"), nodes,
                         base + ("worker",))
        return None
    for v in values:
        if getattr(v, "chart", None) != MODELSERVICE_CHART or getattr(v, "release", None) != \
                f"{e.service}-{e.alloc_id}":
            continue
        base = ("prefill",) if e.role == "prefill" else ("decode",)
        block = _get(v.data, base)
        if not isinstance(block, dict) or block.get("create") is False:
            return None
        spec = {"containers": block.get("containers") or [], "volumes": block.get("volumes") or [],
                "nodeSelector": block.get("nodeSelector") or {}}
        t = SpecTemplate(v, base, spec, {})
        nodes = 2 if v.data.get("multinode") else 1
        return Found(v, base, t, _engine(spec, base, None), nodes, ("multinode",))
    return None


def _fingerprint(target: str, m: Manifest, found: Found, fingerprint: str) -> list[Finding]:
    if target == "llm-d":
        got = _get(m.data, found.base + ("podAnnotations", "infra.dev/plan-fingerprint"))
        path = found.base + ("podAnnotations",)
    else:
        got = m.annotations.get("infra.dev/plan-fingerprint")
        path = ("metadata", "annotations")
    if got != fingerprint:
        return [m.finding("PLN007", path, f"plan-fingerprint is {got!r}, the plan's is {fingerprint!r}")]
    return []


def _dynamo_devices(m: Manifest, base: tuple, e: Expected, pool: Any) -> list[Finding]:
    """PLN005 for a Dynamo worker: resources.limits.gpu (gpuType, custom slice resources) as the plan sizes one pod
    (Dynamo counts GPUs per node of a multinode worker)."""
    if pool is None:
        return []
    a = e.allocation
    per_pod = a.devices_per_worker // max(1, a.nodes_per_worker)
    share = a.share if a.share is not None and a.share < 1 else None
    limits = _get(m.data, base + ("resources", "limits"))
    limits = limits if isinstance(limits, dict) else {}
    out = []
    name = pool.shared_count or pool.count if share else pool.count
    got = limits.get("gpu")
    if str(got) != str(per_pod):
        out.append(m.finding("PLN005", base + ("resources", "limits", "gpu") if got is not None
                             else base + ("resources", "limits"),
                             f"gpu: {got if got is not None else 'missing'}, the plan gives {per_pod} per pod "
                             f"(pool {pool.name})", fix=f"set resources.limits.gpu: \"{per_pod}\" (and requests)"))
    want_type = None if name == "nvidia.com/gpu" else name
    if limits.get("gpuType") != want_type:
        out.append(m.finding("PLN005", base + ("resources", "limits"),
                             f"gpuType {limits.get('gpuType')!r}, pool {pool.name} counts devices as {name}",
                             fix=f"set resources.limits.gpuType: {name}" if want_type else "remove gpuType"))
    if share:
        custom = limits.get("custom") if isinstance(limits.get("custom"), dict) else {}
        want: dict[str, int] = {}
        if pool.memory and pool.memory_unit:
            want[pool.memory] = round(share * pool.device_memory_bytes / pool.memory_unit)
        if pool.cores:
            want[pool.cores] = round(share * 100)
        for key, value in want.items():
            if str(custom.get(key)) != str(value):
                out.append(m.finding("PLN005", base + ("resources", "limits", "custom"),
                                     f"{key}: {custom.get(key, 'missing')}, the plan gives {value} (share {share:g})",
                                     fix=f"set resources.limits.custom.{key}: \"{value}\""))
    return out


def _model_uri(target: str, m: Manifest, found: Found, model_id: str | None) -> list[Finding]:
    if target == "dynamo" or not model_id:
        return []
    path = ("spec", "model", "uri") if target == "kserve" else ("modelArtifacts", "uri")
    got = _get(m.data, path)
    want = f"hf://{model_id}"
    if got != want:
        return [m.finding("PLN004", path, f"model uri is {got!r}, the plan serves {want}", fix=f"set {want}")]
    return []


def _parallelism(m: Manifest, base: tuple, e: Expected) -> list[Finding]:
    p = e.allocation.parallel
    out = []
    for key, want in (("tensor", p.tp), ("pipeline", p.pp)):
        got = _get(m.data, base + ("parallelism", key))
        if (got if got is not None else 1) != want:
            out.append(m.finding("PLN004", base + ("parallelism", key), f"parallelism.{key} is {got}, the plan "
                                                                        f"says {want}",
                                 fix=f"set parallelism.{key}: {want}"))
    return out


def _strays(target: str, manifests: list[Manifest], values: list[Manifest], plan: DeploymentPlan,
            used: set[tuple[int, tuple]]) -> list[Finding]:
    """PLN002: workers, services and values files that deploy no allocation of the plan."""
    expected = _expected(plan)
    services = {e.service for e in expected}
    out = []
    if target == "dynamo":
        for m in manifests:
            if m.kind != DYNAMO_KIND:
                continue
            svc = m.labels.get("infra.dev/service", m.name)
            if svc not in services:
                out.append(m.finding("PLN002", ("metadata", "name"), f"service {svc!r} is not in the plan"))
                continue
            entries = _get(m.data, ("spec", "services"))
            keys = {_key(e) for e in expected if e.service == svc}
            for key, entry in (entries.items() if isinstance(entries, dict) else []):
                comp = entry.get("componentType") if isinstance(entry, dict) else None
                if comp == "frontend":
                    continue
                if key not in keys:
                    out.append(m.finding("PLN002", ("spec", "services", key), f"worker {key!r} deploys no "
                                                                              f"allocation of the plan "
                                                                              f"(expected {sorted(keys)})"))
    elif target == "kserve":
        names = {f"{e.service}-{e.alloc_id}" for e in expected}
        for m in manifests:
            if m.kind == KSERVE_KIND and m.name not in names:
                out.append(m.finding("PLN002", ("metadata", "name"), f"{m.ref} deploys no allocation of the plan "
                                                                     f"(expected one of {sorted(names)})"))
    else:
        names = {f"{e.service}-{e.alloc_id}" for e in expected}
        for v in values:
            if getattr(v, "chart", None) == MODELSERVICE_CHART and getattr(v, "release", None) not in names:
                out.append(v.finding("PLN002", (), f"{v.ref} deploys no allocation of the plan "
                                                   f"(expected one of {sorted(names)})"))
    return out
