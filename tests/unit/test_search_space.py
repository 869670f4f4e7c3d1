"""The layouts DeepSeek-class models are served with are in the planner's search space, and each renders as its
engine launches it: attention data parallelism with wide expert parallelism, decode workers of their own layout,
and workers spread over a scale-up domain wider than a node."""

from __future__ import annotations

from pathlib import Path

from infra import api
from infra.planner.search import search
from infra.planner.types import load_plan
from infra.validators import validate_tree

PROFILE = """apiVersion: infra.dev/v1alpha1
kind: ClusterProfile
metadata: {{name: nvl}}
spec:
  conventions:
    crds:
      leaderworkerset: leaderworkerset.x-k8s.io/v1
  pools:
    - name: gb200
      device: GB200
      nodes: 18
      devices_per_node: 4
      price: $10.5/h
      multi_node: true
      topology: {{scale_up_domain: {domain}}}
"""

INTENT = """apiVersion: infra.dev/v1alpha1
kind: ServingIntent
metadata: {{name: dsv3}}
spec:
  cluster: {{profile: profile.yaml}}
  services:
    - name: v3
      model: deepseek-ai/DeepSeek-V3
      workload: {{rate: 20/s, input_tokens: 2000, output_tokens: 800}}
      slo:
        ttft: {{p99: 3s}}
        tpot: {{p99: 80ms}}
      preferences:
        frameworks: [{frameworks}]
"""


def _intent(write, domain: str = "nvl72-rack-1", frameworks: str = "sglang, vllm, trtllm") -> Path:
    write("profile.yaml", PROFILE.format(domain=domain))
    return write("intent.yaml", INTENT.format(frameworks=frameworks))


def _shapes(path: Path) -> set[tuple[str, str]]:
    """(framework, layout) of every shape the planner scored or refused."""
    _, considered, _, _ = search(api.load_intent(path))
    return {(c.framework, c.parallel) for c in considered}


def test_attention_dp_wide_ep_and_own_decode_layouts_are_searched(write):
    shapes = _shapes(_intent(write))
    # Inside a tray: attention groups over its four devices with the experts over all of them.
    assert ("sglang", "tp1-ep4-dp4") in shapes and ("vllm", "tp1-ep4-dp4") in shapes
    # Decode workers of their own layout beside a tensor-parallel prefill worker; with 2.5 prompt tokens per
    # output token, no unit with more prefill than decode workers.
    assert ("sglang", "P tp8-ep8 + 2xD tp1-ep8-dp8") in shapes
    assert not any("xP" in lay for _, lay in shapes)
    # Over the NVL72 domain: tensor and expert parallelism across trays, and attention DP where the engine starts
    # it as one tensor-parallel world (SGLang); vLLM runs each attention group as its own core and is not offered
    # it across nodes.
    assert {("sglang", "tp16-ep16"), ("sglang", "tp1-ep16-dp16"), ("vllm", "tp16-ep16")} <= shapes
    assert ("vllm", "tp1-ep16-dp16") not in shapes
    # TensorRT-LLM states no multi-node launch flags: none of its shapes spans trays (the renderer would refuse).
    assert not any(fw == "trtllm" and ("pp" in lay or "16" in lay or "tp8" in lay) for fw, lay in shapes)


def test_without_a_shared_domain_workers_span_nodes_only_by_pipeline_stages(write):
    write("profile.yaml", PROFILE.format(domain="x").replace("      topology: {scale_up_domain: x}\n", ""))
    path = write("intent.yaml", INTENT.format(frameworks="sglang"))
    wide = {lay for _, lay in _shapes(path) if "xD" not in lay and "pp" not in lay and lay != "-"}
    assert wide and all(int(part[2:]) <= 4 for lay in wide for part in lay.split("-") if part[:2] in ("tp", "ep", "dp"))


def test_the_planned_wide_ep_layout_renders_as_its_engine_launches_it(write, tmp_path):
    api.plan(_intent(write, frameworks="sglang"), tmp_path / "out", top=0)
    plan = load_plan(tmp_path / "out" / "plan.yaml")
    alloc = plan.spec.services[0].allocations[0]
    layouts = [alloc.parallel] + ([alloc.decode_parallel] if alloc.decode_parallel else [])
    wide = next(p for p in layouts if p.attention_dp > 1)
    text = "\n".join(p.read_text() for p in sorted((tmp_path / "out" / "manifests").rglob("*.yaml")))
    # SGLang's DP attention splits its TP ranks: the TP size counts every device of the worker.
    assert "--enable-dp-attention" in text
    assert f"- --tp-size\n          - '{wide.tp * wide.attention_dp}'" in text
    assert f"- --dp-size\n          - '{wide.attention_dp}'" in text
    report = validate_tree(tmp_path / "out" / "manifests", plan=tmp_path / "out" / "plan.yaml")
    assert not report.errors, [f.message for f in report.errors]


def test_long_prompts_and_short_answers_try_prefill_heavy_units(write):
    write("profile.yaml", PROFILE.format(domain="nvl72-rack-1"))
    path = write("intent.yaml", INTENT.format(frameworks="sglang, vllm").replace(
        "input_tokens: 2000, output_tokens: 800", "input_tokens: 16000, output_tokens: 200"))
    shapes = _shapes(path)
    assert ("sglang", "4xP tp4-ep4 + 1xD tp1-ep4-dp4") in shapes and ("vllm", "2xP tp4 + 1xD tp4") in shapes
