"""Your own pictures for a custom env: `image_ref` checks a file once (it exists and decodes)
and returns the reference an observation carries; a truncated or corrupt file is an ImageError
naming it.

    python examples/own_picture.py --out /tmp/pictures
"""

from __future__ import annotations

import argparse
from pathlib import Path

from PIL import Image

from agentic_rl.model.images import ImageError, image_ref
from agentic_rl.types import Observation


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", default="pictures", help="folder for the picture files")
    out = Path(parser.parse_args().out)
    out.mkdir(parents=True, exist_ok=True)
    good, broken = out / "chart.png", out / "broken.png"
    Image.new("RGB", (64, 48), (30, 60, 220)).save(good)
    broken.write_bytes(good.read_bytes()[:40])  # cut short, as an interrupted copy

    observation = Observation(content="What colour is the chart?", images=[image_ref(good)])
    print(f"observation with {len(observation.images)} picture: {observation.images[0].path}")
    try:
        image_ref(broken)
    except ImageError as err:
        print(f"refused: {err}")


if __name__ == "__main__":
    main()
