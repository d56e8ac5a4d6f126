"""The HF generator with images (a vision-language policy, model/vision.py): the pixels reach
the prefill, prompts that differ only in their pictures are not merged, and the behaviour
logprobs are the learner's logprobs on the same pixels."""

from __future__ import annotations

import pytest
import torch
from PIL import Image
from torch import nn

from agentic_rl.backends.hf import HFGenerator
from agentic_rl.config.rollout import ModelConfig
from agentic_rl.model.images import save_image
from agentic_rl.model.load import load_policy, token_logprobs
from agentic_rl.model.tokens import encode_prompt
from agentic_rl.model.vision import never_sampled_ids, spec_of_dir, vision_inputs
from agentic_rl.types import SamplingParams


@pytest.fixture(scope="module")
def vlm(tiny_vlm_dir):
    policy, tok = load_policy(ModelConfig(name=str(tiny_vlm_dir)))
    return policy, tok


@pytest.fixture
def pictures(tmp_path):
    red = save_image(Image.new("RGB", (32, 32), (255, 0, 0)), tmp_path)
    blue = save_image(Image.new("RGB", (32, 32), (0, 0, 255)), tmp_path)
    return red, blue


def image_text(tok) -> str:
    return spec_of_dir(tok.name_or_path).placeholder


def prompt(tok) -> list[int]:
    return encode_prompt(tok, [{"role": "user", "content": "What colour?" + image_text(tok)}])


def test_behaviour_logprobs_are_the_learners_on_the_same_pixels(vlm, pictures):
    policy, tok = vlm
    red, blue = pictures
    gen = HFGenerator(policy, tok)
    ids = prompt(tok)
    params = SamplingParams(max_new_tokens=6, temperature=1.0, seed=0)
    (out,) = gen.generate([ids], params, images=[[red]])
    full = torch.tensor([ids + out.token_ids])
    attn = torch.ones_like(full)
    with torch.no_grad():
        same, _, _ = token_logprobs(policy, full, attn, model_inputs=vision_inputs(policy, [[red]]))
        other, _, _ = token_logprobs(
            policy, full, attn, model_inputs=vision_inputs(policy, [[blue]])
        )
    sampled = torch.tensor(out.logprobs)
    assert torch.allclose(same[0, len(ids) :], sampled, atol=1e-4)
    assert not torch.allclose(other[0, len(ids) :], sampled, atol=1e-4)


def test_prompts_differing_only_in_pictures_are_not_merged(vlm, pictures):
    policy, tok = vlm
    red, blue = pictures
    gen = HFGenerator(policy, tok)
    ids = prompt(tok)
    greedy = SamplingParams(max_new_tokens=3, temperature=0.0)
    both = gen.generate([ids, ids], greedy, images=[[red], [blue]])
    (alone_blue,) = gen.generate([ids], greedy, images=[[blue]])
    assert both[0].logprobs[0] != pytest.approx(both[1].logprobs[0], abs=1e-6)
    assert both[1].token_ids == alone_blue.token_ids
    assert both[1].logprobs == pytest.approx(alone_blue.logprobs, abs=1e-5)


def test_next_turn_reuses_kv_only_when_its_first_pictures_match(vlm, pictures):
    """A later turn reuses the stored KV of the earlier one (its new picture goes into the
    suffix's prefill) with the same logprobs as a fresh prefill; the same tokens with another
    first picture must not read that KV."""
    policy, tok = vlm
    red, blue = pictures
    ids = prompt(tok)
    params = SamplingParams(max_new_tokens=3, temperature=0.0)
    observation = tok(
        "\n<observation>Moved." + image_text(tok) + "</observation>\n", add_special_tokens=False
    )["input_ids"]
    for first_pictures, reused in (([red], True), ([blue], False)):
        gen = HFGenerator(policy, tok)
        (first,) = gen.generate([ids], params, images=[first_pictures])
        turn2 = ids + first.token_ids + observation
        (second,) = gen.generate([turn2], params, images=[[red, blue]])
        assert (gen.reused_tokens > 0) == reused
        fresh = HFGenerator(policy, tok, prefix_cache=False)
        (want,) = fresh.generate([turn2], params, images=[[red, blue]])
        assert second.token_ids == want.token_ids
        assert second.logprobs == pytest.approx(want.logprobs, abs=1e-5)


def test_image_list_count_must_match(vlm, pictures):
    policy, tok = vlm
    with pytest.raises(ValueError, match="image lists"):
        HFGenerator(policy, tok).generate([prompt(tok)], SamplingParams(), images=[])


def test_placeholder_tokens_are_never_sampled(tiny_vlm_dir, pictures):
    """Even when the model prefers `<image>` above all, it is not sampled: a generated image
    token would claim image features that do not exist."""
    policy, tok = load_policy(ModelConfig(name=str(tiny_vlm_dir)))
    image_id = tok.convert_tokens_to_ids("<image>")

    def prefer_image(module, inputs, logits):
        logits[..., image_id] = 1e4
        return logits

    policy.get_output_embeddings().register_forward_hook(prefer_image)
    unbanned = HFGenerator(policy, tok)
    unbanned._banned = None  # the check that the hook really makes it the favourite
    greedy = SamplingParams(max_new_tokens=2, temperature=0.0)
    assert (
        unbanned.generate([prompt(tok)], greedy, images=[[pictures[0]]])[0].token_ids
        == [image_id] * 2
    )
    gen = HFGenerator(policy, tok)
    for temperature in (0.0, 1.0):
        params = SamplingParams(max_new_tokens=5, temperature=temperature, seed=0)
        (out,) = gen.generate([prompt(tok)], params, images=[[pictures[0]]])
        assert image_id not in out.token_ids


@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_learner_scores_the_generators_distribution_with_masked_ids(
    tiny_vlm_dir, pictures, temperature
):
    """A head that puts most of the mass on the placeholder ids (an lm_head bias of +12 on
    them: > 90% of each step's mass, as a trained VLM may after prompts full of image tokens).
    The generator never samples them; the learner's logprobs of what it sampled are the
    behaviour logprobs (the same masked distribution), not lower by log(1 - that mass)."""
    policy, tok = load_policy(ModelConfig(name=str(tiny_vlm_dir)))
    masked = list(never_sampled_ids(policy))
    assert len(masked) == 3  # <fake_token_around_image>, <image>, <global-img>
    old = policy.get_output_embeddings()
    head = nn.Linear(old.in_features, old.out_features, bias=True)
    head.weight = old.weight
    with torch.no_grad():
        head.bias.zero_()
        head.bias[masked] = 12.0
    policy.lm_head = head
    red = pictures[0]
    ids = prompt(tok)
    params = SamplingParams(max_new_tokens=12, temperature=temperature, seed=0)
    (out,) = HFGenerator(policy, tok).generate([ids], params, images=[[red]])
    assert not set(masked) & set(out.token_ids)
    full = torch.tensor([ids + out.token_ids])
    attn = torch.ones_like(full)
    inputs = vision_inputs(policy, [[red]])
    with torch.no_grad():
        learner, _, _ = token_logprobs(
            policy, full, attn, temperature=temperature, model_inputs=inputs
        )
        logits = policy(input_ids=full, attention_mask=attn, **inputs).logits[0, len(ids) - 1 : -1]
    mass = torch.softmax(logits.double() / temperature, -1)[:, masked].sum(-1)
    assert mass.min() > 0.9  # the placeholder ids really carry the mass
    sampled = torch.tensor(out.logprobs)
    assert torch.allclose(learner[0, len(ids) :], sampled, atol=1e-6, rtol=1e-6)
