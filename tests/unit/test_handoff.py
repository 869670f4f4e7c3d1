"""Hand-offs between pipeline stages, co-location of stage pairs, CPU stages on CPU pools, and device quirks."""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import pytest

from infra import api
from infra.catalog.loader import load_catalog
from infra.catalog.schema import Quirk
from infra.errors import InfeasibleError, IntentError
from infra.intent.models import StageWork
from infra.intent.profile import Nic
from infra.perf.handoff import Site, network_link, node_link, transfer, units_per_request
from infra.perf.shape import Parallel
from infra.planner import colocate, pipeline, search
from infra.planner.candidates import enumerate_candidates, quirk_refusals, tp_refusal, wanted_precisions
from infra.planner.pipeline import plan_units
from infra.planner.plan import build_plan
from infra.planner.solve import Solution

ROOT = Path(__file__).resolve().parents[2]
COLOCATED = ROOT / "tests" / "fixtures" / "pipelines" / "colocated-vision.yaml"


def _nic(kind: str, gbps: float) -> Nic:
    return Nic.model_validate({"name": "n0", "kind": kind, "bandwidth": f"{gbps}Gbps"})


def test_units_per_request_follow_the_stage_work():
    work = StageWork.model_validate({"images": 3, "audio": "8s", "video_frames": 81})
    assert units_per_request("image", work) == 3
    assert units_per_request("audio_second", work) == 8
    assert units_per_request("video_frame", work) == 81
    assert units_per_request("request", work) == 1
    assert units_per_request("token", work, output_tokens=180.0, stage_tokens=100) == 180
    assert units_per_request("token", work, stage_tokens=100) == 100
    with pytest.raises(Exception, match="output_tokens"):
        units_per_request("token", StageWork())


def test_transfer_times_by_link():
    a = Site("a", "z1", "s1", (_nic("infiniband", 400),))
    b = Site("b", "z1", "s1", (_nic("infiniband", 400),))
    rdma = network_link(a, b)
    assert rdma.kind == "switch" and rdma.bandwidth_gbs == pytest.approx(50 * 0.9)
    tcp = network_link(a, Site("c", "z1", None, (_nic("roce", 200),)))
    assert tcp.bandwidth_gbs == pytest.approx(25 * 0.7)  # InfiniBand to RoCE falls back to TCP
    far = network_link(a, Site("d", "z2", None, (_nic("infiniband", 400),)))
    assert far.kind == "zone" and far.bandwidth_gbs == pytest.approx(1.25) and far.latency_s > rdma.latency_s
    bare = network_link(Site("e", None, None, ()), Site("f", None, None, ()))
    assert bare.bandwidth_gbs == pytest.approx(25 / 8 * 0.7)
    h200 = load_catalog().device("H200")
    nvlink = node_link(h200)
    assert nvlink.kind == "node" and nvlink.bandwidth_gbs == pytest.approx(h200.interconnect.bandwidth_gbs.value / 2)
    t = transfer(rdma, 1e6, 10)
    assert t.first_s == pytest.approx(rdma.latency_s + 1e6 / 45e9)
    assert t.total_s == pytest.approx(rdma.latency_s + 1e7 / 45e9)
    assert t.charged(True) == t.first_s and t.charged(False) == t.total_s


def test_small_handoffs_stay_on_the_network():
    resolved = api.load_intent(ROOT / "examples" / "omni-speech.yaml")
    units = plan_units(resolved.services[0], resolved)
    assert not any(u.colocate for u in units)
    assert all("over the network" in u.note for u in units[:-1])


def test_a_heavy_handoff_colocates_the_pair_and_the_split_charges_the_node_link():
    resolved = api.load_intent(COLOCATED)
    vision, llm = plan_units(resolved.services[0], resolved)
    assert vision.colocate and not llm.colocate
    assert vision.network is not None and vision.handoff is not None
    assert vision.network.total_s > pipeline.COLOCATE_SHARE * 0.9
    assert vision.handoff.link.kind == "node" and vision.handoff.total_s < vision.network.total_s / 10
    # The 1500 ms first token covers the encoder, the node hand-off and the LLM's first token.
    assert vision.full["p99"] + vision.handoff.total_s + llm.first["p99"] == pytest.approx(1.5, rel=1e-6)


def test_colocation_is_refused_when_a_node_cannot_hold_both(tmp_path):
    one = tmp_path / "one-gpu-nodes.yaml"
    one.write_text(COLOCATED.read_text().replace("devices_per_node: 4", "devices_per_node: 1"))
    resolved = api.load_intent(one)
    units = plan_units(resolved.services[0], resolved)
    assert not units[0].colocate
    assert "co-location wanted but impossible" in units[0].note and "exceed a node of 1" in units[0].note
    assert units[0].handoff is units[0].network


