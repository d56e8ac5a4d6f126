"""Step and memory modes reuse the KV of the prompt their contexts re-send (backends/base.py
`_hf_generator`: `cut_prefixes`); episode mode keeps whole-entry reuse only."""

import pytest

from agentic_rl.backends.base import make_generator
from agentic_rl.config.rollout import RolloutConfig
from agentic_rl.config.schema import Config
from agentic_rl.envs.games.gridworld import GridWorldEnv
from agentic_rl.formats.chat import TagFormat
from agentic_rl.model.tokens import encode_prompt
from agentic_rl.rollout.actors import policy_actor
from agentic_rl.rollout.stepwise import run_stepwise
from agentic_rl.types import Task

TASK = Task(
    task_id="t",
    prompt="",
    answers=["right right right"],
    fields={"walls": [[1, 1]], "start": [0, 0], "goal": [0, 3]},
)


@pytest.mark.parametrize(("mode", "cuts"), [("episode", False), ("step", True), ("memory", True)])
def test_the_generator_cuts_prefixes_in_the_modes_that_re_send_the_prompt(
    mode, cuts, tiny, tokenizer
):
    cfg = Config(rollout=RolloutConfig(mode=mode))
    assert make_generator(cfg, tiny, tokenizer)._kv_store.cut_prefixes is cuts


def test_a_step_mode_rollout_prefills_the_prompt_once_per_episode_not_once_per_turn(
    tiny, tokenizer
):
    """history_window=0: a turn's context is the prompt + the latest observation, which
    continues no earlier entry whole, so without cuts nothing after the first turn is reused;
    with them every later distinct context reuses at least the prompt."""
    rollout = RolloutConfig(
        mode="step", history_window=0, max_turns=4, max_tokens_per_turn=8, group_size=2
    )
    cfg = Config(rollout=rollout)
    prompt_len = len(encode_prompt(tokenizer, GridWorldEnv().reset(TASK, 0).messages))
    counts = {}
    for cuts in (False, True):
        gen = make_generator(cfg, tiny, tokenizer)
        gen._kv_store.cut_prefixes = cuts
        rows: list[int] = []
        generate = gen.generate

        def counting(prompts, params, images=None, generate=generate, rows=rows):
            rows.append(len({tuple(p) for p in prompts}))  # prefilled once each
            return (
                generate(prompts, params) if images is None else generate(prompts, params, images)
            )

        gen.generate = counting
        envs = [GridWorldEnv(), GridWorldEnv()]
        fmt = TagFormat(envs[0].tools)
        act = policy_actor(gen, fmt, rollout, seed=0)
        episodes = run_stepwise(envs, [TASK, TASK], ["g", "g"], act, fmt, tokenizer, rollout, 0)
        assert all(len(steps) >= 2 for steps in episodes)  # random text: invalid moves go on
        counts[cuts] = (gen.reused_tokens, sum(rows[1:]))
    (reused_off, _), (reused_on, later_rows) = counts[False], counts[True]
    assert reused_off == 0
    assert later_rows > 0 and reused_on >= prompt_len * later_rows
