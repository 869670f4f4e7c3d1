"""Run every command the guides show and keep what it printed, so the pages quote real output.

    python docs/gen/outputs.py                  # rerun every session, rewrite docs/outputs/ and the README excerpt
    python docs/gen/outputs.py getting-started  # only the sessions named
    python docs/gen/outputs.py --slow           # also the benchmarks that take many minutes (closed loop, --lomo-prior)

Each session starts in an empty temporary folder holding copies of the example files it uses, runs its commands
with this interpreter's `infra` first on PATH, and writes `docs/outputs/<session>/<step>.txt`: the command line
after `$ ` and everything it printed (stdout and stderr, as a terminal pipe gets it), then `[exit N]` when it
exits non-zero. The pages include these files (`--8<--`), so refreshing them after a change is running this
script again. The temporary folder's path is written as the folder the guide names (e.g. `~/serving`).
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
OUT = ROOT / "docs" / "outputs"
DATA = ROOT.parent / "shared" / "data" / "silicon_calibration.csv"
README = ROOT / "README.md"


@dataclass
class Step:
    name: str
    command: str
    show: bool = True  # False: a setup step whose output is not kept
    background: bool = False  # a server: started, waited for (`ready` URL), stopped when the session ends
    ready: str | None = None
    cwd_root: bool = False  # run in the repository root (benchmarks), not the session folder
    slow: bool = False
    max_lines: int | None = None  # keep the first lines only (the page says it is an excerpt)
    exit: int = 0  # the exit status the guide expects; any other is reported and fails the run


@dataclass
class Session:
    name: str
    folder: str  # how the guide names the session folder
    copy: dict[str, str] = field(default_factory=dict)  # repository path -> path in the session folder
    steps: list[Step] = field(default_factory=list)


GIT_ENV = {"GIT_AUTHOR_NAME": "You", "GIT_AUTHOR_EMAIL": "you@example.com", "GIT_COMMITTER_NAME": "You",
           "GIT_COMMITTER_EMAIL": "you@example.com", "GIT_AUTHOR_DATE": "2026-01-05T09:00:00Z",
           "GIT_COMMITTER_DATE": "2026-01-05T09:00:00Z"}

PORT = "8000"  # as the guides write it; the run uses a free port and writes it as this one

SESSIONS = [
    Session("readme", "infra", {"examples": "examples"}, [
        Step("plan", "infra plan examples/chat-mixed-fleet.yaml -o out"),
    ]),
    Session("getting-started", "~/serving", {
        "examples/chat-mixed-fleet.yaml": "intent.yaml",
        "examples/profiles/mixed-h100-ascend.yaml": "profiles/mixed-h100-ascend.yaml",
    }, [
        Step("help", "infra --help"),
        Step("catalog", "infra catalog models Llama-3.1-70B", max_lines=40),
        Step("check", "infra check intent.yaml"),
        Step("plan", "infra plan intent.yaml -o out"),
        Step("files", "find out -type f | sort"),
        Step("report", "sed -n '1,30p' out/report.md"),
        Step("manifest", "sed -n '1,80p' out/manifests/chat/base/deployment-chat-a0.yaml"),
        Step("validate", "infra validate out/manifests --plan out/plan.yaml"),
        Step("simulate", "infra bench --simulate out/plan.yaml"),
        Step("explain", "infra explain out/plan.yaml"),
        Step("git-init", "git init -q -b main deploy && git -C deploy commit -q --allow-empty -m 'deployments'"),
        Step("pr", "infra pr intent.yaml --repo deploy --plan out/plan.yaml"),
        Step("git-log", "git -C deploy log --oneline --all"),
        Step("pr-files", "git -C deploy show --stat --format='%s%n' infra/chat-prod"),
        Step("pr-body", "sed -n '1,40p' deploy/.git/infra-pr/infra-chat-prod.md"),
    ]),
    Session("intent", "~/serving", {
        "examples/chat-mixed-fleet.yaml": "intent.yaml",
        "examples/profiles/mixed-h100-ascend.yaml": "profiles/mixed-h100-ascend.yaml",
    }, [
        Step("break", "sed -e 's/p99: 1.5s/p99: 200ms/' -e 's/Llama-3.1-70B-Instruct/Llama-3.1-70/' intent.yaml"
             " > broken.yaml", show=False),
        Step("check-broken", "infra check broken.yaml", exit=1),
        Step("schema", "infra schema -o intent.schema.json"),
        Step("mean", "sed -e 's/ttft: {p50: 300ms, p99: 1.5s}/ttft: {mean: 250ms, p99: 1.5s}/' "
             "-e 's/tpot: {p99: 60ms}/tpot: {mean: 30ms, p99: 60ms}/' intent.yaml > mean.yaml && "
             "sed -n '/slo:/,/attainment:/p' mean.yaml"),
        Step("plan-mean", "infra plan mean.yaml -o mean"),
        Step("mean-attainment", "grep -A4 '^    attainment_objectives:' mean/plan.yaml"),
        Step("mean-verified", "grep -m1 -A8 'key: ttft_mean' mean/plan.yaml"),
    ]),
    Session("catalog", "~/serving", {}, [
        Step("devices", "infra catalog devices"),
        Step("device", "infra catalog devices H20"),
        Step("frameworks", "infra catalog frameworks"),
        Step("overlay-file", "mkdir -p mycatalog/devices && printf '%s\\n' 'name: H100-SXM' "
             "'reference_price_per_hour: {value: 1.85, source: \"https://intranet.example.com/rates\", "
             "confidence: high}' > mycatalog/devices/h100.yaml && cat mycatalog/devices/h100.yaml"),
        Step("overlay", "infra catalog devices H100-SXM --catalog mycatalog", max_lines=12),
    ]),
    Session("performance", "~/serving", {}, [
        Step("estimate", "infra estimate --model Llama-3.1-70B --device H100-SXM --precision fp8 --tp 4 "
             "--isl 2k --osl 256 --rate 5/s --slo ttft_p99=1s,tpot_p99=50ms"),
        Step("estimate-ascend", "infra estimate --model Llama-3.1-70B --device Ascend-910B3 --framework vllm-ascend "
             "--tp 8 --isl 2k --osl 256 --max-rate --slo ttft_p99=1.5s,tpot_p99=60ms"),
        Step("fidelity", "python benchmarks/fidelity.py --csv ../shared/data/silicon_calibration.csv",
             cwd_root=True),
        Step("ceiling", "python benchmarks/ceiling.py --csv ../shared/data/silicon_calibration.csv", cwd_root=True,
             slow=True),
        Step("sim-agreement", "python benchmarks/sim_agreement.py", cwd_root=True),
        Step("sim-fidelity", "python benchmarks/sim_fidelity.py --csv ../shared/data/silicon_calibration.csv",
             cwd_root=True, slow=True),
        Step("closed-loop", "python benchmarks/closed_loop.py --csv ../shared/data/silicon_calibration.csv",
             cwd_root=True),
        Step("closed-loop-lomo", "python benchmarks/closed_loop.py --csv ../shared/data/silicon_calibration.csv "
             "--lomo-prior", cwd_root=True, slow=True),
        Step("monotone", "python benchmarks/monotone.py", cwd_root=True, slow=True),
    ]),
    Session("calibration", "~/serving", {"examples": "examples"}, [
        Step("calibrate", "infra calibrate examples/calibrations/chat-h100-peak.jsonl "
             "examples/calibrations/chat-h100-baseline.jsonl -o mine.yaml"),
        Step("plan", "infra plan examples/measured-chat.yaml -o out"),
        Step("emulate", f"infra emulate out/plan.yaml --port {PORT} --ttft-ms 120 --itl-ms 30 &", background=True,
             ready=f"http://127.0.0.1:{PORT}/health"),
        Step("verify", f"infra verify out/plan.yaml --endpoint http://127.0.0.1:{PORT}/v1 --requests 40 "
             "--write measured"),
        Step("replan", "infra plan examples/measured-chat.yaml --calibration measured/calibration.yaml -o out2"),
        Step("bench", f"infra bench --endpoint http://127.0.0.1:{PORT}/v1 --concurrency 8 --requests 200 "
             "--slo ttft_p50=250ms"),
        Step("traffic", f"infra bench --endpoint http://127.0.0.1:{PORT}/v1 --rate 10/s --requests 400 "
             "--input-tokens 400 --output-tokens 60 &", background=True, show=False),
        Step("observe", f"infra observe http://127.0.0.1:{PORT} --duration 20 --plan out/plan.yaml "
             "-o observed.jsonl"),
    ]),
    Session("agent", "~/serving", {
        "examples/chat-mixed-fleet.yaml": "intent.yaml",
        "examples/profiles/mixed-h100-ascend.yaml": "profiles/mixed-h100-ascend.yaml",
    }, [
        Step("plan", "infra plan intent.yaml -o out", show=False),
        Step("script", "printf '%s\\n' /why '/what-if slo.ttft.p99=2s' /diff /exit > review.txt && cat review.txt"),
        Step("review", "infra review out/plan.yaml --script review.txt"),
        Step("draft", "infra draft 'a chat service on Llama-3.1-8B at 20 requests per second'", exit=1),
    ]),
    Session("deepseek-r1", "~/serving", {"examples": "examples"}, [
        Step("plan", "infra plan examples/deepseek-r1-pd.yaml -o r1"),
        Step("cross-pool", "grep -E '^\\| r1 \\| h200 \\| vllm .* on h20 \\|' r1/report.md | head -n 8"),
        Step("alternatives", "sed -n '/^## Alternatives/,/^## Candidates/p' r1/report.md"),
        Step("what-if", "printf '%s\\n' '/what-if slo.tpot.p99=80ms' /exit > what-if.txt && "
             "infra review r1/plan.yaml --script what-if.txt"),
        Step("files", "find r1/manifests -type f | sort"),
        Step("validate", "infra validate r1/manifests --plan r1/plan.yaml"),
        Step("simulate", "infra bench --simulate r1/plan.yaml"),
        Step("v3", "infra plan examples/deepseek-moe.yaml"),
        Step("pd-llama", "infra plan examples/pd-across-devices.yaml"),
    ]),
    Session("targets", "~/serving", {"examples": "examples"}, [
        Step("plan", "infra plan examples/deepseek-r1-pd.yaml -o r1 --target dynamo"),
        Step("files", "find r1/manifests -type f | sort"),
        Step("dgd", "grep -nE '^(kind|  backendFramework|    [A-Za-z0-9-]+):|componentType|replicas|gpu:' "
             "r1/manifests/r1/base/dynamographdeployment-r1.yaml"),
        Step("validate", "infra validate r1/manifests --plan r1/plan.yaml"),
        Step("tamper", "sed -i '/^    a0-decode:/,/^      replicas:/ s/^      replicas: [0-9]*$/      replicas: 9/' "
             "r1/manifests/r1/base/dynamographdeployment-r1.yaml && infra validate r1/manifests --plan r1/plan.yaml",
             exit=1),
        Step("llm-d", "infra render r1/plan.yaml -o r1-llm-d --target llm-d && find r1-llm-d -type f | sort"),
        Step("values", "sed -n '1,30p' r1-llm-d/r1/helm/llm-d-modelservice/r1-a0.values.yaml"),
        Step("kserve", "infra render r1/plan.yaml -o r1-kserve --target kserve && "
             "infra validate r1-kserve --plan r1/plan.yaml"),
        Step("refused", "infra plan examples/cpu-small-model.yaml -o cpu --target llm-d", exit=1),
        Step("refused-pipeline", "infra plan examples/omni-speech.yaml -o voice --target kserve", exit=1),
    ]),
    Session("mixed-fleet", "~/serving", {"examples": "examples"}, [
        Step("plan", "infra plan examples/chat-mixed-fleet.yaml -o out"),
        Step("pools", "sed -n '/^## Devices used/,/^Idle is/p' out/report.md"),
        Step("ascend", "sed -n '1,70p' $(grep -l huawei.com out/manifests/chat/base/deployment-*.yaml)"),
        Step("borrowed", "infra estimate --model Llama-3.1-70B --device Ascend-910B3 --framework vllm-ascend --tp 8 "
             "--isl 1800 --osl 350 --max-rate --slo ttft_p50=300ms,ttft_p99=1.5s,tpot_p99=60ms"),
        Step("multi", "infra plan examples/multi-service.yaml"),
    ]),
    Session("small-models", "~/serving", {"examples": "examples"}, [
        Step("plan", "infra plan examples/small-models-fleet.yaml -o out"),
        Step("devices", "sed -n '/^## Devices used/,/^Idle is/p' out/report.md"),
        Step("candidates", "grep -E '^\\| summarise \\|' out/report.md | head -n 4"),
        Step("slice", "grep -n -A9 'limits:' out/manifests/summarise/base/deployment-summarise-a0.yaml"),
        Step("one", "infra plan examples/small-model-shared.yaml"),
        Step("sharing", "python benchmarks/sharing.py", cwd_root=True),
    ]),
    Session("omni", "~/serving", {"examples": "examples"}, [
        Step("plan", "infra plan examples/omni-speech.yaml -o out"),
        Step("simulate", "infra bench --simulate out/plan.yaml --service voice"),
        Step("stage", "cat out/manifests/voice-thinker/base/configmap-voice-thinker-stage.yaml"),
    ]),
    Session("infeasible", "~/serving", {"examples": "examples"}, [
        Step("check", "infra check examples/infeasible.yaml"),
        Step("plan", "infra plan examples/infeasible.yaml -o out", exit=2),
        Step("smaller", "sed -e 's#rate: 30/s#rate: 1/s#' -e 's/p99: 60ms/p99: 4s/' -e 's/p99: 10ms/p99: 80ms/' "
             "-e 's#per_hour: [$]20/h#per_hour: $60/h#' examples/infeasible.yaml > examples/smaller.yaml && "
             "infra plan examples/smaller.yaml", exit=2),
        Step("relaxed", "sed -e 's/p99: 4s/p99: 20s/' -e 's/p99: 80ms/p99: 400ms/' examples/smaller.yaml "
             "> examples/relaxed.yaml && infra plan examples/relaxed.yaml"),
    ]),
    Session("gitops", "~/deployments", {
        "examples/chat-mixed-fleet.yaml": "intents/chat.yaml",
        "examples/profiles/mixed-h100-ascend.yaml": "intents/profiles/mixed-h100-ascend.yaml",
    }, [
        Step("init", "git init -q -b main . && git remote add origin https://git.example.com/platform/deployments.git "
             "&& git add intents && git commit -q -m 'intents'", show=False),
        Step("pr", "infra pr intents/chat.yaml --repo . --root deploy --argocd"),
        Step("tree", "git checkout -q infra/chat-prod && git ls-files | sort"),
        Step("check", "infra check intents/chat.yaml"),
        Step("check-kept", "infra check deploy/.infra/chat-prod/intent.yaml | tail -n 1"),
        Step("validate", "infra validate deploy/chat --plan deploy/.infra/chat-prod/plan.yaml"),
        Step("tamper", "sed -i -E 's/^(  replicas: )[0-9]+/\\199/' deploy/chat/base/deployment-chat-a0.yaml && "
             "infra validate deploy/chat --plan deploy/.infra/chat-prod/plan.yaml", exit=1),
    ]),
]


def _free_port() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return str(s.getsockname()[1])


def _clean(text: str, folder: Path, shown: str) -> str:
    text = text.replace(str(folder.resolve()), shown).replace(str(folder), shown)
    text = text.replace(str(ROOT) + "/", "")
    lines = [line.rstrip() for line in text.splitlines()]
    while lines and not lines[-1]:
        lines.pop()
    return "\n".join(lines)


def run_session(session: Session, slow: bool) -> list[str]:
    work = Path(tempfile.mkdtemp(prefix=f"infra-docs-{session.name}-"))
    folder = work / "serving"
    folder.mkdir()
    for src, dst in session.copy.items():
        target = folder / dst
        target.parent.mkdir(parents=True, exist_ok=True)
        (shutil.copytree if (ROOT / src).is_dir() else shutil.copy)(ROOT / src, target)
    port = _free_port()
    env = dict(os.environ, **GIT_ENV, PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
               NO_COLOR="1", TERM="dumb", PYTHONHASHSEED="0")
    env.pop("GITHUB_TOKEN", None), env.pop("GH_TOKEN", None)
    for key in ("INFRA_LLM_BASE_URL", "INFRA_LLM_MODEL", "OPENAI_BASE_URL", "OPENAI_MODEL", "OPENAI_API_KEY"):
        env.pop(key, None)
    env["INFRA_LLM_SETTINGS"] = str(work / "no-llm.yaml")  # the guides run without an LLM endpoint
    servers: list[subprocess.Popen] = []
    problems: list[str] = []
    target_dir = OUT / session.name
    target_dir.mkdir(parents=True, exist_ok=True)
    try:
        for step in session.steps:
            if step.slow and not slow:
                print(f"  {session.name}/{step.name}: slow, kept as it was (--slow reruns it)")
                continue
            command = step.command.replace(PORT, port) if (step.background or PORT in step.command) else step.command
            cwd = ROOT if step.cwd_root else folder
            if step.cwd_root:
                if not DATA.is_file() and "silicon_calibration" in command:
                    print(f"  {session.name}/{step.name}: no {DATA}, kept as it was")
                    continue
                command = command.replace("python ", f"{sys.executable} ", 1) if command.startswith("python ") \
                    else command
            if step.background:
                servers.append(subprocess.Popen(["bash", "-c", command.rstrip("& ")], cwd=cwd, env=env,
                                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
                url = step.ready.replace(PORT, port) if step.ready else None
                for _ in range(300):
                    try:
                        if url:
                            urllib.request.urlopen(url, timeout=1)
                        break
                    except OSError:
                        time.sleep(0.1)
                text = f"$ {step.command}"
            else:
                started = time.monotonic()
                proc = subprocess.run(["bash", "-c", command], cwd=cwd, env=env, stdout=subprocess.PIPE,
                                      stderr=subprocess.STDOUT, text=True, timeout=3600)
                output = proc.stdout
                if step.max_lines is not None:
                    lines = output.splitlines()
                    output = "\n".join(lines[:step.max_lines]) + ("\n..." if len(lines) > step.max_lines else "")
                output = output.replace(f"127.0.0.1:{port}", f"127.0.0.1:{PORT}").replace(f"port {port}",
                                                                                          f"port {PORT}")
                text = f"$ {step.command}\n{output}"
                if proc.returncode:
                    text = text.rstrip("\n") + f"\n[exit {proc.returncode}]"
                print(f"  {session.name}/{step.name}: exit {proc.returncode}, {time.monotonic() - started:.1f} s")
                if proc.returncode != step.exit or "Traceback (most recent call last)" in output:
                    problems.append(f"{session.name}/{step.name}: exit {proc.returncode} (expected {step.exit})"
                                    + ("" if "Traceback" not in output else ", with a traceback"))
            if step.show:
                (target_dir / f"{step.name}.txt").write_text(_clean(text, folder, session.folder) + "\n",
                                                              encoding="utf-8")
    finally:
        for server in servers:
            server.terminate()
            try:
                server.wait(timeout=10)
            except subprocess.TimeoutExpired:
                server.kill()
        shutil.rmtree(work, ignore_errors=True)
    return problems


def update_readme() -> None:
    """The README's picture of a plan: the first lines `infra plan` printed for the README's own command."""
    source = OUT / "readme" / "plan.txt"
    if not source.is_file():
        return
    lines = source.read_text(encoding="utf-8").splitlines()
    keep = []
    for line in lines:  # the command, the plan's table and the count of candidates
        if line.startswith(("wrote ", "note: ")):
            break
        keep.append(line)
        if "candidates scored" in line:
            break
    excerpt = "\n".join(keep)
    text = README.read_text(encoding="utf-8")
    new = re.sub(r"(<!-- plan-excerpt:start[^>]*-->\n```text\n)(?:.*?\n)?(```\n<!-- plan-excerpt:end -->)",
                 lambda m: m.group(1) + excerpt + "\n" + m.group(2), text, flags=re.S)
    if new != text:
        README.write_text(new, encoding="utf-8")
        print("updated the plan excerpt in README.md")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("sessions", nargs="*", help="sessions to run (default: all): "
                        + ", ".join(s.name for s in SESSIONS))
    parser.add_argument("--slow", action="store_true", help="also run the benchmarks that take many minutes")
    args = parser.parse_args(argv)
    unknown = set(args.sessions) - {s.name for s in SESSIONS}
    if unknown:
        parser.error(f"unknown session(s): {', '.join(sorted(unknown))}")
    problems = []
    for session in SESSIONS:
        if args.sessions and session.name not in args.sessions:
            continue
        print(f"{session.name}:")
        problems += run_session(session, args.slow)
    update_readme()
    for problem in problems:
        print(f"unexpected: {problem}", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
