"""A plan's objectives rendered as Prometheus alerting rules (`infra.render.alerts`), checked by Prometheus's own
rule tester where it is installed (`promtool`, in Debian's prometheus package that `.ci/run` installs): the rules
fire on a deployment that misses them, and stay quiet on pods of another workload."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from infra import api
from infra.catalog.metrics import pod_pattern
from infra.catalog.targets import kserve_pod_labels, modelservice_fullname
from infra.planner.types import load_plan
from infra.render import render_plan
from infra.render.alerts import objective_rules
from infra.validators.alerts import THRESHOLD
from infra.validators.pods import selector_labels, selects

from ..e2e.test_calibrate_cli import PROFILE
from ..e2e.test_observe_prometheus import INTENT, MONITORED

PROMTOOL = shutil.which("promtool")


def _rules(tmp_path: Path, profile: str = MONITORED) -> dict | None:
    (tmp_path / "loop.yaml").write_text(INTENT)
    (tmp_path / "profile.yaml").write_text(profile)
    api.plan(tmp_path / "loop.yaml", tmp_path / "out", verify=False)
    found = list((tmp_path / "out" / "manifests").rglob("prometheusrule-*.yaml"))
    return yaml.safe_load(found[0].read_text()) if found else None


def test_pod_pattern_takes_a_workloads_pods_and_no_other_workloads():
    import re

    pattern = re.compile(pod_pattern(["chat-a0", "chat-a2"]))
    for pod in ("chat-a0-5d8f9c7b6-x2x4q", "chat-a2-0", "chat-a2-0-1"):
        assert pattern.fullmatch(pod), pod
    for pod in ("chat-a1-5d8f9c7b6-x2x4q", "chat-a0-a0-5d8f9c7b6-x2x4q", "chatbot-a0-5d8f9c7b6-x2x4q", "chat-a0"):
        assert not pattern.fullmatch(pod), pod


def test_rules_cover_every_objective_the_engine_counts_and_say_what_they_leave():
    got = objective_rules("chat", "llm", "kubernetes", {"sglang": [0], None: [1]}, 3,
                          {"ttft_p99": 500.0, "tpot_p99": 40.0}, 8.0, "sha256:x")
    assert [r["labels"].get("objective") for r in got.rules] == ["ttft_p99", None]
    assert "sglang:time_to_first_token_seconds_bucket" in got.rules[0]["expr"]
    assert any("tpot_p99: sglang counts TPOT per gap" in line for line in got.skipped)
    assert any(line.startswith("a1: the engine exports no series") for line in got.skipped)
    assert any(line.startswith("a2: prefill/decode-disaggregated") for line in got.skipped)
    assert objective_rules("chat", "llm", "kubernetes", {}, 1, {"ttft_p99": 500.0}, None, "x").rules == []
    # The threshold is the plan's target to its last digit, as validation reads it back (PLN012).
    odd = objective_rules("chat", "llm", "kubernetes", {"vllm": [0]}, 1, {"ttft_p99": 1234.5678, "tpot_mean": 33.3},
                          None, "x")
    for r in odd.rules:
        threshold = float(THRESHOLD.search(r["expr"]).group(1))
        assert threshold == pytest.approx({"ttft_p99": 1.2345678, "tpot_mean": 0.0333}[r["labels"]["objective"]],
                                          rel=1e-11)
    # A service of several allocations: each is judged and calibrated on its own pods.
    two = objective_rules("chat", "llm", "kubernetes", {"vllm": [2, 10]}, 11, {"ttft_p99": 500.0}, None, "x")
    text = two.rules[0]["annotations"]["description"]
    assert "--allocation I --prometheus PROMETHEUS_URL" in text and "for each allocation I of 2, 10" in text
    assert 'pod=~"(chat-a2|chat-a10)-' in two.rules[0]["expr"]


def test_no_rules_where_the_cluster_runs_no_prometheus_operator(tmp_path: Path):
    assert _rules(tmp_path, PROFILE) is None


def test_the_rendered_rules_validate_and_name_the_plan(tmp_path: Path):
    labelled = MONITORED.replace("namespace: llm\n", "namespace: llm\n    monitoring_labels: {release: prom}\n")
    doc = _rules(tmp_path, labelled)
    assert doc["metadata"]["labels"]["release"] == "prom"
    [monitor] = (tmp_path / "out" / "manifests").rglob("podmonitor-*.yaml")
    assert yaml.safe_load(monitor.read_text())["metadata"]["labels"]["release"] == "prom"
    assert doc["apiVersion"] == "monitoring.coreos.com/v1" and doc["kind"] == "PrometheusRule"
    [group] = doc["spec"]["groups"]
    assert {(r["alert"], r["labels"].get("objective")) for r in group["rules"]} == {
        ("ServingObjectiveMissed", "ttft_p99"), ("ServingObjectiveMissed", "ttft_mean"),
        ("ServingObjectiveMissed", "tpot_p99"), ("ServingLoadPastPlan", None)}
    plan = yaml.safe_load((tmp_path / "out" / "plan.yaml").read_text())
    assert doc["metadata"]["annotations"]["infra.dev/plan-fingerprint"] == plan["spec"]["fingerprint"]
    assert all("infra verify PLAN --service chat --prometheus" in r["annotations"]["description"]
               for r in group["rules"])
    report = api.validate(tmp_path / "out" / "manifests", plan=tmp_path / "out" / "plan.yaml")
    assert not [f for f in report.findings if f.severity == "error"]


def _histogram(name: str, pod: str, le_counts: dict[str, str], total: str, count: str) -> list[dict[str, str]]:
    labels = f'namespace="llm",pod="{pod}"'
    out = [{"series": f'{name}_bucket{{{labels},le="{le}"}}', "values": v} for le, v in le_counts.items()]
    return out + [{"series": f"{name}_sum{{{labels}}}", "values": total},
                  {"series": f"{name}_count{{{labels}}}", "values": count}]


@pytest.mark.skipif(PROMTOOL is None, reason="needs promtool (Debian's prometheus package; .ci/run installs it)")
def test_prometheus_fires_the_rules_of_the_objectives_a_deployment_misses(tmp_path: Path):
    """Prometheus's rule tester evaluates the rendered rules over half an hour of series: the plan's pod serves two
    requests a second with first tokens between 1 and 2.5 s (TTFT p99 over 1 s and the mean over 400 ms) and tokens
    under 25 ms apart (TPOT within 40 ms); a pod of another workload, far slower and busier, is not watched. Then
    ten requests a second: past the 8/s peak. Half a request a second misses as badly, but 300 requests in ten
    minutes say nothing of a p99: only the mean's rule fires."""
    group = _rules(tmp_path)["spec"]["groups"][0]
    (tmp_path / "rules.yaml").write_text(yaml.safe_dump({"groups": [group]}))
    check = subprocess.run([PROMTOOL, "check", "rules", str(tmp_path / "rules.yaml")], capture_output=True, text=True)
    assert check.returncode == 0, check.stdout + check.stderr

    def served(pod: str, per_min: int, ttft_le: str, ttft_sum: float) -> list[dict[str, str]]:
        n = f"0+{per_min}x40"
        return (_histogram("vllm:time_to_first_token_seconds", pod,
                           {"0.5": "0+0x40", "1": "0+0x40", ttft_le: n, "+Inf": n}, f"0+{ttft_sum}x40", n)
                + _histogram("vllm:request_time_per_output_token_seconds", pod, {"0.025": n, "+Inf": n},
                             f"0+{per_min * 0.02:g}x40", n))

    by = {(r["alert"], r["labels"].get("objective")): r for r in group["rules"]}

    def expect(*keys: tuple[str, str | None]) -> list[dict]:
        return [{"exp_labels": by[k]["labels"], "exp_annotations": by[k]["annotations"]} for k in keys]

    slow = "chat-a0-5d8f9c7b6-x2x4q"
    other = served("chatbot-a0-5d8f9c7b6-x2x4q", 6000, "80", 6000 * 60.0)
    tests = [
        {"interval": "1m", "input_series": served(slow, 120, "2.5", 180.0) + other,
         "alert_rule_test": [
             {"eval_time": "30m", "alertname": "ServingObjectiveMissed",
              "exp_alerts": expect(("ServingObjectiveMissed", "ttft_mean"), ("ServingObjectiveMissed", "ttft_p99"))},
             {"eval_time": "30m", "alertname": "ServingLoadPastPlan", "exp_alerts": []}]},
        {"interval": "1m", "input_series": served(slow, 600, "0.5", 60.0) + other,
         "alert_rule_test": [
             {"eval_time": "30m", "alertname": "ServingObjectiveMissed", "exp_alerts": []},
             {"eval_time": "30m", "alertname": "ServingLoadPastPlan",
              "exp_alerts": expect(("ServingLoadPastPlan", None))}]},
        {"interval": "1m", "input_series": served(slow, 30, "2.5", 45.0),
         "alert_rule_test": [
             {"eval_time": "30m", "alertname": "ServingObjectiveMissed",
              "exp_alerts": expect(("ServingObjectiveMissed", "ttft_mean"))}]},
    ]
    (tmp_path / "test.yaml").write_text(json.dumps({"rule_files": ["rules.yaml"], "evaluation_interval": "1m",
                                                    "tests": tests}))
    run = subprocess.run([PROMTOOL, "test", "rules", str(tmp_path / "test.yaml")], capture_output=True, text=True,
                         cwd=tmp_path)
    assert run.returncode == 0, run.stdout + run.stderr


