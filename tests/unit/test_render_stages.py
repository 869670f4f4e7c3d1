"""Pipelines render one workload per stage with its stage config and connectors: vLLM-Omni stages on their devices
(sequence parallel as Ulysses degree), LLM stages as LLM services, CPU stages on CPU. Plans are golden plans."""

from __future__ import annotations

from pathlib import Path

import pytest

from infra.errors import IntentError
from infra.planner.types import DeploymentPlan, load_plan
from infra.render import render_tree
from infra.render.yamlout import load_yaml_text

from .test_render_features import arg, objs, pod_spec

GOLDEN = Path(__file__).resolve().parents[1] / "golden"


def plan_of(name: str) -> DeploymentPlan:
    return load_plan(GOLDEN / name / "plan.yaml")


def stage_config(files: dict[str, str], service: str) -> dict:
    cm = load_yaml_text(files[f"{service}/base/configmap-{service}-stage.yaml"])
    return load_yaml_text(cm["data"]["stage.yaml"])


def test_every_stage_has_a_workload_a_service_and_its_config():
    plan = plan_of("omni-speech")
    files = render_tree(plan).files
    ns = plan.spec.cluster.namespace
    order = ["voice-audio-in", "voice-thinker", "voice-talker", "voice-code2wav"]
    for i, name in enumerate(order):
        dep = load_yaml_text(files[f"{name}/base/deployment-{name}-a0.yaml"])
        stage = name.removeprefix("voice-")
        for labels in (dep["metadata"]["labels"], dep["spec"]["template"]["metadata"]["labels"]):
            assert labels["infra.dev/pipeline"] == "voice" and labels["infra.dev/stage"] == stage
        assert f"{name}/base/service-{name}.yaml" in files
        cfg = stage_config(files, name)
        assert (cfg["pipeline"], cfg["stage"], cfg["index"]) == ("voice", stage, i)
        assert cfg["final_output"] is (i == len(order) - 1)
        if i + 1 < len(order):
            nxt = order[i + 1]
            port = 8000 if nxt in ("voice-thinker", "voice-talker") else 8091
            assert cfg["output"]["service"] == nxt
            assert cfg["output"]["address"] == f"http://{nxt}.{ns}.svc.cluster.local:{port}"
        else:
            assert cfg["output"] is None
        pod = pod_spec(dep)
        assert {"name": "stage-config", "configMap": {"name": f"{name}-stage"}} in pod["volumes"]
        env = {e["name"]: e.get("value") for e in pod["containers"][0]["env"]}
        assert env["INFRA_STAGE_CONFIG"] == "/etc/infra/stage/stage.yaml"


def test_vllm_omni_stage_serves_the_repository_of_its_model_and_says_what_is_missing():
    rendered = render_tree(plan_of("omni-speech"))
    dep = objs(rendered.files)["deployment-voice-code2wav-a0.yaml"]
    c = pod_spec(dep)["containers"][0]
    assert c["image"] == "vllm/vllm-omni:v0.18.0"
    assert c["command"] == ["vllm", "serve"]
    assert c["args"][:2] == ["Qwen/Qwen3-Omni-30B-A3B-Instruct", "--omni"]
    assert arg(c["args"], "--port") == "8091" and "--usp" not in c["args"]
    text = rendered.files["voice-code2wav/base/deployment-voice-code2wav-a0.yaml"]
    assert text.startswith("# voice-code2wav-a0: vllm-omni is given the repository Qwen/Qwen3-Omni-30B-A3B-Instruct, "
                           "not the code2wav stage alone")
    assert "--stage-id" in text.splitlines()[0]
    assert any("voice-code2wav-a0" in n and "--omni-master-address" in n for n in rendered.notes)


def test_dit_stage_runs_sequence_parallel_on_its_devices():
    plan = plan_of("video-dit")
    i, a = next((i, a) for i, a in enumerate(plan.spec.services[0].allocations) if a.parallel.sp == 8)
    files = render_tree(plan).files
    dep = objs(files)[f"deployment-t2v-dit-a{i}.yaml"]
    c = pod_spec(dep)["containers"][0]
    assert c["args"][0] == "Wan-AI/Wan2.1-T2V-14B-Diffusers"  # the catalog's Diffusers conversion
    assert arg(c["args"], "--usp") == str(a.parallel.sp) == "8"
    assert dep["spec"]["replicas"] == a.replicas
    claim = objs(files)[f"resourceclaimtemplate-t2v-dit-a{i}.yaml"]
    devices = sum(r["exactly"]["count"] for r in claim["spec"]["spec"]["devices"]["requests"]
                  if r["exactly"]["deviceClassName"] == "gpu.nvidia.com")
    assert devices == a.devices_per_worker == 8
    cfg = stage_config(files, "t2v-dit")
    assert cfg["allocations"][i]["parallel"]["sp"] == 8 and cfg["final_output"] is True
    assert cfg["inputs"] == [] and cfg["output"] is None


