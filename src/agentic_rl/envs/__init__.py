"""Environments: the protocol, `check_env`, and the built-in envs and task generators.

Envs and task generators are chosen by name from the plain dicts below (no registry). A recipe
passes env-specific settings through `env.options`: each key goes to the env constructor and/or
to the task generator's keyword-only parameter of the same name (see `split_options`).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

from agentic_rl.envs.artist import MultiToolMathEnv
from agentic_rl.envs.base import Env, EnvCheckError, ToolEnv, check_env
from agentic_rl.envs.calculator import CalculatorEnv, make_calculator_tasks
from agentic_rl.envs.code_repair import CodeRepairEnv, make_code_repair_tasks
from agentic_rl.envs.code_self_play import CodeSelfPlayEnv, make_self_play_tasks
from agentic_rl.envs.gridworld import GridWorldEnv, make_gridworld_tasks
from agentic_rl.envs.math_tasks import make_math_tasks
from agentic_rl.envs.math_tool import MathToolEnv, TextOnlyMathEnv
from agentic_rl.envs.multihop import MultiHopQAEnv, make_multihop_tasks
from agentic_rl.envs.search_qa import SearchQAEnv, make_search_qa_tasks
from agentic_rl.envs.web_qa import WebQAEnv
from agentic_rl.envs.zerosearch import ZeroSearchQAEnv

ENVS: dict[str, type] = {
    "calculator": CalculatorEnv,
    "search_qa": SearchQAEnv,
    "gridworld": GridWorldEnv,
    "multihop_qa": MultiHopQAEnv,
    "zerosearch_qa": ZeroSearchQAEnv,
    "web_qa": WebQAEnv,
    "math_tool": MathToolEnv,
    "math_text": TextOnlyMathEnv,
    "math_multitool": MultiToolMathEnv,
    "code_repair": CodeRepairEnv,
    "code_self_play": CodeSelfPlayEnv,
}
TASKS: dict[str, Callable[..., list]] = {
    "calculator": make_calculator_tasks,
    "search_qa": make_search_qa_tasks,
    "gridworld": make_gridworld_tasks,
    "multihop_qa": make_multihop_tasks,
    "zerosearch_qa": make_multihop_tasks,
    "web_qa": make_multihop_tasks,
    "math_tool": make_math_tasks,
    "math_text": make_math_tasks,
    "math_multitool": make_math_tasks,
    "code_repair": make_code_repair_tasks,
    "code_self_play": make_self_play_tasks,
}
# Parameters the trainer fills itself; `env.options` may not set them.
RESERVED = ("split", "n", "seed", "self")


def _parameters(fn: Callable[..., Any]) -> set[str]:
    return {
        name
        for name, p in inspect.signature(fn).parameters.items()
        if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY) and name not in RESERVED
    }


def env_parameters(name: str) -> set[str]:
    """Constructor keyword arguments the env `name` accepts."""
    return _parameters(ENVS[name].__init__)


def task_parameters(name: str) -> set[str]:
    """Keyword arguments (beyond split, n, seed) the task generator of `name` accepts."""
    return _parameters(TASKS[name])


def split_options(name: str, options: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """(env kwargs, task kwargs) from `env.options`; a key both accept goes to both, so the
    tasks and the env agree (e.g. `num_entities`). Unknown keys raise ValueError naming them."""
    if name not in ENVS:
        raise ValueError(f"unknown env {name!r}; valid names: {', '.join(sorted(ENVS))}")
    env_keys, task_keys = env_parameters(name), task_parameters(name)
    unknown = sorted(set(options) - env_keys - task_keys)
    if unknown:
        raise ValueError(
            f"env.options has {', '.join(unknown)}, which env {name!r} does not take "
            f"(valid: {', '.join(sorted(env_keys | task_keys))})"
        )
    return (
        {k: v for k, v in options.items() if k in env_keys},
        {k: v for k, v in options.items() if k in task_keys},
    )


def make_env(name: str, **kwargs: Any) -> Env:
    """Build the env called `name` with constructor `kwargs`."""
    if name not in ENVS:
        raise ValueError(f"unknown env {name!r}; valid names: {', '.join(sorted(ENVS))}")
    return ENVS[name](**kwargs)


__all__ = [
    "ENVS",
    "TASKS",
    "CalculatorEnv",
    "CodeRepairEnv",
    "CodeSelfPlayEnv",
    "Env",
    "EnvCheckError",
    "GridWorldEnv",
    "MathToolEnv",
    "MultiHopQAEnv",
    "MultiToolMathEnv",
    "SearchQAEnv",
    "TextOnlyMathEnv",
    "ToolEnv",
    "WebQAEnv",
    "ZeroSearchQAEnv",
    "check_env",
    "env_parameters",
    "make_calculator_tasks",
    "make_code_repair_tasks",
    "make_env",
    "make_gridworld_tasks",
    "make_math_tasks",
    "make_multihop_tasks",
    "make_search_qa_tasks",
    "make_self_play_tasks",
    "split_options",
    "task_parameters",
]
