"""Search-agent rewards: each system's rule on hand-built completions, malformed ones included."""

import pytest

from agentic_rl.rewards.search import (
    REWARDS,
    agent_r1_score,
    answer_f1_score,
    asearcher_score,
    deepresearcher_score,
    golds_from_columns,
    r1_searcher_stage1_score,
    r1_searcher_stage2_score,
    research_score,
    search_key_match,
    search_r1_reward,
    search_r1_score,
    stepsearch_outcome_reward,
    stepsearch_outcome_score,
)
from agentic_rl.rewards.search_format import R1_SEARCHER_TAGS, RESEARCH_TAGS

INFO = '\n\n<information>Doc 1(Title: "Paris") Paris is the capital.</information>\n\n'
GOOD = f"<think>look it up</think><search>capital of France</search>{INFO}<think>ok</think>"
TWO_THIRDS = 2 * (0.5 * 1.0) / 1.5  # F1 of "Paris France" against "Paris": P 1/2, R 1


# ---- Search-R1 v0.3 ------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (GOOD + "<answer>Paris</answer>", 1.0),  # EM + valid format
        (GOOD + "<answer>London</answer>", 0.2),  # valid format only
        ("<search>q</search><information>x</information><answer>Paris</answer>", 0.8),  # no think
        ("<think>a</think><answer>Paris</answer> trailing words", 0.8),  # text after the answer
        ("<think>a<answer>Paris</answer>", 0.8),  # unbalanced think
        ("<think>a</think> chatter <answer>paris.</answer>", 0.8),  # text between tags
        ("<answer>London</answer>", 0.1),  # an answer, wrong, bad format
        ("I think it is Paris.", 0.0),  # no answer, bad format
        ("<think>a</think><search>q</search><think>b</think><answer>Paris</answer>", 0.8),
    ],
)
def test_search_r1(text, expected):
    assert search_r1_score(text, ["Paris"]) == pytest.approx(expected)


def test_search_r1_retrieval_score_and_full_sequences():
    wrong = GOOD + "<answer>London</answer>"
    assert search_r1_score(wrong, ["Paris"], retrieval_score=0.1) == pytest.approx(0.3)
    assert search_r1_score(wrong, ["Rome"], retrieval_score=0.1) == pytest.approx(0.2)
    # prompt + response strings: only the text after the assistant marker is checked
    full = "Example: <answer> Beijing </answer><|im_start|>assistant\n" + GOOD
    assert search_r1_score(full + "<answer>Paris</answer>", ["Paris"]) == 1.0


# ---- ReSearch ------------------------------------------------------------------------------
RS = "<think>a</think><search>q</search><result>r</result><think>b</think>"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (RS + "<answer>The answer is \\boxed{Paris}</answer>", 1.0),
        (RS + "<answer>\\boxed{Paris France}</answer>", TWO_THIRDS),
        (RS + "<answer>\\boxed{\\text{the Paris}}</answer>", 1.0),
        (RS + "<answer>\\boxed{London}</answer>", 0.1),  # good format, F1 0
        (RS + "<answer>Paris</answer>", 0.0),  # no \boxed
        (RS + "<answer>\\boxed{Paris</answer>", 0.0),  # \boxed never closed
        ("<search>q</search><result>r</result><answer>\\boxed{Paris}</answer>", 0.0),  # no think
        ("<think>a</think><search>q</search><answer>\\boxed{Paris}</answer>", 0.0),  # no result
        (RS + "<answer>\\boxed{Paris}</answer><answer>\\boxed{Paris}</answer>", 0.0),
    ],
)
def test_research(text, expected):
    assert research_score(text, ["Paris"], tags=RESEARCH_TAGS) == pytest.approx(expected)


def test_research_with_the_project_tags():
    text = GOOD + "<answer>\\boxed{Paris}</answer>"
    assert research_score(text, ["Paris"]) == 1.0


