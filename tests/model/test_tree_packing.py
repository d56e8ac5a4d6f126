"""Packing a tree rollout's leaves as a prefix tree: each shared token forwarded once, the same
logprobs, entropies, states and gradients as the plain forward, and micro-batches that keep a
tree's leaves together."""

from __future__ import annotations

import copy
import functools

import pytest
import torch

from agentic_rl.learner.batch import collate, micro_batch_bounds, tree_order
from agentic_rl.model import prefix_sharing
from agentic_rl.model.attention import grouped_attention, packed_attention, use_fast_cpu_attention
from agentic_rl.model.load import tiny_model, token_logprobs
from agentic_rl.model.packing import MIN_SHARED_RUN, pack_rows
from agentic_rl.types import Trajectory, TreePosition

VOCAB = 97
PROMPT = 12

# A task's two trees (one group, one prompt of 12 tokens). Each leaf: its parent, the tokens it
# copies from the parent, then its own parts as (tokens, trained): turns 1, observations 0.
#   A  root chain of tree 0: turn 10, obs 6, turn 9, obs 5, turn 7            (49 tokens)
#   B  from A after its first turn and observation (28): turn 8, obs 3, turn 4 (43)
#   C  from B after B's first turn and observation (39): turn 6   (depth 3)   (45)
#   D  from A after its second observation (42): turn 4                        (46)
#   E  from A at the prompt (12): turn 20                                      (32)
#   F  root chain of tree 1: turn 5, obs 4, turn 6                             (27)
#   G  from F after its first turn and observation (21): turn 11               (32)
LEAVES = {
    "A": (None, 0, [(10, 1), (6, 0), (9, 1), (5, 0), (7, 1)]),
    "B": ("A", 28, [(8, 1), (3, 0), (4, 1)]),
    "C": ("B", 39, [(6, 1)]),
    "D": ("A", 42, [(4, 1)]),
    "E": ("A", 12, [(20, 1)]),
    "F": (None, 0, [(5, 1), (4, 0), (6, 1)]),
    "G": ("F", 21, [(11, 1)]),
}
TREE = {"A": 0, "B": 0, "C": 0, "D": 0, "E": 0, "F": 1, "G": 1}
# The prefix tree by hand (columns [start, end), depth): the prompt [0, 12) at depth 0; A-D's
# first turn and observation [12, 28), E's turn [12, 32), F-G's [12, 21) at depth 1; A-D's
# [28, 42), B-C's [28, 39), F's [21, 27), G's [21, 32) at depth 2; A [42, 49), D [42, 46),
# B [39, 43), C [39, 45) at depth 3.
TRIE_TOKENS = 12 + (16 + 20 + 9) + (14 + 11 + 6 + 11) + (7 + 4 + 4 + 6)  # 120
PROMPT_ONLY_TOKENS = 12 + (37 + 31 + 33 + 34 + 20 + 15 + 20)  # 202
TRIE_SCORES = 12 * 12 + 3 * 20 * (12 + 20) + 4 * 14 * (28 + 14) + 4 * 7 * (42 + 7)  # 5788


def _leaves(seed: int = 0) -> dict[str, tuple[list[int], list[int]]]:
    """Each leaf's token ids and loss mask, copied from its parent exactly as rollout/tree.py
    copies them (random tokens 1..96)."""
    g = torch.Generator().manual_seed(seed)
    prompt = torch.randint(1, VOCAB, (PROMPT,), generator=g).tolist()
    out: dict[str, tuple[list[int], list[int]]] = {}
    for name, (parent, shared, parts) in LEAVES.items():
        ids, mask = (prompt, [0] * PROMPT) if parent is None else out[parent]
        ids, mask = list(ids[: shared or PROMPT]), list(mask[: shared or PROMPT])
        for n, trained in parts:
            ids += torch.randint(1, VOCAB, (n,), generator=g).tolist()
            mask += [trained] * n
        out[name] = (ids, mask)
    return out


