"""Shared-prefix forward: same logprobs and gradients as the plain forward, prefix run once."""

from __future__ import annotations

import functools

import pytest
import torch

from agentic_rl.model import prefix_sharing
from agentic_rl.model.attention import use_fast_cpu_attention
from agentic_rl.model.load import tiny_model, token_logprobs
from agentic_rl.model.prefix_sharing import MIN_SHARED_TOKENS, shared_prefix_length

VOCAB = 97


def _rows(prefix_len: int, suffix_lens: list[int], seed: int = 0) -> tuple[torch.Tensor, ...]:
    """Right-padded rows `prefix + suffix_i`; the loss mask covers the suffixes."""
    g = torch.Generator().manual_seed(seed)
    prefix = torch.randint(1, VOCAB, (prefix_len,), generator=g)
    width = prefix_len + max(suffix_lens)
    ids = torch.zeros((len(suffix_lens), width), dtype=torch.long)
    attn = torch.zeros_like(ids)
    mask = torch.zeros((len(suffix_lens), width))
    for i, n in enumerate(suffix_lens):
        ids[i, :prefix_len] = prefix
        ids[i, prefix_len : prefix_len + n] = torch.randint(1, VOCAB, (n,), generator=g)
        attn[i, : prefix_len + n] = 1
        mask[i, prefix_len : prefix_len + n] = 1
    return ids, attn, mask


def test_shared_prefix_length_by_hand() -> None:
    ids = torch.tensor([[5] * 10 + [1, 2, 3], [5] * 10 + [1, 9, 9], [5] * 10 + [1, 2, 0]])
    attn = torch.tensor([[1] * 13, [1] * 13, [1] * 12 + [0]])
    wanted = torch.zeros_like(ids, dtype=torch.bool)
    wanted[:, 11:] = True
    assert shared_prefix_length(ids, attn, wanted) == 11  # 10 fives and the 1 agree
    wanted[0, 9] = True  # a wanted token inside the shared run caps the prefix before it
    assert shared_prefix_length(ids, attn, wanted) == 9
    assert shared_prefix_length(ids[:1], attn[:1], wanted[:1]) == 0  # one row: nothing to share
    short = ids.clone()
    short[1, MIN_SHARED_TOKENS - 1] = 0  # rows part before MIN_SHARED_TOKENS: not worth it
    assert shared_prefix_length(short, attn, wanted) == 0


FORMS = ["packed, per segment", "packed, block mask", "two passes"]


def _force(form: str, monkeypatch) -> None:
    original = prefix_sharing.choose_form
    name = "two_pass" if form == "two passes" else "packed"
    monkeypatch.setattr(
        prefix_sharing, "choose_form", lambda *a, **k: (name, *original(*a, **k)[1:])
    )


