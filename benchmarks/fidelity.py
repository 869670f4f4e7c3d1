"""Replay measured deployments through the performance model and report its error.

    python benchmarks/fidelity.py --csv PATH [--json]

PATH is any CSV in the silicon_calibration.csv format (shared/data/README.md), including rows of models and
systems the model was never fitted to (any model in the catalog). Prints the rows used and skipped (with reasons),
then the median and p90 absolute percentage error of mean TTFT and TPOT, overall and by mode, backend, system and
model, and the data's own repeatability: rows that record the same deployment and workload but were measured
apart, each scored against the others (the floor under any model of the recorded inputs); the error left within
load sweeps (rows of one deployment and workload at several loads, each sweep's own level divided out: how well
the predictions follow the load, apart from the level the recorded columns do not explain); and the share of rows
inside the committed error band (p5..p95 of the held-out ratios of the calibration's leave-one-model-out fit).
Last, which way the predictions lean (median measured / predicted by mode, prompt length, clients and the aggregated
rows' parallel sizes; above 1 the model is optimistic). With --json the last line is one JSON object with at least n,
skipped, ttft_median_ape, ttft_p90_ape, tpot_median_ape, tpot_p90_ape (and repeatability, within_sweeps,
band_coverage, lean). Leave-one-model-out figures come from
`benchmarks/calibrate.py --lomo`.

Rows are read as their engines ran them (`infra.perf.rows`):
- a batch per tensor-parallel rank when the clients fill whole batches of the ranks (TRT-LLM's attention data
  parallelism), and as many replicas as whole batches for a dense model;
- the smallest layout that holds the weights when a row records every degree as 1 for a model no single device
  holds, and tensor parallelism over moe_tp devices when a row records tp as moe_tp x ep beyond one node and that
  tp cannot split the heads;
- data-parallel attention over the expert devices when a MoE row records experts over more devices than
  attention and no attention-DP degree (vLLM's tp 1 with moe_tp 2);
- a disaggregated row of the dated sweeps that records no workers runs the published recipe that ran at its
  client count (`infra/perf/data/sweep_recipes.json`: workers, layouts, decode batches, speculative decoding);
  where recipes of several layouts did, the geometric mean of their predictions;
- a row without `silicon_concurrency` runs as many clients as its batches hold (a disaggregated one: its decode
  batches, workers and attention-DP ranks), and a MoE role with no expert degrees recorded shards its experts
  over all of its devices;
- precision spellings of the quantization tools (nvfp4, bfloat16, fp8_block, w4a16 ...) map to the catalog's,
  falling back to `gemm_quant_mode`;
- an SGLang aggregated row with data-parallel attention prefills its default --chunked-prefill-size divided among
  the attention groups, as SGLang divides it (16384 // 72 = 227 tokens a step per group on a GB200 rack).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from infra.catalog.loader import load_catalog  # noqa: E402
from infra.errors import InfraError  # noqa: E402
from infra.fitting.replay import band_coverage, lean, repeatability, replay, summarize, within_sweeps  # noqa: E402
from infra.perf.calibration import table  # noqa: E402
from infra.perf.rows import load_rows  # noqa: E402


def _pct(v: float | None) -> str:
    return "    -" if v is None else f"{100 * v:5.1f}%"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--csv", required=True, help="measurements in the silicon_calibration.csv format")
    ap.add_argument("--json", action="store_true", help="end with one JSON line of the figures")
    args = ap.parse_args()
    try:
        rows = load_rows(args.csv)
    except InfraError as exc:
        print(f"error: {exc.problems[0]}", file=sys.stderr)
        return 1
    results, skipped = replay(rows, load_catalog())
    s = summarize(results, skipped)
    cal = table()
    print(f"calibration fitted {cal.get('fitted', 'never')} on {cal.get('data', '-')}")
    print(f"rows {len(rows)}: used {s['n']}, skipped {s['skipped']} ({100 * s['skipped_fraction']:.1f}%)")
    for why, n in s["skip_reasons"].items():
        print(f"  skipped {n:4d}: {why}")
    print(f"{'':24s} {'n':>5s}  {'TTFT med':>8s} {'TTFT p90':>8s}  {'TPOT med':>8s} {'TPOT p90':>8s}")

    def line(name: str, b: dict) -> None:
        print(f"{name:24s} {b['n']:5d}  {_pct(b['ttft_median_ape']):>8s} {_pct(b['ttft_p90_ape']):>8s}  "
              f"{_pct(b['tpot_median_ape']):>8s} {_pct(b['tpot_p90_ape']):>8s}")

    line("overall", s)
    for key in ("by_mode", "by_backend", "by_system", "by_model"):
        for name, block in s[key].items():
            line(f"{key[3:]} {name}", block)
    floor = repeatability(rows)
    if floor["n"]:
        line("repeated runs", floor)
        print(f"  ({floor['n']} rows in {floor['groups']} groups record the same deployment and workload but were "
              "measured apart; each is scored against the others' geometric mean: the floor under any model)")
    sweeps = within_sweeps(results)
    if sweeps["n"]:
        line("within load sweeps", sweeps)
        print(f"  ({sweeps['n']} rows in {sweeps['sweeps']} sweeps of one deployment and workload over the load, each "
              "sweep's median measured / predicted divided out: the error in how latency follows the load)")
    cover = band_coverage(results)
    if cover["ttft"] is not None:
        print(f"within the error band: TTFT {_pct(cover['ttft']).strip()}, TPOT {_pct(cover['tpot']).strip()} of rows "
              "(p5..p95 of held-out models' measured / predicted; on rows the fit saw, expect more)")
    leaning = lean(results)
    print(f"{'which way it leans':24s} {'n':>5s}  {'TTFT':>8s} {'TPOT':>8s}   (median measured / predicted: above 1, "
          "optimistic)")
    for name, block in leaning.items():
        print(f"{name:24s} {block['n']:5d}  {block['ttft']:8.2f} {block['tpot']:8.2f}")
    if args.json:
        keep = ("n", "skipped", "skipped_fraction", "ttft_median_ape", "ttft_p90_ape", "tpot_median_ape",
                "tpot_p90_ape", "by_mode", "by_backend", "by_system", "by_model")
        print(json.dumps({**{k: s[k] for k in keep}, "repeatability": floor, "within_sweeps": sweeps,
                          "band_coverage": cover, "lean": leaning},
                         sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