def _rows(names: str = "ABCDEFG", seed: int = 0) -> tuple[torch.Tensor, ...]:
    """Right-padded ids, attention mask and loss mask [B, T] of the leaves `names`."""
    leaves = _leaves(seed)
    width = max(len(leaves[n][0]) for n in names)
    ids = torch.zeros((len(names), width), dtype=torch.long)
    attn = torch.zeros_like(ids)
    mask = torch.zeros((len(names), width))
    for i, n in enumerate(names):
        row, loss = leaves[n]
        ids[i, : len(row)], attn[i, : len(row)] = torch.tensor(row), 1
        mask[i, : len(row)] = torch.tensor(loss, dtype=torch.float32)
    return ids, attn, mask


def _distinct_prefixes(ids: torch.Tensor, attn: torch.Tensor) -> int:
    """Tokens of the prefix tree, counted the other way: distinct non-empty row prefixes."""
    rows = [r[: int(a.sum())].tolist() for r, a in zip(ids, attn, strict=True)]
    return len({tuple(r[: k + 1]) for r in rows for k in range(len(r))})


def test_trie_layout_by_hand() -> None:
    ids, attn, mask = _rows()
    layout = pack_rows(ids, attn, mask > 0)
    assert layout is not None and layout.blocks == [(0, 7, PROMPT)]
    assert layout.tokens == TRIE_TOKENS == _distinct_prefixes(ids, attn)
    shapes = [
        (tuple(lv.index.shape), lv.context.shape[1], lv.valid.sum(1).tolist())
        for lv in layout.segments.levels
    ]
    assert shapes == [
        ((1, 12), 0, [12]),
        ((3, 20), 12, [16, 20, 9]),  # A-D's, E's, F-G's
        ((4, 14), 28, [14, 11, 6, 11]),  # A-D's, B-C's, F's, G's
        ((4, 7), 42, [7, 4, 6, 4]),  # A, B, C, D (placed by their first row)
    ]
    assert layout.attention_scores() == TRIE_SCORES
    # every (row, column) reads its own token at its own position
    real = attn.bool()
    packed_ids = layout.input_ids[0][layout.gather]
    assert torch.equal(packed_ids[real], ids[real])
    columns = torch.arange(ids.shape[1]).expand_as(ids)
    assert torch.equal(layout.positions[0][layout.gather][real], columns[real])
    # each position once: the gather reaches every packed token
    assert set(layout.gather[real].tolist()) == set(range(TRIE_TOKENS))
    prompt_only = pack_rows(ids, attn, mask > 0, share_turns=False)
    assert prompt_only is not None and prompt_only.tokens == PROMPT_ONLY_TOKENS
    assert len(prompt_only.segments.levels) == 2


def test_rows_sharing_only_their_prompt_pack_as_before() -> None:
    """A group's independent answers (two opening with the same MIN_SHARED_RUN - 1 tokens, a
    run too short to be a segment): the same layout with and without sharing turns."""
    g = torch.Generator().manual_seed(5)
    prompt = torch.randint(1, VOCAB, (10,), generator=g)
    opening = torch.randint(1, VOCAB, (MIN_SHARED_RUN - 1,), generator=g)
    lengths = [19, 14, 23]
    ids = torch.zeros((3, 10 + max(lengths)), dtype=torch.long)
    attn = torch.zeros_like(ids)
    for i, n in enumerate(lengths):
        ids[i, :10] = prompt
        ids[i, 10 : 10 + n] = torch.randint(1, VOCAB, (n,), generator=g)
        attn[i, : 10 + n] = 1
    ids[0, 10 : 10 + len(opening)] = ids[2, 10 : 10 + len(opening)] = opening
    wanted = attn.bool().clone()
    wanted[:, :10] = False
    trie, before = pack_rows(ids, attn, wanted), pack_rows(ids, attn, wanted, share_turns=False)
    assert trie is not None and before is not None
    assert trie.tokens == 10 + sum(lengths)
    for a, b in zip(trie.segments.levels, before.segments.levels, strict=True):
        for x, y in zip(vars(a).values(), vars(b).values(), strict=True):
            assert torch.equal(x, y)
    assert torch.equal(trie.input_ids, before.input_ids)
    assert torch.equal(trie.gather, before.gather)
    ids[1, 10 : 10 + len(opening)] = opening  # three rows open alike: still too short a run
    ids[[0, 1, 2], 10 + len(opening)] = ids[0, 10 + len(opening)]  # ... now MIN_SHARED_RUN
    shared = pack_rows(ids, attn, wanted)
    assert shared is not None
    assert shared.tokens == 10 + MIN_SHARED_RUN + sum(lengths) - 3 * MIN_SHARED_RUN


