"""CPU devices (vendor `cpu`, one x86 socket each) served by vLLM's CPU backend: catalog entries with sources, a
plan on a CPU pool rendering cores, memory and the engine's CPU environment without any accelerator resource, the
validator accepting it, and plan consistency (PLN009) catching a CPU pod that asks for a GPU or loses its
environment. Plans are the golden plan of examples/cpu-small-model.yaml, edited in place: no test here plans."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from pydantic import ValidationError as PydanticValidationError

from infra import api
from infra.catalog.loader import load_catalog
from infra.catalog.schema import DeviceSpec
from infra.errors import IntentError
from infra.perf.estimate import ShapeError, build_workers
from infra.perf.shape import Deployment, Parallel, Role
from infra.planner.types import DeploymentPlan, load_plan
from infra.render import render_plan, render_tree
from infra.render.settings import load_settings
from infra.render.yamlout import load_yaml_text
from infra.validators import validate_tree

from ..conftest import ROOT

GOLDEN = ROOT / "tests" / "golden" / "cpu-small-model" / "plan.yaml"
DEPLOYMENT = "router/base/deployment-router-a0.yaml"
CPU_DEVICES = ["Xeon-8480+", "EPYC-9654"]


def edited(fn) -> DeploymentPlan:
    data = load_plan(GOLDEN).model_dump(mode="json", by_alias=True)
    fn(data)
    return DeploymentPlan.model_validate(data)


def engine(files: dict[str, str]) -> dict:
    return load_yaml_text(files[DEPLOYMENT])["spec"]["template"]["spec"]["containers"][0]


def env_of(container: dict) -> dict[str, str]:
    return {e["name"]: e.get("value") for e in container["env"]}


def write(files: dict[str, str], root: Path) -> Path:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


# --- catalog ------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", CPU_DEVICES)
def test_cpu_devices_load_with_sources(name):
    d = load_catalog().device(name)
    assert d.vendor == "cpu" and d.cpu is not None
    figures = [d.memory_gb, d.memory_bandwidth_tbps, d.devices_per_node, d.reference_price_per_hour,
               d.interconnect.bandwidth_gbs, d.interconnect.domain_size, *d.tflops.values(), d.cpu.cores,
               d.cpu.threads]
    for f in figures:
        assert f.source.startswith("https://") and f.confidence in ("high", "medium", "low")
    # one socket is one device: its cores and memory channels, two per dual-socket server
    assert d.devices_per_node.value == 2 and d.cpu.threads.value == 2 * d.cpu.cores.value
    assert {"avx512f", "avx512_bf16"} <= set(d.cpu.isa)
    assert 0.2 < d.memory_bandwidth_tbps.value < 0.5
    # vLLM's CPU backend: bf16/fp32/int8/int4, no fp8 or fp4, no P/D, no fp8 KV, TP over the node's sockets only
    assert d.precisions_for("vllm") == ["fp32", "bf16", "int8", "int4"]
    for feature in ("pd_disaggregation", "fp8_kv_cache", "speculative_decoding"):
        assert d.feature_quirk("vllm", feature) is not None
    assert d.tp_limit("vllm").max_tp == 2


def test_cpu_figures_follow_from_cores_clocks_and_channels():
    cat = load_catalog()
    xeon, epyc = cat.device("Xeon-8480+"), cat.device("EPYC-9654")
    assert xeon.memory_bandwidth_tbps.value == pytest.approx(8 * 4800e6 * 8 / 1e12)
    assert epyc.memory_bandwidth_tbps.value == pytest.approx(12 * 4800e6 * 8 / 1e12)
    assert xeon.tflops["bf16"].value == pytest.approx(56 * 1024 * 2.0e9 / 1e12, rel=1e-3)  # AMX at base clock
    assert epyc.tflops["bf16"].value == pytest.approx(96 * 64 * 2.4e9 / 1e12, rel=1e-3)  # AVX-512 BF16
    assert cat.device("Intel Xeon Platinum 8480+").name == "Xeon-8480+"
    assert cat.device("AMD EPYC 9654").name == "EPYC-9654"


def test_vllm_serves_cpu_devices_from_its_pinned_cpu_image():
    cat = load_catalog()
    fw = cat.framework("vllm")
    assert "cpu" in fw.vendors and fw.vendors[0] == "nvidia"
    image, pinned = fw.image_for("Xeon-8480+", "cpu")
    assert image == "vllm/vllm-openai-cpu:v0.32.0-x86_64" and pinned
    env = fw.env_for("EPYC-9654", "cpu")
    assert env is not None and env.kv_cache_gib == "VLLM_CPU_KVCACHE_SPACE"
    assert env.fixed["VLLM_CPU_OMP_THREADS_BIND"] == "auto" and env.source.startswith("https://")
    assert fw.env_for("H100-SXM", "nvidia") is None
    # no device plugin: the cpu convention names no count resource
    assert cat.device_resources("cpu") == {"count": ""}


def test_cpu_section_goes_with_the_cpu_vendor():
    base = load_catalog().device("Xeon-8480+").model_dump(mode="json")
    with pytest.raises(PydanticValidationError, match="needs a `cpu` section"):
        DeviceSpec.model_validate({**base, "cpu": None})
    with pytest.raises(PydanticValidationError, match="takes no a `cpu` section|takes no"):
        DeviceSpec.model_validate({**base, "vendor": "nvidia"})


# --- rendering ----------------------------------------------------------------------------------------------------


def test_cpu_plan_renders_cores_memory_and_the_cpu_environment():
    plan = load_plan(GOLDEN)
    pool = next(p for p in plan.spec.cluster.pools if p.name == plan.spec.services[0].allocations[0].pool)
    assert pool.vendor == "cpu" and pool.resources.count == ""
    files = render_plan(plan)
    c = engine(files)
    assert c["image"] == "vllm/vllm-openai-cpu:v0.32.0-x86_64"
    limits, requests = c["resources"]["limits"], c["resources"]["requests"]
    assert set(limits) == {"cpu", "memory"} and limits == requests  # Guaranteed QoS, no extended resource
    for text in files.values():
        assert "nvidia.com" not in text and "hami" not in text.lower() and "resourceClaims" not in text
    settings = load_settings(None)
    dev = load_catalog().device(pool.device)
    assert limits["cpu"] == str(int(dev.cpu.threads.value) - settings.cpu_device_reserved_cpus)
    gib = pool.device_memory_gb * 1e9 / 2**30
    assert limits["memory"] == f"{math.floor(gib - settings.cpu_device_reserved_memory_gi)}Gi"
    env = env_of(c)
    assert env["VLLM_CPU_OMP_THREADS_BIND"] == "auto" and env["VLLM_CPU_NUM_OF_RESERVED_CPU"] == "1"
    # KV cache per rank from the plan's memory: device memory x memory_utilization less weights and runtime
    a = plan.spec.services[0].allocations[0]
    weights = load_catalog().model("Qwen3-0.6B").params_total_b * 1e9 * 2 / 2**30
    util = a.engines["agg"].memory_utilization
    assert int(env["VLLM_CPU_KVCACHE_SPACE"]) == math.floor(gib * util - weights - settings.cpu_engine_runtime_gi)
    assert render_plan(plan) == files  # same plan, same bytes


def test_kv_cache_follows_the_plans_memory_and_ranks():
    def two_sockets(d):
        pool = d["spec"]["cluster"]["pools"][0]
        pool["device_memory_gb"] = 64.0
        a = d["spec"]["services"][0]["allocations"][0]
        a.update(devices_per_worker=2, devices_per_replica=2.0)
        a["parallel"]["tp"] = 2

    c = engine(render_plan(edited(two_sockets)))
    gib = 64e9 / 2**30
    assert c["resources"]["limits"]["cpu"] == str(2 * (112 - 2))
    assert c["resources"]["limits"]["memory"] == f"{math.floor((gib - 8) * 2)}Gi"
    weights = load_catalog().model("Qwen3-0.6B").params_total_b * 1e9 * 2 / 2**30 / 2  # a shard per rank
    # each rank gets its socket's share of the plan's memory, within what the pod's memory leaves per rank
    per_rank = min(gib * 0.9, math.floor((gib - 8) * 2) / 2)
    assert per_rank < gib * 0.9  # here the 8 GiB each socket leaves the system binds
    assert int(env_of(c)["VLLM_CPU_KVCACHE_SPACE"]) == math.floor(per_rank - weights - 2)
    assert c["args"][c["args"].index("--tensor-parallel-size") + 1] == "2"


def test_cpu_pods_take_no_dra_claim_and_say_how_they_are_placed():
    def with_dra(d):
        d["spec"]["cluster"]["crds"]["dra"] = "resource.k8s.io/v1"

    rendered = render_tree(edited(with_dra))
    assert not any("resourceclaimtemplate" in p for p in rendered.files)
    assert "resourceClaims" not in rendered.files[DEPLOYMENT]
    assert any("static CPU manager policy" in n for n in rendered.notes)
    assert any("VLLM_CPU_KVCACHE_SPACE=" in n for n in rendered.notes)


def test_prefill_decode_on_cpu_devices_is_refused():
    def disagg(d):
        a = d["spec"]["services"][0]["allocations"][0]
        engines = a["engines"]["agg"]
        a.update(mode="disagg", prefill_workers=1, decode_workers=1, devices_per_replica=2.0)
        a["engines"] = {"prefill": engines, "decode": engines}

    with pytest.raises(IntentError, match="cpu-features") as exc:
        render_plan(edited(disagg))
    assert "disaggregation: off" in str(exc.value)


def test_the_planner_considers_no_disaggregated_shape_on_cpu_devices():
    considered = api.plan(ROOT / "examples" / "cpu-small-model.yaml").considered
    assert considered and not any(c.parallel.startswith("P ") for c in considered)
    dep = Deployment("Qwen3-0.6B", "EPYC-9654", "vllm", "bf16", "disagg", prefill=Role(Parallel()),
                     decode=Role(Parallel()))
    with pytest.raises(ShapeError, match="does not disaggregate prefill and decode on EPYC-9654"):
        build_workers(dep, load_catalog())


# --- validation ---------------------------------------------------------------------------------------------------


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    return write(render_plan(load_plan(GOLDEN)), tmp_path / "manifests")


def test_rendered_cpu_tree_validates(tree: Path):
    for kwargs in ({"plan": GOLDEN}, {"profile": ROOT / "examples" / "profiles" / "cpu-nodes.yaml"}, {}):
        report = validate_tree(tree, **kwargs)
        assert report.findings == [], [str(f) for f in report.findings]


def _plant(tree: Path, old: str, new: str) -> None:
    path = tree / DEPLOYMENT
    text = path.read_text()
    assert old in text, old
    path.write_text(text.replace(old, new, 1))


def _rules(tree: Path, **kwargs) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for f in validate_tree(tree, **kwargs).findings:
        out.setdefault(f.rule, []).append(f.message)
    return out


def test_cpu_pod_asking_for_a_gpu_is_caught(tree: Path):
    _plant(tree, "          limits:\n            cpu: '110'\n",
           "          limits:\n            nvidia.com/gpu: 1\n            cpu: '110'\n")
    _plant(tree, "          requests:\n            cpu: '110'\n",
           "          requests:\n            nvidia.com/gpu: 1\n            cpu: '110'\n")
    found = _rules(tree, plan=GOLDEN)
    assert "PLN009" in found and any("nvidia.com/gpu" in m for m in found["PLN009"])
    # without the plan, the profile of CPU nodes offers no such resource
    assert "PRO001" in _rules(tree, profile=ROOT / "examples" / "profiles" / "cpu-nodes.yaml")


@pytest.mark.parametrize("old,new,words", [
    ("        - name: VLLM_CPU_KVCACHE_SPACE\n", "        - name: VLLM_CPU_KV_SPACE\n",
     "VLLM_CPU_KVCACHE_SPACE is None"),
    ("          value: auto\n", "          value: nobind\n", "VLLM_CPU_OMP_THREADS_BIND is 'nobind'"),
    ("          requests:\n            cpu: '110'\n", "          requests:\n            cpu: '100'\n",
     "differs from limit"),
    ("          limits:\n            cpu: '110'\n", "          limits:\n            cpu: '200'\n",
     "exceeds the 1 socket"),
], ids=["kv-missing", "unbound-threads", "burstable", "too-many-cpus"])
def test_cpu_pod_defects_are_caught(tree: Path, old: str, new: str, words: str):
    _plant(tree, old, new)
    found = _rules(tree, plan=GOLDEN)
    assert any(words in m for m in found.get("PLN009", [])), found


def test_kv_cache_beyond_the_pods_memory_is_caught(tree: Path):
    text = (tree / DEPLOYMENT).read_text()
    kv = env_of(load_yaml_text(text)["spec"]["template"]["spec"]["containers"][0])["VLLM_CPU_KVCACHE_SPACE"]
    _plant(tree, f"          value: '{kv}'\n", "          value: '900'\n")
    found = _rules(tree, plan=GOLDEN)
    assert any("exceeds the pod's memory limit" in m for m in found.get("PLN009", [])), found
