"""A vector-quantised image tokenizer over fixed-size patches: images as discrete tokens.

Visual Planning (Xu et al. 2025, "Visual Planning: Let's Think Only with Images", VPRL) plans
with a large vision model that reads and writes images as VQGAN codes (256 per image). The
same interface at CPU scale, with nothing downloaded: an image is cut into `patch` x `patch`
pixel patches and each patch becomes the index of its nearest codebook vector (L2 in pixel
space); decoding tiles the codebook patches back into an image. The codebook is fitted by
k-means (k-means++ seeding, then Lloyd's iterations, weighted by how often each distinct patch
occurs) on patches of images the caller renders, as VQ-VAE codebooks are often initialised.

Shapes: an H x W RGB image with H, W multiples of `patch` gives (H / patch) * (W / patch) codes
in row-major order; the codebook is `[K, patch, patch, 3]` float32.

Codes travel as text of code words (envs/code_words.py: existing single-token vocabulary words,
so one code is one token id): `to_text` writes " w1 w2 ...", `parse` reads them back and says
what is wrong with a malformed one (an unknown word, a code past the codebook, the wrong count).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from agentic_rl.envs.code_words import CODE_WORDS, NUM_CODE_WORDS, parse_codes


def _patches(image: Any, patch: int) -> tuple[np.ndarray, tuple[int, int]]:
    """`image` (PIL or HxWx3 array) as [N, patch * patch * 3] float32 rows, and the grid shape."""
    pixels = np.asarray(image, dtype=np.float32)
    if pixels.ndim != 3 or pixels.shape[2] != 3:
        raise ValueError(f"expected an RGB image, got an array of shape {pixels.shape}")
    height, width = pixels.shape[:2]
    if height % patch or width % patch:
        raise ValueError(f"image of {width}x{height} is not a multiple of the {patch}-pixel patch")
    rows, cols = height // patch, width // patch
    grid = pixels.reshape(rows, patch, cols, patch, 3).transpose(0, 2, 1, 3, 4)
    return grid.reshape(rows * cols, patch * patch * 3), (rows, cols)


def _nearest(rows: np.ndarray, centres: np.ndarray) -> np.ndarray:
    """Index of the nearest centre (squared L2) for each row: [N, D] x [K, D] -> [N]."""
    distances = (
        (rows * rows).sum(1, keepdims=True) - 2.0 * rows @ centres.T + (centres * centres).sum(1)
    )
    return distances.argmin(1)


def kmeans(
    points: np.ndarray, weights: np.ndarray, k: int, iterations: int = 25, seed: int = 0
) -> np.ndarray:
    """Weighted k-means: k-means++ seeding (Arthur & Vassilvitskii 2007), then Lloyd's steps.

    points [N, D], weights [N] (> 0) -> centres [min(k, N), D]. With N <= k every point is its
    own centre. Deterministic given `seed`."""
    if len(points) <= k:
        return points.copy()
    rng = np.random.default_rng(seed)
    centres = [points[rng.choice(len(points), p=weights / weights.sum())]]
    closest = ((points - centres[0]) ** 2).sum(1)
    for _ in range(1, k):
        mass = weights * closest
        if mass.sum() <= 0:
            break
        centres.append(points[rng.choice(len(points), p=mass / mass.sum())])
        closest = np.minimum(closest, ((points - centres[-1]) ** 2).sum(1))
    centre_array = np.stack(centres)
    for _ in range(iterations):
        assign = _nearest(points, centre_array)
        updated = centre_array.copy()
        for j in range(len(centre_array)):
            members = assign == j
            if members.any():
                w = weights[members][:, None]
                updated[j] = (points[members] * w).sum(0) / w.sum()
        if np.allclose(updated, centre_array):
            break
        centre_array = updated
    return centre_array


class PatchVQ:
    """Encode images to codes and back with a patch codebook (module docstring)."""

    def __init__(self, codebook: np.ndarray, patch: int) -> None:
        codebook = np.asarray(codebook, dtype=np.float32)
        if codebook.ndim != 4 or codebook.shape[1:] != (patch, patch, 3):
            raise ValueError(f"codebook must be [K, {patch}, {patch}, 3], got {codebook.shape}")
        if not 1 <= len(codebook) <= NUM_CODE_WORDS:
            raise ValueError(f"codebook size must be in 1..{NUM_CODE_WORDS}, got {len(codebook)}")
        self.codebook = codebook
        self.patch = patch
        self._flat = codebook.reshape(len(codebook), -1)

    @classmethod
    def fit(
        cls, images: Sequence[Any], k: int, patch: int, iterations: int = 25, seed: int = 0
    ) -> PatchVQ:
        """A codebook of at most `k` patches fitted on `images` (weighted k-means over the
        distinct patches; fewer than `k` distinct patches are all kept)."""
        if not images:
            raise ValueError("fit needs at least one image")
        rows = np.concatenate([_patches(image, patch)[0] for image in images])
        distinct, counts = np.unique(rows, axis=0, return_counts=True)
        centres = kmeans(distinct, counts.astype(np.float64), k, iterations, seed)
        return cls(centres.reshape(len(centres), patch, patch, 3), patch)

    @property
    def size(self) -> int:
        return len(self.codebook)

    def encode(self, image: Any) -> list[int]:
        """The image's codes, row-major, one per patch."""
        rows, _ = _patches(image, self.patch)
        return [int(c) for c in _nearest(rows, self._flat)]

    def decode(self, codes: Sequence[int], grid: tuple[int, int]) -> Any:
        """The PIL image whose patches are the codebook entries of `codes` (rows x cols)."""
        from PIL import Image

        rows, cols = grid
        if len(codes) != rows * cols:
            raise ValueError(f"{len(codes)} codes for a {rows}x{cols} grid of patches")
        tiles = self.codebook[np.asarray(codes, dtype=np.int64)]
        pixels = tiles.reshape(rows, cols, self.patch, self.patch, 3).transpose(0, 2, 1, 3, 4)
        side = pixels.reshape(rows * self.patch, cols * self.patch, 3)
        return Image.fromarray(np.clip(np.rint(side), 0, 255).astype(np.uint8), "RGB")

    def to_text(self, codes: Sequence[int]) -> str:
        """Codes as code words, each with its leading space (one token per code)."""
        return "".join(" " + CODE_WORDS[c] for c in codes)

    def parse(self, text: str, count: int) -> list[int]:
        """The codes of `text`; CodeParseError naming the first problem."""
        return parse_codes(text, count, self.size, "image token")
