"""The visual-tools env (envs/vision/visual_tools.py) and its tools (tools/image_tools.py): charts and
diagrams with small text, zoom / OCR / draw whose outputs are the next observation."""

from __future__ import annotations

import pytest

from agentic_rl.envs.check import check_env
from agentic_rl.envs.registry import make_env, task_generator
from agentic_rl.envs.vision.visual_tools import (
    KINDS,
    SIDE,
    VisualToolsEnv,
    make_visual_tool_tasks,
)
from agentic_rl.formats.chat import TagFormat
from agentic_rl.model.images import load_image
from agentic_rl.tools.base import ToolError
from agentic_rl.tools.image_tools import (
    RED,
    draw_line,
    parse_box,
    parse_line,
    split_image_name,
    zoom,
)
from agentic_rl.types import Action


@pytest.fixture
def env(tmp_path):
    return VisualToolsEnv(image_dir=str(tmp_path))


def tool(name, argument):
    return Action(
        kind="tool", name=name, arguments={"box" if name != "draw_line" else "line": argument}
    )


def test_check_env_passes_and_the_expert_solves_every_kind(env):
    check_env(env, make_visual_tool_tasks("train", 6))  # two of each kind, OCR included


def test_registered(tmp_path):
    assert isinstance(make_env("visual_tools", image_dir=str(tmp_path)), VisualToolsEnv)
    assert task_generator("visual_tools") is make_visual_tool_tasks


def test_splits_are_disjoint_deterministic_and_cover_every_kind():
    def picture(t):
        return repr({k: v for k, v in t.fields.items() if k not in ("kind", "cell", "asked")})

    train, held_out = make_visual_tool_tasks("train", 60), make_visual_tool_tasks("eval", 30)
    assert not {picture(t) for t in train} & {picture(t) for t in held_out}
    assert {t.fields["kind"] for t in train} == set(KINDS)
    assert make_visual_tool_tasks("train", 60) == train
    with pytest.raises(ValueError, match="unknown question kinds"):
        make_visual_tool_tasks("train", 2, kinds=["pie"])


def test_zoom_returns_the_region_upscaled_as_the_next_image(env):
    task = make_visual_tool_tasks("train", 1, kinds=["value"])[0]
    first = env.reset(task, 0)
    original = load_image(first.images[0])
    assert original.size == (SIDE, SIDE)
    box = env.expert_box()
    result = env.step(tool("zoom", ",".join(map(str, box))))
    assert not result.terminated and result.info["tool_call"] == 1
    (ref,) = result.observation.images
    assert result.observation.content.startswith("img_2: zoom of")
    assert env.images == [first.images[0], ref]
    zoomed = load_image(ref)
    assert max(zoomed.size) == SIDE  # upscaled from a region far smaller than the image
    assert zoomed.tobytes() == zoom(original, box, SIDE).tobytes()


def test_ocr_reads_the_small_value_label(env):
    for task in make_visual_tool_tasks("eval", 2, kinds=["value"]):
        env.reset(task, 0)
        result = env.step(tool("ocr", ",".join(map(str, env.expert_box()))))
        assert result.observation.images == [] and result.info["tool_ocr"] == 1
        assert f"{task.answers[0]} at" in result.observation.content


def test_draw_box_and_line_show_red_marks_on_a_new_image(env):
    task = make_visual_tool_tasks("train", 1, kinds=["code"])[0]
    env.reset(task, 0)
    boxed = load_image(env.step(tool("draw_box", "40,50,120,140")).observation.images[0])
    assert boxed.getpixel((40, 90)) == RED and boxed.getpixel((80, 140)) == RED
    lined = env.step(tool("draw_line", "y=200"))
    assert lined.observation.content == "img_3: img_1 with a line at y=200"
    image = load_image(lined.observation.images[0])
    assert all(image.getpixel((x, 200)) == RED for x in range(0, SIDE, 37))


def test_a_tool_reads_the_earlier_image_its_argument_names(env):
    task = make_visual_tool_tasks("train", 1, kinds=["value"])[0]
    env.reset(task, 0)
    env.step(tool("zoom", "0,0,160,160"))
    second = load_image(env.images[1])
    inner = env.step(tool("zoom", "img_2: 80,80,240,240"))  # a zoom into the zoom
    assert inner.observation.content == "img_3: zoom of img_2 at 80,80,240,240"
    assert load_image(env.images[2]).tobytes() == zoom(second, (80, 80, 240, 240), SIDE).tobytes()
    lined = env.step(tool("draw_line", "IMG_2, y=10"))
    assert lined.observation.content == "img_4: img_2 with a line at y=10"
    assert load_image(env.images[3]).tobytes() == draw_line(second, "y", 10).tobytes()
    env.reset(task, 0)  # a new episode: only img_1 exists again
    missing = env.step(tool("zoom", "img_2: 0,0,100,100"))
    assert missing.info == {"tool_call": 1, "tool_error": 1}
    assert "img_2 does not exist" in missing.observation.content and len(env.images) == 1
    assert "img_2: x0,y0,x1,y1" in env.system_prompt()