# ---- R1-Searcher ---------------------------------------------------------------------------
Q = "<|begin_of_query|>capital France<|end_of_query|><|begin_of_documents|>d<|end_of_documents|>"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (f"<think>need {Q} so</think><answer>Paris, France</answer>", 2.0),  # 1 + 0.5 + 0.5
        (f"<think>need {Q} so</think><answer>London</answer>", 0.0),  # -1 + 0.5 + 0.5
        ("<think>I know</think><answer>Paris</answer>", 1.5),  # no retrieval
        (f"<think>a</think><think>{Q}</think><answer>Paris</answer>", 1.5),  # two thinks
        (f"<think>{Q}</think>", -0.5),  # no answer: -1 + 0.5
        ("<think>a <|begin_of_query|>x</think><answer>Paris</answer>", 1.5),  # unbalanced query
    ],
)
def test_r1_searcher_stage1(text, expected):
    assert r1_searcher_stage1_score(text, ["Paris"], tags=R1_SEARCHER_TAGS) == expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (f"<think>{Q}</think><answer>Paris France</answer>", TWO_THIRDS),
        (f"<think>{Q}</think><answer>Paris France</answer> more", TWO_THIRDS - 2),
        (f"<think>{Q}</think>", -2.0),
        (f"{Q}<answer>Paris</answer>", -1.0),  # no think: F1 1 - 2
        # a query inside the answer is bad format; the answer normalises to the two tokens
        # "paris beginofqueryxendofquery", so F1 = 2/3 as well
        (
            "<think>a</think><answer>Paris <|begin_of_query|>x<|end_of_query|></answer>",
            TWO_THIRDS - 2,
        ),
    ],
)
def test_r1_searcher_stage2(text, expected):
    score = r1_searcher_stage2_score(text, ["Paris"], tags=R1_SEARCHER_TAGS)
    assert score == pytest.approx(expected)


# ---- StepSearch ----------------------------------------------------------------------------
def test_search_key_match_by_hand():
    keys = [["Ann Lee"], ["Acme Mills", "Acme Mills Ltd"]]
    # "ann lee employer" vs "ann lee": P 2/3, R 1 -> F1 0.8; "acme mills" -> 1.0
    assert search_key_match(["Ann Lee employer", "Acme Mills"], keys) == pytest.approx(0.9)
    # a later, worse query for the same group does not lower its credit
    assert search_key_match(["Acme Mills", "Acme"], keys) == pytest.approx(0.5)
    assert search_key_match(["weather"], keys) == 0.0
    assert search_key_match([], keys) == 0.0 and search_key_match(["Ann Lee"], []) == 0.0


def test_stepsearch_outcome():
    text = (
        "<think>a</think><search>Ann Lee employer</search><information>x</information>"
        "<search>Acme Mills</search><information>y</information><answer>Paris</answer>"
    )
    keys = [["Ann Lee"], ["Acme Mills"]]
    assert stepsearch_outcome_score(text, ["Paris"], keys) == pytest.approx(1 + 0.618 * 0.9)
    assert stepsearch_outcome_score(text, ["Paris"]) == 1.0
    assert stepsearch_outcome_score(text + " and more", ["Paris"], keys) == -1.0
    assert stepsearch_outcome_score("<search>Ann Lee</search>", ["Paris"], keys) == -1.0
    assert stepsearch_outcome_score("<answer>Rome</answer>\n", ["Paris"], keys) == 0.0
    batch = stepsearch_outcome_reward(
        [text, text], answers=["Paris", "Rome"], search_keys=[keys, None]
    )
    assert batch == pytest.approx([1 + 0.618 * 0.9, 0.0])


# ---- multi-turn formats: DeepResearcher, ASearcher, Agent-R1 --------------------------------
WEB = (
    "<think>a</think><web_search>capital France</web_search>\n\n<information>r</information>\n\n"
    "<think>b</think><browse_webpage>https://x</browse_webpage><information>page</information>"
)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (WEB + "<think>c</think><answer>Paris France</answer>", TWO_THIRDS),
        (WEB + "<think>c</think><answer>Paris</answer>", 1.0),
        (WEB + "<answer>Paris</answer>", -1.0),  # last turn without think
        (WEB, -1.0),  # cut before answering
        (WEB + "<think>c</think><web_search>q</web_search><answer>Paris</answer>", -1.0),
        ("<think>a</think><answer>Paris</answer> extra", -1.0),  # text after the action
        ("<think>a</think><answer> </answer>", -1.0),  # empty action
        (
            "<think>a</think><search>q</search><error>bad</error><think>b</think>"
            "<answer>Paris</answer>",
            1.0,
        ),  # plain search is accepted
    ],
)
def test_deepresearcher(text, expected):
    assert deepresearcher_score(text, ["Paris"]) == pytest.approx(expected)


