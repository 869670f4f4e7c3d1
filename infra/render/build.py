"""Every object of a plan as template contexts: each service's builder (`infra.render.context`), its pipeline
stage's workload where the service is one (`infra.render.stages`), and the CPU stages."""

from __future__ import annotations

from infra.catalog.loader import Catalog
from infra.planner.types import DeploymentPlan
from infra.render.context import Built, Doc, Locate, ServiceBuilder, check_plan
from infra.render.settings import Settings
from infra.render.stage_refs import pipeline_stages
from infra.render.stages import StageAllocationBuilder, build_cpu_stages


def build(plan: DeploymentPlan, catalog: Catalog, settings: Settings, locate: Locate) -> Built:
    """Contexts for every object of every service, in a stable order."""
    check_plan(plan, catalog, locate)
    docs: list[Doc] = []
    notes: list[str] = []
    stages = pipeline_stages(plan, catalog)
    for svc in plan.spec.services:
        sb = ServiceBuilder(plan, svc, catalog, settings, docs, notes, locate, stages.get(svc.name))
        if sb.stage is not None and sb.stage.inputs and sb.stage.address is None:
            notes.append(f"{svc.name}: stage {svc.stage} of pipeline {svc.pipeline} runs prefill/decode groups "
                         f"only, so its stage config gives {', '.join(r.service for r in sb.stage.inputs)} no "
                         "address to hand off to: point it at the P/D-aware router in front of them")
        if not svc.runs_llm_engine:
            sb.allocation_builder = StageAllocationBuilder
        sb.build()
    build_cpu_stages(plan, stages, settings, docs, notes)
    return Built(docs, notes)
