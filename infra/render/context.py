"""From a plan to what the templates fill in: one context per Kubernetes object, plus notes for the user.

Every decision a template would otherwise make (which workload kind, how many pods, which resources, which flags,
which probes) is made here, in code that tests can read; templates only lay the values out as YAML. Object names and
labels follow MANIFESTS.md: `<service>-a<i>` per allocation, `-prefill` / `-decode` per P/D role.
"""

from __future__ import annotations

import json
import math
import shlex
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from pydantic import ValidationError as PydanticValidationError

from infra.catalog.hfids import checkpoint_precision
from infra.catalog.kinds import kind_of
from infra.catalog.loader import Catalog
from infra.catalog.metrics import METRICS_PATH, watching
from infra.catalog.schema import BYTES_PER_PARAM, EngineCli, FrameworkSpec
from infra.catalog.targets import DEFAULT_TARGET
from infra.errors import CatalogError, InfraError, IntentError, Location, Problem
from infra.intent.models import Workload
from infra.intent.yamlio import dotted
from infra.planner.types import Allocation, ClusterPool, DeploymentPlan, ServicePlan, allocation_problems
from infra.render.alerts import objective_rules
from infra.render.args import config_file_content, engine_settings, kv_transfer, model_args
from infra.render.cpu import engine_env, size_pod
from infra.render.settings import Settings
from infra.render.stage_refs import handoff_note, mount_stage_config, stage_config_map
from infra.render.yamlout import dump_yaml

RDMA_KINDS = ("infiniband", "roce", "efa")
MODEL_DIR = "/models"
CONFIG_DIR = "/etc/infra/engine"
# Port the leader of a multi-node SGLang group listens on for the other nodes (its LWS example uses 20000).
DIST_INIT_PORT = 20000
# KV-cache transfer between prefill and decode goes through NIXL, which SGLang (--disaggregation-transfer-backend
# nixl), TensorRT-LLM (cache_transceiver_config.backend) and vLLM (its NixlConnector, spelled per role in the
# catalog's cli.values.kv_transfer_config) all document, over RDMA or TCP alike.
TRANSFER_BACKEND = "nixl"
# Pod label telling pods that answer HTTP (single-node pods and group leaders) from multi-node followers, so that
# Services and InferencePools select only the former.
SERVES = "infra.dev/serves"


@dataclass
class Doc:
    """One object to render: the template that lays it out and what it is filled with."""

    template: str
    service: str
    context: dict[str, Any]
    header: list[str] = field(default_factory=list)
    """Comment lines written above the object (what the user must still provide)."""


@dataclass
class Built:
    docs: list[Doc]
    notes: list[str]
    """What the user must know or do (also written as comments into the files concerned)."""


Locate = Callable[[tuple[str | int, ...]], Location]
"""Field path in the plan file -> its location (file and line when the plan was read from a file)."""


def path_only(plan_file: str | None) -> Locate:

    return lambda path: Location(plan_file, path=dotted(path))


def check_plan(plan: DeploymentPlan, catalog: Catalog, locate: Locate) -> None:
    """Cross-field checks the schema cannot make; each problem names the field (and line) and the fix."""
    problems: list[Problem] = []
    for pi, pool in enumerate(plan.spec.cluster.pools):
        for key, name in pool.resources.model_dump(exclude_none=True).items():
            if isinstance(name, str) and "{" in name:
                problems.append(Problem(f"resource name {name!r} still holds a placeholder",
                                        locate(("spec", "cluster", "pools", pi, "resources", key)),
                                        "re-plan with `infra plan`, which writes the pool's own resource names"))
    names: set[str] = set()
    for si, svc in enumerate(plan.spec.services):
        where = ("spec", "services", si)
        if svc.name in names:
            problems.append(Problem(f"service name {svc.name!r} appears twice", locate((*where, "name")),
                                    "give every service its own name"))
        names.add(svc.name)
        if not _dns_label(svc.name):
            problems.append(Problem(f"service name {svc.name!r} is not a DNS-1123 label", locate((*where, "name")),
                                    "use lower-case letters, digits and '-' (at most 50 characters)"))
        if not svc.model_id:
            problems.append(Problem("service has no model_id to load", locate((*where, "model_id")),
                                    "re-plan with `infra plan`, which records the model's Hugging Face id"))
        for ai, a in enumerate(svc.allocations):
            aw = (*where, "allocations", ai)
            try:
                catalog.framework(a.framework)
            except CatalogError as exc:
                problems += [Problem(p.message, locate((*aw, "framework")), p.fix) for p in exc.problems]
    problems += allocation_problems(plan, locate)  # what `load_plan` refuses too, for a plan made in memory
    if problems:
        raise IntentError(problems)


