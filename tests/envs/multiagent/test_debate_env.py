"""The debate env: rounds and what each debater sees, the team's outcome, each debater's own
reward (answer, MAPoRL-style correction shaping, persuasion) by hand, and the scripted debaters."""

from __future__ import annotations

import pytest

from agentic_rl.envs.check import check_env
from agentic_rl.envs.math.calculator import make_calculator_tasks
from agentic_rl.envs.multiagent import role_reward_key
from agentic_rl.envs.multiagent.debate import DebateEnv
from agentic_rl.envs.registry import ENVS, TASKS
from agentic_rl.formats.chat import TagFormat

FIRST, SECOND = role_reward_key("first"), role_reward_key("second")


def task():
    return make_calculator_tasks("train", 1, seed=0)[0]


def say(env, fmt, text):
    return env.step(fmt.parse(text, "stop"))


def play_expert(env, t):
    """(role, reply, result) of every conversation of the scripted debate."""
    fmt = TagFormat(env.tools)
    obs = env.reset(t, seed=0)
    played = []
    while True:
        reply = env.expert_turn()
        result = say(env, fmt, reply)
        played.append((obs.role, reply, result))
        if result.terminated or result.truncated:
            return played
        obs = result.observation


def test_registered_and_passes_check_env_with_one_and_two_rounds():
    assert ENVS["debate"] is DebateEnv and TASKS["debate"] is make_calculator_tasks
    tasks = make_calculator_tasks("eval", 8, seed=0)
    # an answer does not end the debate, so the gold-answer check is skipped (and says so)
    for env in (DebateEnv(), DebateEnv(rounds=1)):
        skipped = check_env(env, tasks)
        assert len(skipped) == 1 and skipped[0].startswith("gold answer scores >= a wrong one")


def test_each_round_the_debaters_answer_independently_then_see_each_other():
    env = DebateEnv(rounds=2)
    fmt = TagFormat(env.tools)
    t = task()
    first = env.reset(t, seed=0)
    assert first.role == "first" and "Round 1 of 2" in first.messages[-1]["content"]
    second = say(env, fmt, "<answer>41</answer>").observation
    # the second debater of round 1 does not see the first's answer
    assert second.role == "second" and "41" not in second.messages[-1]["content"]
    again = say(env, fmt, "<answer>42</answer>").observation
    shown = again.messages[-1]["content"]
    assert again.role == "first" and "Round 2 of 2" in shown
    assert "Your answer last round: 41. The other debater's answer: 42." in shown
    other = say(env, fmt, "<answer>41</answer>").observation
    assert (
        "Your answer last round: 42. The other debater's answer: 41."
        in (other.messages[-1]["content"])
    )


def test_rewards_by_hand_a_correction_and_a_persuasion():
    env = DebateEnv(rounds=2, answer_reward=0.5, alpha=0.5, persuasion_reward=0.25)
    fmt = TagFormat(env.tools)
    t = task()
    gold, wrong = t.answers[0], str(int(float(t.answers[0])) + 3)
    env.reset(t, seed=0)
    say(env, fmt, f"<answer>{gold}</answer>")
    round_1 = say(env, fmt, f"<answer>{wrong}</answer>")
    # round 1: first right (0.5 x 1), second wrong (0)
    assert round_1.info[FIRST] == 0.5 and round_1.info[SECOND] == 0.0
    say(env, fmt, f"<answer>{gold}</answer>")
    end = say(env, fmt, f"<answer>{gold}</answer>")
    # round 2, first: 0.5 x 1 + 0.5 x (1 - mean[1]) + 0.25 (it was right, the other wrong and
    # now right) = 0.75; second: 0.5 x 1 + 0.5 x (1 - mean[0]) = 1.0, a correction
    assert end.info[FIRST] == pytest.approx(0.75) and end.info[SECOND] == pytest.approx(1.0)
    assert end.terminated and end.reward == 1.0 and end.info["success"] == 1.0
    assert end.info["corrections"] == 1.0 and end.info["changed_answers"] == 1.0
    assert end.info["final_agreement"] == 1.0


def test_rewards_by_hand_a_regression_costs_and_the_team_fails():
    env = DebateEnv(rounds=3, answer_reward=0.5, alpha=0.5, persuasion_reward=0.25)
    fmt = TagFormat(env.tools)
    t = task()
    gold, wrong = t.answers[0], str(int(float(t.answers[0])) + 3)
    env.reset(t, seed=0)
    for first, second in [(gold, gold), (gold, wrong), (wrong, wrong)]:
        say(env, fmt, f"<answer>{first}</answer>")
        result = say(env, fmt, f"<answer>{second}</answer>")
    # round 3, first: 0.5 x 0 + 0.5 x (0 - mean[1, 1]) = -0.5; second: 0.5 x 0 + 0.5 x
    # (0 - mean[1, 0]) = -0.25
    assert result.info[FIRST] == pytest.approx(-0.5)
    assert result.info[SECOND] == pytest.approx(-0.25)
    assert result.terminated and result.reward == 0.0 and result.info["success"] == 0.0
    assert result.info["corrections"] == 0.0 and result.info["changed_answers"] == 1.0


