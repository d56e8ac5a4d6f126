"""Turn-level credit through the learner's path: hand-made multi-turn trajectories -> collate
(turn ids, turn rewards) -> compute_advantages with algo.name=mt_grpo / turn_ppo -> the
advantages, value targets and critic positions computed by hand; and turn_ppo's value loss in
the update, on the tiny model, taken at the turn starts only."""

from __future__ import annotations

import copy
import math

import pytest
import torch

from agentic_rl.config.algo import AlgoConfig
from agentic_rl.config.load import load_config
from agentic_rl.learner.advantages import compute_advantages
from agentic_rl.learner.batch import collate, collate_episodes, episode_turn_tensors, turn_tensors
from agentic_rl.learner.update import forward_no_grad, update
from agentic_rl.model.load import ValueHead
from agentic_rl.types import Trajectory

S = 1 / math.sqrt(2)  # GRPO's advantage of two rewards, one above and one below their mean


def episode(turns: list[list[int]], step_rewards: list[float], group: str, reward=None):
    """A hand-made episode: 2 prompt tokens, then each turn's tokens (their loss mask as given:
    1 sampled, 0 inserted), each followed by a 1-token observation except the last."""
    ids, mask, spans = [5, 6], [0, 0], []
    for k, turn in enumerate(turns):
        start = len(ids)
        ids += [10 + k] * len(turn)
        mask += turn
        spans.append((start, len(ids)))
        if k < len(turns) - 1:
            ids.append(99)
            mask.append(0)
    return Trajectory(
        token_ids=ids,
        loss_mask=mask,
        logprobs=[-0.5 * m for m in mask],
        prompt_length=2,
        turn_spans=spans,
        step_rewards=step_rewards,
        reward=sum(step_rewards) if reward is None else reward,
        group_id=group,
    )


def test_turn_tensors_by_hand():
    t = Trajectory(
        token_ids=[1] * 7,
        loss_mask=[0, 0, 1, 1, 0, 1, 1],
        logprobs=[0.0] * 7,
        prompt_length=2,
        turn_spans=[(2, 4), (5, 7)],
        step_rewards=[0.5, 1.0],
        reward=2.0,  # a reward function added 0.5 beyond the step rewards: on the last turn
    )
    single = Trajectory(
        token_ids=[1] * 3, loss_mask=[0, 1, 1], logprobs=[0.0] * 3, prompt_length=1,
        turn_spans=[(1, 3)], step_rewards=[0.25], reward=0.25,
    )  # fmt: skip
    ids, rewards, turns = turn_tensors([t, single], width=8)
    assert ids.tolist() == [[-1, -1, 0, 0, -1, 1, 1, -1], [-1, 0, 0, -1, -1, -1, -1, -1]]
    assert rewards.tolist() == [[0.5, 1.5], [0.25, 0.0]]
    assert turns.tolist() == [2, 1]
    batch = collate([t, single], pad_token_id=0)
    assert torch.equal(batch.turn_ids, ids[:, :7]) and torch.equal(batch.num_turns, turns)


def mt_grpo_batch():
    """Group g: A (2 turns, step rewards 1, 1), B (3 turns: 0, 0.5, 0.5), C (1 turn: 0);
    episode rewards 2, 1, 0. Group h: D alone."""
    return collate(
        [
            episode([[1, 1], [1, 0]], [1.0, 1.0], "g"),  # turn 1 ends in an inserted token
            episode([[1], [1], [1, 1]], [0.0, 0.5, 0.5], "g"),
            episode([[1, 1]], [0.0], "g"),
            episode([[1], [1]], [3.0, 0.0], "h"),
        ],
        pad_token_id=0,
    )


