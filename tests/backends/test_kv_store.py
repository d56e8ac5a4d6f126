"""The HF generator's KV store (backends/kv_store.py): longest-prefix reuse with the KV cut to
the shared length, by hand on small tensors, then on the tiny model against a prefill from
scratch; the bound; invalidation when the weights change."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from agentic_rl.backends.hf import HFGenerator
from agentic_rl.backends.kv_store import Hit, KVStore, common_prefix
from agentic_rl.types import SamplingParams


def fake_kv(tokens: tuple[int, ...], layers: int = 2) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """KV whose value at position t is the token at t (keys) and minus it (values), per layer,
    in the store's layout [heads=1, positions, head_dim=2]: a cut shows which positions it kept."""
    col = torch.tensor(tokens, dtype=torch.float32).view(1, -1, 1).repeat(1, 1, 2)
    return [(col + layer, -col - layer) for layer in range(layers)]


def test_common_prefix_by_hand():
    a = np.array([5, 6, 7, 8])
    assert common_prefix(a, np.array([5, 6, 9])) == 2
    assert common_prefix(a, np.array([5, 6])) == 2  # one starts the other
    assert common_prefix(a, np.array([1, 6, 7, 8])) == 0
    assert common_prefix(a, a) == 4
    assert common_prefix(a, np.array([], dtype=np.int64)) == 0


def test_longest_shared_prefix_is_reused_cut_to_its_length():
    store = KVStore(cut_prefixes=True)
    store.put((1, 2, 3, 4, 5), fake_kv((1, 2, 3, 4, 5)))
    store.put((1, 2, 9), fake_kv((1, 2, 9)))
    hit = store.lookup((1, 2, 3, 7, 7))  # shares 3 tokens with the first, 2 with the second
    assert hit.length == 3 and hit.pictures == 0
    for layer, (k, v) in enumerate(hit.kv):
        assert k.shape == (1, 3, 2)
        assert k[0, :, 0].tolist() == [1 + layer, 2 + layer, 3 + layer]
        assert v[0, :, 0].tolist() == [-1 - layer, -2 - layer, -3 - layer]
    # A prompt inside an entry (a branch at its parent's turn boundary): all but its last token,
    # whose logits the prefill must still give.
    assert store.lookup((1, 2, 3, 4)).length == 3
    assert store.lookup((1,)).length == 0  # one token: nothing to reuse
    assert store.lookup((8, 1, 2)) == Hit()  # a miss: no shared first token


def test_take_drops_continued_entries_and_keeps_a_parent_read_in_part():
    store = KVStore(cut_prefixes=True)
    parent, own = (1, 2, 3, 4, 5, 6), (1, 2, 7, 8)
    store.put(parent, fake_kv(parent))
    store.put(own, fake_kv(own))
    hits = store.take([(1, 2, 3, 4), (1, 2, 7, 8, 9)], [(), ()])
    assert [h.length for h in hits] == [3, 4]
    assert len(store) == 1 and store.lookup((1, 2, 3, 4, 5, 6, 0)).length == 6  # parent kept
    store.take([(1, 2, 3, 4, 5, 6, 0)], [()])  # continued: its row's KV will replace it
    assert len(store) == 0


def test_an_entry_with_pictures_is_reused_only_whole_and_with_its_pictures():
    store = KVStore(cut_prefixes=True)
    store.put((1, 2, 3), fake_kv((1, 2, 3)), ("a",))
    assert store.lookup((1, 2, 3, 4), ("a", "b")) == store.lookup((1, 2, 3, 4), ("a",))
    assert store.lookup((1, 2, 3, 4), ("a",)).length == 3
    assert store.lookup((1, 2, 3, 4), ("a",)).pictures == 1
    assert store.lookup((1, 2, 3, 4), ("b",)) == Hit()  # other pictures behind equal tokens
    assert store.lookup((1, 2, 5, 6), ("a",)) == Hit()  # a cut could split a picture
    store.take([(1, 2, 3, 4)], [("b",)])
    assert len(store) == 1  # another episode's entry: not continued, kept


