"""The command line as a user runs it: real processes, real files, exit codes and output."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from ..conftest import ROOT

EXAMPLE = ROOT / "examples" / "chat-mixed-fleet.yaml"


def infra(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "infra", *args], capture_output=True, text=True, cwd=cwd,
                          timeout=120)


def test_console_script_is_installed():
    script = Path(sys.executable).parent / "infra"
    assert script.exists(), "the `infra` console script is missing; install with pip install -e ."
    out = subprocess.run([str(script), "--help"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and "check" in out.stdout


def test_check_example():
    out = infra("check", str(EXAMPLE))
    assert out.returncode == 0, out.stderr
    assert "valid intent" in out.stdout and "Llama-3.1-70B" in out.stdout and "40/s peak" in out.stdout


def test_an_anchor_defined_twice_reads_without_a_python_warning(tmp_path):
    # Valid YAML (an alias takes the latest definition): the terminal shows the result, not a library's warning.
    for name in ("measured-chat.yaml", "profiles", "calibrations"):
        src = ROOT / "examples" / name
        (shutil.copytree if src.is_dir() else shutil.copy)(src, tmp_path / name)
    intent = tmp_path / "measured-chat.yaml"
    text = intent.read_text().replace("apiVersion: infra.dev/v1alpha1", "apiVersion: &a infra.dev/v1alpha1", 1)
    intent.write_text(text.replace("kind: ServingIntent", "kind: &a ServingIntent", 1))
    out = infra("check", str(intent))
    assert out.returncode == 0 and "valid intent" in out.stdout, out.stdout + out.stderr
    assert "Warning" not in out.stderr and "composer.py" not in out.stderr, out.stderr


def test_check_json_is_deterministic():
    a = infra("check", str(EXAMPLE), "--json")
    b = infra("check", str(EXAMPLE), "--json")
    assert a.returncode == 0 and a.stdout == b.stdout
    data = json.loads(a.stdout)
    assert data["resolved"]["services"]["chat"]["model"] == "Llama-3.1-70B"
    assert data["intent"]["spec"]["services"][0]["slo"]["ttft"]["p99"] == "1.5s"


def test_check_profile():
    out = infra("check", str(ROOT / "examples" / "profiles" / "mixed-h100-ascend.yaml"))
    assert out.returncode == 0 and "valid cluster profile" in out.stdout


def test_bad_intent_exits_1_with_located_one_line_errors(tmp_path):
    text = EXAMPLE.read_text().replace("p99: 1.5s", "p99: 100ms").replace("rate: {peak", "ratee: {peak")
    bad = tmp_path / "bad.yaml"
    bad.write_text(text)
    (tmp_path / "profiles").mkdir()
    (tmp_path / "profiles" / "mixed-h100-ascend.yaml").write_text(
        (ROOT / "examples" / "profiles" / "mixed-h100-ascend.yaml").read_text())
    out = infra("check", str(bad))
    assert out.returncode == 1
    assert "Traceback" not in out.stderr and out.stdout == ""
    lines = out.stderr.strip().splitlines()
    assert all(line.startswith(f"error: {bad}:") and " — To fix: " in line for line in lines), lines
    assert any("did you mean 'rate'" in line for line in lines)


def test_missing_file_and_usage_errors_exit_1():
    out = infra("check", "no-such-intent.yaml")
    assert out.returncode == 1 and "not found" in out.stderr and "Traceback" not in out.stderr
    out = infra("check")
    assert out.returncode == 1 and "To fix" in out.stderr
    out = infra("frobnicate")
    assert out.returncode == 1 and "To fix" in out.stderr


def test_debug_shows_traceback(tmp_path):
    out = infra("--debug", "check", str(tmp_path / "missing.yaml"))
    assert out.returncode != 0 and "Traceback" in out.stderr


def test_schema_command(tmp_path):
    out = infra("schema")
    assert out.returncode == 0
    schema = json.loads(out.stdout)
    assert "ServingIntent" in schema["$defs"] and "ClusterProfile" in schema["$defs"]
    target = tmp_path / "s.json"
    out = infra("schema", "-o", str(target))
    assert out.returncode == 0 and json.loads(target.read_text()) == schema


@pytest.mark.parametrize("args,needle", [
    (("catalog",), "H100-SXM"),
    (("catalog", "models"), "DeepSeek-V3"),
    (("catalog", "devices"), "Ascend-910B3"),
    (("catalog", "frameworks"), "vllm-ascend"),
    (("catalog", "conventions"), "nvidia.com/gpumem"),
    (("catalog", "devices", "h100_sxm"), "memory_bandwidth_tbps"),
    (("catalog", "models", "Qwen/Qwen3-32B"), "kv_heads"),
])
def test_catalog_command(args, needle):
    out = infra(*args)
    assert out.returncode == 0, out.stderr
    assert needle in out.stdout


def test_catalog_json_and_unknown_names():
    out = infra("catalog", "devices", "H200", "--json")
    assert out.returncode == 0
    data = json.loads(out.stdout)
    assert data["name"] == "H200" and data["memory_gb"]["source"].startswith("http")
    out = infra("catalog", "devices", "H100-SMX")
    assert out.returncode == 1 and "did you mean 'H100-SXM'" in out.stderr
    out = infra("catalog", "gadgets")
    assert out.returncode == 1 and "unknown catalog section" in out.stderr


def test_catalog_overlay_flag(tmp_path):
    (tmp_path / "devices").mkdir()
    (tmp_path / "devices" / "price.yaml").write_text(
        "name: H200\nreference_price_per_hour: {value: 2.25, source: 'https://example.com/r', confidence: high}\n")
    out = infra("catalog", "devices", "H200", "--json", "--catalog", str(tmp_path))
    assert out.returncode == 0 and json.loads(out.stdout)["reference_price_per_hour"]["value"] == 2.25


def test_every_command_has_help():
    top = infra("--help")
    assert top.returncode == 0
    for cmd in ("check", "schema", "catalog"):
        out = infra(cmd, "--help")
        assert out.returncode == 0 and "Usage" in out.stdout, cmd


def test_help_flows_docstrings_as_paragraphs():
    # A docstring wraps at the source's width; the help says each of its paragraphs as one run of text.
    out = subprocess.run([sys.executable, "-m", "infra", "--help"], capture_output=True, text=True, timeout=60,
                         env={**os.environ, "COLUMNS": "200"})
    assert out.returncode == 0
    line = next(x for x in out.stdout.splitlines() if "│ calibrate" in x)
    assert "calibration file for plan, estimate, bench --simulate and pr" in line, out.stdout
    bench = infra("bench", "--help")
    assert "with the workload of --intent" in " ".join(bench.stdout.split())
    assert not any(x.rstrip().endswith(" with the") for x in bench.stdout.splitlines()), bench.stdout
