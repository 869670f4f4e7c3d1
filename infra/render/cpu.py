"""Pods on CPU devices (vendor `cpu`: one x86 socket each, served by vLLM's CPU backend).

A CPU device is not an extended resource. A pod holds its sockets by requesting their hardware threads and memory as
Kubernetes' own `cpu` and `memory`, whole CPUs with requests equal to limits: Guaranteed QoS, so that the kubelet's
static CPU manager policy gives it exclusive cores, to which the engine binds one thread per physical core. Each
socket leaves `cpu_device_reserved_cpus` and `cpu_device_reserved_memory_gi` (settings.yaml) to the kubelet, the
system and DaemonSets, or a pod holding a whole node would never fit its allocatable resources.

The engine takes its KV cache size per rank from the environment (the framework's catalog `env`, e.g.
`VLLM_CPU_KVCACHE_SPACE` in GiB) rather than as a share of device memory. It is sized from the plan's memory the way
the performance model counted it: what the plan gives a rank (the device's memory times the engine's
memory_utilization) less the rank's share of the weights and `cpu_engine_runtime_gi` (activations, oneDNN scratch,
the Python runtime), and never more than the pod's memory leaves after them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from infra.catalog.schema import CpuSpec, EngineEnv
from infra.render.settings import Settings

GIB = 2**30


@dataclass(frozen=True)
class CpuSizing:
    """What one pod on CPU devices requests, and the KV cache each of its engine ranks gets."""

    cpus: int
    """Hardware threads (Kubernetes CPUs), requested and limited alike."""
    memory_gi: int
    ranks: int
    """Engine ranks in the pod (tensor x pipeline parallel): one per socket."""
    weights_gib: float
    """Weights one rank holds."""
    kv_cache_gib: int | None
    """KV cache per rank; None when the plan states no memory share for the engine (a stage engine)."""
    short_gib: float = 0.0
    """How far the pod's memory falls short of the weights, runtime and a 1 GiB KV cache per rank (0 when it fits)."""

    def resources(self) -> dict[str, object]:
        limits = {"cpu": str(self.cpus), "memory": f"{self.memory_gi}Gi"}
        return {"limits": limits, "requests": dict(limits), "memory_gi": self.memory_gi}


def size_pod(cpu: CpuSpec, device_memory_gb: float, devices: float, ranks: int, memory_utilization: float | None,
             weight_bytes: float | None, settings: Settings) -> CpuSizing:
    """Resources of a pod holding `devices` sockets (a fraction for a slice) and the KV cache of its `ranks`.
    `device_memory_gb` is the plan's memory per device in GB (10^9 bytes): a pool's allocatable memory converted,
    or the catalog's figure as marketed, which this reads as decimal GB and so never over-asks."""
    ranks = max(1, ranks)
    device_gib = device_memory_gb * 1e9 / GIB
    cpus = max(1, math.floor((cpu.threads.value - settings.cpu_device_reserved_cpus) * devices))
    memory_gi = max(1, math.floor((device_gib - settings.cpu_device_reserved_memory_gi) * devices))
    weights_gib = (weight_bytes or 0.0) / ranks / GIB
    if memory_utilization is None:
        return CpuSizing(cpus, memory_gi, ranks, weights_gib, None)
    runtime = settings.cpu_engine_runtime_gi
    budget = min(device_gib * devices * memory_utilization / ranks, memory_gi / ranks)
    room = budget - weights_gib - runtime
    return CpuSizing(cpus, memory_gi, ranks, weights_gib, max(1, math.floor(room)), max(0.0, 1 - room))


def engine_env(env: EngineEnv | None, sizing: CpuSizing) -> list[dict[str, str]]:
    """The engine's environment on CPU devices: its fixed variables, then its KV cache size, sorted by name within
    each (same plan, same bytes)."""
    if env is None:
        return []
    out = [{"name": k, "value": v} for k, v in sorted(env.fixed.items())]
    if env.kv_cache_gib and sizing.kv_cache_gib is not None:
        out.append({"name": env.kv_cache_gib, "value": str(sizing.kv_cache_gib)})
    return out
