"""The solver / verifier team env: roles, the protocol, rewards per role, the scripted team."""

from __future__ import annotations

import pytest

from agentic_rl.envs.check import check_env
from agentic_rl.envs.math.calculator import make_calculator_tasks
from agentic_rl.envs.multiagent import role_reward_key
from agentic_rl.envs.multiagent.solver_verifier import (
    RIGHT_REJECTED,
    SOLVER,
    VERDICTS,
    VERIFIER,
    WRONG_PROPOSALS,
    WRONG_REJECTED,
    SolverVerifierEnv,
)
from agentic_rl.formats.chat import TagFormat
from agentic_rl.rollout.episode import ENV_METRIC_PREFIX

VERIFIER_REWARD = role_reward_key(VERIFIER)
SOLVER_REWARD = role_reward_key(SOLVER)


def play_expert(env, task):
    """(role, reply, result) of every conversation of the scripted team's episode."""
    fmt = TagFormat(env.tools)
    obs = env.reset(task, seed=0)
    played = []
    while True:
        reply = env.expert_turn()
        result = env.step(fmt.parse(reply, "stop"))
        played.append((obs.role, reply, result))
        if result.terminated or result.truncated:
            return played
        obs = result.observation


def test_scripted_team_solves_and_verifies_with_both_verdicts():
    env = SolverVerifierEnv()
    tasks = make_calculator_tasks("train", 16, seed=0)
    rejected = 0
    for task in tasks:
        played = play_expert(env, task)
        roles = [role for role, _, _ in played]
        last = played[-1][2]
        assert last.terminated and last.reward == 1.0 and last.info["success"] == 1.0
        assert all(
            r.info.get(VERIFIER_REWARD, 0.5) == 0.5
            for role, _, r in played
            if role == VERIFIER and "verdict" in _
        )
        if len(played) == 4:
            assert roles == [SOLVER, SOLVER, VERIFIER, VERIFIER]
        else:  # a wrong guess, rejected, then computed and accepted
            rejected += 1
            assert roles == [SOLVER, VERIFIER, VERIFIER, SOLVER, SOLVER, VERIFIER, VERIFIER]
            assert "<verdict>reject</verdict>" in played[2][1]
    assert 0 < rejected < len(tasks)  # the warm start sees both verdicts


def test_rewards_team_outcome_and_the_verifiers_own_term():
    env = SolverVerifierEnv(max_attempts=2, verifier_reward=0.5)
    fmt = TagFormat(env.tools)
    task = make_calculator_tasks("train", 1, seed=0)[0]
    gold = task.answers[0]
    first = env.reset(task, seed=0)
    assert first.role == SOLVER and task.prompt in first.messages[-1]["content"]
    shown = env.step(fmt.parse("<answer>7</answer>", "stop")).observation
    assert shown.role == VERIFIER and "Proposed answer: 7" in shown.messages[-1]["content"]
    # the verifier wrongly accepts a wrong answer: the team gets 0, the verifier's term 0
    end = env.step(fmt.parse("<verdict>accept</verdict>", "stop"))
    assert end.terminated and end.reward == 0.0 and end.info[VERIFIER_REWARD] == 0.0
    env.reset(task, seed=0)
    env.step(fmt.parse("<answer>7</answer>", "stop"))
    back = env.step(fmt.parse("<verdict>reject</verdict>", "stop"))  # a right rejection
    assert not back.terminated and back.info[VERIFIER_REWARD] == 0.5
    assert (
        back.observation.role == SOLVER
        and "rejected your answer 7" in back.observation.messages[-1]["content"]
    )
    calc = env.step(fmt.parse(f"<calc>{task.fields['expression']}</calc>", "stop"))
    assert f"= {gold}" in calc.observation.messages[-1]["content"]
    env.step(fmt.parse(f"<answer>{gold}</answer>", "stop"))
    # the last attempt wrongly rejected: the team fails, the verifier's term is 0
    end = env.step(fmt.parse("<verdict>reject</verdict>", "stop"))
    assert end.terminated and end.reward == 0.0 and end.info[VERIFIER_REWARD] == 0.0
    assert end.info["attempts"] == 2.0


