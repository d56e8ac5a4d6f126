"""The env registry: env name -> env class (`ENVS`) and -> task generator (`TASKS`).

The one source of truth for which envs exist: config validation, the trainer, `agentic-rl
check-env` and the Ray env workers all read it. Three ways in:

- the built-in envs, listed below;
- `register_env(name, EnvClass, make_tasks)` in the user's own script (in-process only);
- installed plugins: a package declares an entry point in the group `agentic_rl.envs`, named
  after the env, whose value loads an `EnvEntry(env, tasks)` (or a plain `(env, tasks)` pair):

      [project.entry-points."agentic_rl.envs"]
      dictionary = "my_pkg.envs:DICTIONARY"      # DICTIONARY = EnvEntry(DictionaryEnv, make_tasks)

  Plugins are discovered once, when the registry is first consulted (only the entry points'
  names are read then); each is imported the first time its env is used. A plugin that fails
  to import, loads something else, or takes the name of an env that already exists raises
  `PluginError` naming the entry point and its distribution.

A task generator is `make_tasks(split, n, seed, **options) -> list[Task]` with split "train"
or "eval". A recipe passes env-specific settings through `env.options`: each key goes to the env
constructor and/or to the task generator's keyword-only parameter of the same name
(`split_options`). An env class that sets `anchor_states = True` promises that its observations
carry `Observation.anchor` (the state GiGPO groups steps on).

Read the registry through the functions here (`env_names`, `env_class`, `task_generator`,
`make_env`...), not the dicts: they load plugins first.
"""

from __future__ import annotations

import importlib.metadata
import inspect
from collections.abc import Callable
from typing import Any, NamedTuple

from agentic_rl.config.parse import ConfigError
from agentic_rl.envs.base import Env
from agentic_rl.envs.benchmarks.alfworld import ALFWorldEnv, make_alfworld_tasks
from agentic_rl.envs.benchmarks.bfcl import BFCLEnv
from agentic_rl.envs.benchmarks.bfcl_data import make_bfcl_multi_turn_tasks, make_bfcl_tasks
from agentic_rl.envs.benchmarks.bfcl_multi_turn import BFCLMultiTurnEnv
from agentic_rl.envs.benchmarks.scienceworld import ScienceWorldEnv, make_scienceworld_tasks
from agentic_rl.envs.benchmarks.textworld_express import (
    TextWorldExpressEnv,
    make_textworld_express_tasks,
)
from agentic_rl.envs.benchmarks.webshop import OfficialWebShopEnv, make_webshop_official_tasks
from agentic_rl.envs.browser.miniwob import MiniWoBEnv
from agentic_rl.envs.browser.suite import make_miniwob_tasks
from agentic_rl.envs.code.repair import CodeRepairEnv, make_code_repair_tasks
from agentic_rl.envs.code.self_play import CodeSelfPlayEnv, make_self_play_tasks
from agentic_rl.envs.embodied.manipulation import ManipulationEnv, make_manipulation_tasks
from agentic_rl.envs.embodied.navigation import NavigationEnv, make_vln_tasks
from agentic_rl.envs.games.bandit import BanditEnv, make_bandit_tasks
from agentic_rl.envs.games.blocksworld import BlocksworldEnv, make_blocksworld_tasks
from agentic_rl.envs.games.countdown import CountdownEnv, make_countdown_tasks
from agentic_rl.envs.games.gridworld import GridWorldEnv, make_gridworld_tasks
from agentic_rl.envs.games.gym_text import (
    FrozenLakeEnv,
    GymTextEnv,
    make_frozenlake_tasks,
    make_gym_text_tasks,
)
from agentic_rl.envs.games.sokoban import SokobanEnv, make_sokoban_tasks
from agentic_rl.envs.math.artist import MultiToolMathEnv
from agentic_rl.envs.math.calculator import CalculatorEnv, make_calculator_tasks
from agentic_rl.envs.math.interpreter import MathToolEnv, TextOnlyMathEnv
from agentic_rl.envs.math.problems import make_math_tasks
from agentic_rl.envs.memory.dialogues import make_dialogue_tasks
from agentic_rl.envs.memory.long_qa import make_long_qa_tasks
from agentic_rl.envs.memory.memagent import MemAgentEnv
from agentic_rl.envs.memory.memory_r1 import MemoryR1Env
from agentic_rl.envs.memory.rmm import RMMEnv, make_rmm_tasks
from agentic_rl.envs.multiagent.debate import DebateEnv
from agentic_rl.envs.multiagent.planner_executor import PlannerExecutorEnv
from agentic_rl.envs.multiagent.solver_verifier import SolverVerifierEnv
from agentic_rl.envs.search.multihop import MultiHopQAEnv, make_multihop_tasks
from agentic_rl.envs.search.single_hop import SearchQAEnv, make_search_qa_tasks
from agentic_rl.envs.search.web_qa import WebQAEnv
from agentic_rl.envs.search.zerosearch import ZeroSearchQAEnv
from agentic_rl.envs.vision.image_planning import ImagePlanningEnv, make_image_planning_tasks
from agentic_rl.envs.vision.reasoning import VisualReasoningEnv, make_visual_reasoning_tasks
from agentic_rl.envs.vision.scenes import (
    VisualGridEnv,
    VisualQAEnv,
    make_visual_grid_tasks,
    make_visual_qa_tasks,
)
from agentic_rl.envs.vision.visual_tools import VisualToolsEnv, make_visual_tool_tasks
from agentic_rl.envs.worlds.household import HouseholdEnv, make_household_tasks
from agentic_rl.envs.worlds.household_knowledge import HouseholdKnowledgeEnv
from agentic_rl.envs.worlds.webshop import WebShopEnv
from agentic_rl.envs.worlds.webshop_catalogue import make_webshop_tasks
from agentic_rl.types import Task