def test_colocated_stages_land_on_the_same_nodes():
    plan, _ = build_plan(api.load_intent(COLOCATED), top=0)
    spec = plan.document()["spec"]
    stages = {s["stage"]: s for s in spec["services"]}
    vision = {n for a in stages["vision"]["allocations"] for n in a["placement"]}
    llm = {n for a in stages["llm"]["allocations"] for n in a["placement"]}
    assert vision == llm and vision
    pipe = spec["pipelines"][0]
    first = pipe["stages"][0]
    assert first["colocated_with"] == "llm" and first["handoff"]["link"] in ("node", "device")
    assert first["handoff"]["total_ms"] < 10
    # Every node holds whole bundles: devices of both stages on a node never exceed the node.
    for node in vision:
        used = sum(a["placement"].get(node, 0) * a["devices_per_worker"] * (a.get("share") or 1)
                   for s in stages.values() for a in s["allocations"])
        assert used <= 4


def test_cpu_stage_goes_to_the_cheapest_cpu_pool_with_the_cores(tmp_path):
    (tmp_path / "profiles").mkdir()
    profile = ROOT / "examples" / "profiles" / "edge-small-gpus.yaml"
    (tmp_path / "profiles" / profile.name).write_text(profile.read_text())
    # 40x the load: 120 requests/s with the default headroom x 35 ms / 70% = 7 cores.
    text = (ROOT / "examples" / "vision-language.yaml").read_text().replace("rate: 3/s", "rate: 120/s")
    (tmp_path / "vl.yaml").write_text(text)
    resolved = api.load_intent(tmp_path / "vl.yaml")
    base = resolved.loaded.cluster.cpu_pools[0]
    dear = base.model_copy(update={"name": "cpu-dear", "price": base.price * 2})
    small = base.model_copy(update={"name": "cpu-small", "nodes": 1, "price": base.price / 2,
                                    "cpu": base.cpu.model_copy(update={"cores": 4, "reserved_cores": 2})})
    resolved.loaded.cluster.cpu_pools[:] = [dear, small, base]
    units = {rs.service.name: plan_units(rs, resolved) for rs in resolved.services}
    placed = pipeline.place_cpu(resolved, units)["vl-preprocess"]
    headroom = resolved.services[0].service.availability.headroom
    assert placed.cores == math.ceil(120 * (1 + headroom) * 0.035 / 0.7) == 7
    # cpu-small holds 2 usable cores on its one node: too few; of the rest the cheaper wins, 1 node of 30 cores.
    assert placed.pool is not None and placed.pool.name == "cpu" and placed.nodes == 1
    assert placed.cost_per_hour == pytest.approx(base.price)


def test_cpu_stage_without_a_cpu_pool_is_requested_anywhere():
    resolved = api.load_intent(ROOT / "examples" / "vision-language.yaml")
    resolved.loaded.cluster.cpu_pools.clear()
    plan, _ = build_plan(resolved, top=0)
    stage = plan.document()["spec"]["pipelines"][0]["stages"][0]
    assert stage["cpu_cores"] >= 1 and "pool" not in stage
    assert any("requests its cores on any node" in a for a in plan.document()["spec"]["assumptions"])


def test_cpu_stage_is_charged_in_the_pipeline():
    plan, _ = build_plan(api.load_intent(ROOT / "examples" / "vision-language.yaml"), top=0)
    spec = plan.document()["spec"]
    pipe = spec["pipelines"][0]
    cpu = pipe["stages"][0]
    assert cpu["pool"] == "cpu" and cpu["nodes"] == 1 and cpu["cost_per_hour"] == pytest.approx(1.43)
    models = sum(s["cost_per_hour"] for s in spec["services"])
    assert pipe["cost_per_hour"] == pytest.approx(models + 1.43, abs=1e-4)
    assert spec["cost"]["by_pool"]["cpu"] == pytest.approx(1.43)
    assert spec["cluster"]["cpu_pools"][0]["usable_cores_per_node"] == 30


