"""Output heads beyond h W^T (lm_head bias, Gemma-2's soft cap, Granite's logits_scaling,
Cohere's logit_scale, Falcon-H1's lm_head_multiplier): the learner's logprobs, entropies and
gradients equal those of the model's own forward logits, on tiny random configs of each
architecture in the installed transformers; a head the learner cannot reproduce is refused at
load. And dropout is off for RL."""

from __future__ import annotations

import pytest
import torch
import transformers
from torch import nn

from agentic_rl.model.errors import ModelLoadError
from agentic_rl.model.load import (
    check_output_head,
    disable_dropout,
    output_head,
    token_logprobs,
)

VOCAB = 128
LLAMA_LIKE = {
    "vocab_size": VOCAB,
    "hidden_size": 32,
    "intermediate_size": 64,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "max_position_embeddings": 64,
}
GPT_LIKE = {"vocab_size": VOCAB, "n_embd": 32, "n_layer": 2, "n_head": 4, "n_positions": 64}

# architecture: (config class, model class, config kwargs, is the head plain?)
ARCHITECTURES = {
    "llama": ("LlamaConfig", "LlamaForCausalLM", {}, True),
    "gemma2": ("Gemma2Config", "Gemma2ForCausalLM", {"final_logit_softcapping": 2.0}, False),
    "gemma3": (
        "Gemma3TextConfig",
        "Gemma3ForCausalLM",
        {"final_logit_softcapping": 2.0, "head_dim": 8},
        False,
    ),
    "granite": ("GraniteConfig", "GraniteForCausalLM", {"logits_scaling": 4.0}, False),
    "granitemoe": (
        "GraniteMoeConfig",
        "GraniteMoeForCausalLM",
        {"logits_scaling": 4.0, "num_local_experts": 2, "num_experts_per_tok": 1},
        False,
    ),
    "cohere": ("CohereConfig", "CohereForCausalLM", {"logit_scale": 0.25}, False),
    "cohere2": ("Cohere2Config", "Cohere2ForCausalLM", {"logit_scale": 0.25}, False),
    "phi": ("PhiConfig", "PhiForCausalLM", {}, False),  # lm_head bias
    "gptj": ("GPTJConfig", "GPTJForCausalLM", {"rotary_dim": 4}, False),  # lm_head bias
    "codegen": ("CodeGenConfig", "CodeGenForCausalLM", {"rotary_dim": 4}, False),  # bias
}


def tiny(arch: str, seed: int = 0, **extra) -> nn.Module:
    config_name, model_name, kwargs, _ = ARCHITECTURES[arch]
    if not hasattr(transformers, config_name) or not hasattr(transformers, model_name):
        pytest.skip(f"{model_name} is not in the installed transformers")
    base = GPT_LIKE if arch in ("gptj", "codegen") else LLAMA_LIKE
    config = getattr(transformers, config_name)(**{**base, **kwargs, **extra})
    config.use_cache = False
    torch.manual_seed(seed)
    model = getattr(transformers, model_name)(config).float()
    with torch.no_grad():  # logits of a few units, so caps and scales matter; a real bias
        head = model.get_output_embeddings()
        head.weight.mul_(3.0 / head.weight.std())
        if head.bias is not None:
            head.bias.normal_(0.0, 2.0)
    disable_dropout(model)
    return model


def own_logprobs(model: nn.Module, ids: torch.Tensor, attn: torch.Tensor):
    """Logprobs and entropies [B, T] (0 at position 0) from the model's own forward logits."""
    logits = model(input_ids=ids, attention_mask=attn).logits[:, :-1].float()
    logp = torch.log_softmax(logits, -1)
    lp = logp.gather(-1, ids[:, 1:, None]).squeeze(-1)
    ent = -(logp.exp() * logp).sum(-1)
    pad = torch.zeros(ids.shape[0], 1)
    return torch.cat([pad, lp], 1), torch.cat([pad, ent], 1)