def test_stage_engines_get_no_inference_pool():
    files = render_tree(plan_of("omni-speech")).files
    pools = sorted(p for p in files if "/inferencepool-" in p)
    assert pools == ["voice-talker/base/inferencepool-voice-talker.yaml",
                     "voice-thinker/base/inferencepool-voice-thinker.yaml"]


def _with_cpu_container(plan: DeploymentPlan) -> DeploymentPlan:
    data = plan.model_dump(mode="json", by_alias=True, exclude_none=True)
    stage = data["spec"]["pipelines"][0]["stages"][0]
    stage.update(image="registry.example.com/doc-preprocess:1.4.2", command=["python3", "-m", "pre"], port=8080)
    return DeploymentPlan.model_validate(data)


def test_cpu_stage_without_an_image_renders_its_config_and_says_which_field_to_set():
    rendered = render_tree(plan_of("vision-language"))
    names = sorted(p for p in rendered.files if p.startswith("vl-preprocess/base/"))
    assert names == ["vl-preprocess/base/configmap-vl-preprocess-stage.yaml", "vl-preprocess/base/kustomization.yaml"]
    assert any(n.startswith("vl-preprocess: CPU stage preprocess") and "image" in n for n in rendered.notes)
    cfg = stage_config(rendered.files, "vl-preprocess")
    assert cfg["cpu_cores"] == 1 and cfg["output"]["service"] == "vl-vision" and cfg["inputs"] == []


def test_cpu_stage_with_an_image_runs_on_cpu_with_its_cores():
    plan = _with_cpu_container(plan_of("vision-language"))
    files = render_tree(plan).files
    dep = objs(files)["deployment-vl-preprocess.yaml"]
    c = pod_spec(dep)["containers"][0]
    assert c["image"] == "registry.example.com/doc-preprocess:1.4.2" and c["command"] == ["python3", "-m", "pre"]
    assert c["resources"]["requests"] == c["resources"]["limits"] == {"cpu": "1", "memory": "2Gi"}
    # On the nodes of the CPU pool the plan put the stage on.
    [cpu] = [p for p in plan.spec.cluster.cpu_pools if p.name == plan.spec.pipelines[0].stages[0].pool]
    assert pod_spec(dep)["nodeSelector"] == cpu.node_selector and cpu.node_selector
    svc = objs(files)["service-vl-preprocess.yaml"]
    assert svc["spec"]["ports"][0]["port"] == 8080
    [link] = stage_config(files, "vl-vision")["inputs"]
    assert link["address"].endswith("vl-preprocess.default.svc.cluster.local:8080")


def test_pipelines_render_the_same_bytes_twice():
    for name in ("omni-speech", "video-dit", "vision-language"):
        assert render_tree(plan_of(name)).files == render_tree(plan_of(name)).files


def test_multi_node_dit_is_refused_at_its_plan_field():
    data = plan_of("video-dit").model_dump(mode="json", by_alias=True, exclude_none=True)
    data["spec"]["services"][0]["allocations"][0].update(nodes_per_worker=2)
    with pytest.raises(IntentError) as err:
        render_tree(DeploymentPlan.model_validate(data))
    problem = err.value.problems[0]
    assert "Ray" in problem.message and problem.location.path == "spec.services[0].allocations[0].nodes_per_worker"


def test_a_prefill_decode_stage_has_no_address_and_says_where_to_hand_off():
    data = plan_of("omni-speech").model_dump(mode="json", by_alias=True, exclude_none=True)
    talker = data["spec"]["services"][2]["allocations"][0]
    engine = talker["engines"].pop("agg")
    talker.update(mode="disagg", prefill_workers=1, decode_workers=1, engines={"prefill": engine, "decode": engine})
    rendered = render_tree(DeploymentPlan.model_validate(data))
    assert stage_config(rendered.files, "voice-thinker")["output"]["address"] is None
    assert any(n.startswith("voice-talker: stage talker") and "router" in n for n in rendered.notes)


def test_gitops_places_the_cpu_stage_directory_beside_the_services():
    from infra.gitops.layout import directories, place_rendered

    plan = _with_cpu_container(plan_of("vision-language"))
    assert directories(plan) == ["vl-vision", "vl-llm", "vl-preprocess"]
    placed = place_rendered(plan, render_tree(plan).files, "edge")
    assert "vl-preprocess/overlays/edge/kustomization.yaml" in placed
    assert "vl-preprocess/base/deployment-vl-preprocess.yaml" in placed


def test_ulysses_degree_that_does_not_divide_the_heads_is_said():
    data = plan_of("video-dit").model_dump(mode="json", by_alias=True, exclude_none=True)
    a = data["spec"]["services"][0]["allocations"][0]
    a["parallel"]["sp"], a["devices_per_worker"] = 3, 3  # Wan2.1-T2V-14B has 40 heads
    rendered = render_tree(DeploymentPlan.model_validate(data))
    assert any("40 heads do not divide by 3" in n and "advanced_uaa" in n for n in rendered.notes)
    assert not any("heads" in n for n in render_tree(plan_of("video-dit")).notes)
