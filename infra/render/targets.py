"""Deployment targets other than infra's own manifests: the same plan as NVIDIA Dynamo, llm-d or KServe objects.

Each target reuses what the default rendering decides for a pod (image, engine arguments, resources, volumes, node
selection) and lays it out in the target's own resource, with the engine launched as the target launches it
(`infra.catalog.targets`):

- `dynamo`: one DynamoGraphDeployment (nvidia.com/v1alpha1) per service: a `Frontend`, and per allocation a worker
  (`a<i>`) or a prefill and a decode worker (`a<i>-prefill`, `a<i>-decode`) running `python3 -m dynamo.<engine>`;
  a worker spanning nodes sets `multinode.nodeCount`. TensorRT-LLM's settings file travels in a ConfigMap.
- `llm-d`: per allocation the values of llm-d's model-service chart (`<service>/helm/<service>-a<i>.values.yaml`:
  decode and prefill pods with vLLM as infra launches it), and per service the Gateway API Inference Extension's
  InferencePool with its endpoint picker (Deployment, Service, ConfigMap, ServiceAccount, Role, RoleBinding).
- `kserve`: one LLMInferenceService (serving.kserve.io/v1alpha1) per allocation, prefill under `spec.prefill`, a
  worker pod spec when a worker spans nodes; the storage initializer fetches `hf://<model>` into /mnt/models.

Where the cluster runs the Prometheus Operator, each service's objectives are alerting rules as for infra's own
manifests (`infra.render.alerts`), on the pods the target's operator names (`infra.catalog.targets.
serving_workload`) or, for Dynamo, on its Frontend's series, which see each request whole.

What a target cannot express is refused (IntentError) naming the service and the reason: pipelines of stages, CPU
devices, engines the target does not run, device makers its runtime does not support.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from infra.catalog.loader import Catalog
from infra.catalog.schema import FrameworkSpec
from infra.catalog.targets import (
    KSERVE_PART_OF,
    KSERVE_WORKLOAD_COMPONENTS,
    MODELSERVICE_CHART,
    Launcher,
    extra_args,
    launcher,
    target_cli,
    targets,
)
from infra.errors import IntentError, Problem
from infra.planner.types import Allocation, DeploymentPlan
from infra.render.context import SERVES, AllocationBuilder, Built, Doc, Locate, ServiceBuilder, check_plan
from infra.render.settings import Settings

DYNAMO_API = "nvidia.com/v1alpha1"
KSERVE_API = "serving.kserve.io/v1alpha1"
INFERENCE_POOL_API = "inference.networking.k8s.io/v1"
# Pod labels llm-d's model-service chart sets (modelArtifacts.labels, plus llm-d.ai/role per role); the
# InferencePool selects them.
LLMD_SERVING = "llm-d.ai/inferenceServing"
LLMD_MODEL = "llm-d.ai/model"
# The routing sidecar llm-d's chart puts in front of decode pods listens on routing.servicePort and forwards to the
# engine on routing.proxy.targetPort (values.schema.json defaults).
LLMD_SERVICE_PORT = 8000
LLMD_PROXY_PORT = 8200
EPP_GRPC_PORT = 9002
EPP_HEALTH_PORT = 9003
EPP_METRICS_PORT = 9090
EPP_CONFIG_FILE = "plugins.yaml"
# Vendors each target's runtime images are built for (Dynamo's runtime images are CUDA builds).
VENDORS = {"dynamo": ("nvidia",), "kserve": None, "llm-d": ("nvidia", "amd")}
# llm-d's chart names accelerators by its own types (values.schema.json accelerator.resources).
LLMD_ACCELERATOR = {"nvidia": "nvidia", "amd": "amd"}
NAMES = {"dynamo": "NVIDIA Dynamo", "llm-d": "llm-d", "kserve": "KServe"}


@dataclass
class ValuesFile:
    """A file that is not a Kubernetes object: the values one Helm release of a chart takes."""

    path: str
    template: str
    context: dict[str, Any]
    header: list[str]


def refuse(plan: DeploymentPlan, catalog: Catalog, target: str, locate: Locate) -> None:
    """IntentError for the first thing of the plan `target` cannot express, naming the service and why."""
    name = NAMES[target]
    if plan.spec.pipelines:
        p = plan.spec.pipelines[0]
        raise IntentError(Problem(
            f"service {p.service}: a pipeline of stages ({', '.join(s.name for s in p.stages)}) has no {name} "
            f"resource that chains its stages", locate(("spec", "pipelines", 0)),
            "render it with --target kubernetes (infra's own stage configs), or plan its LLM stage on its own"))
    for si, svc in enumerate(plan.spec.services):
        frameworks = set()
        for ai, a in enumerate(svc.allocations):
            where = ("spec", "services", si, "allocations", ai)
            for pool_name in filter(None, (a.pool, a.decode_pool)):
                pool = next((p for p in plan.spec.cluster.pools if p.name == pool_name), None)
                if pool is None:
                    continue  # check_plan names the unknown pool
                device = catalog.tables["devices"].find(a.device)
                if device is not None and device.cpu is not None:
                    raise IntentError(Problem(
                        f"service {svc.name}: allocation a{ai} runs on CPU devices ({a.device}), which {name} "
                        "does not schedule", locate((*where, "device")),
                        "render CPU allocations with --target kubernetes"))
                allowed = VENDORS[target]
                if allowed is not None and pool.vendor not in allowed:
                    raise IntentError(Problem(
                        f"service {svc.name}: allocation a{ai} runs on {pool.vendor} devices (pool {pool.name}), "
                        f"for which {name} has no runtime (it supports {', '.join(allowed)})",
                        locate((*where, "pool")),
                        f"plan the service on {' or '.join(allowed)} pools, or render with --target kubernetes"))
            how = launcher(target, a.framework)
            if how is None:
                known = ", ".join(sorted(targets()[target].frameworks))
                raise IntentError(Problem(
                    f"service {svc.name}: allocation a{ai} runs {a.framework}, which {name} does not run "
                    f"(it runs {known})", locate((*where, "framework")),
                    f"plan the service with a framework {name} runs ({known}), or render with --target kubernetes"))
            frameworks.add(how.backend)
            if target == "llm-d" and a.nodes_per_worker > 1:
                raise IntentError(Problem(
                    f"service {svc.name}: allocation a{ai} spans {a.nodes_per_worker} nodes per worker; infra writes "
                    "no multinode (LeaderWorkerSet) values for llm-d's model-service chart",
                    locate((*where, "nodes_per_worker")),
                    "plan workers within one node, or render with --target kubernetes or dynamo"))
        if target == "dynamo" and len(frameworks) > 1:
            raise IntentError(Problem(
                f"service {svc.name}: its allocations run {', '.join(sorted(frameworks))}, and a "
                "DynamoGraphDeployment has one backendFramework", locate(("spec", "services", si, "allocations")),
                "plan the service on one framework, or render with --target kubernetes"))


def build(plan: DeploymentPlan, catalog: Catalog, settings: Settings, locate: Locate,
          target: str) -> tuple[Built, list[ValuesFile]]:
    """Contexts of every object (and values file) of `target` for the plan."""
    check_plan(plan, catalog, locate)
    refuse(plan, catalog, target, locate)
    docs: list[Doc] = []
    notes: list[str] = []
    values: list[ValuesFile] = []
    for svc in plan.spec.services:
        sb = ServiceBuilder(plan, svc, catalog, settings, docs, notes, locate)
        model = sb._model()
        roles = [TargetAllocation(sb, i, a, catalog.framework(a.framework), model, target).roles()
                 for i, a in enumerate(svc.allocations)]
        if target == "dynamo":
            _dynamo(sb, roles)
        elif target == "kserve":
            for r in roles:
                _kserve(sb, r)
        else:
            for r in roles:
                values.append(_modelservice(sb, r))
            _endpoint_picker(sb, roles)
        if sb.crds.get("prometheus_operator") and svc.runs_llm_engine:
            if target == "llm-d":
                # The chart's own PodMonitor takes no labels at the pinned version (its schema refuses any), so a
                # Prometheus that selects monitors by label would not load it; this one carries them.
                sb._pod_monitor({"matchLabels": {LLMD_SERVING: "true", LLMD_MODEL: svc.name}})
            elif target == "kserve":
                _kserve_monitor(sb)
            sb._objective_rules(target)
        if not settings.service_account:
            sb.add("serviceaccount.yaml.j2", {"name": svc.name})
    return Built(docs, notes), values


# --- one allocation as a target runs it ---------------------------------------------------------------------------

@dataclass
class Roles:
    """What one allocation deploys: its workloads per role (the default rendering's contexts) and companions."""

    alloc: TargetAllocation
    workloads: list[dict[str, Any]]
    config_maps: list[dict[str, Any]]


class TargetAllocation(AllocationBuilder):
    """An allocation's pods with the engine launched as the target launches it. Devices are requested through the
    device plugin (a target's resource has no place for infra's ResourceClaimTemplates)."""

    def __init__(self, sb: ServiceBuilder, index: int, a: Allocation, fw: FrameworkSpec, model: dict[str, Any],
                 target: str) -> None:
        super().__init__(sb, index, a, fw, model)
        self.target = target
        how = launcher(target, fw.name)
        assert how is not None  # refuse() ran first
        self.how: Launcher = how
        self.cli = target_cli(fw, how)
        if target == "llm-d" and a.mode == "disagg":
            self.cli = self.cli.model_copy(update={"port": LLMD_PROXY_PORT})

    def roles(self) -> Roles:
        a = self.a
        image = self.how.image or self._image()
        quantization = self._quantization()
        names = ["agg"] if a.mode == "agg" else ["prefill", "decode"]
        # Dynamo's operator starts the nodes of a multi-node worker itself; KServe runs LeaderWorkerSets with the
        # leader and worker pods rendering gives.
        multi = a.nodes_per_worker > 1 and self.target == "kserve"
        colocate = a.mode == "disagg" and self.pool.switch is None and self.pool.nodes > 1 and self.target != "llm-d"
        workloads = []
        for role in names:
            b = self._for_role(role)
            w = b._workload(role, self.how.image or (image if b is self else b._image()), quantization, multi,
                            colocate)
            w["builder"] = b
            if self.target == "llm-d" and role == "prefill":
                # Prefill pods sit behind no routing sidecar: the engine answers on the service port itself.
                for pod in (w["pod"], w["worker"]):
                    if pod is not None:
                        _set_port(pod, LLMD_SERVICE_PORT)
            for pod in (w["pod"], w["worker"]):
                if pod is not None:
                    pod["args"] = pod["args"] + extra_args(self.how, role)
                    if self.how.https and pod["probes"]:
                        pod["probes"] = _https(pod["probes"])
            workloads.append(w)
        return Roles(self, workloads, self._config_maps(workloads))

    def _for_role(self, role: str) -> AllocationBuilder:
        a = self.a
        if role != "decode" or a.decode_parallel is None:
            return self
        view = a.role_view(role, self.sb.pools[a.decode_pool or a.pool].devices_per_node)
        other = TargetAllocation(self.sb, self.index, view, self.fw, self.model, self.target)
        other.cli = self.cli
        other.header = self.header
        return other

    def _claim(self, name: str, labels: dict[str, str]) -> dict[str, Any] | None:
        if self.sb.crds.get("dra") and self.cpu is None:
            self.note(f"{self.name}: {NAMES[self.target]} pods request devices through the device plugin "
                      f"({self.pool.resources.count}), not DRA ResourceClaims")
        return None

    def _model_path(self) -> str:
        return self.how.model_path or super()._model_path()


def _https(probes: dict[str, Any]) -> dict[str, Any]:
    """Probes of an engine that serves HTTPS."""
    out = dict(probes)
    for kind in ("startup", "readiness", "liveness"):
        probe = probes.get(kind)
        if isinstance(probe, dict) and "httpGet" in probe:
            out[kind] = {**probe, "httpGet": {**probe["httpGet"], "scheme": "HTTPS"}}
    return out


def _set_port(pod: dict[str, Any], port: int) -> None:
    args = pod["args"]
    if "--port" in args:
        args[args.index("--port") + 1] = str(port)
    pod["port"] = port


def _common(sb: ServiceBuilder) -> dict[str, Any]:
    return {"annotations": {"infra.dev/plan-fingerprint": sb.plan.spec.fingerprint}}


# --- Dynamo -------------------------------------------------------------------------------------------------------

def worker_key(alloc_id: str, role: str) -> str:
    """Key of an allocation role's worker under a DynamoGraphDeployment's spec.services."""
    return alloc_id if role == "agg" else f"{alloc_id}-{role}"


def _dynamo(sb: ServiceBuilder, roles: list[Roles]) -> None:
    services: dict[str, Any] = {}
    backend = roles[0].alloc.how.backend
    frontend = roles[0].alloc.how.image
    services["Frontend"] = {"componentType": "frontend", "replicas": 1,
                            "extraPodSpec": {"mainContainer": {"name": "main", "image": frontend}}}
    for r in roles:
        ab = r.alloc
        for w in r.workloads:
            services[worker_key(ab.alloc_id, w["role"])] = _dynamo_worker(ab, w)
        for cm in r.config_maps:
            sb.add("configmap.yaml.j2", {"cm": cm})
        if ab.a.mode == "disagg":
            sb.note(f"{ab.name}: Dynamo's frontend routes requests to the prefill and decode workers "
                    f"{worker_key(ab.alloc_id, 'prefill')} and {worker_key(ab.alloc_id, 'decode')}; they keep "
                    f"{ab.a.replicas} group(s) unless Dynamo's planner scales them")
    sb.note(f"DynamoGraphDeployment {sb.svc.name} serves OpenAI requests on its Frontend (Dynamo's operator creates "
            "its Service); install the Dynamo platform (operator, etcd, NATS) in the cluster first")
    sb.add("dynamographdeployment.yaml.j2", {"dgd": {
        "api_version": DYNAMO_API, "name": sb.svc.name, "labels": sb.base_labels, **_common(sb),
        "backend": backend, "services": services}})


def _dynamo_worker(ab: TargetAllocation, w: dict[str, Any]) -> dict[str, Any]:
    pod = w["pod"]
    res = pod["resources"]
    names = ab.pool.resources
    counts = {n for n in (names.count, names.shared_count) if n}
    limits: dict[str, Any] = {}
    custom: dict[str, str] = {}
    gpu_type = None
    for key, value in res["limits"].items():
        if key in ("cpu", "memory"):
            limits[key] = str(value)
        elif key in counts:
            limits["gpu"] = str(value)
            if key != "nvidia.com/gpu":
                gpu_type = key
        else:
            custom[key] = str(value)
    if gpu_type:
        limits["gpuType"] = gpu_type
    if custom:
        limits["custom"] = dict(sorted(custom.items()))
    shm = next((v for v in pod["volumes"] if v["name"] == "shm"), None)
    spec: dict[str, Any] = {
        "componentType": "worker",
        "replicas": w["replicas"],
        "labels": {k: v for k, v in w["labels"].items() if k.startswith("infra.dev/")},
        "resources": {"limits": limits, "requests": dict(limits)},
        "envs": pod["env"],
        "extraPodMetadata": {"labels": {k: v for k, v in pod["labels"].items() if k != SERVES}},
        "extraPodSpec": _dynamo_pod(pod),
    }
    if w["role"] != "agg":
        spec["subComponentType"] = w["role"]
    if ab.a.nodes_per_worker > 1:
        spec["multinode"] = {"nodeCount": ab.a.nodes_per_worker}
    if shm is not None:
        spec["sharedMemory"] = {"size": shm["emptyDir"]["sizeLimit"]}
    return dict(sorted(spec.items()))


def _dynamo_pod(pod: dict[str, Any]) -> dict[str, Any]:
    """extraPodSpec: the pod's placement and volumes, its engine container as `mainContainer` (/dev/shm comes from
    sharedMemory, the environment from `envs`)."""
    out: dict[str, Any] = {"serviceAccountName": pod["service_account"], "automountServiceAccountToken": False,
                           "schedulerName": pod["scheduler"]}
    if pod["node_selector"]:
        out["nodeSelector"] = pod["node_selector"]
    if pod["affinity"]:
        out["affinity"] = pod["affinity"]
    out["securityContext"] = {"seccompProfile": {"type": "RuntimeDefault"}}
    out["volumes"] = [v for v in pod["volumes"] if v["name"] != "shm"]
    container: dict[str, Any] = {"name": "main", "image": pod["image"], "command": pod["command"],
                                 "args": pod["args"],
                                 "volumeMounts": [m for m in pod["mounts"] if m["name"] != "shm"],
                                 "securityContext": {"privileged": False, "allowPrivilegeEscalation": False}}
    if pod["capabilities"]:
        container["securityContext"]["capabilities"] = {"add": pod["capabilities"]}
    out["mainContainer"] = container
    return out


# --- KServe -------------------------------------------------------------------------------------------------------

def _kserve(sb: ServiceBuilder, r: Roles) -> None:
    ab = r.alloc
    by_role = {w["role"]: w for w in r.workloads}
    main = by_role.get("agg") or by_role["decode"]
    spec: dict[str, Any] = {"model": {"uri": f"hf://{sb.svc.model_id}", "name": sb.svc.name}}
    spec.update(_kserve_workload(ab, main))
    spec["prefill"] = _kserve_workload(ab, by_role["prefill"]) if "prefill" in by_role else None
    spec["router"] = {"route": {}, "gateway": {}, "scheduler": {}}
    for cm in r.config_maps:
        sb.add("configmap.yaml.j2", {"cm": cm})
    sb.note(f"{ab.name}: KServe's storage initializer downloads hf://{sb.svc.model_id} into /mnt/models, which "
            "the engine serves over TLS with the certificate KServe's presets mount; the container `main` of "
            "spec.template overrides the presets' command and arguments with those the plan decides")
    sb.add("llminferenceservice.yaml.j2", {"llm": {
        "api_version": KSERVE_API, "name": ab.name,
        "labels": {**sb.base_labels, "infra.dev/allocation": ab.alloc_id}, **_common(sb), "spec": spec}},
        ab.header)


def _kserve_monitor(sb: ServiceBuilder) -> None:
    """The PodMonitor over the serving pods KServe's controller creates for the service's aggregated allocations,
    by the labels it gives them (upstream's controller renders no monitor), over the TLS its presets serve with a
    self-signed certificate."""
    exporting = [i for i in sb.exporting() if sb.svc.allocations[i].mode == "agg"]
    if not exporting:
        return
    names = [f"{sb.svc.name}-a{i}" for i in exporting]
    how = [launcher("kserve", sb.svc.allocations[i].framework) for i in exporting]
    sb._pod_monitor(
        {"matchLabels": {"app.kubernetes.io/part-of": KSERVE_PART_OF},
         "matchExpressions": [
             {"key": "app.kubernetes.io/name", "operator": "In", "values": names},
             {"key": "app.kubernetes.io/component", "operator": "In", "values": list(KSERVE_WORKLOAD_COMPONENTS)}]},
        {"scheme": "https", "tlsConfig": {"insecureSkipVerify": True}} if any(h and h.https for h in how) else None)


def _kserve_workload(ab: AllocationBuilder, w: dict[str, Any]) -> dict[str, Any]:
    p = w["builder"].a.parallel
    par: dict[str, Any] = {"tensor": p.tp, "pipeline": p.pp}
    if p.attention_dp > 1:
        par["data"] = p.attention_dp
    if p.ep > 1:
        par["expert"] = True
    out: dict[str, Any] = {"replicas": w["replicas"], "parallelism": par,
                           "labels": {k: v for k, v in w["labels"].items() if k.startswith("infra.dev/")},
                           "template": {"pod": w["pod"], "container": "main"}}
    out["worker"] = {"pod": w["worker"], "container": "main"} if w["worker"] is not None else None
    return out


# --- llm-d --------------------------------------------------------------------------------------------------------

def values_path(service: str, alloc_id: str) -> str:
    """Where the model-service values of an allocation are written, relative to the manifest root."""
    return f"{service}/helm/{MODELSERVICE_CHART}/{service}-{alloc_id}.values.yaml"


def _modelservice(sb: ServiceBuilder, r: Roles) -> ValuesFile:
    ab = r.alloc
    s = sb.settings
    by_role = {w["role"]: w for w in r.workloads}
    disagg = ab.a.mode == "disagg"
    values: dict[str, Any] = {
        "multinode": False,
        "modelArtifacts": {"uri": f"hf://{sb.svc.model_id}", "name": sb.svc.model_id,
                           "authSecretName": s.hf_token_secret,
                           "labels": {LLMD_SERVING: "true", LLMD_MODEL: sb.svc.name}},
        "routing": {"servicePort": LLMD_SERVICE_PORT,
                    "proxy": {"enabled": disagg, "targetPort": LLMD_PROXY_PORT, "connector": "nixlv2"}},
        "accelerator": {"type": LLMD_ACCELERATOR.get(ab.pool.vendor, ab.pool.vendor)},
        "decode": _modelservice_role(by_role.get("decode") or by_role["agg"]),
        "prefill": _modelservice_role(by_role["prefill"]) if disagg else {"create": False, "replicas": 0},
    }
    header = [f"Values of llm-d's {MODELSERVICE_CHART} chart for allocation {ab.alloc_id} of service "
              f"{sb.svc.name} (plan {sb.plan.metadata.name}, fingerprint {sb.plan.spec.fingerprint}).",
              f"helm install {ab.name} llm-d-modelservice/{MODELSERVICE_CHART} -n {sb.cluster.namespace} "
              f"-f {ab.name}.values.yaml",
              "(repository: https://llm-d-incubation.github.io/llm-d-modelservice/)"]
    sb.note(f"{ab.name}: install llm-d's {MODELSERVICE_CHART} chart with {values_path(sb.svc.name, ab.alloc_id)} "
            f"(its pods carry {LLMD_SERVING}=true, {LLMD_MODEL}={sb.svc.name}, which InferencePool {sb.svc.name} "
            "selects)")
    return ValuesFile(values_path(sb.svc.name, ab.alloc_id), "modelservice-values.yaml.j2",
                      {"values": values}, header)


def _modelservice_role(w: dict[str, Any]) -> dict[str, Any]:
    pod = w["pod"]
    p = w["builder"].a.parallel
    container: dict[str, Any] = {
        "name": "vllm", "image": pod["image"], "modelCommand": "custom", "command": pod["command"],
        "args": pod["args"], "env": pod["env"],
        "ports": [{"name": "http", "containerPort": pod["port"], "protocol": "TCP"}],
        "resources": {"limits": pod["resources"]["limits"], "requests": pod["resources"]["requests"]},
        "volumeMounts": pod["mounts"],
        "securityContext": {"privileged": False, "allowPrivilegeEscalation": False},
    }
    if pod["capabilities"]:
        container["securityContext"]["capabilities"] = {"add": pod["capabilities"]}
    if pod["probes"]:
        container["startupProbe"] = pod["probes"]["startup"]
        container["readinessProbe"] = pod["probes"]["readiness"]
        container["livenessProbe"] = pod["probes"]["liveness"]
    out: dict[str, Any] = {"create": True, "replicas": w["replicas"],
                           "parallelism": {"tensor": p.tp, "data": max(1, p.attention_dp)},
                           "containers": [container], "volumes": pod["volumes"],
                           "podAnnotations": dict(w["annotations"])}
    if pod["node_selector"]:
        out["nodeSelector"] = pod["node_selector"]
    return out


def _endpoint_picker(sb: ServiceBuilder, roles: list[Roles]) -> None:
    """The InferencePool over the service's model-service pods and its endpoint picker (the Gateway API Inference
    Extension's chart objects, with llm-d's scheduler image and its prefill/decode plugins where the service
    disaggregates)."""
    s = sb.settings
    name = f"{sb.svc.name}-epp"
    labels = {**sb.base_labels, "infra.dev/component": "endpoint-picker"}
    selector = {"infra.dev/service": sb.svc.name, "infra.dev/component": "endpoint-picker"}
    disagg = any(r.alloc.a.mode == "disagg" for r in roles)
    api = sb.crds.get("inference_extension") or INFERENCE_POOL_API
    sb.add("inferencepool.yaml.j2", {
        "api_version": api, "name": sb.svc.name,
        "selector": {LLMD_SERVING: "true", LLMD_MODEL: sb.svc.name}, "port": LLMD_SERVICE_PORT, "picker": name})
    config = PD_PLUGINS if disagg else DEFAULT_PLUGINS
    sb.add("configmap.yaml.j2", {"cm": {"name": name, "labels": labels, "data": {EPP_CONFIG_FILE: config}}})
    group = api.rsplit("/", 1)[0]
    sb.add("epp-deployment.yaml.j2", {"epp": {
        "name": name, "labels": labels, "selector": selector, "image": s.epp_image, "pool": sb.svc.name,
        "namespace": sb.cluster.namespace, "pool_group": group, "config": f"/config/{EPP_CONFIG_FILE}",
        "grpc_port": EPP_GRPC_PORT, "health_port": EPP_HEALTH_PORT, "metrics_port": EPP_METRICS_PORT,
        "service_account": name, **_common(sb)}})
    sb.add("epp-service.yaml.j2", {"epp": {"name": name, "labels": labels, "selector": selector,
                                           "grpc_port": EPP_GRPC_PORT, "metrics_port": EPP_METRICS_PORT}})
    sb.add("serviceaccount.yaml.j2", {"name": name})
    sb.add("epp-role.yaml.j2", {"epp": {"name": name, "labels": labels, "pool_group": group}})
    sb.add("epp-rolebinding.yaml.j2", {"epp": {"name": name, "labels": labels,
                                               "namespace": sb.cluster.namespace}})
    sb.note(f"InferencePool {sb.svc.name} routes through endpoint picker {name}; attach it to your Gateway with an "
            f"HTTPRoute whose backendRef is the InferencePool")


# EndpointPickerConfig of the Gateway API Inference Extension's chart (config/charts/inferencepool/templates/
# epp-config.yaml at commit 139eec852f4ab19fb9f246ee9abbdcca3d655d79).
DEFAULT_PLUGINS = """\
apiVersion: inference.networking.x-k8s.io/v1alpha1
kind: EndpointPickerConfig
plugins:
- type: queue-scorer
- type: kv-cache-utilization-scorer
- type: prefix-cache-scorer
schedulingProfiles:
- name: default
  plugins:
  - pluginRef: queue-scorer
    weight: 2
  - pluginRef: kv-cache-utilization-scorer
    weight: 2
  - pluginRef: prefix-cache-scorer
    weight: 3
"""

# llm-d's inference scheduler with prefill/decode profiles (llm-d/llm-d-inference-scheduler deploy/config, the
# P/D sample configuration): prefill-filter / decode-filter pick pods by their llm-d.ai/role label.
PD_PLUGINS = """\
apiVersion: inference.networking.x-k8s.io/v1alpha1
kind: EndpointPickerConfig
plugins:
- type: prefill-header-handler
- type: prefix-cache-scorer
- type: prefill-filter
- type: decode-filter
- type: max-score-picker
- type: pd-profile-handler
schedulingProfiles:
- name: prefill
  plugins:
  - pluginRef: prefill-filter
  - pluginRef: max-score-picker
  - pluginRef: prefix-cache-scorer
    weight: 2
- name: decode
  plugins:
  - pluginRef: decode-filter
  - pluginRef: max-score-picker
  - pluginRef: prefix-cache-scorer
    weight: 2
"""
