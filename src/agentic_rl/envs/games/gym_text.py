"""Any Gymnasium environment with a text rendering, through one adapter; FrozenLake as RAGEN.

`GymTextEnv` (env name `gym_text`, option `env_id`) wraps a Gymnasium env that has a discrete
action space and a text rendering (`render_mode="ansi"`: FrozenLake, CliffWalking, Taxi...).
The agent writes `<action>Right || Down</action>`: actions by name (case-insensitive) or by
Gymnasium's index ("0" is the first action), several per turn (envs/discrete.py). Reward,
termination and the env's own time limit (truncation) are passed through unchanged; a turn's
reward is the sum of its actions' rewards. The observation is the ANSI rendering as plain text
that keeps what its colours mean (`ansi_to_text`): a cell highlighted in red or reversed (the
agent, in toy-text envs) is shown in brackets, e.g. `[S]FFF`; any other coloured text is shown
with what its colour means, e.g. Taxi's `[B:passenger]`, `[Y:destination]`, `[ :taxi]` and
`[R:taxi with passenger]` (`COLOUR_MEANINGS` for the envs named here, `env_kwargs`-free), else
with the colour's name (`[G:green]`), so two states that look different never read the same.
An env without a text rendering, or without a discrete action space, is refused at
construction with `GymTextError` naming it and what it offers.

Success (`success_when`, the `success` metric and what warm starts and `check_env` count): an
episode succeeds when it terminates and the env's `info["is_success"]` says so where the env
reports it; otherwise, with "reward", when the last step's reward is positive (FrozenLake's 1 at
the goal, Taxi's +20 for a delivery); with "terminated", whenever it terminates (envs whose only
ending is the goal); "auto" (default) is "terminated" for CliffWalking, whose goal step pays -1
like every step (its cliff sends the agent back to the start without ending the episode), and
"reward" for every other env.

Each task is one `env_seed`, which fixes the initial state (Gymnasium's `reset(seed=...)`);
the episode's reset seed, which the rollout shares within a group (RAGEN's env groups), then
seeds the transitions, so the episodes of a group start alike and an episode replays exactly
from its seed and actions. Train and eval tasks use disjoint seeds.

`FrozenLakeEnv` (env name `frozenlake`) is RAGEN's FrozenLake: a random `size` x `size` map per
task (frozen with probability `p` = 0.8, random start and goal, always solvable) rendered as
RAGEN does: `P` player, `_` frozen, `O` hole, `G` goal, `X` player in a hole, `√` player on the
goal. Reward 1 at the goal (Gymnasium's), 0 elsewhere; falling into a hole ends the episode.
`is_slippery` (default true) moves in the intended direction with probability `success_rate`
(Gymnasium's and the paper's 1/3) and to either side otherwise. Its expert is an oracle: it
knows the episode's random draws (it tries each action on a copy of the env) and picks the
move that actually brings the player one step closer to the goal, so it always succeeds; on a
slippery lake its choices therefore depend on draws the model cannot see (fine for a format
warm start, not a policy to imitate). Without slipping it is a plain BFS shortest path.

Gymnasium is an optional dependency (`pip install 'agentic-rl[envs]'`), imported on first use.
"""

from __future__ import annotations

import copy
import random
import re
import warnings
import zlib
from collections import deque
from collections.abc import Hashable, Sequence
from typing import Any, Literal

from agentic_rl.envs.discrete import ACTION_SEP, DiscreteActionEnv
from agentic_rl.envs.splits import split_of
from agentic_rl.errors import UserInputError
from agentic_rl.types import Task

Split = Literal["train", "eval"]
Cell = tuple[int, int]