def assert_same_gradients(got: dict, want: dict) -> None:
    """Equal up to float32 rounding, relative to each tensor's largest entry (the gradients of
    these deliberately sharp heads reach ~1e3)."""
    assert got.keys() == want.keys()
    for name, value in want.items():
        scale = max(1.0, float(value.abs().max()))
        assert float((got[name] - value).abs().max()) <= 2e-5 * scale, name


@pytest.mark.parametrize("keep_probs", [False, True])
@pytest.mark.parametrize("arch", list(ARCHITECTURES))
def test_learner_logprobs_and_gradients_match_the_models_own_logits(arch, keep_probs) -> None:
    model = tiny(arch)
    model.train()  # as in the learner (dropout is off)
    assert output_head(model).plain == ARCHITECTURES[arch][3]
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(0, VOCAB, (2, 10), generator=g)
    attn = torch.ones_like(ids)
    w_lp, w_ent = torch.randn(2, 10, generator=g), torch.randn(2, 10, generator=g)

    def grads(loss: torch.Tensor) -> dict[str, torch.Tensor]:
        model.zero_grad(set_to_none=True)
        loss.backward()
        return {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}

    want_lp, want_ent = own_logprobs(model, ids, attn)
    want = grads((want_lp * w_lp).sum() + (want_ent * w_ent).sum())
    got_lp, got_ent, _ = token_logprobs(
        model, ids, attn, chunk_size=3, with_entropy=True, keep_probs=keep_probs
    )
    torch.testing.assert_close(got_lp, want_lp.detach(), atol=2e-5, rtol=1e-5)
    torch.testing.assert_close(got_ent, want_ent.detach(), atol=2e-5, rtol=1e-5)
    got = grads((got_lp * w_lp).sum() + (got_ent * w_ent).sum())
    assert_same_gradients(got, want)
    # policy-gradient only (the learner's usual case; the kept-softmax path when asked)
    lp_only, _, _ = token_logprobs(model, ids, attn, keep_probs=keep_probs)
    ref_lp, _ = own_logprobs(model, ids, attn)
    got = grads((lp_only * w_lp).sum())
    assert_same_gradients(got, grads((ref_lp * w_lp).sum()))
    if not output_head(model).plain:  # the head matters: plain h W^T would be wrong
        with torch.no_grad():
            hidden = model.get_decoder()(input_ids=ids).last_hidden_state[:, :-1]
            plain = torch.log_softmax(hidden @ model.get_output_embeddings().weight.T, -1)
            plain = plain.gather(-1, ids[:, 1:, None]).squeeze(-1)
        assert (plain - ref_lp[:, 1:].detach()).abs().max() > 0.05


def test_falcon_h1_lm_head_multiplier() -> None:
    if not hasattr(transformers, "FalconH1ForCausalLM"):
        pytest.skip("FalconH1 is not in the installed transformers")
    config = transformers.FalconH1Config(
        **LLAMA_LIKE,
        head_dim=8,
        mamba_d_ssm=32,
        mamba_n_heads=4,
        mamba_d_head=8,
        mamba_n_groups=1,
        mamba_d_state=8,
        mamba_d_conv=4,
        mamba_chunk_size=8,
        lm_head_multiplier=0.3,
    )
    torch.manual_seed(0)
    model = transformers.FalconH1ForCausalLM(config).float()
    with torch.no_grad():
        model.lm_head.weight.mul_(3.0 / model.lm_head.weight.std())
    assert output_head(model).scale == pytest.approx(0.3)
    check_output_head(model, "falcon-h1-tiny")  # no error: the learner reproduces it


def test_a_head_the_learner_cannot_reproduce_is_refused_naming_the_model() -> None:
    class OddHead(transformers.LlamaForCausalLM):
        def forward(self, *args, **kwargs):
            out = super().forward(*args, **kwargs)
            out.logits = out.logits * 3.0 + torch.arange(out.logits.shape[-1])  # unknown
            return out

    config = transformers.LlamaConfig(**LLAMA_LIKE)
    torch.manual_seed(0)
    model = OddHead(config)
    check_output_head(tiny("llama"), "plain")  # a plain head passes
    with pytest.raises(ModelLoadError, match=r"odd-model.*llama, OddHead.*cannot reproduce"):
        check_output_head(model, "odd-model")


