"""`check_env`: a Gymnasium-style checker of the env contract (`envs/base.py`).

It plays an env the way the rollout will (reset, invalid and tool actions, the gold answer, the
scripted expert and its mistake, replay of an action prefix) and reports the first broken promise as
an `EnvCheckError` that names the check and the task.
"""

from __future__ import annotations

import math
import re
from typing import Any

from agentic_rl.envs.base import (
    VALID_ROLES,
    Env,
    has_expert,
    has_expert_mistake,
    is_branchable,
    task_has_expert,
)
from agentic_rl.errors import UserInputError
from agentic_rl.tools.base import Tool
from agentic_rl.types import Action, Observation, StepResult, Task


class EnvCheckError(UserInputError):
    """Raised by `check_env`; the message names the failed check."""


_TAG = re.compile(r"<([A-Za-z_][\w\-]*)>(.*?)</\1>", re.DOTALL)
_SAMPLE_VALUES = {"string": "1", "integer": 1, "number": 1.0, "boolean": True}


def _require(condition: bool, check: str, detail: str = "") -> None:
    if not condition:
        raise EnvCheckError(f"check_env: {check} failed" + (f": {detail}" if detail else ""))


def _main_parameter(tool: Tool) -> str:
    """The argument an inline `<name>text</name>` call fills: the first required property."""
    schema = tool.parameters
    names = list(schema.get("required") or schema.get("properties", {}))
    return names[0] if names else "input"


def _parse_expert(text: str, tools: dict[str, Tool]) -> Action:
    # A tiny local parser on purpose: check_env must not depend on the rollout's parsers.
    # A leading <think>...</think> is the expert's thought, not its action.
    match = next((m for m in _TAG.finditer(text) if m.group(1) != "think"), None)
    if match is None:
        return Action(kind="none", raw=text)
    name, argument = match.group(1), match.group(2).strip()
    if name == "answer":
        return Action(kind="answer", text=argument, raw=text)
    if name in tools:
        arguments = {_main_parameter(tools[name]): argument}
        return Action(kind="tool", name=name, arguments=arguments, raw=text)
    return Action(kind="invalid", error=f"unknown tag <{name}>", raw=text)


def _sample_arguments(tool: Tool) -> dict[str, Any]:
    properties = tool.parameters.get("properties", {})
    return {
        key: _SAMPLE_VALUES.get(properties.get(key, {}).get("type", "string"), "1")
        for key in tool.parameters.get("required", [])
    }


def _check_tools(env: Env) -> None:
    for tool in env.tools:
        name = getattr(tool, "name", None)
        _require(isinstance(name, str) and bool(name), "tool name", repr(tool))
        _require(
            isinstance(getattr(tool, "description", None), str) and bool(tool.description),
            "tool description",
            name,
        )
        params = getattr(tool, "parameters", None)
        _require(
            isinstance(params, dict) and params.get("type") == "object",
            "tool parameters",
            f"{name}: parameters must be a JSON schema with type 'object'",
        )


def _check_reset(env: Env, task: Task, seed: int) -> None:
    first = env.reset(task, seed)
    _require(isinstance(first, Observation), "reset returns Observation", type(first).__name__)
    _require(bool(first.messages), "reset messages non-empty", task.task_id)
    for message in first.messages:
        _require(message.get("role") in VALID_ROLES, "message roles", repr(message.get("role")))
        _require(isinstance(message.get("content"), str), "message content is str")
    _require(first.messages[-1]["role"] == "user", "last reset message is from the user")
    second = env.reset(task, seed)
    _require(first == second, "reset determinism", f"two resets with seed {seed} differ")


def _check_steps(env: Env, task: Task, seed: int) -> None:
    env.reset(task, seed)
    result = env.step(Action(kind="invalid", error="check_env test"))
    _require(result.observation is not None, "invalid action gives an observation")
    _require(result.observation.name == "error", "invalid action observation name is 'error'")
    _require(not result.terminated, "invalid action does not terminate")
    for tool in env.tools:
        env.reset(task, seed)
        action = Action(kind="tool", name=tool.name, arguments=_sample_arguments(tool))
        result = env.step(action)
        _require(
            result.observation is not None and isinstance(result.observation.content, str),
            "tool call returns a string observation",
            tool.name,
        )
        _require(math.isfinite(result.reward), "tool call reward is finite", tool.name)


