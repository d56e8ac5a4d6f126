"""ScienceWorld (Wang et al. 2022, arXiv 2203.07540) as an env: the benchmark's own simulator,
tasks, splits, gold paths and score.

Everything comes from the PyPI package `scienceworld` (extra `agentic-rl[scienceworld]`): the
Scala simulator jar and its task list ship in the wheel; it needs a Java runtime (jvm.py). The
simulator runs in one JVM per process, one simulator object per env (jvm.py).

Tasks: the benchmark's 30 task types (`benchmark_task_types`, from the package's tasks.json: IDs 1-1 to
10-2 over matter, measurement, electricity, classification, biology, chemistry, forces and
genetics), each with its variations, which the benchmark itself splits into train / dev / test
(`variation_splits`, asked from the simulator). The task generator's "train" split draws from
the train variations; "eval" reads `eval_fold` (dev by default; test for the numbers you
report). `task_types` chooses the task types (names or IDs, default all 30), `simplifications`
the benchmark's simplifications (`teleportAction`, `openDoors`, `selfWateringFlowerPots`,
`noElectricalAction`, `openContainers`, or `easy`; "" = none, the paper's main setting).

One episode: the first observation is the task description, the hallway as "look around" shows
it, the inventory and the simulator's action templates; the agent writes free-text commands
(`<action>open door to kitchen</action>`), each sent to the simulator as the benchmark's own
agents send them (one move each; an ambiguous command gets the simulator's numbered choices and
the agent answers with the number). Reward: the change of the benchmark's score (0-100) each
command caused, times `reward_scale` (default 0.01: an episode's return is its score / 100,
less the few points some tasks give for the opening "look around").
The score of a failed task (the simulator's score < 0, e.g. focusing on the wrong object) counts
0, as the benchmark's own average does ("clip negative scores to 0"). `env/score` is the score in
points (the metric: its mean over the eval split is the benchmark's average score); success =
the task completed with score 100. `max_steps` (default 100, the benchmark's `envStepLimit`)
counts the commands the agent sent, which includes commands the simulator did not understand
(it does not count those as moves). `valid_actions` shows the simulator's valid action-object
combinations after each observation (-1 all, N the N shortest; 0, the default, none:
there are hundreds, and computing them is ~70 ms a step, ~60 times a plain step).

The scripted expert is the benchmark's gold action sequence (the simulator's
`getGoldActionSequence`, generated only when asked: up to a minute for the genetics tasks);
asked mid-episode, the simulator reloads the task with its gold path and replays the episode's
commands (every load of a variation is the same: the JVM runs with constant identity hashes,
jvm.py).

The package's Python class is not used: it starts a JVM per instance and computes the valid
actions at every step; this module makes the same calls on the simulator object it wraps
(`load`, `reset`, `step("look around")`, `step`, `getScore`, `getCompleted`, the free actions,
`getValidActionObjectCombinations`, `getGoldActionSequence`, `getVariationsTrain/Dev/Test`).
"""

from __future__ import annotations

import functools
import random
from collections.abc import Hashable, Sequence
from typing import Any, Literal

from agentic_rl.envs.benchmarks import jvm
from agentic_rl.envs.benchmarks.text_game import JvmTextGame, take_in_turns
from agentic_rl.types import Task

Fold = Literal["train", "dev", "test"]
SIMPLIFICATIONS = (
    "teleportAction",
    "openDoors",
    "selfWateringFlowerPots",
    "noElectricalAction",
    "openContainers",
    "easy",
)
FULL_SCORE = 100
UNKNOWN_REPLY = "No known action matches that input."

SYSTEM_PROMPT = (
    "You are an agent in ScienceWorld, a text world of rooms, objects and substances, and must "
    "complete a science task. Each turn, write up to {k} commands separated by ||, like "
    "<action>open door to kitchen</action>. A command fills a template with the names of "
    "objects you see (OBJ), e.g. go to kitchen, pick up thermometer, move metal pot to stove. "
    "'focus on OBJ' marks the object the task is about: focusing on a wrong one fails the task."
)


def _package() -> Any:
    jvm.import_package("scienceworld", "scienceworld")
    import scienceworld.constants as constants

    return constants


@functools.cache
def benchmark_task_types() -> tuple[dict[str, str], ...]:
    """The benchmark's task types, in its order: dicts with task_id ("1-1"), topic, task (the
    paper's name) and task_name (the simulator's)."""
    return tuple(dict(t) for t in _package().TASKS)