def test_mt_grpo_advantages_by_hand():
    batch = mt_grpo_batch()
    compute_advantages(batch, AlgoConfig(name="mt_grpo", turn_advantage_coef=0.5))
    # Outcome A^O over g's rewards (2, 1, 0): mean 1, std 1 -> +1, 0, -1; D is alone -> 0.
    # Turn 0 before the last turn: A (1.0) and B (0.0) -> +-1/sqrt(2); C's only turn is its
    # last (its reward is the outcome). Turn 1 before the last: only B -> a singleton, 0.
    a_o = 1 / (1 + 1e-6)
    a_t = 0.5 * S
    want = [
        # prompt, A turn 0 (x2), obs, A turn 1 (sampled, inserted)
        [0, 0, a_o + a_t, a_o + a_t, 0, a_o, 0, 0],
        # prompt, B turn 0, obs, B turn 1, obs, B turn 2 (x2)
        [0, 0, -a_t, 0, 0, 0, 0, 0],
        [0, 0, -a_o, -a_o, 0, 0, 0, 0],
        [0, 0, 0, 0, 0, 0, 0, 0],
    ]
    torch.testing.assert_close(batch.advantages, torch.tensor(want), atol=1e-5, rtol=0)
    assert batch.returns is None and batch.value_mask is None


def test_mt_grpo_without_turn_credit_is_grpo():
    batch, grpo = mt_grpo_batch(), mt_grpo_batch()
    compute_advantages(batch, AlgoConfig(name="mt_grpo", turn_advantage_coef=0.0))
    compute_advantages(grpo, AlgoConfig(name="grpo"))
    torch.testing.assert_close(batch.advantages, grpo.advantages)


def test_mt_grpo_outcome_only_normalises_the_last_turns_reward():
    # E1 found the page (turn 0: 1) and answered wrong (0); E2 the other way round; both earn
    # an episode reward of 1. E2 also gets 0.5 from a reward function after the rollout, which
    # lands on its last turn.
    def batch():
        return collate(
            [
                episode([[1], [1]], [1.0, 0.0], "g"),
                episode([[1], [1]], [0.0, 1.0], "g", reward=1.5),
            ],
            pad_token_id=0,
        )

    # last_turn: outcomes 0 and 1.5 -> A^O = -S, +S; turn 0 rewards 1, 0 -> A^T = +S, -S (x 0.5)
    outcome_only = batch()
    algo = AlgoConfig(name="mt_grpo", turn_advantage_coef=0.5, mt_grpo_outcome="last_turn")
    compute_advantages(outcome_only, algo)
    want = [[0, 0, -S + 0.5 * S, 0, -S], [0, 0, S - 0.5 * S, 0, S]]
    torch.testing.assert_close(outcome_only.advantages, torch.tensor(want), atol=1e-5, rtol=0)
    # episode: rewards 1 and 1.5 -> A^O = -S, +S too, but from the sum, not the outcome; with
    # equal sums (no reward function) the episode form gives A^O = 0 and only A^T acts
    equal = collate(
        [episode([[1], [1]], [1.0, 0.0], "g"), episode([[1], [1]], [0.0, 1.0], "g")],
        pad_token_id=0,
    )
    compute_advantages(equal, AlgoConfig(name="mt_grpo", turn_advantage_coef=0.5))
    want = [[0, 0, 0.5 * S, 0, 0], [0, 0, -0.5 * S, 0, 0]]
    torch.testing.assert_close(equal.advantages, torch.tensor(want), atol=1e-5, rtol=0)


def turn_ppo_batch():
    """One episode, two turns of two sampled tokens: step rewards 0.5, 1.0."""
    batch = collate([episode([[1, 1], [1, 1]], [0.5, 1.0], "g")], pad_token_id=0)
    # tokens: prompt 0-1, turn 0 at 2-3, observation 4, turn 1 at 5-6
    assert batch.turn_ids.tolist() == [[-1, -1, 0, 0, -1, 1, 1]]
    return batch


