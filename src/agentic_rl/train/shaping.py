"""Reward shaping and batch filters on rollout episodes, between the rollout and the advantages.

The math lives in `algos/filters.py` and `algos/losses.py` (pure tensor functions); this module
applies it to episodes. An episode is a list of training samples (one in episode mode, one per
env step in step mode); every sample carries its episode's reward, so `samples[0].reward` is
the episode reward. Episodes of one task share a `group_id`; the filters keep or drop whole
groups (or, for RoC, sub-sample within a group), never single steps.

Stages, in the order the trainer applies them:
1. `ttrl_relabel` (TTRL): majority-vote pseudo-labels replace the rewards.
2. `overlong_penalty` (DAPO soft overlong punishment): added to the rewards; the reward before
   it stays in each sample's metrics[OUTCOME].
3. `roc_select` (rStar2-Agent GRPO-RoC) / `drop_constant_groups` (DAPO dynamic sampling): they
   compare `filter_values`, by default that outcome before shaping (filters.metric).
4. `variance_keep` (RAGEN StarPO-S), after dynamic sampling filled the batch.
"""

from __future__ import annotations

import math
import re
from collections.abc import Hashable
from typing import Any

import torch

from agentic_rl.algos.filters import (
    dynamic_sampling_keep,
    reward_variance_keep,
    roc_downsample,
    roc_penalties,
)
from agentic_rl.algos.losses import overlong_soft_penalty
from agentic_rl.learner.batch import Episodes
from agentic_rl.rewards.math import math_equal
from agentic_rl.rewards.ttrl import ttrl_rewards
from agentic_rl.types import Task, Trajectory

_ANSWER = re.compile(r"<answer>(.*?)</answer>", re.DOTALL)
OUTCOME = "outcome_reward"
"""Trajectory.metrics key: the episode's reward before reward shaping (the overlong penalty)."""


def _set_reward(samples: list[Trajectory], reward: float) -> None:
    for sample in samples:
        sample.reward = reward


def model_answer_text(samples: list[Trajectory], tokenizer: Any = None) -> str:
    """The text an episode's answer is read from: its last model turn (decoded with `tokenizer`)
    so that env observations (e.g. a usage hint quoting `<answer>...</answer>`) never vote;
    the whole completion text without a tokenizer or turn spans."""
    last = samples[-1]
    if tokenizer is None or not last.turn_spans:
        return last.completion_text
    start, end = last.turn_spans[-1]
    return str(tokenizer.decode(last.token_ids[start:end]))


def ttrl_relabel(
    episodes: Episodes, train_samples: int, tokenizer: Any = None
) -> tuple[Episodes, dict[str, float]]:
    """TTRL (Zuo et al. 2025): per task, the majority answer of its N samples is the pseudo-label;
    reward = 1 if a sample's answer equals it, else 0; the first `train_samples` (M) episodes of
    each group are kept for training (samples are i.i.d., so the first M are a fair subset).
    Answers are canonical math answers of the last model turn (`rewards.ttrl`: the last
    <answer>, else \\boxed{}, else "Answer: ..."; numbers as exact fractions).
    Logs the label accuracy against the gold answers, which TTRL never trains on."""
    keep, correct_labels, shares = [], [], []
    for group in episodes.groups():
        result = ttrl_rewards([model_answer_text(episodes.samples[i], tokenizer) for i in group])
        for i, reward in zip(group, result.rewards, strict=True):
            _set_reward(episodes.samples[i], reward)
        golds = episodes.tasks[group[0]].answers
        right = result.label is not None and any(math_equal(result.label, g) for g in golds)
        correct_labels.append(float(right))
        shares.append(result.vote_share)
        keep += group[:train_samples]
    metrics = {
        "ttrl_label_accuracy": sum(correct_labels) / max(len(correct_labels), 1),
        "ttrl_vote_share": sum(shares) / max(len(shares), 1),
    }
    return episodes.select(sorted(keep)), metrics


def overlong_penalty(episodes: Episodes, max_length: int, buffer: int) -> dict[str, float]:
    """DAPO soft overlong punishment, added to each episode's reward in place: 0 up to
    max_length - buffer generated tokens, then linear down to -1 at max_length (DAPO Eq. 13).
    The length counts the model's own tokens (loss mask 1) over all the episode's samples, not
    the observations inserted between its turns. The reward before the penalty is kept in each
    sample's metrics[OUTCOME], which the group filters compare (`filter_values`)."""
    lengths = torch.tensor([sum(s.num_generated for s in samples) for samples in episodes.samples])
    penalties = overlong_soft_penalty(lengths, max_length, buffer)
    for samples, penalty in zip(episodes.samples, penalties.tolist(), strict=True):
        for sample in samples:
            sample.metrics.setdefault(OUTCOME, sample.reward)
        _set_reward(samples, samples[0].reward + penalty)
    return {
        "overlong_penalty": float(penalties.mean()) if len(penalties) else 0.0,
        "overlong_penalized": float((penalties < 0).float().mean()) if len(penalties) else 0.0,
    }


