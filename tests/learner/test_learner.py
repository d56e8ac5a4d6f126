import copy

import pytest
import torch

from agentic_rl.config.load import load_config
from agentic_rl.config.parse import ConfigError
from agentic_rl.learner.advantages import compute_advantages
from agentic_rl.learner.batch import collate, unmask_observations
from agentic_rl.learner.update import update
from agentic_rl.types import Trajectory


def traj(ids, mask, reward, group, turns=None, steps=None, lp=None):
    return Trajectory(
        token_ids=ids,
        loss_mask=mask,
        logprobs=lp or [0.0] * len(ids),
        prompt_length=2,
        turn_spans=turns or [],
        step_rewards=steps or [],
        reward=reward,
        group_id=group,
    )


def test_collate_aligns_tokens_masks_and_step_rewards():
    a = traj(
        [5, 6, 7, 8, 9],
        [0, 0, 1, 0, 1],
        1.0,
        "g",
        turns=[(2, 3), (4, 5)],
        steps=[0.2, 0.8],
        lp=[0, 0, -0.5, 0, -0.25],
    )
    b = traj([5, 6, 7], [0, 0, 1], 0.0, "h", turns=[(2, 3)], steps=[0.0])
    batch = collate([a, b], pad_token_id=0)
    assert batch.input_ids.tolist() == [[5, 6, 7, 8, 9], [5, 6, 7, 0, 0]]
    assert batch.attention_mask.tolist() == [[1, 1, 1, 1, 1], [1, 1, 1, 0, 0]]
    assert batch.loss_mask.tolist() == [[0, 0, 1, 0, 1], [0, 0, 1, 0, 0]]
    assert batch.old_logprobs.tolist() == [[0, 0, -0.5, 0, -0.25], [0, 0, 0, 0, 0]]
    # the step reward of each turn sits on that turn's last token
    torch.testing.assert_close(
        batch.token_rewards, torch.tensor([[0, 0, 0.2, 0, 0.8], [0, 0, 0, 0, 0]])
    )
    assert batch.group_ids.tolist() == [0, 1]


def test_grpo_advantages_broadcast_over_policy_tokens_only():
    cfg = load_config(None, [])
    trajs = [traj([1, 2, 3, 4], [0, 0, 1, 1], r, "g") for r in (1.0, 0.0)]
    batch = collate(trajs, 0)
    compute_advantages(batch, cfg.algo)
    # rewards [1, 0]: mean 0.5, unbiased std 0.7071 -> A = +-0.7071
    expected = 0.5 / (2**0.5 / 2 + 1e-6)
    want = torch.tensor([[0, 0, expected, expected], [0, 0, -expected, -expected]])
    torch.testing.assert_close(batch.advantages, want, atol=1e-5, rtol=0)


def random_batch(tokenizer, n=8):
    g = torch.Generator().manual_seed(0)
    trajs = []
    for i in range(n):
        length = 6 + i
        ids = torch.randint(10, 1000, (length,), generator=g).tolist()
        mask = [0, 0, 0] + [1] * (length - 3)
        mask[5] = 0  # an injected observation token inside the response
        trajs.append(traj(ids, mask, float(i % 3 == 0), f"g{i // 4}"))
    return trajs


@pytest.mark.parametrize("agg", ["token-mean", "seq-mean-token-mean", "seq-mean-token-sum-norm"])
def test_update_is_invariant_to_micro_batch_size(tiny, tokenizer, agg):
    """1 x 8 and 8 x 1 micro-batching give the same gradient, hence the same weights."""
    trajs = random_batch(tokenizer)
    results = []
    for micro in (8, 1):
        cfg = load_config(
            None,
            [
                f"optim.micro_batch_size={micro}",
                f"algo.loss_agg={agg}",
                "model.name=tiny",
                "algo.entropy_coef=0.01",
            ],
        )
        model = copy.deepcopy(tiny)
        opt = torch.optim.SGD(model.parameters(), lr=1.0)
        batch = collate(trajs, 0)
        compute_advantages(batch, cfg.algo)
        metrics = update(model, opt, batch, cfg)
        results.append((model, metrics))
    (m8, r8), (m1, r1) = results
    for p8, p1 in zip(m8.parameters(), m1.parameters(), strict=True):
        torch.testing.assert_close(p8, p1, atol=1e-6, rtol=1e-5)
    assert r8["loss"] == pytest.approx(r1["loss"], rel=1e-4, abs=1e-6)
    assert r8["entropy"] == pytest.approx(r1["entropy"], rel=1e-4)


