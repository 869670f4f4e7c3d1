"""Rendering plans into manifests: layout, names, engine arguments, determinism, template overrides, bad plans."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from infra.errors import IntentError
from infra.files import write_files
from infra.planner.types import DeploymentPlan, load_plan
from infra.render import render_plan, render_tree
from infra.render.env import TemplateError
from infra.render.yamlout import load_yaml_text

GOLDEN = Path(__file__).resolve().parents[1] / "golden"


def golden_plan(name: str) -> DeploymentPlan:
    return load_plan(GOLDEN / name / "plan.yaml")


def objects(files: dict[str, str]) -> dict[str, dict]:
    return {path: load_yaml_text(text) for path, text in files.items()}


def edit(plan: DeploymentPlan, fn) -> DeploymentPlan:
    """A copy of `plan` changed by `fn(data)` on its JSON form."""
    data = plan.model_dump(mode="json", by_alias=True)
    fn(data)
    return DeploymentPlan.model_validate(data)


def container(files: dict[str, str], path: str) -> dict:
    return objects(files)[path]["spec"]["template"]["spec"]["containers"][0]


def flag(args: list[str], name: str) -> str | None:
    return args[args.index(name) + 1] if name in args else None


def test_vllm_deployment_service_and_kustomize_layout():
    files = render_plan(golden_plan("small-model-shared"))
    assert "summarise/base/deployment-summarise-a0.yaml" in files
    assert "summarise/base/service-summarise.yaml" in files
    kust = load_yaml_text(files["summarise/base/kustomization.yaml"])
    assert kust["resources"] == sorted(p.rsplit("/", 1)[1] for p in files
                                       if p.startswith("summarise/base/") and not p.endswith("kustomization.yaml"))
    overlay = load_yaml_text(files["summarise/overlays/onprem-small/kustomization.yaml"])
    assert overlay == {"apiVersion": "kustomize.config.k8s.io/v1beta1", "kind": "Kustomization",
                       "namespace": "default", "resources": ["../../base"]}
    dep = load_yaml_text(files["summarise/base/deployment-summarise-a0.yaml"])
    labels = dep["spec"]["template"]["metadata"]["labels"]
    assert labels["infra.dev/allocation"] == "a0" and labels["infra.dev/role"] == "agg"
    assert labels["app.kubernetes.io/managed-by"] == "infra"
    assert dep["metadata"]["annotations"]["infra.dev/plan-fingerprint"].startswith("sha256:")
    assert all(dep["spec"]["selector"]["matchLabels"][k] == v for k, v in labels.items()
               if k in dep["spec"]["selector"]["matchLabels"])
    c = dep["spec"]["template"]["spec"]["containers"][0]
    assert c["command"] == ["vllm", "serve"] and c["args"][0] == "Qwen/Qwen3-8B"
    assert flag(c["args"], "--served-model-name") == "summarise"
    assert flag(c["args"], "--max-model-len") == "8000"
    assert flag(c["args"], "--kv-cache-dtype") == "fp8"
    assert ":" in c["image"] and not c["image"].endswith(":latest")
    assert c["resources"]["limits"]["nvidia.com/gpu"] == 1
    assert c["securityContext"]["privileged"] is False
    assert dep["spec"]["template"]["spec"]["serviceAccountName"] == "summarise"
    sa = load_yaml_text(files["summarise/base/serviceaccount-summarise.yaml"])
    assert sa["automountServiceAccountToken"] is False
    assert dep["spec"]["template"]["spec"]["schedulerName"] == "hami-scheduler"
    token = next(e for e in c["env"] if e["name"] == "HF_TOKEN")
    assert token["valueFrom"]["secretKeyRef"]["optional"] is True
    # every flag appears once
    flags = [a for a in c["args"] if a.startswith("--")]
    assert len(flags) == len(set(flags))


def test_same_plan_same_bytes():
    plan = golden_plan("small-model-shared")
    assert render_plan(plan) == render_plan(plan)


def test_startup_probe_scales_with_weight_bytes():
    files = render_plan(golden_plan("small-model-shared"))
    c = container(files, "summarise/base/deployment-summarise-a0.yaml")
    # Qwen3-8B: 8.19e9 params x 2 bytes at 200 MB/s = 82 s, plus 300 s engine start, in 10 s periods.
    assert c["startupProbe"]["failureThreshold"] == 39


def test_template_override_by_file_name(tmp_path):
    (tmp_path / "service.yaml.j2").write_text(
        "apiVersion: v1\nkind: Service\nmetadata:\n  name: {{ name | json }}\n"
        "  annotations: {team: platform}\nspec:\n  selector: {{ selector | json }}\n"
        "  ports: [{port: {{ port }}}]\n")
    files = render_plan(golden_plan("small-model-shared"), templates=tmp_path)
    svc = load_yaml_text(files["summarise/base/service-summarise.yaml"])
    assert svc["metadata"]["annotations"] == {"team": "platform"}


@pytest.mark.parametrize("body, line, what", [
    ("apiVersion: v1\nkind: Service\nmetadata:\n  name: {{ name }\n", 4, "syntax"),
    ("apiVersion: v1\nkind: Service\nmetadata:\n  name: x\n  labels: {{ no_such_thing.labels | json }}\n", 5,
     "undefined"),
    ("apiVersion: v1\nkind: Service\nmetadata:\n  name: x\n   bad: [1\n", 5, "not valid YAML"),
])
def test_broken_override_names_template_file_and_line(tmp_path, body, line, what):
    (tmp_path / "service.yaml.j2").write_text(body)
    with pytest.raises(TemplateError) as err:
        render_plan(golden_plan("small-model-shared"), templates=tmp_path)
    problem = err.value.problems[0]
    assert problem.location.file == str(tmp_path / "service.yaml.j2")
    assert problem.location.line == line and what in problem.message


def test_allocation_on_unknown_pool_is_rejected_with_field():
    plan = edit(golden_plan("small-model-shared"),
                lambda d: d["spec"]["services"][0]["allocations"][0].update(pool="nowhere"))
    with pytest.raises(IntentError) as err:
        render_tree(plan, plan_file="plan.yaml")
    p = err.value.problems[0]
    assert p.location.path == "spec.services[0].allocations[0].pool" and "spec.cluster.pools" in p.message
    assert p.fix


@pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl not installed")
def test_kubectl_kustomize_builds_every_overlay(tmp_path):
    for name in sorted(p.name for p in GOLDEN.iterdir() if (p / "manifests").is_dir()):
        out = tmp_path / name
        write_files(out, render_plan(golden_plan(name)))
        for overlay in sorted(out.glob("*/overlays/*")):
            run = subprocess.run(["kubectl", "kustomize", str(overlay)], capture_output=True, text=True, check=False)
            assert run.returncode == 0, f"{overlay}: {run.stderr}"
            assert "kind: " in run.stdout


def test_built_in_objects_pass_strict_schema_validation():
    import kubernetes_validate

    version = kubernetes_validate.latest_version()
    checked = 0
    for path in sorted(GOLDEN.glob("*/manifests/**/*.yaml")):
        data = load_yaml_text(path.read_text(encoding="utf-8"))
        group = data["apiVersion"].split("/")[0] if "/" in data["apiVersion"] else ""
        if data["kind"] == "Kustomization" or group not in ("", "apps", "policy", "autoscaling", "resource.k8s.io"):
            continue  # custom resources are checked against their CRDs by `infra validate`
        kubernetes_validate.validate(data, version, strict=True)
        checked += 1
    assert checked >= 20


def test_settings_override_merges_over_the_packaged_settings(tmp_path):
    (tmp_path / "settings.yaml").write_text("service_account: shared-serving\nload_bandwidth_mb_s: 1000\n")
    files = render_plan(golden_plan("small-model-shared"), templates=tmp_path)
    assert not any("serviceaccount" in p for p in files)
    c = container(files, "summarise/base/deployment-summarise-a0.yaml")
    assert objects(files)["summarise/base/deployment-summarise-a0.yaml"]["spec"]["template"]["spec"][
        "serviceAccountName"] == "shared-serving"
    # 16.4 GB at 1000 MB/s plus 300 s engine start, in 10 s periods
    assert c["startupProbe"]["failureThreshold"] == 32


def test_bad_settings_override_names_the_file_and_field(tmp_path):
    (tmp_path / "settings.yaml").write_text("load_bandwidth_mb_s: -5\n")
    with pytest.raises(IntentError) as err:
        render_plan(golden_plan("small-model-shared"), templates=tmp_path)
    p = err.value.problems[0]
    assert p.location.file == str(tmp_path / "settings.yaml") and p.location.path == "load_bandwidth_mb_s"


def test_placeholder_resource_name_is_rejected():
    plan = edit(golden_plan("small-model-shared"),
                lambda d: d["spec"]["cluster"]["pools"][2]["resources"].update(count="huawei.com/Ascend{chip}"))
    with pytest.raises(IntentError, match="placeholder") as err:
        render_tree(plan)
    assert err.value.problems[0].location.path == "spec.cluster.pools[2].resources.count"
