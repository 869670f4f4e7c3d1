"""`infra emulate PLAN --service PIPELINE`: a pipeline served over real HTTP, stage by stage in real time, measured
by the load client, agrees with the stage-by-stage simulator."""

from __future__ import annotations

import numpy as np

from infra import api
from infra.bench.pipeline import simulate_pipeline
from infra.planner.types import load_plan

from ..bench_servers import emulator
from ..conftest import ROOT

OMNI = ROOT / "tests" / "golden" / "omni-speech" / "plan.yaml"
INTENT = ROOT / "examples" / "omni-speech.yaml"


def test_the_emulated_pipeline_streams_audio_chunks_when_the_simulator_says():
    load = {"rate": 3.0, "requests": 12, "input_tokens": 100, "output_tokens": 64}
    with emulator(str(OMNI), "--service", "voice") as url:
        r = api.bench_endpoint(url, warmup=0, **load)
    s = r.summary
    # The client sees the codec: one output per audio chunk (15 s of audio in 1 s chunks), ending with "stop".
    assert s.completed == 12 and all(rec.output_tokens == 15 for rec in r.run.records)
    # The same requests' lengths (the first 12 draws of each stage), arrivals from another Poisson draw.
    run = simulate_pipeline(load_plan(OMNI), "voice", requests=12, seed=0, rate=3.0, intent=INTENT)
    first = np.nanmean(run.stages[-1].first - run.arrive) * 1000
    end = np.nanmean(run.stages[-1].end - run.arrive) * 1000
    assert abs(s.metrics["ttft"].mean - first) <= 60 + 0.3 * first, (s.metrics["ttft"].mean, first)
    assert abs(s.metrics["e2e"].mean - end) <= 0.15 * end, (s.metrics["e2e"].mean, end)
