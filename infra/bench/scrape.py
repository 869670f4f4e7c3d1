"""An engine's own latency figures, read from its Prometheus `/metrics` (vLLM's names; the emulator uses the same).

Histograms are cumulative, so a run's share is the difference of two scrapes: before the measured requests and
after them. Means come from `_sum / _count`; that is all a bucketed histogram says exactly.
"""

from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families

HISTOGRAMS = {"ttft": "vllm:time_to_first_token_seconds", "itl": "vllm:inter_token_latency_seconds",
              "e2e": "vllm:e2e_request_latency_seconds"}


def histogram_totals(text: str) -> dict[str, tuple[float, float]]:
    """(sum, count) of each known histogram, added over its label sets (models, engines)."""
    out: dict[str, list[float]] = {}
    wanted = {v: k for k, v in HISTOGRAMS.items()}
    for family in text_string_to_metric_families(text):
        key = wanted.get(family.name)
        if key is None:
            continue
        acc = out.setdefault(key, [0.0, 0.0])
        for sample in family.samples:
            if sample.name.endswith("_sum"):
                acc[0] += sample.value
            elif sample.name.endswith("_count"):
                acc[1] += sample.value
    return {k: (v[0], v[1]) for k, v in out.items()}


def server_means(before: dict[str, tuple[float, float]], after: dict[str, tuple[float, float]]
                 ) -> dict[str, dict[str, float]]:
    """Per metric, the mean (ms) and count of what the engine observed between two scrapes."""
    out = {}
    for key, (s1, c1) in sorted(after.items()):
        s0, c0 = before.get(key, (0.0, 0.0))
        if c1 - c0 > 0:
            out[key] = {"mean_ms": round((s1 - s0) / (c1 - c0) * 1000.0, 3), "n": int(c1 - c0)}
    return out
