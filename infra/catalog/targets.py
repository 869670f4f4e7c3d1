"""Deployment targets: the stacks a plan renders for, and how each launches an engine where it differs from the
framework's own launcher (`data/targets.yaml`).

`kubernetes` (the default) is infra's own Deployments and LeaderWorkerSets; `dynamo` is NVIDIA Dynamo's
DynamoGraphDeployment, `llm-d` the values of llm-d's model-service chart with the Gateway API Inference Extension's
InferencePool and endpoint picker, `kserve` KServe's LLMInferenceService. Rendering and validation both derive the
engine's `EngineCli` for a target here, so that what one writes the other reads back the same way.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import lru_cache
from typing import Any

from pydantic import Field

from infra.catalog.schema import CatalogModel, EngineCli, EngineSetting, FrameworkSpec
from infra.errors import IntentError, Location, Problem

DEFAULT_TARGET = "kubernetes"
TARGETS = ("kubernetes", "dynamo", "llm-d", "kserve")
MODELSERVICE_CHART = "llm-d-modelservice"
"""llm-d's model-service Helm chart, whose values the llm-d target writes for each allocation (its release)."""
KSERVE_WORKLOAD_SUFFIX = "-kserve"
"""What KServe's LLMInferenceService controller appends to the resource's name for its main workload
(pkg/controller/llmisvc: kmeta.ChildName(name, "-kserve"))."""


KSERVE_PART_OF = "llminferenceservice"
KSERVE_WORKLOAD_COMPONENTS = ("llminferenceservice-workload", "llminferenceservice-workload-leader")
"""`app.kubernetes.io/component` of the pods of an LLMInferenceService's main workload that serve (a single-node
Deployment's, a LeaderWorkerSet's leaders), beside `app.kubernetes.io/part-of: llminferenceservice` and
`app.kubernetes.io/name: <the resource's name>` (the llmisvc controller's singleNodeLabels and multi-node leader
labels, pkg/controller/v1alpha1/llmisvc/workload_single_node.go and v1alpha2's workload_multi_node.go)."""


def kserve_pod_labels(name: str) -> list[dict[str, str]]:
    """The labels of the serving pods KServe's controller creates for the LLMInferenceService `name`."""
    return [{"app.kubernetes.io/name": name, "app.kubernetes.io/part-of": KSERVE_PART_OF,
             "app.kubernetes.io/component": component} for component in KSERVE_WORKLOAD_COMPONENTS]


def modelservice_fullname(release: str) -> str:
    """The chart's `llm-d-modelservice.fullname` for a release with no fullnameOverride or nameOverride: the release
    name where it contains the chart's, else `<release>-llm-d-modelservice`, cut at 55 characters."""
    name = release if MODELSERVICE_CHART in release else f"{release}-{MODELSERVICE_CHART}"
    return name[:55].rstrip("-")


def serving_workload(target: str, service: str) -> Callable[[str], str] | None:
    """The workload whose pods serve an aggregated allocation of `service` under `target`, named from the
    allocation's index (what its objective rules select pods by): infra's own `<service>-a<i>`, KServe's Deployment
    (or LeaderWorkerSet) for the LLMInferenceService `<service>-a<i>`, the decode Deployment llm-d's chart names for
    the release `<service>-a<i>`; None for Dynamo, whose frontend is watched instead (`metrics.FRONTENDS`)."""
    if target == "kserve":
        return lambda index: f"{service}-a{index}{KSERVE_WORKLOAD_SUFFIX}"
    if target == "llm-d":
        return lambda index: f"{modelservice_fullname(f'{service}-a{index}')}-decode"
    if target == DEFAULT_TARGET:
        return lambda index: f"{service}-a{index}"
    return None


class Launcher(CatalogModel):
    """How one target runs one framework (see the header of data/targets.yaml)."""

    backend: str
    image: str | None = None
    command: list[str] | None = None
    model_flag: str | None = None
    model_path: str | None = None
    drop: list[EngineSetting] = []
    flags: dict[EngineSetting, str] = {}
    config_flag: str | None = None
    roles: dict[str, list[str]] = {}
    args: list[str] = []
    https: bool = False
    port: int | None = Field(default=None, ge=1, le=65535)
    source: str


class Target(CatalogModel):
    source: str
    frameworks: dict[str, Launcher]


@lru_cache(maxsize=1)
def targets() -> dict[str, Target]:
    """Every target but `kubernetes`, by name."""
    from importlib import resources

    import yaml

    data = yaml.safe_load((resources.files("infra.catalog") / "data" / "targets.yaml").read_text(encoding="utf-8"))
    return {name: Target.model_validate(value) for name, value in data.items()}


def check_target(name: str) -> str:
    """The target's name, or IntentError naming the ones there are."""
    if name not in TARGETS:
        raise IntentError(Problem(f"unknown deployment target {name!r}", Location(path="--target"),
                                  f"use one of {', '.join(TARGETS)}"))
    return name


def launcher(target: str, framework: str) -> Launcher | None:
    """How `target` runs `framework`, or None when it does not run it."""
    t = targets().get(target)
    return t.frameworks.get(framework) if t is not None else None


def target_cli(fw: FrameworkSpec, how: Launcher) -> EngineCli:
    """The framework's launcher as the target runs it: command, model flag and flags replaced, settings the target
    sets itself dropped."""
    assert fw.cli is not None
    cli = fw.cli
    flags = {k: v for k, v in {**cli.flags, **how.flags}.items() if k not in how.drop}
    update: dict[str, Any] = {
        "flags": flags,
        "switches": [s for s in cli.switches if s in flags],
        "negations": {k: v for k, v in cli.negations.items() if k not in how.drop},
    }
    if how.command is not None:
        update["command"] = list(how.command)
    if how.model_flag is not None:
        update["model_flag"] = how.model_flag
    if how.port is not None:
        update["port"] = how.port
    if cli.config_file is not None and how.config_flag is not None:
        update["config_file"] = cli.config_file.model_copy(update={"flag": how.config_flag})
    return cli.model_copy(update=update)


def target_framework(fw: FrameworkSpec, how: Launcher) -> FrameworkSpec:
    """The framework with its launcher as the target runs it."""
    return fw.model_copy(update={"cli": target_cli(fw, how)})


def extra_args(how: Launcher, role: str) -> list[str]:
    """Arguments the target adds after the engine settings: its own, then the role's."""
    return list(how.args) + list(how.roles.get(role, []))
