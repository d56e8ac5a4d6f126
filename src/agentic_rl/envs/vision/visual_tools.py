"""Chart and diagram questions answered with visual tools (OpenThinkImg-style), `visual_tools`.

OpenThinkImg (Su et al. 2025): a vision-language policy answers chart questions with tools
whose image outputs come back as the next observation; one action per turn, up to 3 tool
rounds, new images numbered img_2, img_3, ...; reward = answer accuracy. Here:

- Tasks, generated offline (train and eval disjoint by a hash of the picture's content, so
  held-out questions are on charts never trained on):
  - `value`: a matplotlib bar chart (3-5 bars, values 10-99 printed above the bars in 6-point
    text, category names under them) and "What is the value of the NAME bar?";
  - `which`: the same charts and "Which category's bar is labelled V?";
  - `code`: a PIL-drawn diagram, a 3 x 3 grid of boxes joined by lines, each box holding a
    two-character code in small text, and "What code is in the box in row R, column C?".
  Images are 320 x 320. The grafted vision tower sees every image at 80 x 80
  (model/vision.py), where the small text is two pixels high: the question needs a zoom
  (or OCR), which is the point.
- Tools (tools/image_tools.py), in the tag format: `<zoom>x0,y0,x1,y1</zoom>` (img_1's region
  upscaled to 320 px: a new image observation), `<ocr>x0,y0,x1,y1</ocr>` or `<ocr>all</ocr>`
  (text lines with their boxes, RapidOCR), `<draw_box>x0,y0,x1,y1</draw_box>` and
  `<draw_line>y=N</draw_line>` (a copy with a red box / line: a new image observation). A tool
  reads img_1 unless its argument names an earlier image first, as OpenThinkImg's tools take
  any image shown so far (`<zoom>img_2: 0,0,160,160</zoom>`: a zoom into a zoom; OCR boxes are
  then in img_2's pixels; an image that does not exist is a failed call). At most
  `max_tool_calls` calls (3, as the paper's rounds); further calls are refused with an error.
- Reward 1 for the exact answer (case and spaces ignored), 0 for a wrong one, -format_penalty
  for a malformed turn (an error observation) or stopping without an answer.
- `tools="none"`: the same tasks without tools (the text-only / no-tools baseline).
- The scripted expert (warm start): `value` zooms on the bar's value label then answers,
  `which` reads the plot area with OCR (values and names by position) then answers, `code`
  zooms on the box then answers. Its answers come from the task's ground truth; its tool calls
  are the ones a solver would make.

matplotlib renders the charts and rapidocr-onnxruntime reads text: the optional extra
`agentic-rl[visual-tools]`, imported when first needed.
"""

from __future__ import annotations

import random
from collections import OrderedDict
from pathlib import Path
from typing import Any, Literal

from agentic_rl.envs.base import check_steppable, inline_tool_instructions
from agentic_rl.envs.splits import split_of
from agentic_rl.envs.vision.scenes import (
    answer_matches,
    checked_question_kinds,
    default_image_dir,
)
from agentic_rl.model.images import load_image, save_image
from agentic_rl.tools.base import ToolError
from agentic_rl.tools.image_tools import (
    TOOLS,
    Box,
    OcrEngine,
    draw_box,
    draw_line,
    ocr_text,
    parse_box,
    parse_line,
    split_image_name,
    zoom,
)
from agentic_rl.types import Action, ImageRef, Observation, StepResult, Task

Split = Literal["train", "eval"]

SIDE = 320
"""Pixels a side of every chart and diagram (and of a zoomed region)."""
KINDS = ("value", "which", "code")
CATEGORIES = (
    "ant", "bee", "cat", "cow", "dog", "elk", "fox", "hen", "owl", "pig", "ram", "yak",
)  # fmt: skip
BAR_COLOURS = ("#d62728", "#1f77b4", "#2ca02c", "#ff7f0e", "#9467bd")
CODE_LETTERS = "ABCDEFHKMNPRTX"
PLOT_LEFT = 36  # the chart's plot area starts right of the y-axis tick labels
ZOOM_PAD = 28  # the expert's zoom: the label's box grown by this many pixels a side
GRID = 3  # diagram boxes per row and column
ALL_TOOLS = ",".join(TOOLS)


