"""The Qwen2-VL family (model/vision.py `Qwen2VLSpec`; Qwen2-VL and Qwen2.5-VL): placeholders
sized by the picture, Hugging Face's own pixel patches and grids, M-RoPE positions that equal
transformers' `get_rope_index`, and the KV-cached generator's behaviour logprobs equal to the
learner's."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from PIL import Image

from agentic_rl.backends.hf import HFGenerator
from agentic_rl.config.rollout import ModelConfig
from agentic_rl.model.graft import freeze_text_model
from agentic_rl.model.images import save_image
from agentic_rl.model.load import load_policy, token_logprobs
from agentic_rl.model.tokens import encode_prompt
from agentic_rl.model.vision import (
    QWEN_IMAGE_PAD,
    Qwen2VLSpec,
    image_placeholder,
    mrope_positions,
    never_sampled_ids,
    spec_of_dir,
    vision_inputs,
)
from agentic_rl.model.vocab_logprobs import mask_logits
from agentic_rl.types import SamplingParams


@pytest.fixture(scope="module", params=["qwen2_vl", "qwen2_5_vl"])
def qwen(request):
    directory = request.getfixturevalue(f"tiny_{request.param}_dir")
    policy, tok = load_policy(ModelConfig(name=str(directory)))
    policy.eval()
    assert policy.config.model_type == request.param
    return policy, tok


@pytest.fixture
def pictures(tmp_path):
    """Two pictures of different sizes (4 and 8 image tokens) and a recoloured first one."""
    rng = np.random.default_rng(0)
    square = Image.fromarray(rng.integers(0, 256, (56, 56, 3), dtype=np.uint8))
    wide = Image.fromarray(rng.integers(0, 256, (56, 112, 3), dtype=np.uint8))
    other = Image.fromarray(rng.integers(0, 256, (56, 56, 3), dtype=np.uint8))
    return [save_image(image, tmp_path) for image in (square, wide, other)]


def test_mrope_positions_hand_values():
    """Text 0, 1; a 1 x 4 x 4 patch grid merged 2 x 2 = 4 tokens at (2 + t, 2 + h, 2 + w);
    the text after it continues at 2 + max(2, 2) = 4."""
    img = 9
    got = mrope_positions([5, 6, img, img, img, img, 7], [(1, 4, 4)], img, merge=2)
    assert got.tolist() == [
        [0, 1, 2, 2, 2, 2, 4],
        [0, 1, 2, 2, 3, 3, 4],
        [0, 1, 2, 3, 2, 3, 4],
    ]
    with pytest.raises(ValueError, match="needs 4 image tokens"):
        mrope_positions([5, img, img, 7], [(1, 4, 4)], img, merge=2)
    with pytest.raises(ValueError, match="2 picture"):
        mrope_positions([5, img, img, img, img], [(1, 4, 4), (1, 4, 4)], img, merge=2)


def test_spec_sizes_placeholders_by_the_picture(qwen, pictures):
    from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import (
        Qwen2VLImageProcessorPil,
    )

    policy, tok = qwen
    spec = spec_of_dir(tok.name_or_path)
    assert isinstance(spec, Qwen2VLSpec) and spec.image_token_id == tok.convert_tokens_to_ids(
        QWEN_IMAGE_PAD
    )
    square, wide, _ = pictures
    assert [spec.image_tokens(square), spec.image_tokens(wide)] == [4, 8]
    placeholder = image_placeholder(tok)
    assert placeholder is not None
    ids = tok(placeholder(wide), add_special_tokens=False)["input_ids"]
    assert len(ids) == 10 and ids.count(spec.image_token_id) == 8  # start + 8 pads + end
    # the pixel inputs are Hugging Face's processor's, pictures of all rows in order
    inputs = spec.pixel_inputs([[square], [wide]])
    processor = Qwen2VLImageProcessorPil.from_pretrained(tok.name_or_path)
    want = processor(images=[Image.open(square.path), Image.open(wide.path)], return_tensors="np")
    assert inputs["image_grid_thw"].tolist() == [[1, 4, 4], [1, 4, 8]]
    np.testing.assert_array_equal(inputs["pixel_values"].numpy(), want["pixel_values"])


def _rows(tok, placeholder, refs_per_row):
    """Token rows with text around each row's pictures, right padded, and their mask."""
    rows = [
        tok("Look" + "".join(placeholder(r) + " then" for r in refs) + " done")["input_ids"]
        for refs in refs_per_row
    ]
    width = max(map(len, rows))
    ids = torch.tensor([r + [tok.pad_token_id] * (width - len(r)) for r in rows])
    attn = torch.tensor([[1] * len(r) + [0] * (width - len(r)) for r in rows])
    return ids, attn


