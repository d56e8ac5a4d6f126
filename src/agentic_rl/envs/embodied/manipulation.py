"""Robot manipulation as dialogue, as VLA-RL trains it, with a text observation of a 2D
arm-and-blocks physics simulation.

The world (`TableSim`, pymunk): a 1 m x 1 m table seen from above, walled, with coloured square
blocks (dynamic bodies; table friction as velocity damping, so a pushed block slides and stops)
and the overhead arm's gripper (a kinematic body above the table: it passes over blocks, and a
block it holds is carried through a pivot joint and pushes the blocks it meets). The task: put
the named block in the goal zone and let go of it there.

Each turn the model sees the instruction and the state as text (positions in table units of
5 cm, the gripper's offset to the block and the block's offset to the goal) and answers with one
action, VLA-RL's end-effector delta plus gripper: `<action> w_dx w_dy w_grip</action>`, one
action token per dimension (envs/embodied/action_tokens.py: `num_bins` uniform bins over
[-1, 1], bin k written as the vocabulary token CODE_WORDS[k], decoded at the bin centre).
The move is (k - (num_bins - 1) / 2) * `bin_step` metres per axis, clamped to the table (so with
11 bins of 5 cm, bin k moves k - 5 table units); a grip value above 0 closes the gripper after
the move (grasping the block under it, within 5 cm), at most 0 opens it (releasing).

Rewards (per step): dense progress, the drop of the potential
phi = [not holding the block] * (|gripper - block| + 0.1) + |block - goal|, divided by its value
at the start (an episode's progress sums to 1 - phi_end / phi_start); plus `success_reward`
(VLA-RL's sparse 1) when the block rests in the goal zone released, which ends the episode. A
malformed or out-of-range action (not `dims` action tokens, a word that is no action token, a
token of a bin past `num_bins`) is data: an error observation, `-format_penalty` (VLA-RL: -1 for
an unparsable action) and the `invalid_action` metric; the world does not move. After
`max_steps` actions the episode is truncated.

The scripted expert (`expert_turn`) moves straight to the block (grasping when the move reaches
it), then carries it to the goal and releases it there; it re-plans from the true state each
step, so pushes and lag are corrected.
"""

from __future__ import annotations

import hashlib
import math
import random
from typing import Any, Literal

from agentic_rl.envs.base import check_steppable
from agentic_rl.envs.code_words import CodeParseError
from agentic_rl.envs.discrete import ACTION_TOOL, action_call_error
from agentic_rl.envs.embodied.action_tokens import ActionCodec
from agentic_rl.types import Action, Observation, StepResult, Task

Split = Literal["train", "eval"]
Vec = tuple[float, float]

UNIT = 0.05  # metres per table unit of the observation
TABLE = 1.0  # metres
BLOCK = 0.06  # block side
REACH = 0.05  # a closing gripper grasps a block whose centre is this close
GOAL_RADIUS = 0.075
GRASP_GAP = 0.1  # the potential's bonus for holding the block
MOVE_SECONDS, SUBSTEPS = 0.25, 10
COLOURS = ("red", "blue", "green", "yellow")
EVAL_BUCKETS = 5

SYSTEM_PROMPT = (
    "You control a robot arm above a table. Each turn write one action: three action tokens, "
    "for the gripper's move along x (right), its move along y (up), and the gripper (a token "
    "in the upper half closes it, in the lower half opens it), like <action>{example}</action>. "
    "The {n} action tokens from most negative to most positive: {words}. {moves}"
)


def _pymunk() -> Any:
    try:
        import pymunk
    except ImportError as err:  # an optional dependency
        raise ImportError(
            "the manipulation env needs pymunk: pip install 'agentic-rl[embodied]'"
        ) from err
    return pymunk


def _distance(a: Vec, b: Vec) -> float:
    return math.hypot(a[0] - b[0], a[1] - b[1])


