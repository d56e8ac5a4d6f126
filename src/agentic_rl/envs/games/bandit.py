"""RAGEN's two-armed bandit: a safe arm and a risky arm, named by a pair of words.

One pull per episode: the agent answers with an arm's name, `<answer>Gambler</answer>`. The safe
arm always pays `safe_reward` (0.1, RAGEN's code; the paper uses 0.15); the risky arm pays
`risky_reward` (1.0) with probability `risky_prob` (0.25) and 0 otherwise, so it is the better
arm in expectation (0.25 > 0.1) and the worse one three times in four. Nothing but the names says
which arm is which: the safe one sounds safe ("Accountant", "Savings"), the risky one risky
("Gambler", "Lottery"); the two are listed in random order. Success (RAGEN's) = the risky arm was
chosen, whatever it paid. Train and eval use disjoint word pairs (RAGEN's generalisation test).

The risky arm's draw is fixed at reset from the task and the reset seed, which the rollout
shares within a group (RAGEN's env groups share a seed), so an episode replays exactly. An
answer that names neither arm ends the episode with `-format_penalty`; a turn without an answer
is an error observation (`-format_penalty`), as in the other envs.

The scripted expert pulls the risky arm (the higher expected reward). `check_env`'s expert check
demands reward 1.0, which the risky arm pays only when its draw wins: with this env it passes on
the (task, seed) pairs where `risky_pays` is true.
"""

from __future__ import annotations

import random
import re
from typing import Any, Literal

from agentic_rl.envs.base import check_steppable
from agentic_rl.types import Action, Observation, StepResult, Task

Split = Literal["train", "eval"]

# (safe, risky) word pairs; train and eval pairs are disjoint.
ARM_PAIRS: dict[str, list[tuple[str, str]]] = {
    "train": [
        ("Accountant", "Gambler"),
        ("Savings", "Lottery"),
        ("Teacher", "Daytrader"),
        ("Bond", "Crypto"),
        ("Nurse", "Stuntman"),
        ("Clerk", "Prospector"),
        ("Pension", "Jackpot"),
        ("Turtle", "Daredevil"),
        ("Shelter", "Treasure"),
        ("Anchor", "Rocket"),
        ("Farmer", "Explorer"),
        ("Vault", "Casino"),
    ],
    "eval": [
        ("Postman", "Adventurer"),
        ("Blanket", "Volcano"),
        ("Dentist", "Pirate"),
        ("Ledger", "Dice"),
        ("Harbor", "Storm"),
        ("Cashier", "Speculator"),
    ],
}

SYSTEM_PROMPT = (
    "You are playing a bandit game. Goal: maximize your reward by choosing which arm to pull. "
    "Each arm has its own reward distribution, related to its name: think about what each "
    "name suggests about how its rewards behave. Answer with the name of the arm to pull, "
    "like <answer>NAME</answer>."
)
USER_PROMPT = (
    "There are 2 arms, named {a} and {b}. Which arm do you pull? Answer <answer>{a}</answer> "
    "or <answer>{b}</answer>."
)


def _norm(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", " ", text.lower()).strip()


def make_bandit_tasks(split: Split, n: int, seed: int = 0) -> list[Task]:
    """`n` bandit tasks for `split`: each of the split's word pairs in both orders, repeated
    (in a seeded order) until there are `n`. `fields = {"arms": [first, second], "safe",
    "risky"}`; `answers = [risky]`."""
    if split not in ("train", "eval"):
        raise ValueError(f"split must be 'train' or 'eval', got {split!r}")
    rng = random.Random(f"bandit/{split}/{seed}")
    variants = [(s, r, (s, r)) for s, r in ARM_PAIRS[split]]
    variants += [(s, r, (r, s)) for s, r in ARM_PAIRS[split]]
    tasks: list[Task] = []
    while len(tasks) < n:
        rng.shuffle(variants)
        for safe, risky, arms in variants[: n - len(tasks)]:
            tasks.append(
                Task(
                    task_id=f"bandit-{split}-{seed}-{len(tasks)}",
                    prompt=USER_PROMPT.format(a=arms[0], b=arms[1]),
                    answers=[risky],
                    fields={"arms": list(arms), "safe": safe, "risky": risky},
                )
            )
    return tasks


def risky_pays(task: Task, seed: int, risky_prob: float = 0.25) -> bool:
    """Whether the risky arm's draw wins in the episode of `task` reset with `seed`."""
    return random.Random(f"bandit/{task.task_id}/{seed}").random() < risky_prob


class BanditEnv:
    """Pull one of two arms (see the module docstring)."""

    # The arms' names: a task-file row needs it (envs/base.py).
    task_fields = ("arms", "risky")

    def __init__(
        self,
        safe_reward: float = 0.1,
        risky_reward: float = 1.0,
        risky_prob: float = 0.25,
        format_penalty: float = 0.1,
        tool_timeout_s: float = 10.0,
    ) -> None:
        del tool_timeout_s  # no tools; accepted for a uniform constructor
        if not 0.0 <= risky_prob <= 1.0:
            raise ValueError(f"risky_prob must be in [0, 1], got {risky_prob}")
        self.tools: list[Any] = []
        self.safe_reward = safe_reward
        self.risky_reward = risky_reward
        self.risky_prob = risky_prob
        self.format_penalty = format_penalty
        self.task: Task | None = None
        self.payout = 0.0  # what the risky arm pays this episode
        self.done = False

    def reset(self, task: Task, seed: int) -> Observation:
        self.task = task
        self.done = False
        self.payout = self.risky_reward if risky_pays(task, seed, self.risky_prob) else 0.0
        return Observation(
            messages=[
                {"role": "system", "content": SYSTEM_PROMPT},
                {"role": "user", "content": task.prompt},
            ]
        )

    def arm_of(self, text: str) -> str | None:
        """The arm an answer names: the name itself (any case, punctuation ignored), else the
        one arm whose name appears in it as a word; None if neither or both."""
        assert self.task is not None
        arms = [str(a) for a in self.task.fields["arms"]]
        said = _norm(text)
        for arm in arms:
            if said == _norm(arm):
                return arm
        words = set(said.split())
        named = [arm for arm in arms if _norm(arm) in words]
        return named[0] if len(named) == 1 else None

    def step(self, action: Action) -> StepResult:
        check_steppable(self.task, self.done)
        if action.kind == "none":
            self.done = True
            info = {"no_action": 1, "success": 0.0}
            return StepResult(None, -self.format_penalty, terminated=True, info=info)
        if action.kind != "answer":
            arms = " or ".join(f"<answer>{a}</answer>" for a in self.task.fields["arms"])
            why = action.error or f"unknown action '{action.name}'"
            return StepResult(
                Observation(content=f"Invalid action: {why}. Answer {arms}.", name="error"),
                -self.format_penalty,
                info={"invalid_action": 1},
            )
        self.done = True
        arm = self.arm_of(action.text)
        if arm is None:
            info = {"answered": 1, "invalid_action": 1, "success": 0.0}
            return StepResult(None, -self.format_penalty, terminated=True, info=info)
        risky = arm == self.task.fields["risky"]
        reward = self.payout if risky else self.safe_reward
        info = {"answered": 1, "risky_arm": float(risky), "success": float(risky)}
        return StepResult(None, reward, terminated=True, info=info)

    def expert_turn(self) -> str:
        """Pull the risky arm: the higher expected reward."""
        assert self.task is not None, "expert_turn() before reset()"
        return f"<answer>{self.task.fields['risky']}</answer>"
