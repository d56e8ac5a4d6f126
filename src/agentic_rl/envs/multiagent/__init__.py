"""Multi-agent systems: several roles in one episode, exchanging messages through the env (the planner / executor search team, the solver / verifier math team, two debaters)."""

import hashlib

from agentic_rl.envs.math.calculator import parse_number
from agentic_rl.tools.base import EnvActionTool
from agentic_rl.tools.calculator import evaluate
from agentic_rl.types import Message, Observation, Task

CALC_TOOL = EnvActionTool("calc", "Evaluate an arithmetic expression.", "expression", "result")
"""The one calculation a math role may make before its final action (solver / verifier, debate)."""


def open_conversation(role: str, system: str, user: str) -> Observation:
    """A role's turn opens a fresh conversation (its system prompt and one user message that
    holds all it is shown): each role's trajectory is its own context, never the other's."""
    messages: list[Message] = [
        {"role": "system", "content": system},
        {"role": "user", "content": user},
    ]
    return Observation(messages=messages, role=role)


def role_reward_key(role: str) -> str:
    """The step-info key under which a multi-agent env reports a reward term of `role` alone
    (an `env/` metric, summed over the episode; rollout/roles.py `add_role_rewards` adds it to
    that role's samples' rewards on top of the team's outcome)."""
    return f"env/{role}_reward"


def calculation(expression: str) -> str:
    """`<calc>`'s result as a role sees it, "expression = value"; a bad expression is the
    model's mistake, shown as data ("expression = error (...)")."""
    try:
        value = evaluate(expression)
        shown = str(int(value)) if value == int(value) else f"{value:g}"
    except Exception as err:
        shown = f"error ({err})"
    return f"{expression.strip()} = {shown}"


def answer_is_correct(task: Task, answer: str) -> bool:
    """Whether `answer` is the number of a calculator word problem (the exact verifier)."""
    value = parse_number(answer)
    return value is not None and any(value == float(g) for g in task.answers)


def scripted_mistake(task: Task, fraction: float) -> bool:
    """Whether a scripted team errs on purpose on `task`: true on `fraction` of the tasks, by a
    hash of the task id (the same tasks every run), so a warm start shows the fix too."""
    return hashlib.sha256(task.task_id.encode()).digest()[0] / 256 < fraction
