"""`infra estimate` as a user runs it: flags, JSON, batches of cases, goodput capacity, and clean refusals."""

from __future__ import annotations

import json

from .test_cli import infra

BASE = ["estimate", "--model", "Llama-3.1-70B", "--device", "H200", "--framework", "vllm", "--precision", "fp8",
        "--tp", "4", "--isl", "2k", "--osl", "256"]


def test_estimate_closed_loop_json():
    out = infra(*BASE, "--concurrency", "32", "--json")
    assert out.returncode == 0, out.stderr
    r = json.loads(out.stdout)
    assert r["model"] == "Llama-3.1-70B" and r["workload"]["concurrency"] == 32
    assert 0 < r["ttft_ms"]["mean"] < 60_000 and 0 < r["tpot_ms"]["mean"] < 1000
    assert r["calibrated"] is True and r["devices"] == 4
    [wave] = [n for n in r["notes"] if n.startswith("closed loop:")]
    assert "share fitted to the measured such loops" in wave  # fixed lengths: the clients stay in step
    # Lengths that vary dephase the clients: served for good, the loop has no first wave, which a benchmark of
    # 640 requests adds back.
    varied = {n: json.loads(infra(*BASE, "--isl-cv", "0.5", "--concurrency", "32", *n, "--json").stdout)
              for n in ((), ("--requests", "640"))}
    assert "its steady state" in " ".join(varied[()]["notes"])
    assert varied[()]["ttft_ms"]["p99"] < varied[("--requests", "640")]["ttft_ms"]["p99"]
    # A run of 64 requests puts half of them in its 32 clients' first wave: its TTFT is longer than at the fitted
    # share, and one of 640 requests' shorter; the decodes are the same.
    runs = {n: json.loads(infra(*BASE, "--concurrency", "32", "--requests", str(n), "--json").stdout)
            for n in (64, 640)}
    assert "50% of the requests (32 clients over 64 requests)" in " ".join(runs[64]["notes"])
    assert runs[64]["ttft_ms"]["mean"] > r["ttft_ms"]["mean"] > runs[640]["ttft_ms"]["mean"]
    assert runs[64]["tpot_ms"] == r["tpot_ms"] == runs[640]["tpot_ms"]


def test_estimate_table_and_open_loop():
    out = infra(*BASE, "--rate", "3/s", "--isl-cv", "0.5", "--arrival-cv", "1.5")
    assert out.returncode == 0, out.stderr
    assert "TTFT" in out.stdout and "p99" in out.stdout and "calibrated" in out.stdout


def test_max_rate():
    out = infra(*BASE, "--max-rate", "--slo", "ttft_p99=2s,tpot_p99=60ms", "--json")
    assert out.returncode == 0, out.stderr
    r = json.loads(out.stdout)
    assert r["max_rate_rps"] > 0
    assert r["at_max_rate"]["ttft_ms"]["p99"] <= 2000.5 and r["at_max_rate"]["tpot_ms"]["p99"] <= 60.01


def _strict(text: str) -> dict:
    """JSON as the standard has it: no Infinity or NaN, which jq and most parsers refuse."""
    def refuse(constant: str) -> None:
        raise ValueError(f"non-standard JSON constant {constant}")
    return json.loads(text, parse_constant=refuse)


def test_an_overloaded_deployment_is_strict_json_with_null_metrics():
    out = infra(*BASE, "--rate", "500/s", "--json")
    assert out.returncode == 0, out.stderr
    r = _strict(out.stdout)
    assert r["stable"] is False and r["ttft_ms"]["mean"] is None and r["e2e_ms"]["p99"] is None
    table = infra(*BASE, "--rate", "500/s")
    assert "unstable" in table.stdout and "inf" not in table.stdout


def test_max_rate_that_no_rate_meets_names_what_a_trickle_misses():
    out = infra(*BASE, "--max-rate", "--slo", "ttft_p99=1ms,tpot_p99=1s", "--json")
    assert out.returncode == 0, out.stderr
    r = _strict(out.stdout)
    assert r["max_rate_rps"] == 0 and "at_max_rate" not in r and r["trickle_rps"] > 0
    assert list(r["missed_at_trickle_ms"]) == ["ttft_p99"] and r["missed_at_trickle_ms"]["ttft_p99"] > 1
    table = infra(*BASE, "--max-rate", "--slo", "ttft_p99=1ms,tpot_p99=1s")
    assert "no rate meets" in table.stdout and "ttft_p99" in table.stdout


