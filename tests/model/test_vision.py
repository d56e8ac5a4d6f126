"""Vision-language policies (model/vision.py, model/graft.py): the grafted model, images by reference, pixel
values, and the learner's logprobs seeing the images."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from PIL import Image

from agentic_rl.config.rollout import ModelConfig
from agentic_rl.model.errors import ModelLoadError
from agentic_rl.model.graft import freeze_text_model, graft_vlm
from agentic_rl.model.images import ImageError, load_image, save_image, shown_image
from agentic_rl.model.load import load_policy, tiny_model, token_logprobs
from agentic_rl.model.vision import (
    IMAGE_TOKEN,
    Idefics3Spec,
    never_sampled_ids,
    preprocess,
    spec_of_dir,
    vision_inputs,
)
from agentic_rl.model.vocab_logprobs import mask_logits
from agentic_rl.types import ImageRef


def solid(colour: tuple[int, int, int], side: int = 32) -> Image.Image:
    return Image.new("RGB", (side, side), colour)


def test_graft_keeps_the_text_model(tokenizer):
    """Without images the grafted VLM is the text model: same logits on the same tokens."""
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tokenizer.name_or_path)
    text = tiny_model(len(tok), seed=3)
    ids = torch.tensor([tok("The grid has a red circle.")["input_ids"]])
    want = text(input_ids=ids).logits
    vlm, tok = graft_vlm(
        text,
        tok,
        vision={
            "image_size": 32,
            "patch_size": 16,
            "hidden_size": 16,
            "intermediate_size": 32,
            "num_hidden_layers": 1,
            "num_attention_heads": 2,
        },
    )
    got = vlm(input_ids=ids, attention_mask=torch.ones_like(ids)).logits
    assert len(tok) == len(tokenizer) + 3  # <fake_token_around_image>, <image>, <global-img>
    assert torch.allclose(got[..., : want.shape[-1]], want, atol=1e-5)
    assert vlm.lm_head.weight is vlm.model.text_model.embed_tokens.weight  # still tied


def test_local_vlm_dir_loads_with_its_spec(tiny_vlm_dir):
    policy, tok = load_policy(ModelConfig(name=str(tiny_vlm_dir)))
    assert type(policy).__name__ == "Idefics3ForConditionalGeneration"
    spec = spec_of_dir(str(tiny_vlm_dir))
    assert spec == Idefics3Spec(32, 4, tok.convert_tokens_to_ids(IMAGE_TOKEN))
    ids = tok(spec.placeholder, add_special_tokens=False)["input_ids"]
    # one image = around + global + 4 x <image> + around, each a single special id
    assert len(ids) == 7 and ids.count(spec.image_token_id) == 4


def test_unsupported_vision_family_is_refused_by_name(tmp_path):
    from transformers import LlavaConfig

    LlavaConfig().save_pretrained(tmp_path)
    with pytest.raises(ModelLoadError, match="'llava' is not supported"):
        spec_of_dir(str(tmp_path))


def test_image_refs_are_content_addressed_and_checked(tmp_path):
    a = save_image(solid((255, 0, 0)), tmp_path)
    assert save_image(solid((255, 0, 0)), tmp_path) == a  # same picture, same file
    assert save_image(solid((0, 0, 255)), tmp_path) != a
    assert load_image(a).getpixel((0, 0)) == (255, 0, 0)
    with open(a.path, "wb") as handle:  # the file changed after it was shown
        handle.write(b"not the picture")
    with pytest.raises(ImageError, match="sha256"):
        load_image(a)
    with pytest.raises(ImageError, match="cannot be read"):
        load_image(ImageRef(str(tmp_path / "gone.png"), a.sha256))


def test_shown_image_decodes_each_reference_once(tmp_path):
    """vLLM's pictures: decoded (and hash-checked) at the first read of a reference; later
    turns get those pixels back without reading the file again."""
    ref = save_image(solid((10, 20, 30)), tmp_path / "a")
    first = shown_image(ref)
    solid((1, 2, 3)).save(ref.path, format="PNG")  # the file changes after it was shown
    assert shown_image(ref) is first and first.getpixel((0, 0)) == (10, 20, 30)
    copy = save_image(solid((10, 20, 30)), tmp_path / "b")
    solid((1, 2, 3)).save(copy.path, format="PNG")  # changed before its first read
    with pytest.raises(ImageError, match="changed since it was shown"):
        shown_image(copy)


def test_preprocess_hand_values():
    """(x / 255 - mean) / std per channel, channels first, resized to the tower's side."""
    spec = Idefics3Spec(
        image_size=4,
        tokens_per_image=1,
        image_token_id=0,
        mean=(0.5, 0.5, 0.5),
        std=(0.5, 0.25, 0.5),
    )
    pixels = preprocess(solid((255, 0, 51), side=8), spec)
    assert pixels.shape == (3, 4, 4) and pixels.dtype == np.float32
    np.testing.assert_allclose(pixels[:, 0, 0], [1.0, -2.0, (0.2 - 0.5) / 0.5], atol=1e-6)