ENTRY_POINT_GROUP = "agentic_rl.envs"

ENVS: dict[str, type] = {
    "calculator": CalculatorEnv,
    "search_qa": SearchQAEnv,
    "gridworld": GridWorldEnv,
    "visual_qa": VisualQAEnv,
    "visual_grid": VisualGridEnv,
    "image_planning": ImagePlanningEnv,
    "visual_tools": VisualToolsEnv,
    "visual_reasoning": VisualReasoningEnv,
    "multihop_qa": MultiHopQAEnv,
    "zerosearch_qa": ZeroSearchQAEnv,
    "web_qa": WebQAEnv,
    "math_tool": MathToolEnv,
    "math_text": TextOnlyMathEnv,
    "math_multitool": MultiToolMathEnv,
    "code_repair": CodeRepairEnv,
    "code_self_play": CodeSelfPlayEnv,
    "sokoban": SokobanEnv,
    "frozenlake": FrozenLakeEnv,
    "gym_text": GymTextEnv,
    "bandit": BanditEnv,
    "countdown": CountdownEnv,
    "household": HouseholdEnv,
    "household_knowledge": HouseholdKnowledgeEnv,
    "webshop": WebShopEnv,
    "miniwob": MiniWoBEnv,
    "vln": NavigationEnv,
    "manipulation": ManipulationEnv,
    "blocksworld": BlocksworldEnv,
    "memagent": MemAgentEnv,
    "memory_r1": MemoryR1Env,
    "rmm": RMMEnv,
    "bfcl": BFCLEnv,
    "bfcl_multi_turn": BFCLMultiTurnEnv,
    "scienceworld": ScienceWorldEnv,
    "textworld_express": TextWorldExpressEnv,
    "alfworld": ALFWorldEnv,
    "webshop_official": OfficialWebShopEnv,
    "planner_executor": PlannerExecutorEnv,
    "solver_verifier": SolverVerifierEnv,
    "debate": DebateEnv,
}
TASKS: dict[str, Callable[..., list[Task]]] = {
    "calculator": make_calculator_tasks,
    "search_qa": make_search_qa_tasks,
    "gridworld": make_gridworld_tasks,
    "visual_qa": make_visual_qa_tasks,
    "visual_grid": make_visual_grid_tasks,
    "image_planning": make_image_planning_tasks,
    "visual_tools": make_visual_tool_tasks,
    "visual_reasoning": make_visual_reasoning_tasks,
    "multihop_qa": make_multihop_tasks,
    "zerosearch_qa": make_multihop_tasks,
    "web_qa": make_multihop_tasks,
    "math_tool": make_math_tasks,
    "math_text": make_math_tasks,
    "math_multitool": make_math_tasks,
    "code_repair": make_code_repair_tasks,
    "code_self_play": make_self_play_tasks,
    "sokoban": make_sokoban_tasks,
    "frozenlake": make_frozenlake_tasks,
    "gym_text": make_gym_text_tasks,
    "bandit": make_bandit_tasks,
    "countdown": make_countdown_tasks,
    "household": make_household_tasks,
    "household_knowledge": make_household_tasks,
    "webshop": make_webshop_tasks,
    "miniwob": make_miniwob_tasks,
    "vln": make_vln_tasks,
    "manipulation": make_manipulation_tasks,
    "blocksworld": make_blocksworld_tasks,
    "memagent": make_long_qa_tasks,
    "memory_r1": make_dialogue_tasks,
    "rmm": make_rmm_tasks,
    "bfcl": make_bfcl_tasks,
    "bfcl_multi_turn": make_bfcl_multi_turn_tasks,
    "scienceworld": make_scienceworld_tasks,
    "textworld_express": make_textworld_express_tasks,
    "alfworld": make_alfworld_tasks,
    "webshop_official": make_webshop_official_tasks,
    "planner_executor": make_multihop_tasks,
    "solver_verifier": make_calculator_tasks,
    "debate": make_calculator_tasks,
}
# Parameters the trainer fills itself; `env.options` may not set them.
RESERVED = ("split", "n", "seed", "self")


