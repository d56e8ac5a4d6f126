"""The learner with the algorithm suite: GSPO, step-wise (multi-conversation) advantages,
GiGPO, TRR++, and invariances (micro-batching, on-policy clipping, constant rewards)."""

import copy

import pytest
import torch

from agentic_rl.config.algo import GigpoConfig
from agentic_rl.config.load import load_config
from agentic_rl.config.parse import ConfigError
from agentic_rl.learner.advantages import compute_advantages
from agentic_rl.learner.batch import collate, collate_episodes
from agentic_rl.learner.update import update
from agentic_rl.types import Trajectory

GSPO = ["algo.policy_loss=gspo", "algo.clip_high=0.2"]
# One on-policy step (the default recipe splits its batch into 2 PPO mini-batches and sets
# clip_high 0.28, which would do nothing then).
ONE_STEP = ["algo.ppo_mini_batches=1", "algo.clip_high=0.2"]


def sample(ids, mask, reward, group, step_reward=0.0, anchor=None):
    return Trajectory(
        token_ids=ids,
        loss_mask=mask,
        logprobs=[0.0] * len(ids),
        prompt_length=mask.index(1) if 1 in mask else len(ids),
        turn_spans=[(mask.index(1), len(ids))] if 1 in mask else [],
        step_rewards=[step_reward],
        reward=reward,
        group_id=group,
        anchors=[] if anchor is None else [anchor],
    )


def random_episodes(n_episodes=4, steps=2, seed=0):
    """Step-mode episodes: lists of step samples with random ids, 2 groups."""
    g = torch.Generator().manual_seed(seed)
    episodes = []
    for e in range(n_episodes):
        reward = float(e % 2)
        samples = []
        for t in range(steps):
            length = 7 + e + t
            ids = torch.randint(10, 1000, (length,), generator=g).tolist()
            mask = [0, 0, 0, 0] + [1] * (length - 4)
            samples.append(
                sample(ids, mask, reward, f"g{e // 2}", reward * (t == steps - 1), f"s{t}")
            )
        episodes.append(samples)
    return episodes


def weights_after(tiny, batch, overrides, lr=1.0):
    cfg = load_config(None, ["model.name=tiny", *overrides])
    model = copy.deepcopy(tiny)
    compute_advantages(batch, cfg.algo, cfg.gigpo)
    metrics = update(model, torch.optim.SGD(model.parameters(), lr=lr), batch, cfg)
    return model, metrics


def assert_same_weights(a, b, atol=1e-6):
    for pa, pb in zip(a.parameters(), b.parameters(), strict=True):
        torch.testing.assert_close(pa, pb, atol=atol, rtol=1e-5)


def test_step_mode_grpo_broadcasts_one_episode_advantage_to_every_step():
    episodes = random_episodes(n_episodes=4, steps=3)
    episodes[2] = episodes[2][:1]  # episodes of different lengths
    batch = collate_episodes(episodes, 0)
    assert batch.episode_index.tolist() == [0, 0, 0, 1, 1, 1, 2, 3, 3, 3]
    compute_advantages(batch, load_config(None, []).algo)
    # per EPISODE rewards [0, 1] in each group: A = +-0.5 / (0.7071 + 1e-6), whatever the steps
    a = 0.5 / (2**0.5 / 2 + 1e-6)
    per_row = batch.advantages.sum(1) / batch.loss_mask.sum(1)
    want = torch.tensor([-a] * 3 + [a] * 3 + [-a] + [a] * 3)
    torch.testing.assert_close(per_row, want, atol=1e-5, rtol=0)
    assert (batch.advantages[batch.loss_mask == 0] == 0).all()


def test_episode_mode_rows_are_their_own_episodes():
    rows = [s for ep in random_episodes(4, 1) for s in ep]
    plain, stepwise = collate(rows, 0), collate_episodes([[r] for r in rows], 0)
    algo = load_config(None, []).algo
    compute_advantages(plain, algo)
    compute_advantages(stepwise, algo)
    assert torch.equal(plain.advantages, stepwise.advantages)