def resolve_task_type(name: str) -> str:
    """The simulator's task name for a task name, ID ("4-1") or the paper's name
    ("Matter Changes of State (Boiling)"), or ValueError listing the valid ones."""
    types = benchmark_task_types()
    text = str(name).strip()
    for t in types:
        if text in (t["task_name"], t["task_id"], f"{t['topic']} {t['task']}"):
            return t["task_name"]
    valid = ", ".join(f"{t['task_id']} {t['task_name']}" for t in types)
    raise ValueError(f"unknown ScienceWorld task type {text!r}; valid: {valid}")


def parse_task_types(task_types_option: str | Sequence[str]) -> list[str]:
    """`task_types` as given (a list, or one comma-separated string; "all" = all 30)."""
    items = (
        [s for s in task_types_option.split(",") if s.strip()]
        if isinstance(task_types_option, str)
        else list(task_types_option)
    )
    if not items:
        raise ValueError("task_types is empty: name at least one task type (or 'all')")
    if [str(s).strip() for s in items] == ["all"]:
        return [t["task_name"] for t in benchmark_task_types()]
    names = [resolve_task_type(s) for s in items]
    if len(set(names)) < len(names):
        raise ValueError(f"task_types names a task type twice: {items}")
    return names


def check_simplifications(simplifications: str, task_names: Sequence[str]) -> str:
    """The simplification string, checked as the package checks it (ValueError otherwise)."""
    parts = [s.strip() for s in simplifications.split(",") if s.strip()]
    for part in parts:
        if part not in SIMPLIFICATIONS:
            raise ValueError(
                f"unknown ScienceWorld simplification {part!r}; valid: {', '.join(SIMPLIFICATIONS)}"
            )
    if "noElectricalAction" in parts:
        electrical = [n for n in task_names if "power-component" in n or "conductivity" in n]
        if electrical:
            raise ValueError(
                f"simplification noElectricalAction removes the actions task type "
                f"{electrical[0]} needs (electrical tasks); drop it or the task type"
            )
    return ",".join(parts)


def new_simulator() -> Any:
    """A fresh simulator object in this process's ScienceWorld JVM."""
    constants = _package()
    gateway = jvm.jvm(constants.JAR_PATH, jvm.DETERMINISTIC_HASHES)
    return jvm.call(
        "start a ScienceWorld simulator",
        lambda: gateway.jvm.scienceworld.runtime.pythonapi.PythonInterface(),
    )


@functools.cache
def variation_splits(task_name: str) -> dict[str, tuple[int, ...]]:
    """The benchmark's own train / dev / test variations of a task type (from the simulator)."""
    sim = new_simulator()

    def ask() -> dict[str, tuple[int, ...]]:
        sim.load(task_name, 0, "", False)
        return {
            "train": tuple(sim.getVariationsTrain()),
            "dev": tuple(sim.getVariationsDev()),
            "test": tuple(sim.getVariationsTest()),
        }

    return jvm.call(f"ScienceWorld variations of {task_name}", ask)


def make_scienceworld_tasks(
    split: str,
    n: int,
    seed: int = 0,
    *,
    task_types: str | Sequence[str] = "all",
    eval_fold: str = "dev",
    simplifications: str = "",
) -> list[Task]:
    """`n` (task type, variation) pairs: "train" from the benchmark's train variations (a
    seeded shuffle per task type), "eval" from its `eval_fold` ("dev" or "test") in the
    benchmark's order; the task types take turns, so each is represented. Raises ValueError
    when the chosen task types have fewer than `n` variations in that fold."""
    if split not in ("train", "eval"):
        raise ValueError(f"split must be 'train' or 'eval', got {split!r}")
    if eval_fold not in ("dev", "test"):
        raise ValueError(f"eval_fold must be 'dev' or 'test', got {eval_fold!r}")
    names = parse_task_types(task_types)
    simplifications = check_simplifications(simplifications, names)
    fold = "train" if split == "train" else eval_fold
    queues = []
    for name in names:
        variations = list(variation_splits(name)[fold])
        if split == "train":
            random.Random(f"scienceworld/{seed}/{name}").shuffle(variations)
        queues.append([(name, v) for v in variations])
    available = sum(len(q) for q in queues)
    if n > available:
        raise ValueError(
            f"{n} {split} tasks asked, but the {len(names)} task type(s) have {available} "
            f"{fold} variations: lower the number of tasks or add task types"
        )
    picked = take_in_turns(queues, n)
    info = {t["task_name"]: t for t in benchmark_task_types()}
    return [
        Task(
            task_id=f"scienceworld/{name}/{fold}/{variation}",
            prompt=(
                f"ScienceWorld {info[name]['task_id']} {info[name]['topic']}: "
                f"{info[name]['task']}, variation {variation} ({fold})"
            ),
            fields={
                "task_name": name,
                "variation": variation,
                "fold": fold,
                "simplifications": simplifications,
            },
        )
        for name, variation in picked
    ]


