"""The cluster profile: what devices a cluster has, where they sit, what they cost, and the cluster's conventions.

A profile is its own file (`kind: ClusterProfile`), referenced from intents by path, or written inline in an
intent's `spec.cluster`. Resource names and CRD versions are data here: infra never assumes them.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, ValidationInfo, field_validator, model_validator

from infra.catalog.schema import Vendor
from infra.intent.base import (API_VERSION, ApiVersion, LabelKey, LabelValue, Metadata, Name, ResourceName, Strict,
                               Subdomain, require_unique)
from infra.intent.units import Bandwidth, Bytes, MoneyPerHour


MAX_NODES = 100_000
"""Nodes one pool may state: above the largest clusters built, and small enough that placement's per-node
bookkeeping stays in memory."""

MAX_DEVICES_PER_NODE = 1024
"""Devices one node may state: the densest servers hold 16 accelerators (or 8 CPU sockets)."""


class Nic(Strict):
    """A network interface used for traffic between nodes (multi-node parallelism, KV-cache transfer)."""

    name: str
    """Interface or RDMA device name as the node reports it, e.g. `mlx5_0`."""
    kind: Literal["infiniband", "roce", "ethernet", "efa"] = "ethernet"
    """Transport: infiniband or roce give RDMA; ethernet is TCP."""
    bandwidth: Bandwidth
    """Line rate, e.g. 400Gbps (above 0)."""
    pcie_root: str | None = None
    """PCIe root complex the NIC hangs off, to pair it with the device on the same root."""

    @field_validator("bandwidth")
    @classmethod
    def _moves_data(cls, value: float) -> float:
        if value <= 0:  # `0Gbps` carries nothing: every transfer over it would take forever
            raise ValueError("bandwidth is 0; give the NIC's line rate, e.g. 400Gbps, or leave the NIC out")
        return value


class Topology(Strict):
    """Where a pool's (or node's) devices sit in the network."""

    zone: LabelValue | None = None
    """Availability zone (`topology.kubernetes.io/zone`)."""
    switch: LabelValue | None = None
    """Leaf switch (or rail) the nodes connect to; P/D groups that must talk fast stay under one switch."""
    scale_up_domain: LabelValue | None = None
    """Name of the NVLink/HCCS domain when it spans several nodes (an NVL72 rack, a CloudMatrix super-node);
    unset means each node is its own domain."""


class Node(Strict):
    """One node, when a pool lists its nodes individually."""

    name: Subdomain
    """Node name (`kubernetes.io/hostname`)."""
    devices: int | None = Field(default=None, ge=1, le=MAX_DEVICES_PER_NODE)
    """Devices on this node; defaults to the pool's `devices_per_node`."""
    topology: Topology = Topology()
    """Overrides the pool's topology for this node."""


class _Nodes:
    """Node count and zone of a pool, from the `nodes` and `topology` fields of the model it is mixed into (no
    annotations here: pydantic would take them for fields)."""

    @property
    def node_count(self) -> int:
        nodes = self.nodes  # type: ignore[attr-defined]
        return nodes if isinstance(nodes, int) else len(nodes)

    @property
    def zone(self) -> str | None:
        """The pool's zone: its own, or the one all its listed nodes share."""
        nodes, topology = self.nodes, self.topology  # type: ignore[attr-defined]
        if topology.zone or isinstance(nodes, int):
            return topology.zone
        zones = {n.topology.zone for n in nodes}
        return zones.pop() if len(zones) == 1 else None


class Pool(_Nodes, Strict):
    """A homogeneous group of nodes with one device type and one price."""

    name: Name
    """Pool name, unique in the profile."""
    device: str
    """Device type, a catalog name or alias (see `infra catalog devices`), e.g. `H100-SXM`, `Ascend-910B3`."""
    nodes: int | list[Node]
    """Number of nodes, or the nodes themselves with their own topology."""
    devices_per_node: int = Field(ge=1, le=MAX_DEVICES_PER_NODE)
    """Devices in each node."""
    price: MoneyPerHour | None = None
    """Price per device-hour, e.g. `$2.49/h`; unset uses the catalog's reference price."""
    owned: bool = False
    """The devices are already paid for. Planning still prices them (at `price`, or the catalog's reference price
    when unset) so that it uses no more of them than the intent needs."""
    spot: bool = False
    """Spot / preemptible capacity: cheaper, but may be reclaimed; used only when an intent allows spot."""
    topology: Topology = Topology()
    """Zone, switch and scale-up domain shared by the pool's nodes."""
    nics: list[Nic] = []
    """Inter-node network interfaces of each node."""
    node_selector: dict[LabelKey, LabelValue] = {}
    """Labels that select this pool's nodes (rendered as nodeSelector)."""
    allocatable_memory: Bytes | None = None
    """Memory per device the scheduler can hand out, when less than the catalog figure (e.g. HAMi's 310P3
    21527MiB)."""
    multi_node: bool = True
    """Whether one replica may span several nodes of this pool (needs a fast NIC)."""


    @property
    def device_count(self) -> int:
        if isinstance(self.nodes, int):
            return self.nodes * self.devices_per_node
        return sum(n.devices or self.devices_per_node for n in self.nodes)

    @field_validator("nodes")
    @classmethod
    def _nodes_positive(cls, nodes: int | list[Node]) -> int | list[Node]:
        return _check_nodes(nodes)

    @field_validator("allocatable_memory")
    @classmethod
    def _some_memory(cls, value: int | None) -> int | None:
        if value is not None and value < 1 << 20:  # `1e-300GiB` is 0 bytes: a device that holds nothing
            raise ValueError(f"allocatable_memory is {value} bytes, below 1MiB; give the memory per device the "
                             "scheduler hands out, e.g. 60GiB")
        return value