def test_learner_logprobs_see_the_pixels(tiny_vlm_dir, tmp_path):
    """token_logprobs with an image's pixel values equals the model's own forward, and other
    pixels give other logprobs: the image reaches the learner."""
    policy, tok = load_policy(ModelConfig(name=str(tiny_vlm_dir)))
    policy.eval()
    text = "Look:" + spec_of_dir(str(tiny_vlm_dir)).placeholder + " a red square"
    ids = torch.tensor([tok(text, add_special_tokens=False)["input_ids"]])
    attn = torch.ones_like(ids)
    red, blue = save_image(solid((255, 0, 0)), tmp_path), save_image(solid((0, 0, 255)), tmp_path)
    with torch.no_grad():
        lp_red, _, _ = token_logprobs(
            policy, ids, attn, model_inputs=vision_inputs(policy, [[red]])
        )
        lp_blue, _, _ = token_logprobs(
            policy, ids, attn, model_inputs=vision_inputs(policy, [[blue]])
        )
        inputs = vision_inputs(policy, [[red]])
        logits = policy(input_ids=ids, attention_mask=attn, **inputs).logits
    # the policy's distribution: the model's own logits with its never-sampled ids masked
    masked = mask_logits(logits[:, :-1], never_sampled_ids(policy))
    want = torch.log_softmax(masked, -1).gather(-1, ids[:, 1:, None]).squeeze(-1)
    assert torch.allclose(lp_red[:, 1:], want, atol=1e-5)
    after = ids[0].tolist().index(tok.convert_tokens_to_ids(IMAGE_TOKEN)) + 4
    assert (lp_red[0, after:] - lp_blue[0, after:]).abs().max() > 1e-4
    assert torch.equal(lp_red[0, : after - 4], lp_blue[0, : after - 4])  # causal: before the image


def test_image_token_count_must_match_the_images(tiny_vlm_dir, tmp_path):
    policy, tok = load_policy(ModelConfig(name=str(tiny_vlm_dir)))
    ids = torch.tensor([tok("no image here", add_special_tokens=False)["input_ids"]])
    red = save_image(solid((255, 0, 0)), tmp_path)
    with pytest.raises(ValueError, match="0 image tokens for 1 images"):
        vision_inputs(policy, [[red]], input_ids=ids)
    assert vision_inputs(policy, [[]]) == {} and vision_inputs(policy, None) == {}


def test_text_model_rejects_images(tiny, tmp_path):
    red = save_image(solid((255, 0, 0)), tmp_path)
    with pytest.raises(ValueError, match="not a vision-language model"):
        vision_inputs(tiny, [[red]])


def test_freeze_text_model_trains_only_tower_and_connector(tiny_vlm_dir):
    policy, _ = load_policy(ModelConfig(name=str(tiny_vlm_dir)))
    count = freeze_text_model(policy)
    trainable = {n for n, p in policy.named_parameters() if p.requires_grad}
    assert count == sum(p.numel() for p in policy.parameters() if p.requires_grad) > 0
    assert all(".vision_model." in f".{n}" or ".connector." in f".{n}" for n in trainable)
    assert any("connector" in n for n in trainable) and any("vision_model" in n for n in trainable)


def test_preprocessor_config_is_written(tiny_vlm_dir):
    pre = json.loads((tiny_vlm_dir / "preprocessor_config.json").read_text())
    assert pre["image_mean"] == [0.5, 0.5, 0.5] and pre["size"] == {"longest_edge": 32}


def test_hf_processor_expands_and_preprocesses_as_the_chat_format(tiny_vlm_dir):
    """vLLM runs the model directory's Hugging Face processor on image requests: its expansion
    of `<image>` must be the chat format's placeholder, and its pixels the learner's."""
    from transformers import AutoProcessor

    processor = AutoProcessor.from_pretrained(str(tiny_vlm_dir))
    spec = spec_of_dir(str(tiny_vlm_dir))
    tokenizer = processor.tokenizer
    ours = tokenizer(spec.placeholder, add_special_tokens=False)["input_ids"]
    rng = np.random.default_rng(0)
    for side in (spec.image_size, 4 * spec.image_size):  # as rendered, and downscaled
        image = Image.fromarray(rng.integers(0, 256, (side, side, 3), dtype=np.uint8))
        out = processor(text="<image>", images=[image], return_tensors="np")
        assert out["input_ids"][0].tolist() == ours
        theirs = out["pixel_values"][0, 0]  # [3, S, S]: one tile, no splitting
        mine = preprocess(image, spec)
        assert theirs.shape == mine.shape
        assert np.abs(theirs - mine).max() <= 1e-6  # both resize with PIL's bilinear filter
