"""The env registry: one source of truth for config validation and the trainer; envs added in
process (`register_env`) and by installed packages (`agentic_rl.envs` entry points)."""

from __future__ import annotations

import importlib.metadata
import sys

import pytest

from agentic_rl.config.load import load_config
from agentic_rl.config.parse import ConfigError
from agentic_rl.envs import registry
from agentic_rl.envs.base import ToolEnv
from agentic_rl.envs.games.gridworld import GridWorldEnv
from agentic_rl.envs.registry import (
    ENVS,
    TASKS,
    EnvEntry,
    PluginError,
    anchored_env_names,
    env_class,
    env_names,
    has_anchor_states,
    make_env,
    register_env,
    split_options,
    task_generator,
)
from agentic_rl.logging import read_metrics
from agentic_rl.train.loop import train
from agentic_rl.types import Task

RECIPE = "calculator_grpo"
NO_EXPERT = ["warm_start.num_tasks=0"]  # the envs below have no scripted expert

# An env from outside the package: no tools, no scripted expert, a task option of its own.
PLUGIN_SOURCE = """
from agentic_rl.envs.base import ToolEnv
from agentic_rl.envs.registry import EnvEntry
from agentic_rl.rewards.qa import exact_match
from agentic_rl.types import Task


class EchoEnv(ToolEnv):
    def __init__(self, format_penalty: float = 0.1, tool_timeout_s: float = 10.0) -> None:
        super().__init__([], format_penalty=format_penalty, tool_timeout_s=tool_timeout_s)

    def system_prompt(self) -> str:
        return "Repeat the word you are given as <answer>word</answer>."

    def score_answer(self, text: str) -> float:
        return exact_match(text, self.task.answers)


def make_echo_tasks(split, n, seed=0, *, word="hello"):
    return [Task(f"{split}-{i}", f"The word is {word}{i}.", [f"{word}{i}"]) for i in range(n)]


ECHO = EnvEntry(EchoEnv, make_echo_tasks)
"""


@pytest.fixture
def fresh(monkeypatch):
    """A registry that has not discovered plugins yet; changes are undone after the test."""
    monkeypatch.setattr(registry, "_pending", None)
    monkeypatch.setattr(registry, "ENVS", dict(registry.ENVS))
    monkeypatch.setattr(registry, "TASKS", dict(registry.TASKS))
    return registry


def install_plugin(root, monkeypatch, package, entry_points, source=PLUGIN_SOURCE):
    """A package with a dist-info folder (as pip would install it) on sys.path."""
    (root / package).mkdir(parents=True)
    (root / package / "__init__.py").write_text(source)
    dist = root / f"{package}-0.1.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {package}\nVersion: 0.1\n")
    lines = "".join(f"{name} = {value}\n" for name, value in entry_points.items())
    (dist / "entry_points.txt").write_text(f"[agentic_rl.envs]\n{lines}")
    monkeypatch.syspath_prepend(str(root))


def fake_entry_points(monkeypatch, **points):
    eps = [
        importlib.metadata.EntryPoint(name, value, registry.ENTRY_POINT_GROUP)
        for name, value in points.items()
    ]

    def entry_points(group=None):
        return [ep for ep in eps if ep.group == group]

    monkeypatch.setattr(importlib.metadata, "entry_points", entry_points)


class Dummy(ToolEnv):
    def __init__(self, format_penalty: float = 0.1) -> None:
        super().__init__([], format_penalty=format_penalty)


def dummy_tasks(split, n, seed=0):
    return [Task(f"{split}-{i}", "say x", ["x"]) for i in range(n)]


def test_builtin_envs_and_lookups():
    assert set(ENVS) == set(TASKS)
    assert {"search_qa", "calculator", "gridworld"} <= set(env_names())
    assert env_class("gridworld") is GridWorldEnv
    assert task_generator("calculator") is TASKS["calculator"]
    assert has_anchor_states("gridworld") and not has_anchor_states("search_qa")
    anchored = anchored_env_names()  # declared by the class: anchor_states = True
    assert "gridworld" in anchored and "search_qa" not in anchored
    assert all(getattr(ENVS[name], "anchor_states", False) for name in anchored)
    with pytest.raises(ValueError, match="unknown env 'chess'; valid names: .*search_qa"):
        make_env("chess")


def test_register_env_makes_the_name_valid_in_config(fresh):
    with pytest.raises(ConfigError, match="env.name: 'dummy' is not one of"):
        load_config(RECIPE, ["env.name=dummy"])
    register_env("dummy", Dummy, dummy_tasks)
    cfg = load_config(RECIPE, [*NO_EXPERT, "env.name=dummy", "env.options={format_penalty: 0.5}"])
    assert "dummy" in env_names()
    assert split_options("dummy", cfg.env.options) == ({"format_penalty": 0.5}, {})
    assert make_env("dummy", format_penalty=0.5).format_penalty == 0.5
    with pytest.raises(ValueError, match="already registered"):
        register_env("dummy", Dummy, dummy_tasks)
    with pytest.raises(ValueError, match="already registered"):
        register_env("search_qa", Dummy, dummy_tasks)
    register_env("dummy", Dummy, dummy_tasks, replace=True)
    with pytest.raises(TypeError, match="must take \\(split, n, seed"):
        register_env("other", Dummy, lambda split: [])
    with pytest.raises(TypeError, match="has no reset"):
        register_env("other", object, dummy_tasks)