def test_framework_scoped_precision_quirk_refuses_and_falls_back():
    catalog = load_catalog()
    device = catalog.device("L40S").model_copy(update={"quirks": [Quirk(
        id="no-bf16-vllm", description="bf16 kernels missing", unsupported_precisions=["bf16"],
        frameworks=["vllm"], source="https://example.org/q")]})
    vllm, sglang = catalog.framework("vllm"), catalog.framework("sglang")
    assert "bf16" in device.precisions and "bf16" not in device.precisions_for("vllm")
    assert "bf16" in device.precisions_for("sglang")
    model = catalog.model("Qwen3-8B")
    assert quirk_refusals([], model, device, vllm) == [
        ("bf16", "vllm on L40S: bf16 not supported (quirk no-bf16-vllm)")]
    assert quirk_refusals([], model, device, sglang) == []
    assert wanted_precisions([], model, device, vllm) == ["fp16"]


def test_max_tp_quirk_refuses_larger_layouts():
    catalog = load_catalog()
    device = catalog.device("L40S")
    fw = catalog.framework("vllm")
    capped = device.model_copy(update={"quirks": [Quirk(id="tp-cap", description="tp above 2 hangs", max_tp=2,
                                                        frameworks=["vllm"], source="https://example.org/x")]})
    assert tp_refusal(capped, fw, Parallel(tp=2)) == ""
    assert tp_refusal(capped, fw, Parallel(tp=4)) == (
        "vllm on L40S: tp4 above the largest TP known to work, 2 (quirk tp-cap)")
    assert tp_refusal(capped, catalog.framework("sglang"), Parallel(tp=4)) == ""


def _one_pool_intent(tmp_path: Path, device: str, framework: str) -> Path:
    """An intent serving Qwen3-8B with one framework on one node of one device type."""
    intent = tmp_path / "intent.yaml"
    intent.write_text(f"""apiVersion: infra.dev/v1alpha1
kind: ServingIntent
metadata: {{name: one-pool}}
spec:
  cluster:
    pools:
      - {{name: pool, device: {device}, nodes: 1, devices_per_node: 4}}
  services:
    - name: chat
      model: Qwen3-8B
      workload: {{rate: 1/s, input_tokens: 512, output_tokens: 128}}
      slo: {{ttft: {{p99: 5s}}}}
      preferences: {{frameworks: [{framework}]}}
""")
    return intent


def test_candidates_record_quirk_refusals(tmp_path):
    intent = _one_pool_intent(tmp_path, "Ascend-310P", "vllm-ascend")
    cands, seen = enumerate_candidates(api.load_intent(intent))
    assert any(s.outcome == "vllm-ascend on Ascend-310P: bf16 not supported (quirk experimental-vllm-ascend)"
               for s in seen)
    assert all(c.precision != "bf16" for c in cands)


def test_bundle_sizes_pack_like_single_replicas():
    pool = api.load_intent(COLOCATED).loaded.cluster.pools[0]
    assert colocate.sizes(pool) == [1, 2, 4, 8, 16]  # quarter, half, 1, 2 and 4 devices of a 4-device node
    # 1-device encoders (capacity 1) and a 2-device LLM (capacity 3): in 4 devices, two encoders and one LLM.
    assert colocate._fill([4, 8], [1.0, 3.0], 16) == ((2, 1), 2.0)
    assert colocate._fill([4, 8], [1.0, 3.0], 8) is None  # no room for one of each in 2 devices
    assert colocate._fill([2, 2], [1.0, 1.0], 4) == ((1, 1), 1.0)


def test_bundles_turn_back_into_stage_replicas():
    resolved = api.load_intent(COLOCATED)
    cands, _, _, pipes = search.search(resolved)
    found = [c for c in cands if isinstance(c, colocate.Bundle)]
    assert found and all(c.service == "pages-vision+llm" for c in found)
    assert not any(c.service in ("pages-vision", "pages-llm") for c in cands)
    assert pipeline.solved_units(pipes["pages"]) == ["pages-vision+llm"]
    b = found[0]
    assert b.consumption == sum(m.consumption * k for m, k in b.members)
    assert b.capacity == pytest.approx(min(m.capacity * k for m, k in b.members))
    sol = Solution("OPTIMAL", {b.key: 2}, 0.0, 0.0, 0.0, 0.0)
    stage_sol, stage_cands = colocate.unbundle(sol, cands)
    assert stage_sol.replicas == dict(sorted({m.key: 2 * k for m, k in b.members}.items()))
    assert {m.key for m, _ in b.members} <= {c.key for c in stage_cands}
    nodes = colocate.member_nodes({b.key: {"gpu-01": 2}}, cands, sol)
    assert all(nodes[m.key] == {"gpu-01": 2 * k} for m, k in b.members)


