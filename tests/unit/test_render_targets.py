"""Deployment targets (`infra render --target`): every example plan a target can express renders the same bytes twice
and validates with no errors against its plan (pinned CRD / chart schemas and plan consistency); what a target
cannot express is refused naming the service; each planted disagreement is caught, as for the default target."""

from __future__ import annotations

from pathlib import Path

import pytest

from infra.catalog.targets import TARGETS
from infra.errors import InfraError, IntentError
from infra.planner.types import load_plan
from infra.render import render_plan, render_tree
from infra.validators import validate_tree
from infra.validators.rules import RULES

from ..conftest import ROOT

GOLDEN = ROOT / "tests" / "golden"
PLANS = sorted(p.parent.name for p in GOLDEN.glob("*/plan.yaml"))

# Example plan -> targets that refuse it, with a piece of the reason.
REFUSED = {
    ("cpu-small-model", "dynamo"): "service router: allocation a0 runs on CPU devices",
    ("cpu-small-model", "kserve"): "runs on CPU devices",
    ("cpu-small-model", "llm-d"): "runs on CPU devices",
    ("agent-workload", "kserve"): "service agents: allocation a0 runs trtllm",
    ("agent-workload", "llm-d"): "runs trtllm",
    ("deepseek-moe", "kserve"): "runs trtllm",
    ("deepseek-moe", "llm-d"): "runs trtllm",
    ("multi-service", "dynamo"): "service chat-small: allocation a0 runs on huawei devices",
    ("multi-service", "kserve"): "allocation a0 runs mindie",
    ("multi-service", "llm-d"): "runs on huawei devices",
    **{(p, t): "a pipeline of stages" for p in ("omni-speech", "video-dit", "vision-language")
       for t in ("dynamo", "kserve", "llm-d")},
}
CASES = [(p, t) for p in PLANS for t in TARGETS if t != "kubernetes"]


def write(files: dict[str, str], root: Path) -> Path:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


@pytest.mark.parametrize("plan,target", CASES, ids=[f"{p}-{t}" for p, t in CASES])
def test_example_renders_and_validates_or_is_refused(tmp_path: Path, plan: str, target: str):
    path = GOLDEN / plan / "plan.yaml"
    loaded = load_plan(path)
    if (plan, target) in REFUSED:
        with pytest.raises(IntentError) as err:
            render_plan(loaded, target=target)
        problem = err.value.problems[0]
        assert REFUSED[(plan, target)] in problem.message and "\n" not in problem.message and problem.fix
        return
    files = render_plan(loaded, target=target)
    assert files == render_plan(loaded, target=target)  # deterministic
    report = validate_tree(write(files, tmp_path / "m"), plan=path)
    assert report.errors == [], [str(f) for f in report.errors]
    assert "plan" in report.checks


def test_each_target_writes_its_own_resources():
    plan = load_plan(GOLDEN / "pd-across-devices" / "plan.yaml")
    dynamo = render_plan(plan, target="dynamo")
    text = dynamo["chat/base/dynamographdeployment-chat.yaml"]
    for piece in ("apiVersion: nvidia.com/v1alpha1", "componentType: frontend", "a0-prefill:", "a0-decode:",
                  "subComponentType: decode", "- dynamo.vllm", "- --is-prefill-worker", "- --is-decode-worker",
                  "nvidia.com/gpu.product: NVIDIA-H20", "gpu: '2'"):
        assert piece in text, piece
    kserve = render_plan(plan, target="kserve")["chat/base/llminferenceservice-chat-a0.yaml"]
    for piece in ("apiVersion: serving.kserve.io/v1alpha1", "uri: hf://meta-llama/Llama-3.1-70B-Instruct",
                  "prefill:", "- name: main", "- /mnt/models", "tensor: 1"):
        assert piece in kserve, piece
    llmd = render_plan(plan, target="llm-d")
    values = llmd["chat/helm/llm-d-modelservice/chat-a0.values.yaml"]
    assert "modelCommand: custom" in values and "enabled: true" in values and "- '8200'" in values
    assert "kind: InferencePool" in llmd["chat/base/inferencepool-chat.yaml"]
    assert "pd-profile-handler" in llmd["chat/base/configmap-chat-epp.yaml"]
    assert "--pool-name" in llmd["chat/base/deployment-chat-epp.yaml"]


def test_unknown_target_is_one_line_with_a_fix():
    with pytest.raises(InfraError) as err:
        render_tree(load_plan(GOLDEN / "small-model-shared" / "plan.yaml"), target="openshift")
    p = err.value.problems[0]
    assert "unknown deployment target 'openshift'" in p.message and "dynamo" in p.fix


