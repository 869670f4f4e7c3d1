"""Pipeline stages: one workload per stage, each with its stage config and the address of the next stage.

A pipeline (`spec.pipelines[]`) lists its stages in order. Stages planned on a device are services of the plan
(`<pipeline>-<stage>`): LLM stages render as any LLM service does; encoder, codec and DiT stages run vLLM-Omni
(`vllm serve MODEL --omni`, the catalog's `cli`) on the devices, pool and layout the plan gives them (sequence
parallel `sp` as Ulysses degree); CPU stages render as a Deployment on CPU that requests the stage's `cpu_cores`.

Every stage also gets a ConfigMap `<pipeline>-<stage>-stage` holding `stage.yaml` (kind `StageConfig`), mounted at
`/etc/infra/stage/` with `INFRA_STAGE_CONFIG` naming it. It states what the plan decided for the stage (model,
precision, layout, devices, replicas, batch) and its connectors: the stage it takes input from and the stage it
hands output to, by Service name and address, with `streams` saying whether chunks pass as they are produced.
Validation reads it back (infra/validators/pipeline.py) to check the chain against the plan.

vLLM-Omni's own connectors (SharedMemoryConnector, MooncakeStoreConnector) join the stages of one vLLM-Omni
pipeline behind one orchestrator (`--stage-id`, `--omni-master-address`); a plan that gives each stage its own
engine and pool hands off between their HTTP endpoints instead, which is what the stage config records.
"""

from __future__ import annotations

from typing import Any

from infra.errors import CatalogError, IntentError, Problem
from infra.planner.types import DeploymentPlan
from infra.render.context import AllocationBuilder, Doc
from infra.render.settings import Settings
from infra.render.stage_refs import (
    StageRef,
    handoff_note,
    loaded_repository,
    model_repository,
    mount_stage_config,
    stage_config_map,
)


# --- stages on vLLM-Omni ------------------------------------------------------------------------------------------

class StageAllocationBuilder(AllocationBuilder):
    """The workload of an encoder, codec or DiT stage: vLLM-Omni's server for the stage's model on the planned
    devices, with the plan's tensor-parallel size and sequence-parallel degree (Ulysses)."""

    def build(self) -> None:
        if self.a.nodes_per_worker > 1:
            si = next(i for i, s in enumerate(self.sb.plan.spec.services) if s.name == self.sb.svc.name)
            raise IntentError(Problem(
                f"stage {self.sb.svc.stage} of pipeline {self.sb.svc.pipeline} spans {self.a.nodes_per_worker} "
                f"nodes per worker; {self.fw.name} spans nodes only through a Ray cluster "
                "(distributed_executor_backend: ray, https://docs.vllm.ai/projects/vllm-omni/en/stable/configuration/"
                "stage_configs/), which rendering does not set up",
                self.sb.locate(("spec", "services", si, "allocations", self.index, "nodes_per_worker")),
                "plan the stage within one node (a sequence-parallel degree of at most the devices per node), or "
                "deploy it on a Ray cluster by hand"))
        sp = self.a.parallel.sp
        heads = self._heads()
        if sp > 1 and heads is not None and heads % sp:
            self.note(f"{self.name}: Ulysses sequence parallelism splits attention heads, and {heads} heads do not "
                      f"divide by {sp}: add `--ulysses-mode advanced_uaa` (vLLM-Omni's uneven mode, "
                      "https://docs.vllm.ai/projects/vllm-omni/en/stable/user_guide/diffusion/parallelism/"
                      "sequence_parallel/) or re-plan with a degree that divides them")
        model_id = self.sb.svc.model_id or ""
        repo = model_repository(model_id)
        if repo != model_id:
            self.note(
                f"{self.name}: {self.fw.name} is given the repository {repo}, not the {model_id.split('/', 2)[2]} "
                f"stage alone: {self.fw.name} runs one stage of a model per process only as a stage of that model's "
                "own pipeline (`--stage-id N` with an omni master, `--omni-master-address`/`--omni-master-port`, "
                "https://docs.vllm.ai/projects/vllm-omni/en/stable/cli/serve/), which the plan does not run: supply "
                "the stage id and master, or an image and checkpoint of the stage alone, before applying")
        super().build()

    def _heads(self) -> int | None:
        try:
            return self.sb.catalog.model(self.sb.svc.model or self.sb.svc.model_id or "").attention_heads
        except CatalogError:
            return None

    def _quantization(self) -> str | None:
        native = self.model["native"]
        if native is None or self.a.precision == native:
            return None
        online = self.cli.values.get("quantization", {})
        if self.a.precision in online:
            return self.a.precision
        self.note(f"{self.name}: {self.a.precision} weights need a pre-quantized checkpoint of "
                  f"{self.sb.svc.model_id}; {self.fw.name} quantizes online only to "
                  f"{', '.join(sorted(online)) or 'nothing'}")
        return None

    def _values(self, role: str, engine: Any, quantization: str | None) -> dict[str, Any]:
        p = self.a.parallel
        return {
            "model": loaded_repository(self.sb.svc.model_id or "", self.fw), "omni": True, "host": "0.0.0.0",
            "port": self.cli.port, "tensor_parallel": p.tp if p.tp > 1 else None,
            "ulysses_degree": p.sp if p.sp > 1 else None, "quantization": quantization,
        }


