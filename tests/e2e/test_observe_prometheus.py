"""`infra observe --prometheus`: a real Prometheus server (Debian's `prometheus` package, which `.ci/run` installs)
scrapes two engines (emulators) while traffic runs; observe reads the window back from it, and verify judges a
plan on it."""

from __future__ import annotations

import contextlib
import json
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import yaml

from infra.bench.observe import TPOT, TTFT
from infra.bench.scrape import snapshot

from ..bench_servers import emulator, stop
from .test_calibrate_cli import LOOP, PROFILE
from .test_cli import infra

PROMETHEUS = shutil.which("prometheus")
FLAGS = ("--model", "Llama-3.1-8B", "--device", "H100-SXM", "--framework", "vllm")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def prometheus(tmp: Path, targets: list[str], labels: dict[str, str] | None = None) -> Iterator[str]:
    """A Prometheus server scraping `targets` (host:port) every second as job "engine", with `labels` on their
    series (as Kubernetes discovery gives a pod's `namespace` and `pod`); yields its URL."""
    tmp.mkdir()
    config = tmp / "prometheus.yml"
    config.write_text("global:\n  scrape_interval: 1s\nscrape_configs:\n  - job_name: engine\n    static_configs:\n"
                      f"      - targets: {json.dumps(targets)}\n" + (f"        labels: {json.dumps(labels)}\n"
                                                                     if labels else ""))
    port = _free_port()
    proc = subprocess.Popen([str(PROMETHEUS), f"--config.file={config}", f"--storage.tsdb.path={tmp / 'data'}",
                             f"--web.listen-address=127.0.0.1:{port}"], stdout=subprocess.DEVNULL,
                            stderr=(tmp / "log").open("w"))
    url = f"http://127.0.0.1:{port}"
    try:
        # Ready, and every target scraped once (its discovery is throttled to every 5 s): the counters' increase
        # counts from the idle engines' zeros.
        for _ in range(300):
            with contextlib.suppress(httpx.HTTPError, KeyError, ValueError):
                up = httpx.get(f"{url}/api/v1/query", params={"query": 'up{job="engine"} == 1'}, timeout=1)
                if len(up.json()["data"]["result"]) == len(targets):
                    break
            assert proc.poll() is None, (tmp / "log").read_text()
            time.sleep(0.1)
        else:
            raise AssertionError("prometheus did not scrape its targets: " + (tmp / "log").read_text())
        yield url
    finally:
        stop(proc, 30)


def _load(url: str, rate: str, requests: int) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "infra", "bench", "--endpoint", url, "--rate", rate, "--requests",
                             str(requests), "--input-tokens", "128", "--output-tokens", "16"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