def test_positions_equal_transformers_get_rope_index(qwen, pictures):
    """The positions the learner passes are what transformers computes from the token types
    and grids (the path Qwen2-VL's own forward takes when given no positions)."""
    policy, tok = qwen
    square, wide, _ = pictures
    refs = [[square, wide], [wide], []]
    ids, attn = _rows(tok, image_placeholder(tok), refs)
    inputs = vision_inputs(policy, refs, input_ids=ids)
    spec = spec_of_dir(tok.name_or_path)
    want, _ = policy.model.get_rope_index(
        ids,
        mm_token_type_ids=(ids == spec.image_token_id).int(),
        image_grid_thw=inputs["image_grid_thw"],
        attention_mask=attn,
    )
    real = attn.bool()
    assert torch.equal(inputs["position_ids"][:, real], want[:, real])
    assert inputs["position_ids"][1, 0].max() < ids.shape[1]  # 3-D positions are compressed


def test_learner_logprobs_are_the_models_own_forward(qwen, pictures):
    """token_logprobs with our pixel inputs and positions equals the model's forward with
    transformers computing the positions itself; other pixels give other logprobs."""
    policy, tok = qwen
    square, wide, other = pictures
    ids, attn = _rows(tok, image_placeholder(tok), [[square, wide]])
    spec = spec_of_dir(tok.name_or_path)
    with torch.no_grad():
        got, _, _ = token_logprobs(
            policy, ids, attn, model_inputs=vision_inputs(policy, [[square, wide]], input_ids=ids)
        )
        swapped, _, _ = token_logprobs(
            policy, ids, attn, model_inputs=vision_inputs(policy, [[other, wide]], input_ids=ids)
        )
        pixels = spec.pixel_inputs([[square, wide]])
        logits = policy(
            input_ids=ids,
            attention_mask=attn,
            mm_token_type_ids=(ids == spec.image_token_id).int(),
            **pixels,
        ).logits
    # the policy's distribution: the model's own logits with its never-sampled ids masked
    masked = mask_logits(logits[:, :-1], never_sampled_ids(policy))
    want = torch.log_softmax(masked, -1).gather(-1, ids[:, 1:, None]).squeeze(-1)
    assert torch.allclose(got[:, 1:], want, atol=1e-5)
    first = ids[0].tolist().index(spec.image_token_id)
    assert torch.equal(got[0, :first], swapped[0, :first])  # causal: before the picture
    assert (got[0, first + 4 :] - swapped[0, first + 4 :]).abs().max() > 1e-4


