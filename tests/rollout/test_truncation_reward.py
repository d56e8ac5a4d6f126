"""`truncation_reward`: an env may score an episode a turn or token budget cut short."""

from __future__ import annotations

import pytest

from agentic_rl.config.rollout import RolloutConfig
from agentic_rl.envs.math.calculator import CalculatorEnv, make_calculator_tasks
from agentic_rl.formats.chat import TagFormat
from agentic_rl.model.tokens import encode_text
from agentic_rl.rollout.loop import run_episodes
from agentic_rl.types import Completion


class UnfinishedIsWrong(CalculatorEnv):
    def truncation_reward(self) -> float:
        return -1.0


def play(tokenizer, env, turns, **budgets):
    task = make_calculator_tasks("eval", 1, seed=0)[0]

    def act(episodes, limits, turn):
        ids = encode_text(tokenizer, turns[turn])[: limits[0]]
        return [Completion(ids, [-0.5] * len(ids), "stop", turns[turn])]

    cfg = RolloutConfig(**{"max_turns": 2, "max_tokens_per_turn": 32, **budgets})
    (traj,) = run_episodes([env], [task], ["g"], act, TagFormat(env.tools), tokenizer, cfg, 0)
    return traj, task


@pytest.mark.parametrize("env_cls, extra", [(UnfinishedIsWrong, -1.0), (CalculatorEnv, 0.0)])
def test_cut_by_the_turn_budget(tokenizer, env_cls, extra):
    traj, _ = play(tokenizer, env_cls(format_penalty=0.1), ["<calc>1+1</calc>", "thinking"])
    assert traj.truncated and not traj.terminated
    # step rewards: the call (0), the invalid last turn (-0.1), plus the env's truncation score
    assert traj.step_rewards == [0.0, pytest.approx(-0.1 + extra)]
    assert traj.reward == pytest.approx(-0.1 + extra)


def test_cut_by_the_token_budget(tokenizer):
    env = UnfinishedIsWrong(format_penalty=0.1)
    # the calculator's result does not fit the 12 response tokens left: the episode is cut
    traj, _ = play(tokenizer, env, ["<calc>1+1</calc>"], max_total_tokens=12)
    assert traj.truncated and traj.step_rewards == [-1.0]


def test_a_finished_episode_is_not_rescored(tokenizer):
    env = UnfinishedIsWrong(format_penalty=0.1)
    task = make_calculator_tasks("eval", 1, seed=0)[0]
    traj, task = play(tokenizer, env, [f"<answer>{task.answers[0]}</answer>"])
    assert traj.terminated and traj.reward == 1.0
