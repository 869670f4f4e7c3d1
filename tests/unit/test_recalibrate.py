"""A user's calibration: the step correction stretches every step, the fit is shrunk level by level, the
corrections are matched most specific first, and the file round-trips."""

from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path

import pytest
from rich.console import Console

from infra.catalog.loader import load_catalog
from infra.errors import InfraError
from infra.perf.arch import compile_worker
from infra.perf.calibration import Factors, lookup, ttft_at
from infra.perf.correction import dump, level_keys, load_calibration, match, scaled, with_ttft
from infra.perf.estimate import estimate
from infra.perf.recalibrate import EVIDENCE, Measured, document, fit, fits, leave_one_load_out, predict, prepare
from infra.perf.rows import Case
from infra.perf.shape import Deployment, Parallel, Role, Workload
from infra.report.calibration import print_calibration

CAT = load_catalog()
DEP = Deployment("Llama-3.1-8B", "H100", "vllm", "bf16", agg=Role(Parallel(tp=1), batch_cap=256))


@pytest.mark.parametrize("model,par", [("Llama-3.1-70B", Parallel(tp=4)), ("DeepSeek-R1", Parallel(tp=8, ep=8))])
def test_the_step_correction_stretches_every_term_of_a_step(model: str, par: Parallel):
    base = Factors(moe_ns=20.0, expert_step_us=3.0)
    for step in (0.5, 1.7):
        a = compile_worker(CAT.model(model), CAT.device("H200"), "fp8", par, base)
        b = compile_worker(CAT.model(model), CAT.device("H200"), "fp8", par, scaled(base, step))
        for args in ((8, 2000), (64, 4000, 512, 256), (1, 100, 4096, 2048)):
            assert b.step(*args) == pytest.approx(step * a.step(*args), rel=1e-9)


def _measured(ttft: float, tpot: float, clients: int = 16, isl: int = 1000, dep: Deployment = DEP,
              source: str = "run.jsonl:1") -> Measured:
    case = Case({"source": source}, f"{dep.framework}/{dep.device}", dep.model, dep,
                Workload(isl=isl, osl=200, concurrency=clients), ttft, tpot, recipe=False)
    return Measured(case, source, "2026-11-30")


def _prior(clients: int = 16, isl: int = 1000, dep: Deployment = DEP) -> tuple[float, float]:
    p = estimate(dep, Workload(isl=isl, osl=200, concurrency=clients), CAT).prediction
    return p.ttft["mean"] * 1000, p.tpot["mean"] * 1000


def test_one_point_moves_its_deployment_nearly_all_the_way_and_the_device_half_way():
    ttft, tpot = _prior()
    rows, skipped = prepare([_measured(1.5 * ttft, 1.3 * tpot)], CAT)
    assert not skipped
    nodes = {n.level: n for n in fit(rows)}
    assert set(nodes) == {"device", "framework", "model", "deployment"}
    # The point asks for the step under which the model predicts its TPOT: half of it at the device level.
    asked = rows[0].step
    assert rows[0].run(math.exp(asked))[1] == pytest.approx(1.3 * tpot, rel=2e-3)
    assert math.log(nodes["device"].step) == pytest.approx(asked / (1 + EVIDENCE["device"]), rel=1e-3)
    share = 1 - math.prod(EVIDENCE[k] / (1 + EVIDENCE[k]) for k in nodes)
    assert math.log(nodes["deployment"].step) == pytest.approx(share * asked, rel=1e-3)
    got_ttft, got_tpot = predict(rows[0], fit(rows))
    assert got_tpot == pytest.approx(1.3 * tpot, rel=0.03)
    assert got_ttft == pytest.approx(1.5 * ttft, rel=0.03)


def test_a_deployment_many_times_slower_than_its_catalog_device_is_corrected_in_full():
    """An engine on a slice of the device (two cores of a CPU socket, a share of a GPU) runs tens of times the
    step the catalog's device would: the correction follows it, and the TTFT left is read at that step."""
    packaged = lookup("vllm", CAT.device("H100"), CAT.framework("vllm").calibration_from).factors
    points = []
    for clients in (1, 6):
        slow = estimate(DEP, Workload(isl=1000, osl=200, concurrency=clients), CAT, factors=scaled(packaged, 30.0))
        points.append(_measured(slow.prediction.ttft["mean"] * 1000, slow.prediction.tpot["mean"] * 1000, clients,
                                source=f"slow:{clients}"))
    rows, _ = prepare(points, CAT)
    assert [math.exp(r.step) for r in rows] == pytest.approx([30.0, 30.0], rel=0.01)
    deployment = next(n for n in fit(rows) if n.level == "deployment")
    assert deployment.step > 20 and 0.8 < deployment.ttft < 1.25
    for r in rows:
        got = predict(r, fit(rows))
        assert got[0] == pytest.approx(r.m.case.ttft_ms, rel=0.3) and got[1] == pytest.approx(r.m.case.tpot_ms,
                                                                                             rel=0.15)
    # Plans for whole devices would inherit the device's share of it: the file says so.
    doc = document("slow", rows, [{"path": "slow", "sha256": "0" * 64, "format": "infra-bench", "points": 2}])
    assert [n.split(":")[0] for n in doc.notes] == ["H100"]
    assert "5.48 times as long" in doc.notes[0]
    console = Console(record=True, width=400)
    print_calibration(console, doc, None)
    assert "note: H100: the measured engines' steps take 5.48 times as long" in console.export_text()