def test_validation_catches_a_loosened_stale_or_missing_objective_rule(tmp_path: Path):
    _rules(tmp_path)
    out, plan = tmp_path / "out", tmp_path / "out" / "plan.yaml"
    [path] = (out / "manifests").rglob("prometheusrule-*.yaml")
    original = path.read_text()

    def pln012() -> list[str]:
        report = api.validate(out / "manifests", plan=plan)
        return [f.message for f in report.findings if f.rule == "PLN012"]

    assert pln012() == []
    path.write_text(original.replace("> 1 and on ()", "> 2 and on ()"))
    assert pln012() == ["the ttft_p99 rule fires above 2 s; the plan promises 1 s"]
    # A rule on other pods than the plan's (a namePrefix, another namespace) would never fire.
    path.write_text(original.replace('namespace="llm"', 'namespace="prod"'))
    found = pln012()
    assert len(found) == 4 and all('reads {namespace="prod",pod=~"(chat-a0)-' in m for m in found), found
    assert any(m.startswith("the ServingLoadPastPlan rule reads") for m in found)
    assert 'not the series of the plan\'s engines ({namespace="llm",pod=~"(chat-a0)-' in found[0]
    doc = yaml.safe_load(original)
    doc["metadata"]["annotations"]["infra.dev/plan-fingerprint"] = "sha256:" + "0" * 64
    doc["spec"]["groups"][0]["rules"] = [r for r in doc["spec"]["groups"][0]["rules"]
                                         if r["labels"].get("objective") != "tpot_p99"]
    path.write_text(yaml.safe_dump(doc))
    found = pln012()
    assert any("watches another plan's promises" in m for m in found)
    assert "no rule watches tpot_p99 (40 ms), which the plan promises" in found
    path.unlink()
    kustomization = path.parent / "kustomization.yaml"
    kustomization.write_text(kustomization.read_text().replace(f"- {path.name}\n", ""))
    assert pln012() == ["the cluster runs the Prometheus Operator, but no PrometheusRule 'chat-objectives' watches "
                        "tpot_p99, ttft_mean, ttft_p99"]


