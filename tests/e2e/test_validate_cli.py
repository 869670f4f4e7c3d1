"""`infra validate` as a user runs it: exit codes, the JSON report, the rule list, bad input without tracebacks."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from .test_cli import infra

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "manifests"


def planted(tmp_path: Path, old: str, new: str) -> tuple[Path, Path]:
    """A copy of the clean fixture tree with one edit in deployment-chat-a0.yaml: (tree, edited file)."""
    tree = tmp_path / "t"
    shutil.copytree(FIXTURES / "good", tree)
    dep = tree / "chat/base/deployment-chat-a0.yaml"
    dep.write_text(dep.read_text().replace(old, new, 1))
    return tree, dep


def test_clean_tree_exits_0_and_prints_a_verdict():
    out = infra("validate", str(FIXTURES / "good"), "--profile", str(FIXTURES / "profile.yaml"))
    assert out.returncode == 0, out.stdout + out.stderr
    assert "valid: 14 objects in 16 files, 0 errors, 0 warnings" in out.stdout


def test_errors_exit_1_with_a_json_report(tmp_path):
    tree, dep = planted(tmp_path, "          resources:\n", "          resource:\n")
    out = infra("validate", str(tree), "--json")
    assert out.returncode == 1 and "Traceback" not in out.stderr
    data = json.loads(out.stdout)
    assert set(data) == {"path", "ok", "files", "objects", "errors", "warnings", "checks", "notes", "findings"}
    assert data["ok"] is False and data["errors"] >= 1
    f = next(f for f in data["findings"] if f["rule"] == "SCH001")
    assert set(f) == {"rule", "severity", "file", "line", "object", "field", "message", "fix"}
    assert f["file"] == str(dep) and f["object"] == "Deployment/chat-a0" and f["message"] == "unknown field 'resource'"
    assert f["fix"] == "did you mean 'resources'?" and f["field"].endswith("containers[0].resource")
    assert dep.read_text().splitlines()[f["line"] - 1].strip() == "resource:"
    again = infra("validate", str(tree), "--json")
    assert again.stdout == out.stdout


def test_warnings_alone_exit_0(tmp_path):
    tree, _ = planted(tmp_path, "      serviceAccountName: chat\n", "")
    out = infra("validate", str(tree), "--json")
    data = json.loads(out.stdout)
    assert out.returncode == 0 and data["ok"] and data["warnings"] == 1 and data["findings"][0]["rule"] == "SEC007"


def test_rules_lists_every_rule():
    out = infra("validate", "--rules", "--json")
    assert out.returncode == 0
    rules = json.loads(out.stdout)
    ids = [r["rule"] for r in rules]
    assert {"SCH001", "SEM006", "PRO001", "SEC004", "PLN004"} <= set(ids) and len(ids) == len(set(ids))
    assert all(r["severity"] in ("error", "warning") and r["fix"] for r in rules)
    table = infra("validate", "--rules")
    assert table.returncode == 0 and "SEM003" in table.stdout


def test_bad_yaml_is_a_located_finding(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("apiVersion: v1\nkind: Service\nmetadata:\n  name: x\n   bad: [\n")
    out = infra("validate", str(bad), "--json")
    assert out.returncode == 1 and "Traceback" not in out.stderr
    f = json.loads(out.stdout)["findings"][0]
    assert f["rule"] == "YAML001" and f["file"] == str(bad) and f["line"] >= 4
    lst = tmp_path / "list.yaml"
    lst.write_text("- a\n- b\n")
    f = json.loads(infra("validate", str(lst), "--json").stdout)["findings"][0]
    assert f["rule"] == "YAML002" and f["line"] == 1


def test_missing_path_and_live_without_kubeconfig_exit_1(tmp_path):
    out = infra("validate", str(tmp_path / "nope"))
    assert out.returncode == 1 and out.stderr.startswith("error: ") and "does not exist" in out.stderr
    import os
    import subprocess
    import sys

    env = dict(os.environ, KUBECONFIG=str(tmp_path / "no-kubeconfig"), HOME=str(tmp_path))
    out = subprocess.run([sys.executable, "-m", "infra", "validate", str(FIXTURES / "good"), "--live"],
                         capture_output=True, text=True, env=env, timeout=120)
    assert out.returncode == 1 and "Traceback" not in out.stderr
    assert "--live needs a cluster" in out.stderr and "KUBECONFIG" in out.stderr


def _kubeconfig():
    from infra.validators.live import kubeconfig

    return kubeconfig()



@pytest.mark.skipif(_kubeconfig() is None, reason="server-side dry run needs a cluster (KUBECONFIG)")
def test_live_dry_run_on_the_kubeconfig_cluster():
    from infra.validators import validate_tree

    report = validate_tree(FIXTURES / "good" / "chat" / "base" / "service-chat.yaml", live=True)
    assert "live" in report.checks
    assert not [f for f in report.findings if f.rule == "LIV001" and "refused" in f.message]
