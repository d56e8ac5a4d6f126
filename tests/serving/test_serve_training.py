"""serve-policy as a trainer: token versions, stale-token correction, whole groups only, and
the expiry of episodes nobody finishes."""

from __future__ import annotations

import copy
import dataclasses
import json

import httpx
import pytest
import torch

import agentic_rl.train.loop as loop
from agentic_rl.model.tokens import encode_text
from agentic_rl.serving.openai_api import ApiError, hermes_format, parse_chat_request
from agentic_rl.serving.openai_reply import build_reply
from agentic_rl.serving.policy_server import PolicyService
from agentic_rl.serving.recorder import EpisodeRecorder
from agentic_rl.types import Completion


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def request(messages, **body):
    return parse_chat_request(json.dumps({"messages": messages, **body}).encode())


def turn(recorder, messages, text, version=0, **body):
    """One recorded call that 'samples' `text`; returns the assistant message."""
    req = request(messages, **body)
    call = recorder.begin(req)
    ids = encode_text(recorder.tokenizer, text)
    done = Completion(ids, [-0.25] * len(ids), "length", text)
    reply = build_reply(done, req, hermes_format(req, recorder.tokenizer), recorder.tokenizer)
    recorder.commit(call, done, reply, version)
    return {"role": "assistant", "content": reply.content}


def episode(recorder, episode_id, question, reward=1.0, **finish):
    turn(recorder, [{"role": "user", "content": question}], "x", user=episode_id)
    return recorder.finish(episode_id, reward, **finish)


def taken_ids(episodes):
    return [samples[0].task_id for samples in episodes.samples]


def test_every_sampled_token_records_the_version_that_sampled_it(tokenizer):
    rec = EpisodeRecorder(tokenizer)
    msgs = [{"role": "user", "content": "q"}]
    reply = turn(rec, msgs, "a b", version=3, user="e")
    turn(rec, [*msgs, reply, {"role": "user", "content": "again"}], "c", version=4, user="e")
    (sample,) = rec.finish("e", 1.0)
    by_mask = {
        m: {v for v, mm in zip(sample.token_versions, sample.loss_mask, strict=True) if mm == m}
        for m in (0, 1)
    }
    assert by_mask == {0: {-1}, 1: {3, 4}}
    (first, second) = sample.turn_spans
    assert set(sample.token_versions[slice(*first)]) == {3}
    assert set(sample.token_versions[slice(*second)]) == {4}


def test_only_complete_groups_are_taken_whole_in_completion_order(tokenizer):
    rec = EpisodeRecorder(tokenizer, group_size=2)
    episode(rec, "a1", "qa")
    episode(rec, "b1", "qb")
    assert rec.ready() == 0 and len(rec.take_finished()) == 0  # no group is complete
    episode(rec, "b2", "qb")
    episode(rec, "a2", "qa")
    episode(rec, "c1", "qc")
    assert rec.ready() == 4
    # The old take_finished(2) handed out a1 and b1: two halves of two groups.
    assert taken_ids(rec.take_finished(2)) == ["b1", "b2"]  # b completed first
    assert taken_ids(rec.take_finished(1)) == ["a1", "a2"]  # a group is never split
    assert rec.ready() == 0 and [e for e, _ in rec.finished] == ["c1"]  # c waits for its sibling
    with pytest.raises(ValueError, match="group_size"):
        EpisodeRecorder(tokenizer, group_size=0)


def test_idle_open_episodes_expire_instead_of_a_permanent_429(tokenizer):
    clock = Clock()
    rec = EpisodeRecorder(tokenizer, max_open=1, ttl_s=60, clock=clock)
    turn(rec, [{"role": "user", "content": "q"}], "a", user="abandoned")
    with pytest.raises(ApiError, match="idle ones expire after 60 s") as full:
        rec.begin(request([{"role": "user", "content": "other"}], user="f"))
    assert full.value.status == 429
    clock.now = 59.0  # not yet
    with pytest.raises(ApiError):
        rec.begin(request([{"role": "user", "content": "other"}], user="f"))
    clock.now = 61.0
    call = rec.begin(request([{"role": "user", "content": "other"}], user="f"))
    assert rec.expired == {"open": 1, "waiting": 0}
    with pytest.raises(ApiError, match="expired") as gone:
        rec.get("abandoned")
    assert gone.value.status == 404
    clock.now = 1000.0  # a call in flight never expires, however long generation takes
    assert [s["episode_id"] for s in rec.summaries()] == ["f"]
    rec.abort(call)
    with pytest.raises(ValueError, match="ttl_s"):
        EpisodeRecorder(tokenizer, ttl_s=-1)


def test_stalled_incomplete_groups_expire_complete_groups_wait(tokenizer):
    clock = Clock()
    rec = EpisodeRecorder(tokenizer, group_size=2, ttl_s=60, clock=clock)
    episode(rec, "a1", "qa")
    episode(rec, "b1", "qb")
    episode(rec, "b2", "qb")
    clock.now = 50.0
    turn(rec, [{"role": "user", "content": "qa"}], "y", user="a2")  # a's sibling is playing
    clock.now = 100.0  # a1 finished 100 s ago, but its group has a live open episode
    assert [e for e, _ in rec.finished] == ["a1", "b1", "b2"]
    clock.now = 111.0  # a2 idle for 61 s: it expires, and a1's group can no longer complete
    assert rec.ready() == 2
    assert rec.expired == {"open": 1, "waiting": 1}
    clock.now = 10_000.0  # a complete group waits for training, however long
    assert taken_ids(rec.take_finished()) == ["b1", "b2"]
    never = EpisodeRecorder(tokenizer, group_size=2, ttl_s=0, clock=clock)
    episode(never, "a1", "qa")
    clock.now = 1e9
    assert never.ready() == 0 and len(never.finished) == 1 and never.expired["waiting"] == 0