def test_many_deployments_pin_their_own_levels_and_share_only_what_they_agree_on():
    other = Deployment("Llama-3.1-70B", "H100", "vllm", "fp8", agg=Role(Parallel(tp=4), batch_cap=256))
    points = []
    for clients in (4, 16, 64):
        t, p = _prior(clients)
        points.append(_measured(1.2 * t, 1.2 * p, clients, source=f"a:{clients}"))
        t, p = _prior(clients, dep=other)
        points.append(_measured(0.8 * t, 0.8 * p, clients, dep=other, source=f"b:{clients}"))
    rows, _ = prepare(points, CAT)
    nodes = fit(rows)
    by = {(n.level, n.key): n for n in nodes}
    device = by[("device", "H100")]
    # The two disagree: the device keeps about the middle, each model its own side.
    assert 0.9 < device.step < 1.1
    assert by[("model", "Llama-3.1-8B/vllm/H100")].step > 1.05
    assert by[("model", "Llama-3.1-70B/vllm/H100")].step < 0.95
    deployments = sorted((n.step for n in nodes if n.level == "deployment"))
    assert deployments[0] < 0.85 and deployments[1] > 1.15
    # A third model on the framework and device takes what they share, not either model's.
    third = Deployment("Qwen3-32B", "H100", "vllm", "bf16", agg=Role(Parallel(tp=2)))
    rows3, _ = prepare([_measured(*_prior(8, dep=third), clients=8, dep=third)], CAT)
    assert match(nodes, third, rows3[0].m.case.workload).level == "framework"


def test_above_the_deployment_the_step_correction_leaves_the_priors_ttft():
    """A deployment whose decodes run 1.6 times the prior's steps and whose TTFT the prior had right: another
    workload of it (matched at the model level) takes the slower steps for its TPOT, and its TTFT stays the
    prior's rather than stretching with the steps."""
    t, p = _prior(16, 1000)
    rows, _ = prepare([_measured(t, 1.6 * p, 16, 1000)], CAT)
    nodes = fit(rows)
    by = {n.level: n for n in nodes}
    assert by["model"].step > 1.3 and by["model"].ttft < 0.85
    t4, p4 = _prior(16, 4000)
    other, _ = prepare([_measured(t4, p4, 16, 4000)], CAT)
    assert match(nodes, DEP, other[0].m.case.workload).level == "model"
    ttft, tpot = predict(other[0], nodes)
    stretched = other[0].run(by["model"].step)[0]
    assert stretched > 1.3 * t4
    assert ttft == pytest.approx(t4, rel=0.1)
    assert tpot > 1.3 * p4


def test_the_deployment_level_matches_only_a_near_workload():
    t, p = _prior(16, 1000)
    rows, _ = prepare([_measured(1.5 * t, 1.3 * p, 16, 1000)], CAT)
    nodes = fit(rows)
    assert match(nodes, DEP, Workload(isl=1100, osl=210, rate=3.0)).level == "deployment"
    assert match(nodes, DEP, Workload(isl=4000, osl=200, rate=3.0)).level == "model"
    assert match(nodes, DEP, None).level == "model"
    moved = Deployment("Llama-3.1-8B", "H100", "vllm", "bf16", agg=Role(Parallel(tp=2)))
    assert match(nodes, moved, Workload(isl=1000, osl=200, rate=3.0)).level == "model"
    assert level_keys(moved)["deployment"].endswith("/tp2")


