"""Vision-language policies: pixels, placeholder tokens, the families' specs.

The image path is token-native like everything else. An env's observation carries `ImageRef`s
(a file and its sha256, model/images.py); the chat format writes the model's placeholder text for each image
(`image_placeholder`: e.g. Idefics3 / SmolVLM's `<fake_token_around_image><global-img>` +
`<image>` x tokens_per_image + `<fake_token_around_image>`), which the tokenizer maps to single
special ids with loss mask 0; the generator and the learner turn the same refs into the same
pixel inputs (`vision_inputs`, PIL + numpy only: torchvision does not import beside the pinned
CPU torch here) and the model scatters its image features into the image-token positions.

Supported families, each loaded with `AutoModelForImageTextToText` from any local directory,
each described by a spec (`spec_of_dir`) that says how many placeholder tokens one picture takes,
which pixel inputs the model wants and which positions its rotary embedding reads:
- Idefics3 / SmolVLM (`Idefics3Spec`): a fixed number of image tokens per picture, one global
  view resized to the tower's `image_size` (no image splitting), pixel_values [B, N, 3, S, S],
  1-D positions. No pretrained one can be downloaded here, so model/graft.py builds one as
  SmolVLM is built, from the bundled SmolLM2 and a randomly initialised SigLIP-style tower.
- Qwen2-VL / Qwen2.5-VL (`Qwen2VLSpec`): native resolution, so the token count depends on the
  picture's size (`<|vision_start|>` + `<|image_pad|>` x (h/28)(w/28) + `<|vision_end|>` after
  Qwen's `smart_resize`); pixel inputs are flattened patches plus `image_grid_thw`, from
  Hugging Face's own PIL image processor (`Qwen2VLImageProcessorPil`: no torchvision); and the
  text model's rotary embedding is M-RoPE (Qwen2-VL, Wang et al. 2024, sec. 2.1), positions
  [3, B, T] (temporal, height, width) that `mrope_positions` computes from the token ids, so
  the learner and the KV-cached generator pass the same explicit positions.
"""

from __future__ import annotations

import functools
import json
import os
import shutil
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import torch
from torch import nn

from agentic_rl.model.errors import ModelLoadError
from agentic_rl.model.images import ImageError, load_image
from agentic_rl.types import ImageRef

IMAGE_TOKEN = "<image>"
AROUND_IMAGE = "<fake_token_around_image>"
GLOBAL_IMAGE = "<global-img>"
VISION_TOKENS = (AROUND_IMAGE, IMAGE_TOKEN, GLOBAL_IMAGE)
QWEN_VISION_START = "<|vision_start|>"
QWEN_IMAGE_PAD = "<|image_pad|>"
QWEN_VISION_END = "<|vision_end|>"
QWEN_VISION_TOKENS = (QWEN_VISION_START, QWEN_IMAGE_PAD, QWEN_VISION_END, "<|video_pad|>")
IDEFICS3_FAMILIES = ("idefics3", "smolvlm")
QWEN2_VL_FAMILIES = ("qwen2_vl", "qwen2_5_vl")
FAMILIES = IDEFICS3_FAMILIES + QWEN2_VL_FAMILIES
"""Model types whose image inputs this module builds."""


QWEN_MAX_ASPECT_RATIO = 200
"""The longest side over the shortest that Qwen2-VL's image processor takes (`smart_resize`);
Idefics3 / SmolVLM resize every picture to one square, which takes any aspect ratio."""
PLACEHOLDER_TOKENS = VISION_TOKENS + QWEN_VISION_TOKENS
"""Texts a vision-language tokenizer reads as picture placeholders, never as plain text."""