# --- stages on CPU ------------------------------------------------------------------------------------------------

def build_cpu_stages(plan: DeploymentPlan, stages: dict[str, StageRef], settings: Settings, docs: list[Any],
                     notes: list[str]) -> None:
    """A Deployment (and Service) per CPU stage whose container the plan names, and every CPU stage's config."""
    services = {s.name for s in plan.spec.services}
    for ref in stages.values():
        if ref.service in services:
            continue
        st = ref.spec
        labels = {
            "app.kubernetes.io/name": ref.service, "app.kubernetes.io/part-of": plan.metadata.name,
            "app.kubernetes.io/managed-by": "infra", "infra.dev/service": ref.service, **ref.labels,
        }
        common = {"plan": {"name": plan.metadata.name, "fingerprint": plan.spec.fingerprint},
                  "cluster": {"name": plan.spec.cluster.name, "namespace": plan.spec.cluster.namespace},
                  "service": {"name": ref.service, "labels": labels}}
        docs.append(Doc("configmap.yaml.j2", ref.service, {**common, "cm": stage_config_map(ref, labels)},
                        [handoff_note(ref)]))
        if not st.image:
            notes.append(f"{ref.service}: CPU stage {st.name} of pipeline {ref.pipeline} has no container image in "
                         "the plan, so no workload is rendered for it: set image (and command, port) on the stage "
                         f"under spec.pipelines[] of the plan, then render again")
            continue
        pod = _cpu_pod(plan, ref, labels, settings, notes)
        selector = {"infra.dev/service": ref.service, "infra.dev/stage": st.name}
        docs.append(Doc("deployment.yaml.j2", ref.service, {**common, "w": {
            "name": ref.service, "labels": labels, "selector": selector, "replicas": 1,
            "annotations": {"infra.dev/plan-fingerprint": plan.spec.fingerprint}, "pod": pod}}))
        if ref.port is not None:
            docs.append(Doc("service.yaml.j2", ref.service, {**common, "name": ref.service, "port": ref.port,
                                                             "selector": selector}))
        if not settings.service_account:
            docs.append(Doc("serviceaccount.yaml.j2", ref.service, {**common, "name": ref.service}))


def _cpu_pod(plan: DeploymentPlan, ref: StageRef, labels: dict[str, str], settings: Settings,
             notes: list[str]) -> dict[str, Any]:
    st = ref.spec
    cores = max(1, st.cpu_cores or 1)
    mem = max(1, cores * settings.cpu_stage_memory_gi_per_core)
    limits = {"cpu": str(cores), "memory": f"{mem}Gi"}
    pools = {p.name: p for p in plan.spec.cluster.cpu_pools}
    node_selector: dict[str, str] = {}
    if st.pool in pools:
        node_selector = dict(sorted(pools[st.pool].node_selector.items()))
        if not node_selector:
            notes.append(f"{ref.service}: CPU pool {st.pool} has no node_selector, so the CPU stage's pods may land "
                         "on any node; add node_selector to the pool in the cluster profile")
    elif st.pool:
        notes.append(f"{ref.service}: CPU stage {st.name} names pool {st.pool}, which is not in "
                     "spec.cluster.cpu_pools, so its pod selects no nodes")
    volumes: list[dict[str, Any]] = []
    mounts: list[dict[str, Any]] = []
    env: list[dict[str, Any]] = []
    mount_stage_config(ref, volumes, mounts, env)
    probe = {"tcpSocket": {"port": "http"}, "periodSeconds": settings.probe_period_s, "failureThreshold": 3}
    return {
        "labels": labels, "annotations": {}, "service_account": settings.service_account or ref.service,
        "scheduler": plan.spec.cluster.scheduler, "node_selector": node_selector, "affinity": None,
        "image": st.image, "command": list(st.command or []), "args": [], "env": env, "port": ref.port,
        "resources": {"limits": limits, "requests": dict(limits)}, "capabilities": [], "volumes": volumes,
        "mounts": mounts, "claims": [], "resource_claims": [],
        "probes": {"startup": {**probe, "failureThreshold": 30}, "readiness": probe, "liveness": probe}
        if ref.port is not None else None,
    }