@pytest.mark.parametrize("arch", ["llama", "phi", "gptj"])
def test_dropout_is_off_so_the_training_forward_is_deterministic(arch) -> None:
    """A tiny config with attention (and residual / embedding) dropout 0.5: after
    disable_dropout, two train-mode forwards and the eval-mode forward agree exactly."""
    extra = {
        "llama": {"attention_dropout": 0.5},
        "phi": {"attention_dropout": 0.5, "resid_pdrop": 0.5, "embd_pdrop": 0.5},
        "gptj": {"attn_pdrop": 0.5, "resid_pdrop": 0.5, "embd_pdrop": 0.5},
    }[arch]
    config_name, model_name, kwargs, _ = ARCHITECTURES[arch]
    base = GPT_LIKE if arch == "gptj" else LLAMA_LIKE
    config = getattr(transformers, config_name)(**{**base, **kwargs, **extra})
    torch.manual_seed(0)
    model = getattr(transformers, model_name)(config)
    ids = torch.randint(0, VOCAB, (2, 12), generator=torch.Generator().manual_seed(0))
    attn = torch.ones_like(ids)
    model.train()
    noisy = [token_logprobs(model, ids, attn)[0] for _ in range(2)]
    assert not torch.equal(noisy[0], noisy[1])  # the dropout is real before
    disable_dropout(model)
    runs = [token_logprobs(model, ids, attn)[0] for _ in range(2)]
    model.eval()
    clean = token_logprobs(model, ids, attn)[0]
    assert torch.equal(runs[0], runs[1]) and torch.equal(runs[0], clean)
    assert all(
        v == 0.0 for k, v in vars(model.config).items() if "drop" in k and isinstance(v, float)
    )


def test_load_policy_turns_dropout_off(tmp_path, tokenizer) -> None:
    """load_policy on a model directory whose config has attention_dropout > 0."""
    from agentic_rl.config.rollout import ModelConfig
    from agentic_rl.model.load import load_policy

    config = transformers.LlamaConfig(
        **{**LLAMA_LIKE, "vocab_size": len(tokenizer)}, attention_dropout=0.3
    )
    transformers.LlamaForCausalLM(config).save_pretrained(tmp_path)
    tokenizer.save_pretrained(tmp_path)
    model, _ = load_policy(ModelConfig(name=str(tmp_path)))
    assert model.config.attention_dropout == 0.0
    assert all(layer.self_attn.attention_dropout == 0.0 for layer in model.model.layers)
    ids = torch.randint(0, 1000, (2, 12), generator=torch.Generator().manual_seed(0))
    model.train()
    a, b = (token_logprobs(model, ids, torch.ones_like(ids))[0] for _ in range(2))
    assert torch.equal(a, b)


@pytest.mark.parametrize("arch", ["llama", "gemma2", "phi", "cohere"])
def test_logprobs_at_the_sampling_temperature_divide_the_final_logits(arch) -> None:
    """At temperature T the learner's logprobs are those of softmax(z / T) with z the model's
    own (biased, scaled, soft-capped) logits, gradients included."""
    model = tiny(arch)
    temperature = 0.7
    g = torch.Generator().manual_seed(2)
    ids = torch.randint(0, VOCAB, (2, 9), generator=g)
    attn = torch.ones_like(ids)
    weights = torch.randn(2, 9, generator=g)
    logits = model(input_ids=ids, attention_mask=attn).logits[:, :-1].float() / temperature
    want = torch.log_softmax(logits, -1).gather(-1, ids[:, 1:, None]).squeeze(-1)
    model.zero_grad(set_to_none=True)
    (want * weights[:, 1:]).sum().backward()
    want_grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
    for keep in (False, True):
        got, _, _ = token_logprobs(model, ids, attn, temperature=temperature, keep_probs=keep)
        torch.testing.assert_close(got[:, 1:], want.detach(), atol=2e-5, rtol=1e-5)
        model.zero_grad(set_to_none=True)
        (got * weights).sum().backward()
        got_grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
        assert_same_gradients(got_grads, want_grads)
