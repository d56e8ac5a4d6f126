"""The PPO critic: V_t is read from the state that predicts token t (V(x_<t)), for the shared
value head and the separate critic, on every forward form; a separate critic keeps the value
loss out of the policy."""

from __future__ import annotations

import copy

import pytest
import torch
from torch import nn

from agentic_rl.config.load import load_config
from agentic_rl.config.parse import ConfigError
from agentic_rl.learner.batch import collate
from agentic_rl.learner.update import update
from agentic_rl.model.attention import use_fast_cpu_attention
from agentic_rl.model.critic import Critic, critic_values, reads_policy_states
from agentic_rl.model.load import ValueHead, tiny_model, token_logprobs
from agentic_rl.types import Trajectory

VOCAB = 1000


def _random_head(head: ValueHead, seed: int = 0) -> ValueHead:
    """A value head with non-zero weights (a fresh one starts at exactly 0)."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        head.proj.weight.copy_(torch.randn(head.proj.weight.shape, generator=g))
        head.proj.bias.fill_(0.3)
    return head


def _shared_values(model: nn.Module, head: ValueHead, ids: torch.Tensor, **kw) -> torch.Tensor:
    attn = torch.ones_like(ids)
    _, _, hidden = token_logprobs(model, ids, attn, return_hidden=True, **kw)
    return critic_values(head, ids, attn, hidden)


def _separate_critic(seed: int = 1) -> Critic:
    critic = Critic(tiny_model(VOCAB, seed=seed))
    _random_head(critic.head)
    return critic


def _critics() -> dict[str, object]:
    model = tiny_model(VOCAB, seed=1)
    head = _random_head(ValueHead(model.config.hidden_size))
    critic = _separate_critic()
    return {
        "shared": lambda ids: _shared_values(model, head, ids),
        "separate": lambda ids: critic_values(critic, ids, torch.ones_like(ids), None),
    }


@pytest.mark.parametrize("kind", ["shared", "separate"])
def test_value_of_token_t_does_not_read_token_t(kind) -> None:
    """Changing token t alone leaves V_t (and every earlier value) unchanged; V_{t+1} moves.
    Changing an earlier token moves V_t."""
    values_of = _critics()[kind]
    torch.manual_seed(0)
    ids = torch.randint(10, VOCAB, (1, 12))
    t = 7
    base = values_of(ids)
    changed = ids.clone()
    changed[0, t] = (ids[0, t] + 17) % VOCAB
    other = values_of(changed)
    torch.testing.assert_close(other[0, : t + 1], base[0, : t + 1], atol=1e-6, rtol=0)
    assert (other[0, t + 1 :] - base[0, t + 1 :]).abs().min() > 1e-4
    earlier = ids.clone()
    earlier[0, t - 3] = (ids[0, t - 3] + 17) % VOCAB
    moved = values_of(earlier)
    assert (moved[0, t - 2 :] - base[0, t - 2 :]).abs().min() > 1e-4
    assert base[0, 0] == 0  # nothing predicts the first token


def test_value_of_token_t_is_the_head_on_the_state_before_it() -> None:
    """The same state feeds log pi(x_t | x_<t) and V_t: hidden[t - 1]."""
    model = tiny_model(VOCAB, seed=1)
    head = _random_head(ValueHead(model.config.hidden_size))
    ids = torch.randint(10, VOCAB, (2, 9), generator=torch.Generator().manual_seed(1))
    hidden = model.model(input_ids=ids).last_hidden_state
    values = _shared_values(model, head, ids)
    want = head.proj(hidden[:, :-1]).squeeze(-1)
    torch.testing.assert_close(values[:, 1:], want, atol=1e-6, rtol=1e-6)


def _group_rows(prefix_len: int = 20, suffix_lens: tuple[int, ...] = (4, 9, 2)):
    g = torch.Generator().manual_seed(5)
    prompt = torch.randint(10, VOCAB, (prefix_len,), generator=g)
    width = prefix_len + max(suffix_lens)
    ids = torch.zeros((len(suffix_lens), width), dtype=torch.long)
    attn = torch.zeros_like(ids)
    for row, n in enumerate(suffix_lens):
        ids[row, :prefix_len] = prompt
        ids[row, prefix_len : prefix_len + n] = torch.randint(10, VOCAB, (n,), generator=g)
        attn[row, : prefix_len + n] = 1
    wanted = attn.bool().clone()
    wanted[:, :prefix_len] = False
    return ids, attn, wanted


def test_packed_forms_give_the_plain_values() -> None:
    """Shared prompts run once (packed rows): the same values at every wanted token, for the
    policy's value head and for a separate critic."""
    ids, attn, wanted = _group_rows()
    model = tiny_model(VOCAB, seed=1)
    use_fast_cpu_attention(model)
    head = _random_head(ValueHead(model.config.hidden_size))
    critic = _separate_critic()
    use_fast_cpu_attention(critic.backbone)
    for share in (False, True):
        _, _, hidden = token_logprobs(
            model, ids, attn, positions=wanted, return_hidden=True, share_prefix=share
        )
        shared = critic_values(head, ids, attn, hidden)
        separate = critic_values(critic, ids, attn, None, wanted, share)
        if not share:
            plain = (shared, separate)
    torch.testing.assert_close(shared[wanted], plain[0][wanted], atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(separate[wanted], plain[1][wanted], atol=1e-5, rtol=1e-5)


def test_separate_critic_is_a_trainable_copy_of_the_backbone() -> None:
    policy = tiny_model(VOCAB, seed=2)
    critic = Critic(policy)
    assert not reads_policy_states(critic) and reads_policy_states(ValueHead(8))
    assert not reads_policy_states(None)
    for (name, mine), theirs in zip(
        critic.backbone.named_parameters(), policy.model.parameters(), strict=True
    ):
        assert torch.equal(mine, theirs) and mine.data_ptr() != theirs.data_ptr(), name
    assert all(p.requires_grad for p in critic.parameters())
    with torch.no_grad():
        policy.model.norm.weight.add_(1.0)
    critic.copy_backbone_from(policy)
    assert torch.equal(critic.backbone.norm.weight, policy.model.norm.weight)


def _ppo_batch() -> object:
    g = torch.Generator().manual_seed(0)
    trajs = []
    for i in range(4):
        length = 8 + i
        ids = torch.randint(10, VOCAB, (length,), generator=g).tolist()
        trajs.append(
            Trajectory(
                token_ids=ids,
                loss_mask=[0] * 4 + [1] * (length - 4),
                logprobs=[0.0] * length,
                prompt_length=4,
                turn_spans=[(4, length)],
                step_rewards=[],
                reward=float(i % 2),
                group_id=f"g{i}",
            )
        )
    batch = collate(trajs, 0)
    mask = batch.loss_mask
    batch.advantages = torch.randn(mask.shape, generator=g) * mask
    batch.returns = torch.rand(mask.shape, generator=g) * mask
    batch.old_values = torch.zeros_like(mask)
    return batch


def _policy_after_update(critic_kind: str, value_coef: float) -> dict[str, torch.Tensor]:
    cfg = load_config(
        None,
        [
            "model.name=tiny",
            "algo.name=ppo",
            f"algo.critic={critic_kind}",
            f"algo.value_coef={value_coef}",
            "optim.lr=1e-3",
            "optim.max_grad_norm=0.5",  # clipping active: the critic must not share it
            "algo.loss_agg=token-mean",
        ],
    )
    policy = tiny_model(VOCAB, seed=3)
    critic = (
        _random_head(ValueHead(policy.config.hidden_size))
        if critic_kind == "shared"
        else Critic(policy)
    )
    if critic_kind == "separate":
        _random_head(critic.head)
    params = [p for p in policy.parameters()] + list(critic.parameters())
    optimizer = torch.optim.AdamW(params, lr=1e-3)
    update(policy, optimizer, _ppo_batch(), cfg, critic)
    return {k: v.detach().clone() for k, v in policy.state_dict().items()}


def test_separate_critic_keeps_the_value_loss_out_of_the_policy() -> None:
    """With algo.critic=separate the policy's step does not depend on algo.value_coef (its own
    gradient, its own clipping); with a shared value head it does (the trunk learns values)."""
    a = _policy_after_update("separate", 0.5)
    b = _policy_after_update("separate", 50.0)
    for key in a:
        assert torch.equal(a[key], b[key]), key
    shared_a = _policy_after_update("shared", 0.5)
    shared_b = _policy_after_update("shared", 50.0)
    assert any(not torch.equal(shared_a[k], shared_b[k]) for k in shared_a)


def test_critic_config_is_validated() -> None:
    with pytest.raises(ConfigError, match="algo.critic"):
        load_config(None, ["algo.name=ppo", "algo.critic=both"])
    with pytest.raises(ConfigError, match="algo.critic is set but does nothing"):
        load_config(None, ["algo.critic=separate"])  # grpo has no critic
    with pytest.raises(ConfigError, match="algo.critic=separate with model.lora_rank"):
        load_config(None, ["algo.name=ppo", "algo.critic=separate", "model.lora_rank=4"])
    cfg = load_config("search_r1", [])
    assert cfg.algo.critic == "separate" and cfg.algo.critic_lr == 5e-5


def test_separate_critic_has_its_own_parameter_group_and_checkpoint(tmp_path) -> None:
    """build -> optimizer groups (policy lr, critic lr); the critic is checkpointed as `critic`
    and restored on resume."""
    from agentic_rl.checkpoint.io import load_checkpoint, save_checkpoint
    from agentic_rl.train.setup import build, make_optimizer, set_learning_rate

    cfg = load_config(
        "search_r1",
        [
            "model.name=tiny",
            "env.num_train_tasks=4",
            "env.num_eval_tasks=2",
            "optim.warmup_steps=2",
        ],
    )
    setup = build(cfg)
    assert isinstance(setup.value_head, Critic)
    optimizer = make_optimizer(setup)
    policy_group, critic_group = optimizer.param_groups
    assert {id(p) for p in critic_group["params"]} == {id(p) for p in setup.value_head.parameters()}
    set_learning_rate(optimizer, cfg, 1)
    assert policy_group["lr"] == pytest.approx(cfg.optim.lr / 2)
    assert critic_group["lr"] == pytest.approx(cfg.algo.critic_lr / 2)
    _random_head(setup.value_head.head)
    path = save_checkpoint(
        tmp_path, 1, setup.policy, optimizer, extra_modules={"critic": setup.value_head}
    )
    assert (path / "critic.safetensors").is_file()
    fresh = Critic(copy.deepcopy(setup.policy))
    load_checkpoint(path, copy.deepcopy(setup.policy), extra_modules={"critic": fresh})
    for (name, a), b in zip(
        setup.value_head.state_dict().items(), fresh.state_dict().values(), strict=True
    ):
        assert torch.equal(a, b), name
