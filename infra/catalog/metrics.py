"""The Prometheus histograms serving engines count their requests' latencies in, by the family of series an engine
exports (`FrameworkSpec.metrics`): what `infra observe` and `infra verify --prometheus` read, and what the
objective rules rendered for a plan's services watch.

Sources: vLLM V1's request metrics (vllm/v1/metrics/loggers.py; the vendor builds of vLLM export the same),
SGLang's (python/sglang/srt/metrics/collector.py, with `--enable-metrics`), NVIDIA Dynamo's HTTP frontend
(lib/llm/src/http/service/metrics.rs).

Also how many observations a judgement of one of them needs (`needed`), the same wherever a percentile or a mean is
judged: a benchmark's verdict, a window of traffic's, a calibration's tails, an alerting rule.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from infra.catalog.targets import serving_workload

MIN_TAIL = 10
"""Observations that must lie beyond a measured percentile for it to say anything (p99: 1,000; p90: 100): a
calibration fits the spread on the highest percentile that has them, and a verdict judges one only then."""
MIN_MEAN = 30
"""Observations a mean needs before it is judged: where a normal interval for the mean starts to hold."""


def needed(percentile: float) -> int:
    """Observations the `percentile` (0..100, below 100) needs: `MIN_TAIL` beyond it (rounded first, so that
    p90 needs 100, not the 101 that 1 - 0.9 in floating point gives)."""
    return math.ceil(round(MIN_TAIL * 100 / (100 - percentile), 6))


@dataclass(frozen=True)
class LatencyHistograms:
    """One family's histograms (seconds) by the metric an objective is written on."""

    ttft: str
    """Each request's time to its first token."""
    tpot: str
    """Decode time per output token: each request's, or each gap between tokens (`per_gap`)."""
    itl: str
    """Gaps between a request's tokens (each gap, or each token at its chunk's gap)."""
    e2e: str
    """Each request's time from arrival to its last token."""
    per_gap: bool = False
    """`tpot` counts gaps between tokens, not requests: it gives no request's TPOT percentile."""
    model_label: str = "model_name"
    """The label that names the served model."""

    def by_metric(self) -> dict[str, str]:
        """The histogram each objective's metric is read from: TPOT only from a histogram of each request's."""
        named = {"ttft": self.ttft, "tpot": None if self.per_gap else self.tpot, "itl": self.itl, "e2e": self.e2e}
        return {metric: name for metric, name in named.items() if name}


VLLM = LatencyHistograms("vllm:time_to_first_token_seconds", "vllm:request_time_per_output_token_seconds",
                         "vllm:inter_token_latency_seconds", "vllm:e2e_request_latency_seconds")
SGLANG = LatencyHistograms("sglang:time_to_first_token_seconds", "sglang:inter_token_latency_seconds",
                           "sglang:inter_token_latency_seconds", "sglang:e2e_request_latency_seconds", per_gap=True)
DYNAMO = LatencyHistograms("dynamo_frontend_time_to_first_token_seconds",
                           "dynamo_frontend_inter_token_latency_seconds",
                           "dynamo_frontend_inter_token_latency_seconds", "dynamo_frontend_request_duration_seconds",
                           per_gap=True, model_label="model")
FAMILIES = {"vllm": VLLM, "sglang": SGLANG, "dynamo": DYNAMO}
METRICS_PATH = "/metrics"
"""Where every exporter of these families serves its series: the engines (vLLM and its vendor builds, SGLang with
`--enable-metrics`) on their API port, a Dynamo frontend on its own."""
FRONTENDS = {"dynamo": "dynamo"}
"""Deployment targets whose frontend sees each request of a service whole, its allocations (aggregated and
prefill/decode-disaggregated) together, and the family of series it exports: a DynamoGraphDeployment's Frontend."""


def watching(target: str, allocations: list[tuple[str | None, str]]) -> dict[str | None, list[int]]:
    """Which series watch a service deployed through `target` (`infra.catalog.targets.TARGETS`), by family: the
    target's frontend's over every allocation where it has one, else each aggregated allocation's engine's (None
    for an engine that exports no family infra reads). `allocations`: each allocation's engine family and mode.
    Prefill/decode-disaggregated allocations are left out where only their engines export series, each of which
    serves part of a request (a decode engine's TTFT starts after the remote prefill)."""
    frontend = FRONTENDS.get(target)
    if frontend is not None:
        return {frontend: list(range(len(allocations)))} if allocations else {}
    out: dict[str | None, list[int]] = {}
    for i, (family, mode) in enumerate(allocations):
        if mode == "agg":
            out.setdefault(family if family in FAMILIES else None, []).append(i)
    return out


def pod_pattern(names: list[str]) -> str:
    """A regular expression (Prometheus anchors it) for the pods of the workloads `names`: a Deployment's
    `NAME-HASH-ID` or a LeaderWorkerSet's `NAME-GROUP` and `NAME-GROUP-WORKER`, and nothing of another workload
    whose name merely starts with one of them."""
    alternatives = "|".join(names)
    return f"({alternatives})-([0-9]+(-[0-9]+)?|[a-z0-9]+-[a-z0-9]+)"


def pod_selector(namespace: str, workloads: list[str]) -> str:
    """Label matchers of the series of the pods of `workloads` in `namespace` (the labels Prometheus's Kubernetes
    discovery gives every scraped series)."""
    return f'namespace="{namespace}",pod=~"{pod_pattern(workloads)}"'


def frontend_selector(namespace: str, service: str) -> str:
    """Label matchers of the series of a service's frontend: its namespace and the served model (the service's
    name, which the frontend labels each series with)."""
    return f'namespace="{namespace}",model="{service}"'


def watch_selectors(target: str, service: str, namespace: str,
                    watched: dict[str | None, list[int]]) -> dict[str, str]:
    """The label matchers of each family's series that watch a service (`watching`): its frontend's, or the pods
    of the watched allocations' workloads as `target` names them (`infra.catalog.targets.serving_workload`)."""
    workload = serving_workload(target, service)
    known = {family: indices for family, indices in sorted(watched.items(), key=lambda x: x[0] or "") if family}
    if workload is None:
        return {family: frontend_selector(namespace, service) for family in known}
    return {family: pod_selector(namespace, [workload(str(i)) for i in indices]) for family, indices in known.items()}


__all__ = ["DYNAMO", "FAMILIES", "FRONTENDS", "METRICS_PATH", "MIN_MEAN",
           "MIN_TAIL", "SGLANG", "VLLM", "LatencyHistograms",
           "frontend_selector", "needed", "pod_pattern", "pod_selector", "watch_selectors", "watching"]
