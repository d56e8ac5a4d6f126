"""A top-down picture of a house (envs/embodied/house.py) for a vision-language policy: the
rendered observations of VLN-R1 navigation (navigation.py, `render="image"`).

`render_house` draws a fixed `size` square whatever the house's size (PIL): each room a pale
colour of its own, walls dark, doors gaps in them, each landmark a brown diamond with its
initial, the agent a blue triangle pointing where it faces. The goal is not marked: the
instruction names it, as in the text observation.
"""

from __future__ import annotations

from typing import Any

from agentic_rl.envs.embodied.house import DELTAS, ROOMS, HouseMap, Pose

ROOM_COLOURS = (
    (255, 236, 200),
    (210, 235, 255),
    (220, 245, 210),
    (245, 215, 235),
    (235, 235, 200),
    (215, 215, 245),
    (255, 220, 210),
    (205, 240, 235),
    (235, 225, 210),
)


def render_house(house: HouseMap, pose: Pose, size: int = 128) -> Any:
    """A `size` x `size` top-down picture of `house` with the agent at `pose` (module doc).
    Returns a PIL RGB image."""
    from PIL import Image, ImageDraw

    cell = max(1, (size - 4) // max(house.rows, house.cols))
    left = (size - cell * house.cols) // 2
    top = (size - cell * house.rows) // 2
    image = Image.new("RGB", (size, size), (90, 90, 90))
    draw = ImageDraw.Draw(image)
    names = sorted(ROOMS)

    def box(r: int, c: int) -> tuple[int, int, int, int]:
        x, y = left + c * cell, top + r * cell
        return x, y, x + cell - 1, y + cell - 1

    for r in range(house.rows):
        for c in range(house.cols):
            colour = ROOM_COLOURS[names.index(house.room_name((r, c))) % len(ROOM_COLOURS)]
            draw.rectangle(box(r, c), fill=colour)
    wall, width = (40, 40, 40), max(1, cell // 8)
    for r in range(house.rows):  # walls on the east and south side of each cell
        for c in range(house.cols):
            x0, y0, x1, y1 = box(r, c)
            if c + 1 < house.cols and not house.passable((r, c), (r, c + 1)):
                draw.line([(x1, y0), (x1, y1)], fill=wall, width=width)
            if r + 1 < house.rows and not house.passable((r, c), (r + 1, c)):
                draw.line([(x0, y1), (x1, y1)], fill=wall, width=width)
    draw.rectangle(
        (left, top, left + cell * house.cols - 1, top + cell * house.rows - 1),
        outline=wall,
        width=width,
    )
    for (r, c), name in sorted(house.landmarks.items()):
        x0, y0, x1, y1 = box(r, c)
        cx, cy, h = (x0 + x1) / 2, (y0 + y1) / 2, cell * 0.35
        draw.polygon([(cx, cy - h), (cx + h, cy), (cx, cy + h), (cx - h, cy)], fill=(150, 90, 30))
        if cell >= 16:
            draw.text((cx, cy), name[0].upper(), fill=(255, 255, 255), anchor="mm")
    r, c, heading = pose
    x0, y0, x1, y1 = box(r, c)
    cx, cy, h = (x0 + x1) / 2, (y0 + y1) / 2, cell * 0.4
    dr, dc = DELTAS[heading]
    tip = (cx + dc * h, cy + dr * h)
    back = (cx - dc * h * 0.6, cy - dr * h * 0.6)
    side = (-dr * h * 0.7, dc * h * 0.7)  # perpendicular to the heading
    draw.polygon(
        [tip, (back[0] + side[0], back[1] + side[1]), (back[0] - side[0], back[1] - side[1])],
        fill=(30, 60, 220),
    )
    return image
