"""QA rewards against hand-computed values."""

import pytest

from agentic_rl.rewards.qa import (
    cover_exact_match,
    exact_match,
    exact_match_reward,
    extract_answer,
    f1_score,
    normalize_answer,
)


@pytest.mark.parametrize(
    ("text", "normalized"),
    [
        ("The  Quick, brown FOX!", "quick brown fox"),
        ("An apple a day", "apple day"),
        ("theater", "theater"),  # articles only as whole words
        ("  U.S.A.  ", "usa"),
        ("", ""),
    ],
)
def test_normalize_answer(text, normalized):
    assert normalize_answer(text) == normalized


def test_exact_match():
    assert exact_match("the Brimholt.", ["Brimholt"]) == 1.0
    assert exact_match("Brimholt city", ["Brimholt"]) == 0.0
    assert exact_match("1874", "1874") == 1.0  # a single gold string is accepted
    assert exact_match("Vantor Mills", ["Brimholt", "vantor mills"]) == 1.0
    assert exact_match("anything", []) == 0.0


def test_cover_exact_match():
    assert cover_exact_match("He was born in Brimholt in 1874.", ["Brimholt"]) == 1.0
    assert cover_exact_match("Brim", ["Brimholt"]) == 0.0
    assert cover_exact_match("anything", ["", "the"]) == 0.0  # empty golds never match


def test_f1_score():
    # pred [new, york, city], gold [new, york]: P = 2/3, R = 1 -> F1 = 0.8
    assert f1_score("New York City", ["new york"]) == pytest.approx(0.8)
    # pred [cat, sat], gold [cat, sat, on, mat]: P = 1, R = 1/2 -> F1 = 2/3
    assert f1_score("the cat sat", "cat sat on mat") == pytest.approx(2 / 3)
    # repeated tokens count by multiplicity: common = min(2,1) + min(1,2) = 2 -> P = R = 2/3
    assert f1_score("x x y", "x y y") == pytest.approx(2 / 3)
    assert f1_score("paris", ["london", "Paris"]) == 1.0  # max over golds
    assert f1_score("berlin", ["paris"]) == 0.0
    assert f1_score("the", ["a"]) == 1.0  # both normalise to empty
    assert f1_score("", ["paris"]) == 0.0


def test_extract_answer():
    assert extract_answer("<answer>a</answer> x <answer>\n b \n</answer>") == "b"
    assert extract_answer("<answer>unterminated") is None
    assert extract_answer("<answer></answer>") == ""


def test_exact_match_reward_trl_shape():
    completions = [
        "<search>capital</search><information>...</information><answer>Paris</answer>",
        "Paris",  # no tag
        "<answer>London</answer> no wait <answer>paris.</answer>",  # the last answer counts
        "<answer>Lyon</answer>",
    ]
    answers = [["Paris"], ["Paris"], ["Paris"], ["Paris", "Marseille"]]
    assert exact_match_reward(completions, answers, task_id=["a", "b", "c", "d"]) == [
        1.0,
        0.0,
        1.0,
        0.0,
    ]


def test_exact_match_reward_reads_chat_completions():
    chat = [[{"role": "assistant", "content": "<answer>The Paris</answer>"}]]
    assert exact_match_reward(chat, answers=["Paris"]) == [1.0]


def test_exact_match_reward_length_mismatch():
    with pytest.raises(ValueError, match="2 completions but 1 answer lists"):
        exact_match_reward(["a", "b"], [["a"]])
