"""The `countdown` recipe: GRPO on generated Countdown problems with RAGEN's (TinyZero's) reward.

Mechanism checked: the exact, safe verifier is the reward the trainer sees. In one group, the
right expression scores 1, one over the right numbers that misses the target 0.1, one with
wrong numbers 0, and code smuggled into the answer scores 0 without running; the group's GRPO
advantages order the four accordingly.
"""

from __future__ import annotations

import pytest

from agentic_rl.cli import main
from agentic_rl.config.load import load_config
from agentic_rl.envs.games.countdown import score_countdown
from agentic_rl.learner.batch import Episodes
from agentic_rl.logging import read_metrics
from agentic_rl.train.batch import prepare_batch
from agentic_rl.train.collect import play
from agentic_rl.train.setup import build

SMOKE = ["model.name=tiny", "trainer.progress=false"]


def wrong_value(numbers, target):
    """An expression over exactly `numbers` that misses `target` (scores 0.1)."""
    for sep in (" + ", " * ", " - "):
        text = sep.join(str(n) for n in numbers)
        if score_countdown(text, numbers, target) == 0.1:
            return text
    raise AssertionError("every candidate hits the target")


def four_answers(marker):
    def script(ep, index, turn):
        numbers, target = ep.task.fields["numbers"], ep.task.fields["target"]
        return [
            ep.env.expert_turn(),  # right: 1.0
            f"<answer>{wrong_value(numbers, target)}</answer>",  # right numbers, wrong value: 0.1
            "<answer>" + " * ".join(str(n) for n in numbers[:-1]) + "</answer>",  # one missing: 0
            f"<answer>__import__('os').system('touch {marker}')</answer>",  # code, never run: 0
        ][index % 4]

    return script


def test_countdown_smoke(tmp_path, scripted):
    scripted(lambda ep, index, turn: ep.env.expert_turn() if index == 0 else "<answer>1</answer>")
    out = [f"trainer.out_dir={tmp_path}", "trainer.run_name=countdown"]
    assert main(["train", "countdown", *SMOKE, *out, "--smoke"]) == 0
    rows = [
        r for r in read_metrics(tmp_path / "countdown" / "metrics.jsonl") if "train/reward" in r
    ]
    assert len(rows) == 2
    assert all(r["train/reward"] == pytest.approx(0.5) and r["train/success"] == 0.5 for r in rows)


def test_countdown_reward_is_the_exact_verifier(tmp_path, scripted):
    cfg = load_config("countdown", [*SMOKE, "rollout.group_size=4"], smoke=True)
    assert cfg.algo.name == "grpo" and cfg.algo.kl_coef == 0.0
    setup = build(cfg)
    task = setup.train_tasks[0]
    marker = tmp_path / "ran"
    samples = play(setup, [task] * 4, ["g"] * 4, scripted(four_answers(marker)), seed=0)
    assert [s[0].reward for s in samples] == [1.0, pytest.approx(0.1), 0.0, 0.0]
    assert not marker.exists()
    batch = prepare_batch(setup, Episodes(samples, [task] * 4))
    adv = [float(batch.advantages[i][batch.loss_mask[i] > 0][0]) for i in range(4)]
    assert adv[0] > 0 > adv[1] > adv[2] and adv[2] == pytest.approx(adv[3])
