"""Reward shaping and batch filters applied to rollout episodes (train/shaping.py)."""

import pytest

from agentic_rl.learner.batch import Episodes
from agentic_rl.train import shaping as bf
from agentic_rl.types import Task, Trajectory


def episode(reward, group, text="", generated=1, observed=0, **metrics):
    """One sample: a 1-token prompt, `generated` model tokens, then `observed` observation
    tokens (loss mask 0)."""
    base = {"response_tokens": 10.0, "tool_calls": 0.0, "tool_errors": 0.0, "turns": 1.0}
    mask = [0] + [1] * generated + [0] * observed
    t = Trajectory(
        token_ids=[1] * len(mask),
        loss_mask=mask,
        logprobs=[0.0] * len(mask),
        prompt_length=1,
        reward=reward,
        group_id=group,
        metrics={**base, **metrics},
        completion_text=text,
    )
    return [t]


def batch(rewards_by_group, **kw):
    samples, tasks = [], []
    for g, rewards in rewards_by_group.items():
        for r in rewards:
            samples.append(episode(r, g, **kw))
            tasks.append(Task(task_id=g, prompt="", answers=["42"], fields={"kind": g[0]}))
    return Episodes(samples, tasks)


def rewards(episodes):
    return [s[0].reward for s in episodes.samples]


def test_groups_selection_and_first_groups_keep_batch_order():
    eps = batch({"a": [0, 1], "b": [1, 1], "c": [0, 0.5]})
    assert eps.groups() == [[0, 1], [2, 3], [4, 5]]
    assert eps.group_ids().tolist() == [0, 0, 1, 1, 2, 2]
    assert rewards(eps.first_groups(2)) == [0, 1, 1, 1]
    assert [t.task_id for t in eps.select([5, 0]).tasks] == ["c", "a"]


def test_drop_constant_groups_is_dapo_dynamic_sampling():
    eps = batch({"a": [0, 1], "b": [1, 1], "c": [0, 0], "d": [0.2, 0.1]})
    kept = bf.drop_constant_groups(eps)
    assert [s[0].group_id for s in kept.samples] == ["a", "a", "d", "d"]
    assert bf.zero_variance_fraction(eps) == 0.5
    assert len(bf.drop_constant_groups(Episodes())) == 0


def test_overlong_penalty_is_added_to_every_sample_of_an_episode():
    eps = Episodes([episode(1.0, "a", generated=n) for n in (10, 50, 120)], [])
    eps.samples[1].append(episode(1.0, "a", generated=40)[0])  # a second step: 50 + 40 = 90
    metrics = bf.overlong_penalty(eps, max_length=100, buffer=20)
    # L_exp = 80: 10 -> 0; 90 -> (80 - 90) / 20 = -0.5; 120 > 100 -> -1
    assert rewards(eps) == [1.0, 0.5, 0.0]
    assert eps.samples[1][1].reward == 0.5
    assert metrics["overlong_penalty"] == pytest.approx(-0.5)
    assert metrics["overlong_penalized"] == pytest.approx(2 / 3)
    # the reward before shaping stays on every sample, for the group filters
    assert [s.metrics[bf.OUTCOME] for ep in eps.samples for s in ep] == [1.0] * 4


def test_overlong_length_counts_generated_tokens_not_observations():
    # 70 model tokens + 200 tool-output tokens: within L_exp = 80, no penalty
    eps = Episodes([episode(1.0, "a", generated=70, observed=200, response_tokens=270.0)], [])
    bf.overlong_penalty(eps, max_length=100, buffer=20)
    assert rewards(eps) == [1.0]


def test_dynamic_sampling_compares_the_outcome_before_shaping():
    # group a: both right, the second answer long (penalised); group b: right and wrong
    eps = Episodes(
        [episode(1.0, "a", generated=10), episode(1.0, "a", generated=90)]
        + [episode(1.0, "b", generated=10), episode(0.0, "b", generated=10)],
        [Task("a", "")] * 2 + [Task("b", "")] * 2,
    )
    bf.overlong_penalty(eps, max_length=100, buffer=20)
    assert rewards(eps) == [1.0, 0.5, 1.0, 0.0]
    assert bf.filter_values(eps).tolist() == [1.0, 1.0, 1.0, 0.0]
    assert bf.filter_values(eps, "reward").tolist() == [1.0, 0.5, 1.0, 0.0]
    kept = bf.drop_constant_groups(eps)  # filters.metric=outcome (the default)
    assert [s[0].group_id for s in kept.samples] == ["b", "b"]
    kept = bf.drop_constant_groups(eps, "reward")
    assert [s[0].group_id for s in kept.samples] == ["a", "a", "b", "b"]
    with pytest.raises(ValueError, match="unknown filter metric 'acc'"):
        bf.filter_values(eps, "acc")


