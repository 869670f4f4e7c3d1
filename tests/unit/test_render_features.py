"""What rendering does per plan feature: every framework, multi-node (LWS), prefill/decode, HAMi slices, DRA,
Volcano gangs, KEDA/HPA bounds, InferencePool, quantization notes. Plans are golden plans edited in place, so no
test runs the planner."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from infra.catalog.loader import load_catalog
from infra.errors import CatalogError, IntentError
from infra.planner.types import DeploymentPlan, load_plan
from infra.render import render_tree
from infra.render.yamlout import load_yaml_text
from infra.report.plan import plan_yaml
from infra.validators import validate_tree

GOLDEN = Path(__file__).resolve().parents[1] / "golden"


def plan_of(name: str) -> DeploymentPlan:
    return load_plan(GOLDEN / name / "plan.yaml")


def edited(name: str, fn) -> DeploymentPlan:
    data = plan_of(name).model_dump(mode="json", by_alias=True)
    fn(data)
    return DeploymentPlan.model_validate(data)


def objs(files: dict[str, str]) -> dict[str, dict]:
    return {p.rsplit("/", 1)[1]: load_yaml_text(t) for p, t in files.items()}


def pod_spec(obj: dict) -> dict:
    return obj["spec"]["template"]["spec"]


def arg(args: list[str], flag: str) -> str | None:
    return args[args.index(flag) + 1] if flag in args else None


def alloc(data: dict, i: int = 0, s: int = 0) -> dict:
    return data["spec"]["services"][s]["allocations"][i]


@pytest.fixture(scope="module")
def pinned_overlay(tmp_path_factory) -> Path:
    """Catalog overlay giving pinned images to the frameworks whose packaged entry has none for a device."""
    root = tmp_path_factory.mktemp("catalog")
    (root / "frameworks").mkdir()
    (root / "frameworks" / "vllm-mlu.yaml").write_text(
        "name: vllm-mlu\nimage: registry.example.com/cambricon_vllm_container:v0.11.2\n")
    (root / "frameworks" / "vllm-fl.yaml").write_text(
        "name: vllm-fl\nimages: {iluvatar: registry.example.com/vllm-plugin-fl:corex4.5-vllm0.20.2}\n")
    (root / "frameworks" / "vllm-kunlun.yaml").write_text(
        "name: vllm-kunlun\nimages: {P800: registry.example.com/vllm-kunlun:v0.11.1}\n")
    return root


def _device_for(fw_name: str) -> tuple[str, str]:
    cat = load_catalog()
    fw = cat.framework(fw_name)
    for vendor in fw.vendors:
        for dev in sorted(cat.devices.values(), key=lambda d: d.name):
            if dev.vendor == vendor and (not fw.devices or dev.name in fw.devices):
                return dev.name, vendor
    raise AssertionError(fw_name)


@pytest.mark.parametrize("framework", sorted(n for n, f in load_catalog().frameworks.items() if "llm" in f.kinds))
def test_every_framework_renders(framework, pinned_overlay):
    """Every engine of LLMs renders (vLLM-Omni, the engine of non-LLM pipeline stages: test_render_stages.py)."""
    device, vendor = _device_for(framework)
    cli = load_catalog().framework(framework).cli
    assert cli is not None and cli.source.startswith("http")

    def change(d):
        pool = d["spec"]["cluster"]["pools"][2]  # rtx4090, the pool the allocation uses
        pool.update(device=device, vendor=vendor, resources={"count": f"{vendor}.example.com/device"})
        alloc(d).update(framework=framework, device=device, precision="bf16")
        alloc(d)["engines"]["agg"].update(quantization=None, kv_cache_dtype="auto")

    plan = edited("small-model-shared", change)
    # only the frameworks without a pinned image for these devices (no official registry publishes one: the
    # devices are marked unplannable) need the overlay (a fresh catalog load)
    overlay = (pinned_overlay,) if framework in ("vllm-mlu", "vllm-fl", "vllm-kunlun") else ()
    files = render_tree(plan, catalog_dirs=overlay).files
    dep = objs(files)["deployment-summarise-a0.yaml"]
    c = pod_spec(dep)["containers"][0]
    assert c["command"][-1] in cli.command or c["command"][:2] == ["/bin/bash", "-c"]
    assert c["resources"]["limits"][f"{vendor}.example.com/device"] == 1
    tag = c["image"].rsplit(":", 1)[1]
    assert tag and "latest" not in tag
    flags = [a for a in c["args"] if a.startswith("--")]
    assert len(flags) == len(set(flags)), flags
    if cli.config_file is None:
        assert arg(c["args"], cli.flags["served_model_name"]) == "summarise"
        assert arg(c["args"], cli.flags["max_model_len"]) == "8000"
        assert arg(c["args"], cli.flags["tensor_parallel"]) == "1"
    else:
        cm = objs(files)["configmap-summarise-a0.yaml"]
        assert cm["data"]


def test_mindie_renders_its_config_file_merged_into_the_images_own(pinned_overlay):
    def change(d):
        pool = d["spec"]["cluster"]["pools"][2]
        pool.update(device="Ascend-910B3", vendor="huawei", resources={"count": "huawei.com/Ascend910B3"})
        a = alloc(d)
        a.update(framework="mindie", device="Ascend-910B3", precision="bf16", devices_per_worker=2)
        a["parallel"]["tp"] = 2
        a["engines"]["agg"].update(quantization=None, kv_cache_dtype="auto")

    files = render_tree(edited("small-model-shared", change)).files
    o = objs(files)
    config = json.loads(o["configmap-summarise-a0.yaml"]["data"]["config.json"])
    model = config["BackendConfig"]["ModelDeployConfig"]["ModelConfig"][0]
    assert model["worldSize"] == 2 and model["modelName"] == "summarise"
    assert model["modelWeightPath"] == "/models/Qwen/Qwen3-8B"
    assert config["BackendConfig"]["npuDeviceIds"] == [[0, 1]]
    assert config["ServerConfig"]["allowAllZeroIpListening"] is True
    c = pod_spec(o["deployment-summarise-a0.yaml"])["containers"][0]
    assert c["command"] == ["/bin/bash", "-c"] and "mindieservice_daemon" in c["args"][0]
    assert any(e["name"] == "MERGE" for e in c["env"])
    assert "tcpSocket" in c["startupProbe"] and c["ports"][0]["containerPort"] == 1025


def test_amd_gets_the_rocm_image():
    def change(d):
        d["spec"]["cluster"]["pools"][2].update(device="MI300X", vendor="amd", resources={"count": "amd.com/gpu"})
        alloc(d).update(device="MI300X")

    c = pod_spec(objs(render_tree(edited("small-model-shared", change)).files)["deployment-summarise-a0.yaml"])
    assert c["containers"][0]["image"] == "vllm/vllm-openai-rocm:v0.18.0"
    assert c["containers"][0]["resources"]["limits"]["amd.com/gpu"] == 1


def test_framework_without_a_pinned_image_is_refused_with_the_fix():
    def change(d):
        d["spec"]["cluster"]["pools"][2].update(device="MLU370-X8", vendor="cambricon",
                                                 resources={"count": "cambricon.com/vmlu"})
        alloc(d).update(framework="vllm-mlu", device="MLU370-X8")

    with pytest.raises(CatalogError, match="no image pinned") as err:
        render_tree(edited("small-model-shared", change))
    assert "--catalog overlay" in err.value.problems[0].fix
    # The catalog says why: the device is marked unplannable, with where its vendor ships the engine instead.
    assert "cambricon" in err.value.problems[0].message.lower() and "https://" in err.value.problems[0].message


def _multi_node(d, i=0, nodes=2):
    a = alloc(d, i)
    a["nodes_per_worker"] = nodes
    a["devices_per_worker"] = a["devices_per_worker"] * nodes
    a["parallel"]["pp"] = nodes


def _scaling(example: str) -> int:
    """The first allocation of the example's first service with more than one replica (room to autoscale)."""
    return next(i for i, a in enumerate(plan_of(example).spec.services[0].allocations) if a.replicas > 1)


