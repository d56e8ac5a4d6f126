"""Chat formats insert the model's image placeholder tokens for an observation's images."""

from __future__ import annotations

import pytest

from agentic_rl.config.rollout import ModelConfig
from agentic_rl.envs.games.gridworld import MOVE_TOOL
from agentic_rl.formats.chat import HermesFormat, image_placeholders, with_images
from agentic_rl.formats.registry import make_chat_format
from agentic_rl.model.load import load_tokenizer
from agentic_rl.model.tokens import encode_text
from agentic_rl.model.vision import IMAGE_TOKEN, image_placeholder, spec_of_dir
from agentic_rl.types import ImageRef, Observation

PICTURES = [ImageRef("/img/a.png", "a" * 64), ImageRef("/img/b.png", "b" * 64)]


@pytest.fixture(scope="module")
def vlm_tokenizer(tiny_vlm_dir):
    return load_tokenizer(ModelConfig(name=str(tiny_vlm_dir)))


def test_tag_format_puts_one_placeholder_per_image_inside_the_result(vlm_tokenizer):
    fmt = make_chat_format("tags", [MOVE_TOOL], vlm_tokenizer)
    assert fmt.image_placeholder == image_placeholder(vlm_tokenizer) is not None
    text = fmt.render_observation(Observation(content="Moved.", name="action", images=PICTURES))
    assert text.startswith("\n\n<observation>Moved.\n") and text.endswith("</observation>\n\n")
    ids = encode_text(vlm_tokenizer, text)
    image_id = vlm_tokenizer.convert_tokens_to_ids(IMAGE_TOKEN)
    assert ids.count(image_id) == 2 * 4  # 2 images x 4 tokens each (the tiny tower)


def test_text_only_observations_render_as_before(vlm_tokenizer, tokenizer):
    plain = Observation(content="Moved.", name="action")
    for tok in (vlm_tokenizer, tokenizer):
        fmt = make_chat_format("tags", [MOVE_TOOL], tok)
        assert fmt.render_observation(plain) == "\n\n<observation>Moved.</observation>\n\n"


def test_hermes_format_puts_placeholders_in_the_tool_turn(vlm_tokenizer):
    fmt = HermesFormat([MOVE_TOOL], vlm_tokenizer)
    text = fmt.render_observation(Observation(content="zoomed", name="action", images=PICTURES[:1]))
    one = spec_of_dir(vlm_tokenizer.name_or_path).placeholder
    assert ("zoomed\n" + one + "\n</tool_response>") in text


def test_images_with_a_text_only_model_are_refused_by_name(tokenizer):
    fmt = make_chat_format("tags", [MOVE_TOOL], tokenizer)
    with pytest.raises(ValueError, match="model takes no images"):
        fmt.render_observation(Observation(content="x", name="action", images=PICTURES))
    assert image_placeholders(None, []) == ""


def test_reset_images_follow_the_last_message():
    messages = [{"role": "system", "content": "s"}, {"role": "user", "content": "Look."}]
    out = with_images(messages, PICTURES, lambda ref: f"<IMG {ref.path}>")
    want = "Look.\n<IMG /img/a.png>\n<IMG /img/b.png>"  # each picture its own placeholder
    assert out[-1]["content"] == want and messages[-1]["content"] == "Look."
    assert with_images(messages, [], lambda ref: "<IMG>") is messages
