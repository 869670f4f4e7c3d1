"""Measured percentiles calibrate the spread of TTFT and TPOT: which percentile a point's requests support, the
fit of what it adds to the model's spread, and estimates that carry it (E2E included)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from rich.console import Console

from infra.bench.measurements import read_measurements
from infra.catalog.loader import load_catalog
from infra.catalog.metrics import MIN_TAIL
from infra.perf.calibration import tails_at
from infra.perf.correction import NO_TAIL, NO_TAILS, dump, load_calibration, spread_by, with_tails
from infra.perf.estimate import estimate
from infra.perf.recalibrate import EVIDENCE, Measured, document, fit, predict_tails, prepare
from infra.perf.rows import Case
from infra.perf.serving import PERCENTILES, Prediction, z_of
from infra.perf.shape import Deployment, Parallel, Role, Workload
from infra.report.calibration import print_calibration

CAT = load_catalog()
DEP = Deployment("Llama-3.1-8B", "H100", "vllm", "bf16", agg=Role(Parallel(tp=1), batch_cap=256))
Z99 = z_of("p99")


def _pred(ttft: dict[str, float], tpot: dict[str, float], e2e: dict[str, float]) -> Prediction:
    return Prediction(ttft, tpot, tpot, e2e, 1.0, 10.0, 4.0, 0.5, True, {"agg": 1})


def test_a_wider_tail_adds_a_normal_spread_and_a_narrower_one_scales_the_model_s():
    values = {"mean": 1.0, "p50": 0.9, "p90": 1.5, "p95": 1.8, "p99": 2.4, "p99.9": 3.0}
    wider = spread_by(values, (1.0, 0.1))
    assert wider["mean"] == 1.0 and wider["p50"] == 0.9
    for p in ("p90", "p95", "p99", "p99.9"):
        assert wider[p] == pytest.approx(values[p] + 0.1 * z_of(p))
    narrower = spread_by(values, (0.25, 0.0))
    for p in PERCENTILES:
        assert narrower[p] == pytest.approx(1.0 + 0.25 * (values[p] - 1.0))
    ordered = [narrower[p] for p in PERCENTILES]
    assert ordered == sorted(ordered)
    assert spread_by(values, NO_TAIL) is values


def test_e2e_percentiles_take_the_new_tpot_tail_as_the_model_composes_them():
    flat = {"mean": 0.02, **dict.fromkeys(PERCENTILES, 0.02)}
    ttft = {"mean": 0.2, "p50": 0.2, "p90": 0.3, "p95": 0.35, "p99": 0.5, "p99.9": 0.6}
    e2e = {"mean": 4.2, "p50": 4.2, "p90": 4.3, "p95": 4.35, "p99": 4.5, "p99.9": 4.6}
    pred = _pred(ttft, flat, e2e)
    out = with_tails(pred, (NO_TAIL, (1.0, 0.1)), osl=201)
    assert out.ttft == ttft and out.tpot["p50"] == 0.02
    assert out.tpot["p99"] == pytest.approx(0.02 * (1 + 0.1 * Z99))
    decode = 200 * (out.tpot["p99"] - 0.02)
    # The old excess was the TTFT's alone (a flat TPOT): the new one adds the decode tail in quadrature.
    assert out.e2e["p99"] == pytest.approx(4.2 + (0.3 ** 2 + decode ** 2) ** 0.5)
    assert out.e2e["mean"] == 4.2 and out.e2e["p50"] == 4.2
    assert with_tails(pred, NO_TAILS, osl=201) is pred


def _measured(clients: int, tails: dict[str, float], samples: int, source: str, narrow: float = 1.0) -> Measured:
    """A point measured at the prior's means, with percentiles `narrow` times the prior's spread and `tails` means
    (per normal quantile) beyond it."""
    wl = Workload(isl=1000, osl=200, concurrency=clients)
    p = estimate(DEP, wl, CAT).prediction

    def measured(metric: str, pct: str) -> float:
        values = getattr(p, metric)
        mean = values["mean"]
        return 1000 * (mean + narrow * (values[pct] - mean) + tails[metric] * z_of(pct) * mean)

    pcts = tuple((metric, pct, measured(metric, pct)) for metric in ("ttft", "tpot")
                 for pct in ("p50", "p90", "p95", "p99"))
    case = Case({"source": source}, "vllm/H100", DEP.model, DEP, wl, p.ttft["mean"] * 1000, p.tpot["mean"] * 1000,
                recipe=False, tails=pcts, samples=samples)
    return Measured(case, source, "2026-12-01")


def test_the_fit_reads_what_the_measured_percentiles_add_to_the_model_spread():
    points = [_measured(c, {"ttft": 0.2, "tpot": 0.05}, 2000, f"run:{c}") for c in (4, 16)]
    rows, skipped = prepare(points, CAT)
    assert not skipped
    assert [r.tails()[0][1] for r in rows] == ["p99", "p99"]
    deployment = next(n for n in fit(rows) if n.level == "deployment")
    assert deployment.tails is not None
    weight = 2 / (2 + EVIDENCE["deployment"])
    # The means were the prior's, so the step and TTFT corrections are ~none and the tails are the added spread.
    assert deployment.tails.ttft.add == pytest.approx(weight * 0.2, rel=0.05) and deployment.tails.ttft.scale == 1
    assert deployment.tails.tpot.add == pytest.approx(weight * 0.05, rel=0.05)
    nodes = fit(rows)
    for r in rows:
        for metric, _, measured, predicted in predict_tails(r, nodes):
            # What the shrinkage leaves: a ninth of the added spread.
            added = {"ttft": 0.2, "tpot": 0.05}[metric] * Z99 * getattr(r.m.case, f"{metric}_ms")
            assert abs(predicted - measured) <= 1.2 * (1 - weight) * added
        for _, _, measured, prior in predict_tails(r, None):
            assert prior < measured


def test_a_measured_spread_narrower_than_the_model_s_scales_it_down():
    rows, _ = prepare([_measured(c, {"ttft": 0.0, "tpot": 0.0}, 2000, f"run:{c}", narrow=0.3) for c in (4, 16)],
                      CAT)
    deployment = next(n for n in fit(rows) if n.level == "deployment")
    weight = 2 / (2 + EVIDENCE["deployment"])
    # TTFT has a spread in the model to scale (TPOT is flat in a closed loop: nothing to narrow, nothing added).
    assert deployment.tails.ttft.scale == pytest.approx(1 - weight * 0.7, rel=0.05)
    assert deployment.tails.ttft.add == 0


@pytest.mark.parametrize("samples,want", [(2000, "p99"), (1000, "p99"), (999, "p95"), (200, "p95"), (100, "p90"),
                                          (99, None)])
def test_a_point_is_fitted_on_the_highest_percentile_its_requests_support(samples: int, want: str | None):
    rows, _ = prepare([_measured(8, {"ttft": 0.1, "tpot": 0.1}, samples, "run:1")], CAT)
    got = {pct for _, pct, _ in rows[0].tails()}
    assert got == ({want} if want else set())
    if want:
        q = float(want[1:])
        assert samples * (100 - q) >= 100 * MIN_TAIL
    node = next(n for n in fit(rows) if n.level == "deployment")
    assert (node.tails is None) == (want is None)


def test_a_calibration_file_carries_its_tails_to_estimates(tmp_path: Path):
    rows, _ = prepare([_measured(c, {"ttft": 0.3, "tpot": 0.08}, 1500, f"run:{c}") for c in (4, 16)], CAT)
    doc = document("tails", rows, [{"path": "run.jsonl", "sha256": "0" * 64, "format": "infra-bench",
                                    "points": 2, "skipped": []}])
    assert doc.error.tails is not None
    assert doc.error.tails.calibrated.ttft_median_ape < doc.error.tails.prior.ttft_median_ape
    assert doc.error.tails.calibrated.tpot_median_ape < doc.error.tails.prior.tpot_median_ape
    assert doc.points[0].tails and doc.points[0].tails[0].percentile == "p99"
    path = tmp_path / "cal.yaml"
    path.write_text(dump(doc), encoding="utf-8")
    cal = load_calibration(path)
    wl = Workload(isl=1000, osl=200, concurrency=8)
    correction = cal.correction(DEP, wl)
    assert correction is not None and correction.tails[0][1] > 0.25 and correction.tails[1][1] > 0.06
    assert "measured percentiles: TTFT p99 +" in correction.describe()
    # Measured at 4 and 16 clients, each load has its own; at 8, half way between them in log load.
    assert [(kind, x) for kind, x, _ in correction.tail_loads] == [("concurrency", 4.0), ("concurrency", 16.0)]
    assert "(measured at 2 loads, in between by load)" in correction.describe()
    at8 = tails_at(correction.tails, correction.tail_loads, 8, None)
    (lo, hi) = (t for _, _, t in correction.tail_loads)
    assert at8[0][1] == pytest.approx((lo[0][1] + hi[0][1]) / 2)
    plain = estimate(DEP, wl, CAT).prediction
    spread = estimate(DEP, wl, CAT, correction=correction).prediction
    for metric, (scale, add) in zip(("ttft", "tpot"), at8):
        before, after = getattr(plain, metric), getattr(spread, metric)
        assert scale == 1
        assert after["p99"] / after["mean"] == pytest.approx(before["p99"] / before["mean"] + add * Z99, rel=0.02)
    assert spread.e2e["p99"] > plain.e2e["p99"]
    console = Console(record=True, width=200)
    print_calibration(console, doc, None)
    text = console.export_text()
    assert "tails: what the measured percentiles" in text and "error of measured TTFT / TPOT percentiles (p99" in text


def test_tails_belong_to_the_deployment_level_only(tmp_path: Path):
    rows, _ = prepare([_measured(8, {"ttft": 0.1, "tpot": 0.1}, 1500, "run:1")], CAT)
    doc = document("tails", rows, [{"path": "run.jsonl", "sha256": "0" * 64, "format": "infra-bench",
                                    "points": 1, "skipped": []}])
    text = dump(doc).replace("  step:", "  tails: {ttft: {add: 0.1}}\n  step:", 1)
    path = tmp_path / "cal.yaml"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(Exception) as exc:
        load_calibration(path)
    assert "only a deployment-level correction has loads or tails" in str(exc.value)


def test_a_saved_run_records_each_allocation_s_percentiles_and_calibration_reads_them(tmp_path: Path):
    line = {"kind": "case", "case": {"model": "Llama-3.1-8B", "device": "H100-SXM", "framework": "vllm",
                                     "precision": "bf16", "mode": "agg", "tp": 1, "batch": 64, "isl": 1000,
                                     "osl": 200, "concurrency": 8},
            "requests": 1200, "ttft_ms": 80.0, "tpot_ms": 9.0,
            "percentiles": {"ttft_ms": {"p50": 75.0, "p90": 110.0, "p99": 160.0},
                            "tpot_ms": {"p50": 9.0, "p99": 11.5, "p99.9": "x"}}}
    path = tmp_path / "run.jsonl"
    path.write_text(json.dumps(line) + "\n", encoding="utf-8")
    src = read_measurements(path, None, CAT)
    case = src.points[0].case
    assert case.samples == 1200
    assert set(case.tails) == {("ttft", "p50", 75.0), ("ttft", "p90", 110.0), ("ttft", "p99", 160.0),
                               ("tpot", "p50", 9.0), ("tpot", "p99", 11.5)}


@pytest.mark.parametrize("pcts,why", [
    ({"p50": 75.0, "p99": 5e7}, "ttft p99 5e+07 ms is outside"),
    ({"p50": 75.0, "p90": 60.0}, "ttft p90 60 ms is below its p50 75 ms"),
])
def test_implausible_percentiles_are_dropped_and_said_so(tmp_path: Path, pcts: dict[str, float], why: str):
    line = {"kind": "case", "case": {"model": "Llama-3.1-8B", "device": "H100-SXM", "framework": "vllm",
                                     "precision": "bf16", "mode": "agg", "tp": 1, "isl": 1000, "osl": 200,
                                     "concurrency": 8},
            "requests": 1200, "ttft_ms": 80.0, "tpot_ms": 9.0,
            "percentiles": {"ttft_ms": pcts, "tpot_ms": {"p50": 9.0, "p99": 11.5}}}
    path = tmp_path / "run.jsonl"
    path.write_text(json.dumps(line) + "\n", encoding="utf-8")
    src = read_measurements(path, None, CAT)
    [m] = src.points
    assert m.case.tails == () and m.case.ttft_ms == 80.0
    assert len(src.skipped) == 1 and why in src.skipped[0] and "its means are" in src.skipped[0]


def test_tails_measured_at_several_loads_follow_the_load_in_between_and_hold_the_nearest_beyond():
    one = ((0.8, 0.1), (1.0, 0.2))
    loads = (("concurrency", 2.0, ((1.0, 0.2), (1.0, 0.1))), ("concurrency", 8.0, ((0.5, 0.0), (1.0, 0.3))))
    assert tails_at(one, loads, 2, None) == loads[0][2] and tails_at(one, loads, 32, None) == loads[1][2]
    (ttft, tpot) = tails_at(one, loads, 4, None)  # half way in log load
    assert ttft == pytest.approx((0.75, 0.1)) and tpot == pytest.approx((1.0, 0.2))
    # An open loop is not a closed one, and one load says nothing of a course: the deployment's pair stands.
    assert tails_at(one, loads, None, 4.0) == one and tails_at(one, loads[:1], 4, None) == one
