"""The `rstar2_agent` recipe: hermes python tool + GRPO-RoC.

The mechanism test rolls out hand-made episodes through the trainer (the recipe's env, format,
sandbox and filters) and checks which samples RoC keeps: from 2G rollouts per task, G with the
class proportions, the positives with the fewest tool errors and format problems. With
filters.roc=false the batch is the plain GRPO one: G rollouts per task, all kept.
"""

from __future__ import annotations

import json
import re

import torch

from agentic_rl.algos.filters import roc_penalties
from agentic_rl.config.load import load_config
from agentic_rl.train import collect as collecting
from agentic_rl.train import shaping as bf
from agentic_rl.train.batch import prepare_batch
from agentic_rl.train.setup import build
from agentic_rl.train.stages import train_recipe

SMOKE = ["model.name=tiny", "trainer.progress=false"]
# The smoke run skips the evaluations before RL (the generation they cost is most of a
# tiny-model run); the warm start, both RL steps and the final evaluation still run.
FAST = ["trainer.eval_before=false"]


def test_rstar2_agent_smoke(tmp_path, warm_start_episodes, no_stray_processes):
    cfg = load_config("rstar2_agent", [*SMOKE, *FAST, f"trainer.out_dir={tmp_path}"], smoke=True)
    assert cfg.filters.roc and cfg.rollout.chat_format == "hermes_multi"
    summary = train_recipe(cfg)
    assert summary["steps"] == 2
    assert warm_start_episodes(tmp_path / "rstar2_agent") == 8  # every expert episode succeeded


def python(code: str) -> str:
    return f"<tool_call>{json.dumps({'name': 'python', 'arguments': {'code': code}})}</tool_call>"


def script(ep, index, turn):
    """Eight behaviours, one per sample of a group (k = index); each turn 0 names its plan."""
    gold, code = ep.task.answers[0], ep.task.fields["code"]
    right, wrong = f"<answer>\\boxed{{{gold}}}</answer>", "<answer>\\boxed{-1}</answer>"
    plans = {
        0: [python("1 / 0"), python(code), right],  # + a failing cell: p = 1/2 + 0
        1: [python(code), right],  # clean: p = 0
        2: [python(code), wrong],  # negative
        3: ["<answer> unsure, let me check " + python(code), right],  # unbalanced tags: p = 0 + 1
        4: [right],  # no tool call: p = 0.5 + 0
        5: [wrong],  # negative
        6: [python(code), right],  # clean: p = 0
        7: [python("1 / 0"), wrong],  # negative
    }
    text = plans[index][turn]
    return f"plan {index}: {text}" if turn == 0 else text


def plan_of(sample) -> int:
    return int(re.match(r"plan (\d+):", sample.completion_text).group(1))


def collect(scripted, overrides):
    cfg = load_config(
        "rstar2_agent",
        [*SMOKE, "rollout.group_size=4", "rollout.max_turns=3", "filters.roc_min_per_class=2"]
        + overrides,
        smoke=True,
    )
    setup = build(cfg)
    scripted(script)
    kept, generated, metrics = collecting.collect(setup, step=1)
    prepare_batch(setup, kept)  # the kept samples make a valid GRPO batch
    return kept, generated, metrics


def penalty(sample) -> float:
    stats = torch.tensor([bf.roc_penalty_of(sample)])
    return float(roc_penalties(stats[:, 0], stats[:, 1], stats[:, 2], stats[:, 3].bool())[0])


def test_roc_keeps_the_cleanest_positives(scripted, no_stray_processes):
    kept, generated, metrics = collect(scripted, [])
    groups = [[generated.samples[i][0] for i in g] for g in generated.groups()]
    assert [sorted(plan_of(s) for s in g) for g in groups] == [list(range(8))] * 2  # 2G each
    positives = [s for g in groups for s in g if s.reward > 0]
    assert sorted({plan_of(s): penalty(s) for s in positives}.items()) == [
        (0, 0.5),
        (1, 0.0),
        (3, 1.0),
        (4, 0.5),
        (6, 0.0),
    ]
    # N = 8, G = 4, 5 positives: round(4 * 5 / 8) = 3 positives, capped at 4 - 2 so that the
    # negatives keep 2; the cleanest positives (1, 6) and the first negatives (2, 5) stay.
    for group in kept.groups():
        assert sorted(plan_of(kept.samples[i][0]) for i in group) == [1, 2, 5, 6]
    kept_positive = [s[0] for s in kept.samples if s[0].reward > 0]
    random_subset_mean = sum(penalty(s) for s in positives) / len(positives)  # 0.4
    assert sum(penalty(s) for s in kept_positive) / len(kept_positive) == 0.0 < random_subset_mean
    assert metrics["roc_positive_penalty"] == 0.0


def test_without_roc_the_batch_is_plain_grpo(scripted, no_stray_processes):
    kept, generated, metrics = collect(scripted, ["filters.roc=false"])
    assert len(generated) == len(kept) == 8  # G = 4 rollouts per task, all trained on
    assert [sorted(plan_of(s[0]) for s in kept.samples[4 * t : 4 * t + 4]) for t in (0, 1)] == [
        [0, 1, 2, 3]
    ] * 2
    assert "roc_positive_penalty" not in metrics