def _check_nodes(nodes: int | list[Node]) -> int | list[Node]:
    if isinstance(nodes, int) and nodes < 1:
        raise ValueError(f"nodes is {nodes}, but a pool needs at least one node; give a count of 1 or more, "
                         "or remove the pool")
    if isinstance(nodes, int) and nodes > MAX_NODES:
        raise ValueError(f"nodes is {nodes}, above the {MAX_NODES:,} one pool may state; split the inventory into "
                         "pools, or give the nodes this cluster really has")
    if isinstance(nodes, list):
        if not nodes:
            raise ValueError("nodes is an empty list; list at least one node or give a count")
        require_unique([n.name for n in nodes], "node")
    return nodes


class CpuNode(Strict):
    """What one node of a CPU pool offers."""

    cores: int = Field(ge=1, le=1_000_000)
    """CPU cores (vCPUs as Kubernetes counts them) per node."""
    memory: Bytes
    """Memory per node, e.g. 256Gi."""
    reserved_cores: int = Field(default=2, ge=0)
    """Cores per node kept for the kubelet and system daemons, not for workloads."""

    @model_validator(mode="after")
    def _leaves_some(self) -> CpuNode:
        if self.reserved_cores >= self.cores:
            raise ValueError(f"reserved_cores is {self.reserved_cores} but a node has {self.cores} cores; reserve "
                             "fewer than the node has")
        return self

    @property
    def usable_cores(self) -> int:
        return self.cores - self.reserved_cores


class CpuPool(_Nodes, Strict):
    """A group of nodes without accelerators and one price, for the CPU stages of pipelines (preprocessing)."""

    name: Name
    """Pool name, unique in the profile (among accelerator pools too)."""
    cpu: CpuNode
    """Cores and memory of each node, e.g. `{cores: 64, memory: 256Gi}`."""
    nodes: int | list[Node]
    """Number of nodes, or the nodes themselves (their `devices` is ignored)."""
    price: MoneyPerHour
    """Price per node-hour, e.g. `$2.10/h`."""
    owned: bool = False
    """The nodes are already paid for; planning still prices them at `price` so that it uses no more of them
    than the intent needs."""
    spot: bool = False
    """Spot / preemptible nodes; used only when the service allows spot."""
    topology: Topology = Topology()
    """Zone and switch of the pool's nodes."""
    nics: list[Nic] = []
    """Network interfaces of each node (hand-offs to the next stage go over the fastest)."""
    node_selector: dict[LabelKey, LabelValue] = {}
    """Labels that select this pool's nodes (rendered as nodeSelector)."""


    @field_validator("nodes")
    @classmethod
    def _nodes_positive(cls, nodes: int | list[Node]) -> int | list[Node]:
        return _check_nodes(nodes)


class DeviceResources(Strict):
    """How pods request one vendor's devices in this cluster (HAMi or the vendor's device plugin)."""

    count: ResourceName | Literal[""]
    """Extended resource for whole devices, e.g. `nvidia.com/gpu`, `huawei.com/Ascend910B3`; empty for CPU devices
    (vendor `cpu`), which pods request as Kubernetes' own `cpu` and `memory`."""
    shared_count: ResourceName | None = None
    """Resource for a shared slice when it differs from `count` (e.g. `metax-tech.com/sgpu`)."""
    memory: ResourceName | None = None
    """Resource for a memory slice, e.g. `nvidia.com/gpumem`; unset means no fractional sharing."""
    memory_unit: Bytes = 1024 * 1024
    """Bytes per unit of `memory` (1MiB for NVIDIA, 256MiB for Cambricon and Iluvatar, 512MiB for Moore
    Threads, 1GiB for MetaX)."""
    cores: ResourceName | None = None
    """Resource for a compute share in percent, e.g. `nvidia.com/gpucores`."""

    @field_validator("memory_unit")
    @classmethod
    def _whole_bytes(cls, value: int) -> int:
        if value < 1:  # `1e-9MiB` is a byte's fraction: no memory slice can be counted in it
            raise ValueError(f"memory_unit is {value} bytes; give the bytes of one unit of the memory resource, "
                             "e.g. 1MiB")
        return value


