"""Pipeline stages that are not LLMs: work to tokens, timing, queueing, and budgets along a pipeline."""

from __future__ import annotations

import pytest

from infra import api
from infra.catalog.loader import load_catalog
from infra.intent.models import StageWork
from infra.perf.calibration import lookup
from infra.perf.stages import stage_capacity, stage_latency, stage_load, stage_timing
from infra.planner.pipeline import plan_units

from ..conftest import ROOT

CAT = load_catalog()


def test_work_becomes_tokens():
    wan = stage_load(CAT.model("Wan2.1-T2V-14B"), StageWork(video_frames=81, resolution="1280x720", denoise_steps=40))
    assert (wan.tokens, wan.passes) == (21 * 45 * 80, 80)  # the latent of the model card: 21 x 45 x 80
    audio = stage_load(CAT.model("Qwen3-Omni-Audio-Encoder"), StageWork(audio="8s"))
    assert audio.tokens == 100  # 12.5 tokens per second
    codec = stage_load(CAT.model("Qwen3-Omni-Code2Wav"), StageWork(audio="15s"))
    assert codec.first_fraction == pytest.approx(1 / 15)
    vit = stage_load(CAT.model("Qwen2.5-VL-7B-Vision"), StageWork(images=2, resolution="1280x960"))
    assert vit.tokens == 2 * round(1280 / 14) * round(960 / 14)


def test_sequence_parallel_splits_a_pass_and_pays_for_it():
    model, device = CAT.model("Wan2.1-T2V-14B"), CAT.device("H200")
    load = stage_load(model, StageWork(video_frames=81, resolution="832x480", denoise_steps=40))
    f = lookup("vllm", device).factors
    one, eight = (stage_timing(model, device, "bf16", sp, load, f) for sp in (1, 8))
    assert one.service_s / 8 < eight.service_s < one.service_s / 6


def test_queueing_grows_latency_and_capacity_honours_targets():
    model, device = CAT.model("Qwen2.5-VL-7B-Vision"), CAT.device("L40S")
    t = stage_timing(model, device, "bf16", 1, stage_load(model, StageWork(images=1, resolution="1024x1024")),
                     lookup("vllm", device).factors)
    low, _, _ = stage_latency(t, 0.1 / t.service_s, 1.0)
    high, _, _ = stage_latency(t, 0.9 / t.service_s, 1.0)
    assert low["p99"] < high["p99"]
    cap = stage_capacity(t, 1.0, {}, {"p99": 3 * t.service_s})
    _, full, ok = stage_latency(t, cap, 1.0, ("p99",))
    assert ok and full["p99"] == pytest.approx(3 * t.service_s, rel=1e-3)
    assert stage_capacity(t, 1.0, {}, {"p99": 0.5 * t.service_s}) == 0.0


def test_budgets_split_the_objectives_along_the_pipeline():
    resolved = api.load_intent(ROOT / "examples" / "omni-speech.yaml")
    units = plan_units(resolved.services[0], resolved)
    leads = [u.first["p99"] for u in units[:-1]]
    # First audio: every stage's share of the 900 ms first-output objective and the hand-offs it crosses sum to
    # it (each streaming hand-off waits for its first unit).
    handoffs = [u.handoff.first_s for u in units[:-1] if u.handoff is not None]
    assert len(handoffs) == 3 and all(0 < h < 1e-3 for h in handoffs)
    assert sum(leads) + sum(handoffs) + units[-1].first["p99"] == pytest.approx(0.9, rel=1e-6)
    assert all(u.full["p99"] <= 30.0 for u in units)
    assert units[2].tpot == {} and all(u.stage.kind != "llm" or u.first for u in units)


def test_a_chunked_stage_fed_as_produced_queues_its_first_chunk_behind_chunks():
    dev = CAT.device("H20")
    codec = CAT.model("Qwen3-Omni-Code2Wav")
    t = stage_timing(codec, dev, "bf16", 1, stage_load(codec, StageWork(audio="15s")), lookup("vllm", dev).factors)
    assert t.chunks == 15 and 0 < t.fixed_s < t.first_s
    whole_first, whole_full, _ = stage_latency(t, 12.0, 1.0, ("p99",))
    mixed_first, mixed_full, _ = stage_latency(t, 12.0, 1.0, ("p99",), interleaved=True)
    assert mixed_first["p99"] < whole_first["p99"] and mixed_full == whole_full
    assert stage_capacity(t, 1.0, {"p99": 0.15}, {}, interleaved=True) > stage_capacity(t, 1.0, {"p99": 0.15}, {})
    # A stage that needs its whole input is one piece: nothing to interleave.
    vit = CAT.model("Qwen2.5-VL-7B-Vision")
    tv = stage_timing(vit, dev, "bf16", 1, stage_load(vit, StageWork(images=2, resolution="1280x960")),
                      lookup("vllm", dev).factors)
    assert tv.chunks == 1
    assert stage_latency(tv, 5.0, 1.0, ("p99",), interleaved=True) == stage_latency(tv, 5.0, 1.0, ("p99",))