def test_ttrl_majority_vote_relabels_and_keeps_m_of_n():
    texts = ["<answer>42</answer>", "x <answer>42.0</answer>", "<answer>7</answer>", "no answer"]
    eps = Episodes(
        [episode(0.0, "a", text=t) for t in texts] + [episode(0.0, "b", text="<answer>5</answer>")],
        [Task("a", "", ["42"])] * 4 + [Task("b", "", ["6"])],
    )
    kept, metrics = bf.ttrl_relabel(eps, train_samples=3)
    assert rewards(eps) == [1.0, 1.0, 0.0, 0.0, 1.0]  # the vote is the label, gold is not used
    assert rewards(kept) == [1.0, 1.0, 0.0, 1.0]  # first 3 of group a, 1 of group b
    assert metrics["ttrl_label_accuracy"] == 0.5  # a's label 42 is right, b's 5 is wrong
    assert metrics["ttrl_vote_share"] == pytest.approx((2 / 4 + 1) / 2)


def test_ttrl_votes_over_canonical_answers_of_the_last_model_turn(tokenizer):
    texts = [
        "<answer>1,905</answer>",
        "<answer>1905.0</answer>",
        "\\boxed{1905}",
        "<answer>7</answer>",
    ]
    eps = Episodes([episode(0.0, "a", text=t) for t in texts], [Task("a", "", ["1905"])] * 4)
    _, metrics = bf.ttrl_relabel(eps, train_samples=4)
    assert rewards(eps) == [1.0, 1.0, 1.0, 0.0]  # "1,905", "1905.0" and \\boxed{1905} agree
    assert metrics["ttrl_label_accuracy"] == 1.0 and metrics["ttrl_vote_share"] == 0.75
    # an observation quoting the answer syntax (a usage hint) is not the model's answer
    turn = tokenizer("<calc>1+</calc>", add_special_tokens=False)["input_ids"]
    hint = tokenizer(" Invalid action. Use <answer>...</answer>.", add_special_tokens=False)
    ids = [1] + turn + hint["input_ids"]
    t = Trajectory(
        ids,
        [0] + [1] * len(turn) + [0] * (len(ids) - 1 - len(turn)),
        [0.0] * len(ids),
        prompt_length=1,
        turn_spans=[(1, 1 + len(turn))],
        group_id="b",
        completion_text=tokenizer.decode(ids[1:]),
        metrics={"response_tokens": 1.0},
    )
    assert "<answer>...</answer>" in bf.model_answer_text([t])  # without the tokenizer
    assert bf.model_answer_text([t], tokenizer) == "<calc>1+</calc>"


def test_roc_keeps_cleanest_positives_and_class_proportions():
    # 4 samples of one task (oversample 2 x G=2); positives: one with a tool error, one clean
    eps = Episodes(
        [
            episode(1.0, "a", "<answer>1</answer>", tool_calls=2.0, tool_errors=1.0),
            episode(1.0, "a", "<answer>1</answer>", tool_calls=2.0, tool_errors=0.0),
            episode(0.0, "a", "<answer>2</answer>"),
            episode(0.0, "a", "<answer>2</answer><answer>"),
        ]
        + [episode(0.0, "b") for _ in range(4)],  # constant group: dropped
        [Task("a", "")] * 4 + [Task("b", "")] * 4,
    )
    kept, metrics = bf.roc_select(eps, group_size=2, min_per_class=1)
    assert [s[0].metrics["tool_errors"] for s in kept.samples] == [0.0, 0.0]
    assert rewards(kept) == [1.0, 0.0]
    assert kept.samples[1] is eps.samples[2]  # negatives as they come
    assert metrics["roc_positive_penalty"] == 0.0
    stats = bf.roc_penalty_of(eps.samples[3][0])
    assert stats[0] != stats[0] and stats[1:] == [1.0, 1.0, 0.0]  # NaN, 1 answer, unbalanced


def test_variance_keep_is_starpo_s():
    eps = batch({"a": [0, 0.1], "b": [0, 1], "c": [1, 1], "d": [0, 0.5]})
    kept = bf.variance_keep(eps, 0.5)
    assert sorted({s[0].group_id for s in kept.samples}) == ["b", "d"]
    assert bf.variance_keep(eps, 1.0) is eps


def test_trr_ids_and_missing_field():
    tasks = [Task("1", "", fields={"t": "ded", "r": "solve"}), Task("2", "", fields={"t": "abd"})]
    tasks.append(Task("3", "", fields={"t": "ded", "r": "propose"}))
    types, roles = bf.trr_ids(tasks, "t", "r")
    assert types.tolist() == [0, 1, 0] and roles.tolist() == [0, 1, 2]
    assert bf.trr_ids(tasks, "t", "")[1].tolist() == [0, 0, 0]
    with pytest.raises(ValueError, match="has no field 'kind'"):
        bf.trr_ids(tasks, "kind", "")
