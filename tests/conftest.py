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
