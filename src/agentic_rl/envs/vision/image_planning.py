"""Visual Planning's full method on the grid world: the policy writes the next state as image tokens.

VPRL (Xu et al. 2025, "Visual Planning: Let's Think Only with Images") plans without words: the
policy generates the next state of the world as an image (VQ tokens), the action is inferred by
rule from two consecutive states (invalid unless they differ by exactly one legal move), and
the progress reward pays 1 for a move that brings the agent one step closer to the goal (BFS
distance), 0 for a valid move that does not, and -5 for an invalid transition (RECIPES.md marks
these values as from a secondary source). Stage 1 is supervised learning on random walks, which
teaches valid transitions without committing the policy to one plan; stage 2 is GRPO. VPRL's
metric is the exact match of an optimal-length plan.

Here (env `image_planning`): the 5 x 5 grid world of envs/games/gridworld.py, rendered as by
`visual_grid` (80 x 80 pixels, walls black, the agent a blue circle, the goal a green square),
and tokenised by a patch VQ (envs/vision/patch_vq.py) fitted once on renders of training layouts: 25
image tokens per picture, each an existing vocabulary word (envs/code_words.py). The opening
message is the start picture's tokens; each turn the policy writes `<state>` + 25 tokens +
`</state>`. The env decodes the tokens to pixels, reads every cell from the pixels by colour
(`read_cells`), and infers the move from the two pictures. A valid move is applied and the
next turn follows the policy's own picture (the observation adds nothing); an invalid one
(malformed tokens, walls or goal that changed, no move, a jump, a move into a wall) earns
`invalid_reward`, leaves the state as it was and shows its picture again (counted as an
invalid action, and as `env/malformed_pictures` when the tokens were not a picture at all).
The episode ends when the agent stands on the goal: `success` 1, and `env/optimal_plan` 1 when
it took the shortest path's number of turns without an invalid one (VPRL's exact-match metric;
`env/` metrics reach evaluations, rollout/episode.py).

The expert plays the warm start: with probability `expert_noise` a uniformly random legal move
(VPRL's random walk), else the next move of a shortest path. The warm start keeps only episodes
that reach the goal, which a pure random walk (`expert_noise=1`) rarely does within a few turns;
the recipe's 0.5 keeps detours and dead ends in the demonstrations while most episodes still
arrive. Departures from VPRL, all of scale: a k-means patch codebook instead of a VQGAN (the
renderer draws few distinct patches, so the quantised rendering carries the same information
as the grid: these image tokens are exact, VPRL's are not), 25 tokens per image instead of
256, and GRPO over whole episodes (the summed progress rewards) instead of a group of
candidate next states per state; GiGPO's anchor-state groups (`anchor_states`, the state) give
that per-state grouping where wanted.
"""

from __future__ import annotations

import random
from functools import lru_cache
from typing import Any

import numpy as np

from agentic_rl.envs.base import check_steppable
from agentic_rl.envs.code_words import CodeParseError
from agentic_rl.envs.games.gridworld import (
    MOVES,
    SIZE,
    inside,
    layout_of,
    make_gridworld_tasks,
    shortest_path,
)
from agentic_rl.envs.vision.patch_vq import PatchVQ
from agentic_rl.envs.vision.scenes import CELL, COLOURS, render_grid
from agentic_rl.tools.base import EnvActionTool
from agentic_rl.types import Action, Observation, StepResult, Task

Cell = tuple[int, int]
TOKENS_PER_IMAGE = SIZE * SIZE  # one patch per cell
CODEBOOK_SIZE = 16
CODEBOOK_LAYOUTS = 16  # training layouts rendered with the agent on every free cell

SYSTEM_PROMPT = (
    "You plan in pictures. A picture of a 5x5 grid is written as 25 image tokens, row by row: "
    "walls are black, the agent a blue circle, the goal a green square. Each turn, picture the "
    "agent after one step (up, down, left or right, never into a wall) and write that picture "
    "as <state> followed by its 25 image tokens and </state>. Go on until the agent stands on "
    "the goal."
)


STATE_TOOL = EnvActionTool("state", "The picture after one move, as 25 image tokens.", "tokens")
"""`<state>tokens</state>`: the next picture, read by `ImagePlanningEnv.step`."""