def test_the_solvers_own_term_pays_each_correct_proposal_whatever_the_verdict():
    task = make_calculator_tasks("train", 1, seed=0)[0]
    gold = task.answers[0]
    env = SolverVerifierEnv(max_attempts=2, solver_reward=0.25)
    fmt = TagFormat(env.tools)
    env.reset(task, seed=0)
    wrong = env.step(fmt.parse(f"<answer>{int(gold) + 1}</answer>", "stop"))
    assert wrong.info[SOLVER_REWARD] == 0.0
    env.step(fmt.parse("<verdict>reject</verdict>", "stop"))
    right = env.step(fmt.parse(f"<answer>{gold}</answer>", "stop"))
    assert right.info[SOLVER_REWARD] == 0.25
    end = env.step(fmt.parse("<verdict>reject</verdict>", "stop"))  # wrongly rejected
    assert end.terminated and end.reward == 0.0  # the team fails; the solver's term stays
    # off by default: no solver term at all (the recipe as first measured)
    env = SolverVerifierEnv()
    env.reset(task, seed=0)
    assert SOLVER_REWARD not in env.step(fmt.parse(f"<answer>{gold}</answer>", "stop")).info


def verifier_terms(credit, proposals_and_verdicts):
    """The verifier's term at each verdict of one episode (a proposal is "gold" or "wrong")."""
    task = make_calculator_tasks("train", 1, seed=0)[0]
    gold = task.answers[0]
    env = SolverVerifierEnv(max_attempts=2, verifier_reward=0.5, verdict_credit=credit)
    fmt = TagFormat(env.tools)
    env.reset(task, seed=0)
    terms = []
    for proposal, verdict in proposals_and_verdicts:
        answer = gold if proposal == "gold" else str(int(gold) + 1)
        env.step(fmt.parse(f"<answer>{answer}</answer>", "stop"))
        result = env.step(fmt.parse(f"<verdict>{verdict}</verdict>", "stop"))
        terms.append(result.info[VERIFIER_REWARD])
    return terms


def test_verdict_credit_sum_pays_every_right_verdict_and_mean_pays_the_fraction_right():
    # a wrong proposal rightly rejected, then a correct one wrongly rejected: 1 of 2 verdicts right
    assert verifier_terms("sum", [("wrong", "reject"), ("gold", "reject")]) == [0.5, 0.0]
    mean = verifier_terms("mean", [("wrong", "reject"), ("gold", "reject")])
    assert mean == [0.5, -0.25] and sum(mean) == 0.5 * 1 / 2
    # a rightly rejected wrong proposal, then a rightly accepted one: "sum" pays two verdicts,
    # "mean" the same 0.5 as accepting a right answer at once (a rejection earns no more)
    assert verifier_terms("sum", [("wrong", "reject"), ("gold", "accept")]) == [0.5, 0.5]
    assert verifier_terms("mean", [("wrong", "reject"), ("gold", "accept")]) == [0.5, 0.0]
    assert verifier_terms("mean", [("gold", "accept")]) == [0.5]
    with pytest.raises(ValueError, match="verdict_credit"):
        SolverVerifierEnv(verdict_credit="max")
    with pytest.raises(ValueError, match="verifier_reward=0 turns off"):
        SolverVerifierEnv(verdict_credit="counterfactual", verifier_reward=0.0)


def test_counterfactual_credit_pays_a_verdict_by_its_gain_over_accepting():
    # 0.5 x (verdict right - proposal right): a catch earns 0.5, a rejected right answer costs
    # 0.5, and accepting earns 0 whether the proposal was right or wrong
    assert verifier_terms("counterfactual", [("wrong", "reject"), ("gold", "accept")]) == [
        0.5,
        0.0,
    ]
    assert verifier_terms("counterfactual", [("gold", "reject"), ("wrong", "reject")]) == [
        -0.5,
        0.5,
    ]
    assert verifier_terms("counterfactual", [("wrong", "accept")]) == [0.0]
    assert verifier_terms("counterfactual", [("gold", "accept")]) == [0.0]


