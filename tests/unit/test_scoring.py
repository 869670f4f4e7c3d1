"""Scoring candidates fast changes no candidate: probes that skip the full search of dominated shapes, and scores
shared across pools and services, give what scoring every shape in full gives."""

from __future__ import annotations

from pathlib import Path

import pytest

from infra import api
from infra.planner import candidates
from infra.planner.candidates import DOMINATED, enumerate_candidates

ROOT = Path(__file__).resolve().parents[2]


def _counting(monkeypatch) -> list[int]:
    calls = [0]
    search = candidates._search

    def counted(*args, **kwargs):
        calls[0] += 1
        return search(*args, **kwargs)

    monkeypatch.setattr(candidates, "_search", counted)
    return calls


def _summary(kept, seen):
    return ([(c.key, c.capacity, c.estimate.prediction) for c in kept],
            [(s.service, s.pool, s.framework, s.precision, s.parallel, s.outcome, s.misses) for s in seen])


@pytest.mark.parametrize("example", ["chat-mixed-fleet.yaml", "multi-service.yaml", "small-model-shared.yaml"])
def test_probing_dominated_shapes_keeps_every_candidate_and_outcome(monkeypatch, example):
    path = ROOT / "examples" / example
    calls = _counting(monkeypatch)
    fast = _summary(*enumerate_candidates(api.load_intent(path)))
    probed = calls[0]
    score = candidates._score
    monkeypatch.setattr(candidates, "_score", lambda *a, **k: score(*a, **{**k, "worth": 0.0}))
    calls[0] = 0
    full = _summary(*enumerate_candidates(api.load_intent(path)))
    assert fast[0] == full[0]
    # A shape that fails the load a smaller one carries is dominated, whether or not it would also miss the
    # objectives at its lightest load (the probe that would tell is not made); every other outcome is the same.
    assert len(fast[1]) == len(full[1])
    for quick, whole in zip(fast[1], full[1]):
        assert quick == whole or (quick[:5] == whole[:5] and quick[5] == DOMINATED and whole[6]), (quick, whole)
    assert any(outcome == DOMINATED for *_, outcome, _ in fast[1])
    assert probed < calls[0]  # some dominated shapes were told apart by a probe, not a full search


def _fleet(tmp_path: Path, zones: int, services: int) -> Path:
    tmp_path.mkdir(parents=True, exist_ok=True)
    pools = "\n".join(f"""    - name: pool-{z}
      device: H100-SXM
      nodes: 2
      devices_per_node: 8
      topology: {{zone: zone-{z}}}""" for z in range(zones))
    svcs = "\n".join(f"""    - name: chat-{s}
      model: Llama-3.1-8B
      workload:
        rate: 12/s
        input_tokens: {{mean: 1500, p99: 6000}}
        output_tokens: {{mean: 250}}
      slo:
        ttft: {{p99: 2s}}
        tpot: {{p99: 80ms}}
      preferences:
        frameworks: [vllm]""" for s in range(services))
    (tmp_path / "profile.yaml").write_text("apiVersion: infra.dev/v1alpha1\nkind: ClusterProfile\n"
                                          f"metadata: {{name: fleet}}\nspec:\n  pools:\n{pools}\n")
    intent = tmp_path / "intent.yaml"
    intent.write_text("apiVersion: infra.dev/v1alpha1\nkind: ServingIntent\nmetadata: {name: fleet}\n"
                      f"spec:\n  cluster: {{profile: profile.yaml}}\n  services:\n{svcs}\n")
    return intent


def test_pools_of_one_device_and_services_of_one_workload_are_scored_once(monkeypatch, tmp_path):
    calls = _counting(monkeypatch)
    kept_one, _ = enumerate_candidates(api.load_intent(_fleet(tmp_path / "a", 1, 1)))
    once = calls[0]
    calls[0] = 0
    kept, seen = enumerate_candidates(api.load_intent(_fleet(tmp_path / "b", 3, 4)))
    assert calls[0] == once
    assert len(kept) == 12 * len(kept_one)
    by_pool = {}
    for c in kept:
        by_pool.setdefault((c.pool, c.framework, c.precision, c.layout), set()).add(c.capacity)
    assert all(len(caps) == 1 for caps in by_pool.values())


def test_scores_of_an_intent_live_as_long_as_it_does(tmp_path):
    resolved = api.load_intent(_fleet(tmp_path, 1, 1))
    enumerate_candidates(resolved)
    assert candidates.scores_of(resolved).capacity
    key = id(resolved)
    del resolved
    assert key not in candidates._SCORES
