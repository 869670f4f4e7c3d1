"""`benchmarks/sim_fidelity.py` on a small CSV in the calibration set's format: the simulator replays each row's
closed loop as its client drove it, scored beside the performance model."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.e2e.test_fidelity_cli import _write

ROOT = Path(__file__).resolve().parents[2]


def test_sim_fidelity_replays_a_sweep_beside_the_model_and_skips_the_largest_loops(tmp_path):
    base = {"backend": "vllm", "model_path": "meta-llama/Llama-3.1-8B-Instruct", "system": "h100_sxm",
            "precision": "bf16", "mode": "agg", "isl": "1024", "osl": "128", "tp_size": "1", "pp_size": "1"}
    # A dated sweep's rows: lengths drawn on [0.8 L, L], ten requests a client.
    rows = [{**base, "id": f"s{c}", "silicon_data_source": f"source_file=2026-03-25.csv; silicon_concurrency={c}",
             "batch_size": str(c), "silicon_ttft_ms": str(ttft), "silicon_tpot_ms": str(tpot)}
            for c, ttft, tpot in ((2, 60, 8.0), (8, 70, 9.0), (64, 150, 14.0))]
    path = tmp_path / "rows.csv"
    _write(path, rows)
    run = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "sim_fidelity.py"), "--csv", str(path),
                          "--max-clients", "16", "--json"], capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    assert "rows 3: simulated 2, skipped 1" in run.stdout and "more than 16 clients" in run.stdout
    assert "as plans price lengths that vary: the 2 rows" in run.stdout
    figures = json.loads(run.stdout.strip().splitlines()[-1])
    assert figures["n"] == 2 and figures["skipped"] == 1
    for side in ("sim", "model"):
        for key in ("ttft_median_ape", "tpot_median_ape"):
            assert 0 <= figures[side][key] < 10
    # The simulator and the model share the step prices: at two and eight clients their TPOT agree closely.
    assert abs(figures["sim"]["tpot_median_ape"] - figures["model"]["tpot_median_ape"]) < 0.1
    assert figures["model_spread"]["lean"]["mode agg"]["n"] == 2
