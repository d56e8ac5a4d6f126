"""Visual tools (OpenThinkImg-style): zoom into a region, read text (OCR), draw a box or a line.

OpenThinkImg (Su et al. 2025, "OpenThinkIMG: Learning to Think with Images via Visual Tool
Reinforcement Learning") gives a vision-language policy tools whose outputs are new images
(ZoomInSubfigure, SegmentRegionAroundPoint, DrawHorizontalLineByY, DrawVerticalLineByX) or text
(OCR), fed back as the next observation. The functions here are those operations on PIL images;
the env that owns the images applies them (envs/vision/visual_tools.py) and shows the result:

- `zoom(image, box)`: the region `box` = (x0, y0, x1, y1) in the image's pixels, upscaled
  (Lanczos) so its longer side is `side` pixels. A vision tower sees every image at its own
  small resolution (80 x 80 for the grafted tower), so small text is unreadable in the whole
  chart and readable in a zoomed crop: that is why the tool exists.
- `draw_box(image, box)` / `draw_line(image, axis, at)`: a copy with a red rectangle / a red
  horizontal (y = at) or vertical (x = at) line across the image.
- `split_image_name(argument, count)`: which image a call works on. A call reads img_1 (the
  question's picture) unless its argument starts with an earlier image's name, as OpenThinkImg's
  tools take any image shown so far: `<zoom>img_2: 0,0,160,160</zoom>` zooms into a zoom.
- `OcrEngine`: text lines and their boxes. It wraps RapidOCR (`rapidocr-onnxruntime`, PP-OCRv4
  detection + recognition as ONNX models shipped inside the wheel: offline, CPU). easyocr with
  the registry's offline English weights was the first choice, but it imports torchvision,
  which does not import beside the pinned CPU torch here, and installing it replaces torch
  with a multi-GB CUDA build. The engine is imported lazily (the optional extra
  `agentic-rl[visual-tools]`), so nothing loads unless an OCR call is made.

Tool schemas (`ZoomTool`, `OcrTool`, `DrawBoxTool`, `DrawLineTool`) let the tag chat format
parse `<zoom>x0,y0,x1,y1</zoom>` etc.; like the grid world's move tool they are applied by the
env, and calling one directly is an error.
"""

from __future__ import annotations

import importlib.util
import re
import threading
from dataclasses import dataclass
from typing import Any

from agentic_rl.tools.base import ToolError

Box = tuple[int, int, int, int]

MIN_REGION = 8
"""Smallest region side in pixels a zoom / OCR / box accepts: below it nothing is readable."""
RED = (230, 20, 20)
OCR_EXTRA = "visual-tools"


def parse_box(text: str, width: int, height: int) -> Box:
    """`"x0,y0,x1,y1"` (integers, spaces and brackets allowed) -> a box inside the image.

    Raises ToolError (shown to the agent) when the text is not four integers, the box is empty
    or inverted, or smaller than MIN_REGION pixels a side once clipped to the image."""
    numbers = re.findall(r"-?\d+", text)
    if len(numbers) != 4 or re.search(r"[^\d\s,\-()\[\]]", text):
        raise ToolError(f"expected a box x0,y0,x1,y1 in pixels, got {text.strip()[:60]!r}")
    x0, y0, x1, y1 = (int(n) for n in numbers)
    x0, x1 = max(0, x0), min(width, x1)
    y0, y1 = max(0, y0), min(height, y1)
    if x1 - x0 < MIN_REGION or y1 - y0 < MIN_REGION:
        raise ToolError(
            f"box {text.strip()!r} is empty or under {MIN_REGION} pixels a side inside the "
            f"{width}x{height} image (x0 < x1, y0 < y1)"
        )
    return x0, y0, x1, y1


def split_image_name(text: str, count: int) -> tuple[int, str]:
    """`"img_2: 10,20,90,100"` -> (1, "10,20,90,100"): the index of the image a tool call names
    among the `count` images shown so far, and the rest of its argument; (0, text), img_1, when
    the argument names none. OpenThinkImg's tools take any earlier image (a zoom of a zoom, OCR
    on a drawn copy); naming an image that does not exist is a ToolError (shown to the agent)."""
    match = re.match(r"\s*img_(\d+)\s*[:,]?\s*", text, re.IGNORECASE)
    if not match:
        return 0, text
    number = int(match.group(1))
    if not 1 <= number <= count:
        raise ToolError(f"img_{number} does not exist: the images so far are img_1 to img_{count}")
    return number - 1, text[match.end() :]


def parse_line(text: str, width: int, height: int) -> tuple[str, int]:
    """`"y=120"` or `"x=40"` -> ("y", 120): a line position inside the image (ToolError else)."""
    match = re.fullmatch(r"\s*([xy])\s*=\s*(\d+)\s*", text.lower())
    if not match:
        raise ToolError(f"expected y=NUMBER or x=NUMBER, got {text.strip()[:60]!r}")
    axis, at = match.group(1), int(match.group(2))
    limit = height if axis == "y" else width
    if at >= limit:
        raise ToolError(f"{axis}={at} is outside the image (0..{limit - 1})")
    return axis, at