@lru_cache(maxsize=4)
def grid_vq(codebook_size: int = CODEBOOK_SIZE) -> PatchVQ:
    """The patch codebook of the grid pictures, fitted on `CODEBOOK_LAYOUTS` training layouts
    with the agent on each free cell (the goal cell included). Deterministic: every process
    and every run gets the same codes."""
    images = []
    for task in make_gridworld_tasks("train", CODEBOOK_LAYOUTS, seed=0):
        walls, _, goal = layout_of(task)
        for r in range(SIZE):
            for c in range(SIZE):
                if (r, c) not in walls:
                    images.append(render_grid(walls, (r, c), goal))
    return PatchVQ.fit(images, codebook_size, CELL, seed=0)


def _near(pixels: np.ndarray, colour: tuple[int, int, int], tolerance: float = 60.0) -> int:
    """How many pixels of `pixels` [..., 3] lie within `tolerance` (L2) of `colour`."""
    return int((np.linalg.norm(pixels - np.asarray(colour, np.float32), axis=-1) < tolerance).sum())


def read_cells(image: Any) -> dict[Cell, str]:
    """What each cell of a grid picture shows, read from its pixels by colour: "wall" (mostly
    black), "agent" (blue), "goal" (green), else "empty". The agent on the goal hides it (the
    renderer draws the agent last), so that cell reads "agent"."""
    pixels = np.asarray(image, dtype=np.float32)
    cells: dict[Cell, str] = {}
    area = CELL * CELL
    for r in range(SIZE):
        for c in range(SIZE):
            patch = pixels[r * CELL : (r + 1) * CELL, c * CELL : (c + 1) * CELL]
            if _near(patch, (0, 0, 0)) > area // 2:
                cells[(r, c)] = "wall"
            elif _near(patch, COLOURS["blue"]) >= area // 8:
                cells[(r, c)] = "agent"
            elif _near(patch, COLOURS["green"]) >= area // 8:
                cells[(r, c)] = "goal"
            else:
                cells[(r, c)] = "empty"
    return cells


def infer_move(
    walls: set[Cell], position: Cell, goal: Cell, cells: dict[Cell, str]
) -> tuple[str | None, str]:
    """The move that turns the state (walls, position, goal) into the picture's `cells`, or None
    and why the transition is invalid."""
    agents = [cell for cell, kind in cells.items() if kind == "agent"]
    if len(agents) != 1:
        return None, f"the picture shows {len(agents)} agents"
    seen_walls = {cell for cell, kind in cells.items() if kind == "wall"}
    if seen_walls != walls:
        return None, "the walls changed"
    new = agents[0]
    goals = [cell for cell, kind in cells.items() if kind == "goal"]
    if goals != ([] if new == goal else [goal]):  # the agent on the goal hides it
        return None, "the goal moved" if goals else "the goal vanished"
    if new == position:
        return None, "the agent did not move"
    step = (new[0] - position[0], new[1] - position[1])
    for name, delta in MOVES.items():
        if delta == step:
            return name, ""
    return None, "the agent jumped more than one cell"