def test_multi_node_sglang_is_a_leaderworkerset_with_the_engines_own_flags():
    i = _scaling("rag-long-context")

    def change(d):
        _multi_node(d, i)
        alloc(d, i)["framework"] = "sglang"

    files = render_tree(edited("rag-long-context", change)).files
    lws = objs(files)[f"leaderworkerset-rag-a{i}.yaml"]
    assert lws["apiVersion"] == "leaderworkerset.x-k8s.io/v1"
    t = lws["spec"]["leaderWorkerTemplate"]
    assert t["size"] == 2
    assert lws["spec"]["replicas"] == plan_of("rag-long-context").spec.services[0].allocations[i].replicas
    leader = t["leaderTemplate"]["spec"]["containers"][0]
    worker = t["workerTemplate"]["spec"]["containers"][0]
    assert arg(leader["args"], "--nnodes") == "$(LWS_GROUP_SIZE)" and arg(leader["args"], "--node-rank") == "0"
    assert arg(worker["args"], "--node-rank") == "$(LWS_WORKER_INDEX)"
    assert arg(worker["args"], "--dist-init-addr") == "$(LWS_LEADER_ADDRESS):20000"
    tp = plan_of("rag-long-context").spec.services[0].allocations[i].parallel.tp
    assert arg(leader["args"], "--pp-size") == "2" and arg(leader["args"], "--tp-size") == str(tp)
    assert "readinessProbe" in leader and "readinessProbe" not in worker and "ports" not in worker
    assert t["leaderTemplate"]["metadata"]["labels"]["infra.dev/serves"] == "true"
    assert t["workerTemplate"]["metadata"]["labels"]["infra.dev/serves"] == "false"
    assert f"horizontalpodautoscaler-rag-a{i}.yaml" in objs(files)
    assert objs(files)[f"horizontalpodautoscaler-rag-a{i}.yaml"]["spec"]["scaleTargetRef"]["kind"] == "LeaderWorkerSet"


