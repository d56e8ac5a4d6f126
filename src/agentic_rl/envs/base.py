"""The Env protocol and a base class for tool-using QA-style envs (`check_env` is in check.py).

An env is a small class: `reset(task, seed)` gives the opening messages, `step(action)` applies
one parsed model turn. Malformed actions are data: they return an error observation, a format
penalty and a counted metric, never an exception. The env does not count turns; the rollout owns
turn and token budgets (and sets `truncated`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Protocol, runtime_checkable

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