def test_gigpo_advantages_hand_computed_through_collate():
    # Group g: episode A steps on anchors (s0, s1) with rewards (0, 1) -> return 1;
    # episode B steps on (s0, s2) with rewards (0, 0) -> return 0.
    ids, mask = [1, 2, 3, 4], [0, 0, 1, 1]
    a = [sample(ids, mask, 1.0, "g", 0.0, "s0"), sample(ids, mask, 1.0, "g", 1.0, "s1")]
    b = [sample(ids, mask, 0.0, "g", 0.0, "s0"), sample(ids, mask, 0.0, "g", 0.0, "s2")]
    gigpo = GigpoConfig(norm="mean_norm", gamma=0.95, omega=1.0)
    batch = collate_episodes([a, b], 0, gigpo)
    torch.testing.assert_close(batch.step_returns, torch.tensor([0.95, 1.0, 0.0, 0.0]))
    assert batch.step_group_ids.tolist() == [0, 1, 0, 2]  # s0 shared, s1 and s2 singletons
    cfg = load_config("gigpo_gridworld", ["gigpo.norm=mean_norm"])
    compute_advantages(batch, cfg.algo, cfg.gigpo)
    # A_E over step rows [1, 1, 0, 0] -> +-0.5; A_S on s0: 0.95 - 0.475 = 0.475, -0.475; else 0
    want = torch.tensor([0.5 + 0.475, 0.5, -0.5 - 0.475, -0.5])
    torch.testing.assert_close(batch.advantages[:, 2], want)
    torch.testing.assert_close(batch.advantages[:, 3], want)
    # omega = 0: the episode advantage alone
    batch = collate_episodes([a, b], 0, gigpo)
    compute_advantages(batch, cfg.algo, GigpoConfig(norm="mean_norm", omega=0.0))
    torch.testing.assert_close(batch.advantages[:, 3], torch.tensor([0.5, 0.5, -0.5, -0.5]))


def test_gigpo_steps_without_anchor_are_singletons_and_similarity_merges():
    ids, mask = [1, 2, 3], [0, 1, 1]
    eps = [
        [sample(ids, mask, 0.0, "g", 0.0, None), sample(ids, mask, 0.0, "g", 0.0, "abcdefghij")],
        [sample(ids, mask, 1.0, "g", 0.0, None), sample(ids, mask, 1.0, "g", 1.0, "abcdefghiX")],
    ]
    exact = collate_episodes(eps, 0, GigpoConfig())
    assert exact.step_group_ids.tolist() == [0, 1, 2, 3]
    similar = collate_episodes(eps, 0, GigpoConfig(similarity_threshold=0.85))
    assert similar.step_group_ids.tolist() == [0, 1, 2, 1]


def test_trr_pp_one_baseline_per_task_type_and_role():
    rows = [s for ep in random_episodes(8, 1) for s in ep]
    batch = collate(rows, 0)
    batch.task_type_ids = torch.tensor([0, 0, 1, 1, 0, 0, 1, 1])
    batch.role_ids = torch.tensor([0, 0, 0, 0, 1, 1, 1, 1])
    cfg = load_config(None, ["algo.name=trr_pp"])
    compute_advantages(batch, cfg.algo)
    # Each of the 4 (type, role) buckets holds a reward-0 row of n0 tokens and a reward-1 row
    # of n1 = n0 + 1 tokens (3 + row index). Whitening the bucket's N = n0 + n1 tokens (mean
    # n1 / N, unbiased var n0 n1 / (N (N - 1))) gives -sqrt(n1 (N-1) / (n0 N)) and
    # sqrt(n0 (N-1) / (n1 N)); bucket (0, 0): n0 = 3, n1 = 4 -> -sqrt(24/21), sqrt(18/28).
    expected = []
    for n0 in (3, 5, 7, 9):
        n1, n = n0 + 1, 2 * n0 + 1
        expected += [-((n1 * (n - 1) / (n0 * n)) ** 0.5), (n0 * (n - 1) / (n1 * n)) ** 0.5]
    assert batch.loss_mask.sum(1).tolist() == [3, 4, 5, 6, 7, 8, 9, 10]
    per_row = batch.advantages.sum(1) / batch.loss_mask.sum(1)
    torch.testing.assert_close(per_row, torch.tensor(expected), atol=1e-5, rtol=0)