@pytest.mark.skipif(PROMETHEUS is None, reason="needs Debian's prometheus package (.ci/run installs it)")
def test_observe_reads_a_window_of_every_replica_back_from_prometheus(tmp_path: Path):
    """Two replicas of different speed serve traffic; Prometheus scrapes both. observe reads the window back: the
    requests of both, the means over both (as the engines' own counters give them), two instances, hence two
    replicas; and one replica alone through a narrower selector. A window that matches nothing, a selector
    Prometheus refuses and an unreachable server are one-line errors that write nothing."""
    with emulator("--ttft-ms", "100", "--itl-ms", "20") as fast, \
            emulator("--ttft-ms", "200", "--itl-ms", "30") as slow:
        hosts = [u.removeprefix("http://").removesuffix("/v1") for u in (fast, slow)]
        with prometheus(tmp_path / "prom", hosts) as prom:
            loads = [_load(fast, "12/s", 120), _load(slow, "6/s", 60)]
            for load in loads:
                assert load.wait(timeout=120) == 0
            time.sleep(3)  # the last requests' counts scraped
            exact = {}
            for url in (fast, slow):
                text = httpx.get(url.removesuffix("/v1") + "/metrics", timeout=10).text
                exact[url] = snapshot(text)
            out = tmp_path / "observed.jsonl"
            run = infra("observe", "--prometheus", prom, "--selector", 'job="engine"', "--duration", "60", "-o",
                        str(out), *FLAGS, "--json")
            assert run.returncode == 0, run.stderr
            got = json.loads(run.stdout)
            one = infra("observe", "--prometheus", prom, "--selector", f'{{instance="{hosts[1]}"}}', "--duration",
                        "60", "-o", str(tmp_path / "slow.jsonl"), *FLAGS, "--json")
            assert one.returncode == 0, one.stderr
            alone = json.loads(one.stdout)
            stepped = infra("observe", "--prometheus", prom, "--selector", 'job="engine"', "--duration", "60",
                            "--step", "4", "-o", str(tmp_path / "stepped.jsonl"), *FLAGS, "--json")
            assert stepped.returncode == 0, stepped.stderr
            steps = json.loads(stepped.stdout)
            failures = [
                (("--selector", 'job="nothing"'), "no series of vllm:time_to_first_token_seconds"),
                (("--selector", 'job="engine"', "--end", "2020-01-01T00:00:00Z"), "no series of"),
                (("--selector", "job="), "Prometheus refused a query: bad_data"),
                (("--selector", 'job="engine"', "--end", "yesterday"), "'yesterday' is not a time"),
                (("--selector", 'job="engine"', "--step", "0.2"), "a step of 0.2 s does not split"),
                (("--selector", 'job="engine"', "--duration", "4", "--end", "2020-01-01T00:00:00Z", "--step", "1"),
                 "no series of"),
            ]
            for flags, why in failures:
                bad = tmp_path / "bad.jsonl"
                run = infra("observe", "--prometheus", prom, *flags, "-o", str(bad), *FLAGS)
                assert run.returncode == 1 and why in run.stderr, run.stderr
                assert len(run.stderr.strip().splitlines()) == 1 and not bad.exists()
    # Both replicas: every request, the means the engines' own counters give.
    both = {name: (sum(exact[u][name].sum for u in exact), sum(exact[u][name].count for u in exact))
            for name in (TTFT, TPOT)}
    assert got["requests"] == pytest.approx(180, rel=0.1)
    assert got["ttft_ms"] == pytest.approx(1000 * both[TTFT][0] / both[TTFT][1], rel=0.01)
    assert got["tpot_ms"] == pytest.approx(1000 * both[TPOT][0] / both[TPOT][1], rel=0.01)
    assert any("the instances that served each window: 2 replica(s)" in note for note in got["notes"])
    case = json.loads(out.read_text().splitlines()[0])
    assert case["case"]["workers"] == 2 and case["source"] == f'{prom} {{job="engine"}}'
    # Split into windows of 4 s: those the traffic filled are load points of their own (two replicas each), the
    # idle ones are left out; calibrate reads each as a point.
    windows = steps["windows"]
    assert len(windows) >= 2 and steps["skipped"] >= 5 and all(w["workers"] == 2 for w in windows)
    assert all(w["requests"] >= 30 and w["rate_rps"] == pytest.approx(w["requests"] / 4, rel=0.05) for w in windows)
    assert 100 <= sum(w["requests"] for w in windows) <= 200
    assert abs(steps["requests"] - sum(w["requests"] for w in windows)) <= len(windows)
    fitted = infra("calibrate", str(tmp_path / "stepped.jsonl"), "-o", str(tmp_path / "cal.yaml"), "--json")
    assert fitted.returncode == 0, fitted.stderr
    assert len(json.loads(fitted.stdout)["points"]) == len(windows)
    # The slow replica alone.
    s = exact[slow]
    assert alone["requests"] == pytest.approx(60, rel=0.1)
    assert alone["ttft_ms"] == pytest.approx(1000 * s[TTFT].sum / s[TTFT].count, rel=0.01)
    assert alone["ttft_ms"] > 1.3 * got["ttft_ms"]
    down = infra("observe", "--prometheus", prom, "-o", str(tmp_path / "down.jsonl"), *FLAGS)
    assert down.returncode == 1 and "cannot be read" in down.stderr and len(down.stderr.strip().splitlines()) == 1


