"""The base of the benchmarks' text games (ScienceWorld, TextWorldExpress), RAGEN-style turns.

The agent writes commands in `<action>...</action>` (several separated by `||`, at most
`max_actions_per_turn`, each executed in order; envs/discrete.py); the benchmark's simulator
executes each one and keeps the benchmark's own score. What this base adds to
`DiscreteActionEnv`:

- the reward of a command is the change of the benchmark's score it caused, times
  `reward_scale` (the benchmarks' own reward is that change, "reward = Δscore"), so the return
  of an episode is its final score less the score the task opens with (scaled; ScienceWorld
  gives a few points for the opening "look around");
- every step reports `env/score`, the change of the score in the benchmark's own units, so an
  episode's `env/score` (summed by the rollout) is its final score, and an evaluation's mean is
  the benchmark's average score, whatever turn the episode ended on;
- the observation after a turn is each command with the simulator's reply (`> command` then
  the reply); the first one is the task and the opening observation; with `valid_actions` the
  benchmark's valid-action list follows (all, sorted, or the N shortest);
- a command the simulator does not understand counts as an invalid action (metric and
  `format_penalty`), as a command outside the valid list does where the env restricts commands
  to it (TextWorldExpress);
- the scripted expert plays the benchmark's gold action sequence (`expert_turn`) past the
  gold commands the episode has made (`gold_position`, other commands skipped); the benchmarks
  do not re-plan, so after a stray command that changed the world the rest of the sequence may
  no longer solve the task (warm starts play it from the start, where it does);
- the anchor (GiGPO's state) is the simulator's own view of the state (room and inventory).

Subclasses talk to their simulator: `_start` (load the task and reset), `_send` (one command:
returns the reply and updates `score`, `finished`, `won`), `_valid` (the valid actions now),
`_gold_path` and `anchor_key`; `JvmTextGame` holds a simulator that lives in the process's JVM
of a benchmark's jar (jvm.py) and replaces it when that JVM was restarted.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from typing import Any, TypeVar

from agentic_rl.envs.benchmarks import jvm
from agentic_rl.envs.discrete import ACTION_SEP, DiscreteActionEnv
from agentic_rl.envs.worlds.household import normalize_command
from agentic_rl.types import Action, Observation, StepResult, Task

T = TypeVar("T")


def gold_position(executed: Sequence[str], gold: Sequence[str]) -> int:
    """How far the episode got along the gold path: the gold commands it made, in order, with
    its other commands skipped (`executed` [a, x, b], `gold` [a, b, c] -> 2: the expert's next
    command is c). Where the expert goes on."""
    position = 0
    for command in executed:
        if position < len(gold) and command.lower() == gold[position].lower():
            position += 1
    return position


def take_in_turns(queues: Sequence[Sequence[T]], n: int) -> list[T]:
    """The first `n` items of the queues taken in turns: every queue's first item (in queue
    order), then every queue's second, ..., a queue that runs out skipped (queues [a1, a2, a3],
    [b1] -> a1, b1, a2, a3). How the benchmarks pick their tasks so that each task type or game
    is represented; raises ValueError when the queues hold fewer than `n` items."""
    available = sum(len(q) for q in queues)
    if n > available:
        raise ValueError(f"{n} items asked from queues that hold {available}")
    picked: list[T] = []
    depth = 0
    while len(picked) < n:
        picked += [q[depth] for q in queues if depth < len(q)][: n - len(picked)]
        depth += 1
    return picked


class BenchmarkTextGame(DiscreteActionEnv):
    """Base: a benchmark's text game scored by the benchmark itself (see the module doc)."""

    anchor_states = True
    restrict_to_valid = False  # True: only the valid actions parse (others are invalid)
    system_text = ""  # the subclass's system prompt; {k} = max_actions_per_turn
    # The task field naming the task's subset (a task type, a game): each step also reports
    # env/score@<subset> and env/success@<subset>, so an evaluation over several subsets gives
    # each one's mean score and success rate (summary metrics over the episodes that report
    # them, train/summary.py). "" = no per-subset metrics.
    subset_field = ""

    def __init__(
        self,
        max_actions_per_turn: int = 1,
        max_steps: int = 100,
        format_penalty: float = 0.1,
        valid_actions: int = 0,
        reward_scale: float = 1.0,
    ) -> None:
        super().__init__([], max_actions_per_turn, max_steps, format_penalty)
        if valid_actions < -1:
            raise ValueError(
                f"valid_actions must be -1 (all), 0 (none) or N > 0, got {valid_actions}"
            )
        if reward_scale <= 0:
            raise ValueError(f"reward_scale must be > 0, got {reward_scale}")
        self.valid_actions = valid_actions
        self.reward_scale = reward_scale
        self.intro = ""  # the first observation: task and opening text
        self.goal = ""  # the task description, repeated after an invalid turn
        self.executed: list[str] = []  # the commands sent to the simulator this episode
        self.turn_log: list[tuple[str, str]] = []  # (command, reply) of the current turn
        self.unknown = 0  # commands of this turn the simulator did not understand
        self.score = 0.0  # the benchmark's score now, in its units
        self.reported = 0.0  # the score already reported in env/score this episode
        self.won_reported = False  # the success already reported in env/success@<subset>
        self.finished = False  # the simulator ended the episode (solved or failed)
        self.won = False
        self.gold: list[str] | None = None

    # -- hooks for subclasses -------------------------------------------------------------
    def _start(self, task: Task) -> tuple[str, str]:
        """Load `task` into the simulator and reset it; returns (task description, opening
        observation). Sets `score` to the simulator's score after the reset."""
        raise NotImplementedError

    def _send(self, command: str) -> tuple[str, bool]:
        """Execute `command`; returns (the reply, whether the simulator understood it) and
        updates `score`, `finished` and `won`."""
        raise NotImplementedError

    def _valid(self) -> list[str]:
        """The benchmark's valid actions in the current state."""
        raise NotImplementedError

    def _gold_path(self) -> list[str]:
        """The benchmark's gold action sequence for the current task, from its start."""
        raise NotImplementedError

    # -- DiscreteActionEnv hooks ----------------------------------------------------------
    def system_prompt(self) -> str:
        return self.system_text.format(k=self.max_actions_per_turn)

    def _new_episode(self, task: Task, seed: int) -> None:
        del seed  # the benchmark's task (variation / seed) fixes the game
        self.executed, self.turn_log, self.gold = [], [], None
        self.finished = self.won = False
        self.goal, self.intro = self._start(task)
        self.reported = 0.0
        self.won_reported = False
        self._refresh()

    def _refresh(self) -> None:
        shown = self.restrict_to_valid or self.valid_actions != 0
        self.action_names = sorted(set(self._valid())) if shown else []

    def parse_token(self, token: str) -> Any | None:
        command = normalize_command(token)
        if not command:
            return None
        if not self.restrict_to_valid:
            return command
        by_lower = {name.lower(): name for name in self.action_names}
        return by_lower.get(command)

    def _apply(self, command: Any) -> tuple[float, bool, bool]:
        before = self.score
        reply, understood = self._send(str(command))
        self.executed.append(str(command))
        self.turn_log.append((str(command), reply))
        self.unknown += int(not understood)
        if not self.finished:
            self._refresh()
        return (self.score - before) * self.reward_scale, self.finished, False

    def _success(self) -> bool:
        return self.won

    def state_text(self) -> str:
        """The turn's commands and replies (the task and opening text before any command, the
        task again after a turn without one), then the valid actions where shown."""
        if self.turn_log:
            lines = [f"> {command}\n{reply.strip()}" for command, reply in self.turn_log]
        elif not self.executed:
            lines = [self.intro]
        else:
            lines = [f"Task: {self.goal}"]
        shown = self.action_names
        if self.valid_actions > 0:  # the shortest ones: "go to kitchen" before "connect a to b"
            shown = sorted(shown, key=lambda a: (len(a), a))[: self.valid_actions]
        if shown and not self.finished:
            more = len(self.action_names) - len(shown)
            tail = f" (and {more} more)" if more > 0 else ""
            lines.append(f"Valid actions: {', '.join(shown)}{tail}.")
        return "\n".join(lines)

    # -- the protocol ---------------------------------------------------------------------
    def reset(self, task: Task, seed: int) -> Observation:
        self.turn_log, self.unknown = [], 0
        return super().reset(task, seed)

    def step(self, action: Action) -> StepResult:
        self.turn_log, self.unknown = [], 0
        result = super().step(action)
        if self.unknown and "invalid_action" not in result.info:
            result.reward -= self.format_penalty  # a command the simulator did not understand
            result.info["invalid_action"] = 1
        result.info["env/score"] = self.score - self.reported
        subset = self.task.fields.get(self.subset_field) if self.subset_field else None
        if subset:  # per-step deltas: their sums over the episode are its score and success
            result.info[f"env/score@{subset}"] = result.info["env/score"]
            result.info[f"env/success@{subset}"] = float(self.won) - float(self.won_reported)
            self.won_reported = self.won
        self.reported = self.score
        return result

    def _invalid(self, why: str) -> StepResult:
        example = "look around" if not self.action_names else self.action_names[0]
        message = (
            f"Invalid action: {why}. Write a command like <action>{example}</action> (up to "
            f"{self.max_actions_per_turn} a turn, separated by {ACTION_SEP}).\n{self.state_text()}"
        )
        return StepResult(
            Observation(content=message, name="error", anchor=self.anchor_key()),
            -self.format_penalty,
            info={"invalid_action": 1},
        )

    def expert_turn(self) -> str:
        """The next commands of the benchmark's gold action sequence (see the module doc)."""
        assert self.task is not None, "expert_turn() before reset()"
        if self.done:
            return "<answer>done</answer>"
        if self.gold is None:
            self.gold = self._gold_path()
        position = gold_position(self.executed, self.gold)
        plan = self.gold[position : position + self.expert_budget()]
        if not plan:
            raise RuntimeError(
                f"{self.task.task_id}: the gold action sequence ({len(self.gold)} commands) is "
                "played out but the episode goes on"
            )
        return f"<action>{f' {ACTION_SEP} '.join(plan)}</action>"

    @property
    def expert_turn_limit(self) -> int:
        """check_env's turn budget for the expert: a gold path takes up to `max_steps`
        commands, one or more a turn (the benchmarks' gold paths run to 100 and more)."""
        return self.max_steps

    def anchor_key(self) -> Hashable:
        raise NotImplementedError


