"""The `retool` recipe: code-augmented SFT cold start, then PPO with interpreter output masked.

Mechanisms checked: the warm-start traces hold code and its real interpreter output, and the
interpreter tokens carry loss mask 0 in the SFT batch and in the RL batch (the
`rollout.train_on_observations=true` ablation turns them to 1); ReTool's shaped +1/-1 reward
reaches the trained samples (and a cut episode scores as a wrong answer).
"""

from __future__ import annotations

import re

import pytest
import torch

from agentic_rl.config.load import load_config
from agentic_rl.learner.batch import collate
from agentic_rl.train.batch import prepare_batch
from agentic_rl.train.collect import collect, expert_demos
from agentic_rl.train.setup import build
from agentic_rl.train.stages import train_recipe
from agentic_rl.types import Trajectory

SMOKE = ["model.name=tiny", "trainer.progress=false"]
# The smoke run skips the evaluations before RL (the generation they cost is most of a
# tiny-model run); the warm start, both RL steps and the final evaluation still run.
FAST = ["trainer.eval_before=false"]


def observation_spans(t: Trajectory) -> list[tuple[int, int]]:
    """[start, end) runs of loss-mask-0 tokens after the prompt: what the env inserted."""
    spans, start = [], None
    for pos in range(t.prompt_length, len(t.token_ids) + 1):
        inserted = pos < len(t.token_ids) and t.loss_mask[pos] == 0
        if inserted and start is None:
            start = pos
        elif not inserted and start is not None:
            spans.append((start, pos))
            start = None
    return spans


def generated_text(t: Trajectory, tokenizer) -> str:
    return tokenizer.decode([i for i, m in zip(t.token_ids, t.loss_mask, strict=True) if m])


def test_retool_smoke(tmp_path, warm_start_episodes, no_stray_processes):
    cfg = load_config("retool", [*SMOKE, *FAST, f"trainer.out_dir={tmp_path}"], smoke=True)
    assert cfg.algo.name == "ppo" and cfg.rollout.chat_format == "retool"
    summary = train_recipe(cfg)
    assert summary["steps"] == 2
    assert warm_start_episodes(tmp_path / "retool") == 8  # every expert episode succeeded


def test_sft_traces_hold_code_and_interpreter_output_masked_out(tokenizer, no_stray_processes):
    setup = build(load_config("retool", SMOKE, smoke=True))
    demos, successes = expert_demos(setup, 4)  # successful (correct) episodes only
    assert successes == 4 and len(demos) == 4
    batch = collate(demos, tokenizer.pad_token_id)  # what train_sft trains on
    for row, demo in enumerate(demos):
        text = generated_text(demo, tokenizer)
        assert text.startswith("<code>\n```python\n") and "</code>" in text
        answer = re.fullmatch(r".*\\boxed\{(-?\d+)\}", text, re.DOTALL).group(1)
        (start, end), *rest = observation_spans(demo)
        assert rest == []  # one code call, one interpreter output
        inserted = tokenizer.decode(demo.token_ids[start:end])
        assert inserted == f"\n<interpreter>\n{answer}\n</interpreter>\n"  # what the code printed
        assert batch.loss_mask[row, start:end].sum() == 0  # never a training target
        assert batch.loss_mask[row, demo.prompt_length : start].all()  # the code is one
        assert batch.loss_mask[row, end : len(demo.token_ids)].all()  # and the answer


def script(ep, index, turn):
    """0: runs the task's program, then answers right. 1: a failing cell, then a wrong answer.
    2: runs code every turn and never answers (cut by the turn budget). 3: answers wrong
    straight away."""
    code = f"<code>\n```python\n{ep.task.fields['code']}\n```\n</code>"
    plans = {
        0: [code, f"So the answer is \\boxed{{{ep.task.answers[0]}}}."],
        1: ["<code>\n```python\n1 / 0\n```\n</code>", "\\boxed{-7}"],
        2: [code, code, code],
        3: ["\\boxed{-7}"],
    }
    return plans[index][turn]


def rl_batch(scripted, overrides):
    cfg = load_config(
        "retool",
        [*SMOKE, "rollout.group_size=4", "rollout.max_turns=3", *overrides],
        smoke=True,
    )
    setup = build(cfg)
    scripted(script)
    episodes, _, _ = collect(setup, step=1)
    return setup, episodes, prepare_batch(setup, episodes)


@pytest.mark.parametrize("unmasked", [False, True])
def test_rl_samples_mask_interpreter_output(scripted, tokenizer, unmasked, no_stray_processes):
    setup, episodes, batch = rl_batch(scripted, [f"rollout.train_on_observations={unmasked}"])
    flat = [s for samples in episodes.samples for s in samples]
    checked = 0
    for row, sample in enumerate(flat):
        for start, end in observation_spans(sample):
            assert tokenizer.decode(sample.token_ids[start:end]).startswith("\n<interpreter>\n")
            expected = 1.0 if unmasked else 0.0
            assert (batch.loss_mask[row, start:end] == expected).all()
            checked += 1
    assert checked == 2 * (1 + 1 + 2)  # two tasks; plans 0, 1, 2 ran 1, 1, 2 cells
    error_row = next(r for r, s in enumerate(flat) if s.metrics["tool_calls"] == 1 and s.reward < 0)
    assert "Error: ZeroDivisionError: division by zero" in flat[error_row].completion_text
    assert batch.advantages is not None and batch.advantages.shape == batch.loss_mask.shape


def test_retool_shaped_reward_reaches_the_samples(scripted, no_stray_processes):
    _, episodes, batch = rl_batch(scripted, [])
    rewards = episodes.rewards().view(2, 4)  # [tasks, plans]
    # 0: +1. 1: wrong after 1 call, turns = 4: min(-0.6, -1 + (4 - 2) / 2 * 0.1) = -0.9.
    # 2: cut after 3 calls: a wrong answer with turns = 8: min(-0.6, -1 + 0.3) = -0.7.
    # 3: wrong without a call: -1.
    expected = torch.tensor([1.0, -0.9, -0.7, -1.0])
    assert torch.allclose(rewards, expected.expand(2, 4))
    assert torch.allclose(batch.rewards, expected.repeat(2))
    _, plain, _ = rl_batch(scripted, ["env.options.shaping=false"])
    assert torch.allclose(plain.rewards().view(2, 4), torch.tensor([1.0, -1.0, -1.0, -1.0]))
