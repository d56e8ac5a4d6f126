"""Pictures by reference: an env's observation carries `ImageRef`s (a file and its sha256), never
pixels, so trajectories, replays and logs stay small and a picture is checked against the hash it
was shown with wherever it is read again (the generator, the learner, a replay, the report).

`save_image` stores an env's PIL picture once per content; `image_ref` checks a user's file;
`load_image` / `shown_image` read a reference back (model/vision.py turns it into a family's
pixel inputs).
"""

from __future__ import annotations

import functools
import hashlib
import io
import os
import tempfile
from pathlib import Path
from typing import Any

from agentic_rl.errors import UserInputError
from agentic_rl.types import ImageRef


class ImageError(UserInputError, ValueError):
    """A picture that cannot be used, the file named: missing, changed since it was shown,
    not a readable image (truncated, corrupt, another kind of file), a size the model family
    cannot take; or an observation whose text holds a literal placeholder token."""


def save_image(image: Any, directory: str | os.PathLike) -> ImageRef:
    """Store a PIL image as PNG under `directory`, named by the sha256 of its bytes (so the
    same picture is stored once however often an env shows it); returns its reference."""
    buffer = io.BytesIO()
    image.save(buffer, format="PNG")
    data = buffer.getvalue()
    digest = hashlib.sha256(data).hexdigest()
    path = Path(directory) / digest[:2] / f"{digest}.png"
    if not path.is_file():
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".img-")
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
        os.replace(tmp, path)  # atomic: a reader never sees half a file
    return ImageRef(path=str(path), sha256=digest)


def load_image(ref: ImageRef) -> Any:
    """The PIL image `ref` points at, after checking its bytes against the recorded hash."""
    try:
        data = Path(ref.path).read_bytes()
    except OSError as err:
        raise ImageError(f"image {ref.path} cannot be read: {err}") from err
    if hashlib.sha256(data).hexdigest() != ref.sha256:
        raise ImageError(f"image {ref.path} changed since it was shown (sha256 differs)")
    return decode_image(data, ref.path)


def decode_image(data: bytes, path: str) -> Any:
    """The RGB PIL image in the bytes `data` of the file `path`, fully decoded (a truncated
    file fails here, not later in a batch); an ImageError naming `path` where the bytes are
    not a picture PIL can read (PIL's own errors name no file)."""
    from PIL import Image

    try:
        with Image.open(io.BytesIO(data)) as image:
            return image.convert("RGB")
    except (OSError, ValueError, SyntaxError, Image.DecompressionBombError) as err:
        unknown = isinstance(err, Image.UnidentifiedImageError)  # its text names a BytesIO
        reason = "no image format recognised" if unknown else f"{type(err).__name__}: {err}"
        raise ImageError(
            f"image {path} is not a readable picture ({reason}): a truncated or corrupt "
            "file, or not an image (PNG, JPEG, ... that PIL opens)"
        ) from None


def image_ref(path: str | os.PathLike) -> ImageRef:
    """A reference to a picture file of the user's (for a custom env's `Observation.images`),
    checked now: it exists and decodes as an image, else an ImageError naming it."""
    try:
        data = Path(path).read_bytes()
    except OSError as err:
        raise ImageError(f"image {path} cannot be read: {err.strerror or err}") from None
    decode_image(data, str(path))
    return ImageRef(path=str(path), sha256=hashlib.sha256(data).hexdigest())


@functools.lru_cache(maxsize=1024)
def shown_image(ref: ImageRef) -> Any:
    """`load_image(ref)` memoised per reference (file and hash): an engine that takes PIL
    images (vLLM) gets each picture of a multi-turn episode's growing context decoded once, not
    once per turn. The hash is checked at the first read; later reads return those pixels."""
    return load_image(ref)
