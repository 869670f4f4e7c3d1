"""`benchmarks/ceiling.py` on a small CSV in the calibration set's format, as a user would run it."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.e2e.test_fidelity_cli import _write

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "benchmarks" / "ceiling.py"


def _sweeps() -> list[dict[str, str]]:
    rows = []
    for model, tp in (("Qwen/Qwen3-32B", "2"), ("meta-llama/Llama-3.1-8B-Instruct", "1")):
        for isl in ("1024", "4096"):
            for c, ttft, tpot in ((4, 90, 9.0), (16, 130, 11.0), (64, 300, 17.0)):
                rows.append({"backend": "vllm", "model_path": model, "system": "h200_sxm", "precision": "fp8",
                             "mode": "agg", "isl": isl, "osl": "512", "tp_size": tp, "pp_size": "1",
                             "id": f"{model}-{isl}-{c}", "silicon_data_source": f"silicon_concurrency={c}",
                             "batch_size": str(c), "silicon_ttft_ms": str(ttft * (2 if isl == "4096" else 1)),
                             "silicon_tpot_ms": str(tpot)})
    return rows


def _run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=300)


def test_ceiling_scores_the_model_and_the_learners_on_the_same_rows(tmp_path):
    path = tmp_path / "rows.csv"
    _write(path, _sweeps())
    run = _run("--csv", str(path), "--folds", "2", "--json")
    assert run.returncode == 0, run.stderr
    assert "used 12 (4 load sweeps, 2 models), skipped 0" in run.stdout
    figures = json.loads(run.stdout.strip().splitlines()[-1])
    assert (figures["n"], figures["sweeps"], figures["models"]) == (12, 4, 2)
    # The committed leave-one-model-out figures belong to the calibration set, not to these rows.
    assert "model_lomo" not in figures and "leave-one-model-out" not in run.stdout.split("trees on")[0]
    # The model's own figures are the ones the fidelity benchmark reports for the same rows.
    fidelity = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "fidelity.py"), "--csv", str(path),
                               "--json"], capture_output=True, text=True, timeout=300)
    same = json.loads(fidelity.stdout.strip().splitlines()[-1])
    for key in ("ttft_median_ape", "ttft_p90_ape", "tpot_median_ape", "tpot_p90_ape"):
        assert abs(figures["model_replayed"][key] - same[key]) < 1e-9
        for learner in ("learner_held_out_sweeps", "learner_with_model_held_out_sweeps", "learner_lomo"):
            assert 0 <= figures[learner][key] < 10


def test_ceiling_says_why_it_cannot_hold_a_sweep_out(tmp_path):
    path = tmp_path / "one.csv"
    _write(path, [r for r in _sweeps() if r["isl"] == "1024" and "Qwen" in r["model_path"]])
    run = _run("--csv", str(path))
    assert run.returncode == 1
    assert "3 replayable rows in 1 load sweep(s)" in run.stderr and "Traceback" not in run.stderr
    run = _run("--csv", str(path), "--folds", "1")
    assert run.returncode == 1 and "--folds 1" in run.stderr
