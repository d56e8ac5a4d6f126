"""Vision-language navigation as VLN-R1 trains it, with a text observation: follow a route
instruction through a generated indoor map, predicting the next 6 actions at once. The house
(map, poses and moves, shortest paths, route instructions, the generator) is in
envs/embodied/house.py, its top-down picture in envs/embodied/house_render.py; this module holds
the tasks and the env.

The world (`make_vln_tasks`, seeded and offline): a generated house, a grid of rooms (kitchen,
bedroom, ...) joined by doors, one landmark per room (the fridge, the bed...). The agent
stands on a cell facing north, east, south or west. Actions (VLN-R1's, on a grid: one cell
instead of 25 cm, 90 degrees instead of 30): `forward` (blocked by walls: a no-op that still
counts), `turn-left`, `turn-right`, `stop` (ends the episode; success = stopped on the goal
landmark's cell).

The instruction is an R2R-style route description of the shortest path from the start ("Turn
right and walk forward two steps into the kitchen, then ... stop at the fridge."). Each
observation says where the agent is and what lies ahead, left and right (a wall, open floor, a
door to a named room, a landmark) and the first landmark in view straight ahead.

A turn is `<action>forward || forward || turn-left || forward || forward || stop</action>`:
VLN-R1's chunk of the next `chunk_size` = 6 actions, executed in order (envs/discrete.py; extra
ones are dropped with the format penalty, a `stop` ends the chunk). Each chunk is scored with
VLN-R1's time-decayed reward (rewards/time_decay.py) against the expert's next actions from the
state the chunk started in: TDR = sum_j gamma^j 1[a_j == a*_j].

VLN-R1 trains on single chunks (one state -> the next 6 actions, reward = that chunk's TDR), so
its reward has no notion of episode length. Played as whole episodes, the sum of the chunks'
TDRs does: a chunk next to the goal earns at most 1 (the expert's next action is `stop`) while
every further chunk of walking on earns up to 3.69 against the re-planned path, so GRPO learned
to walk on instead of stopping (bench/README.md). `episode_reward` says how the chunks add up:
- "mean" (default): the episode's reward is the mean over its turns of the chunk's TDR as a
  share of the expert's own (normalized_time_decay_reward, in [0, 1]; a turn with no valid
  action scores 0), plus `success_reward` when the agent stops on the goal. On one chunk this
  is VLN-R1's TDR up to a constant factor of the state (same GRPO advantages); over an episode
  no number of chunks earns more than the expert's 1 + success_reward, and a rollout that never
  stops on the goal earns at most 1. The turn rewards are the increments of the running mean,
  so they sum to it.
- "route_mean": the chunks' shares summed and divided by max(the chunks played, the chunks the
  route takes: ceil(shortest path from the start, `stop` included / chunk_size)), plus
  `success_reward`. "mean" averages over the chunks played, so an episode that stops after one
  good chunk of a two-chunk route earns as much as one that walks on and arrives less its
  success reward; RL on "mean" learned to stop after the first chunk (1.1 chunks an episode
  after 30 GRPO steps, from 1.2-2.4: bench/results/learning/embodied.json). Here stopping
  early earns at most (chunks played) / (chunks of the route) and walking on past the route
  still divides by the chunks played, so neither pays: only the expert's pace earns 1. The
  turn rewards are the increments, so they sum to it.
- "sum": every chunk's raw TDR added up, `success_reward` on success (the ablation that shows
  the length incentive).

The scripted expert (`expert_turn`) is the shortest path (breadth-first search over cell and
heading, ties broken forward < turn-left < turn-right) from the current state, then `stop`; its
chunks are the SFT data, and its next actions are the TDR's ground truth.

Rendered observations (`render="image"`, for a vision-language policy; default "text"): every
observation also carries a top-down picture of the current state (house_render.py
`render_house`, a fixed `image_size` square whatever the house's size). It is stored by content
hash (model/images.py `save_image`) under `image_dir` as an `ImageRef`; the text keeps the
state description and says a picture follows. The goal is not marked: the instruction names it,
as in the text observation.
"""

from __future__ import annotations

import hashlib
import json
import random
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Literal

from agentic_rl.envs.discrete import ACTION_SEP, DiscreteActionEnv, parse_action, split_actions
from agentic_rl.envs.embodied.house import (
    ACTIONS,
    HEADINGS,
    STOP,
    Cell,
    HouseMap,
    Pose,
    generate_house,
    route_instruction,
    shortest_path,
    step_pose,
)
from agentic_rl.envs.embodied.house_render import render_house
from agentic_rl.envs.vision.scenes import default_image_dir
from agentic_rl.model.images import save_image
from agentic_rl.rewards.time_decay import normalized_time_decay_reward, time_decay_reward
from agentic_rl.types import Action, ImageRef, Observation, StepResult, Task

Split = Literal["train", "eval"]