def test_objectives_without_max_rate_are_checked_at_the_load_given():
    out = infra(*BASE, "--concurrency", "32", "--slo", "ttft_p99=60s,tpot_p50=1ms", "--json")
    assert out.returncode == 0, out.stderr
    check = json.loads(out.stdout)["slo_check"]
    assert check["ttft_p99"]["met"] is True and check["ttft_p99"]["predicted_ms"] < 60_000
    assert check["tpot_p50"]["met"] is False and check["tpot_p50"]["predicted_ms"] > 1
    table = infra(*BASE, "--concurrency", "32", "--slo", "ttft_p99=60s,tpot_p50=1ms")
    assert "objective tpot_p50 1.0 ms" in table.stdout and "missed" in table.stdout


def test_cases_file(tmp_path):
    cases = tmp_path / "cases.jsonl"
    good = {"model": "Qwen/Qwen3-32B", "device": "H100-SXM", "framework": "sglang", "precision": "fp8", "tp": 2,
            "isl": 1024, "osl": 128, "concurrency": 16}
    disagg = {"model": "DeepSeek-V3", "device": "H200", "framework": "sglang", "precision": "fp8", "mode": "disagg",
              "prefill": {"tp": 8, "ep": 8}, "decode": {"tp": 8, "ep": 8, "workers": 2}, "isl": "2k", "osl": 512,
              "rate": "4/s"}
    bad_shape = {**good, "tp": 3}
    bad_field = {**good, "tensor_parallel": 2}
    cases.write_text("\n".join(json.dumps(c) for c in (good, disagg, bad_shape, bad_field)) + "\n\n")
    out = infra("estimate", "--cases", str(cases))
    assert out.returncode == 1  # some lines failed
    lines = [json.loads(line) for line in out.stdout.splitlines()]
    assert [x["line"] for x in lines] == [1, 2, 3, 4]
    assert "ttft_ms" in lines[0] and lines[1]["workers"]["decode"] == 2
    assert "does not divide" in lines[2]["error"]
    assert "unknown field" in lines[3]["error"] and "cases.jsonl:4" in lines[3]["error"]


def test_refusals_are_one_line_with_a_fix():
    for args, fragment in (
        (["estimate", "--model", "Llama-3.1-70B", "--device", "H100-SXM", "--precision", "bf16", "--isl", "1k",
          "--osl", "100", "--concurrency", "1"], "does not fit"),
        (["estimate", "--model", "Llama-3.1-70", "--device", "H200", "--isl", "1k", "--osl", "1",
          "--concurrency", "1"], "did you mean"),
        ([*BASE], "exactly one of concurrency"),
        ([*BASE, "--rate", "3/fortnight"], "unknown rate unit"),
        ([*BASE, "--rate", "0/s"], "rate must be above 0"),
        ([*BASE, "--rate", "5/s", "--isl-cv", "1e308"], "isl_cv: Input should be less than or equal to 100"),
        ([*BASE, "--rate", "5/s", "--arrival-cv", "inf"], "arrival_cv: Input should be a finite number"),
        ([*BASE, "--max-rate", "--slo", "ttft_p99=2"], "no unit"),
        ([*BASE, "--concurrency", "4", "--max-num-tokens", "0"], "max_num_tokens"),
        ([*BASE, "--concurrency", "4", "--max-rate", "--slo", "ttft_p99=2s"], "drop concurrency"),
        ([*BASE, "--concurrency", "4", "--prefill", "tp=4"], "set mode disagg"),
        ([*BASE, "--concurrency", "4", "--mode", "disagg", "--prefill", "tpp=4", "--decode", "tp=4"],
         "prefill.tpp: unknown field — To fix: fields are tp, pp, ep, moe_tp, dp, batch, workers, max_num_tokens\n"),
        (["estimate", "--device", "H200"], "missing --model"),
    ):
        out = infra(*args)
        assert out.returncode == 1, (args, out.stdout)
        assert fragment in out.stderr and "To fix" in out.stderr and "Traceback" not in out.stderr, out.stderr
