"""The `ttrl` recipe: the majority vote of N samples is the reward; gold answers are only logged.

Mechanisms checked: with the recipe's vote, a question whose gold answer is changed gets exactly
the same rewards (they come from the vote), while the env's own reward (the vote switched off)
follows the gold; the label accuracy (vote == gold) is right on a hand-made batch; the smoke
run logs it every step of the label-free stage.
"""

from __future__ import annotations

import dataclasses

import pytest

from agentic_rl.config.load import load_config
from agentic_rl.config.parse import build_dataclass
from agentic_rl.config.schema import Config
from agentic_rl.learner.batch import Episodes
from agentic_rl.logging import read_metrics
from agentic_rl.train import shaping as bf
from agentic_rl.train.collect import collect
from agentic_rl.train.setup import build
from agentic_rl.train.stages import train_recipe
from agentic_rl.types import Task, Trajectory

FAST = ["model.name=tiny", "trainer.progress=false", "trainer.tensorboard=false"]


def ttrl_stage(*overrides: str) -> Config:
    cfg = load_config("ttrl", [*FAST, *overrides], smoke=True)
    return build_dataclass(Config, dict(cfg.stages[1]))


def test_smoke_logs_label_accuracy_every_label_free_step(tmp_path):
    overrides = [*FAST, f"trainer.out_dir={tmp_path}", "env.num_eval_tasks=2"]
    summary = train_recipe(load_config("ttrl", overrides, smoke=True))
    assert list(summary["stages"]) == ["format_sft", "ttrl"]
    rows = [
        r for r in read_metrics(tmp_path / "ttrl" / "ttrl" / "metrics.jsonl") if "train/reward" in r
    ]
    assert len(rows) == 2
    for row in rows:
        assert 0.0 <= row["train/ttrl_label_accuracy"] <= 1.0
        assert "train/ttrl_vote_share" in row


def majority_seven(originals):
    """3 of every 4 samples answer 7, the 4th the question's original gold answer."""

    def script(ep, index, turn):
        gold = originals[ep.task.task_id]
        return f"<answer>{gold}</answer>" if index % 4 == 3 else "<answer>7</answer>"

    return script


def seven(gold: str) -> str:
    """A changed gold answer: the one the majority gives."""
    return "7"


def collect_rewards(setup, scripted, originals, gold):
    """Rewards of one collected step with every training question's gold set by `gold`."""
    scripted(majority_seven({k: t.answers[0] for k, t in originals.items()}))  # fresh indices
    setup.train_tasks = [
        dataclasses.replace(t, answers=[gold(t.answers[0])]) for t in originals.values()
    ]
    kept, generated, metrics = collect(setup, 1)
    return [s[0].reward for s in generated.samples], metrics


def test_rewards_come_from_the_vote_not_the_gold(scripted):
    cfg = ttrl_stage("filters.ttrl_vote_samples=4")
    assert cfg.filters.ttrl_vote_samples == 4
    setup = build(cfg)
    originals = {t.task_id: t for t in setup.train_tasks}
    rewards, metrics = collect_rewards(setup, scripted, originals, str)  # gold unchanged
    rewards_changed, metrics_changed = collect_rewards(setup, scripted, originals, seven)
    assert rewards == rewards_changed == [1.0, 1.0, 1.0, 0.0] * 2  # 7 is the label both times
    assert metrics["ttrl_label_accuracy"] == 0.0  # the vote (7) is not the gold
    assert metrics_changed["ttrl_label_accuracy"] == 1.0  # now it is: only the metric moved
    assert metrics["ttrl_vote_share"] == 0.75
    # the mechanism off: the env rewards the gold, so changing it changes the rewards
    setup.cfg = ttrl_stage("filters.ttrl_vote_samples=0")
    env_rewards, _ = collect_rewards(setup, scripted, originals, str)
    env_changed, _ = collect_rewards(setup, scripted, originals, seven)
    assert env_rewards == [0.0, 0.0] * 2 and env_changed == [1.0, 1.0] * 2


def sample(text: str, group: str) -> list[Trajectory]:
    return [Trajectory([1], [0], [0.0], 1, group_id=group, completion_text=text)]


def test_label_accuracy_hand_computed():
    groups = {
        "a": (["<answer>4</answer>", "<answer>4.0</answer>", "<answer>5</answer>", "no"], "4"),
        "b": (["\\boxed{3}", "Answer: 3", "<answer>2</answer>", "<answer>2</answer>"], "2"),
        "c": (["no", "answer", "here", "."], "1"),
    }
    samples, tasks = [], []
    for name, (texts, gold) in groups.items():
        samples += [sample(t, name) for t in texts]
        tasks += [Task(name, "", [gold])] * len(texts)
    kept, metrics = bf.ttrl_relabel(Episodes(samples, tasks), train_samples=2)
    # a: label 4 (2 of 4 votes) = gold -> right; b: 3 and 2 tie, the first seen (3) wins and
    # the gold is 2 -> wrong; c: nobody answered, no label -> wrong. Accuracy 1/3.
    assert metrics["ttrl_label_accuracy"] == pytest.approx(1 / 3)
    assert metrics["ttrl_vote_share"] == pytest.approx((2 / 4 + 2 / 4 + 0) / 3)
    assert [s[0].reward for s in samples] == [1, 1, 0, 0, 1, 1, 0, 0, 0, 0, 0, 0]
    assert len(kept) == 6  # M = 2 of each question
