"""Plan consistency: a tree rendered from a plan passes against it; each planted disagreement is caught. And every
example that renders validates with no errors against its plan."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from infra.planner.types import load_plan
from infra.render import render_plan
from infra.validators import validate_tree
from infra.validators.rules import RULES

from ..conftest import ROOT

GOLDEN = ROOT / "tests" / "golden" / "small-model-shared" / "plan.yaml"
DEPLOYMENT = "summarise/base/deployment-summarise-a0.yaml"


def write_files(files: dict[str, str], root: Path) -> Path:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


@pytest.fixture(scope="module")
def rendered() -> dict[str, str]:
    return render_plan(load_plan(GOLDEN))


@pytest.fixture
def tree(tmp_path: Path, rendered: dict[str, str]) -> Path:
    return write_files(rendered, tmp_path / "manifests")


def test_rendered_tree_passes_against_its_plan(tree: Path):
    report = validate_tree(tree, plan=GOLDEN)
    assert report.findings == [], [str(f) for f in report.findings]
    assert "plan" in report.checks and "profile" in report.checks


def _edit(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    assert old in text, f"{old!r} not in {path}"
    path.write_text(text.replace(old, new, 1))


# (rule, file to edit ("plan" edits a copy of the plan), old, new)
DEFECTS = [
    ("PLN001", "plan", "    allocations:\n    - pool: rtx4090",
     "    allocations:\n    - pool: rtx4090\n      device: RTX-4090\n      framework: vllm\n      precision: fp8\n"
     "      mode: agg\n      parallel: {tp: 1, pp: 1, ep: 1, moe_tp: 1, attention_dp: 1}\n      devices_per_worker: 1\n"
     "      nodes_per_worker: 1\n      nodes_used: 1\n      engines:\n        agg: {max_num_seqs: 8, max_num_batched_tokens: 8192, "
     "max_model_len: 8000, memory_utilization: 0.9, kv_cache_dtype: auto, kv_cache_tokens: 1, chunked_prefill: true, "
     "prefix_caching: true}\n      replicas: 1\n      devices_per_replica: 1.0\n      devices: 1.0\n"
     "      capacity_per_replica: 1.0\n      load_per_replica: 0.1\n      cost_per_hour: 0.1\n      predicted: {}\n"
     "      calibrated: false\n      calibration_source: none\n    - pool: rtx4090"),
    ("PLN002", DEPLOYMENT, "  name: summarise-a0\n", "  name: summarise-a7\n"),
    ("PLN003", DEPLOYMENT, "  replicas: 2\n", "  replicas: 3\n"),
    ("PLN004", DEPLOYMENT, "- --max-num-seqs\n        - '52'", "- --max-num-seqs\n        - '64'"),
    ("PLN004", DEPLOYMENT, "        - --enable-prefix-caching\n", ""),
    ("PLN004", DEPLOYMENT, "        - --quantization\n        - fp8\n", ""),
    ("PLN004", DEPLOYMENT, "        - Qwen/Qwen3-8B\n", "        - Qwen/Qwen3-32B\n"),
    ("PLN005", DEPLOYMENT, "            nvidia.com/gpu: 1\n          requests:", "            nvidia.com/gpu: 2\n          requests:"),
    ("PLN006", "plan", "      framework: vllm\n", "      framework: myengine\n"),
    ("PLN007", DEPLOYMENT, "infra.dev/plan-fingerprint: sha256:", "infra.dev/plan-fingerprint: sha256:00"),
    ("PLN008", "plan", "      node_selector: {}\n      node_names:\n      - ws-01",
     "      node_selector: {gpu: rtx4090}\n      node_names:\n      - ws-01"),
]


@pytest.mark.parametrize("rule,file,old,new", DEFECTS, ids=[f"{d[0]}-{i}" for i, d in enumerate(DEFECTS)])
def test_planted_disagreement_is_caught(tree: Path, tmp_path: Path, rule: str, file: str, old: str, new: str):
    plan = GOLDEN
    if file == "plan":
        plan = tmp_path / "plan.yaml"
        plan.write_text(GOLDEN.read_text())
        _edit(plan, old, new)
    else:
        _edit(tree / file, old, new)
    overlay = tmp_path / "catalog"
    (overlay / "frameworks").mkdir(parents=True)
    # An engine configured some other way than by a launcher the catalog spells: its arguments cannot be read.
    (overlay / "frameworks" / "myengine.yaml").write_text(
        "name: myengine\ndisplay_name: My engine\nversion: 1.0.0\nimage: example.com/myengine:1.0.0\n"
        "vendors: [nvidia]\nprecisions: [bf16, fp8]\nfeatures: []\nsource: https://example.com/myengine\n")
    report = validate_tree(tree, plan=plan, catalog_dirs=(overlay,))
    hits = [f for f in report.findings if f.rule == rule]
    assert hits, f"{rule} missed; found {[str(f) for f in report.findings]}"
    assert hits[0].severity == RULES[rule].severity and hits[0].line >= 1
    if rule == "PLN001":
        # The planted allocation takes index 0, so the rendered summarise-a0 stands for it and a1 has no objects.
        assert hits[0].file == str(plan) and hits[0].field == "spec.services[0].allocations[1]"


GOLDEN_PLANS = sorted(p.parent.name for p in (ROOT / "tests" / "golden").glob("*/plan.yaml"))


@pytest.mark.parametrize("name", GOLDEN_PLANS)
def test_every_rendered_example_validates_against_its_plan(tmp_path: Path, name: str):
    plan = ROOT / "tests" / "golden" / name / "plan.yaml"
    loaded = load_plan(plan)
    files = render_plan(loaded)
    report = validate_tree(write_files(files, tmp_path / "manifests"), plan=plan)
    assert report.errors == [], [str(f) for f in report.errors]
    assert report.objects >= 3


def test_settings_in_an_engine_config_file_are_read_from_its_configmap(tmp_path: Path):
    """TensorRT-LLM reads part of its settings from a file that rendering ships in a ConfigMap: validation reads
    that file back, so a drifted value is caught, and a missing file leaves the layout unchecked (a warning)."""
    plan = ROOT / "tests" / "golden" / "deepseek-moe" / "plan.yaml"
    files = render_plan(load_plan(plan))
    tree = write_files(files, tmp_path / "m")
    assert validate_tree(tree, plan=plan).findings == []
    cm = sorted(tree.glob("*/base/configmap-*-prefill.yaml"))[0]  # the first TensorRT-LLM allocation
    _edit(cm, "free_gpu_memory_fraction: 0.9", "free_gpu_memory_fraction: 0.8")
    hits = [f for f in validate_tree(tree, plan=plan).findings if f.rule == "PLN004"]
    assert len(hits) == 1 and "free_gpu_memory_fraction" in hits[0].message and "0.8" in hits[0].message
    cm.unlink()
    (cm.parent / "kustomization.yaml").write_text(
        (cm.parent / "kustomization.yaml").read_text().replace(f"- {cm.name}\n", ""))
    rules = sorted({f.rule for f in validate_tree(tree, plan=plan).findings})
    assert rules == ["PLN004", "SEM012"], rules


def test_multi_node_worker_renders_a_leaderworkerset_that_validates(tmp_path: Path):
    """A worker over two nodes (the rag example's plan with TP 16 across 2 x 8 devices) renders a LeaderWorkerSet;
    it validates against the plan, and a group size that disagrees is caught twice (plan and layout)."""
    text = (ROOT / "tests" / "golden" / "rag-long-context" / "plan.yaml").read_text()
    plan = tmp_path / "plan.yaml"
    text = re.sub(r"\n        tp: \d+\n", "\n        tp: 16\n", text, count=1)
    plan.write_text(re.sub(r"\n      devices_per_worker: \d+\n      nodes_per_worker: 1\n",
                           "\n      devices_per_worker: 16\n      nodes_per_worker: 2\n", text, count=1))
    tree = write_files(render_plan(load_plan(plan)), tmp_path / "m")
    lws = next(tree.glob("*/base/leaderworkerset-*.yaml"))
    assert validate_tree(tree, plan=plan).findings == []
    _edit(lws, "    size: 2\n", "    size: 3\n")
    found = {f.rule: f for f in validate_tree(tree, plan=plan).findings}
    assert sorted(found) == ["PLN005", "SEM006"]
    assert lws.read_text().splitlines()[found["PLN005"].line - 1].strip() == "size: 3"
    assert "TP 16" in found["SEM006"].message and "24 device(s)" in found["SEM006"].message


def test_hami_slice_renders_requests_that_validate(tmp_path: Path):
    """Half a device (HAMi): count 1 plus the memory and core slice resources, checked against the plan's share."""
    plan = tmp_path / "plan.yaml"
    plan.write_text(GOLDEN.read_text().replace("      devices_per_worker: 1\n",
                                               "      share: 0.5\n      devices_per_worker: 1\n", 1))
    tree = write_files(render_plan(load_plan(plan)), tmp_path / "m")
    dep = tree / DEPLOYMENT
    # 0.5 x 24 GB in MiB units, and half the cores.
    assert "nvidia.com/gpumem: 11444" in dep.read_text() and "nvidia.com/gpucores: 50" in dep.read_text()
    assert validate_tree(tree, plan=plan).findings == []
    dep.write_text(dep.read_text().replace("nvidia.com/gpumem: 11444", "nvidia.com/gpumem: 20000"))
    found = [f for f in validate_tree(tree, plan=plan).findings]
    assert [f.rule for f in found] == ["PLN005"] and "11444" in found[0].message


def _edited_plan(tmp_path: Path, fn) -> Path:
    """The small-model golden plan edited in place (as data) and written back as a plan file."""
    import yaml

    data = load_plan(GOLDEN).model_dump(mode="json", by_alias=True, exclude_none=True)
    fn(data)
    path = tmp_path / "plan.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def _prefill_decode(data: dict, framework: str) -> None:
    """Allocation 0 as 2 units of 1 prefill + 2 decode workers of `framework`."""
    a = data["spec"]["services"][0]["allocations"][0]
    engine = a["engines"].pop("agg")
    engine.update(quantization=None, kv_cache_dtype="auto")
    a.update(mode="disagg", prefill_workers=1, decode_workers=2, framework=framework, precision="bf16",
             engines={"prefill": engine, "decode": engine})


def test_ascend_prefill_decode_carries_the_mooncake_connector_and_a_worker_without_it_is_an_error(tmp_path: Path):
    """Issue 44: vllm-ascend prefill/decode rendered with no KV connector validated with 0 warnings. Now each role
    gets vllm-ascend's MooncakeConnectorV1 (producer / consumer, both roles' TP and DP sizes) and the pod IP for
    HCCL, the tree validates clean, and a prefill worker stripped of its connector is an error (SEM015)."""
    import json

    def change(d):
        pool = next(p for p in d["spec"]["cluster"]["pools"] if p["name"] == d["spec"]["services"][0]
                    ["allocations"][0]["pool"])
        pool.update(device="Ascend-910B3", vendor="huawei", resources={"count": "huawei.com/Ascend910B3"})
        _prefill_decode(d, "vllm-ascend")
        d["spec"]["services"][0]["allocations"][0]["device"] = "Ascend-910B3"

    plan = _edited_plan(tmp_path, change)
    tree = write_files(render_plan(load_plan(plan)), tmp_path / "m")
    a = load_plan(plan).spec.services[0].allocations[0]
    for role, kv_role in (("prefill", "kv_producer"), ("decode", "kv_consumer")):
        text = (tree / f"summarise/base/deployment-summarise-a0-{role}.yaml").read_text()
        config = json.loads(re.search(r"- --kv-transfer-config\n\s+- '(.*)'\n", text).group(1))
        assert config["kv_connector"] == "MooncakeConnectorV1" and config["kv_role"] == kv_role
        assert config["kv_connector_extra_config"] == {
            r: {"dp_size": a.parallel.attention_dp, "tp_size": a.parallel.tp} for r in ("prefill", "decode")}
        assert "name: HCCL_IF_IP" in text
    report = validate_tree(tree, plan=plan)
    assert report.errors == [] and report.warnings == [], [str(f) for f in report.findings]

    prefill = tree / "summarise/base/deployment-summarise-a0-prefill.yaml"
    prefill.write_text(re.sub(r"        - --kv-transfer-config\n        - '.*'\n", "", prefill.read_text()))
    found = [f for f in validate_tree(tree, plan=plan).findings if f.rule == "SEM015"]
    assert len(found) == 1 and found[0].severity == "error" and found[0].file == str(prefill)
    assert "prefill worker" in found[0].message and "--kv-transfer-config" in found[0].fix


def test_volcano_podgroup_of_prefill_decode_deployments_counts_every_pod_it_gangs(tmp_path: Path):
    """The PodGroup that prefill/decode Deployments name gangs all of their pods: rendered with minMember equal to
    them, it validates; one unit's worth (the old minMember) is caught (SEM016)."""
    def change(d):
        _prefill_decode(d, "vllm")
        d["spec"]["cluster"]["scheduler"] = "volcano"
        d["spec"]["cluster"]["crds"] = {"volcano": "scheduling.volcano.sh/v1beta1"}

    plan = _edited_plan(tmp_path, change)
    tree = write_files(render_plan(load_plan(plan)), tmp_path / "m")
    pg = tree / "summarise/base/podgroup-summarise-a0.yaml"
    assert "minMember: 6\n" in pg.read_text()  # 2 units x (1 prefill + 2 decode)
    report = validate_tree(tree, plan=plan)
    assert report.errors == [], [str(f) for f in report.errors]
    _edit(pg, "minMember: 6\n", "minMember: 3\n")
    found = [f for f in validate_tree(tree, plan=plan).findings if f.rule == "SEM016"]
    assert len(found) == 1 and found[0].severity == "error"
    assert "6 pod(s)" in found[0].message and "minMember is 3" in found[0].message


def test_leaderworkerset_groups_sharing_one_podgroup_is_an_error(tmp_path: Path):
    """Issue 44: two groups of a LeaderWorkerSet shared one PodGroup (minMember 2). Rendered now with the LWS
    controller making each group's PodGroup, the tree names none and validates; a static one named from its
    templates, shared by the two groups, is caught (SEM016)."""
    def change(d):
        a = d["spec"]["services"][0]["allocations"][0]
        a["parallel"]["tp"] = 2
        a.update(devices_per_worker=2, nodes_per_worker=2, replicas=2)
        a["engines"]["agg"].update(quantization=None, kv_cache_dtype="auto")
        d["spec"]["cluster"]["scheduler"] = "volcano"
        d["spec"]["cluster"]["crds"] = {"volcano": "scheduling.volcano.sh/v1beta1",
                                       "leaderworkerset": "leaderworkerset.x-k8s.io/v1"}

    plan = _edited_plan(tmp_path, change)
    tree = write_files(render_plan(load_plan(plan)), tmp_path / "m")
    lws = tree / "summarise/base/leaderworkerset-summarise-a0.yaml"
    assert not list(tree.glob("*/base/podgroup-*.yaml")) and "group-name" not in lws.read_text()
    assert not [f for f in validate_tree(tree, plan=plan).findings if f.rule == "SEM016"]
    text = lws.read_text()
    for t in ("leaderTemplate", "workerTemplate"):
        text = text.replace(f"    {t}:\n      metadata:\n",
                            f"    {t}:\n      metadata:\n        annotations:\n"
                            "          scheduling.k8s.io/group-name: summarise-a0\n", 1)
    lws.write_text(text)
    (lws.parent / "podgroup-summarise-a0.yaml").write_text(
        "apiVersion: scheduling.volcano.sh/v1beta1\nkind: PodGroup\nmetadata:\n  name: summarise-a0\n"
        "spec:\n  minMember: 2\n")
    k = lws.parent / "kustomization.yaml"
    k.write_text(k.read_text().replace("resources:\n", "resources:\n- podgroup-summarise-a0.yaml\n", 1))
    found = [f for f in validate_tree(tree, plan=plan).findings if f.rule == "SEM016"]
    assert found and all(f.severity == "error" for f in found)
    assert any("2 groups" in f.message and f.file == str(lws) for f in found), [str(f) for f in found]