def refuse_placeholder_text(text: str, where: str) -> None:
    """ImageError if `text` (what an env or a tool wrote, shown to a vision-language policy)
    holds a literal placeholder token such as `<image>`: the tokenizer would read it as a
    picture's slot with no picture behind it, and the model would fail with a mismatch of
    image features and image tokens far from the cause. `where` names the text's source."""
    found = [token for token in PLACEHOLDER_TOKENS if token in text]
    if found:
        raise ImageError(
            f"{where} holds the literal text {found[0]!r}, which a vision-language model's "
            "tokenizer reads as a picture placeholder (no picture is behind it): remove or "
            "reword it in the env's text (e.g. 'image'), and pass pictures as "
            "Observation.images"
        )


@dataclass(frozen=True)
class Idefics3Spec:
    """How an Idefics3 / SmolVLM model takes an image: its side in pixels, the normalisation,
    and the placeholder text the chat format inserts for it (the same for every picture)."""

    image_size: int
    tokens_per_image: int
    image_token_id: int
    mean: tuple[float, float, float] = (0.5, 0.5, 0.5)
    std: tuple[float, float, float] = (0.5, 0.5, 0.5)

    special_tokens: ClassVar[tuple[str, ...]] = VISION_TOKENS
    """Placeholder tokens the model must never sample."""
    mrope: ClassVar[bool] = False
    """Does the text model read 3-D (M-RoPE) positions?"""

    @property
    def placeholder(self) -> str:
        """One image as SmolVLM's processor writes a global (unsplit) image."""
        return AROUND_IMAGE + GLOBAL_IMAGE + IMAGE_TOKEN * self.tokens_per_image + AROUND_IMAGE

    def image_placeholder(self, ref: ImageRef) -> str:
        """The placeholder text of the picture `ref` (the same for all)."""
        return self.placeholder

    def image_tokens(self, ref: ImageRef) -> int:
        """How many `image_token_id` tokens the picture `ref` takes."""
        return self.tokens_per_image

    def pixel_inputs(self, rows: Sequence[Sequence[ImageRef]]) -> dict[str, torch.Tensor]:
        """The forward's image arguments for each row's pictures: pixel_values [B, N, 3, S, S]."""
        return {"pixel_values": pixel_values(rows, self)}


@dataclass(frozen=True)
class Qwen2VLSpec:
    """How a Qwen2-VL / Qwen2.5-VL model takes an image: Hugging Face's image processor of the
    model directory (`processor_dir`; None: the processor's defaults with the config's patch
    sizes) resizes each picture to a multiple of patch_size x merge_size pixels and cuts it into
    patches; every merge_size x merge_size patches become one `<|image_pad|>` token."""

    image_token_id: int
    patch_size: int = 14
    merge_size: int = 2
    temporal_patch_size: int = 2
    processor_dir: str | None = None

    special_tokens: ClassVar[tuple[str, ...]] = QWEN_VISION_TOKENS
    mrope: ClassVar[bool] = True

    def grid(self, ref: ImageRef) -> tuple[int, int, int]:
        """(t, h, w) in patches of the picture `ref` after the processor's resize."""
        return _qwen_patches(ref, self)[1]

    def image_tokens(self, ref: ImageRef) -> int:
        t, h, w = self.grid(ref)
        return t * h * w // self.merge_size**2

    def image_placeholder(self, ref: ImageRef) -> str:
        """Qwen's chat template's picture, expanded as its processor expands `<|image_pad|>`."""
        return QWEN_VISION_START + QWEN_IMAGE_PAD * self.image_tokens(ref) + QWEN_VISION_END

    def pixel_inputs(self, rows: Sequence[Sequence[ImageRef]]) -> dict[str, torch.Tensor]:
        """pixel_values [sum of patches, C x T x P x P] and image_grid_thw [images, 3], the
        pictures of all rows in order (the layout Qwen2-VL's processor returns for a batch)."""
        found = [_qwen_patches(ref, self) for refs in rows for ref in refs]
        return {
            "pixel_values": torch.from_numpy(np.concatenate([p for p, _ in found])),
            "image_grid_thw": torch.tensor([g for _, g in found], dtype=torch.long),
        }

    def positions(self, ids: Sequence[int], refs: Sequence[ImageRef]) -> torch.Tensor:
        """M-RoPE positions [3, L] of the token ids `ids` whose pictures are `refs`."""
        grids = [self.grid(ref) for ref in refs]
        return mrope_positions(ids, grids, self.image_token_id, self.merge_size)


