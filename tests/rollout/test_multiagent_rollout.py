"""Multi-agent conversation envs through rollout.mode=memory: each role's turns are its own
token-native samples, tagged with the role; frozen roles act but never train; the team's
outcome is every sample's reward (MATPO's credit: workers inherit the planner's advantage)."""

from __future__ import annotations

import dataclasses

import pytest

from agentic_rl.config.load import load_config
from agentic_rl.config.parse import ConfigError
from agentic_rl.config.rollout import RolloutConfig
from agentic_rl.envs.multiagent.planner_executor import (
    EXECUTOR,
    PLANNER,
    PlannerExecutorEnv,
)
from agentic_rl.envs.search.multihop import make_multihop_tasks
from agentic_rl.formats.chat import TagFormat
from agentic_rl.rollout.actors import expert_actor
from agentic_rl.rollout.memory import run_memory_episodes

CFG = RolloutConfig(mode="memory", max_turns=10, max_tokens_per_turn=48)


def play(tokenizer, cfg: RolloutConfig = CFG, n: int = 2):
    tasks = make_multihop_tasks("train", n, seed=0)
    envs = [PlannerExecutorEnv() for _ in tasks]
    fmt = TagFormat(envs[0].tools)
    act = expert_actor(fmt, tokenizer)
    return run_memory_episodes(envs, tasks, [t.task_id for t in tasks], act, fmt, tokenizer, cfg, 0)


def test_each_role_is_its_own_token_native_sample(tokenizer) -> None:
    for samples in play(tokenizer):
        roles = [s.role for s in samples]
        assert roles == [PLANNER, EXECUTOR, EXECUTOR, PLANNER, EXECUTOR, EXECUTOR, PLANNER]
        for s in samples:
            assert sum(s.loss_mask) == len(s.token_ids) - s.prompt_length > 0
            # the prompt is the role's own conversation: its system prompt, not the other's
            prompt = tokenizer.decode(s.token_ids[: s.prompt_length])
            assert ("You are the planner" in prompt) == (s.role == PLANNER)
        # the team's outcome is every sample's reward (the scripted team answers right)
        assert {s.reward for s in samples} == {1.0}
        assert len({s.group_id for s in samples}) == 1
        metrics = samples[0].metrics
        assert (
            metrics["env/planner_conversations"] == 3 and metrics["env/executor_conversations"] == 4
        )
        executor_tokens = sum(
            len(s.token_ids) - s.prompt_length for s in samples[1:3] + samples[4:6]
        )
        assert metrics["env/executor_tokens"] == executor_tokens


def test_a_frozen_role_acts_but_never_trains(tokenizer) -> None:
    cfg = dataclasses.replace(CFG, train_roles=[EXECUTOR])
    for samples in play(tokenizer, cfg):
        assert [s.role for s in samples][:3] == [PLANNER, EXECUTOR, EXECUTOR]
        for s in samples:
            trained = sum(s.loss_mask) > 0
            assert trained == (s.role == EXECUTOR)
        assert samples[-1].reward == 1.0  # the frozen planner still answers for the team


def test_train_roles_are_validated_at_load() -> None:
    with pytest.raises(ConfigError, match="does not have"):
        load_config("planner_executor", ["rollout.train_roles=[critic]"])
    with pytest.raises(ConfigError, match="has no roles"):
        load_config("search_qa_grpo", ["rollout.train_roles=[planner]"])
    cfg = load_config("planner_executor", ["rollout.train_roles=[executor]"])
    assert cfg.rollout.train_roles == ["executor"]
