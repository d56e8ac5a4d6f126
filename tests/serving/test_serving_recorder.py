"""Episode assembly without a server or a model: token bookkeeping, rewards, refusals."""

from __future__ import annotations

import json

import pytest

from agentic_rl.model.tokens import TokenizerCheckError, encode_text
from agentic_rl.serving.openai_api import ApiError, hermes_format, parse_chat_request
from agentic_rl.serving.openai_reply import build_reply
from agentic_rl.serving.recorder import EpisodeRecorder
from agentic_rl.types import Completion


def request(messages, **body):
    return parse_chat_request(json.dumps({"messages": messages, **body}).encode())


def turn(recorder, messages, text, finish="length", version=0, **body):
    """One call: begin, 'sample' `text`, commit; returns (call, completion, assistant message)."""
    req = request(messages, **body)
    call = recorder.begin(req)
    ids = encode_text(recorder.tokenizer, text)
    done = Completion(ids, [-0.25] * len(ids), finish, text)
    reply = build_reply(done, req, hermes_format(req, recorder.tokenizer), recorder.tokenizer)
    recorder.commit(call, done, reply, version)
    message = {"role": "assistant", "content": reply.content}
    return call, done, message


def test_a_turn_that_ended_with_eos_is_not_closed_twice(tokenizer):
    rec = EpisodeRecorder(tokenizer)
    msgs = [{"role": "user", "content": "hi"}]
    first, done, reply = turn(rec, msgs, "Hello!<|im_end|>", finish="eos", user="e")
    msgs += [reply, {"role": "user", "content": "bye"}]
    second, _, _ = turn(rec, msgs, "Bye", user="e")
    # eos was sampled (mask 1): the inserted text starts right after it, with the newline.
    expected = encode_text(tokenizer, "\n<|im_start|>user\nbye<|im_end|>\n<|im_start|>assistant\n")
    assert second.injected == expected
    assert second.prompt == first.prompt + done.token_ids + expected
    (seg,) = rec.get("e").segments
    assert (
        seg.token_ids.count(tokenizer.eos_token_id)
        == first.prompt.count(tokenizer.eos_token_id) + 2
    )  # the sampled eos and the one closing "bye"; none inserted after "Hello!"


def test_rewards_and_versions_reach_the_samples(tokenizer):
    rec = EpisodeRecorder(tokenizer)
    msgs = [{"role": "user", "content": "q"}]
    _, _, reply = turn(rec, msgs, "a", version=3, user="e")
    turn(rec, [*msgs, reply, {"role": "user", "content": "again"}], "b", version=4, user="e")
    with pytest.raises(ApiError, match="1 entries, the episode has 2") as err:
        rec.finish("e", 1.0, step_rewards=[1.0])
    assert err.value.status == 400
    (sample,) = rec.finish("e", 2.0, step_rewards=[0.5, 1.5], group_id="g", task_id="t")
    assert (sample.step_rewards, sample.reward, sample.group_id, sample.task_id) == (
        [0.5, 1.5],
        2.0,
        "g",
        "t",
    )
    assert sample.policy_version == 3 and sample.metrics["policy_version_span"] == 1.0
    assert sample.metrics["turns"] == 2 and sample.metrics["success"] == 1.0
    assert sum(sample.loss_mask) == sample.metrics["generated_tokens"]
    with pytest.raises(ApiError, match="already finished"):
        rec.finish("e", 0.0)
    with pytest.raises(ApiError, match="already finished"):
        rec.begin(request(msgs, user="e"))
    episodes = rec.take_finished()
    assert len(episodes) == 1 and episodes.tasks[0].task_id == "t"
    assert len(rec.take_finished()) == 0
    with pytest.raises(ApiError) as gone:
        rec.get("e")
    assert gone.value.status == 404


def test_default_reward_is_an_outcome_on_the_last_turn(tokenizer):
    rec = EpisodeRecorder(tokenizer)
    msgs = [{"role": "user", "content": "q"}]
    _, _, reply = turn(rec, msgs, "a", user="e")
    turn(rec, [*msgs, reply, {"role": "user", "content": "more"}], "b", user="e")
    (sample,) = rec.finish("e", 0.0, truncated=True)
    assert sample.step_rewards == [0.0, 0.0] and sample.truncated and not sample.terminated
    assert sample.metrics["success"] == 0.0


def test_one_call_at_a_time_per_episode_and_aborts_forget(tokenizer):
    rec = EpisodeRecorder(tokenizer, max_open=1)
    call = rec.begin(request([{"role": "user", "content": "q"}], user="e"))
    with pytest.raises(ApiError, match="in flight") as busy:
        rec.begin(request([{"role": "user", "content": "q"}], user="e"))
    assert busy.value.status == 409
    with pytest.raises(ApiError, match="in flight"):
        rec.finish("e", 1.0)
    rec.abort(call)  # a failed first call leaves no episode behind
    assert rec.summaries() == []
    turn(rec, [{"role": "user", "content": "q"}], "a", user="e")
    with pytest.raises(ApiError, match="1 episodes are open") as full:
        rec.begin(request([{"role": "user", "content": "other"}], user="f"))
    assert full.value.status == 429
    rec.discard("e")
    assert rec.summaries() == []


def test_changing_the_tools_or_resending_the_same_history_is_refused(tokenizer):
    rec = EpisodeRecorder(tokenizer)
    tool = {"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}
    msgs = [{"role": "user", "content": "q"}]
    _, _, reply = turn(rec, msgs, "a", user="e", tools=[tool])
    with pytest.raises(ApiError, match="tools differ"):
        rec.begin(request([*msgs, reply, {"role": "user", "content": "x"}], user="e"))
    with pytest.raises(ApiError, match="do not go past") as same:
        rec.begin(request([*msgs, reply], user="e", tools=[tool]))
    assert same.value.status == 409
    with pytest.raises(ValueError, match="reject' or 'split"):
        EpisodeRecorder(tokenizer, on_mismatch="ignore")  # type: ignore[arg-type]


def test_a_template_that_rewrites_history_is_refused_up_front(tokenizer):
    """A template that drops earlier reasoning would make spliced tokens differ from what the
    template renders: the recorder refuses it before serving anything."""
    import copy

    rewriting = copy.deepcopy(tokenizer)
    rewriting.chat_template = (
        "{% for m in messages %}{% if m['role'] != 'assistant' or loop.last %}"
        "<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endif %}{% endfor %}"
        "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
    )
    with pytest.raises(TokenizerCheckError, match="not prefix-preserving"):
        EpisodeRecorder(rewriting)