def chat(client, episode_id, content, max_tokens=3):
    return client.chat.completions.create(
        model="t",
        messages=[{"role": "user", "content": content}],
        max_tokens=max_tokens,
        user=episode_id,
    )


def test_train_every_trains_whole_groups_only(setup, recording, serve):
    """Episodes finish a1, b1, b2, a2 with train_every=2, groups of 2: b trains when complete
    (its equal rewards carry no gradient), then a (rewards 1 and 0: +-0.707 advantages). Taking
    the two oldest, as before, paired a1 with b1: singleton groups, zero advantage."""
    service = PolicyService.from_setup(setup, train_every=2, group_size=2)
    service.generator = recording()
    before = {k: v.clone() for k, v in setup.policy.state_dict().items()}
    rewards = {"a1": ("qa", 1.0), "b1": ("qb", 0.5), "b2": ("qb", 0.5), "a2": ("qa", 0.0)}
    updates = {}
    try:
        with serve(service) as (url, client):
            for episode_id, (question, _) in rewards.items():
                chat(client, episode_id, question)
            for episode_id, (_, reward) in rewards.items():
                body = {"reward": reward}
                done = httpx.post(f"{url}/v1/episodes/{episode_id}/reward", json=body, timeout=60)
                updates[episode_id] = done.json()["update"]
            health = httpx.get(f"{url}/health").json()
    finally:
        setup.policy.load_state_dict(before)
    assert updates["a1"] is None and updates["b1"] is None
    assert updates["b2"]["samples"] == 2 and updates["b2"]["skipped_update"] == 1.0
    assert updates["a2"]["samples"] == 2 and updates["a2"]["nonzero_adv_fraction"] == 1.0
    assert updates["a2"]["skipped_update"] == 0.0 and updates["a2"]["policy_version"] == 1
    assert health["ready_episodes"] == 0 and health["expired_episodes"] == {"open": 0, "waiting": 0}


def test_an_episode_spanning_an_update_is_trained_as_stale(setup, recording, serve, monkeypatch):
    """s1's first turn is sampled by version 0, its second by version 1 (an update landed in
    between); s2 is all version 1. The update on {s1, s2} uses decoupled PPO: the recorded
    logprobs become the behaviour logprobs, the staleness is logged."""
    service = PolicyService.from_setup(setup, group_size=2)
    service.generator = recording()
    before = {k: v.clone() for k, v in setup.policy.state_dict().items()}
    seen = []
    real_update = loop.learner_update

    def spy(model, optimizer, batch, *args, **kwargs):
        seen.append(batch)
        return real_update(model, optimizer, batch, *args, **kwargs)

    monkeypatch.setattr(loop, "learner_update", spy)
    try:
        with serve(service) as (url, client):
            first = chat(client, "s1", "qs")
            for episode_id, reward in (("g1", 1.0), ("g2", 0.0)):  # moves the weights: v1
                chat(client, episode_id, "qg")
                httpx.post(f"{url}/v1/episodes/{episode_id}/reward", json={"reward": reward})
            fresh = service.train(service.take_finished())
            assert fresh["skipped_update"] == 0.0 and service.policy_version == 1
            assert fresh["staleness_max"] == 0.0  # nothing stale: the plain update
            assert not seen[-1].stale
            messages = [{"role": "user", "content": "qs"}]
            messages += [first.choices[0].message.model_dump(exclude_none=True)]
            messages += [{"role": "user", "content": "go on"}]
            client.chat.completions.create(model="t", messages=messages, max_tokens=3, user="s1")
            chat(client, "s2", "qs")
            for episode_id, reward in (("s1", 1.0), ("s2", 0.0)):
                httpx.post(f"{url}/v1/episodes/{episode_id}/reward", json={"reward": reward})
            episodes = service.take_finished()
            metrics = service.train(episodes)
    finally:
        setup.policy.load_state_dict(before)
    (s1,), (s2,) = episodes.samples
    assert set(s1.token_versions) == {-1, 0, 1} and set(s2.token_versions) == {-1, 1}
    assert metrics["staleness_max"] == 1.0 and metrics["partial_rollouts"] == 0.5
    stale = sum(v == 0 for v in s1.token_versions)
    generated = s1.num_generated + s2.num_generated
    assert metrics["stale_token_fraction"] == pytest.approx(stale / generated)
    batch = seen[-1]
    assert batch.stale and batch.behav_logprobs is not None  # decoupled PPO in the learner
    mask = batch.loss_mask.bool()
    recorded = [lp for s in (s1, s2) for lp, m in zip(s.logprobs, s.loss_mask, strict=True) if m]
    torch.testing.assert_close(batch.behav_logprobs[mask], torch.tensor(recorded))
    assert metrics["skipped_update"] == 0.0 and service.policy_version == 2


def test_training_on_served_episodes_refuses_what_cannot_correct_stale_tokens(setup):
    cfg = copy.deepcopy(setup.cfg)
    cfg.algo.policy_loss = "gspo"
    gspo = dataclasses.replace(setup, cfg=cfg)
    with pytest.raises(ValueError, match="not the token-level ppo loss: use algo.policy_loss=ppo"):
        PolicyService.from_setup(gspo, train_every=2)
    PolicyService.from_setup(gspo)  # recording, or training fresh episodes in-process, is fine
