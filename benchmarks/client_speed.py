"""How fast and how exact the load client is, against `infra emulate` in fixed-timing mode on this machine.

    python benchmarks/client_speed.py [--json] [--quick]

Three measurements, each against an emulator started as a separate process (the client's event loop and the
server's do not share a core's Python interpreter):
1. accuracy: the emulator sends the first token 200 ms after a request arrives and one token every 20 ms; the
   client's mean TTFT, TPOT, ITL and E2E are compared with those values (target: within 5 %);
2. rate: an open loop at a high Poisson rate with short answers; the achieved completed requests/s;
3. streams: a closed loop of 500+ clients holding streams open at once; the most in flight at one time, all
   completed.
Client-side timing overhead is how long an arriving chunk can wait before the client stamps it: the client's
event-loop lag, sampled by a probe task during each run (target: p99 <= 2 ms). Token lateness (receipt minus the
emulator's schedule) bounds it from above, adding the emulator's own lateness and the transport.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from infra.bench.client import ClientOptions, run  # noqa: E402
from infra.bench.metrics import summarize  # noqa: E402
from infra.bench.workload import Load, RequestSpec  # noqa: E402


def start(ttft_ms: float, itl_ms: float) -> tuple[subprocess.Popen[str], str]:
    proc = subprocess.Popen([sys.executable, "-m", "infra", "emulate", "--port", "0", "--ttft-ms", str(ttft_ms),
                             "--itl-ms", str(itl_ms)], stdout=subprocess.PIPE, text=True, cwd=ROOT)
    line = proc.stdout.readline() if proc.stdout else ""
    if not line.startswith("serving "):
        proc.kill()
        raise SystemExit(f"emulator did not start: {line!r}")
    return proc, line.split()[1]


def stop(proc: subprocess.Popen[str]) -> None:
    proc.terminate()
    proc.wait(timeout=30)


def closed(n: int, clients: int, isl: int, osl: int) -> Load:
    return Load([RequestSpec(i, None, isl, osl, 0, 0) for i in range(n)], None, clients, "closed")


def poisson(n: int, rate: float, isl: int, osl: int, seed: int = 0) -> Load:
    gaps = np.random.default_rng(seed).exponential(1.0 / rate, n)
    at = np.concatenate(([0.0], np.cumsum(gaps[:-1])))
    return Load([RequestSpec(i, float(at[i]), isl, osl, 0, 0) for i in range(n)], rate, None, "poisson")


def server_cpu_s(proc: subprocess.Popen[str]) -> float:
    """CPU seconds (user + system) the emulator process has used."""
    fields = Path(f"/proc/{proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def lag(r) -> dict[str, float]:
    """The client's event-loop lag during a run (ms): how long an arriving chunk can wait to be stamped."""
    v = np.asarray(r.loop_lag_s) * 1000
    return {"p50": round(float(np.percentile(v, 50)), 3), "p99": round(float(np.percentile(v, 99)), 3)}