INTENT = LOOP.replace("ttft: {p99: 1s}", "ttft: {p99: 1s, mean: 400ms}")
MONITORED = PROFILE.replace("spec:\n", "spec:\n  conventions:\n    namespace: llm\n    crds: {prometheus_operator: "
                                      "monitoring.coreos.com/v1}\n")
"""The lab profile of a cluster that runs the Prometheus Operator, serving in namespace llm."""


@pytest.mark.skipif(PROMETHEUS is None, reason="needs Debian's prometheus package (.ci/run installs it)")
def test_verify_judges_calibrates_and_replans_on_the_traffic_prometheus_kept(tmp_path: Path):
    """A deployment whose tokens come 45 ms apart serves its traffic; `infra verify --prometheus` reads the window
    back, judges the objectives on the engine's histograms (TPOT p99 over its 40 ms objective: fail, whatever the
    sample; TTFT mean exact, under its 400 ms; TTFT p99 within its bucket but on too few requests to pass),
    calibrates on the window and re-plans with that calibration. The series are found by the selector the plan's
    rendered alerting rules watch and hand to verify (namespace and pod name, as Kubernetes discovery labels
    them). Measuring two ways at once, or sending load while reading traffic, is a one-line error."""
    (tmp_path / "loop.yaml").write_text(INTENT)
    (tmp_path / "profile.yaml").write_text(MONITORED)
    assert infra("plan", str(tmp_path / "loop.yaml"), "-o", str(tmp_path / "out"), "--no-verify").returncode == 0
    plan = tmp_path / "out" / "plan.yaml"
    # The selector the rendered alerting rules watch, as their description hands it to verify.
    [rules] = (tmp_path / "out" / "manifests").rglob("prometheusrule-*.yaml")
    description = yaml.safe_load(rules.read_text())["spec"]["groups"][0]["rules"][0]["annotations"]["description"]
    selector = description.partition("--selector '")[2].removesuffix("'")
    with emulator("--ttft-ms", "150", "--itl-ms", "45") as url:
        host = url.removeprefix("http://").removesuffix("/v1")
        with prometheus(tmp_path / "prom", [host], {"namespace": "llm", "pod": "chat-a0-5d8f9c7b6-x2x4q"}) as prom:
            assert _load(url, "6/s", 60).wait(timeout=120) == 0
            time.sleep(3)
            run = infra("verify", str(plan), "--prometheus", prom, "--selector", selector, "--duration", "60",
                        "--write", str(tmp_path / "v"), "--json")
            text = infra("verify", str(plan), "--prometheus", prom, "--selector", 'job="engine"', "--duration",
                         "60")
            both = infra("verify", str(plan), "--prometheus", prom, "--endpoint", url)
            load = infra("verify", str(plan), "--prometheus", prom, "--requests", "10")
    assert run.returncode == 3, run.stderr
    got = json.loads(run.stdout)
    verdicts = {o["key"]: o for o in got["runs"][0]["verdict"]["objectives"]}
    assert got["runs"][0]["label"] == "observed" and got["observed"]["requests"] == pytest.approx(60, rel=0.1)
    assert verdicts["tpot_p99"]["verdict"] == "fail" and verdicts["tpot_p99"]["ci_ms"][0] >= 40
    assert verdicts["ttft_mean"]["verdict"] == "pass"
    assert verdicts["ttft_mean"]["measured_ms"] == pytest.approx(got["observed"]["ttft_ms"], rel=1e-4)
    assert verdicts["ttft_p99"]["verdict"] == "inconclusive"
    assert "needs at least 1,000" in verdicts["ttft_p99"]["reason"]
    assert all(o["predicted_ms"] > 0 for o in verdicts.values())
    for name in ("measurements/observed.jsonl", "calibration.yaml", "plan/plan.yaml"):
        assert (tmp_path / "v" / name).exists(), name
    cal = yaml.safe_load((tmp_path / "v" / "calibration.yaml").read_text())
    assert cal["error"]["calibrated"]["tpot_median_ape"] < cal["error"]["prior"]["tpot_median_ape"]
    replanned = yaml.safe_load((tmp_path / "v" / "plan" / "plan.yaml").read_text())
    assert replanned["spec"]["provenance"]["calibration"]["measured"]["points"] == 1
    assert any("TPOT mean measured" in line for line in got["changes"]), got["changes"]
    assert text.returncode == 3 and "observed" in text.stdout and "verification failed" in text.stdout
    for bad, why in ((both, "verify measures one way"), (load, "--requests sends load")):
        assert bad.returncode == 1 and why in bad.stderr and len(bad.stderr.strip().splitlines()) == 1, bad.stderr