def test_the_calibration_file_round_trips_and_is_deterministic(tmp_path):
    points = [_measured(*(1.2 * v for v in _prior(c)), c, source=f"run.jsonl:{c}") for c in (4, 16, 64)]
    other = Deployment("Llama-3.1-8B", "H100", "vllm", "bf16", agg=Role(Parallel(tp=1), batch_cap=256))
    points.append(_measured(*(1.1 * v for v in _prior(16, 4000, other)), 16, 4000, other, source="run.jsonl:99"))
    rows, _ = prepare(points, CAT)
    sources = [{"path": "run.jsonl", "sha256": "0" * 64, "format": "infra-bench", "points": 4}]
    doc = document("mine", rows, sources)
    text = dump(doc)
    assert dump(document("mine", prepare(points, CAT)[0], sources)) == text
    assert doc.error.calibrated.tpot_median_ape < doc.error.prior.tpot_median_ape
    assert doc.notes == []
    assert doc.error.leave_one_out is not None and doc.error.leave_one_out.n == 4
    path = tmp_path / "cal.yaml"
    path.write_text(text)
    cal = load_calibration(path)
    assert cal.doc == doc
    c = cal.correction(DEP, Workload(isl=1000, osl=200, rate=2.0))
    assert c.level == "deployment" and c.rows == 3 and c.measured == "2026-11-30"
    assert "3 measured load point(s)" in c.describe()
    est = estimate(DEP, Workload(isl=1000, osl=200, concurrency=16), CAT, correction=c)
    assert est.to_json()["measured_calibration"] == c.describe()
    assert est.prediction.tpot["mean"] * 1000 == pytest.approx(1.2 * _prior(16)[1], rel=0.05)


def test_a_bad_calibration_file_is_one_located_line(tmp_path):
    path = tmp_path / "cal.yaml"
    path.write_text("apiVersion: infra.dev/v1alpha1\nkind: ServingIntent\n")
    with pytest.raises(InfraError) as exc:
        load_calibration(path)
    assert len(exc.value.problems) == 1 and "not a calibration file" in str(exc.value.problems[0])
    path.write_text("apiVersion: infra.dev/v1alpha1\nkind: Calibration\nmetadata: {name: x}\n")
    with pytest.raises(InfraError) as exc:
        load_calibration(path)
    assert str(exc.value.problems[0]).startswith(f"{path}:")
    with pytest.raises(InfraError):
        load_calibration(tmp_path / "missing.yaml")


def test_a_ttft_correction_moves_e2e_by_the_same_time():
    p = estimate(DEP, Workload(isl=1000, osl=200, concurrency=16), CAT).prediction
    q = with_ttft(p, 2.0)
    assert q.ttft["p99"] == pytest.approx(2 * p.ttft["p99"])
    assert q.e2e["mean"] - p.e2e["mean"] == pytest.approx(p.ttft["mean"])
    assert q.tpot == p.tpot


def test_a_calibrated_deployment_reports_the_narrower_band_its_evidence_supports(tmp_path):
    t, p = _prior(16)
    rows, _ = prepare([_measured(1.3 * t, 1.2 * p, 16)], CAT)
    doc = document("mine", rows, [{"path": "run.jsonl", "sha256": "0" * 64, "format": "infra-bench", "points": 1}])
    assert doc.error.leave_one_load_out is None
    path = tmp_path / "cal.yaml"
    path.write_text(dump(doc))
    cal = load_calibration(path)
    wl = Workload(isl=1000, osl=200, concurrency=16)
    plain = estimate(DEP, wl, CAT).to_json()["error_band"]
    exact = estimate(DEP, wl, CAT, correction=cal.correction(DEP, wl)).to_json()
    band = exact["error_band"]
    assert band["basis"].startswith("after calibrating on one load of the same deployment and workload")
    width = band["tpot_mean_ms"][1] / band["tpot_mean_ms"][0]
    assert width < plain["tpot_mean_ms"][1] / plain["tpot_mean_ms"][0]
    # Another model on the device is corrected only through the device: the band stays the prior's.
    other = Deployment("Qwen3-32B", "H100", "vllm", "bf16", agg=Role(Parallel(tp=2)))
    far = estimate(other, wl, CAT, correction=cal.correction(other, wl)).to_json()
    assert far["measured_calibration"] and not far["error_band"]["basis"].startswith("after calibrating")


def test_a_hand_edited_deployment_correction_without_its_workload_is_refused_at_its_line(tmp_path):
    text = (Path(__file__).resolve().parents[2] / "examples" / "calibrations" / "chat-h100.yaml").read_text()
    path = tmp_path / "cal.yaml"
    path.write_text(text.replace("  isl: 256.0\n", "", 1))
    with pytest.raises(InfraError) as exc:
        load_calibration(path)
    assert "deployment-level correction needs isl" in str(exc.value.problems[0])
    assert str(exc.value.problems[0]).startswith(f"{path}:")


def test_the_ttft_multiplier_follows_the_measured_loads_in_between_and_holds_the_nearest_beyond():
    loads = (("rate", 2.0, 1.2), ("rate", 8.0, 1.8))
    assert ttft_at(1.5, loads, None, 2.0) == pytest.approx(1.2)
    assert ttft_at(1.5, loads, None, 4.0) == pytest.approx(math.sqrt(1.2 * 1.8))  # half way in log load
    assert ttft_at(1.5, loads, None, 0.5) == 1.2 and ttft_at(1.5, loads, None, 50.0) == 1.8
    # A closed loop is not an open one: the level's one multiplier stands.
    assert ttft_at(1.5, loads, 16, None) == 1.5 and ttft_at(1.5, loads[:1], None, 4.0) == 1.5