def lateness_ms(records, ttft_ms: float, itl_ms: float) -> np.ndarray:
    """Per token: client receipt time minus the emulator's schedule (send + ttft + i * itl), in ms. The schedule
    starts when the server reads the request, a little after the client's send, so this bounds the overhead from
    above."""
    out = []
    for r in records:
        if not r.ok:
            continue
        times = r.ttft + np.concatenate(([0.0], np.cumsum(r.itl)))
        due = (ttft_ms + itl_ms * np.arange(times.size)) / 1000.0
        out.append((times - due) * 1000.0)
    return np.concatenate(out) if out else np.zeros(0)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--quick", action="store_true", help="smaller runs")
    ap.add_argument("--rate", type=float, default=220.0, help="offered requests/s of the open-loop run")
    a = ap.parse_args()
    q = 0.25 if a.quick else 1.0
    out: dict = {"load_average_1m": round(os.getloadavg()[0], 2), "cpus": os.cpu_count()}

    proc, url = start(200.0, 20.0)
    try:
        opts = ClientOptions(url=url, model="emulated", warmup=8)
        r = run(closed(int(200 * q) or 20, 8, 64, 16), opts)
        s = summarize(r.records)
        late = lateness_ms(r.records, 200.0, 20.0)
        out["accuracy_lateness_ms"] = {"p50": round(float(np.percentile(late, 50)), 3),
                                       "p99": round(float(np.percentile(late, 99)), 3)}
        out["accuracy_loop_lag_ms"] = lag(r)
        exp = {"ttft": 200.0, "tpot": 20.0, "itl": 20.0, "e2e": 200.0 + 15 * 20.0}
        out["accuracy"] = {m: {"expected_ms": exp[m], "measured_ms": round(s.metrics[m].mean, 3),
                               "error_pct": round((s.metrics[m].mean - exp[m]) / exp[m] * 100, 3),
                               "server_ms": r.server.get(m, {}).get("mean_ms")} for m in exp}
        out["accuracy"]["requests"] = s.completed
    finally:
        stop(proc)

    proc, url = start(5.0, 2.0)
    try:
        n = int(2000 * q)
        opts = ClientOptions(url=url, model="emulated", warmup=20, max_connections=1024)
        cpu0, srv0 = time.process_time(), server_cpu_s(proc)
        r = run(poisson(n, a.rate, 16, 4), opts)
        cpu, srv = time.process_time() - cpu0, server_cpu_s(proc) - srv0
        s = summarize(r.records)
        late = lateness_ms(r.records, 5.0, 2.0)
        queue = np.asarray(r.client_queue_s) * 1000
        out["rate"] = {"offered_rps": a.rate, "requests": n, "completed": s.completed, "failed": s.failed,
                       "achieved_rps": round(s.request_throughput, 1),
                       "client_cpu_ms_per_request": round(cpu / (n + 20) * 1000, 3),
                       "server_cpu_ms_per_request": round(srv / (n + 20) * 1000, 3),
                       "client_queue_p99_ms": round(float(np.percentile(queue, 99)), 3),
                       "loop_lag_ms": lag(r),
                       "token_lateness_ms": {"p50": round(float(np.percentile(late, 50)), 3),
                                             "p99": round(float(np.percentile(late, 99)), 3)}}
    finally:
        stop(proc)

    proc, url = start(1000.0, 250.0)
    try:
        clients = 500 if not a.quick else 200
        opts = ClientOptions(url=url, model="emulated", warmup=0)
        r = run(closed(clients * 2, clients, 16, 8), opts)
        s = summarize(r.records)
        events = sorted([(x.t_send, 1) for x in r.records] + [(x.end, -1) for x in r.records])
        depth = peak = 0
        for _, d in events:
            depth += d
            peak = max(peak, depth)
        late = lateness_ms(r.records, 1000.0, 250.0)
        out["streams"] = {"clients": clients, "requests": len(r.records), "completed": s.completed,
                          "failed": s.failed, "peak_in_flight": peak, "loop_lag_ms": lag(r),
                          "token_lateness_ms": {"p50": round(float(np.percentile(late, 50)), 3),
                                                "p99": round(float(np.percentile(late, 99)), 3)}}
    finally:
        stop(proc)

    if a.json:
        print(json.dumps(out, sort_keys=True))
        return
    acc = out["accuracy"]
    print(f"machine: {out['cpus']} CPUs, load average {out['load_average_1m']} at the start")
    print(f"accuracy vs fixed timing (TTFT 200 ms, 20 ms/token), {acc['requests']} requests:")
    for m in ("ttft", "tpot", "itl", "e2e"):
        x = acc[m]
        srv = f"  (server's own /metrics {x['server_ms']:.2f} ms)" if x["server_ms"] is not None else ""
        print(f"  {m.upper():5s} expected {x['expected_ms']:8.1f} ms  measured {x['measured_ms']:8.2f} ms  "
              f"error {x['error_pct']:+.2f} %{srv}")
    print(f"  token lateness (receipt - schedule) p50 {out['accuracy_lateness_ms']['p50']:.2f} ms, "
          f"p99 {out['accuracy_lateness_ms']['p99']:.2f} ms; client event-loop lag p50 "
          f"{out['accuracy_loop_lag_ms']['p50']:.2f} ms, p99 {out['accuracy_loop_lag_ms']['p99']:.2f} ms")
    rt = out["rate"]
    print(f"rate: offered {rt['offered_rps']:.0f}/s, achieved {rt['achieved_rps']:.1f} req/s "
          f"({rt['completed']}/{rt['requests']} completed); client_queue p99 {rt['client_queue_p99_ms']:.2f} ms; "
          f"token lateness p50 {rt['token_lateness_ms']['p50']:.2f} ms, p99 {rt['token_lateness_ms']['p99']:.2f} ms; "
          f"CPU per request: client {rt['client_cpu_ms_per_request']:.2f} ms, "
          f"emulator {rt['server_cpu_ms_per_request']:.2f} ms; client event-loop lag p50 "
          f"{rt['loop_lag_ms']['p50']:.2f} ms, p99 {rt['loop_lag_ms']['p99']:.2f} ms")
    st = out["streams"]
    print(f"streams: {st['clients']} clients, peak {st['peak_in_flight']} in flight, "
          f"{st['completed']}/{st['requests']} completed; token lateness p50 {st['token_lateness_ms']['p50']:.2f} "
          f"ms, p99 {st['token_lateness_ms']['p99']:.2f} ms; client event-loop lag p50 {st['loop_lag_ms']['p50']:.2f} "
          f"ms, p99 {st['loop_lag_ms']['p99']:.2f} ms")


if __name__ == "__main__":
    main()
