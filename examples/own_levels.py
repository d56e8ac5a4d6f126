"""Your own Sokoban levels: an XSB file becomes tasks, each solved once; a level the episode's
step limit cannot fit, or one without a solution, is refused when the tasks are made.

    python examples/own_levels.py --out /tmp/levels
    agentic-rl check-env sokoban env.options.level_file=/tmp/levels/levels.xsb
"""

from __future__ import annotations

import argparse
from pathlib import Path

from agentic_rl.envs.check import check_env
from agentic_rl.envs.games.sokoban import SokobanEnv, make_sokoban_tasks
from agentic_rl.envs.games.sokoban_levels import LevelError

LEVELS = """\
; two levels in XSB: # wall, @ player, $ box, . goal, * box on goal, + player on goal
#####
#@$.#
#####

#######
#@ $ .#
#######
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", default="levels", help="folder for the level file")
    out = Path(parser.parse_args().out)
    out.mkdir(parents=True, exist_ok=True)
    path = out / "levels.xsb"
    path.write_text(LEVELS)

    tasks = make_sokoban_tasks("train", 10, level_file=str(path), max_steps=10)
    for task in tasks:
        print(f"{task.task_id}: shortest plan {task.answers[0]!r}")
    check_env(SokobanEnv(max_steps=10), tasks)
    print("check_env: ok")

    try:  # the second level needs 3 moves: a 2-step episode could never solve it
        make_sokoban_tasks("train", 10, level_file=str(path), max_steps=2)
    except LevelError as err:
        print(f"refused: {err}")


if __name__ == "__main__":
    main()
