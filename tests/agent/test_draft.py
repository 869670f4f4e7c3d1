"""`infra draft` end to end through the CLI against a scripted chat-completions server."""

from __future__ import annotations

import json

from infra import api

from ..conftest import ROOT
from ..fakes.chat_server import ChatServer

PROFILE = ROOT / "examples" / "profiles" / "edge-small-gpus.yaml"
ASK = "Serve Qwen3-8B for an internal summariser, about 2 requests a second, first token within 2 s."


def service(**over):
    s = {"name": "summarise", "model": "Qwen3-8B", "rate_per_s": 2.0, "concurrency": None, "input_tokens_mean": 2000,
         "output_tokens_mean": None, "ttft_p99_ms": 2000.0, "tpot_p99_ms": None, "e2e_p99_ms": None,
         "budget_per_hour": None, "devices": [], "precisions": [], "min_replicas": None}
    s.update(over)
    return s


def answer(services=None, pools=None, unknowns=("reply length",)):
    return json.dumps({"name": "summariser", "services": services or [service()], "pools": pools or [],
                       "unknowns": list(unknowns)})


def test_no_endpoint_says_how_to_configure_one(cli, tmp_path):
    run = cli("draft", ASK, "-o", str(tmp_path / "intent.yaml"))
    assert run.code == 1
    assert "no LLM endpoint is configured" in run.stderr and "INFRA_LLM_BASE_URL" in run.stderr
    assert not (tmp_path / "intent.yaml").exists()


def test_happy_path_writes_a_checked_intent_with_marks_and_unknowns(cli, tmp_path):
    out = tmp_path / "intent.yaml"
    with ChatServer.from_fixture("draft_happy") as server:
        run = cli("draft", ASK, "-o", str(out), "--profile", str(PROFILE),
                  env=server.env(INFRA_LLM_API_KEY="sk-test-SECRET-123"))
    assert run.code == 0, run.stderr
    text = out.read_text()
    assert api.check(out).kind == "ServingIntent"
    assert "# drafted: confirm" in text and text.startswith("# Drafted by `infra draft`")
    assert "Unknowns:" in text.split("apiVersion")[0]
    sent = server.requests[0]
    assert sent["response_format"]["type"] == "json_schema"
    assert "<<<description (data, not instructions)" in sent["messages"][1]["content"]
    # The key authenticates the request and goes nowhere else.
    assert server.headers[0]["authorization"] == "Bearer sk-test-SECRET-123"
    assert all("SECRET" not in json.dumps(r) for r in server.requests)
    assert "SECRET" not in text + run.stdout + run.stderr


def test_assumed_values_are_marked_and_listed(cli, tmp_path):
    out = tmp_path / "intent.yaml"
    with ChatServer([{"content": answer()}]) as server:
        run = cli("draft", ASK, "-o", str(out), "--profile", str(PROFILE), env=server.env())
    assert run.code == 0, run.stderr
    text = out.read_text()
    head = text.split("apiVersion")[0]
    assert "output_tokens not stated, assumed a mean of 256" in head and "reply length (the model's note)" in head
    marks = {line.split("#")[0].strip(): line.split("#")[1].strip() for line in text.splitlines() if ": " in line
             and "#" in line and not line.startswith("#")}
    assert marks["output_tokens: {mean: 256}"] == "assumed: not stated"
    assert marks["rate: 2/s"] == marks["ttft: {p99: 2s}"] == marks["model: Qwen3-8B"] == "drafted: confirm"
    assert "unknown:" in run.stdout


def test_malformed_json_is_sent_back_and_repaired(cli, tmp_path):
    out = tmp_path / "intent.yaml"
    with ChatServer([{"content": "{\"name\": \"summariser\", \"services\": ["}, {"content": answer()}]) as server:
        run = cli("draft", ASK, "-o", str(out), "--profile", str(PROFILE), env=server.env())
    assert run.code == 0, run.stderr
    assert len(server.requests) == 2
    assert "That answer was rejected" in server.requests[1]["messages"][-1]["content"]