# --- Deployment targets ---------------------------------------------------------------------------------------------

GOLDEN = Path(__file__).resolve().parents[1] / "golden"


def _target_rules(plan_name: str, target: str) -> dict | None:
    """The PrometheusRule a golden plan renders for `target` on a cluster running the Prometheus Operator."""
    plan = load_plan(GOLDEN / plan_name / "plan.yaml")
    plan.spec.cluster.crds["prometheus_operator"] = "monitoring.coreos.com/v1"
    files = render_plan(plan, target=target)
    found = [text for name, text in files.items() if "/prometheusrule-" in name]
    return yaml.safe_load(found[0]) if found else None


def test_a_dynamo_frontend_watches_every_allocation_disaggregated_ones_too():
    doc = _target_rules("pd-across-devices", "dynamo")
    rules = doc["spec"]["groups"][0]["rules"]
    assert {r["labels"].get("objective") for r in rules} == {"ttft_p99", None}  # TPOT: the frontend counts gaps
    sel = 'namespace="inference",model="chat"'
    assert all(f"dynamo_frontend_time_to_first_token_seconds_count{{{sel}}}" in r["expr"] for r in rules)
    text = rules[0]["annotations"]["description"]
    assert "its frontend's histograms" in text
    # Two allocations behind one frontend: its series cannot say which one served a request.
    assert "its frontend serves the service's 2 allocations together" in text and "infra verify" not in text
    one = _target_rules("measured-chat", "dynamo")["spec"]["groups"][0]["rules"][0]["annotations"]["description"]
    assert "infra verify PLAN --service chat --prometheus PROMETHEUS_URL --selector " \
           "'namespace=\"default\",model=\"chat\"'" in one
    # Without a frontend only the engines are read, and a disaggregated engine serves part of each request.
    assert _target_rules("pd-across-devices", "kserve") is None


