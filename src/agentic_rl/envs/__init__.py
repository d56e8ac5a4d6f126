"""Environments: the protocol, `check_env`, and the built-in envs and task generators.

Envs and task generators are chosen by name from the plain dicts below (no registry).
"""

from __future__ import annotations

from typing import Any

from agentic_rl.envs.base import Env, EnvCheckError, ToolEnv, check_env
from agentic_rl.envs.calculator import CalculatorEnv, make_calculator_tasks
from agentic_rl.envs.gridworld import GridWorldEnv, make_gridworld_tasks
from agentic_rl.envs.search_qa import SearchQAEnv, make_search_qa_tasks

ENVS: dict[str, type] = {
    "calculator": CalculatorEnv,
    "search_qa": SearchQAEnv,
    "gridworld": GridWorldEnv,
}
TASKS = {
    "calculator": make_calculator_tasks,
    "search_qa": make_search_qa_tasks,
    "gridworld": make_gridworld_tasks,
}


def make_env(name: str, **kwargs: Any) -> Env:
    """Build the env called `name` with constructor `kwargs`."""
    if name not in ENVS:
        raise ValueError(f"unknown env {name!r}; valid names: {', '.join(sorted(ENVS))}")
    return ENVS[name](**kwargs)


__all__ = [
    "ENVS",
    "TASKS",
    "CalculatorEnv",
    "Env",
    "EnvCheckError",
    "GridWorldEnv",
    "SearchQAEnv",
    "ToolEnv",
    "check_env",
    "make_calculator_tasks",
    "make_env",
    "make_gridworld_tasks",
    "make_search_qa_tasks",
]