def test_constant_reward_groups_produce_no_policy_gradient(tiny, tokenizer):
    cfg = load_config(None, ["model.name=tiny"])
    trajs = [traj(t.token_ids, t.loss_mask, 0.7, t.group_id) for t in random_batch(tokenizer)]
    batch = collate(trajs, 0)
    compute_advantages(batch, cfg.algo)
    assert torch.count_nonzero(batch.advantages) == 0
    model = copy.deepcopy(tiny)
    opt = torch.optim.SGD(model.parameters(), lr=1.0)
    update(model, opt, batch, cfg)
    for p0, p1 in zip(tiny.parameters(), model.parameters(), strict=True):
        assert torch.equal(p0, p1)


def test_masked_tokens_do_not_affect_the_update(tiny, tokenizer):
    """Changing injected (mask 0) response tokens' behaviour logprobs changes nothing."""
    cfg = load_config(None, ["model.name=tiny", "algo.epochs=2"])
    outs = []
    for junk in (0.0, -50.0):
        trajs = random_batch(tokenizer)
        for t in trajs:
            t.logprobs = [junk if m == 0 else -1.0 for m in t.loss_mask]
        model = copy.deepcopy(tiny)
        batch = collate(trajs, 0)
        compute_advantages(batch, cfg.algo)
        update(model, torch.optim.SGD(model.parameters(), lr=0.1), batch, cfg)
        outs.append(model)
    for a, b in zip(outs[0].parameters(), outs[1].parameters(), strict=True):
        assert torch.equal(a, b)


def test_unmask_observations_puts_every_post_prompt_token_in_the_loss():
    t = traj([5, 6, 7, 8, 9], [0, 0, 1, 0, 1], 1.0, "g", turns=[(2, 3), (4, 5)], steps=[0, 1])
    u = unmask_observations(t)
    assert u.loss_mask == [0, 0, 1, 1, 1] and t.loss_mask == [0, 0, 1, 0, 1]
    assert u.token_ids == t.token_ids and u.turn_spans == t.turn_spans


def test_training_on_observations_changes_the_update(tiny, tokenizer):
    """The ablation's defining effect: observation tokens now carry policy gradient."""
    cfg = load_config(None, ["model.name=tiny"])
    trajs = random_batch(tokenizer)
    assert any(0 in t.loss_mask[t.prompt_length :] for t in trajs)  # there are observations
    outs = []
    for batch_trajs in (trajs, [unmask_observations(t) for t in trajs]):
        model = copy.deepcopy(tiny)
        batch = collate(batch_trajs, 0)
        compute_advantages(batch, cfg.algo)
        update(model, torch.optim.SGD(model.parameters(), lr=0.1), batch, cfg)
        outs.append(model)
    pairs = zip(outs[0].parameters(), outs[1].parameters(), strict=True)
    assert any(not torch.equal(a, b) for a, b in pairs)


def test_train_on_observations_refuses_stale_ratios():
    with pytest.raises(ConfigError, match="train_on_observations"):
        load_config(None, ["rollout.train_on_observations=true", "algo.epochs=2"])


def test_adamw_is_fused_and_steps_like_the_default(tiny):
    """One fused AdamW step lands where the default (foreach) implementation does."""
    from agentic_rl.learner.update import adamw

    models = [copy.deepcopy(tiny) for _ in range(2)]
    for model in models:
        for i, p in enumerate(model.parameters()):
            p.grad = torch.full_like(p, 0.01 * (i % 3 - 1))
    fused = adamw(list(models[0].parameters()), lr=0.1, weight_decay=0.01)
    plain = torch.optim.AdamW(list(models[1].parameters()), lr=0.1, weight_decay=0.01)
    assert fused.defaults["fused"] is True
    fused.step()
    plain.step()
    for a, b in zip(models[0].parameters(), models[1].parameters(), strict=True):
        torch.testing.assert_close(a, b)