def test_the_bound_is_kv_rows_or_the_widest_call():
    store = KVStore(min_rows=3, cut_prefixes=True)
    for first in range(5):  # five one-row calls of different prompts
        store.note_rows(1)
        store.fit(1)
        store.put((first, 1, 2, 3), fake_kv((first, 1, 2, 3)))
        assert len(store) <= 3
    assert len(store) == 3 and store.positions == 3 * 4
    assert store.lookup((0, 1, 2, 3, 4)) == Hit()  # the oldest went first
    assert store.lookup((4, 1, 2, 3, 4)).length == 4
    store.note_rows(5)  # a wider call widens it
    assert store.rows == 5


# --- on the tiny model -----------------------------------------------------------------------


def text(tokenizer, s: str) -> list[int]:
    return tokenizer(s)["input_ids"]


def test_a_prompt_sharing_a_prefix_reuses_it_and_samples_as_a_fresh_prefill(tiny, tokenizer):
    """A second prompt that leaves a stored row part way (a branch after its parent's turn)
    prefills only what it does not share; with the same seeds it samples the same tokens, and
    their logprobs are close, as a generator that prefills everything."""
    cached, plain = (
        HFGenerator(tiny, tokenizer, cut_prefixes=True),
        HFGenerator(tiny, tokenizer, prefix_cache=False),
    )
    params = SamplingParams(max_new_tokens=6, seed=11)
    base = text(tokenizer, "Question: what is 2 + 3? Think step by step.")
    (first,) = cached.generate([base + text(tokenizer, " First")], params)
    parent = base + text(tokenizer, " First") + first.token_ids
    branches = [  # leaves the parent after `base`; a prefix of the parent; the parent plus more
        base + text(tokenizer, " Second try"),
        parent[: len(base) + 3],
        parent + text(tokenizer, " ok"),
    ]
    shared = [len(base), len(base) + 2, len(parent) - 1]
    for prompt, reuse in zip(branches, shared, strict=True):
        before, reused = cached.prompt_tokens, cached.reused_tokens
        (out,) = cached.generate([prompt], params)
        assert cached.reused_tokens - reused == reuse
        assert cached.prompt_tokens - before == len(prompt) - reuse
        (ref,) = plain.generate([prompt], params)
        assert out.token_ids == ref.token_ids
        assert out.logprobs == pytest.approx(ref.logprobs, abs=1e-4)
        # Each call's row is kept: restore the parent as the newest entry for the next prompt.
        cached.generate([base + text(tokenizer, " First")], params)


def test_rows_of_one_call_reuse_one_parent_at_different_lengths(tiny, tokenizer):
    """Branches of one parent at two turn boundaries, in one call: both read the parent (cut to
    each one's length), which stays for later ones; the tokens equal a fresh prefill's."""
    cached = HFGenerator(tiny, tokenizer, kv_rows=3, cut_prefixes=True)
    plain = HFGenerator(tiny, tokenizer, prefix_cache=False)
    greedy = SamplingParams(max_new_tokens=8, temperature=0)
    base = text(tokenizer, "Tell me a story about a cat")
    (first,) = cached.generate([base], greedy)
    parent = base + first.token_ids
    prompts = [parent[: len(base) + 2] + [13], parent[: len(base) + 5] + [13]]
    out = cached.generate(prompts, greedy)
    assert cached.reused_tokens == (len(base) + 2) + (len(base) + 5)
    assert [c.token_ids for c in out] == [c.token_ids for c in plain.generate(prompts, greedy)]
    assert len(cached._kv_store) == 3  # the parent and the two branches' rows


