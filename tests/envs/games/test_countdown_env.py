import pytest

from agentic_rl.envs.check import check_env
from agentic_rl.envs.games.countdown import (
    CountdownEnv,
    ExpressionError,
    make_countdown_tasks,
    parse_expression,
    score_countdown,
    solve,
)
from agentic_rl.envs.registry import ENVS, TASKS, make_env
from agentic_rl.types import Action, Task


@pytest.mark.parametrize(
    "answer, expected",
    [
        ("2 * 3 * 4", 1.0),
        ("(4 * 3) * 2", 1.0),
        ("2*3*4 = 24", 1.0),  # a trailing "= target" is ignored
        ("2 × 3 × 4", 1.0),
        ("2 x 3 x 4", 1.0),
        ("-2 * -3 * 4", 1.0),
        ("4 * (3 + 3) / 1", 0.0),  # wrong numbers
        ("(2 + 3) * 4", 0.1),  # right numbers, wrong value
        ("4 / (3 - 3) + 2", 0.0),  # 3 twice: wrong numbers, so 0 before any division
        ("2 * 3 * 4 * 1", 0.0),  # an extra number
        ("2 * 3", 0.0),  # a missing number
        ("24", 0.0),
        ("2.0 * 3 * 4", 0.0),  # floats are not allowed
        ("2 ** 3 * 4", 0.0),  # neither is a power
        ("2 // 3 * 4", 0.0),
        ("__import__('os').system('true')", 0.0),
        ("(lambda: 24)()", 0.0),
        ("True * 24", 0.0),
        ("9 ** 9 ** 9", 0.0),  # rejected before anything is computed
        ("(" * 500 + "2" + ")" * 500, 0.0),
        ("", 0.0),
        ("two times three times four", 0.0),
    ],
)
def test_verifier_scores_as_ragen(answer, expected):
    assert score_countdown(answer, [2, 3, 4], 24) == expected


def test_exact_arithmetic_and_division_by_zero():
    assert score_countdown("7 / 2 * 2", [7, 2, 2], 7) == 1.0  # exactly 7, no rounding
    assert score_countdown("1 / 3 * 3", [1, 3, 3], 1) == 1.0
    assert score_countdown("(1 / 3) + (1 / 3) + (1 / 3)", [1, 3, 1, 3, 1, 3], 1) == 1.0
    assert score_countdown("5 / (3 - 3)", [5, 3, 3], 1) == 0.1  # well formed, no value
    with pytest.raises(ExpressionError, match="Call is not allowed"):
        parse_expression("abs(3)")
    with pytest.raises(ExpressionError, match="Name is not allowed"):
        parse_expression("y1")
    with pytest.raises(ExpressionError, match="longer than 200"):
        parse_expression("1+" * 150 + "1")


def test_solver():
    assert score_countdown(solve([3, 5, 2, 8], 24), [3, 5, 2, 8], 24) == 1.0
    assert score_countdown(solve([4, 6], 24), [4, 6], 24) == 1.0
    assert solve([1, 1, 1], 100) is None
    assert score_countdown(solve([1, 3, 4, 6], 24), [1, 3, 4, 6], 24) == 1.0  # 6 / (1 - 3/4)


def test_tasks_are_solvable_by_construction_distinct_and_split():
    train = make_countdown_tasks("train", 500, seed=0)
    assert [t.fields for t in train] == [t.fields for t in make_countdown_tasks("train", 500)]
    evals = make_countdown_tasks("eval", 100, seed=0)
    key = lambda t: (tuple(sorted(t.fields["numbers"])), t.fields["target"])  # noqa: E731
    assert len({key(t) for t in train}) == 500 and not {key(t) for t in train} & {
        key(t) for t in evals
    }
    sizes = {len(t.fields["numbers"]) for t in train}
    assert sizes == {3, 4}
    for task in train + evals:
        numbers, target = task.fields["numbers"], task.fields["target"]
        assert 1 <= target <= 100 and all(1 <= n <= 99 for n in numbers)
        assert score_countdown(task.answers[0], numbers, target) == 1.0
        assert task.prompt == f"Target: {target}, nums: {numbers}"
    plus_minus = make_countdown_tasks("train", 50, operators="+-")
    assert all("*" not in t.answers[0] and "/" not in t.answers[0] for t in plus_minus)


def test_env_rewards_success_and_check_env():
    assert ENVS["countdown"] is CountdownEnv and TASKS["countdown"] is make_countdown_tasks
    assert check_env(make_env("countdown"), make_countdown_tasks("eval", 20, seed=3)) == []
    env = CountdownEnv()
    task = Task("t", "", answers=["2 * 3 * 4"], fields={"numbers": [2, 3, 4], "target": 24})
    first = env.reset(task, 0)
    assert first.messages[-1]["content"] == "Target: 24, nums: [2, 3, 4]"
    assert env.expert_turn() == "<answer>2 * 3 * 4</answer>"
    right = env.step(Action(kind="answer", text="4*3*2"))
    assert right.terminated and right.reward == 1.0 and right.info["success"] == 1.0
    env.reset(task, 0)
    wrong = env.step(Action(kind="answer", text="2 + 3 + 4"))
    assert wrong.reward == pytest.approx(0.1) and wrong.info["success"] == 0.0
    env.reset(task, 0)
    bad = env.step(Action(kind="invalid", error="no action"))
    assert (
        not bad.terminated and bad.reward == pytest.approx(-0.1) and bad.observation.name == "error"
    )
    no_gold = Task("u", "", answers=[], fields={"numbers": [3, 5, 2, 8], "target": 24})
    env.reset(no_gold, 0)
    text = env.expert_turn()
    assert env.step(Action(kind="answer", text=text[8:-9])).reward == 1.0  # the solver's answer
