"""TTRL majority-vote rewards over canonical answers."""

from agentic_rl.rewards.ttrl import canonical_answer, ttrl_reward, ttrl_rewards


def test_canonical_answer():
    assert canonical_answer("\\boxed{0.50}") == "1/2"
    assert canonical_answer("\\boxed{\\frac{1}{2}}") == "1/2"
    assert canonical_answer("Answer: 3.0") == "3"
    assert canonical_answer("\\boxed{1,000}") == "1000"
    assert canonical_answer("\\boxed{x + 1}") == "x+1"
    assert canonical_answer("no answer") is None


def test_ttrl_rewards_hand_computed():
    result = ttrl_rewards(["\\boxed{4}", "Answer: 4.0", "\\boxed{5}", "thinking..."], gold="4")
    assert result.label == "4" and result.vote_share == 0.5
    assert result.rewards == [1.0, 1.0, 0.0, 0.0]
    assert result.label_correct == 1.0
    wrong = ttrl_rewards(["\\boxed{5}", "\\boxed{5}", "\\boxed{4}"], gold="4")
    assert wrong.label == "5" and wrong.label_correct == 0.0 and wrong.rewards == [1.0, 1.0, 0.0]


def test_equivalent_forms_vote_together_and_no_gold():
    result = ttrl_rewards(["\\boxed{0.5}", "\\boxed{\\frac{1}{2}}", "\\boxed{1/3}"])
    assert result.label == "1/2" and result.label_correct is None
    assert ttrl_reward(["x", "y"]) == [0.0, 0.0]  # nothing voted
