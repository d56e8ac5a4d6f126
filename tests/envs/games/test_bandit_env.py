import pytest

from agentic_rl.envs.check import check_env
from agentic_rl.envs.games.bandit import ARM_PAIRS, BanditEnv, make_bandit_tasks, risky_pays
from agentic_rl.envs.registry import ENVS, TASKS, make_env
from agentic_rl.types import Action


def answer(text):
    return Action(kind="answer", text=text)


def task_with_arms(safe="Accountant", risky="Gambler"):
    return next(
        t
        for t in make_bandit_tasks("train", 24)
        if t.fields["safe"] == safe and t.fields["risky"] == risky
    )


def test_registered_and_check_env_passes_whether_or_not_the_risky_arm_pays():
    """The expert pulls the risky arm (the better one in expectation): a success by the env's
    own measure even where the draw pays 0, which check_env accepts (info["success"])."""
    assert ENVS["bandit"] is BanditEnv and TASKS["bandit"] is make_bandit_tasks
    env = make_env("bandit")
    for task in make_bandit_tasks("eval", 12, seed=1):
        paying = next(s for s in range(100) if risky_pays(task, s))
        assert check_env(env, [task], seed=paying) == []
        losing = next(s for s in range(100) if not risky_pays(task, s))
        assert check_env(env, [task], seed=losing) == []


def test_tasks_use_disjoint_word_pairs_in_both_orders():
    train, evals = make_bandit_tasks("train", 100, seed=0), make_bandit_tasks("eval", 40, seed=0)
    assert [t.fields for t in train] == [t.fields for t in make_bandit_tasks("train", 100, seed=0)]
    pair = lambda t: (t.fields["safe"], t.fields["risky"])  # noqa: E731
    assert {pair(t) for t in train} == set(ARM_PAIRS["train"])
    assert {pair(t) for t in evals} == set(ARM_PAIRS["eval"])
    orders = {tuple(t.fields["arms"]) for t in train}
    assert ("Accountant", "Gambler") in orders and ("Gambler", "Accountant") in orders
    for t in train:
        assert t.answers == [t.fields["risky"]] and set(t.fields["arms"]) == set(pair(t))
        a, b = t.fields["arms"]
        assert f"named {a} and {b}" in t.prompt
    assert len({t.task_id for t in train}) == 100


def test_rewards_safe_risky_and_success():
    task = task_with_arms()
    env = BanditEnv()
    for seed in range(20):
        env.reset(task, seed)
        safe = env.step(answer("Accountant"))
        assert safe.terminated and safe.reward == pytest.approx(0.1)
        assert safe.info == {"answered": 1, "risky_arm": 0.0, "success": 0.0}
        env.reset(task, seed)
        risky = env.step(answer("Gambler"))
        assert risky.reward == (1.0 if risky_pays(task, seed) else 0.0)
        assert risky.info["success"] == 1.0  # RAGEN's success: the risky arm, whatever it paid
    paper = BanditEnv(safe_reward=0.15)
    paper.reset(task, 0)
    assert paper.step(answer("Accountant")).reward == pytest.approx(0.15)


def test_risky_arm_pays_one_in_four_and_groups_share_the_draw():
    tasks = make_bandit_tasks("train", 40)
    wins = [risky_pays(t, s) for t in tasks for s in range(50)]
    assert 0.21 < sum(wins) / len(wins) < 0.29  # 2000 draws of p = 0.25
    task = tasks[0]
    a, b = BanditEnv(), BanditEnv()
    for seed in range(10):  # same task and seed (one group): the same payout
        a.reset(task, seed)
        b.reset(task, seed)
        assert a.payout == b.payout == (1.0 if risky_pays(task, seed) else 0.0)


def test_answers_are_matched_robustly_and_bad_turns_cost_the_format_penalty():
    env = BanditEnv(format_penalty=0.1)
    task = task_with_arms()
    env.reset(task, 0)
    assert env.arm_of("accountant") == env.arm_of(" Accountant. ") == "Accountant"
    assert env.arm_of("I pull the Gambler arm") == "Gambler"
    assert env.arm_of("Gambler or Accountant") is None and env.arm_of("dragon") is None
    nonsense = env.step(answer("dragon"))
    assert nonsense.terminated and nonsense.reward == pytest.approx(-0.1)
    assert nonsense.info["success"] == 0.0 and nonsense.info["invalid_action"] == 1
    env.reset(task, 0)
    invalid = env.step(Action(kind="invalid", error="no action in this turn"))
    assert not invalid.terminated and invalid.reward == pytest.approx(-0.1)
    assert (
        invalid.observation.name == "error"
        and "<answer>Gambler</answer>" in invalid.observation.content
    )
    none = env.step(Action(kind="none"))
    assert none.terminated and none.reward == pytest.approx(-0.1)


def test_expert_pulls_the_risky_arm():
    env = BanditEnv()
    for task in make_bandit_tasks("eval", 12):
        env.reset(task, 3)
        assert env.expert_turn() == f"<answer>{task.fields['risky']}</answer>"