class ScienceWorldEnv(JvmTextGame):
    """ScienceWorld's science tasks, scored 0-100 by the benchmark (see the module doc)."""

    system_text = SYSTEM_PROMPT
    subset_field = "task_name"  # env/score@<task_name>, env/success@<task_name>
    loaded: tuple[str, int, str, bool] | None  # (task, variation, simplifications, gold)

    def __init__(
        self,
        max_actions_per_turn: int = 1,
        max_steps: int = 100,
        format_penalty: float = 0.1,
        valid_actions: int = 0,
        reward_scale: float = 1.0 / FULL_SCORE,
        tool_timeout_s: float = 10.0,
    ) -> None:
        del tool_timeout_s  # commands are not tool calls; accepted for a uniform constructor
        super().__init__(
            max_actions_per_turn, max_steps, format_penalty, valid_actions, reward_scale
        )
        _package()
        self.raw_score = 0  # the simulator's score (negative once the task failed)

    def _gateway(self) -> Any:
        return jvm.jvm(_package().JAR_PATH, jvm.DETERMINISTIC_HASHES)

    def _new_simulator(self) -> Any:
        return new_simulator()

    def _load(self, task: Task, gold: bool) -> str:
        """Load (if needed) and reset the task's variation; returns the opening observation."""
        sim = self._simulator()
        fields = task.fields
        key = (fields["task_name"], int(fields["variation"]), fields.get("simplifications", ""))

        def load() -> str:
            if self.loaded is None or self.loaded[:3] != key or (gold and not self.loaded[3]):
                sim.load(*key, gold)
                self.loaded = (*key, gold)
            sim.reset()
            return str(sim.step("look around"))  # the package's reset makes this first move

        return jvm.call(f"ScienceWorld {task.task_id}", load)

    def _read_score(self) -> None:
        sim = self.sim
        self.raw_score = int(round(FULL_SCORE * sim.getScore()))
        completed = bool(sim.getCompleted())
        self.score = float(max(self.raw_score, 0))
        self.finished = completed or self.raw_score < 0
        self.won = completed and self.raw_score >= FULL_SCORE

    def _start(self, task: Task) -> tuple[str, str]:
        look = self._load(task, gold=False)

        def read() -> tuple[str, str, str, list[str]]:
            self._read_score()
            return (
                str(self.sim.getTaskDescription()),
                str(self.sim.freeActionInventory()),
                look,
                list(self.sim.getPossibleActions()),
            )

        goal, inventory, look, templates = jvm.call(f"ScienceWorld {task.task_id}", read)
        intro = (
            f"Task: {goal}\n{look.strip()}\n{inventory.strip()}\n"
            f"Action templates: {', '.join(templates)}."
        )
        return goal, intro

    def _send(self, command: str) -> tuple[str, bool]:
        def send() -> str:
            reply = str(self.sim.step(command))
            self._read_score()
            return reply

        reply = jvm.call(f"ScienceWorld command {command!r}", send)
        return reply, reply.strip() != UNKNOWN_REPLY

    def _valid(self) -> list[str]:
        return jvm.call(
            "ScienceWorld valid actions", lambda: list(self.sim.getValidActionObjectCombinations())
        )

    def _gold_path(self) -> list[str]:
        assert self.task is not None
        self._load(self.task, gold=True)

        def replay() -> list[str]:
            for command in self.executed:
                self.sim.step(command)
            self._read_score()
            return [str(a) for a in self.sim.getGoldActionSequence()]

        return jvm.call(f"ScienceWorld gold path of {self.task.task_id}", replay)

    def anchor_key(self) -> Hashable:
        """The simulator's room description and inventory (free actions: no move), their lines
        sorted: the same state reached by two paths may list its objects in another order."""
        look, inventory = jvm.call(
            "ScienceWorld state",
            lambda: (str(self.sim.freeActionLook()), str(self.sim.freeActionInventory())),
        )
        return tuple("\n".join(sorted(text.splitlines())) for text in (look, inventory))