def test_gigpo_reads_anchor_states_from_the_env_class(fresh):
    step = ["algo.name=gigpo", "rollout.mode=step"]
    register_env("dummy", Dummy, dummy_tasks)
    with pytest.raises(ConfigError, match="env.name=dummy does not expose.*anchors: .*gridworld"):
        load_config(RECIPE, [*NO_EXPERT, "env.name=dummy", *step])

    class Anchored(Dummy):
        anchor_states = True

    register_env("anchored", Anchored, dummy_tasks)
    assert load_config(RECIPE, [*NO_EXPERT, "env.name=anchored", *step]).env.name == "anchored"


def test_plugins_are_discovered_once_and_imported_on_first_use(fresh, tmp_path, monkeypatch):
    install_plugin(tmp_path, monkeypatch, "echo_plugin_a", {"echo_a": "echo_plugin_a:ECHO"})
    assert "echo_a" in env_names()
    assert "echo_plugin_a" not in sys.modules  # listing names imports nothing
    env = make_env("echo_a")
    assert type(env).__name__ == "EchoEnv" and "echo_plugin_a" in sys.modules
    assert registry.ENVS["echo_a"] is type(env)
    tasks = task_generator("echo_a")("eval", 2, 0, word="hi")
    assert [t.answers for t in tasks] == [["hi0"], ["hi1"]]


def test_a_broken_plugin_names_itself(fresh, tmp_path, monkeypatch):
    source = "raise ImportError('no module named numpyy')\n"
    install_plugin(tmp_path, monkeypatch, "broken_plugin", {"broken": "broken_plugin:ECHO"}, source)
    with pytest.raises(PluginError) as err:
        make_env("broken")
    message = str(err.value)
    assert "env plugin 'broken'" in message and "'broken_plugin:ECHO'" in message
    assert "from distribution 'broken_plugin'" in message and "numpyy" in message
    # In a config it is a ConfigError like any other, and other envs still work.
    with pytest.raises(ConfigError, match="env plugin 'broken'.*failed to load"):
        load_config(RECIPE, ["env.name=broken"])
    assert load_config(RECIPE, []).env.name == "calculator"


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        ("agentic_rl.types:Task", "must load an EnvEntry"),
        ("agentic_rl.envs.registry:nothing_here", "failed to load: AttributeError"),
        ("no_such_module_xq:ECHO", "failed to load: ModuleNotFoundError"),
    ],
)
def test_plugin_errors(fresh, monkeypatch, value, problem):
    fake_entry_points(monkeypatch, bad=value)
    with pytest.raises(PluginError, match=f"env plugin 'bad' \\(entry point '{value}'.*{problem}"):
        env_class("bad")


def test_plugin_loading_a_pair_or_a_bad_pair(fresh, monkeypatch):
    monkeypatch.setattr(registry, "GOOD", (Dummy, dummy_tasks), raising=False)
    monkeypatch.setattr(registry, "BAD", (Dummy, 3), raising=False)
    fake_entry_points(
        monkeypatch, good="agentic_rl.envs.registry:GOOD", bad="agentic_rl.envs.registry:BAD"
    )
    assert env_class("good") is Dummy
    with pytest.raises(PluginError, match="'bad'.*task generator must be callable"):
        env_class("bad")


def test_a_plugin_cannot_shadow_an_env(fresh, monkeypatch):
    fake_entry_points(monkeypatch, search_qa="agentic_rl.envs.registry:GOOD")
    with pytest.raises(PluginError, match="env plugin 'search_qa'.*existing env: rename it"):
        env_names()


def test_env_entry_is_a_pair():
    env, tasks = EnvEntry(Dummy, dummy_tasks)
    assert env is Dummy and tasks is dummy_tasks


def test_smoke_training_step_with_an_installed_plugin(fresh, tmp_path, monkeypatch):
    install_plugin(tmp_path / "site", monkeypatch, "echo_plugin_b", {"echo": "echo_plugin_b:ECHO"})
    overrides = [
        "model.name=tiny",
        "env.name=echo",
        "env.options={word: pine}",
        "warm_start.num_tasks=0",  # the echo env has no scripted expert
        "trainer.steps=1",
        "trainer.progress=false",
        f"trainer.out_dir={tmp_path}",
        "trainer.run_name=run",
    ]
    cfg = load_config(RECIPE, overrides, smoke=True)
    summary = train(cfg)
    assert summary["env"] == "echo" and summary["steps"] == 1
    rows = [r for r in read_metrics(tmp_path / "run" / "metrics.jsonl") if "train/reward" in r]
    assert [r["step"] for r in rows] == [1]
    with pytest.raises(ConfigError, match="env.name=echo has none \\(no expert_turn\\)"):
        load_config(RECIPE, [*overrides[:3], "warm_start.num_tasks=4"])