def test_multi_node_vllm_workers_run_headless():
    def change(d):
        d["spec"]["cluster"]["crds"]["leaderworkerset"] = "leaderworkerset.x-k8s.io/v1"
        _multi_node(d)

    t = objs(render_tree(edited("small-model-shared", change)).files)["leaderworkerset-summarise-a0.yaml"]
    worker = t["spec"]["leaderWorkerTemplate"]["workerTemplate"]["spec"]["containers"][0]["args"]
    leader = t["spec"]["leaderWorkerTemplate"]["leaderTemplate"]["spec"]["containers"][0]["args"]
    assert "--headless" in worker and "--headless" not in leader
    assert arg(worker, "--master-addr") == "$(LWS_LEADER_ADDRESS)"


def test_multi_node_without_lws_is_refused():
    with pytest.raises(IntentError, match="LeaderWorkerSet"):
        render_tree(edited("small-model-shared", _multi_node))


def _disagg(d, framework="vllm"):
    a = alloc(d)
    a.update(mode="disagg", prefill_workers=1, decode_workers=2, framework=framework)
    agg = a["engines"].pop("agg")
    a["engines"] = {"prefill": agg, "decode": agg}


def test_vllm_prefill_decode_with_nixl_and_switch_affinity():
    files = render_tree(edited("small-model-shared", _disagg))
    o = objs(files.files)
    prefill, decode = o["deployment-summarise-a0-prefill.yaml"], o["deployment-summarise-a0-decode.yaml"]
    assert prefill["spec"]["replicas"] == 2 and decode["spec"]["replicas"] == 4
    for dep, role in ((prefill, "prefill"), (decode, "decode")):
        c = pod_spec(dep)["containers"][0]
        connector = json.loads(arg(c["args"], "--kv-transfer-config"))
        assert connector == {"kv_connector": "NixlConnector", "kv_role": "kv_both"}
        assert any(e["name"] == "VLLM_NIXL_SIDE_CHANNEL_HOST" for e in c["env"])
        term = pod_spec(dep)["affinity"]["podAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][0]
        assert term["topologyKey"] == "infra.dev/switch"
        assert dep["spec"]["template"]["metadata"]["labels"]["infra.dev/role"] == role
    assert o["service-summarise-a0-prefill.yaml"]["spec"]["clusterIP"] == "None"
    assert "service-summarise.yaml" not in o  # no aggregated endpoint to front
    assert any("P/D-aware router" in n for n in files.notes)


def test_sglang_prefill_decode_flags():
    o = objs(render_tree(edited("small-model-shared", lambda d: _disagg(d, "sglang"))).files)
    for role in ("prefill", "decode"):
        args = pod_spec(o[f"deployment-summarise-a0-{role}.yaml"])["containers"][0]["args"]
        assert arg(args, "--disaggregation-mode") == role
        assert arg(args, "--disaggregation-transfer-backend") == "nixl"


def test_engines_export_the_series_infra_reads():
    # SGLang exports its Prometheus series only with --enable-metrics: without it the objective alerts, `infra
    # observe` and autoscaling on sglang:num_running_reqs would read series that never appear.
    o = objs(render_tree(edited("small-model-shared", lambda d: _disagg(d, "sglang"))).files)
    for role in ("prefill", "decode"):
        assert "--enable-metrics" in pod_spec(o[f"deployment-summarise-a0-{role}.yaml"])["containers"][0]["args"]
    # vLLM exports them unasked, and has no such flag
    args = pod_spec(objs(render_tree(plan_of("small-model-shared")).files)["deployment-summarise-a0.yaml"])[
        "containers"][0]["args"]
    assert not any("metrics" in a for a in args)


def test_prometheus_scrapes_the_engines_the_objective_rules_watch():
    # A PodMonitor has Prometheus scrape every engine whose series infra reads, on the port the pods name; an
    # engine whose /metrics is not Prometheus text (TensorRT-LLM's) is left out. The rules and the monitor carry
    # the labels the profile says the operator's selectors look for.
    def change(d):
        d["spec"]["cluster"]["crds"]["prometheus_operator"] = "monitoring.coreos.com/v1"
        d["spec"]["cluster"]["monitoring_labels"] = {"release": "kube-prometheus-stack"}
        alloc(d, 1)["framework"] = "trtllm"

    o = objs(render_tree(edited("chat-mixed-fleet", change)).files)
    monitor = o["podmonitor-chat-engines.yaml"]
    assert monitor["spec"]["selector"] == {
        "matchLabels": {"infra.dev/service": "chat"},
        "matchExpressions": [{"key": "infra.dev/allocation", "operator": "In", "values": ["a0"]}]}
    assert monitor["spec"]["podMetricsEndpoints"] == [{"port": "http", "path": "/metrics"}]
    for name in ("deployment-chat-a0.yaml",):
        assert {"name": "http", "containerPort": 8000, "protocol": "TCP"} in pod_spec(o[name])["containers"][0]["ports"]
    for name in ("podmonitor-chat-engines.yaml", "prometheusrule-chat-objectives.yaml"):
        assert o[name]["metadata"]["labels"]["release"] == "kube-prometheus-stack"
    assert "release" not in o["deployment-chat-a0.yaml"]["metadata"]["labels"]
    # without the operator, neither
    plain = objs(render_tree(plan_of("chat-mixed-fleet")).files)
    assert not [n for n in plain if n.startswith(("podmonitor", "prometheusrule"))]


def test_disaggregated_set_when_the_profile_lists_it():
    o = objs(render_tree(plan_of("deepseek-moe")).files)
    i, a = next((i, a) for i, a in enumerate(plan_of("deepseek-moe").spec.services[0].allocations)
                if a.pool == "h200")
    ds = o[f"disaggregatedset-deepseek-a{i}.yaml"]
    roles = {r["name"]: r["spec"] for r in ds["spec"]["roles"]}
    assert set(roles) == {"prefill", "decode"}
    assert roles["prefill"]["replicas"] == a.replicas * a.prefill_workers
    assert roles["decode"]["replicas"] == a.replicas * a.decode_workers
    # pool h200 sits under one switch (spine-1): no extra affinity, the pool placement keeps them together
    pod = roles["decode"]["leaderWorkerTemplate"]["workerTemplate"]["spec"]
    assert "affinity" not in pod
    cm = load_yaml_text(o["configmap-deepseek-a1-decode.yaml"]["data"]["extra-llm-api-options.yaml"])
    assert cm["cache_transceiver_config"] == {"backend": "NIXL"} and cm["kv_cache_config"]["dtype"] == "fp8"


def test_hami_slice_requests_keep_counts_integral():
    plan = edited("small-model-shared", lambda d: alloc(d).update(share=0.5))
    pool = plan.spec.cluster.pools[2]
    c = pod_spec(objs(render_tree(plan).files)["deployment-summarise-a0.yaml"])["containers"][0]
    limits = c["resources"]["limits"]
    assert limits["nvidia.com/gpu"] == 1
    assert limits["nvidia.com/gpumem"] == round(0.5 * pool.device_memory_gb * 1e9 / 2**20)
    assert limits["nvidia.com/gpucores"] == 50
    assert c["resources"]["requests"] == limits


def test_hami_shared_count_resource_for_metax():
    def change(d):
        d["spec"]["cluster"]["pools"][3]["multi_node"] = True
        a = alloc(d)
        a.update(pool="metax", device="C500", framework="vllm-metax", share=0.5, precision="bf16")
        a["engines"]["agg"].update(quantization=None, kv_cache_dtype="auto")

    plan = edited("small-model-shared", change)
    limits = pod_spec(objs(render_tree(plan).files)["deployment-summarise-a0.yaml"])["containers"][0][
        "resources"]["limits"]
    assert limits["metax-tech.com/sgpu"] == 1 and "metax-tech.com/gpu" not in limits
    assert limits["metax-tech.com/vmemory"] == round(0.5 * plan.spec.cluster.pools[3].device_memory_gb * 1e9 / 2**30)


def test_dra_claim_pairs_gpus_with_nics_on_one_pcie_root():
    o = objs(render_tree(plan_of("rag-long-context")).files)
    claim = o["resourceclaimtemplate-rag-a0.yaml"]
    assert claim["apiVersion"] == "resource.k8s.io/v1"
    devices = claim["spec"]["spec"]["devices"]
    per_worker = plan_of("rag-long-context").spec.services[0].allocations[0].devices_per_worker
    assert sum(r["exactly"]["count"] for r in devices["requests"] if r["name"].startswith("gpu")) == per_worker
    assert {tuple(c["requests"]) for c in devices["constraints"]} == {("gpu-0", "nic-0"), ("gpu-1", "nic-1")}
    assert all(c["matchAttribute"] == "resource.kubernetes.io/pcieRoot" for c in devices["constraints"])
    spec = pod_spec(o["deployment-rag-a0.yaml"])
    c = spec["containers"][0]
    assert "nvidia.com/gpu" not in c["resources"]["limits"]  # never both DRA and the device plugin
    assert c["resources"]["claims"] == [{"name": "devices"}]
    assert spec["resourceClaims"] == [{"name": "devices", "resourceClaimTemplateName": "rag-a0"}]
    assert c["securityContext"]["capabilities"] == {"add": ["IPC_LOCK"]}


def test_volcano_gangs_each_leaderworkerset_group_through_the_lws_controller():
    """Issue 44: one static PodGroup (minMember 2) was shared by every group of a LeaderWorkerSet. The LWS
    controller, run with Volcano as its gang-scheduling provider, makes one PodGroup per group (minMember = the
    group's size) and names it in each pod; a static one would gang all groups as one. So none is rendered for a
    LeaderWorkerSet, its pods name none, they are scheduled by Volcano, and a note says what the controller needs."""
    def change(d):
        d["spec"]["cluster"]["scheduler"] = "volcano"
        _multi_node(d, 1)
        alloc(d, 1)["replicas"] = 2

    files = render_tree(edited("chat-mixed-fleet", change)).files
    o = objs(files)
    assert not [n for n in o if n.startswith("podgroup-")]
    lws = o["leaderworkerset-chat-a1.yaml"]
    assert lws["spec"]["replicas"] == 2
    for t in ("leaderTemplate", "workerTemplate"):
        tmpl = lws["spec"]["leaderWorkerTemplate"][t]
        assert "scheduling.k8s.io/group-name" not in (tmpl["metadata"].get("annotations") or {})
        assert tmpl["spec"]["schedulerName"] == "volcano"
    text = next(t for p, t in files.items() if p.endswith("leaderworkerset-chat-a1.yaml"))
    assert "gangSchedulingManagement.schedulerProvider: volcano" in text
    assert "podgroup-chat-a0.yaml" not in o  # single-pod replicas need no gang


def test_volcano_gangs_prefill_decode_deployments_with_one_podgroup_of_all_their_pods():
    """Deployments' pods share one template, so the PodGroup they name gangs them all: minMember counts every pod
    of the allocation (2 units x (1 prefill + 2 decode) = 6), not one unit's 3, which would leave it short."""
    def change(d):
        _disagg(d)
        d["spec"]["cluster"]["scheduler"] = "volcano"
        d["spec"]["cluster"]["crds"] = {"volcano": "scheduling.volcano.sh/v1beta1"}

    o = objs(render_tree(edited("small-model-shared", change)).files)
    pg = o["podgroup-summarise-a0.yaml"]
    assert alloc(plan_of("small-model-shared").model_dump(mode="json", by_alias=True))["replicas"] == 2
    assert pg["spec"]["minMember"] == 6
    pods = 0
    for role in ("prefill", "decode"):
        dep = o[f"deployment-summarise-a0-{role}.yaml"]
        assert dep["spec"]["template"]["metadata"]["annotations"]["scheduling.k8s.io/group-name"] == "summarise-a0"
        pods += dep["spec"]["replicas"]
    assert pods == pg["spec"]["minMember"]


def test_autoscaling_bounds_from_baseline_and_min_replicas():
    plan = plan_of("chat-mixed-fleet")
    o = objs(render_tree(plan).files)
    svc = plan.spec.services[0]
    # Every allocation with room to scale (more than one replica) gets a ScaledObject: the profile lists keda.
    scaling = [i for i, a in enumerate(svc.allocations) if a.replicas > 1]
    assert scaling and [n for n in o if n.startswith("scaledobject-")] == [f"scaledobject-chat-a{i}.yaml"
                                                                            for i in scaling]
    for i in scaling:
        so = o[f"scaledobject-chat-a{i}.yaml"]
        a = svc.allocations[i]
        total = sum(x.replicas * x.load_per_replica for x in svc.allocations)
        baseline_share = 8.0 * a.replicas * a.load_per_replica / total
        floor = max(math.ceil(baseline_share / a.capacity_per_replica),
                    math.ceil(svc.availability["min_replicas"] * a.replicas /
                              sum(x.replicas for x in svc.allocations)))
        assert so["spec"]["minReplicaCount"] == min(a.replicas, max(1, floor))
        assert so["spec"]["maxReplicaCount"] == a.replicas
        assert so["spec"]["triggers"][0]["type"] == "prometheus"
        assert "vllm:num_requests_running" in so["spec"]["triggers"][0]["metadata"]["query"]
    rag, i = plan_of("rag-long-context"), _scaling("rag-long-context")
    hpa = objs(render_tree(rag).files)[f"horizontalpodautoscaler-rag-a{i}.yaml"]
    assert hpa["spec"]["minReplicas"] >= 1
    assert hpa["spec"]["maxReplicas"] == rag.spec.services[0].allocations[i].replicas > 1


def test_inference_pool_when_the_profile_lists_it():
    o = objs(render_tree(plan_of("rag-long-context")).files)
    pool = o["inferencepool-rag.yaml"]
    assert pool["apiVersion"] == "inference.networking.k8s.io/v1"
    assert pool["spec"]["selector"]["matchLabels"] == {"infra.dev/service": "rag", "infra.dev/serves": "true"}
    assert pool["spec"]["targetPorts"] == [{"number": 8000}]
    assert "inferencepool-summarise.yaml" not in objs(render_tree(plan_of("small-model-shared")).files)


def test_precision_needing_a_checkpoint_is_said_at_the_top_and_in_notes():
    def change(d):
        alloc(d).update(precision="int4")
        alloc(d)["engines"]["agg"]["quantization"] = "int4"

    r = render_tree(edited("small-model-shared", change))
    text = r.files["summarise/base/deployment-summarise-a0.yaml"]
    assert text.startswith("# ") and "pre-quantized checkpoint" in text.splitlines()[0]
    assert any("pre-quantized checkpoint" in n for n in r.notes)
    args = pod_spec(load_yaml_text(text))["containers"][0]["args"]
    assert "--quantization" not in args


def test_online_fp8_is_passed_to_vllm():
    r = render_tree(plan_of("chat-mixed-fleet"))
    args = pod_spec(objs(r.files)["deployment-chat-a1.yaml"])["containers"][0]["args"]
    assert arg(args, "--quantization") == "fp8" and arg(args, "--kv-cache-dtype") == "fp8"


def test_model_cache_pvc_when_the_profile_names_one():
    o = objs(render_tree(plan_of("chat-mixed-fleet")).files)
    volumes = {v["name"]: v for v in pod_spec(o["deployment-chat-a0.yaml"])["volumes"]}
    assert volumes["model-cache"]["persistentVolumeClaim"] == {"claimName": "model-weights"}
    assert volumes["shm"]["emptyDir"]["medium"] == "Memory"
    spec = pod_spec(o["deployment-chat-a0.yaml"])
    assert spec["nodeSelector"]["node.kubernetes.io/instance-type"] == "hgx-h100"
    # Two pools share the instance-type label; the zone label keeps each allocation in its own pool's zone.
    zones = {pod_spec(o[f"deployment-chat-a{i}.yaml"])["nodeSelector"]["topology.kubernetes.io/zone"]
             for i in range(2)}
    assert zones == {"cn-sh-a", "cn-sh-b"}
    named = pod_spec(objs(render_tree(plan_of("small-model-shared")).files)["deployment-summarise-a0.yaml"])
    assert named["affinity"]["nodeAffinity"]  # the pool lists its nodes by name


def test_attention_data_parallel_and_expert_parallel_flags():
    def change(d, framework):
        a = alloc(d)
        a["framework"] = framework
        a["parallel"].update(tp=1, attention_dp=2, ep=2, moe_tp=1)
        a["devices_per_worker"] = 2

    vllm = pod_spec(objs(render_tree(edited("small-model-shared", lambda d: change(d, "vllm"))).files)[
        "deployment-summarise-a0.yaml"])["containers"][0]["args"]
    assert arg(vllm, "--data-parallel-size") == "2" and "--enable-expert-parallel" in vllm
    sgl = pod_spec(objs(render_tree(edited("small-model-shared", lambda d: change(d, "sglang"))).files)[
        "deployment-summarise-a0.yaml"])["containers"][0]["args"]
    assert arg(sgl, "--dp-size") == "2" and "--enable-dp-attention" in sgl and arg(sgl, "--ep-size") == "2"


def test_engines_that_divide_the_batch_and_step_budget_among_attention_groups_get_their_total(tmp_path):
    def change(d, framework):
        a = alloc(d)
        a["framework"] = framework
        a["parallel"].update(tp=1, attention_dp=4, ep=4, moe_tp=1)
        a["devices_per_worker"] = 4

    engine = alloc(plan_of("small-model-shared").model_dump(mode="json", by_alias=True))["engines"]["agg"]
    seqs, tokens = engine["max_num_seqs"], engine["max_num_batched_tokens"]
    for framework, times in (("vllm", 1), ("sglang", 4)):
        plan = edited("small-model-shared", lambda d, fw=framework: change(d, fw))
        files = render_tree(plan).files
        args = pod_spec(objs(files)["deployment-summarise-a0.yaml"])["containers"][0]["args"]
        # vLLM's data-parallel engine cores each take the per-group values; SGLang divides the flags by --dp-size.
        flags = ("--max-num-seqs", "--max-num-batched-tokens") if framework == "vllm" else (
            "--max-running-requests", "--chunked-prefill-size")
        assert (int(arg(args, flags[0])), int(arg(args, flags[1]))) == (seqs * times, tokens * times)
        root = tmp_path / framework
        for name, text in files.items():
            (root / "manifests" / name).parent.mkdir(parents=True, exist_ok=True)
            (root / "manifests" / name).write_text(text)
        (root / "plan.yaml").write_text(plan_yaml(plan))
        report = validate_tree(root / "manifests", plan=root / "plan.yaml")
        assert [f for f in report.findings if f.rule == "PLN004"] == [], [str(f) for f in report.findings]


def test_the_pod_ip_a_connector_binds_to_is_catalog_data(tmp_path):
    (tmp_path / "frameworks").mkdir()
    (tmp_path / "frameworks" / "vllm.yaml").write_text("name: vllm\ncli: {pod_ip_env: [SIDE_HOST, OTHER_HOST]}\n")
    plan = edited("small-model-shared", _disagg)
    for dirs, want in (((), ["VLLM_NIXL_SIDE_CHANNEL_HOST"]), ((tmp_path,), ["SIDE_HOST", "OTHER_HOST"])):
        o = objs(render_tree(plan, catalog_dirs=dirs).files)
        for name in ("deployment-summarise-a0-prefill.yaml", "deployment-summarise-a0-decode.yaml"):
            env = pod_spec(o[name])["containers"][0]["env"]
            assert [e["name"] for e in env if e.get("valueFrom", {}).get("fieldRef", {}).get(
                "fieldPath") == "status.podIP"] == want
    agg = objs(render_tree(plan_of("small-model-shared")).files)
    for obj in agg.values():
        if obj.get("kind") in ("Deployment", "LeaderWorkerSet"):
            env = pod_spec(obj)["containers"][0].get("env", [])
            assert not any(e["name"] == "VLLM_NIXL_SIDE_CHANNEL_HOST" for e in env)  # no connector, no side channel
