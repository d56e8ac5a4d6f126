"""Stage 0 of a grafted vision-language policy: pretraining the vision tower on its own.

Real VLMs align a vision encoder that was pretrained first (LLaVA and SmolVLM start from CLIP /
SigLIP, trained on hundreds of millions of image-text pairs); only the connector, and later the
text model, are trained on top. No pretrained tower can be downloaded here, so the grafted tower
(model/graft.py `graft_vlm`: random SigLIP-style weights) is pretrained on the rendered data
itself. That is where this stage departs from LLaVA: the tower learns the synthetic scenes it
will be asked about (envs/vision/scenes.py `render_scene`), not natural images.

The method is supervised per-patch classification, straight on the tower: each 16-pixel patch
of an image is one cell of the rendered grid, so the tower's output at patch `p` (its
`last_hidden_state` [B, patches, hidden]) is trained, through temporary linear heads, to name
that cell's content (empty, a shape of a colour, a digit, a wall: CONTENT_CLASSES) and its row
and column. A dense, local, directly supervised signal: every cell of every picture is a label,
unlike the one answer word of a scene question, which (measured: bench/README.md, Perception)
gives a random tower too little gradient once the text model has learned the answer prior. The
heads are thrown away; the tower keeps its weights, and the alignment stage
(train/vision_align.py) then trains the connector and the text model on top. `prealign_connector`
warm-starts that connector first, cheaply (no text-model forward): each image token is regressed
onto the text model's embedding of its cell's caption words.

Training scenes are drawn only from the train split of `visual_qa` (its hash of the scene), and
the probe's accuracy is measured on held-out scenes of the eval split.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import torch
from torch import nn

from agentic_rl.envs.vision.scenes import COLOURS, SHAPES, Cell, render_scene, scene_split
from agentic_rl.model.lora import unwrap
from agentic_rl.model.vision import Idefics3Spec, preprocess, spec_of_model

CONTENT_CLASSES: tuple[tuple[str, str], ...] = (
    ("empty", ""),
    *((shape, colour) for shape in SHAPES for colour in COLOURS),
    *(("digit", str(d)) for d in range(10)),
    ("wall", ""),
)
"""What a cell holds, one class each: empty, 3 shapes x 6 colours, 10 digits, a wall (30)."""
_CLASS_OF = {content: i for i, content in enumerate(CONTENT_CLASSES)}


def vision_tower(model: nn.Module) -> nn.Module:
    """The SigLIP-style vision tower of an Idefics3-family model (PEFT / wrappers unwrapped)."""
    base = unwrap(model)
    if hasattr(base, "get_base_model"):
        base = base.get_base_model()
    return base.model.vision_model


def grid_side(model: nn.Module) -> int:
    """Cells per side of the grids the tower reads: one cell per patch."""
    vision = unwrap(model).config.vision_config
    return int(vision.image_size // vision.patch_size)


def random_scene(rng: random.Random, side: int, max_objects: int) -> dict[Cell, tuple[str, str]]:
    """A scene for pretraining: 1..max_objects cells filled, each a coloured shape (60%), a
    digit (30%) or a wall (10%); denser than `visual_qa`'s 2-5 objects so each picture labels
    more occupied cells."""
    cells = [(r, c) for r in range(side) for c in range(side)]
    chosen = rng.sample(cells, rng.randint(1, min(max_objects, len(cells))))
    objects: dict[Cell, tuple[str, str]] = {}
    for cell in chosen:
        draw = rng.random()
        if draw < 0.6:
            objects[cell] = (rng.choice(SHAPES), rng.choice(list(COLOURS)))
        elif draw < 0.9:
            objects[cell] = ("digit", str(rng.randint(0, 9)))
        else:
            objects[cell] = ("wall", "")
    return objects


def cell_labels(objects: dict[Cell, tuple[str, str]], side: int) -> list[int]:
    """The content class (CONTENT_CLASSES) of each cell, row by row (the tower's patch order)."""
    return [
        _CLASS_OF.get(objects.get((r, c), ("empty", "")), 0)
        for r in range(side)
        for c in range(side)
    ]


def idefics3_spec(model: nn.Module) -> Idefics3Spec:
    """The model's image spec; these stages need the Idefics3 family (one global picture, one
    patch per grid cell), not Qwen2-VL's processor-resized patch grids."""
    spec = spec_of_model(model)
    if not isinstance(spec, Idefics3Spec):
        raise ValueError(f"tower pretraining needs an Idefics3-family model, got spec {spec!r}")
    return spec


def scene_batch(
    scenes: list[dict[Cell, tuple[str, str]]], side: int, spec: Idefics3Spec
) -> tuple[torch.Tensor, torch.Tensor]:
    """Rendered, preprocessed pictures [B, 3, S, S] (model/vision.py `preprocess`, as the
    policy sees them) and their cell labels [B, side * side]."""
    pixels = np.stack([preprocess(render_scene(s, size=side), spec) for s in scenes])
    labels = [cell_labels(s, side) for s in scenes]
    return torch.from_numpy(pixels), torch.tensor(labels, dtype=torch.long)


def split_scenes(
    rng: random.Random, n: int, side: int, max_objects: int, split: str
) -> list[dict[Cell, tuple[str, str]]]:
    """`n` random scenes of `split` (visual_qa's hash split: held-out scenes never train)."""
    out: list[dict[Cell, tuple[str, str]]] = []
    while len(out) < n:
        scene = random_scene(rng, side, max_objects)
        if scene_split(scene) == split:
            out.append(scene)
    return out


class CellProbe(nn.Module):
    """The temporary heads: content class, row and column of each patch, linear on its feature."""

    def __init__(self, hidden: int, side: int) -> None:
        super().__init__()
        self.content = nn.Linear(hidden, len(CONTENT_CLASSES))
        self.row = nn.Linear(hidden, side)
        self.col = nn.Linear(hidden, side)

    def forward(self, features: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        return self.content(features), self.row(features), self.col(features)


def probe_accuracy(
    tower: nn.Module, probe: CellProbe, pixels: torch.Tensor, labels: torch.Tensor
) -> dict[str, float]:
    """Per-cell accuracy of the probe: over all cells, over occupied cells (the empty cells are
    most of a picture, so `cells` alone flatters), and the majority-class baseline of all cells."""
    was_training = tower.training
    tower.eval()
    with torch.no_grad():
        features = tower(pixel_values=pixels.to(next(tower.parameters()).dtype)).last_hidden_state
        content, _, _ = probe(features)
    tower.train(was_training)
    right = content.argmax(-1) == labels
    occupied = labels != 0
    majority = torch.bincount(labels.flatten()).max().item() / labels.numel()
    return {
        "cells": right.float().mean().item(),
        "occupied_cells": right[occupied].float().mean().item() if occupied.any() else 0.0,
        "majority_cells": majority,
    }


def held_out_batch(
    scenes: int, side: int, max_objects: int, spec: Idefics3Spec, seed: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """The held-out scenes (eval split) both stages are measured on: pixels and cell labels."""
    rng = random.Random(f"vision_pretrain/eval/{seed}")
    return scene_batch(split_scenes(rng, scenes, side, max_objects, "eval"), side, spec)


def pretrain_tower(
    model: nn.Module,
    steps: int = 600,
    batch_size: int = 64,
    lr: float = 1e-3,
    max_objects: int = 12,
    eval_scenes: int = 256,
    seed: int = 0,
    max_minutes: float = 0.0,
    on_step: Callable[[int, int, float], None] | None = None,
) -> dict[str, Any]:
    """Pretrain `model`'s vision tower in place by per-patch classification (module docstring):
    `steps` AdamW steps (constant `lr`, gradient norm clipped at 1) of `batch_size` fresh
    train-split scenes, the heads trained with it and then dropped (nothing but the tower's
    weights changes in `model`). `max_minutes` > 0 stops after the step that passes it.
    Returns the probe's per-cell accuracy on held-out scenes (beside the majority class's), the
    steps, the losses and the seconds."""
    spec = idefics3_spec(model)
    side = grid_side(model)
    tower = vision_tower(model)
    dtype = next(tower.parameters()).dtype
    generator = torch.Generator().manual_seed(seed)
    probe = CellProbe(tower.config.hidden_size, side).to(dtype)
    with torch.no_grad():  # seeded head init, independent of the global RNG
        for layer in (probe.content, probe.row, probe.col):
            bound = 1.0 / layer.in_features**0.5
            layer.weight.copy_(
                torch.empty_like(layer.weight).uniform_(-bound, bound, generator=generator)
            )
            layer.bias.zero_()
    rng = random.Random(f"vision_pretrain/{seed}")
    held_pixels, held_labels = held_out_batch(eval_scenes, side, max_objects, spec, seed)
    grads = [p.requires_grad for p in tower.parameters()]
    for p in tower.parameters():
        p.requires_grad_(True)
    optimizer = torch.optim.AdamW([*tower.parameters(), *probe.parameters()], lr=lr)
    ce = nn.CrossEntropyLoss()
    rows = torch.arange(side).repeat_interleave(side)
    cols = torch.arange(side).repeat(side)
    tower.train()
    losses: list[float] = []
    started = time.perf_counter()
    for step in range(1, steps + 1):
        pixels, labels = scene_batch(
            split_scenes(rng, batch_size, side, max_objects, "train"), side, spec
        )
        features = tower(pixel_values=pixels.to(dtype)).last_hidden_state  # [B, side*side, H]
        content, row, col = probe(features)
        b = labels.shape[0]
        loss = (
            ce(content.flatten(0, 1), labels.flatten())
            + ce(row.flatten(0, 1), rows.repeat(b))
            + ce(col.flatten(0, 1), cols.repeat(b))
        )
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_([*tower.parameters(), *probe.parameters()], 1.0)
        optimizer.step()
        losses.append(loss.item())
        if on_step is not None:
            on_step(step, steps, losses[-1])
        if max_minutes and time.perf_counter() - started > 60 * max_minutes:
            break
    seconds = time.perf_counter() - started
    for p, g in zip(tower.parameters(), grads, strict=True):
        p.requires_grad_(g)
    after = probe_accuracy(tower, probe, held_pixels, held_labels)
    return {
        "steps": len(losses),
        "batch_size": batch_size,
        "lr": lr,
        "first_loss": round(losses[0], 4) if losses else None,
        "last_loss": round(losses[-1], 4) if losses else None,
        "seconds": round(seconds, 1),
        "held_out_scenes": eval_scenes,
        "probe_after": after,
    }


def cell_words(content: tuple[str, str]) -> str:
    """The words a cell's content is written with in the dense caption (envs/vision/scenes.py
    `describe_scene`): ` red circle`, ` digit 7`, ` wall`; an empty cell is ` empty`."""
    kind, value = content
    if kind in ("empty", "wall"):
        return f" {kind}"
    return f" digit {value}" if kind == "digit" else f" {value} {kind}"


def word_targets(model: nn.Module, tokenizer: Any) -> torch.Tensor:
    """One text-embedding target per content class [classes, text hidden]: the sum of the input
    embeddings of its words' tokens over sqrt(token count) (about one embedding's norm)."""
    embed = unwrap(model).get_input_embeddings().weight.detach()
    rows = []
    for content in CONTENT_CLASSES:
        ids = tokenizer(cell_words(content), add_special_tokens=False)["input_ids"]
        rows.append(embed[ids].sum(0) / len(ids) ** 0.5)
    return torch.stack(rows)


def prealign_connector(
    model: nn.Module,
    tokenizer: Any,
    steps: int = 200,
    batch_size: int = 32,
    lr: float = 3e-3,
    max_objects: int = 12,
    eval_scenes: int = 128,
    seed: int = 0,
) -> dict[str, Any]:
    """Warm-start the connector on the pretrained (frozen) tower: regress each patch's image
    token onto the text model's own embedding of its cell's caption words (`word_targets`:
    ` red circle`, ` digit 7`, ` empty`), by mean squared error, `steps` AdamW steps of
    `batch_size` train-split scenes. Cheap (no text-model forward) and it starts the text model
    on image tokens that already read like the words it must write, so stage 1 has to learn
    where to look rather than what a random vector means. Needs one image token per patch
    (the connector's scale factor 1). Returns the held-out fit: the fraction of image tokens
    whose nearest target is their own cell's (`token_accuracy`, also over occupied cells) and
    the mean cosine to the own target."""
    spec = idefics3_spec(model)
    base = unwrap(model)
    if base.config.scale_factor != 1:
        raise ValueError("prealign_connector needs a vision-language model with scale factor 1")
    side = grid_side(model)
    tower, connector = vision_tower(model), base.model.connector
    dtype = next(connector.parameters()).dtype
    targets = word_targets(model, tokenizer).to(dtype)
    rng = random.Random(f"vision_pretrain/connector/{seed}")
    held_pixels, held_labels = held_out_batch(eval_scenes, side, max_objects, spec, seed)

    def features(pixels: torch.Tensor) -> torch.Tensor:
        with torch.no_grad():
            return tower(pixel_values=pixels.to(dtype)).last_hidden_state

    optimizer = torch.optim.AdamW(connector.parameters(), lr=lr, weight_decay=0.0)
    grads = [p.requires_grad for p in connector.parameters()]
    for p in connector.parameters():
        p.requires_grad_(True)
    was_training = tower.training
    tower.eval()
    losses: list[float] = []
    started = time.perf_counter()
    for _ in range(steps):
        pixels, labels = scene_batch(
            split_scenes(rng, batch_size, side, max_objects, "train"), side, spec
        )
        loss = nn.functional.mse_loss(connector(features(pixels)), targets[labels])
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    with torch.no_grad():
        tokens = connector(features(held_pixels))  # [B, patches, text hidden]
        nearest = torch.cdist(tokens.flatten(0, 1), targets).argmin(-1).view_as(held_labels)
        cosine = nn.functional.cosine_similarity(tokens, targets[held_labels], dim=-1)
    tower.train(was_training)
    for p, g in zip(connector.parameters(), grads, strict=True):
        p.requires_grad_(g)
    right = nearest == held_labels
    occupied = held_labels != 0
    return {
        "steps": steps,
        "first_loss": round(losses[0], 6) if losses else None,
        "last_loss": round(losses[-1], 6) if losses else None,
        "seconds": round(time.perf_counter() - started, 1),
        "token_accuracy": right.float().mean().item(),
        "token_accuracy_occupied": right[occupied].float().mean().item(),
        "mean_cosine": cosine.mean().item(),
    }