VisionSpec = Idefics3Spec | Qwen2VLSpec
"""How a vision-language model takes images (one class a supported family)."""
ImagePlaceholder = Callable[[ImageRef], str]
"""A picture's placeholder text for the chat format (`image_placeholder`)."""


def mrope_positions(
    ids: Sequence[int], grids: Sequence[tuple[int, int, int]], image_token_id: int, merge: int
) -> torch.Tensor:
    """Qwen2-VL's multimodal rotary positions (M-RoPE; Wang et al. 2024, "Qwen2-VL", sec. 2.1).

    ids: [L] token ids; grids: each picture's (t, h, w) in patches, in order; each picture is
    a run of t x (h / merge) x (w / merge) `image_token_id` tokens. Returns [3, L] long:
    a text token at running position p gets (p, p, p); the picture starting at p gets
    (p + i_t, p + i_h, p + i_w) over its merged (t, h, w) grid, and the text after it continues
    at p + max(h, w) / merge (as transformers' `get_rope_index` computes it for images).
    A run of image tokens that does not match its picture's size is refused."""
    out = torch.empty((3, len(ids)), dtype=torch.long)
    pos, i, k = 0, 0, 0
    while i < len(ids):
        if ids[i] != image_token_id:
            out[:, i] = pos
            pos, i = pos + 1, i + 1
            continue
        if k >= len(grids):
            raise ValueError(f"image token at position {i} but only {len(grids)} picture(s)")
        t, h, w = grids[k][0], grids[k][1] // merge, grids[k][2] // merge
        n = t * h * w
        if any(tok != image_token_id for tok in ids[i : i + n]) or len(ids[i : i + n]) < n:
            raise ValueError(f"picture {k} needs {n} image tokens from position {i}")
        tt, hh, ww = torch.meshgrid(
            torch.arange(t), torch.arange(h), torch.arange(w), indexing="ij"
        )
        out[:, i : i + n] = torch.stack([tt.flatten(), hh.flatten(), ww.flatten()]) + pos
        pos, i, k = pos + max(h, w), i + n, k + 1
    if k != len(grids):
        raise ValueError(f"{len(grids)} picture(s) but image tokens for {k}")
    return out


def is_vision_config(config: Any) -> bool:
    """Is `config` (a transformers config) a vision-language model's?"""
    return getattr(config, "vision_config", None) is not None


def vision_spec(
    config: Any, preprocessor: dict | None = None, model_dir: str | None = None
) -> VisionSpec:
    """The spec of a supported family's config; `preprocessor` (preprocessor_config.json)
    gives Idefics3's normalisation, `model_dir` the directory Qwen2-VL's image processor is
    read from. Other VLM families are refused by name: their image inputs are laid out
    differently."""
    model_type = getattr(config, "model_type", "?")
    if model_type not in FAMILIES:
        raise ModelLoadError(
            f"vision-language model type {model_type!r} is not supported for image inputs "
            f"(supported: {', '.join(FAMILIES)})"
        )
    vision = config.vision_config
    if model_type in QWEN2_VL_FAMILIES:
        has_processor = model_dir is not None and preprocessor is not None
        return Qwen2VLSpec(
            image_token_id=int(config.image_token_id),
            patch_size=int(vision.patch_size),
            merge_size=int(vision.spatial_merge_size),
            temporal_patch_size=int(vision.temporal_patch_size),
            processor_dir=model_dir if has_processor else None,
        )
    side = vision.image_size // vision.patch_size
    tokens = side * side // (config.scale_factor**2)
    pre = preprocessor or {}
    mean = tuple(pre.get("image_mean", (0.5, 0.5, 0.5)))
    std = tuple(pre.get("image_std", (0.5, 0.5, 0.5)))
    return Idefics3Spec(int(vision.image_size), int(tokens), int(config.image_token_id), mean, std)  # type: ignore[arg-type]