@pytest.mark.skipif(PROMETHEUS is None, reason="needs Debian's prometheus package (.ci/run installs it)")
def test_verify_reads_a_dynamo_frontend_by_the_selector_its_rendered_rules_hand_over(tmp_path: Path):
    """The plan rendered for NVIDIA Dynamo watches the service on its Frontend's series (by namespace and served
    model); a frontend (the emulator exporting Dynamo's series) serves the service's traffic, and `infra verify
    --prometheus` with the selector the rule's description gives reads that window back and judges it: TTFT mean
    exact (150 ms, under 400 ms), TPOT p99 not judged from the gaps between tokens a frontend counts. A frontend
    serving another model in the namespace is not read."""
    (tmp_path / "loop.yaml").write_text(INTENT)
    (tmp_path / "profile.yaml").write_text(MONITORED)
    assert infra("plan", str(tmp_path / "loop.yaml"), "-o", str(tmp_path / "out"), "--no-verify").returncode == 0
    plan = tmp_path / "out" / "plan.yaml"
    assert infra("render", str(plan), "-o", str(tmp_path / "dynamo"), "--target", "dynamo").returncode == 0
    [rules] = (tmp_path / "dynamo").rglob("prometheusrule-*.yaml")
    description = yaml.safe_load(rules.read_text())["spec"]["groups"][0]["rules"][0]["annotations"]["description"]
    selector = description.partition("--selector '")[2].removesuffix("'")
    assert selector == 'namespace="llm",model="chat"'
    with emulator(str(plan), "--ttft-ms", "150", "--itl-ms", "45", "--metrics", "dynamo") as url, \
            emulator("--ttft-ms", "900", "--itl-ms", "90", "--metrics", "dynamo") as other:
        hosts = [u.removeprefix("http://").removesuffix("/v1") for u in (url, other)]
        with prometheus(tmp_path / "prom", hosts, {"namespace": "llm"}) as prom:
            busy = [_load(url, "6/s", 60), _load(other, "6/s", 60)]
            assert all(p.wait(timeout=120) == 0 for p in busy)
            time.sleep(3)
            run = infra("verify", str(plan), "--prometheus", prom, "--selector", selector, "--duration", "60",
                        "--json")
    assert run.returncode in (0, 3), run.stderr
    got = json.loads(run.stdout)
    verdicts = {o["key"]: o for o in got["runs"][0]["verdict"]["objectives"]}
    assert got["observed"]["requests"] == pytest.approx(60, rel=0.1)
    assert got["observed"]["ttft_ms"] == pytest.approx(150, rel=0.15)
    assert verdicts["ttft_mean"]["verdict"] == "pass"
    assert verdicts["tpot_p99"]["verdict"] == "inconclusive", verdicts["tpot_p99"]
