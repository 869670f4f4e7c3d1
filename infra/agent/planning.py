"""The planning functions the agent works with, handed down by the caller.

Every draft and patch the model proposes goes through the same `check` and `plan` as the user's own files. Those
live in `infra.workflow`, which the agent does not import (the workflow is what the commands run; the agent is one
of its users), so `infra.api` passes them in as a `Planning` and the layers read top to bottom.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from infra.planner.types import DeploymentPlan

if TYPE_CHECKING:
    from infra.intent.profile import ClusterProfile


class Checked(Protocol):
    """What the agent reads of a check's result (`infra.intent.resolve.CheckResult`)."""

    @property
    def kind(self) -> str: ...

    @property
    def profile(self) -> ClusterProfile | None: ...


class Planned(Protocol):
    """What the agent reads of a plan's result (`infra.workflow.plan.PlanResult`)."""

    @property
    def plan(self) -> DeploymentPlan: ...

    @property
    def written(self) -> list[Path]: ...


class PlanFn(Protocol):
    """`infra.workflow.plan.plan`, as far as the agent calls it."""

    def __call__(self, path: str | Path, output: str | Path | None = None, *, catalog_dirs: tuple[Path, ...] = (),
                 objective: str = "cost", changes: list[dict[str, Any]] | None = None) -> Planned: ...


@dataclass(frozen=True)
class Planning:
    check: Callable[[Path, tuple[Path, ...]], Checked]
    """Validate an intent or cluster profile file (`infra check`); raises IntentError listing every problem."""
    plan: PlanFn
    """Solve an intent (`infra plan`), writing the plan into `output` when given; raises InfeasibleError."""