def test_gspo_on_policy_gradient_equals_sequence_mean_ppo(tiny):
    """With ratio 1 the GSPO gradient is -A_i * mean_t grad log pi: the seq-mean PPO gradient."""
    rows = [s for ep in random_episodes(4, 2) for s in ep]
    ppo, _ = weights_after(tiny, collate(rows, 0), [*ONE_STEP, "algo.loss_agg=seq-mean-token-mean"])
    gspo, metrics = weights_after(tiny, collate(rows, 0), [*GSPO, *ONE_STEP])
    assert_same_weights(ppo, gspo)
    assert metrics["clip_frac"] == 0.0


@pytest.mark.parametrize(
    "overrides",
    [
        GSPO,
        ["algo.loss_agg=token-mean", "algo.dual_clip=3"],
        ["algo.loss_agg=seq-mean-token-sum-norm", "algo.epochs=2"],
        [*GSPO, "algo.epochs=2", "algo.gspo_clip_low=1e-2", "algo.gspo_clip_high=1e-2"],
    ],
)
def test_micro_batching_1x8_equals_8x1(tiny, overrides):
    """Gradient accumulation invariance for GSPO and the token modes with step-mode batches."""
    rows = [s for ep in random_episodes(4, 2) for s in ep]
    for r in rows:
        r.logprobs = [-2.0 * m for m in r.loss_mask]  # off-policy old logprobs for epochs=2
    results = []
    for micro in (8, 1):
        model, _ = weights_after(
            tiny,
            collate_episodes([[r] for r in rows], 0),
            [*overrides, f"optim.micro_batch_size={micro}"],
            lr=0.5,
        )
        results.append(model)
    assert_same_weights(*results)


@pytest.mark.parametrize(
    "clip",
    [
        ["algo.clip_low=0.001", "algo.clip_high=0.001"],
        ["algo.clip_high=0.28", "algo.dual_clip=3"],
        ["algo.clip_low=0.0", "algo.clip_high=0.0"],
        [*GSPO, "algo.gspo_clip_high=0.01"],
    ],
)
def test_clip_settings_that_cannot_act_fail_at_load(clip):
    """One mini-batch, one epoch, pi_old recomputed: the ratio is exactly 1 and no clip binds."""
    with pytest.raises(ConfigError, match="does nothing.*ratio pi / pi_old is exactly 1"):
        load_config(None, [*clip, "algo.ppo_mini_batches=1"])
    for acts in (["algo.ppo_mini_batches=2"], ["algo.epochs=2", "algo.ppo_mini_batches=1"]):
        load_config(None, [*clip, *acts])  # later mini-batches / epochs are off-policy


@pytest.mark.parametrize("overrides", [GSPO, ["algo.loss_agg=token-mean"]])
def test_constant_reward_episodes_give_zero_gradient_in_step_mode(tiny, overrides):
    episodes = random_episodes(4, 3)
    for ep in episodes:
        for s in ep:
            s.reward = 0.3
    batch = collate_episodes(episodes, 0)
    model, metrics = weights_after(tiny, batch, overrides)
    assert torch.count_nonzero(batch.advantages) == 0 and metrics["trained_sequences"] == 0
    for p0, p1 in zip(tiny.parameters(), model.parameters(), strict=True):
        assert torch.equal(p0, p1)


def test_gspo_clip_range_applies_to_the_sequence_ratio(tiny):
    """Off-policy (two epochs, old logprobs -2 per token): every sequence ratio is ~e^-9, far
    below 1, so GSPO's (3e-4, 4e-4) range clips the negative-advantage sequences; a range
    reaching down to 1e-5 leaves them unclipped."""
    rows = [s for ep in random_episodes(4, 1) for s in ep]
    for r in rows:
        r.logprobs = [-2.0 * m for m in r.loss_mask]
    behaviour = ["algo.ppo_mini_batches=1", "algo.recompute_old_logprobs=false"]  # pi_old
    _, tight = weights_after(tiny, collate(rows, 0), [*GSPO, *behaviour, "algo.epochs=2"])
    wide = [*GSPO, *behaviour, "algo.epochs=2", "algo.gspo_clip_low=0.99999"]
    _, loose = weights_after(tiny, collate(rows, 0), wide)
    assert tight["clip_frac"] > 0 and loose["clip_frac"] == 0.0
