"""The VLA-RL manipulation env (envs/embodied/manipulation.py) and its action tokens
(envs/embodied/action_tokens.py): bins, the token round trip on the bundled tokenizer, the
pymunk world (grasp, carry, push), progress + success rewards, malformed actions as data."""

from __future__ import annotations

import re

import pytest

from agentic_rl.envs.check import check_env
from agentic_rl.envs.code_words import CODE_WORDS, NUM_CODE_WORDS, CodeParseError, code_word_ids
from agentic_rl.envs.discrete import ACTION_TOOL
from agentic_rl.envs.embodied.action_tokens import ActionCodec
from agentic_rl.envs.embodied.manipulation import (
    ManipulationEnv,
    TableSim,
    make_manipulation_tasks,
)
from agentic_rl.envs.registry import env_class, task_generator
from agentic_rl.formats.chat import TagFormat
from agentic_rl.model.tokens import encode_text
from agentic_rl.types import Action, Task

pytest.importorskip("pymunk")
OPTS = {"num_bins": 11, "bin_step": 0.05}


def act(text: str) -> Action:
    return Action(kind="tool", name=ACTION_TOOL.name, arguments={"actions": text})


def test_bins_by_hand():
    codec = ActionCodec(num_bins=4, dims=2)  # bins [-1,-.5) [-.5,0) [0,.5) [.5,1], centres
    assert [codec.bin_of(v) for v in (-3.0, -1.0, -0.6, -0.2, 0.0, 0.49, 0.5, 1.0, 7.0)] == [
        0, 0, 0, 1, 2, 2, 3, 3, 3,
    ]  # fmt: skip
    assert [codec.centre(k) for k in range(4)] == [-0.75, -0.25, 0.25, 0.75]
    assert codec.encode([0.3, -2.0]) == f" {CODE_WORDS[2]} {CODE_WORDS[0]}"
    assert codec.decode(codec.encode([0.3, -2.0])) == [0.25, -0.75]  # clipped, bin centres


def test_action_words_are_the_vocabulary_tail_one_token_each(tokenizer):
    ids = code_word_ids(tokenizer)
    assert len(ids) == NUM_CODE_WORDS == len(set(ids))
    # the last 256 whole lower-case words with a leading space, from the end of the vocabulary
    tail: list[int] = []
    for i in range(len(tokenizer) - 1, 0, -1):
        word = tokenizer.decode([i])
        single = list(tokenizer(word, add_special_tokens=False)["input_ids"]) == [i]
        if re.fullmatch(r" [a-z]{3,}", word) and single:
            tail.append(i)
        if len(tail) == NUM_CODE_WORDS:
            break
    assert ids == tail[:NUM_CODE_WORDS] and ids[0] == len(tokenizer) - 3


@pytest.mark.parametrize("num_bins", [11, 256])
def test_action_token_round_trip(tokenizer, num_bins):
    """bins -> action text -> token ids (one per dimension, the bin's token) -> decoded text ->
    parsed action -> bins: exact, for every bin in every position."""
    codec = ActionCodec(num_bins)
    ids_of = code_word_ids(tokenizer, num_bins)
    fmt = TagFormat([ACTION_TOOL])
    for k in range(num_bins):
        bins = [k, num_bins - 1 - k, (k * 7) % num_bins]
        text = f"<action>{codec.encode_bins(bins)}</action>"
        ids = encode_text(tokenizer, text)
        assert [ids_of[b] for b in bins] == ids[3:6]  # "<action>" is 3 tokens, then one per bin
        action = fmt.parse(tokenizer.decode(ids), "stop")
        assert codec.decode_bins(action.arguments["actions"]) == bins


def test_malformed_and_out_of_range_actions_raise_with_a_reason():
    codec = ActionCodec(11)
    with pytest.raises(CodeParseError, match="expected 3 action tokens, got 2"):
        codec.decode_bins(" exfol exfol")
    with pytest.raises(CodeParseError, match="'left' is not an action token"):
        codec.decode_bins("left exfol exfol")
    with pytest.raises(CodeParseError, match="code 11, out of range"):
        codec.decode_bins(f"exfol exfol {CODE_WORDS[11]}")


