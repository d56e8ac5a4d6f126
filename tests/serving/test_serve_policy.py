"""The policy server end to end: a real uvicorn server on loopback, driven by the openai client."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
import torch

from agentic_rl.formats.tir import hermes_tools_prompt
from agentic_rl.retrieval.server import bind_socket
from agentic_rl.serving.batching import ServeLimits
from agentic_rl.serving.export import load_episodes
from agentic_rl.serving.openai_api import ToolSpec
from agentic_rl.serving.policy_server import PolicyService
from agentic_rl.train.batch import prepare_batch
from agentic_rl.train.sft import load_trajectories

ADD = {
    "type": "function",
    "function": {
        "name": "add",
        "description": "Add two integers.",
        "parameters": {
            "type": "object",
            "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
            "required": ["a", "b"],
        },
    },
}
SYSTEM = "Use the tools."


def template_ids(tokenizer, text: str) -> list[int]:
    return tokenizer(text, add_special_tokens=False)["input_ids"]


def opening_ids(tokenizer, user: str) -> list[int]:
    """The first prompt, built here independently: the tool list in the system message."""
    spec = ToolSpec("add", ADD["function"]["description"], ADD["function"]["parameters"])
    system = f"{SYSTEM}\n\n{hermes_tools_prompt([spec])}"
    text = f"<|im_start|>system\n{system}<|im_end|>\n<|im_start|>user\n{user}<|im_end|>\n"
    return template_ids(tokenizer, text + "<|im_start|>assistant\n")


def test_calls_of_an_episode_are_one_token_native_trajectory(setup, recording, serve, recompute):
    generator = recording()
    service = PolicyService(generator, setup.tokenizer)
    tok = setup.tokenizer
    messages = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": "2 plus 3?"}]
    with serve(service) as (url, client):
        first = client.chat.completions.create(
            model="tiny",
            messages=messages,
            tools=[ADD],
            max_tokens=6,
            user="ep-1",
            seed=1,
            logprobs=True,
        )
        messages.append(first.choices[0].message.model_dump(exclude_none=True))
        messages.append({"role": "user", "content": "Now add 1."})
        second = client.chat.completions.create(
            model="tiny", messages=messages, tools=[ADD], max_tokens=5, user="ep-1", seed=2
        )
        assert first.model_extra["episode_id"] == second.model_extra["episode_id"] == "ep-1"
        done = httpx.post(f"{url}/v1/episodes/ep-1/reward", json={"reward": 0.5}).json()
    assert done["samples"] == 1
    (prompt1, turn1), (prompt2, turn2) = generator.calls
    # The first prompt is the conversation rendered by the chat template, tools included.
    assert prompt1 == opening_ids(tok, "2 plus 3?")
    # The second prompt reuses turn 1 exactly as sampled, then the user message as the
    # template renders it (the template's end-of-turn token closes turn 1 unless sampled).
    closing = "" if turn1.finish_reason == "eos" else "<|im_end|>"
    injected = template_ids(
        tok, f"{closing}\n<|im_start|>user\nNow add 1.<|im_end|>\n<|im_start|>assistant\n"
    )
    assert prompt2 == prompt1 + turn1.token_ids + injected

    (traj,) = service.take_finished().samples[0]
    assert traj.token_ids == prompt2 + turn2.token_ids
    n1, n2, p = len(turn1.token_ids), len(turn2.token_ids), len(prompt1)
    assert traj.loss_mask == [0] * p + [1] * n1 + [0] * len(injected) + [1] * n2
    assert traj.turn_spans == [(p, p + n1), (len(prompt2), len(prompt2) + n2)]
    assert traj.prompt_length == p and traj.reward == 0.5 and traj.step_rewards == [0.0, 0.5]
    behaviour = [traj.logprobs[i] for i, m in enumerate(traj.loss_mask) if m]
    assert behaviour == turn1.logprobs + turn2.logprobs  # recorded exactly as sampled
    assert [e.logprob for e in first.choices[0].logprobs.content] == turn1.logprobs
    # ... and they are the policy's logprobs of those tokens in this context.
    fresh = [lp for lp, m in zip(recompute(traj.token_ids), traj.loss_mask, strict=True) if m]
    torch.testing.assert_close(torch.tensor(behaviour), torch.tensor(fresh), atol=1e-4, rtol=0)
    assert all(lp == 0.0 for lp, m in zip(traj.logprobs, traj.loss_mask, strict=True) if not m)


def test_tool_call_round_trip_with_the_openai_client(setup, scripted, serve):
    tok = setup.tokenizer
    turns = ['Let me add.<tool_call>{"name": "add", "arguments": {"a": 2, "b": 3}}</tool_call>']
    turns.append("The sum is 5.<|im_end|>")
    generator = scripted(turns)
    service = PolicyService(generator, tok)
    messages = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": "2 plus 3?"}]
    with serve(service) as (url, client):
        first = client.chat.completions.create(model="tiny", messages=messages, tools=[ADD])
        choice = first.choices[0]
        assert choice.finish_reason == "tool_calls"
        assert choice.message.content == "Let me add."
        (call,) = choice.message.tool_calls
        assert call.function.name == "add"
        assert json.loads(call.function.arguments) == {"a": 2, "b": 3}
        messages.append(choice.message.model_dump(exclude_none=True))
        messages.append({"role": "tool", "tool_call_id": call.id, "content": "5"})
        second = client.chat.completions.create(model="tiny", messages=messages, tools=[ADD])
        assert second.choices[0].finish_reason == "stop"
        assert second.choices[0].message.content == "The sum is 5."
        assert second.choices[0].message.tool_calls is None
        episode_id = first.model_extra["episode_id"]  # no id given: the server named it
        assert second.model_extra["episode_id"] == episode_id
        httpx.post(f"{url}/v1/episodes/{episode_id}/reward", json={"reward": 1.0})
    (prompt1, turn1), (prompt2, turn2) = generator.calls
    assert generator.calls[0][0] == opening_ids(tok, "2 plus 3?")
    tool_turn = "<|im_end|>\n<|im_start|>tool\n<tool_response>\n5\n</tool_response><|im_end|>\n"
    injected = template_ids(tok, tool_turn + "<|im_start|>assistant\n")
    assert prompt2 == prompt1 + turn1.token_ids + injected
    (traj,) = service.take_finished().samples[0]
    assert traj.token_ids == prompt2 + turn2.token_ids
    masks = [[0] * len(prompt1), [1] * len(turn1.token_ids), [0] * len(injected)]
    assert traj.loss_mask == [m for part in masks for m in part] + [1] * len(turn2.token_ids)
    assert traj.token_ids[-1] == tok.eos_token_id and traj.loss_mask[-1] == 1  # sampled eos
    assert traj.metrics["tool_calls"] == 1 and traj.metrics["turns"] == 2


def test_calls_without_an_id_join_the_episode_they_extend(setup, recording, serve):
    service = PolicyService(recording(), setup.tokenizer)
    messages = [{"role": "user", "content": "hi"}]
    with serve(service) as (_, client):
        a = client.chat.completions.create(model="tiny", messages=messages, max_tokens=2)
        messages += [a.choices[0].message.model_dump(exclude_none=True)]
        messages += [{"role": "user", "content": "more"}]
        b = client.chat.completions.create(model="tiny", messages=messages, max_tokens=2)
        other = client.chat.completions.create(
            model="tiny", messages=[{"role": "user", "content": "hi"}], max_tokens=2
        )
    assert a.model_extra["episode_id"] == b.model_extra["episode_id"]
    assert other.model_extra["episode_id"] != a.model_extra["episode_id"]
    summary = {s["episode_id"]: s for s in service.recorder.summaries()}
    assert summary[a.model_extra["episode_id"]]["turns"] == 2
    assert (
        summary[a.model_extra["episode_id"]]["group_id"]
        == summary[other.model_extra["episode_id"]]["group_id"]
    )  # same opening prompt: same GRPO group


@pytest.mark.parametrize("on_mismatch", ["reject", "split"])
def test_edited_history_is_refused_or_starts_a_new_sample(setup, recording, serve, on_mismatch):
    service = PolicyService(recording(), setup.tokenizer, on_mismatch=on_mismatch)
    messages = [{"role": "user", "content": "hi"}]
    with serve(service) as (url, client):
        a = client.chat.completions.create(model="t", messages=messages, max_tokens=2, user="e")
        edited = [
            {"role": "user", "content": "hello"},  # not what the episode recorded
            a.choices[0].message.model_dump(exclude_none=True),
            {"role": "user", "content": "more"},
        ]
        response = httpx.post(
            f"{url}/v1/chat/completions",
            json={"messages": edited, "max_tokens": 2},
            headers={"X-Episode-Id": "e"},
        )
        if on_mismatch == "reject":
            assert response.status_code == 409
            assert "message 0 (user) differs" in response.json()["error"]["message"]
            return
        assert response.status_code == 200
        httpx.post(f"{url}/v1/episodes/e/reward", json={"reward": 1.0}).raise_for_status()
    (samples,) = service.take_finished().samples
    assert len(samples) == 2 and all(s.reward == 1.0 for s in samples)
    assert samples[1].metrics["segments"] == 2.0
    # The new sample: the edited conversation rendered whole (mask 0), then the new turn.
    usage = response.json()["usage"]
    assert samples[1].prompt_length == usage["prompt_tokens"]
    assert sum(samples[1].loss_mask) == usage["completion_tokens"]
    assert sum(samples[1].loss_mask[: samples[1].prompt_length]) == 0
    assert len(samples[0].turn_spans) == 1 and samples[0].token_ids != samples[1].token_ids


MALFORMED = [
    (b"{not json", 400, "not valid JSON"),
    (b"[]", 400, "JSON object"),
    (json.dumps({"messages": []}).encode(), 400, "'messages'"),
    (json.dumps({"messages": [{"role": "wizard", "content": "x"}]}).encode(), 400, "role"),
    (json.dumps({"messages": [{"role": "user"}]}).encode(), 400, "needs 'content'"),
    (json.dumps({"messages": [{"role": "user", "content": "x"}], "n": 2}).encode(), 400, "'n'"),
    (
        json.dumps({"messages": [{"role": "user", "content": "x"}], "stream": True}).encode(),
        400,
        "'stream'",
    ),
    (
        json.dumps({"messages": [{"role": "user", "content": "x"}], "temperature": 3}).encode(),
        400,
        "'temperature'",
    ),
    (
        json.dumps({"messages": [{"role": "user", "content": "x"}], "max_tokens": 0}).encode(),
        400,
        "'max_tokens'",
    ),
    (
        json.dumps({"messages": [{"role": "user", "content": "x"}], "max_tokens": 10**6}).encode(),
        400,
        "exceeds the context",
    ),
    (
        json.dumps({"messages": [{"role": "user", "content": "x"}], "top_k": 5}).encode(),
        400,
        "unsupported field(s): top_k",
    ),
    (
        json.dumps({"messages": [{"role": "user", "content": "x"}], "tools": [{"x": 1}]}).encode(),
        400,
        "tools[0]",
    ),
    (
        json.dumps({"messages": [{"role": "user", "content": "x"}], "user": "a/b"}).encode(),
        400,
        "episode id",
    ),
]


def test_malformed_requests_get_4xx_and_the_server_keeps_serving(setup, recording, serve):
    service = PolicyService(recording(), setup.tokenizer)
    with serve(service) as (url, client):
        for body, status, words in MALFORMED:
            r = httpx.post(f"{url}/v1/chat/completions", content=body)
            assert r.status_code == status, (body, r.text)
            assert words in r.json()["error"]["message"], (body, r.text)
        import openai

        with pytest.raises(openai.BadRequestError, match="tool_choice 'auto' or 'none'"):
            client.chat.completions.create(
                model="t", messages=[{"role": "user", "content": "x"}], tool_choice="required"
            )
        ok = client.chat.completions.create(
            model="t", messages=[{"role": "user", "content": "x"}], max_tokens=2, user="fine"
        )
        assert ok.choices[0].message.role == "assistant"
        reward = f"{url}/v1/episodes/fine/reward"
        assert httpx.post(f"{url}/v1/episodes/nope/reward", json={"reward": 1}).status_code == 404
        assert httpx.post(reward, content=b"oops").status_code == 400
        assert httpx.post(reward, json={"reward": "high"}).status_code == 400
        assert httpx.post(reward, content=b'{"reward": NaN}').status_code == 400
        assert httpx.post(reward, json={"reward": 1, "step_rewards": [1, 2]}).status_code == 400
        assert httpx.post(reward, json={"reward": 1, "bonus": 2}).status_code == 400
        assert httpx.post(reward, json={"reward": 1}).status_code == 200
        assert httpx.post(reward, json={"reward": 1}).status_code == 409  # already finished
        assert httpx.delete(f"{url}/v1/episodes/nope").status_code == 404
        assert httpx.get(f"{url}/v1/chat/completions").status_code == 405
        assert httpx.get(f"{url}/health").json()["status"] == "ok"


def test_oversized_bodies_and_generator_failures_are_reported(setup, serve):
    class Broken:
        def generate(self, prompts, params):
            raise RuntimeError("device lost")

    service = PolicyService(Broken(), setup.tokenizer, limits=ServeLimits(max_body_bytes=400))
    with serve(service) as (url, _):
        big = {"messages": [{"role": "user", "content": "x" * 500}]}
        r = httpx.post(f"{url}/v1/chat/completions", json=big)
        assert r.status_code == 413 and "400 bytes" in r.json()["error"]["message"]
        body = {"messages": [{"role": "user", "content": "x"}], "user": "e"}
        r = httpx.post(f"{url}/v1/chat/completions", json=body)
        assert r.status_code == 500 and "device lost" in r.json()["error"]["message"]
        assert service.recorder.summaries() == []  # the aborted call recorded nothing


def test_grpo_update_from_served_episodes(setup, recording, serve, tmp_path):
    """Four served episodes in two groups -> hand-computed GRPO advantages -> one update."""
    service = PolicyService.from_setup(setup, export=tmp_path / "episodes.jsonl", group_size=2)
    service.generator = recording()
    rewards = {"a0": ("g1", 1.0), "a1": ("g1", 0.0), "b0": ("g2", 0.5), "b1": ("g2", 0.5)}
    before = {k: v.clone() for k, v in setup.policy.state_dict().items()}
    try:
        with serve(service) as (url, client):
            for episode_id, (group, reward) in rewards.items():
                client.chat.completions.create(
                    model="t",
                    messages=[{"role": "user", "content": group}],
                    max_tokens=3,
                    user=episode_id,
                )
                body = {"reward": reward, "group_id": group}
                httpx.post(f"{url}/v1/episodes/{episode_id}/reward", json=body)
            episodes = service.take_finished()
            batch = prepare_batch(setup, episodes)
            # g1: rewards (1, 0) -> (r - 0.5) / (std 0.7071 + 1e-6) = +-0.7071; g2 constant -> 0.
            want = torch.tensor([0.70710, -0.70710, 0.0, 0.0])
            mask = batch.loss_mask.bool()
            got = torch.stack([batch.advantages[i][mask[i]].mean() for i in range(4)])
            torch.testing.assert_close(got, want, atol=1e-4, rtol=0)
            recorded = torch.tensor(
                [
                    lp
                    for (t,) in episodes.samples
                    for lp, m in zip(t.logprobs, t.loss_mask, strict=True)
                    if m
                ]
            )
            torch.testing.assert_close(batch.old_logprobs[mask], recorded)
            metrics = service.train(episodes)
            assert metrics["skipped_update"] == 0.0 and service.policy_version == 1
            changed = any(
                not torch.equal(before[k], v) for k, v in setup.policy.state_dict().items()
            )
            assert changed
            later = client.chat.completions.create(
                model="t", messages=[{"role": "user", "content": "x"}], max_tokens=2
            )
            assert later.system_fingerprint == "policy-v1"  # sampled from the new weights
    finally:
        setup.policy.load_state_dict(before)
    # The JSONL export holds the same samples; `agentic-rl sft --data` reads it too.
    loaded = load_episodes(tmp_path / "episodes.jsonl")
    assert [s[0].token_ids for s in loaded.samples] == [s[0].token_ids for s in episodes.samples]
    assert [s[0].logprobs for s in loaded.samples] == [s[0].logprobs for s in episodes.samples]
    assert [s[0].group_id for s in loaded.samples] == ["g1", "g1", "g2", "g2"]
    assert len(load_trajectories(tmp_path / "episodes.jsonl", setup.tokenizer)) == 4


def test_a_recording_only_server_keeps_finished_episodes_on_disk_not_in_memory(
    setup, recording, serve, tmp_path
):
    out = tmp_path / "ep.jsonl"
    service = PolicyService(recording(), setup.tokenizer, export=out, keep_finished=False)
    with serve(service) as (url, client):
        client.chat.completions.create(
            model="t", messages=[{"role": "user", "content": "x"}], max_tokens=2, user="k"
        )
        assert httpx.get(f"{url}/v1/episodes/k").json()["status"] == "open"
        httpx.post(f"{url}/v1/episodes/k/reward", json={"reward": 1}).raise_for_status()
        assert httpx.get(f"{url}/v1/episodes/k").status_code == 404
    assert service.recorder.finished == [] and service.recorder.summaries() == []
    (record,) = [json.loads(line) for line in out.read_text().splitlines()]
    assert record["episode_id"] == "k" and sum(record["loss_mask"]) == 2


EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "byo_agent.py"


@pytest.mark.slow  # builds its own model and server: ~10-20 s on 2 busy cores
def test_byo_agent_example_collects_episodes_and_trains(tmp_path):
    spec = importlib.util.spec_from_file_location("byo_agent", EXAMPLE)
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)
    assert example.calculator("2 * (3 + 4) - 1") == "13"
    assert example.calculator("2 ** 99999").startswith("error")  # only + - * /
    assert example.calculator("__import__('os')").startswith("error")
    argv = ["--out", str(tmp_path), "--questions", "1", "--group-size", "3", "--max-tokens", "4"]
    result = example.main(argv)
    rewards = [ep["reward"] for ep in result["episodes"]]
    assert len(rewards) == 3
    lines = (tmp_path / "episodes.jsonl").read_text().splitlines()
    assert sorted(json.loads(line)["episode_id"] for line in lines) == [
        "q0-0-0",
        "q0-0-1",
        "q0-0-2",
    ]
    # One group: GRPO has a signal exactly when the rewards differ.
    trained = len(set(rewards)) > 1
    assert result["update"]["skipped_update"] == float(not trained)
    assert result["policy_version"] == int(trained)


@pytest.mark.slow
def test_cli_serve_policy_records_exports_and_trains(tmp_path):
    sock = bind_socket()
    port = sock.getsockname()[1]
    sock.close()
    out, saved = tmp_path / "episodes.jsonl", tmp_path / "saved"
    command = [sys.executable, "-m", "agentic_rl.cli", "serve-policy", "model.name=tiny"]
    command += ["--port", str(port), "--out", str(out), "--train-every", "2"]
    command += ["--save-dir", str(saved), "--max-tokens", "3", "--group-size", "2"]
    server = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            assert server.poll() is None, server.stdout.read()
            try:
                if httpx.get(f"{url}/health").status_code == 200:
                    break
            except httpx.TransportError:
                time.sleep(0.5)
        from openai import OpenAI

        client = OpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0)
        updates = []
        for episode_id, reward in (("x", 1.0), ("y", 0.0)):
            client.chat.completions.create(
                model="tiny", messages=[{"role": "user", "content": "hi"}], user=episode_id
            )
            report = {"reward": reward, "group_id": "g"}
            done = httpx.post(f"{url}/v1/episodes/{episode_id}/reward", json=report, timeout=60)
            updates.append(done.json()["update"])
        assert updates[0] is None and updates[1]["skipped_update"] == 0.0
        assert httpx.get(f"{url}/health").json()["policy_version"] == 1
    finally:
        server.terminate()
        server.wait(timeout=30)
    assert [json.loads(line)["episode_id"] for line in out.read_text().splitlines()] == ["x", "y"]
    assert (saved / "model" / "config.json").is_file()