# ---------------------------------------------------------------------------------------------
# Pictures
# ---------------------------------------------------------------------------------------------


def render_chart(names: list[str], values: list[int]) -> tuple[Any, dict[str, Box]]:
    """A SIDE x SIDE bar chart (PIL RGB) and each bar's value-label box in its pixels."""
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
    except ImportError as err:
        raise ImportError(
            "chart tasks need matplotlib: pip install 'agentic-rl[visual-tools]'"
        ) from err
    from PIL import Image

    fig = Figure(figsize=(SIDE / 100, SIDE / 100), dpi=100)
    canvas = FigureCanvasAgg(fig)  # no global backend: safe beside other matplotlib users
    ax = fig.add_subplot()
    bars = ax.bar(names, values, color=BAR_COLOURS[: len(names)])
    labels = [
        ax.text(b.get_x() + b.get_width() / 2, v + 1, str(v), ha="center", va="bottom", fontsize=6)
        for b, v in zip(bars, values, strict=True)
    ]
    ax.set_ylim(0, 110)
    ax.tick_params(labelsize=6)
    canvas.draw()
    renderer = canvas.get_renderer()
    boxes: dict[str, Box] = {}
    for name, label in zip(names, labels, strict=True):
        e = label.get_window_extent(renderer)
        boxes[name] = (int(e.x0), int(SIDE - e.y1), int(e.x1) + 1, int(SIDE - e.y0) + 1)
    image = Image.frombuffer("RGBA", canvas.get_width_height(), canvas.buffer_rgba()).convert("RGB")
    if image.size != (SIDE, SIDE):
        raise RuntimeError(f"chart rendered at {image.size}, expected {(SIDE, SIDE)}")
    return image, boxes


def diagram_cell_box(row: int, col: int) -> Box:
    """The pixel box of the diagram's box in `row`, `col` (0-based)."""
    pitch = SIDE // GRID
    x0, y0 = col * pitch + 22, row * pitch + 30
    return x0, y0, x0 + pitch - 44, y0 + pitch - 60