class JvmTextGame(BenchmarkTextGame):
    """Base: a benchmark text game whose simulator is an object in the process's JVM of the
    benchmark's jar (jvm.py): ScienceWorld, TextWorldExpress.

    Each env keeps its simulator (`sim`) with the JVM's gateway it lives in (`sim_gateway`)
    and what it loaded into it (`loaded`, the subclass's key; None = nothing). Why here, once:
    a JVM that died is replaced by the next `jvm.jvm` call, and a simulator of the dead one
    would fail every call, so `_simulator` makes a new one, with nothing loaded, whenever the
    gateway changed. Subclasses give `_gateway` and `_new_simulator`.
    """

    def __init__(
        self,
        max_actions_per_turn: int,
        max_steps: int,
        format_penalty: float,
        valid_actions: int,
        reward_scale: float,
    ) -> None:
        super().__init__(
            max_actions_per_turn, max_steps, format_penalty, valid_actions, reward_scale
        )
        jvm.require_java()  # fail where the env is built, not at the first reset
        self.sim: Any = None
        self.sim_gateway: Any = None
        self.loaded: Any = None

    def _gateway(self) -> Any:
        """The process's JVM (py4j gateway) of the benchmark's jar, started on first use."""
        raise NotImplementedError

    def _new_simulator(self) -> Any:
        """A fresh simulator object in that JVM."""
        raise NotImplementedError

    def _simulator(self) -> Any:
        gateway = self._gateway()
        if self.sim is None or self.sim_gateway is not gateway:  # first use, or a new JVM
            self.sim, self.sim_gateway, self.loaded = self._new_simulator(), gateway, None
        return self.sim