def test_the_counterfactual_credit_pays_checking_and_never_a_rubber_stamp():
    """The verifier's term summed over episodes under fixed verdict policies, for a solver whose
    (first, second) proposals are given: "sum" pays a rubber stamp (accept all) for the
    solver's right answers, "counterfactual" never does; rejecting everything is paid under
    both while most proposals are wrong; checking earns the most under both."""

    def term(credit, policy, pairs):
        total = 0.0
        for first, second in pairs:
            verdict = policy(first)
            played = [(first, verdict)] + (
                [(second, policy(second))] if verdict == "reject" else []
            )
            total += sum(verifier_terms(credit, played))
        return total

    def accept_all(_):
        return "accept"

    def reject_all(_):
        return "reject"

    def checker(proposal):
        return "accept" if proposal == "gold" else "reject"

    strong = [("gold", "gold"), ("gold", "gold"), ("gold", "gold"), ("wrong", "gold")]
    weak = [("wrong", "wrong"), ("wrong", "wrong"), ("wrong", "gold"), ("gold", "gold")]
    # by hand, 0.5 a verdict: the rubber stamp earns 0 under counterfactual, 3 x 0.5 under sum
    assert term("counterfactual", accept_all, strong) == 0.0
    assert term("sum", accept_all, strong) == 3 * 0.5
    # reject-all, strong solver: 7 right proposals rejected, 1 wrong one caught
    assert term("counterfactual", reject_all, strong) == (1 - 7) * 0.5
    # reject-all, weak solver: 5 wrong caught, 3 right rejected: paid, as under sum (5 catches)
    assert term("counterfactual", reject_all, weak) == (5 - 3) * 0.5
    assert term("sum", reject_all, weak) == 5 * 0.5
    # the checker: every wrong proposal caught (1 and 5), never a right one rejected
    assert term("counterfactual", checker, strong) == 1 * 0.5
    assert term("counterfactual", checker, weak) == 5 * 0.5
    for pairs in (strong, weak):
        best = term("counterfactual", checker, pairs)
        assert best >= term("counterfactual", accept_all, pairs)
        assert best >= term("counterfactual", reject_all, pairs)


def verdict_kinds(proposals_and_verdicts):
    """(verdicts on wrong proposals, wrong ones rejected, right ones rejected) summed over one
    episode, as the rollout sums the env metrics."""
    task = make_calculator_tasks("train", 1, seed=0)[0]
    gold = task.answers[0]
    env = SolverVerifierEnv(max_attempts=3)
    fmt = TagFormat(env.tools)
    env.reset(task, seed=0)
    totals = dict.fromkeys((VERDICTS, WRONG_PROPOSALS, WRONG_REJECTED, RIGHT_REJECTED), 0.0)
    for proposal, verdict in proposals_and_verdicts:
        answer = gold if proposal == "gold" else str(int(gold) + 1)
        env.step(fmt.parse(f"<answer>{answer}</answer>", "stop"))
        result = env.step(fmt.parse(f"<verdict>{verdict}</verdict>", "stop"))
        for key in totals:
            totals[key] += result.info[key]
    return tuple(totals.values())


def test_the_verdicts_on_right_and_wrong_answers_are_counted_apart():
    # a wrong answer caught, a right one rejected, then a wrong one accepted
    assert verdict_kinds([("wrong", "reject"), ("gold", "reject"), ("wrong", "accept")]) == (
        3.0,
        2.0,
        1.0,
        1.0,
    )
    assert verdict_kinds([("gold", "accept")]) == (1.0, 0.0, 0.0, 0.0)  # a rubber stamp looks so
    keys = (VERDICTS, WRONG_PROPOSALS, WRONG_REJECTED, RIGHT_REJECTED)
    assert all(key.startswith(ENV_METRIC_PREFIX) for key in keys)


def test_bad_replies_are_data():
    env = SolverVerifierEnv()
    fmt = TagFormat(env.tools)
    env.reset(make_calculator_tasks("train", 1, seed=0)[0], seed=0)
    bad = env.step(fmt.parse("it is big", "stop"))
    assert (
        bad.info["invalid_action"] == 1.0 and bad.reward == -0.1 and bad.observation.role == SOLVER
    )
    env.step(fmt.parse("<answer>3</answer>", "stop"))
    bad = env.step(fmt.parse("<verdict>maybe</verdict>", "stop"))
    assert bad.info["invalid_action"] == 1.0 and bad.observation.role == VERIFIER


def test_check_env():
    skipped = check_env(SolverVerifierEnv(), make_calculator_tasks("train", 8, seed=0))
    assert skipped == [
        "gold answer scores >= a wrong one (an answer does not end the episode: another role "
        "reviews it)"
    ]
