"""check_env must catch broken envs, naming the failed check."""

import random

import pytest

from agentic_rl.envs.base import ToolEnv, has_expert
from agentic_rl.envs.check import EnvCheckError, check_env
from agentic_rl.envs.math.calculator import CalculatorEnv, make_calculator_tasks
from agentic_rl.types import Observation, Task

TASKS = make_calculator_tasks("eval", 3, seed=0)


class NeverRight(CalculatorEnv):
    def score_answer(self, text: str) -> float:
        return 0.0


class Flaky(CalculatorEnv):
    def user_prompt(self, task):
        return f"{task.prompt} (id {random.random()})"


class PrefersWrong(CalculatorEnv):
    def score_answer(self, text: str) -> float:
        return 0.0 if text == self.task.answers[0] else 0.5


class SilentExpert(CalculatorEnv):
    def expert_turn(self) -> str:
        return f"<calc>{self.task.fields['expression']}</calc>"


class AssistantLast(CalculatorEnv):
    def reset(self, task, seed):
        first = super().reset(task, seed)
        return Observation(messages=[*first.messages, {"role": "assistant", "content": "Hi"}])


class BadToolSchema(CalculatorEnv):
    def __init__(self):
        super().__init__()
        self.tools[0].parameters = {"expression": "string"}


@pytest.mark.parametrize(
    ("env_class", "failed_check"),
    [
        (NeverRight, "expert succeeds"),
        (Flaky, "reset determinism"),
        (PrefersWrong, "gold answer scores >= a wrong one"),
        (SilentExpert, "expert terminates"),
        (AssistantLast, "last reset message is from the user"),
        (BadToolSchema, "tool parameters"),
    ],
)
def test_check_env_names_the_failed_check(env_class, failed_check):
    with pytest.raises(EnvCheckError, match=f"check_env: {failed_check} failed"):
        check_env(env_class(), TASKS)


def test_check_env_needs_tasks():
    with pytest.raises(EnvCheckError, match="tasks given"):
        check_env(CalculatorEnv(), [])


class NoExpert(ToolEnv):
    """A ToolEnv that never implements expert_turn (it is optional)."""

    def __init__(self):
        super().__init__(CalculatorEnv().tools)

    def score_answer(self, text: str) -> float:
        return float(text == self.task.answers[0])


class PlainNoExpert:
    """Not a ToolEnv at all: reset/step only, no expert_turn attribute."""

    def __init__(self):
        self.inner = NoExpert()
        self.tools = self.inner.tools

    def reset(self, task, seed):
        return self.inner.reset(task, seed)

    def step(self, action):
        return self.inner.step(action)


@pytest.mark.parametrize("env_class", [NoExpert, PlainNoExpert])
def test_check_env_skips_the_expert_check_for_envs_without_one(env_class):
    assert not has_expert(env_class) and not has_expert(env_class())
    skipped = check_env(env_class(), TASKS)
    assert skipped == ["expert succeeds (the env has no expert_turn)"]
    assert has_expert(CalculatorEnv) and check_env(CalculatorEnv(), TASKS) == []


def test_other_checks_still_run_without_an_expert():
    class NoExpertNeverRight(NoExpert):
        def score_answer(self, text: str) -> float:
            return 0.0 if text == self.task.answers[0] else 0.5

    with pytest.raises(EnvCheckError, match="gold answer scores >= a wrong one"):
        check_env(NoExpertNeverRight(), TASKS)


def test_an_expert_cut_off_by_the_step_limit_is_an_env_check_error():
    """A level longer than the env's step limit truncates the expert's episode: check_env says
    so (it used to step on and die with 'step() called after the episode terminated')."""
    from agentic_rl.envs.games.sokoban import SokobanEnv, level_task
    from agentic_rl.envs.games.sokoban_levels import parse_xsb, solve

    level = parse_xsb("#########\n#@$    .#\n#########")
    task = level_task(level, "long", solve(level))
    with pytest.raises(EnvCheckError, match=r"expert succeeds failed: long: the episode was trunc"):
        check_env(SokobanEnv(max_actions_per_turn=2, max_steps=4), [task])
    assert check_env(SokobanEnv(max_steps=5), [task]) == []


def test_an_exception_inside_the_env_is_reported_as_an_env_check_error():
    class Broken(ToolEnv):
        def __init__(self) -> None:
            super().__init__([])

        def user_prompt(self, task: Task) -> str:
            return task.fields["context"]  # a task without it: KeyError in reset

    with pytest.raises(EnvCheckError, match=r"reset failed: t0: the env raised KeyError") as info:
        check_env(Broken(), [Task(task_id="t0", prompt="q", answers=["a"])])
    assert isinstance(info.value.__cause__, KeyError)
