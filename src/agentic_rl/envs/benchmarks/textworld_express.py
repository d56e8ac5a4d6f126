"""TextWorldExpress (Jansen & Côté 2022, arXiv 2208.01174) as an env: the benchmark's own games,
seeds and splits, valid actions, gold paths and score.

Everything comes from the PyPI package `textworld-express` (extra
`agentic-rl[textworld-express]`): the simulator jar ships in the wheel; it needs a Java runtime
(jvm.py). The simulator runs in one JVM per process, one simulator object per env (jvm.py).

Games (`GAMES`): CookingWorld, TextWorld Commonsense (`twc`), Coin Collector (`coin`), Map
Reader, Arithmetic, Sorting, Simon Says and Pecking Order, each generated from a seed; the
benchmark splits the seeds into train / dev / test folds itself (`seed_folds`, asked from the
simulator: 0-999, 10000-10999 and 20000-20999 here). `games` chooses the games (a list or a
comma-separated string), `game_params` each game's generation parameters in the benchmark's own
syntax, e.g. `{coin: "numLocations=3,includeDoors=0"}` (a game not named there uses its own
defaults: CookingWorld's are 11 rooms); a parameter the simulator rejects is a ValueError with
its message. The task generator's "train" split draws seeds from the train fold (seeded
shuffle), "eval" reads `eval_fold` (dev by default; test for the numbers you report), the games
taking turns.

One episode: the first observation is the task description and the opening observation; the
agent writes commands (`<action>take coin</action>`), each of which must be one of the
simulator's valid actions at that point (listed after every observation unless `valid_actions`
is 0): another command is invalid (format penalty, not sent, like an inadmissible command in
verl-agent's ALFWorld). Reward: the change of the benchmark's score a command caused (the
benchmark's reward; the score reaches 1 when solved, and Arithmetic, Sorting, Simon Says and
Pecking Order set it to -1 when the task fails, e.g. a wrong item in the box, so a mean can be
negative); `env/score` the same change, so its mean over episodes is the benchmark's average
score; success = the simulator's `tasksuccess`. The episode ends when the
score reaches 1 or the simulator reports success or failure; `max_steps` (default 100, the
benchmark's `envStepLimit`) truncates it.

The scripted expert is the benchmark's gold path (`getGoldActionSequence`; asked mid-episode,
the game is regenerated with its gold path and the episode's commands replayed).

The package's Python class is not used (it starts a JVM per instance and asks for the task
description at every step); this module makes the same calls on the simulator object it wraps
(`load`, `generateNewGameJSON`, `stepJSON`, `getGoldActionSequence`, `getSeedsTrain/Dev/Test`).
"""

from __future__ import annotations

import functools
import json
import random
from collections.abc import Hashable, Mapping, Sequence
from typing import Any

from agentic_rl.envs.benchmarks import jvm
from agentic_rl.envs.benchmarks.text_game import JvmTextGame, take_in_turns
from agentic_rl.types import Task

GAMES = (
    "cookingworld",
    "twc",
    "coin",
    "mapreader",
    "arithmetic",
    "sorting",
    "simonsays",
    "peckingorder",
)

SYSTEM_PROMPT = (
    "You are playing a text game and must complete its task. Each turn, write up to {k} "
    "commands from the list of valid actions, separated by ||, like <action>look around</action>."
)


def _package() -> Any:
    jvm.import_package("textworld_express", "textworld-express")
    import textworld_express.constants as constants

    return constants


def new_simulator() -> Any:
    """A fresh simulator object in this process's TextWorldExpress JVM."""
    gateway = jvm.jvm(_package().JAR_PATH)
    return jvm.call(
        "start a TextWorldExpress simulator",
        lambda: gateway.jvm.textworldexpress.runtime.PythonInterface(),
    )


def parse_games(games: str | Sequence[str]) -> list[str]:
    """`games` as given (a list or a comma-separated string), checked against `GAMES`."""
    items = [g.strip() for g in games.split(",")] if isinstance(games, str) else list(games)
    items = [g for g in items if g]
    if not items:
        raise ValueError(f"games is empty: name at least one of {', '.join(GAMES)}")
    for game in items:
        if game not in GAMES:
            raise ValueError(f"unknown TextWorldExpress game {game!r}; valid: {', '.join(GAMES)}")
    if len(set(items)) < len(items):
        raise ValueError(f"games names a game twice: {items}")
    return items


def params_of(game: str, game_params: Mapping[str, Any]) -> str:
    """The generation parameters of `game` ("k=v,k=v"; "" = the game's defaults)."""
    unknown = sorted(set(game_params) - set(GAMES))
    if unknown:
        raise ValueError(
            f"game_params names {unknown[0]!r}, not a TextWorldExpress game ({', '.join(GAMES)})"
        )
    value = game_params.get(game, "")
    if isinstance(value, Mapping):  # {numLocations: 3, includeDoors: 0} in YAML
        value = ",".join(f"{k}={int(v) if isinstance(v, bool) else v}" for k, v in value.items())
    return str(value).replace(" ", "")


