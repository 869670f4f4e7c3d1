"""`infra render` and the manifests `infra plan` writes, as a user runs them."""

from __future__ import annotations

import json
from pathlib import Path

from ..conftest import ROOT
from .test_cli import infra

GOLDEN = ROOT / "tests" / "golden" / "small-model-shared"


def tree(folder: Path) -> dict[str, bytes]:
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*"))
            if p.is_file() and not p.name.startswith(".")}


def test_plan_twice_same_manifests_and_render_writes_the_same(tmp_path):
    for run in ("a", "b"):
        out = infra("plan", "examples/rag-long-context.yaml", "-o", str(tmp_path / run), cwd=ROOT)
        assert out.returncode == 0, out.stderr
        assert f"wrote {tmp_path / run / 'manifests'}" in out.stdout
    planned = tree(tmp_path / "a" / "manifests")
    assert planned and planned == tree(tmp_path / "b" / "manifests")
    again = infra("render", str(tmp_path / "a" / "plan.yaml"), "-o", str(tmp_path / "r"), "--json")
    assert again.returncode == 0, again.stderr
    assert json.loads(again.stdout)["files"] == sorted(planned)
    assert tree(tmp_path / "r") == planned


def test_render_refuses_a_foreign_directory(tmp_path):
    (tmp_path / "mine.txt").write_text("keep")
    out = infra("render", str(GOLDEN / "plan.yaml"), "-o", str(tmp_path))
    assert out.returncode == 1 and "infra never wrote into it" in out.stderr and "--force" in out.stderr
    assert (tmp_path / "mine.txt").read_text() == "keep"  # --force is exercised in tests/unit/test_files.py


def test_broken_template_override_names_file_and_line(tmp_path):
    (tmp_path / "tpl").mkdir()
    (tmp_path / "tpl" / "poddisruptionbudget.yaml.j2").write_text(
        "apiVersion: policy/v1\nkind: PodDisruptionBudget\nmetadata:\n  name: {{ w.nmae }}\n")
    out = infra("render", str(GOLDEN / "plan.yaml"), "-o", str(tmp_path / "o"), "--templates", str(tmp_path / "tpl"))
    assert out.returncode == 1
    assert out.stderr.startswith(f"error: {tmp_path / 'tpl' / 'poddisruptionbudget.yaml.j2'}:4: undefined")
    assert "Traceback" not in out.stderr and not (tmp_path / "o").exists()


def test_inconsistent_plan_names_the_field(tmp_path):
    text = (GOLDEN / "plan.yaml").read_text().replace("  - pool: rtx4090\n", "  - pool: rtx5090\n")
    plan = tmp_path / "plan.yaml"
    plan.write_text(text)
    out = infra("render", str(plan), "-o", str(tmp_path / "o"))
    assert out.returncode == 1
    line = text.splitlines().index("    - pool: rtx5090") + 1  # the allocation's pool
    assert f"{plan}:{line}:" in out.stderr
    assert "spec.services[0].allocations[0].pool" in out.stderr and "rtx5090" in out.stderr
    assert "To fix" in out.stderr


def test_malformed_plan_gives_file_and_line(tmp_path):
    text = (GOLDEN / "plan.yaml").read_text().replace("      replicas: 2\n", "      replicas: two\n")
    plan = tmp_path / "plan.yaml"
    plan.write_text(text)
    out = infra("render", str(plan), "-o", str(tmp_path / "o"))
    assert out.returncode == 1 and f"{plan}:" in out.stderr and "replicas" in out.stderr


def test_an_edited_decode_pool_that_is_not_in_the_cluster_is_located(tmp_path):
    plan = tmp_path / "plan.yaml"
    text = (ROOT / "tests" / "golden" / "pd-across-devices" / "plan.yaml").read_text()
    assert "decode_pool: h20\n" in text
    plan.write_text(text.replace("decode_pool: h20\n", "decode_pool: h21\n"))
    out = infra("render", str(plan), "-o", str(tmp_path / "out"))
    assert out.returncode == 1 and "Traceback" not in out.stderr
    assert "plan.yaml:" in out.stderr and "decode_pool" in out.stderr and "'h21'" in out.stderr
    assert not (tmp_path / "out").exists()


def test_render_for_each_deployment_target_validates_and_refusals_are_one_line(tmp_path):
    plan = ROOT / "tests" / "golden" / "pd-across-devices" / "plan.yaml"
    for target, first in (("dynamo", "chat/base/dynamographdeployment-chat.yaml"),
                          ("kserve", "chat/base/llminferenceservice-chat-a0.yaml"),
                          ("llm-d", "chat/helm/llm-d-modelservice/chat-a0.values.yaml")):
        out = infra("render", str(plan), "-o", str(tmp_path / target), "--target", target, "--json")
        assert out.returncode == 0, out.stderr
        assert first in json.loads(out.stdout)["files"]
        checked = infra("validate", str(tmp_path / target), "--plan", str(plan))
        assert checked.returncode == 0, checked.stdout + checked.stderr
        assert f"plan consistency read from the {target} target's resources" in checked.stdout
    # The chat plan with its first allocation moved onto the Ascend pool, for which Dynamo has no runtime.
    ascend = tmp_path / "ascend-plan.yaml"
    ascend.write_text((ROOT / "tests" / "golden" / "chat-mixed-fleet" / "plan.yaml").read_text().replace(
        "  - pool: h100-a\n      device: H100-SXM\n      framework: vllm\n",
        "  - pool: ascend-b\n      device: Ascend-910B3\n      framework: vllm-ascend\n", 1))
    refused = infra("render", str(ascend), "-o", str(tmp_path / "ascend"), "--target", "dynamo")
    assert refused.returncode == 1 and "Traceback" not in refused.stderr
    assert refused.stderr.strip().count("\n") == 0 and "service chat" in refused.stderr and "huawei" in refused.stderr
    assert not (tmp_path / "ascend").exists()
    unknown = infra("render", str(plan), "-o", str(tmp_path / "x"), "--target", "openshift")
    assert unknown.returncode == 1 and "unknown deployment target 'openshift'" in unknown.stderr
