"""The Env protocol, a base class for tool-using QA-style envs, and `check_env`.

An env is a small class: `reset(task, seed)` gives the opening messages, `step(action)` applies
one parsed model turn. Malformed actions are data: they return an error observation, a format
penalty and a counted metric, never an exception. The env does not count turns; the rollout owns
turn and token budgets (and sets `truncated`).
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping
from typing import Any, Protocol, runtime_checkable

from agentic_rl.errors import UserInputError
from agentic_rl.tools.base import Tool, call_tool, result_tag_of
from agentic_rl.types import Action, Observation, StepResult, Task

VALID_ROLES = frozenset({"system", "user", "assistant", "tool"})


@runtime_checkable
class Env(Protocol):
    """An environment the agent acts in. See DESIGN.md, "Contracts".

    Optional: `expert_turn()` (a scripted expert, used by warm starts and checked by
    `check_env` where the env has one: see `has_expert`), `expert_mistake()` (a turn the
    expert plays wrong on purpose, as the policy does, e.g. a misspelt first search: the
    mistake to play at this point of the episode, None where it has none here, and None once
    it was played; a `warm_start.recovery_fraction` of the warm start's episodes shows it,
    untrained, then the expert's recovery, and `check_env` checks that the expert recovers;
    see `has_expert_mistake`) and the class attribute
    `anchor_states = True` (observations carry `Observation.anchor`, which GiGPO groups on);
    `task_fields` (the `Task.fields` keys every task must carry, so a user's task-file row
    without one is refused at load, naming the row: envs/task_files.py) and
    `expert_reads_task_files = True` (the scripted expert works on such rows too, so a warm
    start may play them).

    Branching (tree rollouts, rollout/tree.py): by default an env branches by deterministic
    replay: `reset(task, seed)`, then the recorded actions of an episode applied again, gives
    the same observations, rewards and end flags (`check_env` tests it). An env that can copy
    itself may also define `fork() -> Env`, an independent copy in its current state, which a
    tree rollout uses instead of replaying. An env that can do neither (its steps depend on
    the outside world or on unseeded randomness) declares the class attribute
    `branchable = False`: tree rollouts refuse it at load (`is_branchable`).

    Threads (rollout.env_workers > 0, rollout/schedule.py): the steps of different env
    instances may run at the same time on worker threads. An env whose instances share
    mutable state that is not guarded (e.g. one batching engine all of them queue on)
    declares the class attribute `thread_safe = False`: its steps then run on the rollout's
    own thread (`is_thread_safe`).

    Several agents (rollout.mode=memory, docs/guides/multi-agent.md): a conversation env
    (`conversations = True`) may declare `roles = ("planner", "executor")` and name the role
    that acts next in every `Observation.role` (where its options choose the roles, e.g. the
    number of debaters, the class also defines `roles_for(options)`, which config validation
    reads); an env whose answer another role reviews
    before the episode ends declares `answer_ends_episode = False` (`check_env` then does not
    expect the first answer to end it).

    Scores over metrics (a benchmark's aggregates, e.g. BFCL's overall accuracies from its
    per-category ones): the class attribute `summary_metrics`, a function `(means, episodes per
    metric) -> {name: value}` over an evaluation's `env/` metric means, whose results join the
    run's summary (train/summary.py `summarize`; `summary_metrics_of`).
    """

    tools: list[Tool]

    def reset(self, task: Task, seed: int) -> Observation: ...

    def step(self, action: Action) -> StepResult: ...

    def expert_turn(self) -> str:
        """Optional: the scripted expert's next assistant turn (e.g. '<answer>42</answer>')."""
        ...


SummaryMetrics = Callable[[Mapping[str, float], Mapping[str, float]], dict[str, float]]
"""An env's scores over an evaluation's metric means (`Env`, "Scores over metrics")."""


def summary_metrics_of(env: Any) -> SummaryMetrics | None:
    """The `summary_metrics` function of `env` (an instance or a class), None without one."""
    return getattr(env if isinstance(env, type) else type(env), "summary_metrics", None)


def has_expert(env: Any) -> bool:
    """Whether `env` (an instance or a class) has a scripted expert: an `expert_turn` method
    that is not `ToolEnv`'s unimplemented placeholder."""
    method = getattr(env if isinstance(env, type) else type(env), "expert_turn", None)
    return callable(method) and method is not ToolEnv.expert_turn


def has_expert_mistake(env: Any) -> bool:
    """Whether `env` (an instance or a class) has a scripted mistake to recover from: an
    `expert_mistake` method beside its expert (see `Env`)."""
    return has_expert(env) and callable(
        getattr(env if isinstance(env, type) else type(env), "expert_mistake", None)
    )


def is_branchable(env: Any) -> bool:
    """Whether episodes of `env` (an instance or a class) can branch: by replay of the action
    prefix unless the env declares `branchable = False` (see `Env`)."""
    return bool(getattr(env, "branchable", True))


def is_thread_safe(env: Any) -> bool:
    """Whether steps of `env` may run on a worker thread beside other envs' steps, unless the
    env declares `thread_safe = False` (see `Env`)."""
    return bool(getattr(env, "thread_safe", True))


def task_has_expert(task: Task) -> bool:
    """Whether the env's scripted expert can play `task`: an env whose expert covers only some
    of its tasks (MiniWoB++: five of its pages) marks the others `fields["has_expert"] =
    False`; warm starts, failure pairs and check_env's expert check leave those out."""
    return task.fields.get("has_expert", True) is not False