@pytest.mark.parametrize(
    ("form", "groups"), [(f, 1) for f in FORMS] + [(FORMS[0], 2), (FORMS[1], 2)]
)
def test_same_logprobs_entropy_and_gradients_as_the_plain_forward(form, groups, monkeypatch):
    """Every shared form: one packed row (this project's attention computes it segment by
    segment; any other attention gets the block mask), and the prefix's KV cache repeated;
    packed rows also hold two groups with different prompts."""
    _force(form, monkeypatch)
    ids, attn, mask = _rows(prefix_len=20, suffix_lens=[7, 3, 9, 5])
    if groups == 2:  # rows 2 and 3: another prompt, of another length
        other_ids, other_attn, other_mask = _rows(prefix_len=14, suffix_lens=[9, 2], seed=4)
        width = ids.shape[1]
        ids[2:], attn[2:], mask[2:] = 0, 0, 0
        ids[2:, : other_ids.shape[1]] = other_ids
        attn[2:, : other_ids.shape[1]] = other_attn
        mask[2:, : other_ids.shape[1]] = other_mask
        assert other_ids.shape[1] <= width
    adv = torch.tensor([1.0, -0.5, 0.25, -1.0])[:, None]
    results = []
    for share in (False, True):
        model = tiny_model(VOCAB, seed=1)
        if form == "packed, per segment":
            use_fast_cpu_attention(model)
            assert prefix_sharing._segment_attention(model)
        model.train()
        lp, ent, _ = token_logprobs(
            model, ids, attn, chunk_size=4, with_entropy=True, positions=mask > 0,
            share_prefix=share,
        )  # fmt: skip
        (-(lp * adv * mask).sum() - 0.1 * (ent * mask).sum()).backward()
        grads = {n: p.grad.clone() for n, p in model.named_parameters()}
        results.append((lp.detach(), ent.detach(), grads))
    (lp0, ent0, g0), (lp1, ent1, g1) = results
    assert (lp0 != 0).sum() == mask.sum()  # every suffix token got a logprob
    torch.testing.assert_close(lp1, lp0, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(ent1, ent0, atol=1e-5, rtol=1e-5)
    for name in g0:
        torch.testing.assert_close(g1[name], g0[name], atol=1e-5, rtol=1e-4, msg=name)


def _backbone_inputs(model, monkeypatch) -> list[tuple[int, ...]]:
    """The shapes of the input ids every backbone forward of `model` receives, from now on."""
    seen: list[tuple[int, ...]] = []
    original = model.model.forward

    @functools.wraps(original)  # keeps the signature the cache keyword is read from
    def counting(*args, **kwargs):
        seen.append(tuple(kwargs["input_ids"].shape))
        return original(*args, **kwargs)

    monkeypatch.setattr(model.model, "forward", counting)
    return seen


def test_the_prefix_runs_once(monkeypatch) -> None:
    """Counted, not timed: the backbone sees P + B * S tokens instead of B * (P + S). Equal
    suffixes (no padding to drop): the two-pass form is the cheaper one here."""
    ids, attn, mask = _rows(prefix_len=30, suffix_lens=[6, 6, 6, 6])
    model = tiny_model(VOCAB, seed=1)
    seen = _backbone_inputs(model, monkeypatch)
    token_logprobs(model, ids, attn, positions=mask > 0, share_prefix=True)
    assert seen == [(1, 30), (4, 6)]
    seen.clear()
    token_logprobs(model, ids, attn, positions=mask > 0, share_prefix=False)
    assert seen == [(4, 36)]


def test_packed_row_drops_the_padding(monkeypatch) -> None:
    """Counted: uneven suffixes run as one row of P + sum(S_i) tokens, no padding, one pass."""
    ids, attn, mask = _rows(prefix_len=30, suffix_lens=[2, 9, 4, 3])
    model = tiny_model(VOCAB, seed=1)
    seen = _backbone_inputs(model, monkeypatch)
    token_logprobs(model, ids, attn, positions=mask > 0, share_prefix=True)
    assert seen == [(1, 30 + 2 + 9 + 4 + 3)]


def test_two_groups_pack_into_one_row(monkeypatch) -> None:
    """Counted: two groups (prompts of 30 and 12 tokens) in one micro-batch run as one row of
    30 + 12 + sum(S_i) tokens."""
    ids, attn, mask = _rows(prefix_len=30, suffix_lens=[2, 9])
    other = _rows(prefix_len=12, suffix_lens=[4, 3], seed=2)
    width = ids.shape[1]
    pad = [torch.nn.functional.pad(t, (0, width - t.shape[1])) for t in other]
    ids, attn, mask = (torch.cat([a, b]) for a, b in zip((ids, attn, mask), pad, strict=True))
    model = tiny_model(VOCAB, seed=1)
    use_fast_cpu_attention(model)
    seen = _backbone_inputs(model, monkeypatch)
    token_logprobs(model, ids, attn, positions=mask > 0, share_prefix=True)
    assert seen == [(1, 30 + 2 + 9 + 12 + 4 + 3)]


def test_choose_form_by_hand(tiny) -> None:
    """Cost per layer = tokens x 6 x hidden + attention scores (hidden = 32 in `tiny`, which
    runs SDPA: a packed row costs L^2 scores)."""
    hidden = tiny.config.hidden_size
    ids = torch.randint(1, 50, (2, 40))
    ids[1, :10] = ids[0, :10]
    attn = torch.zeros((2, 40), dtype=torch.long)
    attn[0, :40], attn[1, :13] = 1, 1  # prompt 10, answers of 30 and 3
    wanted = attn.bool().clone()
    wanted[:, :10] = False
    plain = 80 * 6 * hidden + 2 * 40 * 40
    packed = 43 * 6 * hidden + 43**2
    two_pass = 70 * 6 * hidden + 2 * 30 * 40
    assert min(plain, packed, two_pass) == packed  # 10105 < 15840 < 18560 for hidden 32
    form, layout, prefix = prefix_sharing.choose_form(tiny, ids, attn, wanted)
    assert (form, layout.tokens, prefix) == ("packed", 43, 10)
    long = torch.ones((2, 2000), dtype=torch.long)  # equal long rows: quadratic attention loses
    long_ids = torch.randint(1, 50, (2, 2000))
    long_ids[1, :10] = long_ids[0, :10]
    long_wanted = long.bool().clone()
    long_wanted[:, :10] = False
    assert prefix_sharing.choose_form(tiny, long_ids, long, long_wanted)[0] == "two_pass"
    left_padded = attn.flip(1)
    assert prefix_sharing.choose_form(tiny, ids, left_padded, wanted)[1] is None  # no packing
    sliding = type(tiny.config)(**{**tiny.config.to_dict(), "layer_types": None})
    sliding.layer_types = ["sliding_attention", "full_attention"]
    model = type("M", (), {"config": sliding})()
    assert prefix_sharing.choose_form(model, ids, attn, wanted)[1] is None


def test_value_head_states_are_every_positions_plain_state(monkeypatch) -> None:
    """A value head reads every position's state: sharing packs (never two passes, which have
    no states before the prompt's end) and gives the plain forward's states."""
    ids, attn, mask = _rows(prefix_len=20, suffix_lens=[4, 9, 2])
    model = tiny_model(VOCAB, seed=1)
    use_fast_cpu_attention(model)
    forms: list[str] = []
    original = prefix_sharing.choose_form

    def spy(*args, **kwargs):
        forms.append(result := original(*args, **kwargs))
        return result

    monkeypatch.setattr(prefix_sharing, "choose_form", spy)
    states = []
    for share in (False, True):
        _, _, hidden = token_logprobs(
            model, ids, attn, positions=mask > 0, return_hidden=True, share_prefix=share
        )
        assert hidden is not None and hidden.shape[:2] == ids.shape  # every position's state
        states.append(hidden.detach())
    assert [f[0] for f in forms] == ["packed"]
    real = attn.bool()
    torch.testing.assert_close(states[1][real], states[0][real], atol=1e-5, rtol=1e-5)


def test_learner_update_is_the_same_with_and_without_sharing(tiny) -> None:
    """Two groups of 4 with their own 12-token prompt, micro-batches of 4: the rows are ordered
    group by group, the prompt runs once per micro-batch, and the weights end up the same."""
    import copy

    from agentic_rl.config.load import load_config
    from agentic_rl.learner.advantages import compute_advantages
    from agentic_rl.learner.batch import collate
    from agentic_rl.learner.update import update
    from agentic_rl.types import Trajectory

    g = torch.Generator().manual_seed(3)
    trajs = []
    for group in range(2):
        prompt = torch.randint(10, 1000, (12,), generator=g).tolist()
        for i in range(4):
            answer = torch.randint(10, 1000, (3 + i + group,), generator=g).tolist()
            trajs.append(
                Trajectory(
                    token_ids=prompt + answer,
                    loss_mask=[0] * 12 + [1] * len(answer),
                    logprobs=[0.0] * (12 + len(answer)),
                    prompt_length=12,
                    turn_spans=[(12, 12 + len(answer))],
                    step_rewards=[],
                    reward=float(i % 2),
                    group_id=f"g{group}",
                )
            )
    trajs = trajs[::2] + trajs[1::2]  # groups interleaved in the batch
    models = []
    for share in (False, True):
        # One optimizer step over the batch (no pi_old recomputation pass to count).
        one_step = ["algo.ppo_mini_batches=1", "algo.clip_high=0.2"]
        cfg = load_config(
            None,
            ["model.name=tiny", "optim.micro_batch_size=4", f"model.share_prefix={share}"]
            + one_step,
        )
        model = copy.deepcopy(tiny)
        seen: list[tuple[int, ...]] = []
        original = model.model.forward
        model.model.forward = functools.wraps(original)(
            lambda *a, _f=original, _s=seen, **k: (
                _s.append(tuple(k["input_ids"].shape)) or _f(*a, **k)
            )
        )
        batch = collate(trajs, 0)
        compute_advantages(batch, cfg.algo)
        update(model, torch.optim.SGD(model.parameters(), lr=1.0), batch, cfg)
        models.append(model)
        # Shared: per group one packed row, the 12-token prompt once and the 4 answers.
        answers = [3 + 4 + 5 + 6, 4 + 5 + 6 + 7]
        assert seen == ([(1, 12 + n) for n in answers] if share else [(4, 19)] * 2)
    changed = False
    params = zip(models[0].parameters(), models[1].parameters(), tiny.parameters(), strict=True)
    for p0, p1, p in params:
        torch.testing.assert_close(p1, p0, atol=1e-5, rtol=1e-4)
        changed |= not torch.equal(p0, p)
    assert changed


def test_packed_rows_under_activation_checkpointing() -> None:
    """Checkpointed layers recompute the packed row (the segments travel with the layer's
    keyword arguments): the same gradients as the plain checkpointed forward."""
    ids, attn, mask = _rows(prefix_len=16, suffix_lens=[5, 2, 7])
    grads = []
    for share in (False, True):
        model = tiny_model(VOCAB, seed=1)
        use_fast_cpu_attention(model)
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        model.train()
        lp, _, _ = token_logprobs(model, ids, attn, positions=mask > 0, share_prefix=share)
        (lp * mask).sum().backward()
        grads.append({n: p.grad.clone() for n, p in model.named_parameters()})
    wanted = (mask > 0) & attn.bool()
    assert prefix_sharing.choose_form(model, ids, attn, wanted)[0] == "packed"
    for name in grads[0]:
        torch.testing.assert_close(grads[1][name], grads[0][name], atol=1e-5, rtol=1e-4, msg=name)