def test_an_episode_that_ended_keeps_its_kv_for_its_branches(tiny, tokenizer):
    """A row that ends with the end-of-sequence token is kept too: a tree's later round
    branches from its turn boundaries."""
    gen = HFGenerator(tiny, tokenizer, eos_token_ids=list(range(len(tokenizer))), cut_prefixes=True)
    base = text(tokenizer, "Hello there, how are")
    (out,) = gen.generate([base], SamplingParams(max_new_tokens=4, seed=0))
    assert out.finish_reason == "eos" and len(out.token_ids) == 1  # every token ends it
    gen.generate([base + [13]], SamplingParams(max_new_tokens=1, seed=0))
    assert gen.reused_tokens == len(base)


def test_changed_weights_drop_the_shared_prefix_too(tiny, tokenizer):
    gen = HFGenerator(tiny, tokenizer, cut_prefixes=True)
    greedy = SamplingParams(max_new_tokens=4, temperature=0)
    base = text(tokenizer, "What is the capital of France")
    gen.generate([base + [13]], greedy)
    with torch.no_grad():  # an optimiser step, in place
        for p in tiny.parameters():
            p.mul_(1.01)
    gen.generate([base + [14]], greedy)
    assert gen.reused_tokens == 0
    gen.generate([base + [15]], greedy)
    assert gen.reused_tokens == len(base)  # the new weights' row is reused
    gen.update_weights(None)
    assert len(gen._kv_store) == 0


def test_kv_rows_keeps_a_parent_through_narrower_calls(tiny, tokenizer):
    """A tree round plays fewer rows than the rollout has episodes: with kv_rows the parents'
    KV outlives narrower calls of other rows, and the store stays within kv_rows rows; without
    it the widest call's rows bound the store and the oldest parent makes room."""
    greedy = SamplingParams(max_new_tokens=3, temperature=0)
    parents = [text(tokenizer, s) for s in ("Alpha beta gamma", "One two three", "Red green")]
    others = [text(tokenizer, s) for s in ("Zebra crossing", "Yellow submarine")]
    for kv_rows, reused in ((0, 0), (5, len(parents[0]))):
        gen = HFGenerator(tiny, tokenizer, kv_rows=kv_rows, cut_prefixes=True)
        gen.generate(parents, greedy)
        for other in others:  # other episodes' one-row calls in between
            gen.generate([other], greedy)
            assert len(gen._kv_store) == (3 if kv_rows == 0 else 4 + others.index(other))
        gen.generate([parents[0] + [13]], greedy)
        assert gen.reused_tokens == reused
        assert len(gen._kv_store) <= max(kv_rows, 3)
    with pytest.raises(ValueError, match="kv_rows"):
        HFGenerator(tiny, tokenizer, kv_rows=-1)


def test_a_tree_rollouts_generator_keeps_room_for_its_episodes():
    from agentic_rl.backends.base import make_generator
    from agentic_rl.config.load import load_config
    from agentic_rl.model.load import load_policy

    tree = ["rollout.tree.roots=2", "rollout.tree.expansions=3", "rollout.group_size=8"]
    for overrides, rows in (([], 0), (tree, 2 * 8)):
        cfg = load_config(None, ["model.name=tiny", "rollout.tasks_per_step=2", *overrides])
        policy, tok = load_policy(cfg.model)
        assert make_generator(cfg, policy, tok)._kv_store.rows == rows


def test_without_cut_prefixes_only_an_entry_continued_whole_is_reused():
    """Outside tree rollouts (cut_prefixes off) a prompt never reads part of another row's KV:
    a replayed episode must get the undisturbed run's logprobs bit for bit (a cut entry's KV
    comes from another forward), while an episode's own earlier turn is still reused."""
    kv = [(torch.zeros(1, 4, 2), torch.zeros(1, 4, 2))]
    store = KVStore()
    store.put((1, 2, 3, 4), kv)
    assert store.lookup((1, 2, 3, 9)) == Hit()  # shares 3 tokens only: no reuse
    (hit,) = store.take([(1, 2, 3, 4, 5)], [()])  # continues the entry whole
    assert hit.length == 4 and hit.kv is kv
    assert len(store) == 0  # continued: the row's own KV replaces it