@functools.lru_cache(maxsize=16)
def spec_of_dir(path: str) -> VisionSpec | None:
    """The VisionSpec of the model directory `path`, or None for a text-only model (or a path
    that is not a model directory, such as a tokenizer's hub-style name)."""
    config_file = Path(path) / "config.json"
    if not config_file.is_file():
        return None
    raw = json.loads(config_file.read_text())
    if "vision_config" not in raw:
        return None
    from transformers import AutoConfig

    pre_file = Path(path) / "preprocessor_config.json"
    pre = json.loads(pre_file.read_text()) if pre_file.is_file() else None
    return vision_spec(AutoConfig.from_pretrained(path), pre, str(path))


def spec_of_model(model: nn.Module) -> VisionSpec | None:
    """The VisionSpec of a loaded model (None: text-only)."""
    if hasattr(model, "get_base_model"):  # PEFT
        model = model.get_base_model()
    config = getattr(model, "config", None)
    if not is_vision_config(config):
        return None
    cached = getattr(model, "_agentic_rl_vision_spec", None)
    if cached is None:
        name = getattr(config, "_name_or_path", "") or ""
        cached = spec_of_dir(name) if name and Path(name).is_dir() else None
        cached = cached or vision_spec(config)
        model._agentic_rl_vision_spec = cached  # type: ignore[attr-defined]
    return cached


CONFIG_TOKEN_IDS = (
    "image_token_id",
    "video_token_id",
    "vision_start_token_id",
    "vision_end_token_id",
)
"""Config attributes naming placeholder ids (Qwen2-VL has all four, Idefics3 the first)."""


def never_sampled_ids(model: nn.Module, tokenizer: Any = None) -> tuple[int, ...]:
    """The token ids a vision-language policy never samples: its spec's placeholder tokens
    (`special_tokens`; a sampled `<image>` would claim image features that do not exist); ()
    for a text-only model.

    The generator masks them in the logits it samples from and the learner in its softmax
    (vocab_logprobs.py `mask_logits`, `OutputHead.masked`), so both score the same
    distribution. With `tokenizer` they are read from its vocabulary and recorded on the model
    (as its spec is), because the learner's logprob code sees the model alone: `load_policy`
    and every generator record them. Without one: the recorded ids, else the ids the model's
    config names (CONFIG_TOKEN_IDS), for a model no tokenizer has been paired with."""
    if hasattr(model, "get_base_model"):  # PEFT
        model = model.get_base_model()
    spec = spec_of_model(model)
    if spec is None:
        return ()
    if tokenizer is not None:
        vocab = tokenizer.get_vocab()
        ids = tuple(sorted({int(vocab[t]) for t in spec.special_tokens if t in vocab}))
        model._agentic_rl_never_sampled = ids  # type: ignore[attr-defined]
        return ids
    recorded = getattr(model, "_agentic_rl_never_sampled", None)
    if recorded is not None:
        return tuple(recorded)
    config = model.config
    found = (getattr(config, name, None) for name in CONFIG_TOKEN_IDS)
    return tuple(sorted({int(i) for i in found if isinstance(i, int) and i >= 0}))


def image_placeholder(tokenizer: Any) -> ImagePlaceholder | None:
    """A picture's placeholder text for the model `tokenizer` was loaded with (None for a
    text-only model), read from that model directory's config. Each placeholder token must be
    one special token of `tokenizer` with the id the model puts image features at: otherwise
    the features would land on other tokens, so a mismatch is refused here."""
    spec = spec_of_dir(str(getattr(tokenizer, "name_or_path", "") or ""))
    if spec is None:
        return None
    image_token = IMAGE_TOKEN if isinstance(spec, Idefics3Spec) else QWEN_IMAGE_PAD
    found = tokenizer.convert_tokens_to_ids(image_token)
    if found != spec.image_token_id:
        raise ModelLoadError(
            f"the tokenizer maps {image_token} to {found}, the model's image_token_id is "
            f"{spec.image_token_id}: image features would land on other tokens"
        )
    return spec.image_placeholder


