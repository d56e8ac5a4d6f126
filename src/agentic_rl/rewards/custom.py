"""The user's own reward function (`env.reward_fn: "my_pkg.rewards:my_fn"` or
`"path/to/rewards.py:my_fn"`), TRL-shaped:

    def my_fn(completions: list[str], answers: list[list[str]], **kwargs) -> list[float]: ...

It is called once per batch of finished episodes (training rollouts, evaluation and expert
demonstrations alike) with, as lists of one entry per episode: `completions` (the episode's
text after the prompt, model turns and observations, as the model saw it), `prompts` (the
tasks' prompts), `answers` (their gold answers), `task_id`, and every key of the tasks'
`fields` (None where a task lacks it), as TRL passes dataset columns. With
`env.reward_mode=replace` its value becomes the episode's reward; with "add" it is added to the
env's reward. Metrics such as `success` still come from the env.
"""

from __future__ import annotations

import importlib.util
import math
import sys
from collections.abc import Callable, Sequence
from functools import cache
from importlib import import_module
from pathlib import Path
from types import ModuleType
from typing import Any

from agentic_rl.errors import UserInputError
from agentic_rl.types import Task, Trajectory

REWARD_MODES = ("replace", "add")
# The keyword arguments the trainer fills; a task field of the same name is not passed.
FILLED = ("completions", "prompts", "answers", "task_id")


class RewardFnError(UserInputError, ValueError):
    """The reward function cannot be imported, or returned something unusable."""


def _import_file(path: Path) -> ModuleType:
    name = f"agentic_rl_user_reward_{abs(hash(str(path.resolve())))}"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load {path} as a Python module")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[name]
        raise
    return module


@cache
def load_reward_fn(spec: str) -> Callable[..., Sequence[float]]:
    """The function named by "package.module:function" (imported) or "path/to/file.py:function"
    (loaded from the file); a dotted attribute path after the colon works too."""
    module_name, sep, attr = spec.rpartition(":")
    if not sep or not module_name or not attr:
        raise RewardFnError(
            f"reward function {spec!r} must be written 'package.module:function' or "
            "'path/to/file.py:function'"
        )
    from_file = module_name.endswith(".py")
    if from_file and not Path(module_name).is_file():
        raise RewardFnError(f"reward function {spec!r}: file {module_name} not found")
    try:
        obj: Any = _import_file(Path(module_name)) if from_file else import_module(module_name)
    except Exception as err:
        hint = (
            ""
            if from_file or not isinstance(err, ModuleNotFoundError)
            else " (install your package, put it on PYTHONPATH, or name a file: 'path.py:fn')"
        )
        raise RewardFnError(
            f"reward function {spec!r}: cannot import {module_name!r} "
            f"({type(err).__name__}: {err}){hint}"
        ) from err
    for part in attr.split("."):
        if not hasattr(obj, part):
            raise RewardFnError(f"reward function {spec!r}: {module_name} has no {attr!r}")
        obj = getattr(obj, part)
    if not callable(obj):
        kind = type(obj).__name__
        article = "an" if kind[0] in "aeiou" else "a"
        raise RewardFnError(f"reward function {spec!r} is not callable ({article} {kind})")
    return obj  # type: ignore[no-any-return]


def reward_kwargs(completions: list[str], tasks: list[Task]) -> dict[str, list[Any]]:
    """The keyword arguments of one call: the fixed columns, then every task field."""
    columns: dict[str, list[Any]] = {
        "completions": list(completions),
        "prompts": [task.prompt for task in tasks],
        "answers": [list(task.answers) for task in tasks],
        "task_id": [task.task_id for task in tasks],
    }
    keys = sorted({key for task in tasks for key in task.fields} - set(FILLED))
    for key in keys:
        columns[key] = [task.fields.get(key) for task in tasks]
    return columns


def score(spec: str, completions: list[str], tasks: list[Task]) -> list[float]:
    """The reward function's values for `completions` of `tasks` (checked: one finite number
    per completion)."""
    fn = load_reward_fn(spec)
    if not completions:
        return []
    values = fn(**reward_kwargs(completions, tasks))
    try:
        rewards = [float(v) for v in values]
    except (TypeError, ValueError) as err:
        raise RewardFnError(
            f"reward function {spec!r} must return a list of numbers, got {values!r:.200}"
        ) from err
    if len(rewards) != len(completions):
        raise RewardFnError(
            f"reward function {spec!r} returned {len(rewards)} rewards for "
            f"{len(completions)} completions"
        )
    bad = [r for r in rewards if not math.isfinite(r)]
    if bad:
        raise RewardFnError(f"reward function {spec!r} returned non-finite rewards: {bad[:5]}")
    return rewards


def apply_reward_fn(
    spec: str, mode: str, tasks: list[Task], episodes: list[list[Trajectory]]
) -> None:
    """Set each episode's reward (on every sample of it) from the reward function, in place:
    `mode` "replace" or "add" (to the env's reward). The completion of an episode is the text
    of its last sample (the whole episode in episode mode)."""
    if mode not in REWARD_MODES:
        raise RewardFnError(f"reward mode {mode!r} is not one of {', '.join(REWARD_MODES)}")
    rewards = score(spec, [samples[-1].completion_text for samples in episodes], tasks)
    for samples, value in zip(episodes, rewards, strict=True):
        total = value if mode == "replace" else samples[0].reward + value
        for sample in samples:
            sample.reward = total