def zoom(image: Any, box: Box, side: int) -> Any:
    """The region `box` of `image`, upscaled (Lanczos) so its longer side is `side` pixels."""
    from PIL import Image

    crop = image.crop(box)
    scale = side / max(crop.size)
    size = (max(1, round(crop.size[0] * scale)), max(1, round(crop.size[1] * scale)))
    return crop.resize(size, Image.Resampling.LANCZOS)


def draw_box(image: Any, box: Box) -> Any:
    """A copy of `image` with a 2-pixel red rectangle on `box`."""
    from PIL import ImageDraw

    out = image.copy()
    ImageDraw.Draw(out).rectangle(box, outline=RED, width=2)
    return out


def draw_line(image: Any, axis: str, at: int) -> Any:
    """A copy of `image` with a red line across it: horizontal at y = at or vertical at x = at."""
    from PIL import ImageDraw

    out = image.copy()
    width, height = out.size
    ends = [(0, at), (width - 1, at)] if axis == "y" else [(at, 0), (at, height - 1)]
    ImageDraw.Draw(out).line(ends, fill=RED, width=1)
    return out


@dataclass(frozen=True)
class TextLine:
    """One line of text OCR found: the text, its box in the image's pixels, the confidence."""

    text: str
    box: Box
    score: float


def ocr_available() -> bool:
    return importlib.util.find_spec("rapidocr_onnxruntime") is not None


class OcrEngine:
    """RapidOCR (PP-OCRv4 ONNX models from the `rapidocr-onnxruntime` wheel, CPU), loaded on
    the first call and shared by every env of the process (~0.7 s to load; ~0.1-2 s a call
    by image size on one core)."""

    _engine: Any = None
    _lock = threading.Lock()

    @classmethod
    def check(cls) -> None:
        """Raise a clear error naming the extra when the OCR package is not installed."""
        if not ocr_available():
            raise ImportError(
                "the OCR tool needs rapidocr-onnxruntime: pip install 'agentic-rl[visual-tools]'"
            )

    @classmethod
    def read(cls, image: Any, upscale: int = 2) -> list[TextLine]:
        """Text lines of `image` (RGB PIL), read from a copy `upscale` times larger (small
        text is read more reliably), boxes in `image`'s own pixels, top to bottom."""
        import numpy as np
        from PIL import Image

        cls.check()
        with cls._lock:
            if cls._engine is None:
                from rapidocr_onnxruntime import RapidOCR

                cls._engine = RapidOCR()
            big = image.resize(
                (image.size[0] * upscale, image.size[1] * upscale), Image.Resampling.LANCZOS
            )
            result, _ = cls._engine(np.asarray(big))
        lines = []
        for points, text, score in result or []:
            xs = [p[0] / upscale for p in points]
            ys = [p[1] / upscale for p in points]
            box = (int(min(xs)), int(min(ys)), int(round(max(xs))), int(round(max(ys))))
            lines.append(TextLine(str(text), box, float(score)))
        return sorted(lines, key=lambda line: (line.box[1], line.box[0]))


def ocr_text(lines: list[TextLine], offset: tuple[int, int] = (0, 0)) -> str:
    """OCR lines as the agent reads them, each text and its box's centre in the whole image's
    pixels (`offset`: the region's corner): `82 at 134,75; bee at 135,299` (short: a context
    on CPU has a few hundred tokens)."""
    if not lines:
        return "no text found"
    dx, dy = offset
    return "; ".join(
        f"{line.text} at {(line.box[0] + line.box[2]) // 2 + dx},"
        f"{(line.box[1] + line.box[3]) // 2 + dy}"
        for line in lines
    )


class _EnvAppliedTool:
    """A tool schema the env applies itself (it owns the images); a direct call is an error."""

    name = ""
    description = ""
    parameters: dict[str, Any] = {}
    result_tag = "observation"

    def __call__(self, **arguments: Any) -> str:
        raise ToolError(f"{self.name} is applied by the visual-tools env, not called directly")


def _schema(argument: str, description: str) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": {argument: {"type": "string", "description": description}},
        "required": [argument],
    }


class ZoomTool(_EnvAppliedTool):
    name = "zoom"
    description = "Zoom into the box x0,y0,x1,y1 (pixels); shows it enlarged."
    parameters = _schema(
        "box", "x0,y0,x1,y1 in pixels of img_1 (or img_K: first, for an earlier image)"
    )


class OcrTool(_EnvAppliedTool):
    name = "ocr"
    description = "Read the text in the box x0,y0,x1,y1 (or 'all')."
    parameters = _schema(
        "box", "x0,y0,x1,y1 in pixels of img_1 (or img_K: first, for an earlier image), or all"
    )


class DrawBoxTool(_EnvAppliedTool):
    name = "draw_box"
    description = "Draw a red box x0,y0,x1,y1; shows the new image."
    parameters = _schema(
        "box", "x0,y0,x1,y1 in pixels of img_1 (or img_K: first, for an earlier image)"
    )


class DrawLineTool(_EnvAppliedTool):
    name = "draw_line"
    description = "Draw a red line y=N (horizontal) or x=N (vertical) across the image."
    parameters = _schema(
        "line", "y=N or x=N in pixels of img_1 (or img_K: first, for an earlier image)"
    )


TOOLS: dict[str, type[_EnvAppliedTool]] = {
    tool.name: tool for tool in (ZoomTool, OcrTool, DrawBoxTool, DrawLineTool)
}