def render_diagram(codes: list[list[str]], links: list[list[int]]) -> Any:
    """A SIDE x SIDE diagram: GRID x GRID boxes holding `codes` in small text, joined by the
    `links` ([r0, c0, r1, c1], neighbouring boxes) as grey lines."""
    from PIL import Image, ImageDraw, ImageFont

    image = Image.new("RGB", (SIDE, SIDE), (255, 255, 255))
    draw = ImageDraw.Draw(image)
    for r0, c0, r1, c1 in links:
        a, b = diagram_cell_box(r0, c0), diagram_cell_box(r1, c1)
        centre = [
            ((a[0] + a[2]) // 2, (a[1] + a[3]) // 2),
            ((b[0] + b[2]) // 2, (b[1] + b[3]) // 2),
        ]
        draw.line(centre, fill=(150, 150, 150), width=2)
    font = ImageFont.load_default(size=9)
    for r in range(GRID):
        for c in range(GRID):
            box = diagram_cell_box(r, c)
            draw.rectangle(box, outline=(40, 40, 40), fill=(235, 242, 255), width=1)
            centre = ((box[0] + box[2]) // 2, (box[1] + box[3]) // 2)
            draw.text(centre, codes[r][c], fill=(0, 0, 0), font=font, anchor="mm")
    return image


def render_task(task: Task) -> tuple[Any, dict[str, Box]]:
    """The task's picture and the expert's regions (chart: value-label box by category)."""
    fields = task.fields
    if fields["kind"] == "code":
        return render_diagram(fields["codes"], fields["links"]), {}
    return render_chart(list(fields["names"]), list(fields["values"]))


# ---------------------------------------------------------------------------------------------
# Tasks
# ---------------------------------------------------------------------------------------------


def _chart_task(rng: random.Random, kind: str) -> tuple[dict[str, Any], str, str]:
    names = sorted(rng.sample(CATEGORIES, rng.randint(3, 5)))
    values = rng.sample(range(10, 100), len(names))
    pick = rng.randrange(len(names))
    fields = {"kind": kind, "names": names, "values": values, "asked": names[pick]}
    if kind == "value":
        return fields, f"What is the value of the {names[pick]} bar?", str(values[pick])
    return fields, f"Which category's bar is labelled {values[pick]}?", names[pick]


def _diagram_task(rng: random.Random) -> tuple[dict[str, Any], str, str]:
    pool = [f"{a}{d}" for a in CODE_LETTERS for d in "23456789"]
    flat = rng.sample(pool, GRID * GRID)
    codes = [flat[r * GRID : (r + 1) * GRID] for r in range(GRID)]
    edges = [[r, c, r, c + 1] for r in range(GRID) for c in range(GRID - 1)]
    edges += [[r, c, r + 1, c] for r in range(GRID - 1) for c in range(GRID)]
    links = sorted(rng.sample(edges, 5))
    r, c = rng.randrange(GRID), rng.randrange(GRID)
    fields = {"kind": "code", "codes": codes, "links": links, "cell": [r, c]}
    return fields, f"What code is in the box in row {r + 1}, column {c + 1}?", codes[r][c]


def make_visual_tool_tasks(
    split: Split, n: int, seed: int = 0, *, kinds: list[str] | None = None
) -> list[Task]:
    """`n` chart / diagram questions for `split`, the kinds in turn (default all of KINDS).
    Deterministic in (split, n, seed, kinds); train and eval pictures are disjoint."""
    if split not in ("train", "eval"):
        raise ValueError(f"split must be 'train' or 'eval', got {split!r}")
    kinds = checked_question_kinds(kinds, KINDS, KINDS)
    rng = random.Random(f"visual_tools/{split}/{seed}")
    tasks: list[Task] = []
    for _ in range(50 * n + 100):
        if len(tasks) == n:
            return tasks
        kind = kinds[len(tasks) % len(kinds)]
        fields, question, answer = _diagram_task(rng) if kind == "code" else _chart_task(rng, kind)
        picture = {k: v for k, v in fields.items() if k not in ("kind", "cell", "asked")}
        if split_of(repr(sorted(picture.items()))) != split:
            continue
        tasks.append(Task(f"vtool-{split}-{seed}-{len(tasks)}", question, [answer], fields))
    raise RuntimeError(f"could not generate {n} {split} visual-tool questions")


# ---------------------------------------------------------------------------------------------
# The env
# ---------------------------------------------------------------------------------------------

_PICTURES: OrderedDict[str, tuple[ImageRef, dict[str, Box]]] = OrderedDict()
_PICTURE_CACHE = 512


class VisualToolsEnv:
    """Answer a question about img_1 (a chart or a diagram) using visual tools; see the module
    docstring. Tool results are observations: an image (zoom, drawings: registered as img_k)
    or text (OCR, errors)."""

    def __init__(
        self,
        format_penalty: float = 0.1,
        tool_timeout_s: float = 10.0,
        image_dir: str = "",
        tools: str | list[str] = ALL_TOOLS,
        max_tool_calls: int = 3,
    ) -> None:
        del tool_timeout_s  # the tools run in-process on one image: no timeout needed
        listed = tools if isinstance(tools, list) else str(tools).split(",")
        names = [str(t).strip() for t in listed if str(t).strip() and str(t).strip() != "none"]
        unknown = sorted(set(names) - set(TOOLS))
        if unknown:
            raise ValueError(
                f"unknown visual tools {unknown} (valid: {', '.join(TOOLS)}, or 'none')"
            )
        if "ocr" in names:
            OcrEngine.check()  # a missing package fails at construction, not mid-run
        if max_tool_calls < 0:
            raise ValueError(f"max_tool_calls must be >= 0, got {max_tool_calls}")
        self.tools: list[Any] = [TOOLS[name]() for name in names]
        self.format_penalty = format_penalty
        self.max_tool_calls = max_tool_calls
        self.image_dir = Path(image_dir) if image_dir else default_image_dir()
        self.task: Task | None = None
        self.done = False
        self.images: list[ImageRef] = []
        self.regions: dict[str, Box] = {}
        self.tool_calls = 0
        self.ocr_seen = ""

    # -- pictures -----------------------------------------------------------------------------
    def picture(self, task: Task) -> tuple[ImageRef, dict[str, Box]]:
        """img_1 of `task` (rendered once per process and image directory) and its regions."""
        key = f"{self.image_dir}/{task.task_id}/{task.prompt}/{task.fields!r}"
        if key not in _PICTURES:
            image, regions = render_task(task)
            _PICTURES[key] = (save_image(image, self.image_dir), regions)
            while len(_PICTURES) > _PICTURE_CACHE:
                _PICTURES.popitem(last=False)
        _PICTURES.move_to_end(key)
        return _PICTURES[key]

    def system_prompt(self) -> str:
        head = (
            f"Answer the question about img_1, a {SIDE}x{SIDE} image with small text "
            "(pixel x from the left, y from the top)."
        )
        if not self.tools:
            return f"{head} Write <answer>answer</answer>."
        return (
            f"{head} Tools, one per turn, at most {self.max_tool_calls}:\n"
            f"{inline_tool_instructions(self.tools)}\nA tool reads img_1; for a later image, name"
            f" it first: <zoom>img_2: x0,y0,x1,y1</zoom>. Then write <answer>answer</answer>."
        )

    # -- the protocol -------------------------------------------------------------------------
    def reset(self, task: Task, seed: int) -> Observation:
        del seed  # the task fixes the picture
        ref, self.regions = self.picture(task)
        self.task, self.done = task, False
        self.images, self.tool_calls, self.ocr_seen = [ref], 0, ""
        return Observation(
            messages=[
                {"role": "system", "content": self.system_prompt()},
                {"role": "user", "content": f"{task.prompt}\nimg_1:"},
            ],
            images=[ref],
        )

    def step(self, action: Action) -> StepResult:
        check_steppable(self.task, self.done)
        if action.kind == "answer":
            self.done = True
            right = answer_matches(action.text, self.task.answers)
            info = {"answered": 1, "success": float(right), "tool_rounds": self.tool_calls}
            return StepResult(None, float(right), terminated=True, info=info)
        if action.kind == "none":  # stopped without answering
            self.done = True
            return StepResult(
                None, -self.format_penalty, terminated=True, info={"no_action": 1, "success": 0.0}
            )
        if action.kind == "tool" and action.name in {t.name for t in self.tools}:
            return self._tool(action)
        why = action.error or f"unknown tool {action.name!r}"
        return self._error(f"Invalid action: {why}.", {"invalid_action": 1})

    def _error(self, message: str, info: dict[str, Any]) -> StepResult:
        return StepResult(
            Observation(content=message, name="error"), -self.format_penalty, info=info
        )

    def _tool(self, action: Action) -> StepResult:
        if self.tool_calls >= self.max_tool_calls:
            return self._error(
                f"No tool calls left (at most {self.max_tool_calls}); answer now.",
                {"tool_error": 1},
            )
        self.tool_calls += 1
        argument = str(next(iter(action.arguments.values()), ""))
        try:
            index, argument = split_image_name(argument, len(self.images))
            source = load_image(self.images[index])
            content, image = self._apply(action.name, argument, source, f"img_{index + 1}")
        except ToolError as err:
            return StepResult(
                Observation(content=f"{action.name} failed: {err}", name=action.name),
                0.0,
                info={"tool_call": 1, "tool_error": 1},
            )
        images: list[ImageRef] = []
        if image is not None:
            ref = save_image(image, self.image_dir)
            self.images.append(ref)
            images = [ref]
            content = f"img_{len(self.images)}: {content}"
        return StepResult(
            Observation(content=content, name=action.name, images=images),
            0.0,
            info={"tool_call": 1, f"tool_{action.name}": 1},
        )

    def _apply(self, name: str, argument: str, image: Any, label: str) -> tuple[str, Any]:
        """(text, new image or None) of one tool call on `image`, the image named `label`."""
        width, height = image.size
        if name == "draw_line":
            axis, at = parse_line(argument, width, height)
            return f"{label} with a line at {axis}={at}", draw_line(image, axis, at)
        if name == "ocr" and argument.strip().lower() == "all":
            self.ocr_seen = ocr_text(OcrEngine.read(image))
            return self.ocr_seen, None
        box = parse_box(argument, width, height)
        where = ",".join(str(v) for v in box)
        if name == "zoom":
            region = where if label == "img_1" else f"{label} at {where}"
            return f"zoom of {region}", zoom(image, box, SIDE)
        if name == "draw_box":
            return f"{label} with a box at {where}", draw_box(image, box)
        self.ocr_seen = ocr_text(OcrEngine.read(image.crop(box), upscale=3), box[:2])
        return self.ocr_seen, None

    # -- the scripted expert -----------------------------------------------------------------
    def expert_box(self) -> Box:
        """The region the expert zooms on: the asked bar's value label, or the asked box."""
        assert self.task is not None, "expert_box() before reset()"
        fields = self.task.fields
        if fields["kind"] == "code":
            x0, y0, x1, y1 = diagram_cell_box(*fields["cell"])
            return x0 - 8, y0 - 8, x1 + 8, y1 + 8
        x0, y0, x1, y1 = self.regions[fields["asked"]]
        return (
            max(0, x0 - ZOOM_PAD),
            max(0, y0 - ZOOM_PAD),
            min(SIDE, x1 + ZOOM_PAD),
            min(SIDE, y1 + ZOOM_PAD),
        )

    def expert_turn(self) -> str:
        """The tool calls that show the answer, then the answer: `value` / `code` zoom on the
        asked label or box; `which` reads the plot area with OCR and, when OCR missed the asked
        value or its category, zooms on that bar's column (label to name) before answering.
        Without the tool (tools=none, or no calls left) it answers directly."""
        assert self.task is not None, "expert_turn() before reset()"
        fields = self.task.fields
        offered = {t.name for t in self.tools}
        room = self.tool_calls < self.max_tool_calls
        if fields["kind"] != "which":
            if self.tool_calls == 0 and room and "zoom" in offered:
                return "<zoom>{}</zoom>".format(",".join(str(v) for v in self.expert_box()))
        elif self.tool_calls == 0 and room and "ocr" in offered:
            return f"<ocr>{PLOT_LEFT},0,{SIDE},{SIDE}</ocr>"  # values and names, no axis ticks
        elif self.tool_calls == 1 and room and "zoom" in offered:
            value = fields["values"][fields["names"].index(fields["asked"])]
            read = {part.split(" at ")[0] for part in self.ocr_seen.split("; ")}
            if not {str(value), fields["asked"]} <= read:
                x0, y0, x1, _ = self.regions[fields["asked"]]
                return (
                    f"<zoom>{max(0, x0 - 12)},{max(0, y0 - 12)},{min(SIDE, x1 + 12)},{SIDE}</zoom>"
                )
        return f"<answer>{self.task.answers[0]}</answer>"