@pytest.fixture(scope="module")
def tasks():
    return make_manipulation_tasks("train", 20, seed=0, **OPTS)


def test_registered_and_check_env_passes(tasks):
    assert env_class("manipulation") is ManipulationEnv
    assert task_generator("manipulation") is make_manipulation_tasks
    assert check_env(ManipulationEnv(**OPTS), tasks, max_expert_turns=8) == []


def test_tasks_are_seeded_and_held_out(tasks):
    again = make_manipulation_tasks("train", 20, seed=0, **OPTS)
    assert [t.fields for t in again] == [t.fields for t in tasks]
    held_out = make_manipulation_tasks("eval", 20, seed=0, **OPTS)
    assert not {repr(t.fields) for t in held_out} & {repr(t.fields) for t in tasks}
    assert all(len(t.answers[0].split(" | ")) <= 6 for t in tasks)


def test_physics_grasp_carry_and_push():
    sim = TableSim((0.2, 0.2), {"red": (0.2, 0.22), "blue": (0.5, 0.22)})
    sim.grip(True)
    assert sim.held == "red"
    sim.move(0.2, 0.0)  # carry red towards blue: red follows, blue is pushed on contact
    assert sim.position("red")[0] == pytest.approx(0.4, abs=0.01)
    assert sim.position("blue") == pytest.approx((0.5, 0.22), abs=1e-6)  # not reached yet
    sim.move(0.1, 0.0)
    assert sim.position("blue")[0] > 0.54  # pushed by the carried block
    sim.grip(False)
    before = sim.position("red")
    sim.move(-0.3, 0.0)  # released: the gripper leaves without it
    assert sim.held is None and sim.position("red") == pytest.approx(before, abs=1e-3)
    far = TableSim((0.2, 0.2), {"red": (0.4, 0.4)})
    far.grip(True)
    assert far.held is None  # nothing within reach


def test_expert_episode_rewards_are_progress_plus_success(tasks):
    fmt = TagFormat([ACTION_TOOL])
    for task in tasks[:5]:
        env = ManipulationEnv(**OPTS)
        env.reset(task, 0)
        total = 0.0
        while not env.done:
            result = env.step(fmt.parse(env.expert_turn(), "stop"))
            total += result.reward
            assert result.reward > -1e-9 or not result.terminated
        assert result.terminated and result.info["success"] == 1.0
        # progress sums to 1 - phi_end / phi_start (telescoping), plus the success reward 1
        assert total == pytest.approx(1.0 - env.potential() / env._phi0 + 1.0)


def test_bad_actions_are_error_observations_with_the_vla_rl_penalty(tasks):
    env = ManipulationEnv(**OPTS)
    env.reset(tasks[0], 0)
    state = env.state_text()
    for text in ("go left", f"exfol exfol {CODE_WORDS[200]}", "exfol exfol"):
        result = env.step(act(text))
        assert result.observation.name == "error" and "Invalid action" in result.observation.content
        assert result.info == {"invalid_action": 1} and result.reward == -1.0
        assert not result.terminated and env.state_text() == state  # the world did not move
    assert env.steps == 0


def test_truncated_after_max_steps(tasks):
    env = ManipulationEnv(max_steps=2, **OPTS)
    env.reset(tasks[0], 0)
    stay = env.codec.encode_bins([5, 5, 0])
    assert not env.step(act(stay)).truncated
    result = env.step(act(stay))
    assert result.truncated and result.info["success"] == 0.0 and result.reward == 0.0


def test_an_unknown_scene_field_fails_loudly():
    env = ManipulationEnv(**OPTS)
    with pytest.raises(KeyError):
        env.reset(Task(task_id="x", prompt="?", fields={"gripper": [0.1, 0.1]}), 0)
