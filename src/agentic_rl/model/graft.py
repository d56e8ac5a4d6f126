"""A vision-language policy built offline: a vision tower grafted onto a text model.

No pretrained vision-language model can be downloaded here, so `graft_vlm` builds one as SmolVLM
is built: a SigLIP-style vision tower (Idefics3VisionConfig, randomly initialised), the Idefics3
connector (pixel shuffle + a linear projection) and a text model whose weights are copied in
(the bundled SmolLM2). `save_vlm` writes it as a directory `AutoModelForImageTextToText` and
Hugging Face's Idefics3 processor read; `grafted_model_dir` builds the bundled one once into the
model cache (`model.name=smollm2-135m-vision`). How its pictures are fed (specs, pixels,
placeholders) is model/vision.py's; how its tower learns to read is train/vision_pretrain.py's
and train/vision_align.py's.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

import torch
from torch import nn

from agentic_rl.model.errors import ModelLoadError
from agentic_rl.model.vision import (
    IMAGE_TOKEN,
    VISION_TOKENS,
    Idefics3Spec,
    spec_of_dir,
    vision_spec,
)

GRAFTED_VISION = {
    "hidden_size": 192,
    "intermediate_size": 768,
    "num_hidden_layers": 4,
    "num_attention_heads": 4,
    "image_size": 80,
    "patch_size": 16,
}
"""The vision tower grafted onto the bundled model: 80 x 80 images in 16-pixel patches, 25
patches, each one cell of the 5 x 5 grids the image envs render (envs/vision/scenes.py); ~1.9M
parameters. With the connector's scale factor 1 every patch is one image token."""


def graft_vlm(
    text_model: nn.Module,
    tokenizer: Any,
    vision: dict | None = None,
    scale_factor: int = 1,
    seed: int = 0,
) -> tuple[nn.Module, Any]:
    """An Idefics3ForConditionalGeneration (SmolVLM's architecture) whose text model carries
    `text_model`'s weights, with a randomly initialised SigLIP-style vision tower (`vision`:
    Idefics3VisionConfig fields, default GRAFTED_VISION) and connector (pixel shuffle by
    `scale_factor`, then a linear map to the text width). The tokenizer gains the three image
    special tokens; their embedding rows start at the mean of the others (transformers'
    default on resize). Returns (model, tokenizer)."""
    from transformers import Idefics3Config, Idefics3ForConditionalGeneration

    tokenizer.add_special_tokens(
        {"additional_special_tokens": list(VISION_TOKENS)}, replace_extra_special_tokens=False
    )
    with torch.random.fork_rng():  # the new rows are drawn around the old mean: seeded
        torch.manual_seed(seed)
        text_model.resize_token_embeddings(len(tokenizer))
    text_config = text_model.config.to_dict()
    text_config["vocab_size"] = len(tokenizer)
    tied = bool(text_model.config.tie_word_embeddings)
    config = Idefics3Config(
        text_config=text_config,
        vision_config=dict(GRAFTED_VISION if vision is None else vision),
        scale_factor=scale_factor,
        image_token_id=tokenizer.convert_tokens_to_ids(IMAGE_TOKEN),
        tie_word_embeddings=tied,
    )
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        model = Idefics3ForConditionalGeneration(config)
    backbone = getattr(text_model, text_model.base_model_prefix)
    missing, unexpected = model.model.text_model.load_state_dict(backbone.state_dict())
    if missing or unexpected:
        raise ModelLoadError(f"text weights do not fit: missing {missing}, unexpected {unexpected}")
    if tied:
        model.lm_head.weight = model.model.text_model.embed_tokens.weight
    else:
        model.lm_head.load_state_dict(text_model.get_output_embeddings().state_dict())
    model.config.use_cache = False
    return model, tokenizer


def save_vlm(model: nn.Module, tokenizer: Any, directory: str | os.PathLike) -> Path:
    """Write a model directory `AutoModelForImageTextToText` loads (weights, config, tokenizer),
    with the processor configs that make Hugging Face's `Idefics3Processor` (which vLLM runs on
    image requests) treat pictures as `preprocess` and the chat format do: one 80 x 80 tile, no
    splitting, bilinear resize, the normalisation, and `image_seq_len` image tokens, so its
    expansion of `<image>` is this model's placeholder (tests/model/test_vision.py checks both)."""
    target = Path(directory)
    target.mkdir(parents=True, exist_ok=True)
    model.config.architectures = [type(model).__name__]
    model.save_pretrained(target)
    tokenizer.save_pretrained(target)
    spec = vision_spec(model.config)
    if not isinstance(spec, Idefics3Spec):
        raise ModelLoadError(f"save_vlm writes Idefics3 processor configs, not {spec!r}'s")
    pre = {
        "image_processor_type": "Idefics3ImageProcessor",
        "image_mean": list(spec.mean),
        "image_std": list(spec.std),
        "size": {"longest_edge": spec.image_size},
        "max_image_size": {"longest_edge": spec.image_size},
        "do_image_splitting": False,
        "do_resize": True,
        "resample": 2,  # PIL bilinear, as `preprocess`
        "do_rescale": True,
        "rescale_factor": 1 / 255,
        "do_normalize": True,
        "do_convert_rgb": True,
    }
    (target / "preprocessor_config.json").write_text(json.dumps(pre, indent=2))
    processor = {"processor_class": "Idefics3Processor", "image_seq_len": spec.tokens_per_image}
    (target / "processor_config.json").write_text(json.dumps(processor, indent=2))
    spec_of_dir.cache_clear()
    return target


def grafted_model_dir(text_dir: Path, cache: Path, seed: int = 0) -> Path:
    """The bundled model with a fresh vision tower, built once into `cache` (deterministic:
    same seed, same weights) and reused."""
    # processor_config.json: caches built before it was written are rebuilt (same seed, same weights)
    if all(
        (cache / f).is_file() for f in ("config.json", "model.safetensors", "processor_config.json")
    ):
        return cache
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(text_dir)
    text = AutoModelForCausalLM.from_pretrained(text_dir, dtype=torch.float32)
    model, tokenizer = graft_vlm(text, tokenizer, seed=seed)
    cache.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".graft-", dir=cache.parent))
    save_vlm(model, tokenizer, tmp)
    if cache.exists():
        shutil.rmtree(cache)
    os.replace(tmp, cache)
    return cache


def freeze_text_model(model: nn.Module) -> int:
    """The alignment stage (LLaVA's stage 1): only the vision tower and the connector train
    (Idefics3's `vision_model` + `connector`; Qwen2-VL's `visual`, whose merger is its connector).
    Turns off the gradients of everything else; returns the number of trainable parameters."""
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    trainable = 0
    for name, param in base.named_parameters():
        # Idefics3: vision_model + connector; Qwen2-VL: visual (its merger is the connector)
        keep = any(part in f".{name}" for part in (".vision_model.", ".connector.", ".visual."))
        param.requires_grad_(keep)
        trainable += param.numel() if keep else 0
    return trainable
