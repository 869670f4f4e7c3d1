"""Pipeline checks: rendered pipelines pass against their plans, and each planted defect in a stage's config,
connectors, Service or CPU workload is caught by its rule (PIP001-PIP005, and the stage engine's PLN004/SEM006)."""

from __future__ import annotations

from pathlib import Path

import pytest

from infra.planner.types import load_plan
from infra.render import render_plan
from infra.validators import validate_tree
from infra.validators.rules import RULES

from ..conftest import ROOT
from .test_validators_plan import _edit, write_files

GOLDEN = ROOT / "tests" / "golden"
SPEECH = GOLDEN / "omni-speech" / "plan.yaml"
VIDEO = GOLDEN / "video-dit" / "plan.yaml"
VISION = GOLDEN / "vision-language" / "plan.yaml"
TALKER = "voice-talker/base/configmap-voice-talker-stage.yaml"
CODE2WAV = "voice-code2wav/base/configmap-voice-code2wav-stage.yaml"
PREPROCESS = "vl-preprocess/base/deployment-vl-preprocess.yaml"
PREPROCESS_STAGE = "      kind: cpu\n      after: []\n      streams: false\n      budget_ms: {}\n      cpu_cores: 1\n"
CPU_IMAGE = ("      image: registry.example.com/doc-preprocess:1.4.2\n      command: [python3, -m, preprocess.server]\n"
             "      port: 8080\n")


def _vision_with_image(tmp_path: Path) -> Path:
    plan = tmp_path / "plan.yaml"
    text = VISION.read_text()
    assert PREPROCESS_STAGE in text
    plan.write_text(text.replace(PREPROCESS_STAGE, PREPROCESS_STAGE + CPU_IMAGE, 1))
    return plan


def _rendered(plan: Path, root: Path) -> Path:
    return write_files(render_plan(load_plan(plan)), root)


@pytest.mark.parametrize("plan", [SPEECH, VIDEO])
def test_rendered_pipelines_pass(tmp_path: Path, plan: Path):
    report = validate_tree(_rendered(plan, tmp_path / "m"), plan=plan)
    assert report.findings == [], [str(f) for f in report.findings]


def test_cpu_stage_without_image_is_a_warning_naming_the_field(tmp_path: Path):
    report = validate_tree(_rendered(VISION, tmp_path / "m"), plan=VISION)
    assert report.errors == [], [str(f) for f in report.errors]
    [hit] = report.warnings
    assert hit.rule == "PIP004" and hit.field == "spec.pipelines[0].stages[0].image" and hit.line > 1


def test_cpu_stage_with_image_passes(tmp_path: Path):
    plan = _vision_with_image(tmp_path)
    report = validate_tree(_rendered(plan, tmp_path / "m"), plan=plan)
    assert report.findings == [], [str(f) for f in report.findings]


# (rule, plan, file to edit, old, new)
DEFECTS = [
    ("PIP001", SPEECH, TALKER, "  name: voice-talker-stage\n", "  name: voice-talker-config\n"),
    ("PIP001", SPEECH, TALKER, "  stage.yaml: |", "  other.yaml: |"),
    ("PIP001", VIDEO, "t2v-dit/base/deployment-t2v-dit-a0.yaml", "          name: t2v-dit-stage\n",
     "          name: t2v-dit-config\n"),
    ("PIP002", VIDEO, "t2v-dit/base/configmap-t2v-dit-stage.yaml", "        sp: 8\n", "        sp: 4\n"),
    ("PIP002", SPEECH, TALKER, "    stage: talker\n", "    stage: thinker\n"),
    ("PIP003", SPEECH, TALKER, "      stage: code2wav\n      service: voice-code2wav\n",
     "      stage: audio-in\n      service: voice-audio-in\n"),
    ("PIP003", SPEECH, TALKER, "voice-code2wav.inference.svc.cluster.local:8091",
     "voice-code2wav.inference.svc.cluster.local:9000"),
    ("PIP003", SPEECH, TALKER, "voice-code2wav.inference.svc.cluster.local",
     "voice-codec.inference.svc.cluster.local"),
    ("PIP003", SPEECH, CODE2WAV, "    final_output: true\n", "    final_output: false\n"),
    ("PIP004", "cpu", PREPROCESS, "            memory: 2Gi\n          requests:",
     "            memory: 2Gi\n            nvidia.com/gpu: 1\n          requests:"),
    ("PIP004", "cpu", PREPROCESS, "            cpu: '1'\n            memory: 2Gi\n        securityContext",
     "            cpu: 500m\n            memory: 2Gi\n        securityContext"),
    ("PIP005", SPEECH, "voice-code2wav/base/service-voice-code2wav.yaml",
     "    infra.dev/service: voice-code2wav\n    infra.dev/role", "    infra.dev/service: voice-talker\n    infra.dev/role"),
    ("PLN004", VIDEO, "t2v-dit/base/deployment-t2v-dit-a0.yaml", "        - --usp\n        - '8'\n",
     "        - --usp\n        - '4'\n"),
    ("PLN004", VIDEO, "t2v-dit/base/deployment-t2v-dit-a0.yaml", "        - Wan-AI/Wan2.1-T2V-14B-Diffusers\n",
     "        - Wan-AI/Wan2.1-T2V-14B\n"),
    ("PLN004", SPEECH, "voice-code2wav/base/deployment-voice-code2wav-a0.yaml",
     "        - Qwen/Qwen3-Omni-30B-A3B-Instruct\n", "        - Qwen/Qwen2.5-Omni-7B\n"),
]


@pytest.mark.parametrize("rule,plan,file,old,new", DEFECTS, ids=[f"{d[0]}-{i}" for i, d in enumerate(DEFECTS)])
def test_planted_pipeline_defect_is_caught(tmp_path: Path, rule: str, plan, file: str, old: str, new: str):
    if plan == "cpu":
        plan = _vision_with_image(tmp_path)
    tree = _rendered(plan, tmp_path / "m")
    _edit(tree / file, old, new)
    report = validate_tree(tree, plan=plan)
    hits = [f for f in report.findings if f.rule == rule]
    assert hits, f"{rule} missed; found {[str(f) for f in report.findings]}"
    assert hits[0].severity == RULES[rule].severity and hits[0].line >= 1 and hits[0].fix


def test_sequence_parallel_degree_counts_towards_the_devices(tmp_path: Path):
    """The DiT pod of the allocation holds sp=8 devices with TP 1: SEM006 accepts it only with --usp 8 read back."""
    tree = _rendered(VIDEO, tmp_path / "m")
    _edit(tree / "t2v-dit/base/deployment-t2v-dit-a0.yaml", "        - --usp\n        - '8'\n", "")
    rules = {f.rule for f in validate_tree(tree, plan=VIDEO).errors}
    assert {"SEM006", "PLN004"} <= rules