def test_turn_ppo_advantages_and_targets_by_hand():
    batch = turn_ppo_batch()
    # The turn values are read at each turn's first token (2 and 5); the others are ignored.
    batch.old_values = torch.tensor([[0.0, 0.0, 0.2, 9.0, 0.0, 0.6, -9.0]])
    compute_advantages(batch, AlgoConfig(name="turn_ppo", gamma=0.9, lam=0.5))
    # delta_1 = 1.0 - 0.6 = 0.4, A_1 = 0.4; delta_0 = 0.5 + 0.9 * 0.6 - 0.2 = 0.84,
    # A_0 = 0.84 + 0.9 * 0.5 * 0.4 = 1.02; returns R = A + V = (1.22, 1.0).
    # Tokens (1.02, 1.02, 0.4, 0.4) whitened: mean 0.71, population std 0.31 -> (1, 1, -1, -1).
    want_adv = torch.tensor([[0.0, 0.0, 1.0, 1.0, 0.0, -1.0, -1.0]])
    torch.testing.assert_close(batch.advantages, want_adv, atol=1e-6, rtol=0)
    torch.testing.assert_close(batch.returns, torch.tensor([[0, 0, 1.22, 0, 0, 1.0, 0]]))
    assert batch.value_mask.tolist() == [[0, 0, 1, 0, 0, 1, 0]]


def test_turn_ppo_takes_the_kl_as_each_turns_reward():
    batch = turn_ppo_batch()
    batch.old_values = torch.tensor([[0.0, 0.0, 0.2, 9.0, 0.0, 0.6, -9.0]])
    # k1 KL = pi_old - pi_ref per token: turn 0's tokens 0.1 + 0.1, turn 1's 0.2 + 0.0; the
    # observation's 5.0 is off the mask
    batch.ref_logprobs = batch.old_logprobs - torch.tensor([[0, 0, 0.1, 0.1, 5.0, 0.2, 0.0]])
    algo = AlgoConfig(
        name="turn_ppo", gamma=0.9, lam=0.5, kl_coef=0.5, kl_in_reward=True, kl_estimator="k1"
    )
    compute_advantages(batch, algo)
    # turn rewards 0.5 - 0.5 x 0.2 = 0.4 and 1.0 - 0.5 x 0.2 = 0.9: delta_1 = 0.9 - 0.6 = 0.3,
    # A_1 = 0.3; delta_0 = 0.4 + 0.9 x 0.6 - 0.2 = 0.74, A_0 = 0.74 + 0.45 x 0.3 = 0.875;
    # returns A + V = (1.075, 0.9)
    torch.testing.assert_close(batch.returns, torch.tensor([[0, 0, 1.075, 0, 0, 0.9, 0]]))


def test_turn_ppo_trains_the_critic_on_turn_returns_at_turn_starts(tiny):
    torch.manual_seed(0)
    batch = collate(
        [
            episode([[1, 1], [1, 1]], [0.5, 1.0], "g"),
            episode([[1], [1, 1, 1]], [0.0, 2.0], "g"),
        ],
        pad_token_id=0,
    )
    head = ValueHead(tiny.config.hidden_size)
    cfg = load_config(
        None,
        ["model.name=tiny", "algo.name=turn_ppo", "algo.gamma=0.9", "algo.lam=0.5"]
        + ["algo.ppo_mini_batches=1", "algo.clip_high=0.2", "algo.kl_coef=0"],
    )
    _, values = forward_no_grad(tiny, batch, 64, 8, head)
    batch.old_values = values
    compute_advantages(batch, cfg.algo)
    model = copy.deepcopy(tiny)
    metrics = update(model, torch.optim.SGD(model.parameters(), lr=0.0), batch, cfg, head)
    # old values = current values: the clip does not bind; the loss is the mean over the four
    # turn starts (tokens 2, 5 of row 0; 2, 4 of row 1) of 0.5 (V - R)^2
    starts = torch.tensor([[0, 0, 1, 0, 0, 1, 0], [0, 0, 1, 0, 1, 0, 0]]).bool()
    assert torch.equal(batch.value_mask.bool(), starts)
    hand = 0.5 * ((values - batch.returns)[starts] ** 2).mean()
    assert abs(metrics["value_loss"] - float(hand)) < 1e-5
    # a critic trained on every token's (zero) target would give another loss
    everywhere = 0.5 * ((values - batch.returns)[batch.loss_mask > 0] ** 2).mean()
    assert abs(float(everywhere) - float(hand)) > 1e-3