def test_a_deployment_measured_at_several_loads_keeps_how_its_ttft_grows_with_them(tmp_path):
    # The engine's TTFT runs 1.2x the model's at 4 clients and 2x at 64: one multiplier would split the difference.
    grow = {4: 1.2, 16: 1.55, 64: 2.0}
    points = [_measured(grow[c] * _prior(c)[0], _prior(c)[1], c, source=f"run.jsonl:{c}") for c in grow]
    rows, _ = prepare(points, CAT)
    doc = document("mine", rows, [{"path": "run.jsonl", "sha256": "0" * 64, "format": "infra-bench", "points": 3}])
    [node] = [n for n in doc.corrections if n.level == "deployment"]
    assert [p.concurrency for p in node.loads] == [4, 16, 64]
    assert [p.ttft for p in node.loads] == pytest.approx(list(grow.values()), rel=0.05)
    assert doc.error.calibrated.ttft_median_ape < 0.05
    # In-sample the loads fit by construction; each predicted from the others says how far they carry.
    unseen = doc.error.leave_one_load_out
    assert unseen is not None and unseen.n == 3 and unseen.ttft_median_ape > doc.error.calibrated.ttft_median_ape
    path = tmp_path / "cal.yaml"
    path.write_text(dump(doc))
    cal = load_calibration(path)
    wl = Workload(isl=1000, osl=200, concurrency=8)
    correction = cal.correction(DEP, wl)
    assert "at 4 clients" in correction.describe() and "at 64 clients" in correction.describe()
    got = estimate(DEP, wl, CAT, correction=correction).prediction.ttft["mean"]
    plain = estimate(DEP, wl, CAT, correction=replace(correction, ttft_loads=())).prediction.ttft["mean"]
    assert got / plain == pytest.approx(math.sqrt(1.2 * 1.55) / correction.ttft, rel=0.05)
    # Loads of two kinds, or out of order, are refused at the file's line.
    path.write_text(dump(doc).replace("  - concurrency: 16\n", "  - rate: 16.0\n"))
    with pytest.raises(InfraError) as exc:
        load_calibration(path)
    assert "loads must be of one kind" in str(exc.value.problems[0])


def test_windows_at_nearby_loads_are_one_load_of_the_ttft_multipliers():
    """A day observed in windows has a load per window: those within 10% of the lowest of their group are one
    load (the group's median, at its points' median multiplier), and leaving a load out leaves the group out."""
    rates = {10.0: 1.2, 10.4: 1.3, 10.9: 1.25, 20.0: 1.8, 21.0: 1.9}
    points = []
    for rate, miss in rates.items():
        wl = Workload(isl=1000, osl=200, rate=rate)
        p = estimate(DEP, wl, CAT).prediction
        case = Case({"source": f"day.jsonl:{rate}"}, "vllm/H100", DEP.model, DEP, wl, miss * p.ttft["mean"] * 1000,
                    p.tpot["mean"] * 1000, recipe=False)
        points.append(Measured(case, f"day.jsonl:{rate}", "2026-12-05"))
    rows, _ = prepare(points, CAT)
    doc = document("day", rows, [{"path": "day.jsonl", "sha256": "0" * 64, "format": "infra-bench", "points": 5}])
    [node] = [n for n in doc.corrections if n.level == "deployment"]
    assert [p.rate for p in node.loads] == [10.4, 20.5]
    assert [p.ttft for p in node.loads] == pytest.approx([1.25, 1.85], rel=0.05)
    held = leave_one_load_out(rows)
    assert held is not None and len(held) == 5 and len({id(nodes) for _, nodes in held}) == 2


def test_folds_fitted_together_are_each_fold_fitted_alone():
    """`fits` makes every fold's predictions in vector passes before any fold's TTFT corrections: the nodes are
    those of `fit` on each fold, made on rows that predicted nothing yet."""
    other = Deployment("Llama-3.1-70B", "H100", "vllm", "fp8", agg=Role(Parallel(tp=4), batch_cap=256))
    points = [_measured(f * t, g * p, clients, dep=dep, source=f"{dep.model}:{clients}")
              for dep, f, g in ((DEP, 1.3, 1.2), (other, 0.8, 0.9)) for clients in (2, 4, 8, 16, 32, 64, 128)
              for t, p in (_prior(clients, dep=dep),)]
    rows = prepare(points, CAT)[0]
    together = fits([[r for k, r in enumerate(rows) if k % 5 != i] for i in range(5)])
    alone = [fit([r for k, r in enumerate(prepare(points, CAT)[0]) if k % 5 != i]) for i in range(5)]
    assert together == alone
    assert len({n.ttft for nodes in together for n in nodes if n.level == "deployment"}) > 2
