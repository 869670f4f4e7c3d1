"""The load client's reading of a stream (SSE edge cases) and the requests it builds."""

from __future__ import annotations

import json

import pytest

from infra.bench.client import ClientOptions, StreamState, base_url, prompt_words, request_body
from infra.bench.emulator import PrefixIndex
from infra.bench.workload import RequestSpec


def _chunk(delta=None, finish=None, text=None, usage=None, choices=True) -> str:
    obj: dict = {"id": "x", "object": "chat.completion.chunk"}
    if choices:
        choice: dict = {"index": 0, "finish_reason": finish}
        if text is not None:
            choice["text"] = text
        else:
            choice["delta"] = delta if delta is not None else {}
        obj["choices"] = [choice]
    else:
        obj["choices"] = []
    if usage is not None:
        obj["usage"] = usage
    return "data: " + json.dumps(obj)


def _feed(events: list[tuple[float, str]]) -> StreamState:
    state = StreamState(t_send=10.0)
    for t, line in events:
        state.feed(line, t)
    return state


def test_role_only_and_empty_chunks_are_not_tokens():
    state = _feed([
        (10.05, _chunk({"role": "assistant", "content": ""})),
        (10.06, _chunk({"content": None})),
        (10.07, _chunk({"content": ""})),
        (10.20, _chunk({"content": "a"})),
        (10.30, _chunk({"content": "b"})),
        (10.40, _chunk({"content": "c"}, finish="length")),
        (10.41, _chunk(choices=False, usage={"prompt_tokens": 7, "completion_tokens": 3})),
        (10.42, "data: [DONE]"),
    ])
    rec = state.record(0, 9.9, input_tokens=5)
    assert rec.ok and not rec.approximate
    assert rec.ttft == pytest.approx(0.20) and rec.ttft_any == pytest.approx(0.05)
    assert rec.e2e == pytest.approx(0.40)
    assert rec.itl == pytest.approx((0.10, 0.10))
    assert rec.output_tokens == 3 and rec.input_tokens == 7
    assert rec.tpot == pytest.approx(0.10)
    assert rec.t_send - rec.t_sched == pytest.approx(0.1)


def test_finish_reason_only_chunk_ends_the_answer_without_being_a_token():
    state = _feed([(10.1, _chunk({"content": "a"})), (10.2, _chunk({"content": "b"})),
                   (10.9, _chunk({}, finish="stop")), (11.0, "data: [DONE]")])
    rec = state.record(0, 10.0, 4)
    assert rec.ok and rec.e2e == pytest.approx(0.2) and rec.output_tokens == 2 and rec.approximate


def test_multi_token_chunks_take_the_token_count_from_usage():
    state = _feed([(10.1, _chunk({"content": "ab"})), (10.3, _chunk({"content": "cd"})),
                   (10.5, _chunk({"content": "ef"}, finish="length")),
                   (10.5, _chunk(choices=False, usage={"prompt_tokens": 3, "completion_tokens": 6}))])
    rec = state.record(0, 10.0, 3)
    assert rec.output_tokens == 6 and not rec.approximate
    assert len(rec.itl) == 2  # ITL is per chunk gap
    assert rec.tpot == pytest.approx(0.4 / 5)


def test_missing_usage_counts_chunks_and_flags_the_record_approximate():
    state = _feed([(10.1, _chunk({"content": "ab"})), (10.2, _chunk({"content": "cd"}, finish="length")),
                   (10.2, "data: [DONE]")])
    rec = state.record(3, 10.0, input_tokens=9)
    assert rec.ok and rec.approximate and rec.output_tokens == 2 and rec.input_tokens == 9


def test_a_stream_without_finish_reason_is_truncated():
    rec = _feed([(10.1, _chunk({"content": "a"})), (10.2, _chunk({"content": "b"}))]).record(0, 10.0, 1)
    assert not rec.ok and rec.error.startswith("truncated:")


def test_a_stream_without_a_token_is_a_failure():
    rec = _feed([(10.1, _chunk({"role": "assistant"})), (10.2, _chunk({}, finish="stop"))]).record(0, 10.0, 1)
    assert not rec.ok and rec.error.startswith("empty:")


