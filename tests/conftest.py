"""Shared fixtures: the bundled tokenizer and tiny randomly initialised models."""

from __future__ import annotations

import pytest
import torch

from agentic_rl.config.rollout import ModelConfig
from agentic_rl.model.load import load_tokenizer, tiny_model


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(scope="session")
def tokenizer():
    """The bundled model's tokenizer (converted once into the user cache, then reused)."""
    return load_tokenizer(ModelConfig())


@pytest.fixture
def tiny(tokenizer):
    """A 2-layer random Llama over the bundled vocabulary."""
    model = tiny_model(len(tokenizer), seed=0)
    model.config.use_cache = False
    return model


TINY_VISION = {
    "hidden_size": 16,
    "intermediate_size": 32,
    "num_hidden_layers": 1,
    "num_attention_heads": 2,
    "image_size": 32,
    "patch_size": 16,
}
"""A 1-layer vision tower over 32 x 32 images: 4 patches, 4 image tokens (scale factor 1)."""


@pytest.fixture(scope="session")
def tiny_vlm_dir(tmp_path_factory):
    """A local vision-language model directory (Idefics3, as SmolVLM): the tiny random Llama
    with a tiny random vision tower grafted on (model/vision.py), loadable by model.name."""
    from transformers import AutoTokenizer

    from agentic_rl.model.load import bundled_model_dir
    from agentic_rl.model.vision import graft_vlm, save_vlm

    tok = AutoTokenizer.from_pretrained(bundled_model_dir())
    text = tiny_model(len(tok), seed=0)
    model, tok = graft_vlm(text, tok, vision=TINY_VISION, seed=0)
    return save_vlm(model, tok, tmp_path_factory.mktemp("tiny_vlm"))