def as_rows(t: Trajectory, cuts: list[list[int]]) -> list[Trajectory]:
    """A hand-made episode (`episode`) cut into rows, each holding the turns listed in `cuts`
    (step mode: one a row; context segments: a few): a row is everything up to its last turn,
    the earlier turns as context (mask 0), its own turns trained; their step rewards, the
    episode's reward on every row (as rollout/stepwise.py and budgeted.py give them)."""
    rows = []
    for turns in cuts:
        end = t.turn_spans[turns[-1]][1]
        mask = [0] * end
        for k in turns:
            start, stop = t.turn_spans[k]
            mask[start:stop] = t.loss_mask[start:stop]
        rows.append(
            Trajectory(
                token_ids=t.token_ids[:end],
                loss_mask=mask,
                logprobs=[lp * m for lp, m in zip(t.logprobs[:end], mask, strict=True)],
                prompt_length=t.turn_spans[turns[0]][0],
                turn_spans=[t.turn_spans[k] for k in turns],
                step_rewards=[t.step_rewards[k] for k in turns],
                reward=t.reward,
                group_id=t.group_id,
            )
        )
    return rows


def as_steps(t: Trajectory) -> list[Trajectory]:
    return as_rows(t, [[k] for k in range(len(t.turn_spans))])


def as_segments(t: Trajectory) -> list[Trajectory]:
    """The first two turns in one row, the rest in another (context segments)."""
    k = len(t.turn_spans)
    return as_rows(t, [list(range(min(k, 2))), *([list(range(2, k))] if k > 2 else [])])


def test_episode_turn_tensors_of_segments_by_hand():
    e = episode([[1], [1], [1, 1]], [0.0, 0.5, 0.5], "g")  # turns at 2, 4, 6-7
    ids, rewards, turns = episode_turn_tensors([as_segments(e)], width=8)
    assert ids.tolist() == [[-1, -1, 0, -1, 1, -1, -1, -1], [-1] * 6 + [2, 2]]
    assert rewards.tolist() == [[0.0, 0.5, 0.5]] * 2 and turns.tolist() == [3, 3]


def test_episode_turn_tensors_of_step_rows_by_hand():
    e = episode([[1, 1], [1]], [0.5, 1.0], "g", reward=2.0)  # tokens: prompt 0-1, turn 0 at 2-3,
    # observation 4, turn 1 at 5
    ids, rewards, turns = episode_turn_tensors([as_steps(e)], width=6)
    assert ids.tolist() == [[-1, -1, 0, 0, -1, -1], [-1, -1, -1, -1, -1, 1]]
    assert rewards.tolist() == [[0.5, 1.5], [0.5, 1.5]]  # the leftover 0.5 on the last step
    assert turns.tolist() == [2, 2]
    batch = collate_episodes([as_steps(e)], pad_token_id=0, episode_turns=True)
    assert batch.episode_turns and torch.equal(batch.turn_ids, ids)
    assert not collate_episodes([as_steps(e)], pad_token_id=0).episode_turns


def step_advantages_by_turn(batch, rows_of, episodes):
    """Each turn's advantages, read from the step rows, laid out as in the episode rows."""
    out = torch.zeros(len(episodes), max(len(e.token_ids) for e in episodes))
    for e, t in enumerate(episodes):
        for k, (start, end) in enumerate(t.turn_spans):
            out[e, start:end] = batch.advantages[rows_of[e][k], start:end]
    return out