def test_error_event_and_garbage_fail_the_request():
    err = _feed([(10.1, _chunk({"content": "a"})), (10.2, 'data: {"error": {"message": "boom"}}')])
    assert err.record(0, 10.0, 1).error == "stream_error: boom"
    bad = _feed([(10.1, "data: {not json")])
    assert bad.record(0, 10.0, 1).error.startswith("bad_sse:")


def test_comments_and_other_fields_are_ignored():
    state = _feed([(10.0, ": keep-alive"), (10.0, "event: message"), (10.0, ""),
                   (10.1, _chunk({"content": "a"}, finish="length"))])
    assert state.record(0, 10.0, 1).ok


def test_completions_text_and_reasoning_and_tool_calls_are_tokens():
    comp = _feed([(10.1, _chunk(text="")), (10.2, _chunk(text=" hi", finish="length"))]).record(0, 10.0, 1)
    assert comp.ok and comp.ttft == pytest.approx(0.2)
    reason = _feed([(10.1, _chunk({"reasoning_content": "think"})),
                    (10.3, _chunk({"tool_calls": [{"index": 0}]}, finish="tool_calls"))]).record(0, 10.0, 1)
    assert reason.ok and reason.ttft == pytest.approx(0.1) and reason.output_tokens == 2


def test_prompts_share_their_group_prefix_and_have_the_requested_length():
    a = prompt_words(RequestSpec(0, None, 40, 8, prefix_group=2, prefix_tokens=30))
    b = prompt_words(RequestSpec(1, None, 50, 8, prefix_group=2, prefix_tokens=30))
    c = prompt_words(RequestSpec(2, None, 40, 8, prefix_group=3, prefix_tokens=30))
    assert len(a) == 40 and len(b) == 50
    assert a[:30] == b[:30] and a[:30] != c[:30]
    assert a == prompt_words(RequestSpec(0, None, 40, 8, prefix_group=2, prefix_tokens=30))


def test_the_emulator_finds_the_client_s_shared_prefixes_as_a_prefix_cache_would():
    """`infra emulate` reads a prompt's words in whole blocks of chained hashes: a prompt of a group shares the
    leading blocks an earlier prompt of it had (the first of a group offers all its whole blocks, for the engines
    to keep), prompts under a block nothing, and the groups met longest ago are forgotten first once the blocks
    run over."""
    index = PrefixIndex()
    specs = [RequestSpec(i, None, n, 8, prefix_group=g, prefix_tokens=p)
             for i, (n, g, p) in enumerate([(400, 1, 300), (500, 1, 200), (600, 1, 350), (400, 2, 300), (10, 1, 10)])]
    got = [index.find(prompt_words(s)) for s in specs]
    assert got[:3] == [(0, 400), (0, 192), (0, 288)]  # 200 and min(300, 350) words in common, in blocks of 16
    assert got[3] == (1, 400) and got[4] == (-1, 0)
    small = PrefixIndex(most=40)
    first = prompt_words(specs[0])
    assert small.find(first) == (0, 400) and small.find(first) == (0, 400)
    assert small.find(prompt_words(specs[3])) == (1, 400)  # 25 + 25 blocks, over 40: the first group forgotten
    assert small.find(first) == (2, 400)


def test_request_body_asks_for_usage_and_the_output_length():
    spec = RequestSpec(0, None, 4, 17, 0, 0)
    chat = request_body(spec, ClientOptions(url="http://x", min_tokens=True), "m")
    assert chat["stream"] and chat["stream_options"] == {"include_usage": True}
    assert chat["max_tokens"] == 17 and chat["ignore_eos"] is True and chat["min_tokens"] == 17
    assert len(chat["messages"][0]["content"].split()) == 4
    comp = request_body(spec, ClientOptions(url="http://x", api="completions", ignore_eos=False), "m")
    assert "prompt" in comp and "ignore_eos" not in comp and "min_tokens" not in comp


def test_base_url_forms():
    assert base_url("http://h:1") == base_url("http://h:1/v1/") == "http://h:1/v1"
