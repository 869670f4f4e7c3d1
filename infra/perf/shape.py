"""What is being estimated: a replica's parallel layout, a deployment, a workload.

Plain frozen dataclasses (not pydantic) because the planner builds and scores thousands of them per second.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Literal

from infra.errors import InfraError, Problem


@dataclass(frozen=True)
class Parallel:
    """How one worker (replica) spreads a model over devices.

    `tp` splits attention heads and dense FFNs; `attention_dp` runs that many attention groups side by side, each
    with its own sequences, sharing the MoE layers; `moe_tp` x `ep` split the experts; `pp` splits layers.
    """

    tp: int = 1
    pp: int = 1
    ep: int = 1
    moe_tp: int = 1
    attention_dp: int = 1
    sp: int = 1
    """Sequence parallel degree of a diffusion transformer: the tokens of one pass split over this many devices."""

    @property
    def devices(self) -> int:
        return max(self.tp * self.attention_dp, self.moe_tp * self.ep) * self.pp * self.sp

    def label(self) -> str:
        parts = [f"tp{self.tp}"]
        if self.pp > 1:
            parts.append(f"pp{self.pp}")
        if self.ep > 1:
            parts.append(f"ep{self.ep}")
        if self.moe_tp > 1 and self.moe_tp != self.tp:
            parts.append(f"moetp{self.moe_tp}")
        if self.attention_dp > 1:
            parts.append(f"dp{self.attention_dp}")
        if self.sp > 1:
            parts.append(f"sp{self.sp}")
        return "-".join(parts)


@dataclass(frozen=True)
class Role:
    """One kind of worker: its layout, batch cap and how many of them."""

    parallel: Parallel = field(default_factory=Parallel)
    batch_cap: int | None = None
    """Most sequences one attention group runs at once (max_num_seqs); None leaves it to memory."""
    workers: int | None = None
    """Replicas of this role; None lets the serving model size them (disaggregated) or assumes 1 (aggregated)."""
    max_num_tokens: int = 8192
    """Tokens one step may process (chunked-prefill budget)."""


@dataclass(frozen=True)
class Deployment:
    """A model served on one device type by one framework, aggregated or prefill/decode-disaggregated."""

    model: str
    device: str
    framework: str
    precision: str
    mode: Literal["agg", "disagg"] = "agg"
    agg: Role = field(default_factory=Role)
    prefill: Role = field(default_factory=Role)
    decode: Role = field(default_factory=Role)
    decode_device: str | None = None
    """Device of the decode workers when it differs from `device` (prefill on a compute-rich card, decode on a
    bandwidth-rich one); the KV cache then crosses the network between them."""
    kv_precision: str | None = None
    """KV-cache precision; None picks fp8 where the weights are 8-bit or less and the framework supports it."""
    memory_utilization: float = 0.9
    """Fraction of device memory the engine may use (vLLM's gpu_memory_utilization)."""

    def roles(self) -> dict[str, Role]:
        return {"agg": self.agg} if self.mode == "agg" else {"prefill": self.prefill, "decode": self.decode}


@dataclass(frozen=True)
class Workload:
    """Load on a deployment: fixed or mean lengths, and either a closed loop (concurrency) or an open one (rate)."""

    isl: float
    osl: float
    concurrency: int | None = None
    rate: float | None = None
    arrival_cv: float = 1.0
    """Coefficient of variation of inter-arrival times (1 = Poisson, 0 = constant)."""
    isl_cv: float = 0.0
    """Coefficient of variation of input lengths (0 = fixed)."""
    osl_cv: float = 0.0
    """Coefficient of variation of output lengths."""
    prefix_hit: float = 0.0
    """Fraction of prompt tokens served from the prefix cache."""
    isl_quantiles: tuple[tuple[str, float], ...] = ()
    """Known prompt-length percentiles as multiples of the mean, e.g. (("p90", 2.7),), from a histogram or a
    trace; percentiles not given follow a lognormal with `isl_cv`."""
    peers: int = 1
    """Replicas that share the stream behind a load-aware router, this one among them: over a decode window a
    replica meets the stream's variance in count over them (round robin's Erlang gaps), while its prefill queue
    still meets the stream's bursts."""

    def __post_init__(self) -> None:
        if (self.concurrency is None) == (self.rate is None):
            raise InfraError(Problem("a workload needs either a concurrency or a rate",
                                     fix="give --concurrency N (closed loop) or --rate R (open loop)"))
        if self.rate is not None:
            _check_rate(self.rate)
        if not all(math.isfinite(v) for v in (self.isl, self.osl, self.arrival_cv, self.isl_cv, self.osl_cv)):
            raise InfraError(Problem("lengths and coefficients of variation must be finite numbers",
                                     fix="give finite token counts and CVs"))
        if self.isl < 1 or self.osl < 1:
            raise InfraError(Problem(f"input and output lengths must be at least 1 token (got {self.isl:g}, "
                                     f"{self.osl:g})", fix="give positive token counts"))

    @property
    def dephased(self) -> bool:
        """A closed loop whose lengths vary: its clients, started together, drift apart as their requests end at
        different times, so that a prompt meets the others' at random rather than in a wave each round."""
        return self.concurrency is not None and (self.isl_cv > 0 or self.osl_cv > 0)

    def at_rate(self, rate: float) -> Workload:
        """This workload as an open loop of `rate` requests/s: `dataclasses.replace(self, rate=rate,
        concurrency=None)` with only the rate checked anew (the rest was checked when this one was made), in
        a third of the time: a capacity search makes one at every load it probes."""
        _check_rate(rate)
        new = object.__new__(Workload)
        new.__dict__.update(self.__dict__, rate=rate, concurrency=None)
        return new


def _check_rate(rate: float) -> None:
    if not 0 < rate < float("inf"):
        raise InfraError(Problem(f"an open loop needs arriving requests: rate must be above 0 (got {rate:g}/s)",
                                 fix="give a rate above 0, e.g. 1/s, or a concurrency"))