def test_generator_matches_the_learner_across_turns(qwen, pictures):
    """Two turns, the second reusing the first's KV with a new picture in its suffix: the
    behaviour logprobs are the learner's on the whole sequence (explicit M-RoPE positions in
    the prefill, the largest position + 1 onwards when decoding), and equal a fresh prefill."""
    policy, tok = qwen
    square, wide, _ = pictures
    placeholder = image_placeholder(tok)
    ids = encode_prompt(tok, [{"role": "user", "content": "Look:" + placeholder(square)}])
    params = SamplingParams(max_new_tokens=5, temperature=1.0, seed=0)
    gen = HFGenerator(policy, tok)
    (first,) = gen.generate([ids], params, images=[[square]])
    observation = tok("\nNow:" + placeholder(wide) + "\n", add_special_tokens=False)["input_ids"]
    turn2 = ids + first.token_ids + observation
    (second,) = gen.generate([turn2], params, images=[[square, wide]])
    assert gen.reused_tokens > 0
    (fresh,) = HFGenerator(policy, tok, prefix_cache=False).generate(
        [turn2], params, images=[[square, wide]]
    )
    assert second.token_ids == fresh.token_ids
    assert second.logprobs == pytest.approx(fresh.logprobs, abs=1e-5)
    full = torch.tensor([turn2 + second.token_ids])
    with torch.no_grad():
        learner, _, _ = token_logprobs(
            policy,
            full,
            torch.ones_like(full),
            model_inputs=vision_inputs(policy, [[square, wide]], input_ids=full),
        )
        inputs = vision_inputs(policy, [[square, wide]], input_ids=full)
        inputs["position_ids"] = torch.arange(full.shape[1])[None]  # 1-D positions instead
        flat, _, _ = token_logprobs(policy, full, torch.ones_like(full), model_inputs=inputs)
    # Tolerance: generator and learner differ by < 1e-4 here (the KV-cached vs the full
    # forward); 1-D positions instead of M-RoPE move them by ~3e-3.
    n, sampled = len(ids), torch.tensor(first.logprobs + second.logprobs)
    mine = torch.cat([learner[0, n : n + 5], learner[0, len(turn2) :]])
    assert torch.allclose(mine, sampled, atol=5e-4)
    assert (torch.cat([flat[0, n : n + 5], flat[0, len(turn2) :]]) - sampled).abs().max() > 1.5e-3


def test_vision_tokens_are_never_sampled(tiny_qwen2_vl_dir, pictures):
    policy, tok = load_policy(ModelConfig(name=str(tiny_qwen2_vl_dir)))
    pad = tok.convert_tokens_to_ids(QWEN_IMAGE_PAD)

    def prefer_pad(module, inputs, logits):
        logits[..., pad] = 1e4
        return logits

    policy.get_output_embeddings().register_forward_hook(prefer_pad)
    ids = encode_prompt(tok, [{"role": "user", "content": image_placeholder(tok)(pictures[0])}])
    (out,) = HFGenerator(policy, tok).generate(
        [ids], SamplingParams(max_new_tokens=3, temperature=0.0), images=[[pictures[0]]]
    )
    assert pad not in out.token_ids and len(out.token_ids) == 3


def test_freeze_text_model_keeps_the_visual_part(tiny_qwen2_vl_dir):
    policy, _ = load_policy(ModelConfig(name=str(tiny_qwen2_vl_dir)))
    count = freeze_text_model(policy)
    trainable = [n for n, p in policy.named_parameters() if p.requires_grad]
    assert count > 0 and trainable and all(".visual." in f".{n}" for n in trainable)
    assert any("merger" in n for n in trainable)  # Qwen2-VL's connector


def test_a_saved_policy_reads_pictures_as_the_original(tiny_qwen2_vl_dir, tmp_path):
    """An exported policy (the hand-over between a pipeline's stages, `agentic-rl export`)
    keeps its processor files: a large picture is still cut down to the directory's
    max_pixels (112 x 112: 16 tokens), not the processor default (448 x 448: 256 tokens)."""
    from agentic_rl.checkpoint.export import save_hf_model

    policy, tok = load_policy(ModelConfig(name=str(tiny_qwen2_vl_dir)))
    out = save_hf_model(policy, tok, tmp_path / "export")
    assert (out / "preprocessor_config.json").is_file()
    big = save_image(Image.new("RGB", (448, 448), (9, 9, 9)), tmp_path)
    before, after = spec_of_dir(str(tiny_qwen2_vl_dir)), spec_of_dir(str(out))
    assert before.image_tokens(big) == after.image_tokens(big) == 16
    assert Qwen2VLSpec(before.image_token_id).image_tokens(big) == 256  # the default's count
