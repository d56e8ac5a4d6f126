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


@pytest.fixture(autouse=True)
def close_shared_browsers():
    """After every test: end the browsers of the process-wide pools (envs/browser/driver.py)
    the test's envs started, so no test leaves a Chromium running into the next ones (its
    helpers come and go and would be counted by their stray-process checks)."""
    yield
    from agentic_rl.envs.browser import driver

    if driver._shared:
        driver.close_shared_pools()


@pytest.fixture(autouse=True)
def keep_torch_threads():
    """After every test: torch's thread count as it was before it. A test that runs a bench's
    main() in-process sets it (`--threads`), and on some CPUs the float results of a matrix
    product depend on the thread count, so a later test comparing an in-process run with a
    subprocess (which starts at the default) would compare two thread counts."""
    threads = torch.get_num_threads()
    yield
    torch.set_num_threads(threads)


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
    with a tiny random vision tower grafted on (model/graft.py), loadable by model.name."""
    from transformers import AutoTokenizer

    from agentic_rl.model.graft import graft_vlm, save_vlm
    from agentic_rl.model.load import bundled_model_dir

    tok = AutoTokenizer.from_pretrained(bundled_model_dir())
    text = tiny_model(len(tok), seed=0)
    model, tok = graft_vlm(text, tok, vision=TINY_VISION, seed=0)
    return save_vlm(model, tok, tmp_path_factory.mktemp("tiny_vlm"))


def save_tiny_qwen2_vl(directory, seed: int = 0, family: str = "qwen2_vl"):
    """A tiny random Qwen2-VL (or, `family="qwen2_5_vl"`, Qwen2.5-VL) directory, the family
    with picture-sized placeholders and M-RoPE, over the bundled vocabulary plus Qwen's vision
    tokens: 14-pixel patches merged 2 x 2, so a picture of 56 x 56 pixels is 4 image tokens and
    one of 112 x 56 is 8."""
    from transformers import (
        AutoModelForImageTextToText,
        AutoTokenizer,
        Qwen2_5_VLConfig,
        Qwen2VLConfig,
    )
    from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import (
        Qwen2VLImageProcessorPil,
    )

    from agentic_rl.model.load import bundled_model_dir
    from agentic_rl.model.vision import QWEN_VISION_TOKENS

    tok = AutoTokenizer.from_pretrained(bundled_model_dir())
    tok.add_special_tokens(
        {"additional_special_tokens": list(QWEN_VISION_TOKENS)}, replace_extra_special_tokens=False
    )
    start, pad, end, video = tok.convert_tokens_to_ids(list(QWEN_VISION_TOKENS))
    text = {
        "vocab_size": len(tok),
        "hidden_size": 32,
        "intermediate_size": 64,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "max_position_embeddings": 4096,
        "rope_parameters": {
            "rope_type": "default",
            "rope_theta": 10000.0,
            "mrope_section": [1, 1, 2],
        },
        "bos_token_id": tok.bos_token_id,
        "eos_token_id": tok.eos_token_id,
        "tie_word_embeddings": True,
    }
    vision: dict = {"depth": 1, "num_heads": 2}
    if family == "qwen2_vl":
        vision |= {"embed_dim": 16, "mlp_ratio": 2, "hidden_size": 32}
    else:  # Qwen2.5-VL: a windowed tower (one full-attention block) and its own merger width
        vision |= {"hidden_size": 16, "intermediate_size": 32, "out_hidden_size": 32}
        vision |= {"fullatt_block_indexes": [0], "window_size": 56}
    config = (Qwen2VLConfig if family == "qwen2_vl" else Qwen2_5_VLConfig)(
        text_config=text,
        vision_config=vision,
        image_token_id=pad,
        vision_start_token_id=start,
        vision_end_token_id=end,
        video_token_id=video,
        tie_word_embeddings=True,
    )
    torch.manual_seed(seed)
    model = AutoModelForImageTextToText.from_config(config)
    with torch.no_grad():  # sharper attention than the random init: positions visibly matter
        for name, param in model.named_parameters():
            if "language_model" in name and name.endswith(("q_proj.weight", "k_proj.weight")):
                param.mul_(4.0)
    model.save_pretrained(directory)
    tok.save_pretrained(directory)
    Qwen2VLImageProcessorPil(min_pixels=28 * 28, max_pixels=112 * 112).save_pretrained(directory)
    return directory


@pytest.fixture(scope="session")
def tiny_qwen2_vl_dir(tmp_path_factory):
    return save_tiny_qwen2_vl(tmp_path_factory.mktemp("tiny_qwen2_vl"))


@pytest.fixture(scope="session")
def tiny_qwen2_5_vl_dir(tmp_path_factory):
    return save_tiny_qwen2_vl(tmp_path_factory.mktemp("tiny_qwen2_5_vl"), family="qwen2_5_vl")