def _dns_label(name: str) -> bool:
    import re

    return bool(re.fullmatch(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?", name)) and len(name) <= 50


class ServiceBuilder:
    """The objects of one service."""

    def __init__(self, plan: DeploymentPlan, svc: ServicePlan, catalog: Catalog, settings: Settings,
                 docs: list[Doc], notes: list[str], locate: Locate, stage: Any = None) -> None:
        self.plan, self.svc, self.catalog, self.settings = plan, svc, catalog, settings
        self.docs, self.notes, self.locate = docs, notes, locate
        self.stage = stage
        """The pipeline stage this service runs (infra.render.stage_refs.StageRef), if any."""
        self.allocation_builder: type[AllocationBuilder] = AllocationBuilder
        self.cluster = plan.spec.cluster
        self.pools = {p.name: p for p in self.cluster.pools}
        self.crds = self.cluster.crds
        self.base_labels = {
            "app.kubernetes.io/name": svc.name,
            "app.kubernetes.io/part-of": plan.metadata.name,
            "app.kubernetes.io/managed-by": "infra",
            "infra.dev/service": svc.name,
        }
        if stage is not None:
            self.base_labels.update(stage.labels)

    def note(self, text: str, header: list[str] | None = None) -> None:
        # Allocation notes start with the allocation's object name, which already names the service.
        line = text if text.startswith(f"{self.svc.name}-a") else f"{self.svc.name}: {text}"
        if line not in self.notes:
            self.notes.append(line)
        if header is not None and text not in header:
            header.append(text)

    def add(self, template: str, context: dict[str, Any], header: list[str] | None = None) -> None:
        common = {"plan": {"name": self.plan.metadata.name, "fingerprint": self.plan.spec.fingerprint},
                  "cluster": {"name": self.cluster.name, "namespace": self.cluster.namespace},
                  "service": {"name": self.svc.name, "labels": self.base_labels}}
        self.docs.append(Doc(template, self.svc.name, {**common, **context}, list(header or [])))

    # --- the service --------------------------------------------------------------------------------------------

    def build(self) -> None:
        svc = self.svc
        model = self._model()
        endpoint_port = None
        for i, a in enumerate(svc.allocations):
            fw = self.catalog.framework(a.framework)
            if fw.cli is None:
                raise InfraError(Problem(f"framework {fw.name} states no launcher (`cli`) in the catalog",
                                         Location(self.catalog.tables["frameworks"].files.get(fw.name)),
                                         "add a `cli:` entry to the framework's YAML (see infra/catalog/schema.py "
                                         "EngineCli)"))
            endpoint_port = endpoint_port or fw.cli.port
            self.allocation_builder(self, i, a, fw, model).build()
        if self.stage is not None:
            line = handoff_note(self.stage)
            if line not in self.notes:
                self.notes.append(line)
            self.add("configmap.yaml.j2", {"cm": stage_config_map(self.stage, self.base_labels)}, [line])
        # The endpoint picker balances LLM engines by their KV-cache and queue metrics; stage engines are not LLMs.
        if self.crds.get("inference_extension") and svc.runs_llm_engine:
            self.add("inferencepool.yaml.j2", {
                "api_version": self.crds["inference_extension"], "name": svc.name,
                "selector": {"infra.dev/service": svc.name, SERVES: "true"}, "port": endpoint_port,
                "picker": f"{svc.name}-epp",
            }, [("The endpoint picker Service named in endpointPickerRef comes from the Gateway API Inference "
                 "Extension's chart; install it under that name.")])
            self.note(f"InferencePool {svc.name} needs the endpoint picker Service {svc.name}-epp (install the "
                      "Gateway API Inference Extension's endpoint picker under that name)")
        if not self.settings.service_account:
            self.add("serviceaccount.yaml.j2", {"name": svc.name})
        routed = svc.routing.router == "http-route" and svc.runs_llm_engine
        if routed:
            self._route()
        per_pod = sorted({a.capacity_per_replica for a in svc.allocations if a.mode == "agg"})
        if svc.routing.router == "service" and svc.runs_llm_engine and len(per_pod) > 1 and \
                per_pod[0] < 0.9 * per_pod[-1]:
            self.note(f"Service {svc.name} spreads requests evenly over pods whose planned capacities differ "
                      f"({per_pod[0]:g} to {per_pod[-1]:g} {svc.demand.unit} each), so the smaller ones get more "
                      "than they were planned for: list the Gateway API (crds.gateway_api) or the Inference "
                      "Extension in the cluster profile and re-plan, for a router that splits by capacity")
        if self.crds.get("prometheus_operator") and svc.runs_llm_engine and self.stage is None:
            self._pod_monitor()
            self._objective_rules()
        # A weighted route is the service's way in; a Service over every pod beside it would split evenly, so it
        # is kept only where a pipeline's stage config hands off to it.
        if any(a.mode == "agg" for a in svc.allocations) and (not routed or self.stage is not None):
            self.add("service.yaml.j2", {"name": svc.name, "port": endpoint_port, "labels": self.base_labels,
                                         "selector": {"infra.dev/service": svc.name, "infra.dev/role": "agg",
                                                      SERVES: "true"}})

    def _objective_rules(self, target: str = DEFAULT_TARGET) -> None:
        """The service's objectives and planned peak as alerting rules on the series that watch it under `target`
        (`infra.catalog.metrics.watching`; `infra.render.alerts`): the pods of its allocations' workloads as the
        target names them, or the target's frontend."""
        svc = self.svc
        watched = watching(target, [(self.catalog.framework(a.framework).metrics, a.mode) for a in svc.allocations])
        peak = self._workload()
        got = objective_rules(svc.name, self.cluster.namespace, target, watched, len(svc.allocations),
                              {**svc.objectives, **svc.attainment_objectives},
                              peak.rate.peak_rps if peak is not None and peak.rate is not None else None,
                              self.plan.spec.fingerprint)
        for line in got.skipped:
            self.note(line)
        header = [f"{svc.name}: {line}" for line in got.skipped]
        if got.rules:
            self.add("prometheusrule.yaml.j2", {
                "api_version": self.crds["prometheus_operator"], "name": f"{svc.name}-objectives",
                "labels": self.monitoring_labels(), "group": f"{svc.name}-objectives", "rules": got.rules,
                "annotations": {"infra.dev/plan-fingerprint": self.plan.spec.fingerprint}}, header)

    def monitoring_labels(self) -> dict[str, str]:
        """Labels of the objects the Prometheus Operator selects (rules, monitors): the service's, and those the
        profile says its selectors look for (`conventions.monitoring_labels`)."""
        return {**self.base_labels, **(self.cluster.monitoring_labels or {})}

    def exporting(self) -> list[int]:
        """The allocations whose engines export the series infra reads (`FrameworkSpec.metrics`)."""
        return [i for i, a in enumerate(self.svc.allocations) if self.catalog.framework(a.framework).metrics]

    def _pod_monitor(self, selector: dict[str, Any] | None = None, endpoint: dict[str, Any] | None = None) -> None:
        """A PodMonitor that has Prometheus scrape the engines of the service's allocations whose series infra reads
        (`exporting`): what the objective rules, `infra verify --prometheus` and autoscaling on running requests
        read. Every such engine serves them at /metrics on its `http` port; others are left out, as a scrape of an
        endpoint that is not Prometheus text (TensorRT-LLM's /metrics is JSON) only fails. `selector` and
        `endpoint` (beside port and path): where a target's chart or operator creates the engines' pods, their
        labels and how they serve; else infra's own workloads', over HTTP."""
        svc = self.svc
        exported = [f"a{i}" for i in self.exporting()]
        if not exported:
            return
        if selector is None:
            selector = {"matchLabels": {"infra.dev/service": svc.name}}
            if len(exported) < len(svc.allocations):
                selector["matchExpressions"] = [{"key": "infra.dev/allocation", "operator": "In",
                                                 "values": exported}]
        self.add("podmonitor.yaml.j2", {
            "api_version": self.crds["prometheus_operator"], "name": f"{svc.name}-engines",
            "labels": self.monitoring_labels(), "selector": selector,
            "annotations": {"infra.dev/plan-fingerprint": self.plan.spec.fingerprint},
            "endpoints": [{"port": "http", "path": METRICS_PATH, **(endpoint or {})}]})

    def _route(self) -> None:
        """One Service per aggregated allocation and the HTTPRoute that splits the service's requests over them by
        the plan's weights (its allocations' planned shares of the load)."""
        svc = self.svc
        backends = []
        for i, a in enumerate(svc.allocations):
            if a.mode != "agg":
                continue
            weight = (svc.routing.weights or {}).get(f"a{i}", 0)
            name = f"{svc.name}-a{i}"
            fw = self.catalog.framework(a.framework)
            assert fw.cli is not None  # build() refused a framework without one
            self.add("service.yaml.j2", {
                "name": name, "port": fw.cli.port,
                "labels": {**self.base_labels, "infra.dev/allocation": f"a{i}"},
                "selector": {"infra.dev/service": svc.name, "infra.dev/allocation": f"a{i}",
                             "infra.dev/role": "agg", SERVES: "true"}})
            backends.append({"group": "", "kind": "Service", "name": name, "port": fw.cli.port, "weight": weight})
        namespace, _, gateway = self.settings.gateway.rpartition("/")
        parent = {"group": "gateway.networking.k8s.io", "kind": "Gateway", "name": gateway,
                  **({"namespace": namespace} if namespace else {})}
        line = (f"HTTPRoute {svc.name} attaches to Gateway {self.settings.gateway} (settings.yaml `gateway`) and "
                "splits requests over the allocations' Services by weight, each its planned share of the load")
        self.note(line)
        if any(a.mode != "agg" for a in svc.allocations):
            self.note("prefill/decode allocations take no share of the HTTPRoute: route them through a P/D-aware "
                      "router (the Inference Extension's endpoint picker)")
        self.add("httproute.yaml.j2", {
            "api_version": self.crds["gateway_api"], "name": svc.name, "labels": self.base_labels,
            "annotations": {"infra.dev/plan-fingerprint": self.plan.spec.fingerprint},
            "parents": [parent], "backends": backends}, [line])

    def _model(self) -> dict[str, Any]:
        ref = self.svc.model or self.svc.model_id or ""
        try:
            spec = self.catalog.model(ref)
        except CatalogError:
            spec = None
        if spec is None:
            return {"weight_bytes": None, "native": None, "params_b": None}
        # A quantized re-upload the plan serves holds its own format, not the entry's.
        native = checkpoint_precision(self.svc.model_id or "", spec.hf_id) or spec.native_precision
        return {"weight_bytes": spec.params_total_b * 1e9 * BYTES_PER_PARAM[native], "native": native,
                "params_b": spec.params_total_b}

    def _workload(self) -> Workload | None:
        """The service's workload as the plan records it (validated when planned; a hand-edited oddity is None)."""
        try:
            return Workload.model_validate(self.svc.workload) if self.svc.workload else None
        except PydanticValidationError:
            return None

    # --- shared per allocation ----------------------------------------------------------------------------------

    def rates(self, a: Allocation) -> tuple[int, int]:
        """(floor, peak) replicas of an allocation: the peak is what the plan places; the floor carries this
        allocation's share of the workload's baseline rate at capacity_per_replica, and the allocation's share of
        availability.min_replicas, whichever is larger."""
        total_load = sum(x.replicas * x.load_per_replica for x in self.svc.allocations) or 1.0
        share = a.replicas * a.load_per_replica / total_load
        wl = self._workload()
        baseline = wl.rate.baseline_rps if wl is not None and wl.rate is not None else None
        if baseline is None:
            return a.replicas, a.replicas
        need = math.ceil(baseline * share / a.capacity_per_replica - 1e-9) if a.capacity_per_replica > 0 else 1
        total_replicas = sum(x.replicas for x in self.svc.allocations)
        min_replicas = int(self.svc.availability.get("min_replicas", 1) or 1)
        floor_avail = math.ceil(min_replicas * a.replicas / total_replicas - 1e-9)
        return min(a.replicas, max(1, need, floor_avail)), a.replicas


class AllocationBuilder:
    """The workloads (and their companions) of one allocation."""

    def __init__(self, sb: ServiceBuilder, index: int, a: Allocation, fw: FrameworkSpec,
                 model: dict[str, Any]) -> None:
        self.sb, self.a, self.fw, self.model = sb, a, fw, model
        self.index = index
        assert fw.cli is not None
        self.cli: EngineCli = fw.cli
        self.settings = sb.settings
        self.alloc_id = f"a{index}"
        self.name = f"{sb.svc.name}-{self.alloc_id}"
        self.pool: ClusterPool = sb.pools[a.pool]
        self.header: list[str] = []
        self.devices_per_pod = a.devices_per_worker // a.nodes_per_worker
        self.layouts = (a.parallel, a.decode_parallel or a.parallel)
        """(prefill, decode) layouts of a disaggregated allocation, which a KV connector may need to know both of
        (a decode builder on another pool sees only its own layout as `a.parallel`)."""
        self.rdma = [n for n in self.pool.nics if n.kind in RDMA_KINDS]
        self.device = sb.catalog.tables["devices"].find(a.device)
        """The allocation's device in the catalog (None when the catalog rendering uses lacks it)."""
        self.cpu = self.device.cpu if self.device is not None else None
        """Cores and threads of a CPU device (vendor cpu), whose pods request cores and memory; None for
        accelerators."""
        if self.cpu is None and not self.pool.resources.count:
            raise CatalogError(Problem(
                f"pool {self.pool.name} names no device resource, and {a.device} is not a CPU device of the catalog "
                "(whose pods request cores and memory instead)",
                sb.locate(("spec", "cluster", "pools", list(sb.pools).index(self.pool.name), "resources", "count")),
                f"render with the catalog the plan was made with (--catalog), or give conventions.devices."
                f"{self.pool.vendor}.count in the cluster profile and re-plan"))
        self.gang = 0
        """minMember of the allocation's Volcano PodGroup, which every pod of its Deployments names (0: none is
        rendered); set by `build` (`_gang_size`)."""

    def note(self, text: str) -> None:
        self.sb.note(text, self.header)

    def build(self) -> None:
        a = self.a
        if a.mode == "disagg":
            for dev in (self.device, self._for_role("decode").device):
                quirk = dev.feature_quirk(self.fw.name, "pd_disaggregation") if dev is not None else None
                if quirk is not None:
                    raise IntentError(Problem(
                        f"allocation {self.alloc_id} disaggregates prefill and decode on {dev.name}, where "
                        f"{self.fw.name} cannot (quirk {quirk.id}: {quirk.description})",
                        self.sb.locate(("spec", "services", self._service_index(), "allocations", self.index,
                                        "mode")),
                        "plan the service with preferences.disaggregation: off"))
        image = self._image()
        quantization = self._quantization()
        roles = ["agg"] if a.mode == "agg" else ["prefill", "decode"]
        multi = a.nodes_per_worker > 1
        crds = self.sb.crds
        if multi and not crds.get("leaderworkerset"):
            raise IntentError(Problem(
                f"allocation {self.alloc_id} spans {a.nodes_per_worker} nodes per worker, which needs "
                "LeaderWorkerSet, but the cluster lists no leaderworkerset CRD",
                self.sb.locate(("spec", "cluster", "crds")),
                "install LeaderWorkerSet and add `leaderworkerset: leaderworkerset.x-k8s.io/v1` to the cluster "
                "profile's conventions.crds, then re-plan"))
        use_ds = a.mode == "disagg" and bool(crds.get("disaggregatedset"))
        builders = [self._for_role(role) for role in roles]
        self.gang = self._gang_size([b.a for b in builders], use_ds)
        for b in builders:
            b.gang = self.gang
        colocate = a.mode == "disagg" and self.pool.switch is None and self.pool.nodes > 1
        if a.mode == "disagg" and self.pool.switch is not None:
            self.header.append(f"Prefill and decode share leaf switch {self.pool.switch}: every node of pool "
                               f"{self.pool.name} hangs off it.")
        if a.mode == "disagg":
            self.note(f"{self.name}: prefill/decode groups take requests through a P/D-aware router (the "
                      "Gateway API Inference Extension's endpoint picker, or the engine's own router) pointed at "
                      f"the headless Services {self.name}-prefill and {self.name}-decode; they keep "
                      f"{a.replicas} group(s) without autoscaling")
        workloads = []
        for role, b in zip(roles, builders):
            workloads.append(b._workload(role, image if b is self else b._image(), quantization,
                                         b.a.nodes_per_worker > 1, colocate))
        config = self._config_maps(workloads)
        if use_ds:
            self._disaggregated_set(workloads)
        else:
            for w in workloads:
                crd = kind_of(w["kind"]).crd
                if crd:
                    w["api_version"] = crds[crd]
                    self.sb.add(f"{w['kind'].lower()}.yaml.j2", {"w": w}, self.header)
                else:
                    self.sb.add("deployment.yaml.j2", {"w": w}, self.header)
        for cm in config:
            self.sb.add("configmap.yaml.j2", {"cm": cm})
        for w in workloads:
            if w["claim"] is not None:
                self.sb.add("resourceclaimtemplate.yaml.j2", {"claim": w["claim"]})
            self.sb.add("poddisruptionbudget.yaml.j2", {"w": w})
            if a.mode == "disagg":
                self.sb.add("service-role.yaml.j2", {"w": w})
        self._gang(workloads)
        if a.mode == "agg":
            self._autoscaler(workloads[0])

    def _gang_size(self, views: list[Allocation], use_ds: bool) -> int:
        """minMember of the one Volcano PodGroup this allocation renders, or 0 for none. A gang is wanted where a
        replica needs several pods at once (a multi-node worker, a prefill/decode unit) and the scheduler is
        Volcano. LeaderWorkerSet groups (multi-node workers, DisaggregatedSet roles) are ganged one PodGroup per
        group by the LWS controller itself when it runs with Volcano as its gang-scheduling provider; a static
        PodGroup there would be shared by every group. The pods of Deployments all carry the same template, so
        their one PodGroup gangs every pod of the allocation: minMember = all of them."""
        a = self.a
        per_replica = sum(v.nodes_per_worker for v in views) if a.mode == "agg" else (
            views[0].nodes_per_worker * int(a.prefill_workers or 1)
            + views[-1].nodes_per_worker * int(a.decode_workers or 1))
        if not (self.sb.cluster.scheduler == "volcano" and self.sb.crds.get("volcano")) or per_replica <= 1:
            return 0
        if use_ds or any(v.nodes_per_worker > 1 for v in views):
            self.note(f"{self.name}: Volcano gangs each LeaderWorkerSet group through the LWS controller, which "
                      "creates one PodGroup per group (minMember = its pods) when it runs with "
                      "gangSchedulingManagement.schedulerProvider: volcano; configure it so, else the groups are "
                      "scheduled pod by pod")
            return 0
        return a.replicas * per_replica

    def _service_index(self) -> int:
        return next(i for i, x in enumerate(self.sb.plan.spec.services) if x is self.sb.svc)

    def _for_role(self, role: str) -> AllocationBuilder:
        """The builder of one role's pods: this one, or for decode workers on another pool (prefill and decode on
        different device types) one that sees the decode pool, device and layout under the same names."""
        a = self.a
        if role != "decode" or a.decode_parallel is None:
            return self
        view = a.role_view(role, self.sb.pools[a.decode_pool or a.pool].devices_per_node)
        other = AllocationBuilder(self.sb, self.index, view, self.fw, self.model)
        other.header = self.header
        other.layouts = self.layouts
        return other

    # --- images, quantization -----------------------------------------------------------------------------------

    def _image(self) -> str:
        image, pinned = self.fw.image_for(self.a.device, self.pool.vendor)
        if not pinned:
            why = self.device.unplannable if self.device is not None else None
            raise CatalogError(Problem(
                f"framework {self.fw.name} has no image pinned to a release for {self.a.device} "
                f"({image or 'none listed'})" + (f": {why.reason} ({why.source})" if why is not None else ""),
                Location(self.sb.catalog.tables["frameworks"].files.get(self.fw.name), path="image"),
                f"give `images: {{{self.a.device}: <registry>/<image>:<tag>}}` (or `image:` with a tag) in a "
                f"--catalog overlay's frameworks/{self.fw.name}.yaml"))
        return image

    def _quantization(self) -> str | None:
        """The engine's quantization setting, or None with a note when the precision needs a checkpoint the plan
        does not name."""
        q = {e.quantization for e in self.a.engines.values()} - {None}
        if not q:
            return None
        wanted = q.pop()
        online = self.cli.values.get("quantization", {})
        if "quantization" in self.cli.flags and wanted in online:
            return wanted
        native = self.model["native"] or "the published precision"
        self.note(f"{self.name}: {self.a.precision} weights need a pre-quantized checkpoint of "
                  f"{self.sb.svc.model_id} (published in {native}); {self.fw.name} does not quantize to "
                  f"{wanted} on load and the plan names no such checkpoint: replace the model argument with one")
        return None

    # --- workloads ----------------------------------------------------------------------------------------------

    def _workload(self, role: str, image: str, quantization: str | None, multi: bool,
                  colocate: bool) -> dict[str, Any]:
        a = self.a
        name = self.name if role == "agg" else f"{self.name}-{role}"
        labels = {**self.sb.base_labels, "infra.dev/allocation": self.alloc_id, "infra.dev/role": role}
        selector = {"infra.dev/service": self.sb.svc.name, "infra.dev/allocation": self.alloc_id,
                    "infra.dev/role": role}
        if role == "agg":
            replicas = a.replicas
        else:
            per_unit = a.prefill_workers if role == "prefill" else a.decode_workers
            replicas = a.replicas * int(per_unit or 1)
        engine = a.engines.get(role)
        values = self._values(role, engine, quantization)
        claim = self._claim(name, labels)
        pods = []
        for kind in (("leader", "worker") if multi else ("single",)):
            pods.append(self._pod(name, role, kind, image, values, labels, colocate, claim))
        return {
            "name": name, "role": role, "replicas": replicas, "labels": labels, "selector": selector,
            "service_selector": {**selector, SERVES: "true"},
            "kind": "LeaderWorkerSet" if multi else "Deployment", "size": a.nodes_per_worker,
            "annotations": {"infra.dev/plan-fingerprint": self.sb.plan.spec.fingerprint},
            "pod": pods[0], "worker": pods[1] if multi else None, "claim": claim, "values": values,
        }

    def _values(self, role: str, engine: Any, quantization: str | None) -> dict[str, Any]:
        p = self.a.parallel
        v: dict[str, Any] = {
            "model": self._model_path(), "served_model_name": self.sb.svc.name, "host": "0.0.0.0",
            "port": self.cli.port, "tensor_parallel": self.cli.tensor_parallel(p.tp, p.attention_dp),
            "pipeline_parallel": p.pp,
            "data_parallel": p.attention_dp if p.attention_dp > 1 else None, "attention_dp": p.attention_dp > 1,
            "expert_parallel": (True if "expert_parallel" in self.cli.switches else p.ep) if p.ep > 1 else None,
            "max_num_seqs": self.cli.given("max_num_seqs", engine.max_num_seqs, p.attention_dp),
            "max_num_batched_tokens": self.cli.given("max_num_batched_tokens", engine.max_num_batched_tokens,
                                                     p.attention_dp),
            "max_model_len": engine.max_model_len, "memory_utilization": engine.memory_utilization,
            "kv_cache_dtype": engine.kv_cache_dtype, "quantization": quantization,
            "chunked_prefill": engine.chunked_prefill, "prefix_caching": engine.prefix_caching,
            "device_ids": [list(range(self.devices_per_pod))], "device": self.pool.vendor, "metrics": True,
        }
        if role != "agg":
            connector = self.cli.values.get("kv_transfer_config", {})
            v["kv_transfer_config"] = kv_transfer(connector[role], *self.layouts) if role in connector else None
            v["disaggregation_mode"] = role
            v["disaggregation_transfer_backend"] = TRANSFER_BACKEND
            stated = set(self.cli.flags) | set(self.cli.config_file.keys if self.cli.config_file else {})
            if v["kv_transfer_config"] is None and not stated & {"disaggregation_mode",
                                                                 "disaggregation_transfer_backend"}:
                self.note(f"{self.name}: {self.fw.name} states no prefill/decode KV-transfer setting in its "
                          "catalog cli (flags or cli.values.kv_transfer_config); configure the engine's connector "
                          "before applying")
        return v

    def _model_path(self) -> str:
        model_id = self.sb.svc.model_id or ""
        # Engines read Hugging Face ids themselves (into HF_HOME on the cache volume); an engine configured by a
        # file reads a directory, which the model cache holds under the same id.
        if self.cli.config_file is not None and "model" in self.cli.config_file.keys:
            return f"{MODEL_DIR}/{model_id}"
        return model_id

    def _multi_values(self, kind: str) -> dict[str, Any]:
        if not self.fw.launches_multi_node:
            raise CatalogError(Problem(
                f"{self.fw.name} states no multi-node flags, but allocation {self.alloc_id} spans "
                f"{self.a.nodes_per_worker} nodes",
                Location(self.sb.catalog.tables["frameworks"].files.get(self.fw.name), path="cli.flags"),
                "add nnodes, node_rank and master_addr (or dist_init_addr) to the framework's cli.flags, or plan "
                "with a framework that has them"))
        return {
            "nnodes": "$(LWS_GROUP_SIZE)",
            "node_rank": "0" if kind == "leader" else "$(LWS_WORKER_INDEX)",
            "master_addr": "$(LWS_LEADER_ADDRESS)",
            "dist_init_addr": f"$(LWS_LEADER_ADDRESS):{DIST_INIT_PORT}",
            "headless": kind == "worker" or None,
        }

    def _pod(self, name: str, role: str, kind: str, image: str, values: dict[str, Any], labels: dict[str, str],
             colocate: bool, claim: dict[str, Any] | None) -> dict[str, Any]:
        s = self.settings
        vals = dict(values)
        if kind != "single":
            vals.update(self._multi_values(kind))
        serves = kind != "worker"
        args = model_args(vals["model"], self.cli) + engine_settings(vals, self.cli)
        if self.cli.config_file is not None and self.cli.config_file.flag:
            args += [self.cli.config_file.flag, self.cli.config_file.path]
        command = list(self.cli.command)
        if self.cli.config_file is not None and self.cli.config_file.merge:
            command, args = self._merge_command(command, args)
        env = [
            {"name": "HF_HOME", "value": MODEL_DIR},
            {"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {"name": s.hf_token_secret, "key": "token",
                                                                "optional": True}}},
        ]
        if role in self.cli.values.get("kv_transfer_config", {}):
            env += [{"name": name, "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}}
                    for name in self.cli.pod_ip_env]
        if self.cpu is not None:

            sizing = self._cpu_sizing(role)
            env += engine_env(self.fw.env_for(self.a.device, self.pool.vendor), sizing)
            resources = sizing.resources()
        else:
            resources = self._resources(claim is not None)
        volumes, mounts = self._volumes(resources, name)
        if self.sb.stage is not None:
            mount_stage_config(self.sb.stage, volumes, mounts, env)
        probes = self._probes() if serves else None
        pod_labels = {**labels, SERVES: "true" if serves else "false"}
        annotations: dict[str, str] = {}
        if self.gang:
            annotations["scheduling.k8s.io/group-name"] = self.name
        caps = ["IPC_LOCK"] if self.rdma else []
        return {
            "labels": pod_labels, "annotations": annotations,
            "service_account": s.service_account or self.sb.svc.name, "scheduler": self.sb.cluster.scheduler,
            "node_selector": self._node_selector(), "affinity": self._affinity(colocate),
            "image": image, "command": command, "args": args, "env": env,
            "port": self.cli.port if serves else None, "resources": resources, "capabilities": caps,
            "volumes": volumes, "mounts": mounts, "probes": probes,
            "claims": [{"name": "devices"}] if claim else [],
            "resource_claims": [{"name": "devices", "resourceClaimTemplateName": claim["name"]}] if claim else [],
        }

    def _merge_command(self, command: list[str], args: list[str]) -> tuple[list[str], list[str]]:
        """Engines whose file holds far more than a plan decides: merge the rendered settings into the image's
        own file at start (the script travels in the MERGE environment variable), then run the launcher."""
        cf = self.cli.config_file
        assert cf is not None
        shell = (f'python3 -c "$MERGE" {cf.path} {CONFIG_DIR}/{_file_name(cf.path)} && exec '
                 + shlex.join(command + args))
        return ["/bin/bash", "-c"], [shell]

    # --- resources ----------------------------------------------------------------------------------------------

    def _resources(self, dra: bool) -> dict[str, Any]:
        s, a, res = self.settings, self.a, self.pool.resources
        share = a.share if a.share is not None and a.share < 1 else None
        weight = self.devices_per_pod * (share or 1.0)
        cpu = max(2, math.ceil(s.cpu_per_device * weight))
        mem = max(8, math.ceil(s.memory_gi_per_device * weight))
        limits: dict[str, Any] = {"cpu": str(cpu), "memory": f"{mem}Gi"}
        if not dra:
            if share is None:
                limits[res.count] = self.devices_per_pod
            else:
                limits[res.shared_count or res.count] = self.devices_per_pod
                if res.memory:
                    unit = res.memory_unit or 1
                    limits[res.memory] = round(share * self.pool.device_memory_gb * 1e9 / unit)
                else:
                    self.note(f"{self.name}: pool {self.pool.name} names no memory-slice resource, so a "
                              f"{share:g} share cannot be requested; whole devices are requested instead")
                if res.cores:
                    limits[res.cores] = round(share * 100)
        return {"limits": limits, "requests": dict(limits), "memory_gi": mem}

    def _cpu_sizing(self, role: str) -> Any:
        """Cores, memory and per-rank KV cache of a pod on CPU devices (infra.render.cpu), with the notes a user
        must act on."""

        assert self.cpu is not None
        a = self.a
        share = a.share if a.share is not None and a.share < 1 else None
        engine = a.engines.get(role)
        params_b = self.model.get("params_b")
        weights = params_b * 1e9 * BYTES_PER_PARAM.get(a.precision, 2.0) if params_b else None
        ranks = 1 if share else self.devices_per_pod  # one engine rank per socket (NUMA node)
        sizing = size_pod(self.cpu, self.pool.device_memory_gb, self.devices_per_pod * (share or 1.0), ranks,
                          engine.memory_utilization if engine is not None else None, weights, self.settings)
        env = self.fw.env_for(a.device, self.pool.vendor)
        fixed = ", ".join(f"{k}={v}" for k, v in sorted(env.fixed.items())) if env is not None else ""
        sockets = f"{share:g} of a socket" if share else f"{self.devices_per_pod} socket(s)"
        self.note(f"{self.name}: pods hold {sockets} of {a.device} in pool {self.pool.name} as {sizing.cpus} CPUs "
                  f"and {sizing.memory_gi}Gi, requests equal to limits (Guaranteed QoS): give the pool's nodes the "
                  "kubelet's static CPU manager policy so that they get exclusive cores"
                  + (" (and the topology manager's single-numa-node policy, which keeps each pod on one socket)"
                     if sizing.ranks == 1 else "")
                  + (f", to which {self.fw.name} binds its threads ({fixed})" if fixed else ""))
        if env is not None and env.kv_cache_gib and sizing.kv_cache_gib is not None:
            self.note(f"{self.name}: {env.kv_cache_gib}={sizing.kv_cache_gib} GiB of KV cache per rank: the plan's "
                      f"{self.pool.device_memory_gb * 1e9 / 2**30:.1f} GiB per socket x memory_utilization "
                      f"{engine.memory_utilization:g} less {sizing.weights_gib:.1f} GiB of weights and "
                      f"{self.settings.cpu_engine_runtime_gi:g} GiB of runtime")
        elif env is None or not env.kv_cache_gib:
            self.note(f"{self.name}: {self.fw.name} states no KV-cache environment for {a.device} (catalog env); "
                      "the engine sizes its KV cache by its own default")
        self.note(f"{self.name}: {self.fw.name} on CPU binds memory to NUMA nodes with get_mempolicy/migrate_pages, "
                  "which the RuntimeDefault seccomp profile and the absent SYS_NICE capability deny: it serves "
                  "regardless, with the kernel placing memory; where policy allows, add SYS_NICE and a seccomp profile "
                  "allowing migrate_pages in an overlay")
        if sizing.short_gib > 0:
            self.note(f"{self.name}: {sizing.memory_gi}Gi for {sizing.ranks} rank(s) leaves less than 1 GiB of KV "
                      f"cache after {sizing.weights_gib:.1f} GiB of weights per rank; give the pool more memory per "
                      "socket (allocatable_memory) or re-plan")
        return sizing

    def _claim(self, name: str, labels: dict[str, str]) -> dict[str, Any] | None:
        """A ResourceClaimTemplate when the cluster allocates devices through DRA: one request per device, each
        paired with an RDMA NIC on the same PCIe root while NICs with a known root last."""
        api = self.sb.crds.get("dra")
        if not api or self.cpu is not None:  # CPU sockets are requested as cores and memory
            return None
        classes = self.settings.dra_device_classes
        gpu_class = classes.get(self.pool.vendor)
        if gpu_class is None:
            self.note(f"{self.name}: no DRA device class is known for {self.pool.vendor} devices "
                      "(settings.yaml dra_device_classes); devices are requested through the device plugin")
            return None
        if self.a.share is not None and self.a.share < 1:
            self.note(f"{self.name}: a {self.a.share:g} device share is requested through the device plugin "
                      "(HAMi), not DRA")
            return None
        nics = [n for n in self.rdma if n.pcie_root]
        nic_class = classes.get("rdma")
        pairs = min(len(nics), self.devices_per_pod) if nic_class else 0
        requests: list[dict[str, Any]] = []
        constraints: list[dict[str, Any]] = []
        for k in range(pairs):
            requests.append({"name": f"gpu-{k}", "exactly": {"deviceClassName": gpu_class, "count": 1}})
            requests.append({"name": f"nic-{k}", "exactly": {"deviceClassName": nic_class, "count": 1}})
            constraints.append({"requests": [f"gpu-{k}", f"nic-{k}"],
                                "matchAttribute": "resource.kubernetes.io/pcieRoot"})
        rest = self.devices_per_pod - pairs
        if rest:
            requests.append({"name": "gpu", "exactly": {"deviceClassName": gpu_class, "count": rest}})
        # Named like its workload (MANIFESTS.md): objects of different kinds may share a name.
        return {"api_version": api, "name": name, "requests": requests, "constraints": constraints,
                "labels": labels}

    def _volumes(self, resources: dict[str, Any], name: str) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        s = self.settings
        cache = self.sb.cluster.model_cache
        if cache:
            model_volume: dict[str, Any] = {"name": "model-cache", "persistentVolumeClaim": {"claimName": cache}}
        else:
            size = self.model["weight_bytes"]
            empty: dict[str, Any] = {}
            if size:
                empty["sizeLimit"] = f"{math.ceil(size * s.weights_headroom / 2**30)}Gi"
            model_volume = {"name": "model-cache", "emptyDir": empty}
        shm = max(1, math.floor(resources["memory_gi"] * s.shm_fraction))
        volumes = [model_volume, {"name": "shm", "emptyDir": {"medium": "Memory", "sizeLimit": f"{shm}Gi"}}]
        mounts = [{"name": "model-cache", "mountPath": MODEL_DIR}, {"name": "shm", "mountPath": "/dev/shm"}]
        cf = self.cli.config_file
        if cf is not None:
            # A file merged into the image's own is mounted beside it; any other replaces its directory.
            where = CONFIG_DIR if cf.merge else cf.path.rsplit("/", 1)[0]
            volumes.append({"name": "engine-config", "configMap": {"name": name}})
            mounts.append({"name": "engine-config", "mountPath": where, "readOnly": True})
        return volumes, mounts

    def _probes(self) -> dict[str, Any]:
        s = self.settings
        size = self.model["weight_bytes"] or 0.0
        budget = size / (s.load_bandwidth_mb_s * 1e6) + s.engine_init_s
        action: dict[str, Any]
        if self.cli.health_path:
            action = {"httpGet": {"path": self.cli.health_path, "port": "http"}}
        else:
            action = {"tcpSocket": {"port": "http"}}
        return {
            "startup": {**action, "periodSeconds": s.probe_period_s,
                        "failureThreshold": max(1, math.ceil(budget / s.probe_period_s))},
            "readiness": {**action, "periodSeconds": s.probe_period_s, "failureThreshold": 3},
            "liveness": {**action, "periodSeconds": s.probe_period_s, "failureThreshold": 6},
            "budget_s": round(budget),
        }

    # --- placement ----------------------------------------------------------------------------------------------

    def _node_selector(self) -> dict[str, str]:
        sel = dict(self.pool.node_selector)
        if self.pool.zone:
            sel[self.settings.zone_label] = self.pool.zone
        if not self.pool.node_selector and not self.pool.node_names:
            self.note(f"{self.name}: pool {self.pool.name} has no node_selector, so its pods may land on other "
                      "pools' nodes; add node_selector to the pool in the cluster profile")
        return dict(sorted(sel.items()))

    def _affinity(self, colocate: bool) -> dict[str, Any] | None:
        out: dict[str, Any] = {}
        if self.pool.node_names:
            out["nodeAffinity"] = {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
                {"matchExpressions": [{"key": "kubernetes.io/hostname", "operator": "In",
                                       "values": sorted(self.pool.node_names)}]}]}}
        if colocate:
            out["podAffinity"] = {"requiredDuringSchedulingIgnoredDuringExecution": [{
                "labelSelector": {"matchLabels": {"infra.dev/service": self.sb.svc.name,
                                                  "infra.dev/allocation": self.alloc_id}},
                "topologyKey": self.settings.switch_label}]}
            line = (f"Prefill and decode pods of {self.name} stay under one leaf switch (pod affinity on node "
                    f"label {self.settings.switch_label}).")
            if line not in self.header:
                self.header.append(line)
        for before in self.sb.stage.inputs if self.sb.stage is not None else []:
            if before.spec.colocated_with != self.sb.stage.spec.name:
                continue
            # The plan packs the two stages' replicas onto the same nodes so that the hand-off stays inside one.
            out.setdefault("podAffinity", {}).setdefault("requiredDuringSchedulingIgnoredDuringExecution", []).append(
                {"labelSelector": {"matchLabels": dict(before.labels)}, "topologyKey": "kubernetes.io/hostname"})
            line = (f"Pods of {self.name} run on nodes that hold a pod of stage {before.spec.name} (co-located: "
                    "the hand-off stays inside the node).")
            if line not in self.header:
                self.header.append(line)
        return out or None

    # --- companions ---------------------------------------------------------------------------------------------

    def _config_maps(self, workloads: list[dict[str, Any]]) -> list[dict[str, Any]]:
        cf = self.cli.config_file
        if cf is None:
            return []
        out = []
        for w in workloads:
            content = config_file_content(w["values"], self.cli)
            if cf.format == "json":
                text = json.dumps(content, indent=2, sort_keys=True) + "\n"
            else:

                text = dump_yaml(content)
            data = {_file_name(cf.path): text}
            if cf.merge:
                for pod in (w["pod"], w["worker"]):
                    if pod is not None:
                        pod["env"].append({"name": "MERGE", "value": self._merge_script()})
            out.append({"name": w["name"], "labels": w["labels"], "data": data})
        return out

    def _merge_script(self) -> str:
        return (
            "import json,sys\n"
            "def merge(a,b):\n"
            "    for k,v in b.items():\n"
            "        if isinstance(v,dict) and isinstance(a.get(k),dict): merge(a[k],v)\n"
            "        elif isinstance(v,list) and isinstance(a.get(k),list) and v and isinstance(v[0],dict):\n"
            "            for i,x in enumerate(v):\n"
            "                merge(a[k][i],x) if i<len(a[k]) and isinstance(a[k][i],dict) else a[k].append(x)\n"
            "        else: a[k]=v\n"
            "base=json.load(open(sys.argv[1]))\n"
            "merge(base,json.load(open(sys.argv[2])))\n"
            "json.dump(base,open(sys.argv[1],'w'),indent=2)\n"
        )

    def _disaggregated_set(self, workloads: list[dict[str, Any]]) -> None:
        for w in workloads:
            w["api_version"] = self.sb.crds.get("leaderworkerset", "leaderworkerset.x-k8s.io/v1")
        self.sb.add("disaggregatedset.yaml.j2", {
            "ds": {"api_version": self.sb.crds["disaggregatedset"], "name": self.name,
                   "labels": {**self.sb.base_labels, "infra.dev/allocation": self.alloc_id},
                   "annotations": {"infra.dev/plan-fingerprint": self.sb.plan.spec.fingerprint},
                   "roles": workloads}}, self.header)

    def _gang(self, workloads: list[dict[str, Any]]) -> None:
        if not self.gang:
            return
        self.sb.add("podgroup.yaml.j2", {"pg": {
            "api_version": self.sb.crds["volcano"], "name": self.name, "min_member": self.gang,
            "labels": {**self.sb.base_labels, "infra.dev/allocation": self.alloc_id},
            "annotations": {"infra.dev/plan-fingerprint": self.sb.plan.spec.fingerprint}}})

    def _autoscaler(self, w: dict[str, Any]) -> None:
        floor, peak = self.sb.rates(self.a)
        if floor >= peak:
            return
        metric = self.cli.running_metric
        if metric is None or "agg" not in self.a.engines:
            self.note(f"{self.name}: {self.fw.name} states no running-requests metric (catalog cli."
                      f"running_metric), so it keeps {peak} replicas without autoscaling")
            return
        # The target is the batch one replica runs at the planned load: the predicted batch at capacity (of every
        # attention group) scaled by the planned load over the replica's capacity.
        engine = self.a.engines["agg"]
        load = self.a.load_per_replica / self.a.capacity_per_replica if self.a.capacity_per_replica else 1.0
        batch = (engine.batch_at_capacity * self.a.parallel.attention_dp if engine.batch_at_capacity is not None
                 else engine.max_num_seqs)
        target = max(1, round(batch * min(1.0, load)))
        ref = {"api_version": w.get("api_version", "apps/v1"), "kind": w["kind"], "name": w["name"]}
        crd = kind_of(w["kind"]).crd
        if crd:
            ref["api_version"] = self.sb.crds[crd]
        ctx = {"name": w["name"], "labels": w["labels"], "min": floor, "max": peak, "ref": ref, "metric": metric,
               "target": target}
        if self.sb.crds.get("keda"):
            ctx["api_version"] = self.sb.crds["keda"]
            ctx["query"] = (f'sum({metric}{{namespace="{self.sb.cluster.namespace}",'
                            f'pod=~"{w["name"]}-.*"}})')
            ctx["server"] = self.settings.prometheus_url
            self.sb.add("scaledobject.yaml.j2", {"hpa": ctx})
        else:
            self.sb.add("horizontalpodautoscaler.yaml.j2", {"hpa": ctx})


def _file_name(path: str) -> str:
    return path.rsplit("/", 1)[-1]