# Action names of Gymnasium's text envs, by env name without version (their index order).
ACTION_NAMES: dict[str, tuple[str, ...]] = {
    "FrozenLake": ("Left", "Down", "Right", "Up"),
    "FrozenLake8x8": ("Left", "Down", "Right", "Up"),
    "CliffWalking": ("Up", "Right", "Down", "Left"),
    "CliffWalkingSlippery": ("Up", "Right", "Down", "Left"),
    "Taxi": ("South", "North", "East", "West", "Pickup", "Dropoff"),
}
# What the colours of a rendering mean, by env name without version (SGR code -> meaning).
COLOUR_MEANINGS: dict[str, dict[str, str]] = {
    "Taxi": {"34": "passenger", "35": "destination", "43": "taxi", "42": "taxi with passenger"},
}
# Envs whose episode terminates only at the goal, whatever its reward (success_when="auto").
SUCCESS_ON_TERMINATION = ("CliffWalking", "CliffWalkingSlippery")
SUCCESS_RULES = ("auto", "reward", "terminated")
_COLOURS = ("black", "red", "green", "yellow", "blue", "magenta", "cyan", "white")
COLOUR_NAMES: dict[str, str] = {
    **{str(30 + i): name for i, name in enumerate(_COLOURS)},
    **{str(90 + i): f"bright {name}" for i, name in enumerate(_COLOURS)},
    **{str(40 + i): f"on {name}" for i, name in enumerate(_COLOURS)},
    **{str(100 + i): f"on bright {name}" for i, name in enumerate(_COLOURS)},
}
"""SGR colour codes by name (foreground, bright, background)."""
HIGHLIGHT_CODES = frozenset({"41", "7"})  # the agent in toy-text envs: shown as bare [brackets]
_ESCAPE = re.compile(r"\x1b\[([0-9;]*)([A-Za-z])")
_LAST_ACTION = re.compile(r"^\s*\(\w[\w ]*\)\s*$")  # toy-text envs print "  (Down)" first
TASK_SEED_STRIDE = 1_000_003  # train seeds are even, eval seeds odd, per generator seed


class GymTextError(UserInputError, ValueError):
    """A Gymnasium env the adapter cannot use; the message names it and says why."""


def _gymnasium() -> Any:
    try:
        import gymnasium
    except ImportError as err:  # pragma: no cover - depends on the install
        raise ImportError(
            "Gymnasium envs need the `gymnasium` package: pip install 'agentic-rl[envs]'"
        ) from err
    return gymnasium


def make_gym_env(env_id: str, env_kwargs: dict[str, Any] | None = None) -> Any:
    """`gymnasium.make(env_id, render_mode="ansi", **env_kwargs)`, refusing envs without a
    text rendering or a discrete action space (GymTextError)."""
    gym = _gymnasium()
    kwargs = dict(env_kwargs or {})
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # a missing "ansi" mode is reported below instead
            env = gym.make(env_id, render_mode="ansi", disable_env_checker=True, **kwargs)
    except gym.error.Error as err:
        raise GymTextError(f"Gymnasium env {env_id!r}: {err}") from err
    except TypeError as err:  # a keyword this env (or this Gymnasium version) does not take
        raise GymTextError(f"Gymnasium env {env_id!r} with {sorted(kwargs)}: {err}") from err
    modes = list(env.unwrapped.metadata.get("render_modes", []))
    if "ansi" not in modes:
        env.close()
        raise GymTextError(
            f"Gymnasium env {env_id!r} has no text rendering: the gym_text adapter needs "
            f"render_mode='ansi', and it offers {modes or 'none'}"
        )
    if not isinstance(env.action_space, gym.spaces.Discrete):
        env.close()
        raise GymTextError(
            f"Gymnasium env {env_id!r} has action space {env.action_space}: the gym_text "
            "adapter needs a Discrete one"
        )
    return env


def _styled(text: str, codes: list[str], meanings: dict[str, str]) -> str:
    """One run of text under the colour `codes` (SGR parameters, in order): bare brackets for
    the plain highlight, else `[text:what the colours mean]` (their names where unknown)."""
    colours = [c for c in codes if c in meanings or c in COLOUR_NAMES or c in HIGHLIGHT_CODES]
    if not colours or not text:
        return text
    if all(c in HIGHLIGHT_CODES and c not in meanings for c in colours):
        return f"[{text}]"
    names = [meanings.get(c) or COLOUR_NAMES.get(c) for c in colours]
    return f"[{text}:{'+'.join(dict.fromkeys(n for n in names if n))}]"


def ansi_to_text(rendered: Any, meanings: dict[str, str] | None = None) -> str:
    """A Gymnasium ANSI rendering as plain text that keeps what its colours say (see the
    module docstring): text under colour codes becomes `[text]` (the red / reversed highlight)
    or `[text:meaning]` (`meanings`: SGR code -> word, else the colour's name); a reset
    (`ESC[0m`) ends every colour; other escape codes are removed; blank edge lines dropped."""
    if hasattr(rendered, "getvalue"):  # some envs return a StringIO
        rendered = rendered.getvalue()
    rendered, meanings = str(rendered), meanings or {}
    parts: list[str] = []
    active: list[str] = []  # the colour codes in force, in the order they were set
    position = 0
    for match in _ESCAPE.finditer(rendered):
        parts.append(_styled(rendered[position : match.start()], active, meanings))
        position = match.end()
        if match.group(2) != "m":
            continue  # cursor moves and the like: removed
        params = [p for p in match.group(1).split(";") if p]
        if not params or "0" in params:
            active = []
        else:
            active = active + [p for p in params if p not in active]
    parts.append(_styled(rendered[position:], active, meanings))
    text = "".join(parts)
    lines = [line.rstrip() for line in text.split("\n")]
    while lines and not lines[0]:
        lines.pop(0)
    while lines and not lines[-1]:
        lines.pop()
    return "\n".join(lines)