class Crds(Strict):
    """Custom resources installed in the cluster and their served API versions; unset means not installed."""

    leaderworkerset: ApiVersion | None = None
    """LeaderWorkerSet API version (e.g. `leaderworkerset.x-k8s.io/v1`), for multi-node replicas."""
    disaggregatedset: ApiVersion | None = None
    """LWS DisaggregatedSet API version, for prefill/decode groups."""
    volcano: ApiVersion | None = None
    """Volcano scheduling API version (e.g. `scheduling.volcano.sh/v1beta1`), for gang scheduling."""
    kserve: ApiVersion | None = None
    """KServe API version."""
    dynamo: ApiVersion | None = None
    """NVIDIA Dynamo operator API version serving DynamoGraphDeployment (`nvidia.com/v1alpha1`), for
    `--target dynamo`."""
    inference_extension: ApiVersion | None = None
    """Gateway API Inference Extension InferencePool version (e.g. `inference.networking.k8s.io/v1`): requests
    reach a service's pods through its load-aware endpoint picker."""
    gateway_api: ApiVersion | None = None
    """Gateway API version serving HTTPRoute (`gateway.networking.k8s.io/v1`): without the Inference Extension, a
    service's requests are split over its allocations by an HTTPRoute's weighted backendRefs, each allocation's
    weight its planned share of the load; without either, one Service spreads them evenly over pods."""
    keda: ApiVersion | None = None
    """KEDA ScaledObject version (`keda.sh/v1alpha1`); without it autoscaling renders an HPA."""
    dra: ApiVersion | None = None
    """Dynamic Resource Allocation API version (`resource.k8s.io/v1`)."""
    prometheus_operator: ApiVersion | None = None
    """Prometheus Operator API version serving PrometheusRule (`monitoring.coreos.com/v1`): each service's
    objectives and planned peak become alerting rules on its engines' metrics."""


class Conventions(Strict):
    """The cluster's own way of doing things."""

    scheduler: Subdomain = "default-scheduler"
    """Pod scheduler name, e.g. `hami-scheduler`, `volcano`."""
    namespace: Name = "default"
    """Namespace manifests are rendered into."""
    devices: dict[Vendor, DeviceResources] = {}
    """Resource names per vendor; vendors not listed use the packaged HAMi defaults
    (`infra catalog conventions`)."""
    crds: Crds = Crds()
    """Installed custom resources."""
    model_cache: Subdomain | None = None
    """PersistentVolumeClaim holding model weights, mounted by every serving pod; unset downloads at start."""
    monitoring_labels: dict[LabelKey, LabelValue] = {}
    """Labels the Prometheus Operator's selectors look for on the PrometheusRule and PodMonitor of each service
    (`crds.prometheus_operator`), e.g. `{release: kube-prometheus-stack}`: kube-prometheus-stack's Prometheus loads
    only the rules and monitors labelled with its Helm release unless told to load all."""


class ClusterProfileSpec(Strict):
    """Inventory and conventions."""

    pools: list[Pool] = Field(min_length=1)
    """Device pools the planner may use."""
    cpu_pools: list[CpuPool] = []
    """Pools of nodes without accelerators, for the CPU stages of pipelines; without one, a CPU stage's cores
    are requested on any node."""
    conventions: Conventions = Conventions()
    """Resource names, scheduler, installed CRDs."""
    calibration: str | None = Field(default=None, min_length=1, max_length=4096)
    """A calibration file (`infra calibrate ... -o FILE`, path relative to this profile) made from measurements of
    this cluster's deployments: every plan on the profile corrects the performance model with it (`--calibration`
    on the command line takes its place)."""

    @field_validator("pools")
    @classmethod
    def _unique_pools(cls, pools: list[Pool]) -> list[Pool]:
        require_unique([p.name for p in pools], "pool")
        return pools

    @field_validator("cpu_pools")
    @classmethod
    def _unique_across(cls, cpu_pools: list[CpuPool], info: ValidationInfo) -> list[CpuPool]:
        require_unique([p.name for p in info.data.get("pools") or []] + [p.name for p in cpu_pools], "pool")
        return cpu_pools


class ClusterProfile(Strict):
    """A cluster's inventory and conventions (`kind: ClusterProfile`)."""

    api_version: Literal[API_VERSION] = Field(alias="apiVersion")  # type: ignore[valid-type]
    """Always `infra.dev/v1alpha1`."""
    kind: Literal["ClusterProfile"]
    """Always `ClusterProfile`."""
    metadata: Metadata
    """Name and labels."""
    spec: ClusterProfileSpec
    """Pools and conventions."""

