import pytest
import torch

from agentic_rl.backends.hf import HFGenerator
from agentic_rl.backends.sampling import top_p_filter
from agentic_rl.model.load import token_logprobs
from agentic_rl.types import SamplingParams


def prompts(tokenizer, n=3):
    texts = ["Hello there", "What is the capital of", "A"][:n]
    return [tokenizer(t)["input_ids"] for t in texts]


def test_greedy_is_deterministic_and_respects_budget(tiny, tokenizer):
    gen = HFGenerator(tiny, tokenizer)
    params = SamplingParams(max_new_tokens=7, temperature=0.0)
    a = gen.generate(prompts(tokenizer), params)
    b = gen.generate(prompts(tokenizer), params)
    assert [c.token_ids for c in a] == [c.token_ids for c in b]
    for c in a:
        assert len(c.token_ids) <= 7
        assert len(c.logprobs) == len(c.token_ids)
        if c.finish_reason == "length":
            assert len(c.token_ids) == 7


def test_sampling_is_seeded(tiny, tokenizer):
    gen = HFGenerator(tiny, tokenizer)
    run = lambda seed: [  # noqa: E731
        c.token_ids
        for c in gen.generate(prompts(tokenizer), SamplingParams(max_new_tokens=6, seed=seed))
    ]
    assert run(1) == run(1)
    assert run(1) != run(2)


def test_behaviour_logprobs_match_the_learner(tiny, tokenizer):
    """Generation logprobs (KV cache, left padding) equal a fresh right-padded forward."""
    gen = HFGenerator(tiny, tokenizer)
    ps = prompts(tokenizer)
    outs = gen.generate(ps, SamplingParams(max_new_tokens=8, seed=3))
    for p, c in zip(ps, outs, strict=True):
        ids = torch.tensor([p + c.token_ids])
        lp, _, _ = token_logprobs(tiny, ids, torch.ones_like(ids))
        torch.testing.assert_close(lp[0, len(p) :], torch.tensor(c.logprobs), atol=1e-4, rtol=0)


def test_stop_strings_end_generation(tiny, tokenizer):
    gen = HFGenerator(tiny, tokenizer)
    free = gen.generate(prompts(tokenizer, 1), SamplingParams(max_new_tokens=12, temperature=0))
    text = tokenizer.decode(free[0].token_ids[:5])
    assert len(text) >= 2
    stop = text[-2:]  # a string the greedy continuation is known to produce by token 5
    out = gen.generate(
        prompts(tokenizer, 1), SamplingParams(max_new_tokens=12, temperature=0, stop=[stop])
    )[0]
    assert out.finish_reason == "stop"
    assert stop in tokenizer.decode(out.token_ids)
    assert len(out.token_ids) <= 5
    assert out.token_ids == free[0].token_ids[: len(out.token_ids)]


def test_finished_sequences_leave_the_batch(tiny, tokenizer):
    """Rows with a budget of 1 token must not be decoded again: count rows per forward."""
    seen: list[int] = []
    hook = tiny.register_forward_hook(
        lambda m, a, k, out: seen.append(k["input_ids"].shape[0]), with_kwargs=True
    )
    gen = HFGenerator(tiny, tokenizer)
    params = [SamplingParams(max_new_tokens=b, temperature=0) for b in (1, 1, 6)]
    outs = gen.generate(prompts(tokenizer), params)
    hook.remove()
    assert [len(c.token_ids) for c in outs][:2] == [1, 1]
    assert seen[0] == 3  # prefill of the whole batch
    assert set(seen[1:]) <= {1}  # the two finished rows left after the first token


def test_top_p_keeps_the_nucleus():
    logits = torch.log(torch.tensor([[0.5, 0.3, 0.15, 0.05]]))
    kept = top_p_filter(logits, torch.tensor([0.7]))
    assert torch.isfinite(kept).tolist() == [[True, True, False, False]]
    kept = top_p_filter(logits, torch.tensor([1.0]))
    assert torch.isfinite(kept).all()


def test_bad_requests(tiny, tokenizer):
    gen = HFGenerator(tiny, tokenizer)
    with pytest.raises(ValueError, match="empty prompt"):
        gen.generate([[]], SamplingParams())
    with pytest.raises(ValueError, match="sampling params"):
        gen.generate([[1], [2]], [SamplingParams()])


def test_group_prompts_are_prefilled_once(tiny, tokenizer):
    gen = HFGenerator(tiny, tokenizer)
    p = prompts(tokenizer, 1)[0]
    outs = gen.generate([p] * 8, SamplingParams(max_new_tokens=4, seed=0))
    assert gen.prompt_tokens == len(p)  # one prefill for the 8 identical prompts
    assert len({tuple(c.token_ids) for c in outs}) > 1  # but 8 independent samples


