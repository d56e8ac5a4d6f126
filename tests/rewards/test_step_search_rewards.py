"""StepSearch step rewards on a hand-computed toy example, both TF-IDF backends."""

import math

import pytest

from agentic_rl.rewards.step_search import (
    information_gains,
    redundancy_penalties,
    search_steps,
    split_documents,
    step_search_rewards,
    tfidf_cosines,
)
from agentic_rl.tools.search import format_results

BACKENDS = ["numpy", "sklearn"]

G1, G2 = "alpha beta", "gamma delta"  # the gold documents
# TF-IDF of "gamma epsilon" fitted with the golds: n = 3 texts; df(gamma) = 2, others 1.
# idf(gamma) = ln(4/3) + 1 = a, idf(epsilon) = idf(delta) = ln(4/2) + 1 = b; raw counts 1.
# cos("gamma epsilon", "gamma delta") = a*a / (a^2 + b^2) (both rows have norm sqrt(a^2 + b^2)).
A, B = math.log(4 / 3) + 1, math.log(2) + 1
COS = A * A / (A * A + B * B)  # = 0.366447


@pytest.fixture(params=BACKENDS)
def backend(request):
    if request.param == "sklearn":
        pytest.importorskip("sklearn")
    return request.param


def test_tfidf_cosines_by_hand(backend):
    assert abs(COS - 0.366447) < 1e-6
    assert tfidf_cosines("gamma epsilon", [G1, G2], backend) == pytest.approx([0.0, COS])
    assert tfidf_cosines(G1, [G1, G2], backend) == pytest.approx([1.0, 0.0])
    assert tfidf_cosines("", [G1], backend) == [0.0]
    assert tfidf_cosines("a b", [G1], backend) == [0.0]  # no token of two characters
    assert tfidf_cosines("x", [], backend) == []


def test_three_step_toy_example(backend):
    # step 1 retrieves gold 1 exactly; step 2 repeats it and finds a doc near gold 2;
    # step 3 retrieves gold 2 exactly.
    steps = [[G1], [G1, "gamma epsilon"], [G2]]
    # IG_1 = mean(1 - 0, 0 - 0) = 0.5                       M = [1, 0]
    # IG_2 = mean(max(1 - 1, 0), COS - 0) = COS / 2        M = [1, COS]
    # IG_3 = mean(0, 1 - COS) = (1 - COS) / 2              M = [1, 1]
    gains = information_gains(steps, [G1, G2], backend)
    assert gains == pytest.approx([0.5, COS / 2, (1 - COS) / 2])
    # RP: step 2 has one of its two docs seen before
    assert redundancy_penalties(steps) == [0.0, 0.5, 0.0]
    rewards = step_search_rewards(steps, [G1, G2], backend=backend)
    assert rewards == pytest.approx([0.3, 0.6 * (COS / 2 - 0.5), 0.6 * (1 - COS) / 2])
    assert rewards == pytest.approx([0.3, -0.190066, 0.190066], abs=1e-6)


def test_normalisation_repeats_and_edge_cases():
    # SQuAD normalisation: case, punctuation and articles do not make a document new
    assert redundancy_penalties([["The Alpha, beta."], ["alpha beta", "x"], []]) == [0, 0.5, 0]
    assert redundancy_penalties([["d", "d"]]) == [0.5]  # a repeat inside one step counts
    assert information_gains([["alpha"]], []) == [0.0]
    assert step_search_rewards([], [G1]) == []


def test_parse_rendered_results():
    gold_docs = ['"Ann Lee"\nAnn Lee works for Acme Mills.', '"Acme Mills"\nAcme Mills makes rope.']
    result = [{"document": {"id": "1", "contents": c}, "score": 1.0} for c in gold_docs]
    info = format_results(result)  # Doc 1(Title: "Ann Lee") Ann Lee works ...\nDoc 2(...)
    docs = split_documents(info)
    assert docs == [
        '"Ann Lee" Ann Lee works for Acme Mills.',
        '"Acme Mills" Acme Mills makes rope.',
    ]
    assert split_documents("free text") == ["free text"] and split_documents("  ") == []
    text = (
        f"<think>x</think><search>Ann Lee</search>\n\n<information>{info}</information>\n\n"
        f"<search>again</search><information>{info}</information><answer>rope</answer>"
    )
    assert [q for q, _ in search_steps(text)] == ["Ann Lee", "again"]
    # step 1 retrieves both gold docs exactly: IG = 1; step 2 only repeats: IG 0, RP 1
    steps = [docs for _, docs in search_steps(text)]
    assert step_search_rewards(steps, gold_docs) == pytest.approx([0.6, -0.6])