CHUNK_SIZE = 6  # VLN-R1 predicts the next 6 actions (ablation: 6 > 8 > 4 > 1)
EPISODE_REWARDS = ("mean", "route_mean", "sum")  # how the chunks' TDRs add up (module doc)
RENDERS = ("text", "image")  # what an observation holds besides the text (module doc)
VIEW_NOTE = "Top-down view (you are the blue triangle):"  # the image placeholders follow this
EVAL_BUCKETS = 5  # 1 in 5 generated episodes is reserved for eval

SYSTEM_PROMPT = (
    "You are a robot navigating a house by following a route instruction. Each turn, plan your "
    "next {k} actions from: forward (one step ahead), turn-left, turn-right, stop (when you are "
    "at the goal). Write them in order separated by ||, like "
    "<action>forward || forward || turn-left || forward || forward || stop</action>."
)
_TURN = re.compile(r"\bturn[\s_]+(left|right)\b", re.IGNORECASE)


def _split_of(key: str) -> Split:
    bucket = int(hashlib.sha256(key.encode()).hexdigest(), 16) % EVAL_BUCKETS
    return "eval" if bucket == 0 else "train"


def make_vln_tasks(
    split: Split,
    n: int,
    seed: int = 0,
    *,
    room_rows: int = 2,
    room_cols: int = 2,
    room_size: int = 2,
    min_path: int = 4,
    max_path: int = 12,
) -> list[Task]:
    """`n` navigation episodes (house, start pose, goal landmark, route instruction) whose
    shortest path, `stop` included, has `min_path`..`max_path` actions. Train and eval episodes
    are disjoint (a hash of the episode picks its split), so eval tasks are held out."""
    if min_path > max_path:
        raise ValueError(f"min_path {min_path} > max_path {max_path}")
    rng = random.Random(f"vln/{split}/{seed}/{room_rows}x{room_cols}x{room_size}")
    tasks: list[Task] = []
    seen: set[str] = set()
    for _ in range(200 * n + 1000):
        if len(tasks) == n:
            return tasks
        spec = generate_house(rng, room_rows, room_cols, room_size)
        house = HouseMap(spec)
        goal = tuple(rng.choice(spec["landmarks"])[:2])
        cell = (rng.randrange(house.rows), rng.randrange(house.cols))
        if cell == goal:
            continue
        pose: Pose = (cell[0], cell[1], rng.randrange(4))
        path = shortest_path(house, pose, goal)  # type: ignore[arg-type]
        if not min_path <= len(path) <= max_path:
            continue
        key = json.dumps([spec, pose, goal])
        if key in seen or _split_of(key) != split:
            continue
        seen.add(key)
        instruction = route_instruction(house, pose, path, goal)  # type: ignore[arg-type]
        tasks.append(
            Task(
                task_id=f"vln-{split}-{seed}-{len(tasks)}",
                prompt=instruction,
                answers=[" ".join(ACTIONS[a] for a in path)],
                fields={"house": spec, "start": list(pose), "goal": list(goal)},
            )
        )
    raise RuntimeError(f"could not generate {n} {split} navigation episodes")


# ---------------------------------------------------------------------------------------------
# The env
# ---------------------------------------------------------------------------------------------