def test_next_turn_reuses_the_kv_of_the_previous_one(tiny, tokenizer):
    """Turn 2 = turn-1 prompt + completion + observation: only the new tokens are prefilled,
    and the result equals a generator without the cache."""
    cached, plain = HFGenerator(tiny, tokenizer), HFGenerator(tiny, tokenizer, prefix_cache=False)
    ps = prompts(tokenizer)
    greedy = SamplingParams(max_new_tokens=5, temperature=0)
    first = cached.generate(ps, greedy)
    assert first == plain.generate(ps, greedy)
    observation = tokenizer("\n<information>42</information>\n")["input_ids"]
    turn2 = [p + c.token_ids + observation for p, c in zip(ps, first, strict=True)]
    before = cached.prompt_tokens
    second = cached.generate(turn2, greedy)
    new_tokens = cached.prompt_tokens - before
    assert new_tokens == sum(1 + len(observation) for _ in ps)  # last sampled token + obs
    assert cached.reused_tokens == sum(
        len(p) + len(c.token_ids) - 1 for p, c in zip(ps, first, strict=True)
    )
    reference = plain.generate(turn2, greedy)
    for a, b in zip(second, reference, strict=True):
        assert a.token_ids == b.token_ids
        torch.testing.assert_close(
            torch.tensor(a.logprobs), torch.tensor(b.logprobs), atol=1e-4, rtol=0
        )


def test_changed_weights_invalidate_the_kv(tiny, tokenizer):
    gen = HFGenerator(tiny, tokenizer)
    ps = prompts(tokenizer, 2)
    first = gen.generate(ps, SamplingParams(max_new_tokens=3, temperature=0))
    with torch.no_grad():  # an optimiser step, in place
        for p in tiny.parameters():
            p.mul_(1.01)
    turn2 = [p + c.token_ids + [13] for p, c in zip(ps, first, strict=True)]
    reused = gen.reused_tokens
    gen.generate(turn2, SamplingParams(max_new_tokens=2, temperature=0))
    assert gen.reused_tokens == reused


def test_an_episode_back_in_another_call_reuses_its_own_kv(tiny, tokenizer):
    """Two episodes decoded together, then each continued in a call of its own (the continuous
    schedule, rollout.env_workers > 0): each reuses its own turn's KV, and the tokens equal a
    generator without the cache."""
    cached, plain = HFGenerator(tiny, tokenizer), HFGenerator(tiny, tokenizer, prefix_cache=False)
    ps = prompts(tokenizer, 2)
    greedy = SamplingParams(max_new_tokens=5, temperature=0)
    first = cached.generate(ps, greedy)
    observation = tokenizer("\n<information>42</information>\n")["input_ids"]
    turn2 = [p + c.token_ids + observation for p, c in zip(ps, first, strict=True)]
    for row in (1, 0):  # B comes back first, alone; A after it, in a call of its own
        before, reused = cached.prompt_tokens, cached.reused_tokens
        (second,) = cached.generate([turn2[row]], greedy)
        assert cached.prompt_tokens - before == 1 + len(observation)
        assert cached.reused_tokens - reused == len(ps[row]) + len(first[row].token_ids) - 1
        (reference,) = plain.generate([turn2[row]], greedy)
        assert second.token_ids == reference.token_ids
        assert second.logprobs == pytest.approx(reference.logprobs, abs=1e-4)


def test_the_kept_kv_is_bounded_by_the_widest_call(tiny, tokenizer):
    """The store keeps at most as many entries, with the running call's rows, as the widest
    call had rows; the oldest goes first. Two episodes, then an unrelated prompt: the first
    episode's KV makes room for it, the second's is still reused."""
    gen = HFGenerator(tiny, tokenizer)
    ps = prompts(tokenizer, 3)
    greedy = SamplingParams(max_new_tokens=4, temperature=0)
    first = gen.generate(ps[:2], greedy)
    assert len(gen._kv_store) == 2
    gen.generate([ps[2]], greedy)  # 2 kept + 1 running > 2 rows: the oldest (row 0) dropped
    assert len(gen._kv_store) == 2
    turn2 = [p + c.token_ids + [13] for p, c in zip(ps[:2], first, strict=True)]
    gen.generate([turn2[1]], greedy)
    assert gen.reused_tokens == len(ps[1]) + len(first[1].token_ids) - 1
    reused = gen.reused_tokens
    gen.generate([turn2[0]], greedy)
    assert gen.reused_tokens == reused  # dropped: prefilled again