def _base_name(env_id: str) -> str:
    return env_id.split("/")[-1].split("-v")[0]


def _rng_seed(*parts: Any) -> int:
    return zlib.crc32("/".join(str(p) for p in parts).encode())


class GymTextEnv(DiscreteActionEnv):
    """A Gymnasium env with a text rendering (see the module docstring)."""

    def __init__(
        self,
        env_id: str = "FrozenLake-v1",
        env_kwargs: dict[str, Any] | None = None,
        action_names: Sequence[str] | None = None,
        instructions: str = "",
        success_when: str = "auto",
        max_actions_per_turn: int = 5,
        max_steps: int = 100,
        format_penalty: float = 0.1,
        tool_timeout_s: float = 10.0,
    ) -> None:
        del tool_timeout_s  # actions are not tool calls; accepted for a uniform constructor
        if success_when not in SUCCESS_RULES:
            raise ValueError(
                f"success_when must be one of {', '.join(SUCCESS_RULES)}, got {success_when!r}"
            )
        if success_when == "auto":  # the documented rule per env (module docstring)
            terminal = _base_name(env_id) in SUCCESS_ON_TERMINATION
            success_when = "terminated" if terminal else "reward"
        self.env_id = env_id
        self.env_kwargs = dict(env_kwargs or {})
        self.instructions = instructions
        self.success_when = success_when
        self.colour_meanings = COLOUR_MEANINGS.get(_base_name(env_id), {})
        self.gym = self._make(self.env_kwargs)  # fail at construction, not mid-rollout
        n = int(self.gym.action_space.n)
        names = list(action_names) if action_names else None
        names = names or list(ACTION_NAMES.get(_base_name(env_id), [str(i) for i in range(n)]))
        if len(names) != n:
            raise GymTextError(f"{env_id} has {n} actions but {len(names)} action names were given")
        super().__init__(names, max_actions_per_turn, max_steps, format_penalty)
        self.last_reward = 0.0
        self.last_info: dict[str, Any] = {}
        self.observation: Any = None
        self._text = ""
        self._gym_done = False

    def _make(self, env_kwargs: dict[str, Any]) -> Any:
        return make_gym_env(self.env_id, env_kwargs)

    # -- hooks ----------------------------------------------------------------------------
    def system_prompt(self) -> str:
        listed = ", ".join(f"{name} ({i})" for i, name in enumerate(self.action_names))
        example = f" {ACTION_SEP} ".join(self.action_names[:2])
        parts = [
            f"You are acting in the Gymnasium environment {self.env_id}.",
            self.instructions,
            f"Actions (by name or number): {listed}. Each turn, write up to "
            f"{self.max_actions_per_turn} actions separated by ||, like "
            f"<action>{example}</action>. A highlighted cell is shown in [brackets], a "
            "coloured one as [text:what its colour means].",
        ]
        return "\n".join(part for part in parts if part)

    def _new_episode(self, task: Task, seed: int) -> None:
        env_seed = int(task.fields.get("env_seed", 0))
        self.observation, _ = self.gym.reset(seed=env_seed)
        # The task fixes the start; the (group-shared) reset seed drives the transitions.
        rng, _ = _gymnasium().utils.seeding.np_random(_rng_seed(env_seed, seed))
        self.gym.unwrapped.np_random = rng
        self.last_reward, self.last_info, self._gym_done = 0.0, {}, False
        self._text = self._render()

    def _apply(self, index: int) -> tuple[float, bool, bool]:
        obs, reward, terminated, truncated, info = self.gym.step(index)
        self.observation, self.last_reward, self.last_info = obs, float(reward), dict(info)
        self._gym_done = bool(terminated or truncated)
        self._text = self._render()
        return float(reward), bool(terminated), bool(truncated)

    def _success(self) -> bool:
        if "is_success" in self.last_info:
            return bool(self.last_info["is_success"])
        return self.success_when == "terminated" or self.last_reward > 0

    def _render(self) -> str:
        return ansi_to_text(self.gym.render(), self.colour_meanings)

    def state_text(self) -> str:
        return self._text

    def anchor_key(self) -> Hashable:
        """The rendering without the toy-text "(LastAction)" line: the state, not the path."""
        lines = self._text.split("\n")
        if lines and _LAST_ACTION.match(lines[0]):
            lines = lines[1:]
        return "\n".join(lines)