@pytest.mark.parametrize("dtype", [torch.float64, torch.bfloat16])
def test_level_attention_equals_the_block_masked_row(dtype) -> None:
    """Level by level (each segment against its ancestors and itself) == one attention over
    the whole packed row under the block mask, for the depth-3 trees."""
    ids, attn, mask = _rows()
    layout = pack_rows(ids, attn, mask > 0)
    assert layout is not None
    block = layout.block_mask()
    # by hand: C's last token sees the prompt, A-D's first turn, B-C's run and C's own tokens
    c_last = int(layout.gather[2, 44])
    seen = set(block[0, 0, c_last].nonzero().squeeze(1).tolist())
    assert seen == set(layout.gather[2, :45].tolist())
    total = layout.tokens
    g = torch.Generator().manual_seed(0)
    q = torch.randn(1, 4, total, 8, generator=g, dtype=torch.float64).to(dtype)
    k = torch.randn(1, 2, total, 8, generator=g, dtype=torch.float64).to(dtype)
    v = torch.randn(1, 2, total, 8, generator=g, dtype=torch.float64).to(dtype)
    outs, grads = [], []
    for fn in ("segments", "mask"):
        qq, kk, vv = (t.detach().clone().requires_grad_() for t in (q, k, v))
        if fn == "segments":
            out = packed_attention(qq, kk, vv, layout.segments, 0.3)
        else:
            out = grouped_attention(qq, kk, vv, block, 0.3)
        (out.float() * torch.arange(out.numel()).view_as(out).sin()).sum().backward()
        outs.append(out.detach().float())
        grads.append([t.grad.float() for t in (qq, kk, vv)])
    tol = {"atol": 1e-10, "rtol": 1e-9} if dtype == torch.float64 else {"atol": 2e-2, "rtol": 2e-2}
    torch.testing.assert_close(outs[0], outs[1], **tol)
    for a, b in zip(*grads, strict=True):
        torch.testing.assert_close(a, b, **tol)