class NavigationEnv(DiscreteActionEnv):
    """VLN-R1 navigation: follow a route instruction through a generated house, 6 actions per
    turn, time-decayed chunk reward (see the module doc)."""

    # The map and the poses: a task-file row needs it (envs/base.py).
    task_fields = ("house", "start", "goal")

    def __init__(
        self,
        chunk_size: int = CHUNK_SIZE,
        max_steps: int = 24,
        decay: float = 0.8,
        success_reward: float = 1.0,
        episode_reward: str = "mean",
        format_penalty: float = 0.1,
        render: str = "text",
        image_size: int = 128,
        image_dir: str = "",
    ) -> None:
        super().__init__(ACTIONS, chunk_size, max_steps, format_penalty)
        if not 0.0 < decay <= 1.0:
            raise ValueError(f"decay must be in (0, 1], got {decay}")
        if episode_reward not in EPISODE_REWARDS:
            raise ValueError(
                f"episode_reward must be one of {EPISODE_REWARDS}, got {episode_reward!r}"
            )
        if render not in RENDERS:
            raise ValueError(f"render must be one of {RENDERS}, got {render!r}")
        if image_size < 16:
            raise ValueError(f"image_size must be >= 16, got {image_size}")
        self.render = render
        self.image_size = image_size
        self.image_dir = Path(image_dir) if image_dir else default_image_dir()
        self.chunk_size = chunk_size
        self.decay = decay
        self.success_reward = success_reward
        self.episode_reward = episode_reward
        self.chunk_scores: list[float] = []  # "mean": each turn's normalised TDR, in order
        self.route_chunks = 1  # "route_mean": the chunks the shortest route from the start takes
        self.house: HouseMap | None = None
        self.pose: Pose = (0, 0, 0)
        self.goal: Cell = (0, 0)
        self.stopped = False
        self.executed: list[int] = []  # actions executed this episode, in order

    def system_prompt(self) -> str:
        return SYSTEM_PROMPT.format(k=self.chunk_size)

    def _new_episode(self, task: Task, seed: int) -> None:
        del seed  # the task fixes the house, the start and the goal
        self.house = HouseMap(task.fields["house"])
        self.pose = tuple(task.fields["start"])  # type: ignore[assignment]
        self.goal = tuple(task.fields["goal"])  # type: ignore[assignment]
        self.stopped = False
        self.executed = []
        self.chunk_scores = []
        route = shortest_path(self.house, self.pose, self.goal)
        self.route_chunks = max(1, -(-len(route) // self.chunk_size))

    def reset(self, task: Task, seed: int) -> Observation:
        first = super().reset(task, seed)
        first.messages[-1]["content"] = (
            f"Instruction: {task.prompt}\n{first.messages[-1]['content']}"
        )
        if self.render == "image":
            first.messages[-1]["content"] += f"\n{VIEW_NOTE}"
            first.images = [self.picture()]
        return first

    def picture(self) -> ImageRef:
        """The current state as a top-down picture, stored by hash (module doc)."""
        assert self.house is not None, "reset() first"
        return save_image(render_house(self.house, self.pose, self.image_size), self.image_dir)

    def _apply(self, index: int) -> tuple[float, bool, bool]:
        assert self.house is not None
        self.executed.append(index)
        if index == STOP:
            self.stopped = True
            return (self.success_reward if self._success() else 0.0), True, False
        self.pose = step_pose(self.house, self.pose, index)
        return 0.0, False, False

    def _success(self) -> bool:
        return self.stopped and self.pose[:2] == self.goal

    def state_text(self) -> str:
        assert self.house is not None, "reset() first"
        r, c, h = self.pose
        cell = (r, c)
        return (
            f"You are in the {self.house.room_name(cell)}, facing {HEADINGS[h]}.\n"
            f"Ahead: {self.house.describe(cell, h)}. Left: {self.house.describe(cell, (h - 1) % 4)}. "
            f"Right: {self.house.describe(cell, (h + 1) % 4)}.\n"
            f"In view: {self.house.in_view(cell, h)}."
        )

    def anchor_key(self) -> Pose:
        return self.pose

    def expert_actions(self) -> list[int]:
        """The shortest path from the current pose, `stop` included."""
        assert self.house is not None, "reset() first"
        return shortest_path(self.house, self.pose, self.goal)

    def expert_turn(self) -> str:
        """The next `chunk_size` actions of the shortest path from here."""
        if self.done:
            return self.expert_text([])
        return self.expert_text(self.expert_actions())

    def parse_token(self, token: str) -> int | None:
        """One action the model wrote: a name of ACTIONS ("turn left" and "turn_left" too)."""
        text = _TURN.sub(lambda m: f"turn-{m.group(1).lower()}", token)
        return parse_action(text, self.action_names, self.index_base)

    def step(self, action: Action) -> StepResult:
        """envs/discrete.py's step (parse, execute in order, penalties), plus the chunk's
        time-decayed reward against the expert's next actions from the pre-chunk state, added
        up over the episode as `episode_reward` says (module doc)."""
        expert = self.expert_actions()[: self.chunk_size] if self.house is not None else []
        before = len(self.executed)
        result = super().step(action)
        predicted = self._predicted(action)
        tdr = time_decay_reward(predicted, expert, self.decay)
        if predicted:
            result.info["tdr"] = tdr
            result.info["chunk_actions"] = len(self.executed) - before
        if self.episode_reward == "sum":
            result.reward += tdr
            return self._with_picture(result)
        previous = self._chunk_value()
        score = normalized_time_decay_reward(predicted, expert, self.decay)
        self.chunk_scores.append(score)
        result.reward += self._chunk_value() - previous
        result.info["chunk_score"] = score
        return self._with_picture(result)

    def _chunk_value(self) -> float:
        """The chunks' part of the episode reward so far: their mean share ("mean"), or their
        summed share over max(chunks played, the route's chunks) ("route_mean")."""
        if not self.chunk_scores:
            return 0.0
        played = len(self.chunk_scores)
        if self.episode_reward == "route_mean":
            return sum(self.chunk_scores) / max(played, self.route_chunks)
        return sum(self.chunk_scores) / played

    def _with_picture(self, result: StepResult) -> StepResult:
        if self.render == "image" and result.observation is not None:
            result.observation.content += f"\n{VIEW_NOTE}"
            result.observation.images = [self.picture()]
        return result

    def _predicted(self, action: Action) -> list[int]:
        """The chunk's valid actions in order, as parsed (of the first `chunk_size` written)."""
        if action.kind != "tool" or action.name != "action":
            return []
        tokens = split_actions(str(action.arguments.get("actions", "")))[: self.chunk_size]
        parsed = [self.parse_token(t) for t in tokens]
        return [p for p in parsed if p is not None]


def describe_path(path: Sequence[int]) -> str:
    """Action indices as the `<action>` body the expert writes."""
    return f" {ACTION_SEP} ".join(ACTIONS[i] for i in path)