def _edit(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    assert old in text, f"{old!r} not in {path}"
    path.write_text(text.replace(old, new, 1))


PD = GOLDEN / "pd-across-devices" / "plan.yaml"
MOE = GOLDEN / "deepseek-moe" / "plan.yaml"
DGD = "chat/base/dynamographdeployment-chat.yaml"
LLMISVC = "chat/base/llminferenceservice-chat-a1.yaml"  # the plan's larger allocation (a0 is one smaller unit)
VALUES = "chat/helm/llm-d-modelservice/chat-a1.values.yaml"
UNITS = load_plan(PD).spec.services[0].allocations[1].replicas
"""That allocation's units (the planted wrong counts are more), read from the plan a refit may move."""

# (target, plan, rule, file to edit, old, new)
DEFECTS = [
    ("dynamo", PD, "PLN003", DGD, f"      replicas: {UNITS}\n", f"      replicas: {UNITS + 1}\n"),
    ("dynamo", PD, "PLN004", DGD, "- --tensor-parallel-size\n          - '2'",
     "- --tensor-parallel-size\n          - '4'"),
    ("dynamo", PD, "PLN004", DGD, "          - --is-prefill-worker\n", ""),
    ("dynamo", PD, "PLN004", DGD, "- meta-llama/Llama-3.1-70B-Instruct\n", "- meta-llama/Llama-3.1-8B-Instruct\n"),
    ("dynamo", PD, "PLN005", DGD, "gpu: '2'", "gpu: '4'"),
    ("dynamo", PD, "PLN005", DGD, "    a0-decode:\n", "    a0-decode:\n      multinode:\n        nodeCount: 2\n"),
    ("dynamo", PD, "PLN007", DGD, "infra.dev/plan-fingerprint: sha256:", "infra.dev/plan-fingerprint: sha256:00"),
    ("dynamo", PD, "PLN008", DGD, "nvidia.com/gpu.product: NVIDIA-H20", "nvidia.com/gpu.product: NVIDIA-H100"),
    ("dynamo", PD, "PLN010", DGD, "image: nvcr.io/nvidia/ai-dynamo/vllm-runtime:0.7.0.post2\n          command",
     "image: nvcr.io/nvidia/ai-dynamo/sglang-runtime:0.7.1\n          command"),
    ("dynamo", PD, "PLN002", DGD, "    a0-decode:\n", "    a7-decode:\n"),
    ("dynamo", PD, "SCH002", DGD, "  backendFramework: vllm\n", "  backendFramework: tensorrt\n"),
    ("dynamo", PD, "SCH002", DGD, "      subComponentType: decode\n", "      subComponentTyp: decode\n"),
    ("dynamo", MOE, "PLN004", "deepseek/base/configmap-deepseek-a0-prefill.yaml", "free_gpu_memory_fraction: 0.9",
     "free_gpu_memory_fraction: 0.5"),
    ("kserve", PD, "PLN003", LLMISVC, f"  replicas: {UNITS}\n", f"  replicas: {UNITS + 3}\n"),
    ("kserve", PD, "PLN004", LLMISVC, "    tensor: 2\n", "    tensor: 4\n"),
    ("kserve", PD, "PLN004", LLMISVC, "uri: hf://meta-llama/Llama-3.1-70B-Instruct", "uri: hf://Qwen/Qwen3-8B"),
    ("kserve", PD, "PLN004", LLMISVC, "- --max-num-seqs\n      - '132'", "- --max-num-seqs\n      - '64'"),
    ("kserve", PD, "PLN005", LLMISVC, "nvidia.com/gpu: 2\n        requests", "nvidia.com/gpu: 1\n        requests"),
    ("kserve", PD, "PLN007", LLMISVC, "infra.dev/plan-fingerprint: sha256:", "infra.dev/plan-fingerprint: sha256:00"),
    ("kserve", PD, "PLN004", LLMISVC, "      - --enable-ssl-refresh\n", ""),
    ("kserve", PD, "PLN010", LLMISVC, "image: vllm/vllm-openai:v0.18.0", "image: vllm/vllm-openai:v0.17.0"),
    ("kserve", PD, "SCH002", LLMISVC, "    name: chat\n", "    name: chat\n    criticality: Urgent\n"),
    ("llm-d", PD, "PLN003", VALUES, f"  replicas: {UNITS}\n", f"  replicas: {UNITS + 4}\n"),
    ("llm-d", PD, "PLN004", VALUES, "uri: hf://meta-llama/Llama-3.1-70B-Instruct", "uri: hf://Qwen/Qwen3-8B"),
    ("llm-d", PD, "PLN004", VALUES, "- --tensor-parallel-size\n    - '2'", "- --tensor-parallel-size\n    - '1'"),
    ("llm-d", PD, "PLN005", VALUES, "nvidia.com/gpu: 2\n      requests", "nvidia.com/gpu: 3\n      requests"),
    ("llm-d", PD, "PLN007", VALUES, "infra.dev/plan-fingerprint: sha256:", "infra.dev/plan-fingerprint: sha256:00"),
    ("llm-d", PD, "PLN008", VALUES, "nvidia.com/gpu.product: NVIDIA-H20", "nvidia.com/gpu.product: NVIDIA-L4"),
    ("llm-d", PD, "SCH004", VALUES, "multinode: false\n", "multinode: false\nmodelService: {}\n"),
    ("llm-d", PD, "SCH004", VALUES, "  servicePort: 8000\n", "  servicePort: 8000\n  gateway: envoy\n"),
]


@pytest.mark.parametrize("target,plan,rule,file,old,new", DEFECTS,
                         ids=[f"{d[0]}-{d[2]}-{i}" for i, d in enumerate(DEFECTS)])
def test_planted_disagreement_is_caught(tmp_path: Path, target: str, plan: Path, rule: str, file: str, old: str,
                                        new: str):
    tree = write(render_plan(load_plan(plan), target=target), tmp_path / "m")
    assert validate_tree(tree, plan=plan).errors == []
    _edit(tree / file, old, new)
    report = validate_tree(tree, plan=plan)
    hits = [f for f in report.findings if f.rule == rule]
    assert hits, f"{rule} missed; found {[str(f) for f in report.findings]}"
    assert hits[0].severity == RULES[rule].severity and hits[0].line >= 1


def test_a_missing_allocation_is_located_in_the_plan(tmp_path: Path):
    for target, name, index in (("dynamo", DGD, 0), ("kserve", LLMISVC, 1), ("llm-d", VALUES, 1)):
        tree = write(render_plan(load_plan(PD), target=target), tmp_path / target)
        if target == "dynamo":
            _edit(tree / name, "    a0-prefill:\n", "    zz-prefill:\n")
        else:
            (tree / name).unlink()
            if target == "kserve":
                _edit(tree / "chat/base/kustomization.yaml", "- llminferenceservice-chat-a1.yaml\n", "")
        hits = [f for f in validate_tree(tree, plan=PD).findings if f.rule == "PLN001"]
        assert hits and hits[0].file == str(PD) and \
            hits[0].field.startswith(f"spec.services[0].allocations[{index}]"), target


def _plan_with(tmp_path: Path, source: Path, old: str, new: str, nth: int = 1) -> Path:
    text = source.read_text()
    parts = text.split(old)
    assert len(parts) > nth, f"{old!r} occurs fewer than {nth} times"
    plan = tmp_path / "plan.yaml"
    plan.write_text(old.join(parts[:nth]) + new + old.join(parts[nth:]))
    return plan


def test_workers_spanning_nodes(tmp_path: Path):
    """Dynamo sets multinode.nodeCount, KServe gives a worker pod spec (a LeaderWorkerSet); llm-d is refused."""
    plan = _plan_with(tmp_path, GOLDEN / "rag-long-context" / "plan.yaml", "nodes_per_worker: 1",
                      "nodes_per_worker: 2")
    loaded = load_plan(plan)
    dynamo = render_plan(loaded, target="dynamo")
    assert "multinode:\n        nodeCount: 2" in dynamo["rag/base/dynamographdeployment-rag.yaml"]
    kserve = render_plan(loaded, target="kserve")
    assert "\n  worker:\n" in kserve["rag/base/llminferenceservice-rag-a0.yaml"]
    for target, files in (("dynamo", dynamo), ("kserve", kserve)):
        report = validate_tree(write(files, tmp_path / target), plan=plan)
        assert report.errors == [], [str(f) for f in report.errors]
    with pytest.raises(IntentError, match="service rag: allocation a0 spans 2 nodes per worker"):
        render_plan(loaded, target="llm-d")


def test_one_dynamo_graph_runs_one_backend(tmp_path: Path):
    # Service chat's second allocation on SGLang beside its first on vLLM.
    plan = _plan_with(tmp_path, PD, "framework: vllm", "framework: sglang", 2)
    with pytest.raises(IntentError, match="DynamoGraphDeployment has one backendFramework"):
        render_plan(load_plan(plan), target="dynamo")


@pytest.mark.parametrize("target,reason", [
    ("dynamo", "service chat: allocation a0 runs on huawei devices (pool ascend-b)"),
    ("kserve", "runs vllm-ascend, which KServe does not run"),
    ("llm-d", "runs on huawei devices (pool ascend-b), for which llm-d has no runtime"),
])
def test_an_allocation_on_ascend_is_refused_by_targets_without_its_runtime(tmp_path: Path, target: str,
                                                                          reason: str):
    plan = _plan_with(tmp_path, GOLDEN / "chat-mixed-fleet" / "plan.yaml",
                      "  - pool: h100-a\n      device: H100-SXM\n      framework: vllm\n      precision: fp8",
                      "  - pool: ascend-b\n      device: Ascend-910B3\n      framework: vllm-ascend\n"
                      "      precision: fp8")
    with pytest.raises(IntentError) as err:
        render_plan(load_plan(plan), target=target)
    assert reason in err.value.problems[0].message


def test_a_dynamo_graph_on_a_cluster_that_lists_no_dynamo_operator_is_warned(tmp_path: Path):
    path = GOLDEN / "pd-across-devices" / "plan.yaml"
    report = validate_tree(write(render_plan(load_plan(path), target="dynamo"), tmp_path / "m"), plan=path)
    hits = [f for f in report.findings if f.rule == "PRO004"]
    assert hits and all(f.severity == "warning" for f in hits) and "DynamoGraphDeployment" in hits[0].message
    assert "conventions.crds.dynamo" in hits[0].fix