@functools.cache
def seed_folds(game: str, params: str) -> dict[str, tuple[int, ...]]:
    """The benchmark's own train / dev / test seeds of `game` with `params`; ValueError with
    the simulator's message when it rejects the game or its parameters."""
    sim = new_simulator()

    def ask() -> tuple[str, dict[str, tuple[int, ...]]]:
        message = str(sim.load(game, params) or "")
        if message:
            return message, {}
        folds = {
            "train": tuple(sim.getSeedsTrain()),
            "dev": tuple(sim.getSeedsDev()),
            "test": tuple(sim.getSeedsTest()),
        }
        return "", folds

    message, folds = jvm.call(f"TextWorldExpress seeds of {game}", ask)
    if message:
        raise ValueError(
            f"TextWorldExpress game {game} with parameters {params!r}: {message.strip()}"
        )
    return folds


def make_textworld_express_tasks(
    split: str,
    n: int,
    seed: int = 0,
    *,
    games: str | Sequence[str] = "coin",
    game_params: Mapping[str, Any] | None = None,
    eval_fold: str = "dev",
) -> list[Task]:
    """`n` (game, seed) pairs: "train" from the benchmark's train seeds (a seeded shuffle per
    game), "eval" from its `eval_fold` ("dev" or "test") in order; the games take turns."""
    if split not in ("train", "eval"):
        raise ValueError(f"split must be 'train' or 'eval', got {split!r}")
    if eval_fold not in ("dev", "test"):
        raise ValueError(f"eval_fold must be 'dev' or 'test', got {eval_fold!r}")
    names = parse_games(games)
    params = {game: params_of(game, game_params or {}) for game in names}
    fold = "train" if split == "train" else eval_fold
    queues = []
    for game in names:
        seeds = list(seed_folds(game, params[game])[fold])
        if split == "train":
            random.Random(f"textworld_express/{seed}/{game}").shuffle(seeds)
        queues.append([(game, s) for s in seeds])
    available = sum(len(q) for q in queues)
    if n > available:
        raise ValueError(f"{n} {split} tasks asked, but the games have {available} {fold} seeds")
    picked = take_in_turns(queues, n)
    return [
        Task(
            task_id=f"textworld_express/{game}/{fold}/{game_seed}",
            prompt=(
                f"TextWorldExpress {game} ({params[game] or 'default parameters'}), "
                f"seed {game_seed} ({fold})"
            ),
            fields={"game": game, "params": params[game], "seed": game_seed, "fold": fold},
        )
        for game, game_seed in picked
    ]


class TextWorldExpressEnv(JvmTextGame):
    """TextWorldExpress games, scored by the benchmark: 1 solved, -1 failed in some games (module doc)."""

    restrict_to_valid = True
    system_text = SYSTEM_PROMPT
    subset_field = "game"  # env/score@<game>, env/success@<game>
    loaded: tuple[str, str] | None  # (game, params)

    def __init__(
        self,
        max_actions_per_turn: int = 1,
        max_steps: int = 100,
        format_penalty: float = 0.1,
        valid_actions: int = -1,
        reward_scale: float = 1.0,
        tool_timeout_s: float = 10.0,
    ) -> None:
        del tool_timeout_s  # commands are not tool calls; accepted for a uniform constructor
        super().__init__(
            max_actions_per_turn, max_steps, format_penalty, valid_actions, reward_scale
        )
        _package()
        self.last: dict[str, Any] = {}  # the simulator's last answer

    def _gateway(self) -> Any:
        return jvm.jvm(_package().JAR_PATH)

    def _new_simulator(self) -> Any:
        return new_simulator()

    def _generate(self, task: Task, gold: bool) -> dict[str, Any]:
        sim = self._simulator()
        fields = task.fields
        key = (str(fields["game"]), str(fields.get("params", "")))

        def generate() -> dict[str, Any]:
            if self.loaded != key:
                message = str(sim.load(*key) or "")
                if message:
                    raise ValueError(f"TextWorldExpress {task.task_id}: {message.strip()}")
                self.loaded = key
            answer = json.loads(sim.generateNewGameJSON(int(fields["seed"]), fields["fold"], gold))
            answer["taskDescription"] = str(sim.getTaskDescription())
            return answer

        return jvm.call(f"TextWorldExpress {task.task_id}", generate)

    def _read(self, answer: dict[str, Any]) -> None:
        self.last = answer
        self.score = float(answer["score"])
        self.won = bool(answer["tasksuccess"])
        self.finished = self.score >= 1.0 or self.won or bool(answer["taskfailure"])

    def _start(self, task: Task) -> tuple[str, str]:
        answer = self._generate(task, gold=False)
        self._read(answer)
        goal = answer["taskDescription"].strip()
        return goal, f"Task: {goal}\n{answer['observation'].strip()}"

    def _send(self, command: str) -> tuple[str, bool]:
        answer = jvm.call(
            f"TextWorldExpress command {command!r}", lambda: json.loads(self.sim.stepJSON(command))
        )
        self._read(answer)
        reply = str(answer["observation"])
        return reply, not reply.startswith("Unknown action")

    def _valid(self) -> list[str]:
        return [str(a) for a in self.last.get("validActions", [])]

    def _gold_path(self) -> list[str]:
        assert self.task is not None
        self._generate(self.task, gold=True)

        def replay() -> tuple[dict[str, Any] | None, list[str]]:
            answer = None
            for command in self.executed:
                answer = json.loads(self.sim.stepJSON(command))
            return answer, [str(a) for a in self.sim.getGoldActionSequence()]

        answer, gold = jvm.call(f"TextWorldExpress gold path of {self.task.task_id}", replay)
        if answer is not None:
            self._read(answer)
        return gold

    def anchor_key(self) -> Hashable:
        """The simulator's view of the room and the inventory."""
        return (str(self.last.get("look", "")), str(self.last.get("inventory", "")))
