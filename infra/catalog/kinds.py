"""The Kubernetes kinds the product renders and checks, and what each means to a plan, stated once for the renderer
and the validators: where a kind keeps its pods, whether it can run an engine, whether its replicas are groups of
pods, whether its name must be a DNS-1123 label, and which `conventions.crds` key says it is installed."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Pods = Literal["none", "self", "template", "job-template", "leader-worker", "roles", "tasks"]


@dataclass(frozen=True)
class Kind:
    """One kind of one API group."""

    name: str
    group: str
    """API group ("" for the core group)."""
    pods: Pods = "none"
    """Where its pod templates are: itself (a Pod), `spec.template`, a CronJob's job template, a LeaderWorkerSet's
    leader and worker templates, a DisaggregatedSet's roles (each a LeaderWorkerSet spec), a Volcano Job's tasks."""
    serves: bool = False
    """Its pods run for as long as it exists, so it can run a serving engine (an object of such a kind that deploys
    nothing of the plan is an unplanned engine)."""
    per_role: bool = False
    """Deploys one role of one allocation under that role's own name (a DisaggregatedSet holds roles instead)."""
    groups: bool = False
    """Its replicas count groups of pods (one leader plus workers), not pods."""
    label_named: bool = False
    """Its name becomes a DNS name or hostname itself, so it must be a DNS-1123 label (63 characters)."""
    selects_template: bool = False
    """Its `spec.selector` is a label selector over its own pod template."""
    claim_templates: tuple[str, ...] | None = None
    """Path under `spec` of its volumeClaimTemplates' parent, where it has them."""
    crd: str | None = None
    """The cluster profile's `conventions.crds` key that says this custom resource is installed."""


KINDS: tuple[Kind, ...] = (
    Kind("Pod", "", pods="self", serves=True),
    Kind("Service", "", label_named=True),
    Kind("Namespace", "", label_named=True),
    Kind("ConfigMap", ""),
    Kind("Secret", ""),
    Kind("ServiceAccount", ""),
    Kind("PodDisruptionBudget", "policy"),
    Kind("HorizontalPodAutoscaler", "autoscaling"),
    Kind("ReplicationController", "", pods="template"),
    Kind("Deployment", "apps", pods="template", serves=True, per_role=True, selects_template=True),
    Kind("StatefulSet", "apps", pods="template", serves=True, per_role=True, label_named=True,
         selects_template=True, claim_templates=()),
    Kind("ReplicaSet", "apps", pods="template", serves=True, selects_template=True),
    Kind("DaemonSet", "apps", pods="template", selects_template=True),
    Kind("Job", "batch", pods="template"),
    Kind("CronJob", "batch", pods="job-template"),
    Kind("LeaderWorkerSet", "leaderworkerset.x-k8s.io", pods="leader-worker", serves=True, per_role=True,
         groups=True, label_named=True, claim_templates=("leaderWorkerTemplate",), crd="leaderworkerset"),
    Kind("DisaggregatedSet", "disaggregatedset.x-k8s.io", pods="roles", serves=True, groups=True,
         crd="disaggregatedset"),
    Kind("PodGroup", "scheduling.volcano.sh", crd="volcano"),
    Kind("Job", "batch.volcano.sh", pods="tasks", crd="volcano"),
    Kind("ScaledObject", "keda.sh", crd="keda"),
    Kind("InferencePool", "inference.networking.k8s.io", crd="inference_extension"),
    Kind("HTTPRoute", "gateway.networking.k8s.io", crd="gateway_api"),
    Kind("PrometheusRule", "monitoring.coreos.com", crd="prometheus_operator"),
    Kind("PodMonitor", "monitoring.coreos.com", crd="prometheus_operator"),
    Kind("DynamoGraphDeployment", "nvidia.com", crd="dynamo"),
    Kind("InferenceService", "serving.kserve.io", crd="kserve"),
    Kind("LLMInferenceService", "serving.kserve.io", crd="kserve"),
    Kind("ResourceClaim", "resource.k8s.io", crd="dra"),
    Kind("ResourceClaimTemplate", "resource.k8s.io", crd="dra"),
    Kind("DeviceClass", "resource.k8s.io", crd="dra"),
)

_BY_REF = {(k.group, k.name): k for k in KINDS}
_BY_NAME: dict[str, Kind] = {}
for _k in KINDS:
    # A kind name alone (no apiVersion known) means its built-in or first-listed group: Job is batch's.
    _BY_NAME.setdefault(_k.name, _k)

NONE = Kind("", "")
"""What an unknown kind means: nothing the product relies on."""


def api_group(api_version: str) -> str:
    """The group of an apiVersion (`apps/v1` -> apps, `v1` -> the core group, "")."""
    return api_version.rsplit("/", 1)[0] if "/" in api_version else ""


def kind_of(kind: str, api_version: str = "") -> Kind:
    """The table's entry for `kind` in the group of `api_version`, else for the kind of that name in its first-listed
    group (a Deployment of an older group still keeps its pods in `spec.template`); `NONE` for a kind the table
    does not know. Whether the group matched is `entry.group == api_group(api_version)`."""
    return _BY_REF.get((api_group(api_version), kind)) or _BY_NAME.get(kind, NONE)
