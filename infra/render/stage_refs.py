"""Pipeline stages as rendering names them: each stage's objects, its neighbours and the stage config
(`stage.yaml`, kind `StageConfig`) a ConfigMap carries to it (see `infra.render.stages` for the workloads).
Below the builders of `infra.render.context` and `infra.render.stages`, which both use it."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from infra.catalog.loader import Catalog
from infra.errors import CatalogError
from infra.planner.types import DeploymentPlan, PipelineStage
from infra.render.yamlout import dump_yaml

STAGE_CONFIG_DIR = "/etc/infra/stage"
STAGE_CONFIG_FILE = "stage.yaml"
STAGE_CONFIG_ENV = "INFRA_STAGE_CONFIG"
STAGE_CONFIG_KIND = "StageConfig"
API_VERSION = "infra.dev/v1alpha1"


@dataclass
class StageRef:
    """One stage of one pipeline, as rendering and validation name it."""

    pipeline: str
    index: int
    spec: PipelineStage
    service: str
    """Kubernetes name of the stage's objects: its service entry (`unit`), or `<pipeline>-<stage>` on CPU."""
    namespace: str
    port: int | None
    """Port its Service listens on (the engine's; a CPU stage's own), None when nothing serves."""
    inputs: list[StageRef] = field(default_factory=list)
    """The stages it consumes (several when branches join, e.g. two encoders into one LLM)."""
    next: StageRef | None = None
    """The stage it hands on to (None for the pipeline's last stage)."""
    config: dict[str, Any] = field(default_factory=dict)
    """What the stage config states about the stage itself (filled from the plan)."""

    @property
    def labels(self) -> dict[str, str]:
        return {"infra.dev/pipeline": self.pipeline, "infra.dev/stage": self.spec.name}

    @property
    def address(self) -> str | None:
        if self.port is None:
            return None
        return f"http://{self.service}.{self.namespace}.svc.cluster.local:{self.port}"


def pipeline_stages(plan: DeploymentPlan, catalog: Catalog) -> dict[str, StageRef]:
    """Every stage of every pipeline by the name of its objects, linked to its neighbours in pipeline order."""
    services = {s.name: s for s in plan.spec.services}
    out: dict[str, StageRef] = {}
    for p in plan.spec.pipelines:
        chain: list[StageRef] = []
        for i, (st, ins) in enumerate(zip(p.stages, p.inputs())):
            svc = services.get(st.unit) if st.unit else None
            name = st.unit if svc is not None else f"{p.service}-{st.name}"
            port = st.port
            config: dict[str, Any] = {"stage_kind": st.kind}
            if svc is not None:
                # Only aggregated allocations sit behind the stage's Service; prefill/decode groups are reached
                # through a P/D-aware router, whose address the plan does not know.
                agg = [a for a in svc.allocations if a.mode == "agg"]
                port = _engine_port(catalog, agg[0].framework) if agg else None
                config.update(_service_config(svc))
            else:
                config["cpu_cores"] = st.cpu_cores
            ref = StageRef(p.service, i, st, name, plan.spec.cluster.namespace, port, config=config)
            ref.inputs = [chain[j] for j in ins]
            for j in ins:
                chain[j].next = ref
            chain.append(ref)
            out[name] = ref
    return out


def _engine_port(catalog: Catalog, framework: str) -> int | None:
    try:
        fw = catalog.framework(framework)
    except CatalogError:
        return None  # check_plan reports the unknown framework with its line
    return fw.cli.port if fw.cli is not None else None


def _service_config(svc: Any) -> dict[str, Any]:
    allocations = []
    for i, a in enumerate(svc.allocations):
        p = a.parallel
        entry: dict[str, Any] = {
            "id": f"a{i}", "pool": a.pool, "device": a.device, "framework": a.framework, "precision": a.precision,
            "parallel": {"tp": p.tp, "pp": p.pp, "sp": p.sp}, "devices_per_replica": a.devices_per_worker,
            "replicas": a.replicas,
        }
        if a.share is not None and a.share < 1:
            entry["share"] = a.share
        # The batch an engine runs: its sequence cap (decode's under prefill/decode), where the plan sets one.
        engine = a.engines.get("agg") or a.engines.get("decode")
        if engine is not None:
            entry["max_num_seqs"] = engine.max_num_seqs
        allocations.append(entry)
    return {"model": svc.model, "model_id": svc.model_id, "allocations": allocations}


def stage_config(ref: StageRef) -> dict[str, Any]:
    """The StageConfig document of one stage."""
    st = ref.spec
    doc: dict[str, Any] = {"apiVersion": API_VERSION, "kind": STAGE_CONFIG_KIND, "pipeline": ref.pipeline,
                           "stage": st.name, "index": ref.index, **ref.config, "streams": st.streams}
    if st.budget_ms:
        doc["budget_ms"] = dict(sorted(st.budget_ms.items()))
    doc["inputs"] = [_link(r, r.spec.streams) for r in ref.inputs]
    doc["output"] = _link(ref.next, st.streams, st.handoff)
    if st.colocated_with:
        doc["output"]["colocated"] = True
    doc["final_output"] = ref.next is None
    return doc


def _link(other: StageRef | None, streams: bool, handoff: Any = None) -> dict[str, Any] | None:
    """One connector: the neighbouring stage, its Service and address, whether chunks pass as produced, and the
    link the plan's hand-off crosses when it has one."""
    if other is None:
        return None
    link = {"stage": other.spec.name, "service": other.service, "address": other.address, "streams": streams}
    if handoff is not None:
        link["handoff"] = handoff.model_dump(mode="json", exclude_none=True)
    return link


def handoff_note(ref: StageRef) -> str:
    """What the user must know about the connectors: the engines do not read them."""
    return (f"{ref.pipeline}: each stage's ConfigMap <stage>-stage names the stage it takes input from and the "
            "address it hands output to; the engines do not read it (vLLM-Omni's connectors join only the stages of "
            "one vLLM-Omni pipeline behind its orchestrator), so the client or gateway that carries a request from "
            "stage to stage must follow those addresses")


def stage_config_map(ref: StageRef, labels: dict[str, str]) -> dict[str, Any]:
    """Context of the stage's ConfigMap."""
    return {"name": f"{ref.service}-stage", "labels": labels, "data": {STAGE_CONFIG_FILE: dump_yaml(stage_config(ref))}}


def mount_stage_config(ref: StageRef, volumes: list[dict[str, Any]], mounts: list[dict[str, Any]],
                       env: list[dict[str, Any]]) -> None:
    """Mount the stage's config into a pod and name it in the environment."""
    volumes.append({"name": "stage-config", "configMap": {"name": f"{ref.service}-stage"}})
    mounts.append({"name": "stage-config", "mountPath": STAGE_CONFIG_DIR, "readOnly": True})
    env.append({"name": STAGE_CONFIG_ENV, "value": f"{STAGE_CONFIG_DIR}/{STAGE_CONFIG_FILE}"})


def model_repository(model_id: str) -> str:
    """The Hugging Face repository of a stage's model: `org/name` of `org/name/submodule`."""
    return "/".join(model_id.split("/")[:2])


def loaded_repository(model_id: str, fw: Any) -> str:
    """The repository a stage engine loads: the model's, or the conversion the framework's catalog names for it."""
    repo = model_repository(model_id)
    return str(fw.checkpoints.get(repo, repo))