class EnvEntry(NamedTuple):
    """What an `agentic_rl.envs` entry point loads: the env class and its task generator."""

    env: type
    tasks: Callable[..., list[Task]]


class PluginError(ConfigError):
    """An env plugin (entry point) that cannot be used; the message names it."""


# Plugins discovered but not imported yet: env name -> entry point. None = not discovered yet.
_pending: dict[str, importlib.metadata.EntryPoint] | None = None


def _describe(ep: importlib.metadata.EntryPoint) -> str:
    dist = getattr(ep, "dist", None)
    where = f" from distribution '{dist.name}'" if dist is not None else ""
    return f"env plugin '{ep.name}' (entry point {ep.value!r} in group {ENTRY_POINT_GROUP}{where})"


def _discover() -> dict[str, importlib.metadata.EntryPoint]:
    """The plugins' entry points by env name, read once (names only: nothing is imported)."""
    global _pending
    if _pending is None:
        found: dict[str, importlib.metadata.EntryPoint] = {}
        for ep in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP):
            if ep.name in ENVS:
                raise PluginError(f"{_describe(ep)} takes the name of an existing env: rename it")
            if ep.name in found:
                raise PluginError(
                    f"{_describe(ep)} and {_describe(found[ep.name])} register the same env name"
                )
            found[ep.name] = ep
        _pending = found
    return _pending


def _load_plugin(name: str) -> None:
    ep = _discover().get(name)
    if ep is None:
        return
    try:
        loaded = ep.load()
    except Exception as err:
        raise PluginError(f"{_describe(ep)} failed to load: {type(err).__name__}: {err}") from err
    try:
        env, tasks = loaded
    except (TypeError, ValueError):
        raise PluginError(
            f"{_describe(ep)} must load an EnvEntry(env, tasks) (or an (env class, task "
            f"generator) pair), got {type(loaded).__name__}"
        ) from None
    try:
        _check_entry(name, env, tasks)
    except (TypeError, ValueError) as err:
        raise PluginError(f"{_describe(ep)}: {err}") from None
    del _discover()[name]
    ENVS[name], TASKS[name] = env, tasks


