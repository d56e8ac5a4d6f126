"""The `artist` recipe: python + calc function calls, ARTIST's answer + tool-success + format
reward. The mechanism test plays hand-made episodes through the trainer's rollout (the
recipe's env, format and reward) and checks each reward by hand; without the tool-success term
(env.options.w_tool=0) a failed call costs nothing."""

from __future__ import annotations

import json

import pytest
import torch

from agentic_rl.config.load import load_config
from agentic_rl.train.batch import prepare_batch
from agentic_rl.train.collect import collect, expert_demos
from agentic_rl.train.setup import build
from agentic_rl.train.stages import train_recipe

SMOKE = ["model.name=tiny", "trainer.progress=false"]
# The smoke run skips the evaluations before RL (the generation they cost is most of a
# tiny-model run); the warm start, both RL steps and the final evaluation still run.
FAST = ["trainer.eval_before=false"]


def test_artist_smoke(tmp_path, warm_start_episodes, no_stray_processes):
    cfg = load_config("artist", [*SMOKE, *FAST, f"trainer.out_dir={tmp_path}"], smoke=True)
    assert cfg.env.name == "math_multitool" and cfg.rollout.chat_format == "hermes_multi"
    summary = train_recipe(cfg)
    assert summary["steps"] == 2
    assert warm_start_episodes(tmp_path / "artist") == 8  # every expert episode succeeded


def test_warm_start_demonstrates_both_tools(no_stray_processes):
    setup = build(load_config("artist", SMOKE + ["env.num_train_tasks=200"], smoke=True))
    demos, successes = expert_demos(setup, 24)
    assert successes == 24
    texts = [d.completion_text for d in demos]
    assert any('"name": "calc"' in t for t in texts) and any('"name": "python"' in t for t in texts)


def call(name: str, **arguments) -> str:
    return f"<tool_call>{json.dumps({'name': name, 'arguments': arguments})}</tool_call>"


def script(ep, index, turn):
    gold = ep.task.answers[0]
    plans = {
        0: [call("calc", expression="6 * 7"), f"<answer>{gold}</answer>"],  # call ok
        1: [call("calc", expression="1 / 0"), f"<answer>{gold}</answer>"],  # call fails
        2: [
            call("python", code="1 / 0"),
            call("python", code="print(1)"),
            f"<answer>{gold}</answer>",
        ],
        3: [
            '<tool_call>{"name": calc}</tool_call>',
            call("calc", expression="1"),
            "<answer>-1</answer>",
        ],
    }
    return plans[index][turn]


def rewards(scripted, overrides):
    cfg = load_config(
        "artist", [*SMOKE, "rollout.group_size=4", "rollout.max_turns=3", *overrides], smoke=True
    )
    setup = build(cfg)
    scripted(script)
    episodes, _, _ = collect(setup, step=1)
    batch = prepare_batch(setup, episodes)
    assert torch.equal(batch.rewards, episodes.rewards())  # what the learner sees
    return episodes.rewards().view(2, 4)  # [tasks, plans]


@pytest.mark.parametrize(
    ("w_tool", "expected"),
    [
        # R = 1.0 * correct + w_tool * (calls - errors) / calls + 0.2 * calls / (calls + invalid)
        # 0: 1 + w + 0.2; 1: 1 + 0 + 0.2; 2: 1 + w / 2 + 0.2; 3: 0 + w + 0.2 * 1/2
        (0.5, [1.7, 1.2, 1.45, 0.6]),
        (0.0, [1.2, 1.2, 1.2, 0.1]),  # no tool-success term: a failed call costs nothing
    ],
)
def test_tool_success_changes_the_reward(scripted, w_tool, expected, no_stray_processes):
    got = rewards(scripted, [f"env.options.w_tool={w_tool}"])
    assert torch.allclose(got, torch.tensor(expected).expand(2, 4))
