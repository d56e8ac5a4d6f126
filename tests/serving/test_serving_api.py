"""The OpenAI wire format: request validation, hermes rendering, replies from completions."""

from __future__ import annotations

import json

import pytest

from agentic_rl.model.tokens import encode_text
from agentic_rl.serving.openai_api import (
    ApiError,
    canonical,
    hermes_format,
    parse_chat_request,
    prompt_messages,
)
from agentic_rl.serving.openai_reply import build_reply
from agentic_rl.types import Completion

TOOL = {
    "type": "function",
    "function": {
        "name": "lookup",
        "description": "Look a word up.",
        "parameters": {"type": "object", "properties": {"word": {"type": "string"}}},
    },
}


def request(**body):
    body.setdefault("messages", [{"role": "user", "content": "hi"}])
    return parse_chat_request(json.dumps(body).encode())


def completion(tokenizer, text, finish):
    ids = encode_text(tokenizer, text)
    return Completion(ids, [-0.5] * len(ids), finish, text)


def test_request_fields_are_normalised():
    req = request(
        messages=[
            {
                "role": "developer",
                "content": [{"type": "text", "text": "Be "}, {"type": "text", "text": "brief."}],
            },
            {"role": "user", "content": "hi"},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": "c1",
                        "type": "function",
                        "function": {"name": "lookup", "arguments": '{"word": "x"}'},
                    }
                ],
            },
            {"role": "tool", "tool_call_id": "c1", "content": "a letter"},
        ],
        tools=[TOOL],
        max_completion_tokens=7,
        temperature=0,
        stop="END",
        stream=False,
        n=1,
        metadata={"episode_id": "from-metadata"},
        user="from-user",
    )
    assert req.messages[0] == {"role": "system", "content": "Be brief.", "tool_calls": []}
    assert req.messages[2]["tool_calls"] == [("lookup", {"word": "x"})]
    params = req.sampling(default_max_tokens=99)
    assert (params.max_new_tokens, params.temperature, params.stop) == (
        7,
        0.0,
        ["END", "</tool_call>"],
    )
    assert req.episode_id == "from-metadata"  # metadata before user
    header = parse_chat_request(json.dumps({"messages": req_messages(), "user": "u"}).encode(), "h")
    assert header.episode_id == "h"  # the header before both
    assert request(tools=[TOOL], tool_choice="none").sampling(5).stop == []  # no tool calls


def req_messages():
    return [{"role": "user", "content": "hi"}]


@pytest.mark.parametrize(
    ("body", "words"),
    [
        ({"messages": [{"role": "user", "content": [{"type": "image_url"}]}]}, "only text parts"),
        ({"top_p": 0}, "'top_p'"),
        ({"stop": ["a", "b", "c", "d", "e"]}, "at most 4"),
        ({"seed": 1.5}, "'seed'"),
        ({"logprobs": "yes"}, "'logprobs'"),
        ({"presence_penalty": 0.5}, "'presence_penalty'"),
        ({"tools": [TOOL, TOOL]}, "distinct"),
        ({"tools": [{"type": "function", "function": {"name": "has space"}}]}, "name must match"),
        (
            {"messages": [{"role": "assistant", "content": "x", "tool_calls": [{"function": {}}]}]},
            "function.name",
        ),
    ],
)
def test_bad_requests_name_the_problem(body, words):
    with pytest.raises(ApiError, match=words) as err:
        request(**body)
    assert err.value.status == 400 and err.value.body()["error"]["message"]


def test_tools_go_into_the_system_message(tokenizer):
    with_system = request(
        messages=[{"role": "system", "content": "S"}, {"role": "user", "content": "q"}],
        tools=[TOOL],
    )
    rendered = prompt_messages(with_system, hermes_format(with_system, tokenizer))
    assert rendered[0]["content"].startswith("S\n\nYou can call functions") and len(rendered) == 2
    assert '"name": "lookup"' in rendered[0]["content"]
    bare = request(tools=[TOOL])
    rendered = prompt_messages(bare, hermes_format(bare, tokenizer))
    assert rendered[0]["role"] == "system" and rendered[1] == {"role": "user", "content": "hi"}
    assert prompt_messages(request(), hermes_format(request(), tokenizer)) == [
        {"role": "user", "content": "hi"}
    ]


def test_canonical_form_ignores_whitespace_and_argument_order():
    a = {"role": "assistant", "content": " ok\n", "tool_calls": [("f", {"x": 1, "y": 2})]}
    b = {"role": "assistant", "content": "ok", "tool_calls": [("f", {"y": 2, "x": 1})]}
    c = {"role": "assistant", "content": "ok", "tool_calls": [("f", {"x": 2})]}
    assert canonical(a) == canonical(b) != canonical(c)


def test_reply_from_a_tool_call_turn(tokenizer):
    req = request(tools=[TOOL])
    text = 'Checking.<tool_call>{"name": "lookup", "arguments": {"word": "quell"}}</tool_call>'
    reply = build_reply(
        completion(tokenizer, text, "stop"), req, hermes_format(req, tokenizer), tokenizer
    )
    assert (reply.content, reply.finish_reason) == ("Checking.", "tool_calls")
    assert reply.tool_calls == [("lookup", {"word": "quell"})]


def test_a_malformed_tool_call_stays_content_and_is_flagged(tokenizer):
    req = request(tools=[TOOL])
    text = "<tool_call>{not json}</tool_call>"
    reply = build_reply(
        completion(tokenizer, text, "stop"), req, hermes_format(req, tokenizer), tokenizer
    )
    assert reply.content == text and reply.tool_calls == [] and reply.finish_reason == "stop"
    assert "not valid JSON" in reply.invalid_tool_call


def test_reply_text_drops_eos_and_the_clients_stop_string(tokenizer):
    req = request(stop=["###"])
    fmt = hermes_format(req, tokenizer)
    eos = build_reply(completion(tokenizer, "Done.<|im_end|>", "eos"), req, fmt, tokenizer)
    assert (eos.content, eos.finish_reason) == ("Done.", "stop")
    stopped = build_reply(completion(tokenizer, "Part one ###", "stop"), req, fmt, tokenizer)
    assert stopped.content == "Part one "
    cut = build_reply(completion(tokenizer, "no end", "length"), req, fmt, tokenizer)
    assert (cut.content, cut.finish_reason) == ("no end", "length")
    # Without tools a tool-call-looking text is plain content.
    text = '<tool_call>{"name": "lookup", "arguments": {}}</tool_call>'
    plain = build_reply(completion(tokenizer, text, "stop"), request(), fmt, tokenizer)
    assert plain.content == text and plain.tool_calls == []