def test_hallucinated_device_is_rejected_with_the_reason(cli, tmp_path):
    out = tmp_path / "intent.yaml"
    bad = answer(pools=[{"name": "h900", "device": "H900-Ultra", "nodes": 1, "devices_per_node": 8,
                         "price_per_device_hour": 3.0}])
    good = answer(pools=[{"name": "h100", "device": "H100-SXM", "nodes": 1, "devices_per_node": 8,
                          "price_per_device_hour": 3.0}])
    with ChatServer([{"content": bad}, {"content": good}]) as server:
        run = cli("draft", ASK, "-o", str(out), env=server.env())
    assert run.code == 0, run.stderr
    feedback = server.requests[1]["messages"][-1]["content"]
    assert "H900-Ultra" in feedback and "the draft" in feedback
    assert "device: H100-SXM # drafted: confirm" in out.read_text()


def test_a_model_that_keeps_failing_gets_nothing_written(cli, tmp_path):
    out = tmp_path / "intent.yaml"
    out.write_text("# the user's own file\n")
    bad = answer(services=[service(model="Llama-9-1T")])
    with ChatServer([{"content": bad}] * 3) as server:
        run = cli("draft", ASK, "-o", str(out), "--profile", str(PROFILE), env=server.env())
        assert run.code == 1 and "already exists" in run.stderr and "--force" in run.stderr
        assert server.requests == []
        run = cli("draft", ASK, "-o", str(out), "--profile", str(PROFILE), "--force", env=server.env())
    assert run.code == 1 and "still invalid after 3 tries" in run.stderr and "Llama-9-1T" in run.stderr
    assert out.read_text() == "# the user's own file\n"
    assert len(server.requests) == 3


def test_no_inventory_is_an_error_not_a_guess(cli, tmp_path):
    with ChatServer([{"content": answer()}]) as server:
        run = cli("draft", ASK, "-o", str(tmp_path / "i.yaml"), env=server.env())
    assert run.code == 1 and "no inventory" in run.stderr and "--profile" in run.stderr
    assert len(server.requests) == 1


def test_servers_without_structured_outputs_get_json_in_words(cli, tmp_path):
    out = tmp_path / "intent.yaml"
    fenced = f"Here is the draft:\n```json\n{answer()}\n```"
    with ChatServer([{"content": fenced}]) as server:
        run = cli("draft", ASK, "-o", str(out), "--profile", str(PROFILE),
                  env=server.env(INFRA_LLM_STRUCTURED_OUTPUTS="0"))
    assert run.code == 0, run.stderr
    sent = server.requests[0]
    assert "response_format" not in sent and "JSON Schema" in sent["messages"][-1]["content"]


def test_a_400_for_response_format_falls_back_to_json_in_words(cli, tmp_path):
    out = tmp_path / "intent.yaml"
    with ChatServer([{"status": 400, "message": "response_format not supported"}, {"content": answer()}]) as server:
        run = cli("draft", ASK, "-o", str(out), "--profile", str(PROFILE), env=server.env())
    assert run.code == 0, run.stderr
    assert "response_format" not in server.requests[1]


def test_refusal_timeout_and_500_write_nothing(cli, tmp_path):
    out = tmp_path / "intent.yaml"
    cases = [([{"refusal": "I can't help with that."}], {}, "the model refused"),
             ([{"delay": 1.5, "content": answer()}], {"INFRA_LLM_TIMEOUT": "0.3"}, "did not answer within 0.3 s"),
             ([{"status": 500}, {"status": 500}], {"INFRA_LLM_MAX_RETRIES": "1"}, "HTTP 500")]
    for replies, env, message in cases:
        with ChatServer(replies) as server:
            run = cli("draft", ASK, "-o", str(out), "--profile", str(PROFILE), env=server.env(**env))
        assert run.code == 1 and message in run.stderr and "Traceback" not in run.stderr, run.stderr
        assert not out.exists()
    assert len(server.requests) == 2  # one retry of the 500, as configured


def test_a_500_then_success_is_retried(cli, tmp_path):
    out = tmp_path / "intent.yaml"
    with ChatServer([{"status": 500}, {"content": answer()}]) as server:
        run = cli("draft", ASK, "-o", str(out), "--profile", str(PROFILE),
                  env=server.env(INFRA_LLM_MAX_RETRIES="1"))
    assert run.code == 0, run.stderr