def preprocess(image: Any, spec: Idefics3Spec) -> np.ndarray:
    """RGB image -> [3, S, S] float32: resized to the tower's side (bilinear), scaled to [0, 1],
    then (x - mean) / std per channel, as SigLIP / Idefics3 image processors do."""
    from PIL import Image

    side = spec.image_size
    if image.size != (side, side):
        image = image.resize((side, side), Image.Resampling.BILINEAR)
    array = np.asarray(image, dtype=np.float32) / 255.0  # [S, S, 3]
    mean = np.asarray(spec.mean, dtype=np.float32)
    std = np.asarray(spec.std, dtype=np.float32)
    return ((array - mean) / std).transpose(2, 0, 1).copy()


_PIXELS: OrderedDict[tuple[str, VisionSpec], Any] = OrderedDict()
_PIXEL_CACHE_SIZE = 4096  # 80 x 80 images: ~77 KB each


def _memoised(ref: ImageRef, spec: VisionSpec, compute: Callable[[Any], Any]) -> Any:
    """`compute(load_image(ref))`, memoised by the picture's hash and the spec: the generator
    and the learner read the same image many times per step (each turn's context, each
    micro-batch), and a Qwen2-VL placeholder needs the picture's size."""
    key = (ref.sha256, spec)
    cached = _PIXELS.get(key)
    if cached is None:
        cached = compute(load_image(ref))
        _PIXELS[key] = cached
        if len(_PIXELS) > _PIXEL_CACHE_SIZE:
            _PIXELS.popitem(last=False)
    else:
        _PIXELS.move_to_end(key)
    return cached


def image_pixels(ref: ImageRef, spec: Idefics3Spec) -> np.ndarray:
    """`preprocess(load_image(ref))`, memoised by hash."""
    return _memoised(ref, spec, lambda image: preprocess(image, spec))


@functools.lru_cache(maxsize=8)
def _qwen_processor(spec: Qwen2VLSpec) -> Any:
    """Hugging Face's PIL image processor of a Qwen2-VL directory (the one its processor runs,
    on PIL and numpy only), or its defaults with the config's patch sizes."""
    from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import (
        Qwen2VLImageProcessorPil,
    )

    sizes = {
        "patch_size": spec.patch_size,
        "merge_size": spec.merge_size,
        "temporal_patch_size": spec.temporal_patch_size,
    }
    if spec.processor_dir is None:
        return Qwen2VLImageProcessorPil(**sizes)
    return Qwen2VLImageProcessorPil.from_pretrained(spec.processor_dir, **sizes)


def _qwen_patches(ref: ImageRef, spec: Qwen2VLSpec) -> tuple[np.ndarray, tuple[int, int, int]]:
    """The picture's flattened patches [t x h x w, C x T x P x P] and its (t, h, w) grid."""

    def compute(image: Any) -> tuple[np.ndarray, tuple[int, int, int]]:
        width, height = image.size
        ratio = max(width, height) / min(width, height)
        if ratio > QWEN_MAX_ASPECT_RATIO:
            raise ImageError(
                f"image {ref.path} is {width}x{height} pixels, an aspect ratio of {ratio:.0f}:1; "
                f"Qwen2-VL models take at most {QWEN_MAX_ASPECT_RATIO}:1 (their image "
                "processor's limit): crop or pad the picture"
            )
        out = _qwen_processor(spec)(images=[image], return_tensors="np")
        t, h, w = (int(x) for x in out["image_grid_thw"][0])
        return np.ascontiguousarray(out["pixel_values"], dtype=np.float32), (t, h, w)

    return _memoised(ref, spec, compute)


