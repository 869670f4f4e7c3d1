"""`benchmarks/fidelity.py` on a small CSV in the calibration set's format, as a user would run it."""

from __future__ import annotations

import csv
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
COLUMNS = ("id", "silicon_data_source", "backend", "model_path", "system", "precision", "mode", "isl", "osl",
           "batch_size", "tp_size", "pp_size", "attention_dp_size", "moe_tp_size", "moe_ep_size",
           "silicon_ttft_ms", "silicon_tpot_ms")


def _write(path: Path, rows: list[dict[str, str]]) -> None:
    with path.open("w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=COLUMNS)
        w.writeheader()
        for row in rows:
            w.writerow({k: row.get(k, "") for k in COLUMNS})


def test_fidelity_scores_a_load_sweep_of_an_unfitted_model_and_says_why_it_skips(tmp_path):
    base = {"backend": "vllm", "model_path": "Qwen/Qwen3-32B", "system": "h200_sxm", "precision": "fp8",
            "mode": "agg", "isl": "1024", "osl": "1024", "tp_size": "2", "pp_size": "1"}
    sweep = [{**base, "id": f"q{c}", "silicon_data_source": f"silicon_concurrency={c}", "batch_size": str(c),
              "silicon_ttft_ms": str(ttft), "silicon_tpot_ms": str(tpot)}
             for c, ttft, tpot in ((4, 80, 9.0), (16, 110, 11.0), (64, 260, 17.0))]
    unknown = {**base, "id": "x", "model_path": "example/NoSuchModel-7B", "silicon_data_source":
               "silicon_concurrency=4", "silicon_ttft_ms": "50", "silicon_tpot_ms": "5"}
    path = tmp_path / "rows.csv"
    _write(path, sweep + [unknown])
    run = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "fidelity.py"), "--csv", str(path), "--json"],
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    assert "rows 4: used 3, skipped 1" in run.stdout
    assert "unknown model 'example/NoSuchModel-7B'" in run.stdout
    figures = json.loads(run.stdout.strip().splitlines()[-1])
    assert figures["n"] == 3 and figures["skipped"] == 1
    for key in ("ttft_median_ape", "ttft_p90_ape", "tpot_median_ape", "tpot_p90_ape"):
        assert 0 <= figures[key] < 10
    # The three loads make one sweep; its level divided out, the middle row of three is exact, so the median is
    # the smaller of the other two errors.
    sweeps = figures["within_sweeps"]
    assert (sweeps["sweeps"], sweeps["n"]) == (1, 3)
    assert 0 <= sweeps["ttft_median_ape"] < 10 and 0 <= sweeps["tpot_median_ape"] < 10


def test_fidelity_names_a_file_without_the_columns(tmp_path):
    path = tmp_path / "bad.csv"
    path.write_text("model_path,system\nQwen/Qwen3-32B,h200_sxm\n")
    run = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "fidelity.py"), "--csv", str(path)],
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 1
    assert "bad.csv:1:1: no column backend" in run.stderr and "Traceback" not in run.stderr