def check_steppable(task: Task | None, done: bool) -> None:
    """Raise RuntimeError when an env is stepped before `reset()` (no `task`) or after its
    episode ended (`done`).

    Why: these are the caller's bugs (a rollout loop that lost track of an episode), not the
    model's mistakes, so they fail loudly instead of becoming observations it is trained on.
    """
    if task is None:
        raise RuntimeError("step() called before reset()")
    if done:
        raise RuntimeError("step() called after the episode terminated; call reset()")


def inline_tool_instructions(tools: list[Tool]) -> str:
    """Describe each tool in the inline tag format: `<name>argument</name>`."""
    lines = []
    for tool in tools:
        tag = result_tag_of(tool)
        lines.append(
            f"- {tool.name}: {tool.description} Write <{tool.name}>...</{tool.name}>; the result "
            f"appears between <{tag}> and </{tag}>."
        )
    return "\n".join(lines)


class ToolEnv:
    """Base for envs where the agent calls tools and finally answers.

    Subclasses implement `score_answer` (a float in [0, 1]), optionally `expert_turn` (for
    warm starts), and usually override `system_prompt`. Tool calls give `tool_call_reward` (0 by default); malformed turns,
    unknown tools and turns without any action give `-format_penalty`.
    """

    def __init__(
        self,
        tools: list[Tool],
        format_penalty: float = 0.1,
        tool_timeout_s: float = 10.0,
        max_tool_output_chars: int = 2000,
        tool_call_reward: float = 0.0,
    ) -> None:
        self.tools = list(tools)
        self.format_penalty = format_penalty
        self.tool_timeout_s = tool_timeout_s
        self.max_tool_output_chars = max_tool_output_chars
        self.tool_call_reward = tool_call_reward
        self._tools_by_name = {tool.name: tool for tool in self.tools}
        self.task: Task | None = None
        self.seed = 0
        self.done = False
        # (action, observation) per step: lets `expert_turn` see what the agent has seen so far.
        self.history: list[tuple[Action, Observation | None]] = []

    # -- hooks for subclasses -------------------------------------------------------------
    def system_prompt(self) -> str:
        """The system message: what the agent must do and the action format."""
        return (
            "Solve the task. You can use these tools:\n"
            f"{inline_tool_instructions(self.tools)}\n"
            "When you know the answer, write <answer>answer</answer> with only the answer inside."
        )

    def user_prompt(self, task: Task) -> str:
        """The user message for a task."""
        return task.prompt

    def score_answer(self, text: str) -> float:
        """Reward in [0, 1] for a final answer to `self.task`."""
        raise NotImplementedError

    def expert_turn(self) -> str:
        """The scripted expert's next assistant turn given `self.history` (optional: envs
        without one cannot warm-start; `has_expert` tells)."""
        raise NotImplementedError

    # -- the protocol ---------------------------------------------------------------------
    def reset(self, task: Task, seed: int) -> Observation:
        """Start an episode on `task`; returns the system and user messages."""
        self.task = task
        self.seed = seed
        self.done = False
        self.history = []
        return Observation(
            messages=[
                {"role": "system", "content": self.system_prompt()},
                {"role": "user", "content": self.user_prompt(task)},
            ]
        )

    def step(self, action: Action) -> StepResult:
        """Apply one parsed model turn."""
        check_steppable(self.task, self.done)
        if action.kind == "tool":
            result = self._step_tool(action)
        elif action.kind == "answer":
            reward = float(self.score_answer(action.text))
            result = StepResult(
                observation=None,
                reward=reward,
                terminated=True,
                info={"answered": 1, "success": float(reward >= 1.0)},
            )
        elif action.kind == "invalid":
            result = self._penalty(
                f"Invalid action: {action.error or 'malformed turn'}. {self._usage_hint()}",
                {"invalid_action": 1},
            )
        elif action.kind == "none":
            result = StepResult(
                observation=None,
                reward=-self.format_penalty,
                terminated=True,
                info={"no_action": 1, "success": 0.0},
            )
        else:  # a bug in the caller, not a model mistake
            raise ValueError(f"unknown action kind {action.kind!r}")
        self.done = result.terminated
        self.history.append((action, result.observation))
        return result

    def _usage_hint(self) -> str:
        # Name the real tags (<search>, <calc>) rather than a placeholder the model cannot use.
        tags = [f"<{name}>...</{name}>" for name in self._tools_by_name] + ["<answer>...</answer>"]
        return f"Use {', '.join(tags[:-1])} or {tags[-1]}." if len(tags) > 1 else f"Use {tags[0]}."

    def _penalty(self, message: str, info: dict[str, Any]) -> StepResult:
        return StepResult(
            observation=Observation(content=message, name="error"),
            reward=-self.format_penalty,
            info=info,
        )

    def _step_tool(self, action: Action) -> StepResult:
        tool = self._tools_by_name.get(action.name)
        if tool is None:
            names = ", ".join(self._tools_by_name) or "none"
            return self._penalty(
                f"Invalid action: unknown tool '{action.name}'. Available tools: {names}.",
                {"invalid_action": 1},
            )
        outcome = call_tool(
            tool, action.arguments, self.tool_timeout_s, max_chars=self.max_tool_output_chars
        )
        return StepResult(
            observation=Observation(content=outcome.text, name=tool.name),
            reward=self.tool_call_reward,
            info={"tool_call": 1, "tool_error": int(not outcome.ok)},
        )

    def last_observation(self) -> str:
        """Text of the most recent observation (empty before any)."""
        for _, observation in reversed(self.history):
            if observation is not None:
                return observation.content
        return ""

    def num_tool_calls(self) -> int:
        """How many tool calls the agent made in this episode."""
        return sum(1 for action, _ in self.history if action.kind == "tool")


# ---------------------------------------------------------------------------------------------
# check_env
# ---------------------------------------------------------------------------------------------


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