def test_image_names_are_split_from_the_argument():
    assert split_image_name("img_2: 10,20,90,100", 3) == (1, "10,20,90,100")
    assert split_image_name(" IMG_3, y=5", 3) == (2, "y=5")
    assert split_image_name("img_1 all", 1) == (0, "all")
    assert split_image_name("10,20,90,100", 1) == (0, "10,20,90,100")  # img_1 by default
    for name in ("img_0: 1,2,3,4", "img_4: 1,2,3,4"):
        with pytest.raises(ToolError, match="does not exist"):
            split_image_name(name, 3)


def test_bad_calls_are_observations_and_the_tool_budget_holds(env):
    task = make_visual_tool_tasks("train", 1)[0]
    env.reset(task, 0)
    bad = env.step(tool("zoom", "left half"))
    assert (
        bad.info == {"tool_call": 1, "tool_error": 1} and "x0,y0,x1,y1" in bad.observation.content
    )
    assert not bad.terminated and bad.observation.images == []
    env.step(tool("zoom", "0,0,5,5"))  # too small: a second failed call
    env.step(tool("zoom", "0,0,100,100"))
    refused = env.step(tool("zoom", "0,0,100,100"))  # a fourth call: over the budget
    assert refused.observation.name == "error" and refused.reward == -0.1
    assert len(env.images) == 2  # only the one valid zoom made an image
    unknown = env.step(Action(kind="tool", name="segment", arguments={"box": "1"}))
    assert unknown.info == {"invalid_action": 1}
    right = env.step(Action(kind="answer", text=task.answers[0].upper()))
    assert right.reward == 1.0 and right.terminated and right.info["tool_rounds"] == 3


def test_box_and_line_parsing():
    assert parse_box("[10, 20, 90, 100]", 320, 320) == (10, 20, 90, 100)
    assert parse_box("-5,0,400,50", 320, 320) == (0, 0, 320, 50)  # clipped to the image
    for bad in ("10,20,90", "90,20,10,100", "a,b,c,d", "1,2,3,4 please"):
        with pytest.raises(ToolError):
            parse_box(bad, 320, 320)
    assert parse_line(" Y = 12 ", 320, 320) == ("y", 12)
    with pytest.raises(ToolError):
        parse_line("y=320", 320, 320)


def test_no_tools_variant_and_bad_options(tmp_path):
    env = VisualToolsEnv(image_dir=str(tmp_path), tools="none")
    task = make_visual_tool_tasks("train", 1)[0]
    first = env.reset(task, 0)
    assert env.tools == [] and "<zoom>" not in first.messages[0]["content"]
    assert env.expert_turn() == f"<answer>{task.answers[0]}</answer>"
    with pytest.raises(ValueError, match="unknown visual tools"):
        VisualToolsEnv(image_dir=str(tmp_path), tools="zoom,segment")


def test_the_expert_turns_parse_in_the_tag_format(env):
    fmt = TagFormat(env.tools)
    for task in make_visual_tool_tasks("train", 3):
        env.reset(task, 0)
        action = fmt.parse(env.expert_turn(), "stop")
        assert action.kind == "tool" and action.name == (
            "ocr" if task.fields["kind"] == "which" else "zoom"
        )


def test_the_which_expert_zooms_on_the_column_when_ocr_misses(env):
    task = make_visual_tool_tasks("train", 1, kinds=["which"])[0]
    env.reset(task, 0)
    assert env.expert_turn().startswith("<ocr>")
    env.step(tool("ocr", "36,0,320,320"))
    env.ocr_seen = "no text found"  # as if OCR had misread the chart
    turn = env.expert_turn()
    x0, y0, x1, y1 = parse_box(turn[len("<zoom>") : -len("</zoom>")], SIDE, SIDE)
    label = env.regions[task.fields["asked"]]
    assert x0 <= label[0] and label[2] <= x1 and y0 <= label[1] and y1 == SIDE
    env.step(tool("zoom", f"{x0},{y0},{x1},{y1}"))
    assert env.expert_turn() == f"<answer>{task.answers[0]}</answer>"
    listed = VisualToolsEnv(image_dir=str(env.image_dir), tools=["zoom", "draw_line"])
    assert [t.name for t in listed.tools] == ["zoom", "draw_line"]