def _answer_reward(env: Env, task: Task, seed: int, text: str) -> float:
    env.reset(task, seed)
    result = env.step(Action(kind="answer", text=text))
    _require(result.terminated, "answer terminates", task.task_id)
    _require(math.isfinite(result.reward), "answer reward is finite", task.task_id)
    return result.reward


def _check_answers(env: Env, task: Task, seed: int) -> None:
    gold = _answer_reward(env, task, seed, task.answers[0])
    wrong = _answer_reward(env, task, seed, "certainly not the answer xq7")
    _require(gold >= wrong, "gold answer scores >= a wrong one", f"{gold} < {wrong}")


def _check_expert(env: Env, task: Task, seed: int, max_turns: int, mistake: bool = False) -> None:
    """The expert succeeds; with `mistake`, playing its scripted mistake where the env offers
    it (once: the env must stop offering it after it was played)."""
    env.reset(task, seed)
    tools = {tool.name: tool for tool in env.tools}
    turns: list[str] = []
    played = 0
    for _ in range(max_turns + int(mistake)):
        wrong = env.expert_mistake() if mistake else None  # type: ignore[attr-defined]
        _require(wrong is None or isinstance(wrong, str), "expert_mistake returns a str or None")
        played += wrong is not None
        _require(
            played <= 1,
            "expert_mistake is offered once",
            f"{task.task_id}: offered again after {turns}",
        )
        text = env.expert_turn() if wrong is None else wrong
        turns.append(text)
        result = env.step(_parse_expert(text, tools))
        if result.truncated and not result.terminated:
            _require(
                False,
                "expert succeeds",
                f"{task.task_id}: the episode was truncated (the env's step limit) after "
                f"{turns} before the expert reached the goal; the task needs a longer "
                "episode than the env allows (raise its step limit, or drop the task)",
            )
        if result.terminated:
            # Success as the env reports it, or the last step's reward: an expert that plays the
            # best policy in expectation (a risky bandit arm) succeeds without a reward of 1.
            succeeded = result.info.get("success", result.reward) >= 1.0 or result.reward >= 1.0
            _require(
                succeeded,
                "expert succeeds",
                f"{task.task_id}: reward {result.reward}, info {result.info} after {turns}",
            )
            return
    _require(False, "expert terminates", f"{task.task_id}: no answer within {max_turns} turns")


def _probe_actions(env: Env, task: Task, seed: int, max_turns: int) -> list[Action]:
    """Actions that go some way into an episode, for the replay check: the scripted expert's
    (where it plays the task), else an invalid action, a call of every tool and the gold
    answer."""
    if has_expert(env) and task_has_expert(task):
        env.reset(task, seed)
        tools = {tool.name: tool for tool in env.tools}
        actions = []
        for _ in range(max_turns):
            actions.append(_parse_expert(env.expert_turn(), tools))
            result = env.step(actions[-1])
            if result.terminated or result.truncated:
                break
        return actions
    actions = [Action(kind="invalid", error="check_env test")]
    actions += [Action(kind="tool", name=t.name, arguments=_sample_arguments(t)) for t in env.tools]
    if task.answers:
        actions.append(Action(kind="answer", text=task.answers[0]))
    return actions


def _outcome(result: StepResult) -> tuple[Any, ...]:
    """What a branch must see again: the observation, the reward and the end flags (the info
    dict may carry timings)."""
    return (result.observation, result.reward, result.terminated, result.truncated)


def _play(env: Env, task: Task, seed: int, actions: list[Action]) -> list[tuple[Any, ...]]:
    env.reset(task, seed)
    outcomes = []
    for action in actions:
        outcomes.append(_outcome(env.step(action)))
        if outcomes[-1][2] or outcomes[-1][3]:
            break
    return outcomes


