"""Every validation rule: a planted defect it catches, and the clean fixture tree it passes."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from infra.validators import validate_tree
from infra.validators.rules import RULES

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "manifests"
GOOD = FIXTURES / "good"
PROFILE = FIXTURES / "profile.yaml"
BASE = "chat/base"


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    """A private copy of the clean fixture tree."""
    shutil.copytree(GOOD, tmp_path / "good")
    return tmp_path / "good"


def plant(root: Path, file: str, old: str, new: str) -> Path:
    path = root / BASE / file
    text = path.read_text()
    assert old in text, f"{old!r} not in {file}"
    path.write_text(text.replace(old, new, 1))
    return path


def test_clean_tree_passes_every_rule():
    report = validate_tree(GOOD, profile=PROFILE)
    assert report.findings == [], [str(f) for f in report.findings]
    assert report.objects == 14 and report.ok
    assert report.checks == ["schema", "kustomize", "semantic", "security", "profile"]


# (rule, file, text in the clean file, defect planted in its place, line the finding must point at or None)
DEFECTS = [
    ("SCH001", "deployment-chat-a0.yaml", "  replicas: 2", "  replicas: two", 15),
    ("SCH001", "deployment-chat-a0.yaml", "          resources:\n", "          resource:\n", None),
    ("SCH001", "service-chat.yaml", "  selector:", "  selectr:", None),
    ("SCH002", "leaderworkerset-chat-a1.yaml", "startupPolicy: LeaderCreated", "startupPolicy: Whenever", None),
    ("SCH002", "leaderworkerset-chat-a1.yaml", "    size: 2", "    sise: 2", None),
    ("SCH002", "podgroup-chat-a1.yaml", "  minMember: 2", "  minMember: two", None),
    ("SCH002", "podgroup-chat-a1.yaml", "    mode: hard", "    mode: strict", None),
    ("SCH002", "scaledobject-chat-a0.yaml", "  pollingInterval: 15", "  pollingIntervall: 15", None),
    ("SCH002", "inferencepool-chat.yaml", "    - number: 8000", "    - number: 80000", None),
    ("SCH002", "leaderworkerset-chat-a1.yaml", "            image: vllm/vllm-openai:v0.18.0\n            command: [sh, -c]",
     "            imag: vllm/vllm-openai:v0.18.0\n            command: [sh, -c]", None),
    ("SCH002", "disaggregatedset-chat-a5.yaml", "        size: 1", "        sise: 1", None),
    ("SCH002", "disaggregatedset-chat-a5.yaml", "  - name: decode", "  - name: Decode", None),
    ("SCH003", "podgroup-chat-a1.yaml", "apiVersion: scheduling.volcano.sh/v1beta1",
     "apiVersion: scheduling.volcano.sh/v1alpha9", 1),
    ("SCH003", "inferencepool-chat.yaml", "kind: InferencePool", "kind: InferencePoool", None),
    ("KUS001", "kustomization.yaml", "  - service-chat.yaml", "  - service-chat.yaml\n  - missing.yaml", None),
    ("KUS002", "kustomization.yaml", "resources:", "namespcae: x\nresources:", None),
    ("KUS003", "kustomization.yaml", "  - service-chat.yaml\n", "", None),
    ("SEM001", "deployment-chat-a0.yaml", "      infra.dev/allocation: a0\n      infra.dev/role: agg\n  template",
     "      infra.dev/allocation: a9\n      infra.dev/role: agg\n  template", None),
    ("SEM002", "service-chat.yaml", "    infra.dev/service: chat\n  ports", "    infra.dev/service: chatt\n  ports", None),
    ("SEM003", "deployment-chat-a0.yaml", "  name: chat-a0\n", "  name: Chat_A0\n", 4),
    ("SEM003", "deployment-chat-a0.yaml", "        - name: engine", "        - name: Engine", None),
    ("SEM004", "deployment-chat-a3.yaml", "limits: {cpu: \"8\", memory: 64Gi, nvidia.com/gpu: 1,",
     "limits: {cpu: \"8\", memory: 64Gi, nvidia.com/gpu: 0.5,", None),
    ("SEM005", "deployment-chat-a0.yaml", "requests: {cpu: \"16\", memory: 256Gi, nvidia.com/gpu: 2}",
     "requests: {cpu: \"16\", memory: 256Gi, nvidia.com/gpu: 1}", None),
    ("SEM006", "deployment-chat-a0.yaml", "            - --tensor-parallel-size\n            - \"2\"",
     "            - --tensor-parallel-size\n            - \"4\"", None),
    ("SEM006", "leaderworkerset-chat-a1.yaml", "    size: 2", "    size: 3", None),
    ("SEM006", "disaggregatedset-chat-a5.yaml", "--disaggregation-mode, decode]",
     "--disaggregation-mode, decode, --dp-size, \"2\"]", None),
    ("SEM006", "disaggregatedset-chat-a5.yaml", "--disaggregation-mode, decode]",
     "--disaggregation-mode, decode, --dp-size, \"8\", --enable-dp-attention]", None),
    ("SEM007", "deployment-chat-a0.yaml", "httpGet: {path: /health, port: 8000}",
     "httpGet: {path: /health, port: 8080}", None),
    ("SEM008", "service-chat.yaml", "targetPort: http", "targetPort: metrics", None),
    ("SEM008", "inferencepool-chat.yaml", "    - number: 8000", "    - number: 8001", None),
    # A PodMonitor on a port the engines do not name, or on no engine at all, has Prometheus scrape nothing: the
    # objective alerts then never fire.
    ("SEM008", "podmonitor-chat-engines.yaml", "    - port: http", "    - port: metrics", None),
    ("SEM002", "podmonitor-chat-engines.yaml", "      infra.dev/service: chat\n    matchExpressions",
     "      infra.dev/service: chatt\n    matchExpressions", None),
    ("SCH002", "podmonitor-chat-engines.yaml", "      path: /metrics", "      path: /metrics\n      scheme: ftp", None),
    ("SEM009", "deployment-chat-a0.yaml", "        - name: shm\n", "        - name: models\n", None),
    ("SEM009", "deployment-chat-a0.yaml", "            - name: HF_TOKEN\n",
     "            - name: HF_HOME\n              value: /models\n            - name: HF_HOME\n", None),
    ("SEM009", "deployment-chat-a3.yaml", "  name: chat-a3\n", "  name: chat-a0\n", 4),
    ("SEM010", "deployment-chat-a0.yaml", "limits: {cpu: \"16\", memory: 256Gi,", "limits: {cpu: \"16\", memory: lots,",
     None),
    ("SEM011", "deployment-chat-a0.yaml", "            - {name: models, mountPath: /models}",
     "            - {name: weights, mountPath: /models}", None),
    ("SEM011", "resourceclaimtemplate-chat-a4.yaml", "requests: [gpu, nic]", "requests: [gpu, nics]", None),
    ("SEM014", "resourceclaimtemplate-chat-a4.yaml", "expression: device.capacity", "expression: this is not CEL or",
     None),
    ("SEM012", "deployment-chat-a0.yaml", "command: [vllm, serve]", "command: [trtllm-serve]", None),
    # A prefill worker that never hands its KV cache to decode: the P/D deployment is not disaggregated.
    ("SEM015", "deployment-chat-a2-prefill.yaml", "fp8_e4m3, --disaggregation-mode, prefill]", "fp8_e4m3]", None),
    # The leader of a LeaderWorkerSet group names a PodGroup whose minMember (2) counts leader and worker, but only
    # the leader joins it: the gang never forms.
    ("SEM016", "leaderworkerset-chat-a1.yaml", "    leaderTemplate:\n      metadata:\n",
     "    leaderTemplate:\n      metadata:\n        annotations: {scheduling.k8s.io/group-name: chat-a1}\n", None),
    # Two groups of a LeaderWorkerSet share one PodGroup (the issue: minMember 2, two groups).
    ("SEM016", "leaderworkerset-chat-a1.yaml",
     "  replicas: 1\n  startupPolicy: LeaderCreated\n  leaderWorkerTemplate:\n    size: 2\n"
     "    restartPolicy: RecreateGroupOnPodRestart\n    leaderTemplate:\n      metadata:\n",
     "  replicas: 2\n  startupPolicy: LeaderCreated\n  leaderWorkerTemplate:\n    size: 2\n"
     "    restartPolicy: RecreateGroupOnPodRestart\n    leaderTemplate:\n      metadata:\n"
     "        annotations: {scheduling.k8s.io/group-name: chat-a1}\n", None),
    ("SEM013", "deployment-chat-a3.yaml", "limits: {cpu: \"8\", memory: 64Gi, nvidia.com/gpu: 1,",
     "limits: {cpu: \"8\", memory: 64Gi, nvidia.com/gpu: 2,", None),
    ("PRO001", "deployment-chat-a3.yaml", "nvidia.com/gpucores: 25}\n            requests",
     "nvidia.com/gpucore: 25}\n            requests", None),
    ("PRO002", "deployment-chat-a0.yaml", "node.kubernetes.io/instance-type: hgx-h100",
     "node.kubernetes.io/instance-type: hgx-h200", None),
    ("PRO003", "leaderworkerset-chat-a1.yaml",
     "nvidia.com/gpu: 8}\n              requests: {cpu: \"32\", memory: 512Gi, nvidia.com/gpu: 8}",
     "nvidia.com/gpu: 16}\n              requests: {cpu: \"32\", memory: 512Gi, nvidia.com/gpu: 16}", None),
    ("PRO003", "deployment-chat-a3.yaml", "nvidia.com/gpumem: 20000, nvidia.com/gpucores: 25}\n            requests",
     "nvidia.com/gpumem: 90000, nvidia.com/gpucores: 25}\n            requests", None),
    ("PRO004", "podgroup-chat-a1.yaml", "apiVersion: scheduling.volcano.sh/v1beta1", "apiVersion: scheduling.volcano.sh/v1beta1", None),
    ("PRO005", "deployment-chat-a3.yaml", "schedulerName: hami-scheduler", "schedulerName: volcano", None),
    ("SEC001", "deployment-chat-a0.yaml", "allowPrivilegeEscalation: false", "privileged: true", None),
    ("SEC002", "deployment-chat-a0.yaml", "emptyDir: {medium: Memory, sizeLimit: 16Gi}", "hostPath: {path: /dev/shm}",
     None),
    ("SEC002", "deployment-chat-a0.yaml", "      serviceAccountName: chat", "      hostNetwork: true\n      "
     "serviceAccountName: chat", None),
    ("SEC003", "deployment-chat-a0.yaml", "add: [IPC_LOCK]", "add: [IPC_LOCK, SYS_ADMIN]", None),
    ("SEC004", "deployment-chat-a0.yaml", "              valueFrom:\n                secretKeyRef: {name: hf-token, key: token}",
     "              value: hf_abcdefghijklmnopqrstuvwxyz0123", None),
    ("SEC005", "deployment-chat-a0.yaml", "image: vllm/vllm-openai:v0.18.0", "image: vllm/vllm-openai:latest", None),
    ("SEC005", "deployment-chat-a3.yaml", "image: vllm/vllm-openai:v0.18.0", "image: vllm/vllm-openai", None),
    ("SEC006", "deployment-chat-a0.yaml", "limits: {cpu: \"16\", memory: 256Gi, nvidia.com/gpu: 2}",
     "limits: {nvidia.com/gpu: 2}", None),
    ("SEC007", "deployment-chat-a0.yaml", "      serviceAccountName: chat\n", "", None),
]


@pytest.mark.parametrize("rule,file,old,new,line", DEFECTS, ids=[f"{d[0]}-{i}" for i, d in enumerate(DEFECTS)])
def test_planted_defect_is_caught(tree: Path, rule: str, file: str, old: str, new: str, line: int | None):
    profile = PROFILE
    if rule == "PRO004":
        # The defect is in the cluster: Volcano is not installed there.
        profile = tree.parent / "profile.yaml"
        profile.write_text(PROFILE.read_text().replace("      volcano: scheduling.volcano.sh/v1beta1\n", ""))
    path = plant(tree, file, old, new)
    report = validate_tree(tree, profile=profile)
    hits = [f for f in report.findings if f.rule == rule]
    assert hits, f"{rule} missed; found {[str(f) for f in report.findings]}"
    f = hits[0]
    assert f.severity == RULES[rule].severity and f.fix
    if rule != "KUS003":
        assert f.file == str(path)
    if line is not None:
        assert f.line == line, str(f)
    assert report.ok is (not report.errors)


@pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl builds the overlays")
def test_overlay_that_does_not_build_is_caught(tree: Path):
    overlay = tree / "chat" / "overlays" / "lab"
    (overlay / "patch.yaml").write_text("apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: nope\n"
                                        "spec:\n  replicas: 3\n")
    k = overlay / "kustomization.yaml"
    k.write_text(k.read_text() + "patches:\n  - path: patch.yaml\n")
    report = validate_tree(tree)
    assert [f.rule for f in report.findings] == ["KUS004"], [str(f) for f in report.findings]
    f = report.findings[0]
    assert f.file == str(k) and f.object == "Kustomization/lab" and "nope" in f.message


def test_every_rule_is_planted_or_needs_a_plan_or_cluster():
    from .test_render_targets import DEFECTS as TARGET_DEFECTS  # Helm values (SCH004) come from the llm-d target

    planted = {d[0] for d in DEFECTS} | {"KUS004"} | {d[2] for d in TARGET_DEFECTS}
    rest = {r for r in RULES if r.startswith(("PLN", "PIP", "LIV", "YAML"))}
    assert set(RULES) - planted - rest == set()


def test_data_parallel_attention_runs_inside_tensor_parallel(tree: Path):
    """SGLang's `--tp 4 --dp 2 --enable-dp-attention` runs on 4 devices (attention groups split the TP ranks);
    without --enable-dp-attention the same sizes need 8."""
    plant(tree, "disaggregatedset-chat-a5.yaml", "--disaggregation-mode, decode]",
          "--disaggregation-mode, decode, --dp-size, \"2\", --enable-dp-attention]")
    assert validate_tree(tree).findings == []


def test_shipped_crd_schemas_record_their_source():
    from infra.validators.schema import crd_validator, crds

    known = crds()
    assert {("leaderworkerset.x-k8s.io/v1", "LeaderWorkerSet"), ("disaggregatedset.x-k8s.io/v1", "DisaggregatedSet"),
            ("scheduling.volcano.sh/v1beta1", "PodGroup"), ("keda.sh/v1alpha1", "ScaledObject"),
            ("inference.networking.k8s.io/v1", "InferencePool"), ("nvidia.com/v1alpha1", "DynamoGraphDeployment"),
            ("serving.kserve.io/v1alpha1", "LLMInferenceService")} <= set(known)
    for (api, kind), crd in known.items():
        assert crd.source.startswith("https://github.com/") and crd.release
        assert crd_validator(api, kind) is not None


def test_shipped_chart_values_schemas_record_their_source():
    from infra.validators.schema import charts, values_validator

    known = charts()
    assert "llm-d-modelservice" in known
    for name, chart in known.items():
        assert chart.source.startswith("https://github.com/") and "commit" in chart.release
        assert values_validator(name) is not None


def test_volcano_podgroup_is_checked_against_volcano_not_kubernetes():
    """kubernetes-validate alone looks PodGroup up by the group's first label and finds Kubernetes' own
    scheduling.k8s.io PodGroup, refusing a valid Volcano object; routing by exact apiVersion avoids that."""
    import kubernetes_validate

    from infra.validators.manifests import read_file
    from infra.validators.schema import check_object

    m = read_file(GOOD / BASE / "podgroup-chat-a1.yaml", "pg.yaml")[0][0]
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(m.data, "1.37", strict=True)
    assert check_object(m) == []
    m.data["spec"]["minMember"] = "two"
    assert [f.rule for f in check_object(m)] == ["SCH002"]


@pytest.mark.parametrize("text,rule,line", [
    (b"apiVersion: v1\nkind: Service\nmetadata:\n  name: x\n  name: y\nspec: {}\n", "YAML001", 5),
    (b"apiVersion: v1\nkind: Service\nmetadata:\n  name: !!custom x\n", "YAML001", 4),
    (b"\xff\xfe bad", "YAML001", 1),
    (b"---\n---\napiVersion: v1\nkind: ConfigMap\nmetadata: {name: a}\n---\n- 1\n", "YAML002", 7),
    (b"apiVersion: v1\nmetadata: {name: a}\n", "YAML002", 1),
], ids=["duplicate-key", "tag", "not-utf8", "list-document", "no-kind"])
def test_unreadable_input_is_a_located_finding(tmp_path: Path, text: bytes, rule: str, line: int):
    path = tmp_path / "bad.yaml"
    path.write_bytes(text)
    report = validate_tree(path)
    assert [(f.rule, f.line, f.file) for f in report.findings] == [(rule, line, str(path))]
    assert not report.ok
