"""DAPO's soft overlong penalty against the length a rollout can actually generate (issue 31,
item 2): min(rollout.max_total_tokens, rollout.max_turns x rollout.max_tokens_per_turn)."""

from __future__ import annotations

import pytest

from agentic_rl.config.load import load_config
from agentic_rl.config.parse import ConfigError
from agentic_rl.config.rollout import max_generated_tokens
from agentic_rl.model.tokens import encode_text
from agentic_rl.train.collect import collect
from agentic_rl.train.setup import build
from agentic_rl.types import Completion


class FillingGenerator:
    """Fills every turn's whole budget with one repeated word and never acts: each episode
    generates as many tokens as the rollout lets it."""

    def __init__(self, tokenizer):
        self.word = encode_text(tokenizer, " the")

    def generate(self, prompts, params):
        out = []
        for p in params:
            ids = (self.word * p.max_new_tokens)[: p.max_new_tokens]
            out.append(Completion(ids, [-1.0] * len(ids), "length"))
        return out

    def update_weights(self, state_dict):
        """Scripted replies do not depend on the weights."""


def test_the_maximum_is_the_smaller_of_the_total_budget_and_the_turns():
    dapo = load_config("dapo_math").rollout  # 3 turns x 48 tokens, 256 in all
    assert max_generated_tokens(dapo) == 3 * 48
    short = load_config("dapo_math", ["rollout.max_total_tokens=100"]).rollout
    assert max_generated_tokens(short) == 100


def test_a_buffer_the_rollout_can_never_reach_fails_at_load():
    # 3 x 48 = 144 generated tokens at most: a buffer of 150 would penalise from -6 tokens on
    with pytest.raises(ConfigError, match=r"filters.overlong_buffer=150 .* 144 .*max_turns=3"):
        load_config("dapo_math", ["filters.overlong_buffer=150"])
    load_config("dapo_math", ["filters.overlong_buffer=144"])  # from the first token on
    # memory conversations have the env's own budgets: the episode's maximum is not the rollout's
    with pytest.raises(ConfigError, match="filters.overlong_buffer .*rollout.mode=memory"):
        load_config("memagent", ["filters.overlong_buffer=8"])


def test_the_dapo_recipes_penalty_starts_within_what_the_rollout_can_generate():
    cfg = load_config("dapo_math")
    most = max_generated_tokens(cfg.rollout)
    start = most - cfg.filters.overlong_buffer  # the penalty is 0 up to here
    assert 0 < start < most
    # two full turns already reach into the buffer: the penalty acts before the turn limit
    assert 2 * cfg.rollout.max_tokens_per_turn > start


def test_the_recipes_penalty_fires_on_episodes_that_use_the_whole_budget():
    cfg = load_config(
        "dapo_math",
        [
            "model.name=tiny",
            "trainer.progress=false",
            "env.num_train_tasks=8",
            "env.num_eval_tasks=2",
            "filters.dynamic_sampling=false",  # every episode fails alike: keep the batch
            "rollout.group_size=2",
        ],
    )
    setup = build(cfg)
    setup.generator = FillingGenerator(setup.tokenizer)
    _, generated, metrics = collect(setup, 1)
    lengths = {sum(s.num_generated for s in samples) for samples in generated.samples}
    assert lengths == {max_generated_tokens(cfg.rollout)}
    assert metrics["overlong_penalized"] == 1.0
    assert metrics["overlong_penalty"] == pytest.approx(-1.0)