def test_calc_once_a_round_then_answer_anything_else_is_invalid():
    env = DebateEnv()
    fmt = TagFormat(env.tools)
    env.reset(task(), seed=0)
    computed = say(env, fmt, "<calc>2*3</calc>")
    assert (
        computed.info == {"calc_calls": 1.0}
        and "2*3 = 6" in (computed.observation.messages[-1]["content"])
    )
    again = say(env, fmt, "<calc>1+1</calc>")  # a second calc in the round
    assert again.reward == -0.1 and again.info == {"invalid_action": 1.0}
    assert again.observation.name == "error" and env.role() == "first"
    assert say(env, fmt, "no tags at all").info == {"invalid_action": 1.0}
    with pytest.raises(ValueError, match="rounds must be at least 1"):
        DebateEnv(rounds=0)


def test_scripted_debaters_answer_and_sometimes_correct_themselves():
    env = DebateEnv(rounds=2)
    corrected = 0
    for t in make_calculator_tasks("train", 16, seed=0):
        played = play_expert(env, t)
        last = played[-1][2]
        assert last.terminated and last.info["success"] == 1.0
        corrected += int(last.info["corrections"])
        assert [role for role, _, _ in played][:2] == ["first", "first"]  # calc, then answer
    assert 0 < corrected < 16  # the warm start shows corrections, and plain agreement


def test_three_debaters_see_every_other_answer_and_persuasion_is_shared():
    env = DebateEnv(rounds=2, debaters=3, answer_reward=0.5, alpha=0.5, persuasion_reward=0.3)
    assert env.roles == ("first", "second", "third") and env.expert_turn_limit == 12
    assert "one of three debaters" in env.reset(task(), seed=0).messages[0]["content"]
    fmt = TagFormat(env.tools)
    t = task()
    gold, wrong = t.answers[0], str(int(float(t.answers[0])) + 3)
    env.reset(t, seed=0)
    say(env, fmt, f"<answer>{gold}</answer>")
    third = say(env, fmt, f"<answer>{wrong}</answer>").observation
    assert third.role == "third" and wrong not in third.messages[-1]["content"]
    round_1 = say(env, fmt, f"<answer>{wrong}</answer>")
    assert [round_1.info[role_reward_key(r)] for r in env.roles] == [0.5, 0.0, 0.0]
    shown = round_1.observation.messages[-1]["content"]
    assert (
        f"Your answer last round: {gold}. The other debaters' answers: second {wrong}, "
        f"third {wrong}." in shown
    )
    for answer in (gold, gold, wrong):  # second corrects itself, third stays wrong
        end = say(env, fmt, f"<answer>{answer}</answer>")
    # first: 0.5 x 1 + 0.5 x (1 - 1) + 0.3 x (1 of its 2 others won) = 0.65; second: 0.5 + 0.5
    # x (1 - 0) = 1.0 (it was wrong: no persuasion); third: 0 + 0.5 x (0 - 0) = 0
    rewards = [end.info[role_reward_key(r)] for r in env.roles]
    assert rewards == pytest.approx([0.65, 1.0, 0.0])
    assert end.terminated and end.reward == 0.0 and end.info["final_agreement"] == 0.0
    assert end.info["corrections"] == 1.0 and end.info["changed_answers"] == 1.0
    played = play_expert(env, t)
    assert played[-1][2].info["success"] == 1.0 and len(played) == 12
    skipped = check_env(DebateEnv(debaters=3), make_calculator_tasks("eval", 4, seed=0))
    assert len(skipped) == 1  # only the gold-answer check, as with two debaters
    for bad in (1, 7):
        with pytest.raises(ValueError, match="debaters must be 2 to 6"):
            DebateEnv(debaters=bad)


def test_the_roles_config_validation_reads_follow_the_number_of_debaters():
    from agentic_rl.config.load import load_config
    from agentic_rl.config.parse import ConfigError

    assert DebateEnv.roles_for({"debaters": 3}) == ("first", "second", "third")
    cfg = load_config("debate", ["env.options.debaters=3", "rollout.train_roles=[third]"])
    assert cfg.rollout.train_roles == ["third"]
    with pytest.raises(ConfigError, match="third"):  # two debaters have no third
        load_config("debate", ["rollout.train_roles=[third]"])


def play_with_mistakes(env, t):
    """The scripted debate, playing `expert_mistake` wherever it is offered: the (role, round)
    of each offer, and the last step's result."""
    fmt = TagFormat(env.tools)
    obs, offers = env.reset(t, seed=0), []
    while True:
        mistake = env.expert_mistake()
        if mistake is not None:
            offers.append((obs.role, env.round))
        result = say(env, fmt, mistake or env.expert_turn())
        if result.terminated or result.truncated:
            return offers, result
        obs = result.observation


def test_the_scripted_mistake_is_the_second_debaters_first_guess_and_is_corrected():
    """`expert_mistake` is offered at the second debater's first-round turn only; played
    there, the scripted debaters correct it in round 2 and the team succeeds. With one round
    there is nothing to correct, and it is never offered."""
    for t in make_calculator_tasks("train", 6, seed=0):
        offers, result = play_with_mistakes(DebateEnv(rounds=2, expert_mistakes=0.0), t)
        assert offers == [("second", 1)]
        assert result.info["success"] == 1.0 and result.info["corrections"] == 1
        offers, result = play_with_mistakes(DebateEnv(rounds=1, expert_mistakes=0.0), t)
        assert offers == [] and result.info["success"] == 1.0