def _check_entry(name: str, env: Any, tasks: Any) -> None:
    if not isinstance(name, str) or not name.isidentifier():
        raise ValueError(f"env name {name!r} must be a Python identifier (e.g. 'my_env')")
    if not inspect.isclass(env):
        raise TypeError(f"the env must be a class, got {type(env).__name__}")
    for method in ("reset", "step"):
        if not callable(getattr(env, method, None)):
            raise TypeError(f"env class {env.__name__} has no {method}() method")
    if not callable(tasks):
        raise TypeError(f"the task generator must be callable, got {type(tasks).__name__}")
    params = inspect.signature(tasks).parameters
    positional = [
        p for p in params.values() if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)
    ]
    if len(positional) < 3 and not any(p.kind == p.VAR_POSITIONAL for p in params.values()):
        raise TypeError(
            f"task generator {getattr(tasks, '__name__', tasks)!r} must take "
            "(split, n, seed, **options)"
        )


def register_env(
    name: str, env: type, tasks: Callable[..., list[Task]], replace: bool = False
) -> None:
    """Make `name` usable as `env.name` in this process: `env` is the env class, `tasks` its
    task generator `(split, n, seed, **options) -> list[Task]`. An existing name (built-in or
    plugin) is an error unless `replace`. Processes started elsewhere (Ray env workers) do not
    see it: register those envs through an entry point."""
    _check_entry(name, env, tasks)
    if not replace and (name in ENVS or name in _discover()):
        raise ValueError(f"env {name!r} is already registered (pass replace=True to replace it)")
    _discover().pop(name, None)
    ENVS[name], TASKS[name] = env, tasks


def env_names() -> list[str]:
    """Every env name: built-in, registered and installed plugins (not imported by this)."""
    return sorted(set(ENVS) | set(_discover()))


def _require(name: str) -> None:
    _load_plugin(name)
    if name not in ENVS or name not in TASKS:
        raise ValueError(f"unknown env {name!r}; valid names: {', '.join(env_names())}")


def env_class(name: str) -> type:
    """The env class registered as `name` (a plugin is imported on first use)."""
    _require(name)
    return ENVS[name]


def task_generator(name: str) -> Callable[..., list[Task]]:
    """The task generator registered as `name`."""
    _require(name)
    return TASKS[name]


def has_anchor_states(name: str) -> bool:
    """Whether env `name` declares `anchor_states = True` (observations carry an anchor)."""
    return bool(getattr(env_class(name), "anchor_states", False))


def anchored_env_names() -> list[str]:
    """Loaded envs (built-in and registered) that declare anchor states."""
    return sorted(name for name, cls in ENVS.items() if getattr(cls, "anchor_states", False))


def _parameters(fn: Callable[..., Any]) -> set[str]:
    return {
        name
        for name, p in inspect.signature(fn).parameters.items()
        if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY) and name not in RESERVED
    }


def env_parameters(name: str) -> set[str]:
    """Constructor keyword arguments the env `name` accepts."""
    return _parameters(env_class(name).__init__)


def task_parameters(name: str) -> set[str]:
    """Keyword arguments (beyond split, n, seed) the task generator of `name` accepts."""
    return _parameters(task_generator(name))


def split_options(name: str, options: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """(env kwargs, task kwargs) from `env.options`; a key both accept goes to both, so the
    tasks and the env agree (e.g. `num_entities`). Unknown keys raise ValueError naming them."""
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


def task_fields(name: str) -> tuple[str, ...]:
    """The `Task.fields` keys env `name` reads from every task (its class's `task_fields`,
    default none): a row of a user's task file must carry each as a column (task_files.py)."""
    return tuple(getattr(env_class(name), "task_fields", ()))


def make_env(name: str, **kwargs: Any) -> Env:
    """Build the env called `name` with constructor `kwargs`."""
    return env_class(name)(**kwargs)  # type: ignore[no-any-return]