def test_kserve_and_llm_d_rules_select_the_pods_of_the_workloads_those_operators_name():
    import re

    expected = {"kserve": ("chat-a0-kserve-5d8f9c7b6-x2x4q", "chat-a0-kserve-0-1"),
                "llm-d": ("chat-a0-llm-d-modelservice-decode-5d8f9c7b6-x2x4q",)}
    others = ("chat-a0-kserve-prefill-5d8f9c7b6-x2x4q", "chat-a0-kserve-router-scheduler-5d8f9c7b6-x2x4q",
              "chat-a0-llm-d-modelservice-prefill-5d8f9c7b6-x2x4q", "chat-a0-5d8f9c7b6-x2x4q", "chat-epp-7c9d-x2x4q")
    for target, pods in expected.items():
        doc = _target_rules("measured-chat", target)
        expr = doc["spec"]["groups"][0]["rules"][0]["expr"]
        pattern = re.compile(re.search(r'pod=~"([^"]+)"', expr).group(1))
        assert all(pattern.fullmatch(p) for p in pods), (target, pattern.pattern)
        assert not any(pattern.fullmatch(p) for p in others), (target, pattern.pattern)
    assert modelservice_fullname("chat-a0") == "chat-a0-llm-d-modelservice"
    assert modelservice_fullname("my-llm-d-modelservice") == "my-llm-d-modelservice"
    assert len(modelservice_fullname("x" * 40 + "-a0")) == 55


def test_llm_d_and_kserve_engines_are_scraped_by_a_monitor_that_carries_the_profiles_labels(tmp_path: Path):
    # The chart's own PodMonitor takes no labels at the pinned version, so infra renders one over the chart's engine
    # pods (their modelArtifacts labels) on the vLLM container's named port; KServe's upstream controller renders
    # none, so one selects the pods it creates by the labels it gives them, over its presets' TLS; Dynamo's operator
    # scrapes its own.
    plan = load_plan(GOLDEN / "measured-chat" / "plan.yaml")
    plan.spec.cluster.crds["prometheus_operator"] = "monitoring.coreos.com/v1"
    cluster = plan.spec.cluster.model_copy(update={"monitoring_labels": {"release": "prom"}})
    plan = plan.model_copy(update={"spec": plan.spec.model_copy(update={"cluster": cluster})})
    files = render_plan(plan, target="llm-d")
    [monitor] = [yaml.safe_load(t) for n, t in files.items() if "/podmonitor-" in n]
    assert monitor["spec"]["selector"] == {"matchLabels": {"llm-d.ai/inferenceServing": "true",
                                                           "llm-d.ai/model": "chat"}}
    assert monitor["metadata"]["labels"]["release"] == "prom"
    [values] = [yaml.safe_load(t) for n, t in files.items() if n.endswith(".values.yaml")]
    assert values["modelArtifacts"]["labels"].items() >= monitor["spec"]["selector"]["matchLabels"].items()
    port = monitor["spec"]["podMetricsEndpoints"][0]["port"]
    assert port in {p["name"] for p in values["decode"]["containers"][0]["ports"]}
    files = render_plan(plan, target="kserve")
    [monitor] = [yaml.safe_load(t) for n, t in files.items() if "/podmonitor-" in n]
    assert monitor["metadata"]["labels"]["release"] == "prom"
    [endpoint] = monitor["spec"]["podMetricsEndpoints"]
    assert endpoint["scheme"] == "https" and endpoint["port"] == "http"
    [llmisvc] = [yaml.safe_load(t) for n, t in files.items() if "/llminferenceservice-" in n]
    assert {"name": "http", "containerPort": 8000, "protocol": "TCP"} in llmisvc["spec"]["template"]["containers"][0][
        "ports"]
    sel = selector_labels(monitor["spec"]["selector"])
    assert all(selects(sel, labels) for labels in kserve_pod_labels(llmisvc["metadata"]["name"]))
    assert not selects(sel, {**kserve_pod_labels("chat-a0")[0], "app.kubernetes.io/component":
                             "llminferenceservice-router-scheduler"})
    assert not selects(sel, {**kserve_pod_labels("chat-a0")[0], "app.kubernetes.io/component":
                             "llminferenceservice-workload-prefill"})
    assert not [n for n in render_plan(plan, target="dynamo") if "/podmonitor-" in n]
    # validation knows the pods the operator and the chart create: the monitors select some
    for target in ("kserve", "llm-d"):
        out = tmp_path / target
        for name, body in render_plan(plan, target=target).items():
            (out / name).parent.mkdir(parents=True, exist_ok=True)
            (out / name).write_text(body)
        findings = api.validate(out).findings
        assert not [f for f in findings if f.rule in ("SEM002", "SEM008")], [str(f) for f in findings]


