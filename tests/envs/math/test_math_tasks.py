"""Procedural math problems: exact answers, splits, and programs that print the answers."""

from __future__ import annotations

import math
import random

import pytest

from agentic_rl.envs.math.problems import (
    CATEGORIES,
    _derangement,
    _num_divisors,
    _word_arrangements,
    make_math_tasks,
)
from agentic_rl.envs.splits import split_of
from agentic_rl.tools.sandbox.limits import SandboxLimits
from agentic_rl.tools.sandbox.pool import SandboxPool


def test_helpers_hand_computed():
    assert [_derangement(n) for n in range(7)] == [1, 0, 1, 2, 9, 44, 265]
    assert _num_divisors(360) == 24  # 2^3 * 3^2 * 5: 4 * 3 * 2
    assert _num_divisors(49) == 3 and _num_divisors(1) == 1


def test_word_arrangements_is_the_multinomial():
    rng = random.Random(0)
    for _ in range(50):
        question, answer, _ = _word_arrangements(rng)
        if "MISSISSIPPI" in question:
            assert answer == 34650  # 11! / (4! 4! 2!)
        if "BANANA" in question:
            assert answer == 60  # 6! / (3! 2!)


def test_tasks_are_deterministic_balanced_and_exact():
    tasks = make_math_tasks("train", 90, seed=1)
    assert tasks == make_math_tasks("train", 90, seed=1)
    assert [t.prompt for t in tasks] != [t.prompt for t in make_math_tasks("train", 90, seed=2)]
    assert [t.fields["category"] for t in tasks[:3]] == list(CATEGORIES)
    assert {t.fields["category"] for t in tasks} == set(CATEGORIES)
    assert len({t.fields["template"] for t in tasks}) >= 10
    for task in tasks:
        assert len(task.answers) == 1 and task.answers[0].lstrip("-").isdigit()
    only = make_math_tasks("eval", 5, seed=0, categories=["combinatorics"])
    assert {t.fields["category"] for t in only} == {"combinatorics"}
    with pytest.raises(ValueError):
        make_math_tasks("eval", 1, categories=["geometry"])
    with pytest.raises(ValueError):
        make_math_tasks("test", 1)


def test_splits_never_share_a_prompt():
    train = {t.prompt for seed in (0, 1) for t in make_math_tasks("train", 600, seed)}
    held_out = [t.prompt for seed in (0, 1) for t in make_math_tasks("eval", 150, seed)]
    assert len(set(held_out[:150])) == 150 and len(set(held_out)) > 150
    assert train.isdisjoint(held_out)
    assert all(split_of(p) == "eval" for p in held_out)


def test_answers_match_a_direct_computation():
    for task in make_math_tasks("train", 120, seed=3):
        template, q = task.fields["template"], task.prompt
        if template == "gcd":
            a, b = (
                int(w.strip("?.,()"))
                for w in q.replace("(", " ").split()
                if w.strip("?.,()").isdigit()
            )
            assert task.answers == [str(math.gcd(a, b))]
        if template == "choose" and "choose" in q:
            n, k = (int(w) for w in q.rstrip("?").split() if w.isdigit())
            assert task.answers == [str(math.comb(n, k))]


def test_every_expert_program_prints_the_answer():
    tasks = make_math_tasks("train", 84, seed=5) + make_math_tasks("eval", 28, seed=5)
    assert len({t.fields["template"] for t in tasks}) == sum(len(v) for v in CATEGORIES.values())
    with SandboxPool(2, SandboxLimits(timeout_s=5.0)) as pool:
        results = pool.run_many([t.fields["code"] for t in tasks])
    for task, result in zip(tasks, results, strict=True):
        assert result.ok and result.stdout.strip() == task.answers[0], task.prompt
