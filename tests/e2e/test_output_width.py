"""Tables fit 100 columns in a pipe (cells wrap); `--wide` prints them whole."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
BOX = tuple("┏┃┡│└")


def infra(*args: str) -> str:
    done = subprocess.run([sys.executable, "-m", "infra", *args], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    return done.stdout


def widest_table_line(text: str) -> int:
    return max((len(line.rstrip()) for line in text.splitlines() if line.startswith(BOX)), default=0)


def test_tables_fit_100_columns_unless_wide(tmp_path):
    plan = infra("plan", str(EXAMPLES / "omni-speech.yaml"), "-o", str(tmp_path / "p"), "--no-verify")
    models = infra("catalog", "models")
    assert 0 < widest_table_line(plan) <= 100 and 0 < widest_table_line(models) <= 100
    assert "first_output_p99" in plan  # wrapped, not cut
    assert widest_table_line(infra("--wide", "catalog", "models")) > 100