def make_gym_text_tasks(
    split: Split,
    n: int,
    seed: int = 0,
    *,
    env_id: str = "FrozenLake-v1",
    env_kwargs: dict[str, Any] | None = None,
) -> list[Task]:
    """`n` tasks of a Gymnasium env: each an `env_seed` for its reset (train seeds even, eval
    seeds odd: disjoint), the prompt its first rendering. There is no gold answer (the reward
    comes from the env): `answers` holds "" so an `<answer>` (giving up) can be scored."""
    if split not in ("train", "eval"):
        raise ValueError(f"split must be 'train' or 'eval', got {split!r}")
    env = make_gym_env(env_id, env_kwargs)
    try:
        tasks = []
        for i in range(n):
            env_seed = seed * TASK_SEED_STRIDE + 2 * i + (split == "eval")
            env.reset(seed=env_seed)
            tasks.append(
                Task(
                    task_id=f"{_base_name(env_id).lower()}-{split}-{seed}-{i}",
                    prompt=ansi_to_text(env.render(), COLOUR_MEANINGS.get(_base_name(env_id))),
                    answers=[""],
                    fields={"env_seed": env_seed},
                )
            )
        return tasks
    finally:
        env.close()


# ---------------------------------------------------------------------------------------------
# FrozenLake, as RAGEN renders and generates it
# ---------------------------------------------------------------------------------------------

FROZEN_ACTIONS = ACTION_NAMES["FrozenLake"]
FROZEN_DELTAS: tuple[Cell, ...] = ((0, -1), (1, 0), (0, 1), (-1, 0))  # Left, Down, Right, Up
FROZEN_PROMPT = (
    "You are solving the FrozenLake puzzle. Avoid the holes and walk to the goal. The ice may "
    "be slippery: you may move in an unintended direction.\n"
    "Symbols: P player, _ frozen ice, O hole, G goal, X player in a hole, √ player on the goal.\n"
    "Each turn, write up to {k} moves (Left, Down, Right, Up) separated by ||, like "
    "<action>Left || Up</action>."
)


def lake_distances(desc: Sequence[str]) -> dict[Cell, int]:
    """Moves from each cell to the goal avoiding holes (BFS from the goal); unreachable cells
    and holes are absent."""
    rows, cols = len(desc), len(desc[0])
    goal = next((r, c) for r in range(rows) for c in range(cols) if desc[r][c] == "G")
    dist = {goal: 0}
    queue = deque([goal])
    while queue:
        r, c = queue.popleft()
        for dr, dc in FROZEN_DELTAS:
            nxt = (r + dr, c + dc)
            inside = 0 <= nxt[0] < rows and 0 <= nxt[1] < cols
            if inside and nxt not in dist and desc[nxt[0]][nxt[1]] != "H":
                dist[nxt] = dist[(r, c)] + 1
                queue.append(nxt)
    return dist


def lake_path(desc: Sequence[str]) -> list[int]:
    """A shortest non-slippery path from S to G as action indices (fixed move order)."""
    dist = lake_distances(desc)
    rows, cols = len(desc), len(desc[0])
    cell = next((r, c) for r in range(rows) for c in range(cols) if desc[r][c] == "S")
    if cell not in dist:
        raise ValueError("the goal is unreachable from the start")
    path = []
    while dist[cell]:
        for action, (dr, dc) in enumerate(FROZEN_DELTAS):
            nxt = (cell[0] + dr, cell[1] + dc)
            if dist.get(nxt, -1) == dist[cell] - 1:
                path.append(action)
                cell = nxt
                break
    return path


def random_lake(rng: random.Random, size: int = 4, p: float = 0.8) -> list[str]:
    """A `size` x `size` map: each cell frozen with probability `p`, else a hole; a random
    start and a different random goal (as RAGEN's generator); redrawn until solvable."""
    while True:
        grid = [["F" if rng.random() < p else "H" for _ in range(size)] for _ in range(size)]
        cells = [(r, c) for r in range(size) for c in range(size)]
        (sr, sc), (gr, gc) = rng.sample(cells, 2)
        grid[sr][sc], grid[gr][gc] = "S", "G"
        desc = ["".join(row) for row in grid]
        if (sr, sc) in lake_distances(desc):
            return desc


def render_lake(desc: Sequence[str], position: Cell) -> str:
    """RAGEN's FrozenLake grid (see the module docstring)."""
    symbols = {"F": "_", "S": "_", "H": "O", "G": "G"}
    rows = []
    for r, row in enumerate(desc):
        cells = []
        for c, ch in enumerate(row):
            if (r, c) == position:
                cells.append({"H": "X", "G": "√"}.get(ch, "P"))
            else:
                cells.append(symbols[ch])
        rows.append("".join(cells))
    return "\n".join(rows)