def test_validation_reads_the_objective_rules_of_a_target_tree(tmp_path: Path):
    plan_path = tmp_path / "plan.yaml"
    text = (GOLDEN / "pd-across-devices" / "plan.yaml").read_text()
    operator = "    crds:\n      prometheus_operator: monitoring.coreos.com/v1\n"
    plan_path.write_text(text.replace("    crds:\n", operator, 1))
    plan = load_plan(plan_path)
    out = tmp_path / "m"
    for name, body in render_plan(plan, target="dynamo").items():
        (out / name).parent.mkdir(parents=True, exist_ok=True)
        (out / name).write_text(body)

    def pln012() -> list[str]:
        return [f.message for f in api.validate(out, plan=plan_path).findings if f.rule == "PLN012"]

    assert pln012() == []
    [rule_file] = out.rglob("prometheusrule-*.yaml")
    original = rule_file.read_text()
    rule_file.write_text(original.replace("> 3 and on ()", "> 6 and on ()"))
    assert pln012() == ["the ttft_p99 rule fires above 6 s; the plan promises 3 s"]
    rule_file.write_text(original.replace('model="chat"', 'model="chatbot"'))
    assert pln012() == [f'the {what} rule reads {{namespace="inference",model="chatbot"}}, not the series of the '
                        'plan\'s engines ({namespace="inference",model="chat"})'
                        for what in ("ttft_p99", "ServingLoadPastPlan")]
    rule_file.unlink()
    kustomization = rule_file.parent / "kustomization.yaml"
    kustomization.write_text(kustomization.read_text().replace(f"- {rule_file.name}\n", ""))
    assert pln012() == ["the cluster runs the Prometheus Operator, but no PrometheusRule 'chat-objectives' watches "
                        "ttft_p99"]


@pytest.mark.skipif(PROMTOOL is None, reason="needs promtool (Debian's prometheus package; .ci/run installs it)")
def test_prometheus_fires_a_dynamo_frontends_rules_on_its_own_models_requests(tmp_path: Path):
    """The frontend of a disaggregated service answers two requests a second with first tokens between 3 and 5 s
    (TTFT p99 over its 3 s); another DynamoGraphDeployment's frontend in the namespace, serving another model
    slowly, is not watched."""
    doc = _target_rules("pd-across-devices", "dynamo")
    group = doc["spec"]["groups"][0]
    (tmp_path / "rules.yaml").write_text(yaml.safe_dump({"groups": [group]}))
    check = subprocess.run([PROMTOOL, "check", "rules", str(tmp_path / "rules.yaml")], capture_output=True, text=True)
    assert check.returncode == 0, check.stdout + check.stderr

    def frontend(model: str, per_min: int, le: str) -> list[dict[str, str]]:
        name, n = "dynamo_frontend_time_to_first_token_seconds", f"0+{per_min}x40"
        labels = f'namespace="inference",pod="{model}-frontend-5d8f9c7b6-x2x4q",model="{model}"'
        return ([{"series": f'{name}_bucket{{{labels},le="{b}"}}', "values": v}
                 for b, v in (("3", "0+0x40"), (le, n), ("+Inf", n))]
                + [{"series": f"{name}_sum{{{labels}}}", "values": f"0+{per_min * 4}x40"},
                   {"series": f"{name}_count{{{labels}}}", "values": n}])

    ttft = next(r for r in group["rules"] if r["labels"].get("objective") == "ttft_p99")
    tests = [
        {"interval": "1m", "input_series": frontend("chat", 120, "5"),
         "alert_rule_test": [{"eval_time": "30m", "alertname": "ServingObjectiveMissed",
                              "exp_alerts": [{"exp_labels": ttft["labels"], "exp_annotations": ttft["annotations"]}]}]},
        {"interval": "1m", "input_series": frontend("chatbot", 600, "5"),
         "alert_rule_test": [{"eval_time": "30m", "alertname": "ServingObjectiveMissed", "exp_alerts": []}]},
    ]
    (tmp_path / "test.yaml").write_text(json.dumps({"rule_files": ["rules.yaml"], "evaluation_interval": "1m",
                                                    "tests": tests}))
    run = subprocess.run([PROMTOOL, "test", "rules", str(tmp_path / "test.yaml")], capture_output=True, text=True,
                         cwd=tmp_path)
    assert run.returncode == 0, run.stdout + run.stderr
