"""Hand-offs between pipeline stages: how many bytes a request's output is, and how long moving it to the next
stage's replica takes over the link between the two.

A stage's `handoff` (intent) says per what its output is produced (`unit`: token, image, audio_second, video_frame
or request) and how big one unit is (`size` bytes). A request hands on `units x size` bytes, where `units` comes
from the stage's work: the tokens an LLM stage writes (its mean output length) or a model stage's tokens, the
images, the audio seconds, the video frames, or one request.

The link depends on where the two replicas sit:

    device   both on one device (slices of it): a copy through device memory, read and written, so half its
             memory bandwidth
    node     one node (or one NVLink/HCCS domain): the device's scale-up link (`interconnect` in the catalog),
             one direction of the bidirectional figure vendors quote
    switch   different nodes of one zone's network: the slower of the two ends' fastest NICs, at RDMA efficiency
             when both ends have RDMA NICs of one kind (InfiniBand, RoCE, EFA), else TCP's
    zone     different zones: the NIC figure capped by what one flow gets between zones, plus the zones' latency

Moving the first unit takes `latency + size / bandwidth`, all of it `latency + units x size / bandwidth`. A
streaming stage (tokens, audio seconds, frames) hands each unit on as it is made, so the next stage waits for the
first unit's transfer; any other stage hands on when done, so the next stage waits for the whole transfer.
The efficiencies, latencies and the inter-zone cap are stated assumptions (`ASSUMPTIONS`), not measurements.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from infra.catalog.schema import DeviceSpec
from infra.errors import InfraError, Location, Problem
from infra.intent.models import StageWork
from infra.intent.profile import Nic

LINKS = ("device", "node", "switch", "zone")
"""Link kinds from the closest to the farthest."""
RDMA_KINDS = {"infiniband", "roce", "efa"}
RDMA_EFFICIENCY = 0.9
TCP_EFFICIENCY = 0.7
DEFAULT_NIC_GBS = 25 / 8
"""A pool that lists no NIC is taken to have 25 Gbps Ethernet."""
CROSS_ZONE_GBS = 10 / 8
"""What one flow gets between zones (10 Gbps), whatever the NICs."""
LATENCY_S = {"device": 5e-6, "node": 10e-6, "rdma": 10e-6, "tcp": 50e-6, "zone": 1e-3}
"""Fixed cost of one transfer by link: a copy launch, a scale-up transfer, an RDMA write, a TCP send, a hop
between zones."""
STREAMING = {"token", "audio_second", "video_frame"}

ASSUMPTIONS = (
    f"hand-offs between stages: device copies at half the memory bandwidth, scale-up links at half the quoted "
    f"bidirectional figure, NICs at {RDMA_EFFICIENCY:.0%} of line rate over RDMA and {TCP_EFFICIENCY:.0%} over "
    f"TCP, {DEFAULT_NIC_GBS * 8:g} Gbps Ethernet where a pool lists no NIC, at most {CROSS_ZONE_GBS * 8:g} Gbps "
    f"and {LATENCY_S['zone'] * 1000:g} ms more between zones"
)


@dataclass(frozen=True)
class Link:
    """The path between two stages' replicas."""

    kind: str
    """device, node, switch or zone (see the module docstring)."""
    bandwidth_gbs: float
    """GB/s one transfer gets, one direction."""
    latency_s: float
    via: str
    """What carries it, for reports (e.g. `nvlink4`, `RDMA 400 Gbps`)."""


@dataclass(frozen=True)
class Site:
    """Where a pool's nodes sit in the network."""

    pool: str
    zone: str | None
    switch: str | None
    nics: tuple[Nic, ...]


@dataclass(frozen=True)
class Transfer:
    """One request's hand-off over one link."""

    link: Link
    unit_bytes: float
    units: float
    first_s: float
    """Time to move the first unit."""
    total_s: float
    """Time to move all of it."""

    def charged(self, streams: bool) -> float:
        """What the next stage waits: the first unit's transfer for a streaming stage, else the whole one."""
        return self.first_s if streams else self.total_s


def units_per_request(unit: str, work: StageWork, *, output_tokens: float | None = None,
                      stage_tokens: float | None = None) -> float:
    """Units of output one request hands on: tokens (an LLM stage's mean output, else the stage's tokens), images,
    audio seconds, video frames, or one request."""
    if unit == "request":
        return 1.0
    if unit == "token":
        got = output_tokens if output_tokens is not None else stage_tokens
    elif unit == "image":
        got = work.images if work.images is not None else 1.0
    elif unit == "audio_second":
        got = work.audio
    else:
        got = float(work.video_frames) if work.video_frames is not None else None
    if got is None:
        field = {"token": "output_tokens", "audio_second": "audio", "video_frame": "video_frames"}[unit]
        raise InfraError(Problem(f"a hand-off per {unit} needs the stage's {field} to count its units",
                                 Location(path=f"work.{field}"),
                                 f"add work.{field}, or hand off per request with its size"))
    return float(got)


def device_link(device: DeviceSpec) -> Link:
    """Both replicas on one device: a copy through its memory."""
    return Link("device", device.memory_bandwidth_tbps.value * 1000 / 2, LATENCY_S["device"], "device memory")


def node_link(device: DeviceSpec) -> Link:
    """Both replicas on one node (or NVLink/HCCS domain): the device's scale-up link, one direction."""
    ic = device.interconnect
    return Link("node", ic.bandwidth_gbs.value / 2, LATENCY_S["node"], ic.kind)


def _fastest(nics: Sequence[Nic]) -> tuple[float, str]:
    if not nics:
        return DEFAULT_NIC_GBS, "ethernet"
    best = max(nics, key=lambda n: (n.bandwidth, n.kind in RDMA_KINDS))
    return float(best.bandwidth), best.kind


def network_link(a: Site, b: Site) -> Link:
    """Replicas on different nodes: within one zone's network (`switch`) or across zones (`zone`)."""
    bw_a, kind_a = _fastest(a.nics)
    bw_b, kind_b = _fastest(b.nics)
    rdma = kind_a == kind_b and kind_a in RDMA_KINDS
    line = min(bw_a, bw_b)
    bw = line * (RDMA_EFFICIENCY if rdma else TCP_EFFICIENCY)
    latency = LATENCY_S["rdma" if rdma else "tcp"]
    via = f"{'RDMA' if rdma else 'TCP'} {line * 8:g} Gbps"
    if a.zone is not None and b.zone is not None and a.zone != b.zone:
        return Link("zone", min(bw, CROSS_ZONE_GBS), latency + LATENCY_S["zone"], f"{via}, {a.zone} to {b.zone}")
    return Link("switch", bw, latency, via)


def transfer(link: Link, unit_bytes: float, units: float) -> Transfer:
    """Time to move the first unit and all `units` of `unit_bytes` over `link`."""
    per_s = link.bandwidth_gbs * 1e9
    first = link.latency_s + unit_bytes / per_s
    total = link.latency_s + max(units, 1.0) * unit_bytes / per_s if math.isfinite(units) else math.inf
    return Transfer(link, unit_bytes, units, first, total)


def slowest(transfers: Sequence[Transfer], streams: bool) -> Transfer:
    """The transfer the next stage waits longest for (ties: the farther link)."""
    return max(transfers, key=lambda t: (t.charged(streams), LINKS.index(t.link.kind)))