@pytest.mark.parametrize("cut", [as_steps, as_segments])
def test_turn_credit_over_rows_equals_one_row_an_episode(cut):
    # MT-GRPO (with and without the outcome-only reward) and Turn-PPO give every turn the same
    # advantage whether an episode is one row, one row a step or a few turns a row
    episodes = [
        episode([[1, 1], [1, 0]], [1.0, 1.0], "g"),
        episode([[1], [1], [1, 1]], [0.0, 0.5, 0.5], "g"),
        episode([[1, 1]], [0.0], "g"),
        episode([[1], [1]], [0.3, 0.0], "g", reward=1.0),
    ]
    steps = [cut(e) for e in episodes]
    rows_of, i = [], 0  # the row that holds each turn of each episode
    for rows in steps:
        rows_of.append([i + r for r, row in enumerate(rows) for _ in row.turn_spans])
        i += len(rows)
    assert len(rows_of[1]) == len(episodes[1].turn_spans) == 3
    for algo in (
        AlgoConfig(name="mt_grpo", turn_advantage_coef=0.5),
        AlgoConfig(name="mt_grpo", mt_grpo_outcome="last_turn"),
        AlgoConfig(name="turn_ppo", gamma=0.9, lam=0.5),
    ):
        whole = collate(episodes, pad_token_id=0)
        split = collate_episodes(steps, pad_token_id=0, episode_turns=True)
        if algo.name == "turn_ppo":  # V = 0.1 x (turn index + 1) at each turn's first token
            whole.old_values = torch.zeros(whole.input_ids.shape)
            split.old_values = torch.zeros(split.input_ids.shape)
            for e, t in enumerate(episodes):
                for k, (start, _) in enumerate(t.turn_spans):
                    whole.old_values[e, start] = split.old_values[rows_of[e][k], start] = 0.1 * (
                        k + 1
                    )
        compute_advantages(whole, algo)
        compute_advantages(split, algo)
        assert whole.advantages.abs().sum() > 0
        by_turn = step_advantages_by_turn(split, rows_of, episodes)
        torch.testing.assert_close(
            by_turn, whole.advantages[:, : by_turn.shape[1]], atol=1e-5, rtol=0
        )
        if algo.name == "turn_ppo":  # the critic's targets sit on each turn's start
            assert split.value_mask.sum() == whole.value_mask.sum() == 8


def conversation(role: str, step_reward: float, reward: float, group: str = "g") -> Trajectory:
    """One conversation of a multi-agent episode: a row with one turn (rollout/memory.py), its
    step reward, and its role's reward (the team's outcome plus the role's own terms)."""
    t = episode([[1]], [step_reward], group, reward=reward)
    t.role = role
    return t


def two_agent_group() -> list[list[Trajectory]]:
    """Two episodes of one task, conversations alternating A, B, A, B. Episode 1: A's step
    rewards 1, 0 and reward 2; B's 0, 0 and reward 1. Episode 2: A's 0, 0 and reward 1; B's
    0.5, 0 and reward 1."""
    return [
        [conversation("A", 1.0, 2.0), conversation("B", 0.0, 1.0)]
        + [conversation("A", 0.0, 2.0), conversation("B", 0.0, 1.0)],
        [conversation("A", 0.0, 1.0), conversation("B", 0.5, 1.0)]
        + [conversation("A", 0.0, 1.0), conversation("B", 0.0, 1.0)],
    ]


def test_episode_turn_tensors_by_role_by_hand():
    # each role's turns are numbered on their own; the leftover of a role's reward is on its
    # last turn: A of episode 1 has [1, 2 - 1], B [0, 1 - 0]
    episodes = two_agent_group()
    ids, rewards, turns = episode_turn_tensors(episodes, width=3, by_role=True)
    assert ids[:, 2].tolist() == [0, 0, 1, 1, 0, 0, 1, 1]
    assert rewards.tolist() == [[1.0, 1.0], [0.0, 1.0], [1.0, 1.0], [0.0, 1.0]] + [
        [0.0, 1.0],
        [0.5, 0.5],
        [0.0, 1.0],
        [0.5, 0.5],
    ]
    assert turns.tolist() == [2] * 8
    interleaved, _, _ = episode_turn_tensors(episodes, width=3)  # without roles: one sequence
    assert interleaved[:, 2].tolist() == [0, 1, 2, 3, 0, 1, 2, 3]
    batch = collate_episodes(episodes, pad_token_id=0, episode_turns=True)
    assert batch.agent_names == ("A", "B") and torch.equal(batch.turn_ids, ids)


