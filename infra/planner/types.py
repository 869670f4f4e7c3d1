"""The DeploymentPlan contract (`plan.yaml`): what the planner decided, why, and from what.

Only the planner creates a plan; rendering, verification and GitOps read it through `load_plan`, so the file is
validated in both directions (a plan that does not fit this model is never written, and a hand-edited one that
breaks it is refused with its line).
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field
from pydantic import ValidationError as PydanticValidationError

from infra.errors import IntentError


class PlanModel(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, use_attribute_docstrings=True)


class Layout(PlanModel):
    """Parallel layout of one worker."""

    tp: int
    pp: int
    ep: int
    moe_tp: int
    attention_dp: int


class Objective(PlanModel):
    """One latency objective at one percentile, as predicted at the planned load."""

    target_ms: float
    predicted_ms: float
    margin: float
    """1 - predicted / target: the share of the target left unused (negative would mean missed)."""


class Allocation(PlanModel):
    """Replicas of one shape on one pool."""

    pool: str
    device: str
    framework: str
    precision: str
    mode: Literal["agg", "disagg"]
    parallel: Layout
    prefill_workers: int | None = None
    decode_workers: int | None = None
    share: float | None = None
    """Fraction of a device per replica when devices are sliced (HAMi)."""
    replicas: int = Field(ge=1)
    devices_per_replica: float
    devices: float
    capacity_per_replica: float
    load_per_replica: float
    cost_per_hour: float
    predicted: dict[str, Objective]
    """Objective key (`ttft_p99`) -> prediction at this allocation's share of the peak load."""
    calibrated: bool
    calibration_source: str


class Quantity(PlanModel):
    value: float
    unit: str


class ServicePlan(PlanModel):
    """What one service gets."""

    name: str
    model: str | None
    demand: Quantity
    """Peak load from the intent."""
    required: Quantity
    """Capacity the plan had to provide: demand plus the intent's headroom."""
    capacity: Quantity
    headroom: float
    served: float
    """Share of the peak demand the plan carries within the objectives (below 1 only for the goodput
    objective)."""
    allocations: list[Allocation]
    cost_per_hour: float
    cost_per_million_tokens: float | None = None
    cost_per_request: float | None = None


class Solver(PlanModel):
    engine: Literal["cp-sat"]
    objective: Literal["cost", "goodput"]
    status: str
    gap: float
    candidates: int
    considered: int


class Cost(PlanModel):
    per_hour: float
    by_pool: dict[str, float]


class Alternative(PlanModel):
    """The best plan of another kind (other device, framework, or serving mode)."""

    label: str
    cost_per_hour: float
    delta_per_hour: float
    uses: list[str]


class Calibration(PlanModel):
    fitted: str | None
    data_sha256: str | None


class Provenance(PlanModel):
    catalog: str
    calibration: Calibration


class PlanSpec(PlanModel):
    fingerprint: str
    """sha256 over the intent, cluster, catalog and calibration: the same fingerprint means the same inputs."""
    solver: Solver
    cost: Cost
    services: list[ServicePlan]
    binding: list[str]
    """Constraints the plan runs up against (full pools, budgets nearly spent, minimum replicas, zones)."""
    alternatives: list[Alternative]
    assumptions: list[str]
    provenance: Provenance


class Metadata(PlanModel):
    name: str


class DeploymentPlan(PlanModel):
    """A solved intent (`kind: DeploymentPlan`)."""

    api_version: Literal["infra.dev/v1alpha1"] = Field(alias="apiVersion")
    kind: Literal["DeploymentPlan"]
    metadata: Metadata
    spec: PlanSpec


def load_plan(path: str | Path) -> DeploymentPlan:
    """Read and validate a plan.yaml; problems name the file, line and field."""
    from infra.intent.loader import problems_from_pydantic
    from infra.intent.yamlio import load_yaml, read_text

    text = read_text(Path(path), "plan")
    data, smap = load_yaml(text, str(path))
    try:
        return DeploymentPlan.model_validate(data)
    except PydanticValidationError as exc:
        raise IntentError(problems_from_pydantic(exc, DeploymentPlan, data, smap)) from None