class ImagePlanningEnv:
    """Walk to the goal by writing each next picture; VPRL's progress reward (module docstring)."""

    anchor_states = True  # observations carry the state, for GiGPO's anchor groups

    def __init__(
        self,
        format_penalty: float = 0.0,
        tool_timeout_s: float = 10.0,
        progress_reward: float = 1.0,
        valid_reward: float = 0.0,
        invalid_reward: float = -5.0,
        expert_noise: float = 0.0,
        codebook_size: int = CODEBOOK_SIZE,
    ) -> None:
        del tool_timeout_s  # pictures are not tool calls; accepted for a uniform constructor
        if format_penalty:
            raise ValueError(
                "image_planning scores a malformed picture as an invalid transition "
                "(invalid_reward); set env.format_penalty=0"
            )
        if not 0.0 <= expert_noise <= 1.0:
            raise ValueError(f"expert_noise must be in [0, 1], got {expert_noise}")
        self.tools: list[Any] = [STATE_TOOL]
        self.rewards = (float(progress_reward), float(valid_reward), float(invalid_reward))
        self.expert_noise = float(expert_noise)
        self.vq = grid_vq(int(codebook_size))
        self.walls: set[Cell] = set()
        self.position: Cell = (0, 0)
        self.goal: Cell = (0, 0)
        self.task: Task | None = None
        self.turns = 0
        self.invalid = 0
        self.optimal_length = 0
        self.done = False

    def picture_tokens(self, position: Cell | None = None) -> str:
        """The picture of the current state (or of the agent at `position`) as image tokens."""
        image = render_grid(self.walls, self.position if position is None else position, self.goal)
        return self.vq.to_text(self.vq.encode(image))

    def state_key(self) -> str:
        return f"{sorted(self.walls)}|{self.position}|{self.goal}"

    def reset(self, task: Task, seed: int) -> Observation:
        """Start on `task`'s layout; `seed` is unused (the layout fixes everything)."""
        del seed
        self.task = task
        self.walls, self.position, self.goal = layout_of(task)
        self.optimal_length = len(shortest_path(self.walls, self.position, self.goal))
        self.turns = self.invalid = 0
        self.done = False
        return Observation(
            messages=[
                {"role": "system", "content": SYSTEM_PROMPT},
                {"role": "user", "content": f"The grid:{self.picture_tokens()}"},
            ],
            anchor=self.state_key(),
        )

    def _distance(self, cell: Cell) -> int:
        return len(shortest_path(self.walls, cell, self.goal)) if cell != self.goal else 0

    def step(self, action: Action) -> StepResult:
        check_steppable(self.task, self.done)
        self.turns += 1
        if action.kind != "tool" or action.name != STATE_TOOL.name:
            why = action.error or (
                "no picture in this turn" if action.kind != "tool" else f"unknown '{action.name}'"
            )
            return self._invalid(why, malformed=True)
        try:
            codes = self.vq.parse(str(action.arguments.get("tokens", "")), TOKENS_PER_IMAGE)
        except CodeParseError as err:
            return self._invalid(str(err), malformed=True)
        cells = read_cells(self.vq.decode(codes, (SIZE, SIZE)))
        move, why = infer_move(self.walls, self.position, self.goal, cells)
        if move is None:
            return self._invalid(why)
        dr, dc = MOVES[move]
        target = (
            self.position[0] + dr,
            self.position[1] + dc,
        )  # a free cell: the walls are checked
        closer = self._distance(target) < self._distance(self.position)
        self.position = target
        progress, valid, _ = self.rewards
        info: dict[str, float] = {"env/valid_moves": 1.0, "env/progress_moves": float(closer)}
        if self.position == self.goal:
            self.done = True
            optimal = self.turns == self.optimal_length and self.invalid == 0
            info.update({"success": 1.0, "env/optimal_plan": float(optimal)})
            return StepResult(None, progress, terminated=True, info=info)
        return StepResult(
            Observation(content="", name=STATE_TOOL.name, anchor=self.state_key()),
            progress if closer else valid,
            info=info,
        )

    def _invalid(self, why: str, malformed: bool = False) -> StepResult:
        self.invalid += 1
        message = f"Invalid picture: {why}. The grid is still:{self.picture_tokens()}"
        info = {"invalid_action": 1.0, "env/malformed_pictures": float(malformed)}
        return StepResult(
            Observation(content=message, name="error", anchor=self.state_key()),
            self.rewards[2],
            info=info,
        )

    def legal_moves(self) -> list[str]:
        moves = []
        for name, (dr, dc) in MOVES.items():
            target = (self.position[0] + dr, self.position[1] + dc)
            if inside(target, SIZE) and target not in self.walls:
                moves.append(name)
        return moves

    def expert_turn(self) -> str:
        """The picture after the expert's move: with probability `expert_noise` a random legal
        move, else a shortest path's next move (deterministic given the task and the turn)."""
        assert self.task is not None, "expert_turn() before reset()"
        rng = random.Random(f"{self.task.task_id}/{self.turns}")
        if rng.random() < self.expert_noise:
            move = rng.choice(self.legal_moves())
        else:
            move = shortest_path(self.walls, self.position, self.goal)[0]
        dr, dc = MOVES[move]
        target = (self.position[0] + dr, self.position[1] + dc)
        return f"<state>{self.picture_tokens(target)}</state>"


def make_image_planning_tasks(split: str, n: int, seed: int = 0) -> list[Task]:
    """The grid world's layouts (envs/games/gridworld.py) without a text answer: a plan here is
    pictures, never words (the shortest path stays in `fields["plan"]`)."""
    tasks = make_gridworld_tasks(split, n, seed)  # type: ignore[arg-type]
    for task in tasks:
        task.prompt = "Plan to the goal in pictures."
        task.fields["plan"] = task.answers[0].split()
        task.answers = []
    return tasks
