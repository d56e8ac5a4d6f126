"""Config of the turn-level estimators (mt_grpo, turn_ppo): settings that cannot act, or that
the rollout cannot honour, fail at load naming the key; the valid ones load."""

import pytest

from agentic_rl.config.load import load_config
from agentic_rl.config.parse import ConfigError


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (["algo.turn_advantage_coef=0.5"], "algo.turn_advantage_coef is set but does nothing"),
        (
            ["algo.name=turn_ppo", "algo.turn_advantage_coef=1.0"],
            "algo.turn_advantage_coef is set but does nothing: algo.name=turn_ppo",
        ),
        (["algo.name=mt_grpo", "algo.turn_advantage_coef=-1"], "must be a number >= 0"),
        (["algo.mt_grpo_outcome=last_turn"], "algo.mt_grpo_outcome is set but does nothing"),
        (["algo.name=mt_grpo", "algo.mt_grpo_outcome=final"], "must be one of episode, last_"),
        (["algo.name=mt_grpo", "rollout.max_turns=1"], "rollout.max_turns=1 leaves no such turn"),
        (
            ["algo.name=mt_grpo", "--recipe=solver_verifier"],  # the recipe sets role_groups
            "algo.role_groups does nothing with algo.name=mt_grpo",
        ),
        (
            ["algo.name=turn_ppo", "--recipe=debate", "algo.role_groups=false"],
            "turn_ppo's critic is one model, not one per role",
        ),
        (
            ["algo.name=mt_grpo", "rollout.train_on_observations=true"],
            "observation tokens, which belong to no turn",
        ),
        (["algo.name=mt_grpo", "rollout.group_size=1"], "rollout.group_size must be >= 2"),
        (["algo.name=mt_grpo", "algo.lam=0.9"], "algo.lam is set but does nothing"),
        (["algo.name=mt_grpo", "algo.gamma=0.9"], "algo.gamma is set but does nothing"),
        (
            ["algo.name=mt_grpo", "algo.kl_coef=0.01", "algo.kl_in_reward=true"],
            "algo.kl_in_reward needs an estimator that takes the KL as a reward",
        ),
        (["algo.name=mt_grpo", "algo.policy_loss=gspo"], "needs one advantage per sequence"),
    ],
)
def test_turn_settings_that_cannot_act_fail_at_load(overrides, message):
    recipe = [o.split("=")[1] for o in overrides if o.startswith("--recipe=")]
    rest = [o for o in overrides if not o.startswith("--recipe=")]
    with pytest.raises(ConfigError, match=message):
        load_config(recipe[0] if recipe else None, rest)


def test_turn_estimators_load():
    cfg = load_config(None, ["algo.name=mt_grpo", "algo.turn_advantage_coef=0.5"])
    assert cfg.algo.turn_advantage_coef == 0.5 and cfg.algo.mt_grpo_outcome == "episode"
    cfg = load_config(None, ["algo.name=mt_grpo", "algo.mt_grpo_outcome=last_turn"])
    assert cfg.algo.mt_grpo_outcome == "last_turn"
    cfg = load_config(None, ["algo.name=turn_ppo", "algo.gamma=0.99", "algo.lam=0.9"])
    assert (cfg.algo.gamma, cfg.algo.lam) == (0.99, 0.9)
    cfg = load_config(None, ["algo.name=turn_ppo", "algo.kl_coef=0.01", "algo.kl_in_reward=true"])
    assert cfg.algo.kl_in_reward
    # rows that cut an episode's turns: steps, memory conversations, context segments
    for name in ("mt_grpo", "turn_ppo"):
        cfg = load_config("gigpo_gridworld", [f"algo.name={name}"])
        assert cfg.rollout.mode == "step" and cfg.algo.name == name
        cfg = load_config("memagent", [f"algo.name={name}"])
        assert cfg.rollout.mode == "memory" and cfg.algo.name == name
        cfg = load_config(None, [f"algo.name={name}", "rollout.context_budget=300"])
        assert cfg.rollout.context_budget == 300
        # several agents: each role's turns are credited on their own (algos/turns.py)
        cfg = load_config("planner_executor", [f"algo.name={name}"])
        assert cfg.rollout.mode == "memory" and not cfg.algo.role_groups