def test_asearcher():
    good = "<search>q1</search><information>r</information>plan<search>q2</search>" + INFO
    assert asearcher_score(good + "so <answer>Paris France</answer>", ["Paris"]) == TWO_THIRDS
    assert asearcher_score(good + "<answer>Paris France</answer>", ["Paris"], metric="em") == 0
    assert asearcher_score(good + "<answer>Paris</answer>", ["Paris"], metric="em") == 1.0
    # one malformed turn (no action) zeroes the reward
    bad = "<search>q1</search><information>r</information>hmm<error>no action</error>"
    assert asearcher_score(bad + "<answer>Paris</answer>", ["Paris"]) == 0.0
    # stray closing tag in a turn
    assert asearcher_score("</think><answer>Paris</answer>", ["Paris"]) == 0.0
    with pytest.raises(ValueError, match="metric"):
        asearcher_score("<answer>Paris</answer>", ["Paris"], metric="bleu")


def test_agent_r1():
    two_calls = "<search>a</search><information>r</information><search>b</search>" + INFO
    assert agent_r1_score(two_calls + "<answer>Paris</answer>", ["Paris"]) == pytest.approx(1.2)
    assert agent_r1_score(two_calls + "<answer>Rome</answer>", ["Paris"]) == pytest.approx(0.2)
    malformed = "<search>a</search><information>r</information>text only<error>e</error>"
    assert agent_r1_score(malformed + "<answer>Paris</answer>", ["Paris"]) == pytest.approx(-0.9)
    many = "<search>a</search><information>r</information>" * 7 + "<answer>Paris</answer>"
    assert agent_r1_score(many, ["Paris"]) == pytest.approx(1.5)  # process reward capped at 0.5
    assert agent_r1_score("no tags at all", ["Paris"]) == -1.0


def test_zerosearch_f1():
    assert answer_f1_score("<answer>Paris France</answer>", ["Paris"]) == pytest.approx(TWO_THIRDS)
    assert answer_f1_score("Paris", ["Paris"]) == 0.0


# ---- TRL shape -----------------------------------------------------------------------------
def test_batch_shape_and_columns():
    texts = [GOOD + "<answer>Paris</answer>", "<answer>London</answer>"]
    assert search_r1_reward(texts, answers=[["Paris"], "London"]) == [1.0, 0.8]
    assert search_r1_reward(texts, golden_answers=[["Paris"], ["x"]]) == [1.0, 0.1]
    truth = [{"target": ["Paris"]}, {"target": ["London"]}]
    assert search_r1_reward(texts, ground_truth=truth) == [1.0, 0.8]
    rm = [{"ground_truth": {"target": ["Paris"]}}] * 2
    assert search_r1_reward(texts, reward_model=rm) == [1.0, 0.1]
    chat = [[{"role": "assistant", "content": texts[0]}]]
    assert search_r1_reward(chat, answers=["Paris"]) == [1.0]
    with pytest.raises(ValueError, match="2 completions but 1 rows"):
        search_r1_reward(texts, answers=["Paris"])
    with pytest.raises(ValueError, match="no gold answers"):
        golds_from_columns({}, 1)


def test_registry_names_every_system_and_all_return_floats():
    assert set(REWARDS) == {
        "search_r1",
        "research",
        "r1_searcher_stage1",
        "r1_searcher_stage2",
        "zerosearch",
        "stepsearch",
        "deepresearcher",
        "asearcher",
        "asearcher_em",
        "agent_r1",
    }
    junk = ["", "<answer>", "</answer><answer>", "<think><think>", "\\boxed{", GOOD * 3]
    for name, fn in REWARDS.items():
        values = fn(junk, answers=[["Paris"]] * len(junk))
        assert len(values) == len(junk) and all(isinstance(v, float) for v in values), name
        assert fn.__name__.endswith("_reward")


def test_trailing_end_of_turn_tokens_do_not_break_the_format():
    tail = "<|im_end|>\n<|endoftext|>"
    assert search_r1_score(GOOD + "<answer>Paris</answer>" + tail, ["Paris"]) == 1.0
    assert deepresearcher_score("<think>a</think><answer>Paris</answer></s>", ["Paris"]) == 1.0
    text = "<think>x</think><answer>Paris</answer><|im_end|>"
    assert stepsearch_outcome_score(text, ["Paris"]) == 1.0
    assert r1_searcher_stage2_score(text, ["Paris"]) == 1.0
    # other special tokens are content: text after the answer is still bad format
    assert search_r1_score(GOOD + "<answer>Paris</answer><|im_start|>", ["Paris"]) == 0.8
