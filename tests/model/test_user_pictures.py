"""A user's own pictures: unreadable files, sizes a model family cannot take and placeholder
text in observations are ImageErrors that name the file (or the text's source)."""

from __future__ import annotations

import hashlib

import pytest
from PIL import Image

from agentic_rl.errors import UserInputError
from agentic_rl.formats.chat import TagFormat, with_images
from agentic_rl.model.images import ImageError, image_ref, load_image, save_image
from agentic_rl.model.vision import Qwen2VLSpec
from agentic_rl.types import ImageRef, Observation


def _ref_of_bytes(path, data: bytes) -> ImageRef:
    path.write_bytes(data)
    return ImageRef(str(path), hashlib.sha256(data).hexdigest())


def _png(tmp_path, size=(8, 8)) -> bytes:
    ref = save_image(Image.new("RGB", size, (200, 30, 30)), tmp_path / "store")
    with open(ref.path, "rb") as handle:
        return handle.read()


@pytest.mark.parametrize(
    ("name", "cut"),
    [("truncated.png", lambda png: png[: len(png) // 2]),
     ("corrupt.png", lambda png: png[:16] + b"\x00" * (len(png) - 16)),
     ("notes.png", lambda png: b"just some text, not a picture\n")],
)  # fmt: skip
def test_an_unreadable_picture_is_an_image_error_naming_the_file(tmp_path, name, cut):
    path = tmp_path / name
    ref = _ref_of_bytes(path, cut(_png(tmp_path)))
    with pytest.raises(ImageError, match=f"image {path} is not a readable picture"):
        load_image(ref)
    with pytest.raises(ImageError, match=str(path)):
        image_ref(path)
    assert issubclass(ImageError, UserInputError)  # the CLI answers it in one line


def test_image_ref_checks_a_user_picture_once(tmp_path):
    path = tmp_path / "ok.png"
    path.write_bytes(_png(tmp_path))
    ref = image_ref(path)
    assert ref.path == str(path) and load_image(ref).size == (8, 8)
    with pytest.raises(ImageError, match=f"image {tmp_path / 'missing.png'} cannot be read"):
        image_ref(tmp_path / "missing.png")


def test_an_extreme_aspect_ratio_is_refused_for_qwen2_vl_naming_the_file(tmp_path):
    pytest.importorskip("transformers.models.qwen2_vl.image_processing_pil_qwen2_vl")
    spec = Qwen2VLSpec(image_token_id=5)
    wide = save_image(Image.new("RGB", (1005, 5)), tmp_path)
    with pytest.raises(ImageError, match=rf"image {wide.path} is 1005x5 pixels.*at most 200:1"):
        spec.image_placeholder(wide)  # where the chat format meets the env's picture
    fine = save_image(Image.new("RGB", (112, 56)), tmp_path)  # 2:1 is fine
    assert spec.image_tokens(fine) == (112 // 28) * (56 // 28)  # one token per 28x28 pixels


def test_a_literal_image_token_in_an_observation_says_so():
    fmt = TagFormat([], image_placeholder=lambda ref: "<image>")
    with pytest.raises(ImageError, match=r"from tool 'search'\) holds the literal text '<image>'"):
        fmt.render_observation(Observation(content="a page with <image> in it", name="search"))
    messages = [{"role": "user", "content": "look: <image>"}]
    with pytest.raises(ImageError, match="the env's user message holds the literal"):
        with_images(messages, [], lambda ref: "<image>")
    # a text-only model reads it as plain text: nothing to refuse
    assert "<image>" in TagFormat([]).render_observation(Observation(content="<image>"))