def make_frozenlake_tasks(
    split: Split, n: int, seed: int = 0, *, size: int = 4, p: float = 0.8
) -> list[Task]:
    """`n` distinct FrozenLake maps for `split` (train and eval disjoint by a hash). Each task:
    `fields = {"desc": rows, "env_seed"}`, `answers` = a shortest non-slippery path."""
    if split not in ("train", "eval"):
        raise ValueError(f"split must be 'train' or 'eval', got {split!r}")
    rng = random.Random(f"frozenlake/{split}/{seed}/{size}/{p}")
    tasks: list[Task] = []
    seen: set[str] = set()
    for _ in range(200 * n + 1000):
        if len(tasks) == n:
            return tasks
        desc = random_lake(rng, size, p)
        key = "/".join(desc)
        if key in seen or split_of(key) != split:
            continue
        seen.add(key)
        start = next((r, row.index("S")) for r, row in enumerate(desc) if "S" in row)
        tasks.append(
            Task(
                task_id=f"frozenlake-{split}-{seed}-{len(tasks)}",
                prompt=render_lake(desc, start),
                answers=[" ".join(FROZEN_ACTIONS[a] for a in lake_path(desc))],
                fields={"desc": desc, "env_seed": _rng_seed("frozenlake", key)},
            )
        )
    raise RuntimeError(f"could not generate {n} distinct {split} FrozenLake maps of size {size}")


class FrozenLakeEnv(GymTextEnv):
    """RAGEN's FrozenLake over Gymnasium's (see the module docstring)."""

    # The map rows: a task-file row needs it (envs/base.py).
    task_fields = ("desc",)

    def __init__(
        self,
        is_slippery: bool = True,
        success_rate: float = 1.0 / 3.0,
        max_actions_per_turn: int = 5,
        max_steps: int = 10,
        format_penalty: float = 0.1,
        tool_timeout_s: float = 10.0,
    ) -> None:
        self.is_slippery = is_slippery
        self.success_rate = success_rate
        self._desc: list[str] = []
        env_kwargs: dict[str, Any] = {"is_slippery": is_slippery}
        if abs(success_rate - 1.0 / 3.0) > 1e-12:  # older Gymnasium lacks it (1/3 is fixed)
            env_kwargs["success_rate"] = success_rate
        super().__init__(
            env_id="FrozenLake-v1",
            env_kwargs=env_kwargs,
            max_actions_per_turn=max_actions_per_turn,
            max_steps=max_steps,
            format_penalty=format_penalty,
            tool_timeout_s=tool_timeout_s,
        )

    def system_prompt(self) -> str:
        return FROZEN_PROMPT.format(k=self.max_actions_per_turn)

    def _new_episode(self, task: Task, seed: int) -> None:
        desc = [str(row) for row in task.fields["desc"]]
        if desc != self._desc:
            self.gym.close()
            self.gym = self._make({**self.env_kwargs, "desc": desc})
            self._desc = desc
        super()._new_episode(task, seed)

    @property
    def position(self) -> Cell:
        state = int(self.gym.unwrapped.s)
        cols = len(self._desc[0])
        return state // cols, state % cols

    def _render(self) -> str:
        return render_lake(self._desc, self.position)

    def anchor_key(self) -> Hashable:
        return self._text

    def _success(self) -> bool:
        r, c = self.position
        return self._desc[r][c] == "G"

    def expert_turn(self) -> str:
        """The oracle's next moves (see the module docstring), planned on a copy of the env."""
        if self.done:
            return self.expert_text([])
        dist = lake_distances(self._desc)
        sim = copy.deepcopy(self.gym)
        cols = len(self._desc[0])
        plan: list[int] = []
        for _ in range(self.expert_budget()):
            here = int(sim.unwrapped.s)
            best, best_dist, best_env = 0, None, None
            for action in range(len(FROZEN_ACTIONS)):
                trial = copy.deepcopy(sim)
                state = int(trial.step(action)[0])
                d = dist.get((state // cols, state % cols))
                if d is not None and (best_dist is None or d < best_dist):
                    best, best_dist, best_env = action, d, trial
            plan.append(best)
            if best_env is None or best_dist == 0:
                break
            if best_dist >= dist.get((here // cols, here % cols), 0):
                break  # no draw helps now: stop the turn here and look again next turn
            sim = best_env
        return self.expert_text(plan)