def _check_replay(env: Env, task: Task, seed: int, max_turns: int) -> None:
    """Tree rollouts branch an episode by replaying its action prefix (or by `fork()`): the
    same actions after the same reset must give the same observations, rewards and end flags,
    and a fork must step like the original without disturbing it."""
    actions = _probe_actions(env, task, seed, max_turns)
    first = _play(env, task, seed, actions)
    second = _play(env, task, seed, actions)
    for k, (a, b) in enumerate(zip(first, second, strict=True)):
        _require(
            a == b,
            "replay determinism",
            f"{task.task_id}: step {k} ({actions[k].kind} {actions[k].name}) gave {b} on replay, "
            f"{a} the first time; an env that cannot be replayed declares branchable = False "
            "(or defines fork())",
        )
    if not callable(getattr(env, "fork", None)):
        return
    env.reset(task, seed)
    for k, expected in enumerate(first):
        copy = env.fork()
        _require(
            _outcome(copy.step(actions[k])) == expected,
            "fork",
            f"{task.task_id}: a fork made before step {k} steps differently from the original",
        )
        _require(
            _outcome(env.step(actions[k])) == expected,
            "fork",
            f"{task.task_id}: stepping a fork changed the original (step {k}): fork() must copy",
        )


def _guarded(check: str, task: Task, run: Any, *args: Any) -> None:
    """`run(*args)`; an exception the env raises inside a check becomes an EnvCheckError that
    names the check and the task (the env's own error chained to it): a checker reports what
    it finds, it does not crash on it."""
    try:
        run(*args)
    except EnvCheckError:
        raise
    except Exception as err:  # noqa: BLE001 - any failure of the env under test is a finding
        raise EnvCheckError(
            f"check_env: {check} failed: {task.task_id}: the env raised {type(err).__name__}: {err}"
        ) from err


def check_env(env: Env, tasks: list[Task], seed: int = 0, max_expert_turns: int = 6) -> list[str]:
    """Validate an env on `tasks` (Gymnasium-style checker). Raises EnvCheckError on failure;
    returns the checks it skipped, each with the reason.

    Checks: tool definitions; reset messages (roles, last is user, deterministic per seed);
    an invalid action gives an error observation without terminating; every tool returns a
    string observation; the gold answer scores at least as well as a wrong one; the scripted
    expert succeeds (info["success"] or reward 1.0) within `max_expert_turns` turns (or the
    env's class attribute `expert_turn_limit`, if larger). An env without a scripted expert
    (no `expert_turn`, see `has_expert`) skips that last check: it can still be trained, only
    not warm-started. An env with a scripted mistake (`expert_mistake`) must also succeed
    after opening with it, where the task has one. Tasks without gold answers (a task solved by acting, never answered in
    text, e.g. image planning) and envs whose answer does not end the episode (class attribute
    `answer_ends_episode = False`: a multi-agent team where another role reviews the answer)
    skip the answer check. An expert episode the env truncates (its
    step limit) fails the expert check; an exception the env raises in any check is reported
    as an EnvCheckError naming the check and the task. Envs that can branch (tree rollouts;
    all but those declaring `branchable = False`) must replay: the same actions after the same
    reset give the same observations, rewards and end flags; an env with `fork()` must fork.
    """
    _require(bool(tasks), "tasks given", "check_env needs at least one task")
    _require(isinstance(getattr(env, "tools", None), list), "env.tools is a list")
    _check_tools(env)
    expert = has_expert(env)
    skipped = [] if expert else ["expert succeeds (the env has no expert_turn)"]
    # An env whose expert needs more turns says so (BFCL multi-turn: two per user turn).
    max_expert_turns = max(max_expert_turns, int(getattr(env, "expert_turn_limit", 0)))
    for task in tasks:
        _guarded("reset", task, _check_reset, env, task, seed)
        _guarded("steps", task, _check_steps, env, task, seed)
        if task.answers and getattr(env, "answer_ends_episode", True):
            _guarded("answers", task, _check_answers, env, task, seed)
        elif not any(s.startswith("gold answer") for s in skipped):
            why = (
                "an answer does not end the episode: another role reviews it"
                if task.answers
                else "the tasks have no gold answers"
            )
            skipped.append(f"gold answer scores >= a wrong one ({why})")
        if expert and task_has_expert(task):
            _guarded("expert succeeds", task, _check_expert, env, task, seed, max_expert_turns)
            if has_expert_mistake(env):
                _guarded(
                    "expert recovers from its mistake",
                    task,
                    _check_expert,
                    env,
                    task,
                    seed,
                    max_expert_turns,
                    True,
                )
        elif expert and not any(s.startswith("expert succeeds on") for s in skipped):
            skipped.append("expert succeeds on tasks marked has_expert=false (it has none)")
        if is_branchable(env):
            _guarded("replay determinism", task, _check_replay, env, task, seed, max_expert_turns)
    if not is_branchable(env):
        skipped.append("replay determinism (the env declares branchable = False)")
    return skipped