def test_mt_grpo_credits_each_role_by_hand():
    # units (episode, role) compared within (group, role), S = 1/sqrt(2):
    #   turn 0 of A: rewards 1 vs 0 -> +S / -S;   turn 0 of B: 0 vs 0.5 -> -S / +S
    #   outcome of A: 2 vs 1 -> +S / -S;           outcome of B: 1 vs 1 -> 0 / 0
    # A's first turn takes outcome + turn term, its last turn the outcome alone
    batch = collate_episodes(two_agent_group(), pad_token_id=0, episode_turns=True)
    compute_advantages(batch, AlgoConfig(name="mt_grpo", turn_advantage_coef=1.0))
    got = batch.advantages[:, 2]
    want = torch.tensor([2 * S, -S, S, 0.0, -2 * S, S, -S, 0.0])
    torch.testing.assert_close(got, want, atol=1e-5, rtol=0)
    assert (batch.advantages[:, :2] == 0).all()


def test_turn_ppo_runs_each_role_s_own_turns_by_hand():
    # gamma = lambda = 1, values 0: turn k's return is its role's reward-to-go in the episode
    batch = collate_episodes(two_agent_group(), pad_token_id=0, episode_turns=True)
    batch.old_values = torch.zeros(batch.input_ids.shape)
    compute_advantages(batch, AlgoConfig(name="turn_ppo"))
    returns = batch.returns[:, 2].tolist()
    assert returns == pytest.approx([2.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 0.5])
    assert batch.value_mask.sum() == 8  # every conversation opens a turn of its role


def test_per_role_turn_credit_equals_each_role_as_its_own_episode():
    # the same advantages as when each (episode, role) is an episode of its own, in a group
    # of its own per role: the roles never share a turn index or a group
    episodes = two_agent_group() + [
        [conversation("A", 0.2, 0.7, "h"), conversation("B", 0.0, 0.0, "h")],
        [conversation("A", 0.0, 0.3, "h"), conversation("B", 0.9, 1.0, "h")]
        + [conversation("B", 0.1, 1.0, "h")],
    ]
    apart = []
    for samples in episodes:
        for role in ("A", "B"):
            mine = [copy.deepcopy(s) for s in samples if s.role == role]
            for s in mine:
                s.group_id, s.role = f"{s.group_id}:{role}", ""
            apart.append(mine)
    order = [id(s) for samples in episodes for s in samples]
    for algo in (
        AlgoConfig(name="mt_grpo", turn_advantage_coef=0.5),
        AlgoConfig(name="mt_grpo", mt_grpo_outcome="last_turn"),
        AlgoConfig(name="turn_ppo", gamma=0.9, lam=0.5),
    ):
        together = collate_episodes(episodes, pad_token_id=0, episode_turns=True)
        separate = collate_episodes(apart, pad_token_id=0, episode_turns=True)
        assert separate.agent_ids is None
        for b in (together, separate):
            b.old_values = 0.1 * torch.ones(b.input_ids.shape)
        compute_advantages(together, algo)
        compute_advantages(separate, algo)
        assert together.advantages.abs().sum() > 0
        # row r of `separate` is conversation rows_apart[r] of `together`
        rows_apart = [
            order.index(id(s))
            for samples in episodes
            for role in ("A", "B")
            for s in samples
            if s.role == role
        ]
        torch.testing.assert_close(
            separate.advantages, together.advantages[rows_apart], atol=1e-5, rtol=0
        )