def test_max_tp_quirk_from_a_catalog_overlay_is_listed_in_the_report(tmp_path):
    overlay = tmp_path / "catalog" / "devices"
    overlay.mkdir(parents=True)
    (overlay / "l40s.yaml").write_text("""name: L40S
quirks:
  - id: tp-hang
    description: tensor parallelism above 1 hangs on these PCIe hosts
    max_tp: 1
    frameworks: [vllm]
    source: https://example.org/l40s-tp
""")
    intent = _one_pool_intent(tmp_path, "L40S", "vllm")
    resolved = api.load_intent(intent, (tmp_path / "catalog",))
    cands, seen = enumerate_candidates(resolved)
    assert cands and all(c.parallel.tp == 1 for c in cands)
    why = "vllm on L40S: tp2 above the largest TP known to work, 1 (quirk tp-hang)"
    assert any(s.outcome == why for s in seen)
    plan, considered = build_plan(resolved, top=0)
    from infra.report.plan import plan_markdown
    assert why in plan_markdown(plan, considered)


@pytest.mark.parametrize("cpu_pool, message", [
    ("{name: cpu, cpu: {cores: 4, memory: 16Gi, reserved_cores: 4}, nodes: 1, price: $1/h}",
     "reserved_cores is 4 but a node has 4 cores"),
    ("{name: l40s, cpu: {cores: 32, memory: 64Gi}, nodes: 1, price: $1/h}", "pool names repeat: l40s"),
    ("{name: cpu, cpu: {cores: 32, memory: 64Gi}, nodes: 0, price: $1/h}", "nodes is 0"),
])
def test_bad_cpu_pools_are_refused_at_their_line(tmp_path, cpu_pool, message):
    profile = tmp_path / "profile.yaml"
    profile.write_text(f"""apiVersion: infra.dev/v1alpha1
kind: ClusterProfile
metadata: {{name: p}}
spec:
  pools:
    - {{name: l40s, device: L40S, nodes: 1, devices_per_node: 4}}
  cpu_pools:
    - {cpu_pool}
""")
    with pytest.raises(IntentError) as err:
        api.check(profile)
    assert any(message in p.message and p.location.file == str(profile) and p.location.line >= 6
               for p in err.value.problems), err.value.problems


def test_slices_of_one_device_hand_off_through_its_memory():
    resolved = api.load_intent(COLOCATED)
    cands, _, _, _ = search.search(resolved)
    (vision, _), (llm, _) = next(c for c in cands if isinstance(c, colocate.Bundle)).members
    halves = [[dataclasses.replace(vision, share=0.5, parallel=Parallel())],
              [dataclasses.replace(llm, share=0.5, parallel=Parallel())]]
    found = colocate.bundles("g", halves, {p.name: p for p in resolved.loaded.cluster.pools})
    one = [b for b in found if b.slots == 4]
    assert one and one[0].in_one_device and one[0].workers_on("l40s") == [(1, 1.0, 1)]
    assert [k for _, k in one[0].members] == [1, 1]


def test_a_run_with_no_bundle_is_searched_again_apart(monkeypatch):
    monkeypatch.setattr(search, "bundles", lambda *args: [])
    cands, _, _, pipes = search.search(api.load_intent(COLOCATED))
    vision, llm = pipes["pages"]
    assert not vision.colocate and vision.handoff is vision.network
    assert "fit one node together" in vision.note and "network hand-off is charged" in vision.note
    # Budgets split with the network hand-off: 1500 ms = encoder + 212 ms over the network + first token.
    assert vision.full["p99"] + vision.network.total_s + llm.first["p99"] == pytest.approx(1.5, rel=1e-6)
    assert {c.service for c in cands} == {"pages-vision", "pages-llm"}
    assert pipeline.solved_units(pipes["pages"]) == ["pages-vision", "pages-llm"]


def test_a_budget_relaxation_counts_the_cpu_nodes(tmp_path):
    (tmp_path / "profiles").mkdir()
    profile = ROOT / "examples" / "profiles" / "edge-small-gpus.yaml"
    (tmp_path / "profiles" / profile.name).write_text(profile.read_text())
    text = (ROOT / "examples" / "vision-language.yaml").read_text()
    (tmp_path / "vl.yaml").write_text(text.replace("        fractional_sharing: true\n",
                                                   "        fractional_sharing: true\n      budget:\n"
                                                   "        per_hour: $2/h\n"))
    full, _ = build_plan(api.load_intent(ROOT / "examples" / "vision-language.yaml"), top=0)
    with pytest.raises(InfeasibleError) as err:
        build_plan(api.load_intent(tmp_path / "vl.yaml"), top=0)
    want = f"feasible with service vl's budget at ${full.spec.cost.per_hour:.2f}/h instead of $2.00/h"
    assert any(p.message == want for p in err.value.problems), err.value.problems