class TableSim:
    """The pymunk world: table walls, blocks, the kinematic gripper and its grasp joint."""

    def __init__(self, gripper: Vec, blocks: dict[str, Vec]) -> None:
        pm = _pymunk()
        self.pm = pm
        self.space = pm.Space()
        self.space.gravity = (0.0, 0.0)
        self.space.damping = 1e-3  # top-down table friction: a sliding block stops quickly
        corners = [(0.0, 0.0), (TABLE, 0.0), (TABLE, TABLE), (0.0, TABLE)]
        for a, b in zip(corners, corners[1:] + corners[:1], strict=True):
            wall = pm.Segment(self.space.static_body, a, b, 0.01)
            wall.friction = 0.5
            self.space.add(wall)
        self.gripper = pm.Body(body_type=pm.Body.KINEMATIC)
        self.gripper.position = gripper
        grip_shape = pm.Circle(self.gripper, 0.02)
        grip_shape.sensor = True  # above the table: it passes over blocks
        self.space.add(self.gripper, grip_shape)
        self.blocks: dict[str, Any] = {}
        for name, position in blocks.items():
            body = pm.Body()
            body.position = position
            shape = pm.Poly.create_box(body, (BLOCK, BLOCK))
            shape.mass = 0.2
            shape.friction = 0.5
            self.space.add(body, shape)
            self.blocks[name] = body
        self.joint: Any = None
        self.held: str | None = None

    def position(self, name: str) -> Vec:
        p = self.blocks[name].position
        return float(p.x), float(p.y)

    def gripper_position(self) -> Vec:
        p = self.gripper.position
        return float(p.x), float(p.y)

    def _run(self, seconds: float, steps: int) -> None:
        for _ in range(steps):
            self.space.step(seconds / steps)

    def move(self, dx: float, dy: float) -> bool:
        """Move the gripper by (dx, dy) metres at constant speed, clamped to the table (keeping
        a held block on it); returns whether the move was clamped."""
        margin = BLOCK if self.held else 0.02
        x, y = self.gripper_position()
        tx = min(max(x + dx, margin), TABLE - margin)
        ty = min(max(y + dy, margin), TABLE - margin)
        clamped = (tx, ty) != (x + dx, y + dy)
        self.gripper.velocity = ((tx - x) / MOVE_SECONDS, (ty - y) / MOVE_SECONDS)
        self._run(MOVE_SECONDS, SUBSTEPS)
        self.gripper.velocity = (0.0, 0.0)
        self.gripper.position = (tx, ty)
        self._run(MOVE_SECONDS, SUBSTEPS)  # let the carried and pushed blocks settle
        return clamped

    def grip(self, close: bool) -> None:
        """Close (grasp the nearest block within REACH, if any) or open (release)."""
        if close and self.held is None:
            here = self.gripper_position()
            near = [
                (d, name)
                for name in sorted(self.blocks)
                if (d := _distance(here, self.position(name))) <= REACH
            ]
            if near:
                self.held = min(near)[1]
                body = self.blocks[self.held]
                self.joint = self.pm.PivotJoint(self.gripper, body, self.gripper.position)
                self.space.add(self.joint)
        elif not close and self.held is not None:
            self.space.remove(self.joint)
            self.joint, self.held = None, None
            for body in self.blocks.values():  # the gripper lets go: the block stays put
                body.velocity = (0.0, 0.0)
        self._run(MOVE_SECONDS / 2, SUBSTEPS // 2)


def units(value: float) -> int:
    return round(value / UNIT)


# ---------------------------------------------------------------------------------------------
# The env
# ---------------------------------------------------------------------------------------------


class ManipulationEnv:
    """VLA-RL manipulation: put the named block in the goal zone of a pymunk table, one action
    of discretised action tokens per turn (see the module doc)."""

    def __init__(
        self,
        num_bins: int = 256,
        bin_step: float = 0.002,
        max_steps: int = 10,
        success_reward: float = 1.0,
        format_penalty: float = 1.0,
        tool_timeout_s: float = 10.0,
    ) -> None:
        del tool_timeout_s  # actions are not tool calls; accepted for a uniform constructor
        if bin_step <= 0:
            raise ValueError(f"bin_step must be > 0, got {bin_step}")
        if max_steps < 1:
            raise ValueError(f"max_steps must be >= 1, got {max_steps}")
        self.tools: list[Any] = [ACTION_TOOL]
        self.codec = ActionCodec(num_bins, dims=3)
        self.bin_step = bin_step
        self.max_steps = max_steps
        self.success_reward = success_reward
        self.format_penalty = format_penalty
        self.task: Task | None = None
        self.sim: TableSim | None = None
        self.target = ""
        self.goal: Vec = (0.0, 0.0)
        self.steps = 0
        self.done = False
        self._phi0 = 1.0

    # -- the world --------------------------------------------------------------------------
    def potential(self) -> float:
        """phi: the distance still to cover (see the module doc)."""
        assert self.sim is not None
        block = self.sim.position(self.target)
        phi = _distance(block, self.goal)
        if self.sim.held != self.target:
            phi += _distance(self.sim.gripper_position(), block) + GRASP_GAP
        return phi

    def in_goal(self) -> bool:
        assert self.sim is not None
        return _distance(self.sim.position(self.target), self.goal) <= GOAL_RADIUS

    def move_of(self, k: int) -> float:
        """Metres moved along an axis by bin `k`."""
        return (k - (self.codec.num_bins - 1) / 2) * self.bin_step

    def bin_for(self, metres: float) -> int:
        """The bin whose move comes closest to `metres` (clipped to the bins)."""
        k = round(metres / self.bin_step + (self.codec.num_bins - 1) / 2)
        return min(max(k, 0), self.codec.num_bins - 1)

    def system_prompt(self) -> str:
        n = self.codec.num_bins
        words = (
            " ".join(self.codec.words)
            if n <= 32
            else f"{n} tokens starting '{self.codec.words[0]}'"
        )
        middle = (n - 1) // 2
        step_units = self.bin_step / UNIT
        moves = (
            f"The k-th token (from 0) moves the gripper by (k - {(n - 1) / 2:g}) x "
            f"{step_units:g} table units."
        )
        example = self.codec.encode_bins([middle + 1, middle, n - 1])
        return SYSTEM_PROMPT.format(example=example, n=n, words=words, moves=moves)

    def state_text(self) -> str:
        assert self.sim is not None, "reset() first"
        gx, gy = self.sim.gripper_position()
        block = self.sim.position(self.target)
        held = self.sim.held
        lines = [
            f"Gripper at ({units(gx)}, {units(gy)}), "
            + (f"closed, holding the {held} block." if held else "open.")
        ]
        for name in sorted(self.sim.blocks):
            x, y = self.sim.position(name)
            line = f"{name.capitalize()} block at ({units(x)}, {units(y)})"
            if name == self.target and held != name:
                line += f", {units(x - gx):+d}, {units(y - gy):+d} from the gripper"
            lines.append(line + ".")
        lines.append(
            f"Goal at ({units(self.goal[0])}, {units(self.goal[1])}), "
            f"{units(self.goal[0] - block[0]):+d}, {units(self.goal[1] - block[1]):+d} "
            f"from the {self.target} block."
        )
        return "\n".join(lines)

    # -- the protocol ---------------------------------------------------------------------
    def reset(self, task: Task, seed: int) -> Observation:
        del seed  # the task fixes the scene; the simulation is deterministic
        fields = task.fields
        self.task = task
        self.sim = TableSim(
            tuple(fields["gripper"]),  # type: ignore[arg-type]
            {name: tuple(p) for name, p in fields["blocks"].items()},  # type: ignore[misc]
        )
        self.target = fields["target"]
        self.goal = tuple(fields["goal"])  # type: ignore[assignment]
        self.steps = 0
        self.done = False
        self._phi0 = max(self.potential(), 1e-6)
        return Observation(
            messages=[
                {"role": "system", "content": self.system_prompt()},
                {"role": "user", "content": f"Instruction: {task.prompt}\n{self.state_text()}"},
            ]
        )

    def step(self, action: Action) -> StepResult:
        check_steppable(self.task, self.done)
        assert self.sim is not None  # reset() sets the task and the simulation together
        if action.kind == "answer":
            self.done = True
            return StepResult(None, 0.0, terminated=True, info={"answered": 1, "success": 0.0})
        why = action_call_error(action)
        if why is not None:
            return self._invalid(why)
        try:
            dx, dy, grip = self.codec.decode_bins(str(action.arguments.get("actions", "")))
        except CodeParseError as err:
            return self._invalid(str(err))
        before = self.potential()
        clamped = self.sim.move(self.move_of(dx), self.move_of(dy))
        self.sim.grip(self.codec.centre(grip) > 0)
        self.steps += 1
        reward = (before - self.potential()) / self._phi0
        info: dict[str, Any] = {"tool_call": 1, "clamped": int(clamped)}
        terminated = self.in_goal() and self.sim.held is None
        if terminated:
            reward += self.success_reward
        truncated = not terminated and self.steps >= self.max_steps
        if terminated or truncated:
            self.done = True
            info["success"] = float(terminated)
        return StepResult(
            Observation(content=self.state_text(), name=ACTION_TOOL.name),
            reward,
            terminated=terminated,
            truncated=truncated,
            info=info,
        )

    def _invalid(self, why: str) -> StepResult:
        n = self.codec.num_bins
        message = (
            f"Invalid action: {why}. Write <action> followed by 3 action tokens (of the {n} "
            f"listed) and </action>.\n{self.state_text()}"
        )
        return StepResult(
            Observation(content=message, name="error"),
            -self.format_penalty,
            info={"invalid_action": 1},
        )

    # -- the scripted expert ------------------------------------------------------------------
    def expert_bins(self) -> list[int]:
        """The expert's next action as bins (dx, dy, grip); see the module doc."""
        assert self.sim is not None, "reset() first"
        here = self.sim.gripper_position()
        block = self.sim.position(self.target)
        holding = self.sim.held == self.target
        aim = self.goal if holding else block
        start = here if not holding else block
        kx = self.bin_for(aim[0] - start[0])
        ky = self.bin_for(aim[1] - start[1])
        after = (start[0] + self.move_of(kx), start[1] + self.move_of(ky))
        if holding:  # release once the block will be in the goal
            close = _distance(after, self.goal) > GOAL_RADIUS / 2
        elif self.sim.held is not None:  # holding another block: let go
            close = False
        else:  # grasp when the move reaches the block
            close = _distance(after, block) <= REACH * 0.8
        return [kx, ky, self.codec.num_bins - 1 if close else 0]

    def expert_turn(self) -> str:
        if self.done:
            return "<answer>done</answer>"
        return f"<action>{self.codec.encode_bins(self.expert_bins())}</action>"


# ---------------------------------------------------------------------------------------------
# Tasks
# ---------------------------------------------------------------------------------------------


def _split_of(key: str) -> Split:
    bucket = int(hashlib.sha256(key.encode()).hexdigest(), 16) % EVAL_BUCKETS
    return "eval" if bucket == 0 else "train"


def _far_from(rng: random.Random, others: list[Vec], gap: float, margin: float) -> Vec:
    for _ in range(1000):
        p = (
            round(rng.uniform(margin, TABLE - margin), 3),
            round(rng.uniform(margin, TABLE - margin), 3),
        )
        if all(_distance(p, o) >= gap for o in others):
            return p
    raise RuntimeError("could not place an object on the table")


def make_manipulation_tasks(
    split: Split,
    n: int,
    seed: int = 0,
    *,
    num_blocks: int = 2,
    num_bins: int = 256,
    bin_step: float = 0.002,
    max_expert_steps: int = 6,
) -> list[Task]:
    """`n` scenes (gripper, blocks, goal, the block to move) that the scripted expert solves
    within `max_expert_steps` actions under these bins; the expert's actions are the gold
    answer. Train and eval scenes are disjoint (a hash of the scene picks its split)."""
    if not 1 <= num_blocks <= len(COLOURS):
        raise ValueError(f"num_blocks must be in 1..{len(COLOURS)}, got {num_blocks}")
    rng = random.Random(f"manipulation/{split}/{seed}/{num_blocks}")
    tasks: list[Task] = []
    for _ in range(50 * n + 200):
        if len(tasks) == n:
            return tasks
        colours = rng.sample(COLOURS, num_blocks)
        placed: list[Vec] = []
        blocks = {}
        for colour in colours:
            blocks[colour] = _far_from(rng, placed, 0.15, 0.1)
            placed.append(blocks[colour])
        goal = _far_from(rng, placed, 0.2, 0.12)
        gripper = _far_from(rng, [], 0.0, 0.05)
        target = colours[0]
        fields = {"gripper": list(gripper), "blocks": {c: list(p) for c, p in blocks.items()}}
        fields.update({"goal": list(goal), "target": target})
        key = repr(sorted(fields.items()))
        if _split_of(key) != split:
            continue
        task = Task(
            task_id=f"manipulation-{split}-{seed}-{len(tasks)}",
            prompt=f"Put the {target} block in the goal.",
            fields=fields,
        )
        actions = expert_actions(task, num_bins, bin_step, max_expert_steps)
        if actions is None:
            continue
        task.answers = [" | ".join(actions)]
        tasks.append(task)
    raise RuntimeError(f"could not generate {n} {split} manipulation scenes")


def expert_actions(task: Task, num_bins: int, bin_step: float, max_steps: int) -> list[str] | None:
    """The expert's action texts on `task` if it succeeds within `max_steps`, else None."""
    env = ManipulationEnv(num_bins=num_bins, bin_step=bin_step, max_steps=max_steps)
    env.reset(task, 0)
    actions = []
    while not env.done:
        text = env.codec.encode_bins(env.expert_bins())
        actions.append(text.strip())
        result = env.step(Action(kind="tool", name=ACTION_TOOL.name, arguments={"actions": text}))
    return actions if result.info.get("success") == 1.0 else None