def filter_values(episodes: Episodes, metric: str = "outcome") -> torch.Tensor:
    """[E] what the group filters compare (filters.metric): "outcome", each episode's reward
    before reward shaping (metrics[OUTCOME], or the reward if nothing shaped it), as DAPO's
    dynamic sampling filters on accuracy; "reward", the shaped reward."""
    if metric == "reward":
        return episodes.rewards()
    if metric != "outcome":
        raise ValueError(f"unknown filter metric {metric!r}; expected outcome or reward")
    values = [s[0].metrics.get(OUTCOME, s[0].reward) for s in episodes.samples]
    return torch.tensor(values, dtype=torch.float32)


def drop_constant_groups(episodes: Episodes, metric: str = "outcome") -> Episodes:
    """DAPO dynamic sampling: keep only groups whose `filter_values` are not all equal."""
    if not len(episodes):
        return episodes
    values = filter_values(episodes, metric)
    return episodes.select(dynamic_sampling_keep(values, episodes.group_ids()).tolist())


def roc_penalty_of(trajectory: Trajectory) -> list[float]:
    """The inputs of `roc_penalties` for one episode: tool error share (NaN without tool
    calls), complete answer blocks, assistant turns, balanced answer tags (1/0)."""
    calls = trajectory.metrics.get("tool_calls", 0.0)
    errors = trajectory.metrics.get("tool_errors", 0.0) / calls if calls else math.nan
    text = trajectory.completion_text
    balanced = text.count("<answer>") == text.count("</answer>")
    turns = trajectory.metrics.get("turns", 1.0)
    return [errors, float(len(_ANSWER.findall(text))), turns, float(balanced)]


def roc_select(
    episodes: Episodes, group_size: int, min_per_class: int, metric: str = "outcome"
) -> tuple[Episodes, dict[str, float]]:
    """GRPO-RoC (Shang et al. 2025, rStar2-Agent): drop equal-reward groups, then down-sample
    each oversampled group to `group_size` keeping class proportions; positives with the fewest
    tool errors / format problems first, negatives as they come. Equal rewards and the classes
    (value > 0 is positive) are judged on `filter_values(metric)`."""
    varied = drop_constant_groups(episodes, metric)
    values = filter_values(varied, metric)
    keep: list[int] = []
    penalties_kept: list[float] = []
    for group in varied.groups():
        stats = torch.tensor([roc_penalty_of(varied.samples[i][0]) for i in group])
        penalties = roc_penalties(stats[:, 0], stats[:, 1], stats[:, 2], stats[:, 3].bool())
        rewards = values[group]
        chosen = roc_downsample(rewards, penalties, group_size, min_per_class).tolist()
        keep += [group[j] for j in chosen]
        penalties_kept += [float(penalties[j]) for j in chosen if rewards[j] > 0]
    metrics = {"roc_positive_penalty": sum(penalties_kept) / max(len(penalties_kept), 1)}
    return varied.select(sorted(keep)), metrics


def variance_keep(episodes: Episodes, keep_fraction: float) -> Episodes:
    """StarPO-S (Wang et al. 2025, RAGEN): keep the top `keep_fraction` of groups by reward std."""
    if keep_fraction >= 1 or not len(episodes):
        return episodes
    kept = reward_variance_keep(episodes.rewards(), episodes.group_ids(), keep_fraction)
    return episodes.select(kept.tolist())


def zero_variance_fraction(episodes: Episodes) -> float:
    """Share of groups whose episode rewards are all equal (no GRPO signal)."""
    groups = episodes.groups()
    flat = 0
    for group in groups:
        rewards = [episodes.samples[i][0].reward for i in group]
        flat += max(rewards) - min(rewards) <= 1e-6
    return flat / max(len(groups), 1)


def trr_ids(
    tasks: list[Task], type_field: str, role_field: str
) -> tuple[torch.Tensor, torch.Tensor]:
    """TRR++ bucket ids per episode: (task type id, role id) from the tasks' fields."""
    types: dict[Hashable, int] = {}
    roles: dict[Hashable, int] = {}
    type_ids, role_ids = [], []
    for task in tasks:
        if type_field not in task.fields:
            raise ValueError(
                f"algo.name=trr_pp: task {task.task_id} has no field '{type_field}' "
                f"(set algo.trr_type_field to one of {sorted(task.fields)})"
            )
        role = task.fields.get(role_field, "") if role_field else ""
        type_ids.append(types.setdefault(str(task.fields[type_field]), len(types)))
        role_ids.append(roles.setdefault(str(role), len(roles)))
    return torch.tensor(type_ids, dtype=torch.long), torch.tensor(role_ids, dtype=torch.long)