def pixel_values(rows: Sequence[Sequence[ImageRef]], spec: Idefics3Spec) -> torch.Tensor:
    """The images of each row -> pixel_values [B, N, 3, S, S] (N: the most images of any row;
    rows with fewer are padded with all-zero images, which Idefics3 drops before its tower)."""
    most = max((len(r) for r in rows), default=0)
    side = spec.image_size
    out = torch.zeros((len(rows), most, 3, side, side), dtype=torch.float32)
    for i, refs in enumerate(rows):
        for j, ref in enumerate(refs):
            out[i, j] = torch.from_numpy(image_pixels(ref, spec))
    return out


def vision_inputs(
    model: nn.Module,
    rows: Sequence[Sequence[ImageRef]] | None,
    device: torch.device | str | None = None,
    input_ids: torch.Tensor | None = None,
    with_positions: bool = True,
) -> dict[str, torch.Tensor]:
    """The extra forward arguments for the images of a batch's rows: {} when no row has one
    (the text-only path is untouched), else the family's pixel inputs (`pixel_values`, and
    Qwen2-VL's `image_grid_thw`). With `input_ids` [B, T] (whole rows), each row's image
    tokens must number what its pictures take: a mismatch would scatter image features into
    the wrong positions, so it is refused; and an M-RoPE model gets its `position_ids`
    [3, B, T] (`with_positions=False`: the caller passes its own, as the KV-cached generator
    does for prompts whose start is already cached)."""
    if not rows or not any(rows):
        return {}
    spec = spec_of_model(model)
    if spec is None:
        raise ValueError("these samples carry images but the model is not a vision-language model")
    dtype = next(model.parameters()).dtype
    out = {
        name: value.to(device=device, dtype=dtype if value.is_floating_point() else value.dtype)
        for name, value in spec.pixel_inputs(rows).items()
    }
    if input_ids is None:
        return out
    counts = (input_ids == spec.image_token_id).sum(-1).tolist()
    for i, (count, refs) in enumerate(zip(counts, rows, strict=True)):
        wanted = sum(spec.image_tokens(ref) for ref in refs)
        if count != wanted:
            raise ValueError(f"row {i}: {count} image tokens for {len(refs)} images of {wanted}")
    if isinstance(spec, Qwen2VLSpec) and with_positions:
        positions = [
            spec.positions(row.tolist(), refs) for row, refs in zip(input_ids, rows, strict=True)
        ]
        out["position_ids"] = torch.stack(positions, dim=1).to(input_ids.device)
    return out


PROCESSOR_FILES = (
    "preprocessor_config.json",
    "processor_config.json",
    "video_preprocessor_config.json",
)
"""What a vision-language model directory holds beside weights and tokenizer: how its pictures
become pixels and placeholder tokens (sizes, normalisation, image_seq_len)."""


def copy_processor_files(model: nn.Module, target: str | os.PathLike) -> list[str]:
    """Copy the processor files of the directory `model` was loaded from into `target` (a
    saved copy of it), those `target` lacks; returns their names. Without them a saved
    Qwen2-VL would read its pictures at the processor's default resolution (another number of
    image tokens) and an Idefics3 model with the default normalisation, so the next stage of a
    pipeline, or an export, would see other pixels than the policy was trained on."""
    if hasattr(model, "get_base_model"):  # PEFT
        model = model.get_base_model()
    source = Path(getattr(getattr(model, "config", None), "_name_or_path", "") or "")
    if not is_vision_config(getattr(model, "config", None)) or not source.is_dir():
        return []
    copied = []
    for name in PROCESSOR_FILES:
        if (source / name).is_file() and not (Path(target) / name).exists():
            shutil.copyfile(source / name, Path(target) / name)
            copied.append(name)
    spec_of_dir.cache_clear()
    return copied