@pytest.mark.parametrize("segment_attention", [True, False])
def test_same_numbers_as_the_plain_forward(segment_attention) -> None:
    """Logprobs, entropies, every position's state (a value head's) and gradients of the
    trees packed as a prefix tree equal the plain forward's; the trie is the chosen form."""
    ids, attn, mask = _rows("GABCFDE")  # the trees' leaves interleaved, rows of 7 lengths
    adv = torch.tensor([1.0, -0.5, 0.25, -1.0, 0.75, -0.25, 0.5])[:, None]
    results = []
    for share in (False, True):
        model = tiny_model(VOCAB, seed=1)
        if segment_attention:
            use_fast_cpu_attention(model)
        model.train()
        lp, ent, hidden = token_logprobs(
            model, ids, attn, chunk_size=8, with_entropy=True, return_hidden=True,
            positions=mask > 0, share_prefix=share,
        )  # fmt: skip
        assert hidden is not None
        loss = -(lp * adv * mask).sum() - 0.1 * (ent * mask).sum() + hidden[attn.bool()].sum()
        loss.backward()
        grads = {n: p.grad.clone() for n, p in model.named_parameters()}
        results.append((lp.detach(), ent.detach(), hidden.detach()[attn.bool()], grads))
    form = prefix_sharing.choose_form(model, ids, attn, (mask > 0) & attn.bool())
    assert form[0] == "packed" and form[1] is not None and form[1].tokens == TRIE_TOKENS
    (lp0, ent0, h0, g0), (lp1, ent1, h1, g1) = results
    assert (lp0 != 0).sum() == mask.sum()
    torch.testing.assert_close(lp1, lp0, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(ent1, ent0, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(h1, h0, atol=1e-5, rtol=1e-5)
    for name in g0:
        torch.testing.assert_close(g1[name], g0[name], atol=1e-5, rtol=1e-4, msg=name)


def _backbone_inputs(model) -> list[tuple[int, ...]]:
    """The shapes of the input ids every backbone forward of `model` receives, from now on."""
    seen: list[tuple[int, ...]] = []
    original = model.model.forward

    @functools.wraps(original)  # keeps the signature the cache keyword is read from
    def counting(*args, **kwargs):
        seen.append(tuple(kwargs["input_ids"].shape))
        return original(*args, **kwargs)

    model.model.forward = counting
    return seen


def test_each_shared_token_is_forwarded_once() -> None:
    """Counted on the tiny model: plain 7 x 49 tokens; prompt-only packing 202; the prefix
    tree 120, the number of distinct prefixes of the leaves (each shared token once)."""
    ids, attn, mask = _rows()
    model = tiny_model(VOCAB, seed=1)
    use_fast_cpu_attention(model)
    seen = _backbone_inputs(model)
    token_logprobs(model, ids, attn, positions=mask > 0, share_prefix=False)
    token_logprobs(model, ids, attn, positions=mask > 0, share_prefix=True)
    assert seen == [(7, 49), (1, TRIE_TOKENS)]
    assert TRIE_TOKENS == _distinct_prefixes(ids, attn) < PROMPT_ONLY_TOKENS < 7 * 49


def test_choose_form_counts_the_tries_tokens(monkeypatch) -> None:
    """Cost per layer = tokens x 6 x hidden + attention scores (hidden 32): plain
    343 x 192 + 7 x 49^2 = 82663; two passes over the 12-token prompt
    (12 + 7 x 37) x 192 + 7 x 37 x 49 = 64723; the trie 120 x 192 + 5788 = 28828 with this
    project's attention (level by level), 120 x 192 + 120^2 = 37440 with any other (the L x L
    block mask). With any other attention, packing only the prompt (202 x 192 + 202^2 = 79588)
    would lose to two passes: counting the trie's tokens is what picks packing."""
    ids, attn, mask = _rows()
    wanted = (mask > 0) & attn.bool()
    plain, two_pass = 343 * 192 + 7 * 49**2, (12 + 7 * 37) * 192 + 7 * 37 * 49
    assert (plain, two_pass) == (82663, 64723)
    for segment_attention, scores in ((True, TRIE_SCORES), (False, TRIE_TOKENS**2)):
        model = tiny_model(VOCAB, seed=1)
        if segment_attention:
            use_fast_cpu_attention(model)
        assert TRIE_TOKENS * 192 + scores < two_pass < plain
        form, layout, prefix = prefix_sharing.choose_form(model, ids, attn, wanted)
        assert (form, prefix) == ("packed", PROMPT)
        assert layout is not None and layout.tokens == TRIE_TOKENS
    assert PROMPT_ONLY_TOKENS * 192 + PROMPT_ONLY_TOKENS**2 == 79588 > two_pass
    prompt_only = functools.partial(pack_rows, share_turns=False)
    monkeypatch.setattr(prefix_sharing, "pack_rows", prompt_only)
    assert prefix_sharing.choose_form(model, ids, attn, wanted)[0] == "two_pass"


def test_micro_batch_bounds_by_hand() -> None:
    assert micro_batch_bounds(8, 4) == [(0, 4), (4, 8)]
    assert micro_batch_bounds(8, 4, [0, 0, 0, 1, 1, 1, 2, 2]) == [(0, 3), (3, 6), (6, 8)]
    assert micro_batch_bounds(6, 4, [0, 0, 0, 0, 0, 1]) == [(0, 4), (4, 6)]  # too big a tree
    assert micro_batch_bounds(7, 4, [0, 1, 1, 2, 2, 2, 2]) == [(0, 3), (3, 7)]
    assert micro_batch_bounds(5, 8, [0, 0, 1, 1, 1]) == [(0, 5)]  # both fit
    assert micro_batch_bounds(0, 4, []) == []
    with pytest.raises(ValueError, match="micro-batch size 0"):
        micro_batch_bounds(3, 0)


def _trajectories(names: str) -> list[Trajectory]:
    leaves = _leaves()
    rewards = {"A": 1.0, "B": 0.0, "C": 0.2, "D": 0.7, "E": 0.4, "F": 0.9, "G": 0.1}
    out = []
    for name in names:
        ids, mask = leaves[name]
        parent, shared, _ = LEAVES[name]
        out.append(
            Trajectory(
                token_ids=ids,
                loss_mask=mask,
                logprobs=[0.0] * len(ids),
                prompt_length=PROMPT,
                turn_spans=[(PROMPT, len(ids))],
                step_rewards=[],
                reward=rewards[name],
                group_id="g0",
                tree=TreePosition(
                    tree_id=f"g0#{TREE[name]}",
                    leaf="ABCDEFG".index(name),
                    parent=-1 if parent is None else "ABCDEFG".index(parent),
                    shared_tokens=shared,
                ),
            )
        )
    return out


def test_tree_order_brings_a_trees_leaves_together() -> None:
    batch = collate(_trajectories("GABFCDE"), 0)
    assert batch.tree_ids is not None and batch.tree_ids.tolist() == [0, 1, 1, 0, 1, 1, 1]
    assert tree_order(batch, torch.arange(7)).tolist() == [0, 3, 1, 2, 4, 5, 6]
    rows = torch.tensor([4, 0, 1])
    assert tree_order(batch, rows).tolist() == [4, 1, 0]


def test_learner_update_shares_each_trees_turns_once() -> None:
    """update() with micro-batches of 5: the two trees' leaves (interleaved in the batch) run
    as one micro-batch per tree, each a packed prefix tree (tree 1: 12 + 9 + 6 + 11 tokens,
    tree 0: 12 + 16 + 20 + 14 + 11 + 7 + 4 + 4 + 6), and the weights end up as without
    sharing; pi_old recomputed with sharing equals it without, in batch order."""
    from agentic_rl.config.load import load_config
    from agentic_rl.learner.advantages import compute_advantages
    from agentic_rl.learner.update import forward_no_grad, update

    trajs = _trajectories("GABFCDE")
    tiny = tiny_model(VOCAB, seed=2)
    models, old = [], []
    for share in (False, True):
        cfg = load_config(
            None,
            [
                "model.name=tiny",
                "optim.micro_batch_size=5",
                f"model.share_prefix={share}",
                "algo.ppo_mini_batches=1",
                "algo.clip_high=0.2",
            ],
        )
        model = copy.deepcopy(tiny)
        batch = collate(trajs, 0)
        seen = _backbone_inputs(model)
        lp, _ = forward_no_grad(model, batch, 8, 5, share_prefix=share)
        old.append(lp)
        compute_advantages(batch, cfg.algo)
        assert bool((batch.advantages * batch.loss_mask != 0).any(dim=1).all())
        update(model, torch.optim.SGD(model.parameters(), lr=1.0), batch, cfg)
        models.append(model)
        if share:  # pi_old: trees in batch order (tree 1 first); then the update's two
            assert seen == [(1, 38), (1, 94), (1, 38), (1, 94)]
        else:
            assert seen == [(5, 49), (2, 49)] * 2
    torch.testing.assert_close(old[1], old[0], atol=1e-5, rtol=1e-5)
    changed = False
    for p0, p1, p in zip(
        models[0].parameters(), models[1].parameters(), tiny.parameters(), strict=True
    ):
        torch.testing.assert_close(p1, p0, atol=1e-5, rtol=1e-4)
        changed |= not torch.equal(p0, p)
    assert changed


def test_duplicate_leaves_and_rows_that_end_inside_a_shared_run() -> None:
    """Two leaves that sampled the same continuation, a leaf that is a strict prefix of them
    (it ends inside their shared run), and one that ends 3 tokens into a run too short to be a
    segment: the plain forward's logprobs and gradients."""
    leaves = _leaves()
    a = leaves["A"][0]
    rows = [a, list(a), a[:45], a[:30] + [1, 2, 3], a[:30] + [1, 2, 3, 4, 5, 6], leaves["E"][0]]
    width = max(map(len, rows))
    ids = torch.zeros((len(rows), width), dtype=torch.long)
    attn = torch.zeros_like(ids)
    for i, r in enumerate(rows):
        ids[i, : len(r)], attn[i, : len(r)] = torch.tensor(r), 1
    wanted = attn.bool().clone()
    wanted[:, :PROMPT] = False
    layout = pack_rows(ids, attn, wanted)
    # [12, 30) shared by the five, [30, 45) by the three; in each row's own segment, as runs
    # shorter than MIN_SHARED_RUN: the twins' last 4 tokens and the [1, 2, 3] two rows open with
    assert layout is not None and layout.tokens == _distinct_prefixes(ids, attn) + 4 + 3
    results = []
    for share in (False, True):
        model = tiny_model(VOCAB, seed=3)
        use_fast_cpu_attention(model)
        lp, _, _ = token_logprobs(model, ids, attn, positions=wanted, share_prefix=share)
        (lp * wanted).sum().backward()
        results.append((lp.detach(), {n: p.grad.clone() for n, p in model.named_parameters()}))
    torch.testing.assert_close(results[1][0], results[0][0], atol=1e-5, rtol=1e-5)
    for name, grad in results[0][1].items():
        torch.testing.assert_close(results[1][1][name], grad, atol=1e-5, rtol=1e-4, msg=name)


def _step_rows(opening: int, seed: int = 3) -> tuple[torch.Tensor, ...]:
    """Step-mode samples: each row opens with the same `opening` tokens (the episode's prompt),
    then a window of steps of its own (loss 0) and its turn (loss 1): prompts differ."""
    g = torch.Generator().manual_seed(seed)
    head = torch.randint(1, VOCAB, (opening,), generator=g)
    parts = [(9, 5), (14, 3), (4, 6), (11, 2)]  # (window, turn) per row
    width = opening + max(w + t for w, t in parts)
    ids = torch.zeros((len(parts), width), dtype=torch.long)
    attn, mask = torch.zeros_like(ids), torch.zeros((len(parts), width))
    for i, (w, t) in enumerate(parts):
        n = opening + w + t
        ids[i, :opening] = head
        ids[i, opening:n] = torch.randint(1, VOCAB, (w + t,), generator=g)
        attn[i, :n], mask[i, opening + w : n] = 1, 1.0
    return ids, attn, mask


def test_rows_whose_prompts_differ_share_what_they_open_with() -> None:
    """Step samples (the episode's prompt, then other steps): one block whose root is the
    common opening, each row's own tokens after it; the same numbers as the plain forward. An
    opening shorter than MIN_SHARED_RUN is not shared, and neither is any without sharing turns."""
    ids, attn, mask = _step_rows(20)
    own = int(attn.sum()) - 4 * 20
    layout = pack_rows(ids, attn, mask > 0)
    assert layout is not None and layout.blocks == [(0, 4, 20)]
    assert layout.tokens == 20 + own == _distinct_prefixes(ids, attn)
    separate = pack_rows(ids, attn, mask > 0, share_turns=False)
    assert separate is not None and len(separate.blocks) == 4 and separate.tokens == 80 + own
    short_ids, short_attn, short_mask = _step_rows(MIN_SHARED_RUN - 1)
    short = pack_rows(short_ids, short_attn, short_mask > 0)
    assert short is not None and len(short.blocks) == 4
    adv = torch.tensor([1.0, -0.5, 0.25, -1.0])[:, None]
    results = []
    for share in (False, True):
        model = tiny_model(VOCAB, seed=1)
        use_fast_cpu_attention(model)
        model.train()
        lp = token_logprobs(model, ids, attn, positions=mask > 0, share_prefix=share)[0]
        (-(lp * adv * mask).sum()).backward()
        results.append((lp.detach(), {n: p.grad.clone() for n, p in model.named_parameters()}))
    form = prefix_sharing.choose_form(model, ids, attn, (mask > 0) & attn.bool())
    assert form[0] == "packed" and form[1] is not None and form[1].tokens == 20 + own
    (lp0, g0), (lp1, g1) = results
    torch.testing.assert_close(lp1, lp0, atol=1e-5, rtol=1e-5)
    for name in g0:
        torch.testing.assert_close(g1[name], g0[name], atol=1e-5, rtol=1e-4, msg=name)
