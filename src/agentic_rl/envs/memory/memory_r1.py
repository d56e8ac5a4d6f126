"""Memory-R1's memory manager as an env (Yan et al. 2025, "Memory-R1: Enhancing Large Language
Model Agents to Manage and Utilize Memories via Reinforcement Learning").

An episode is one dialogue (envs/memory/dialogues.py). For each new fact, in order, the manager
gets a fresh conversation: the fact and the related memories retrieved from the bank (ids and
texts), and replies with one operation (ADD / UPDATE / DELETE / NOOP, envs/memory/bank.py), which
is parsed, validated against the memories shown and applied to the bank (an SQLite file). A reply
that is not a valid operation changes nothing: it is counted (`invalid_action`) and the next
conversation tells the manager why it was rejected. After the last fact a FROZEN answer agent
answers every question of the dialogue from the bank, and the manager's reward is its exact
match (mean over the questions), as in Memory-R1, where a frozen answer agent's EM rewards the
manager. Each fact's conversation is its own training sample sharing that reward
(rollout.mode=memory, `conversations = True`).

The frozen answer agent here is an extractive reader (`answer_from_bank`), not an LLM: it
retrieves the top `answer_k` memories by word overlap with the question and returns the value of
the first one that states the asked attribute, "none" if none does. Like an answer agent without
timestamps it cannot tell a stale memory from a current one: when the bank keeps both
"X lives in A" and "X moved from A to B", it reads the better-matching (older) one. That is what
a manager must fix with UPDATE and DELETE, and what an append-everything bank gets wrong.
"""

from __future__ import annotations

import re
import tempfile
import uuid
import weakref
from pathlib import Path

from agentic_rl.envs.memory.bank import (
    MemoryBank,
    Operation,
    OperationError,
    parse_operation,
    render_operation,
)
from agentic_rl.envs.memory.dialogues import NONE, STATE
from agentic_rl.rewards.qa import exact_match, f1_score
from agentic_rl.tools.base import Tool
from agentic_rl.types import Action, Message, Observation, StepResult, Task

SYSTEM_PROMPT = (
    "You manage a memory bank about a person. For each new fact, reply with one JSON "
    'operation: {"event": "ADD", "text": "..."} to store a new memory, {"event": "UPDATE", '
    '"id": 1, "text": "..."} to rewrite a shown memory that the fact changes, {"event": '
    '"DELETE", "id": 1} to remove a shown memory that is no longer true, or {"event": "NOOP"} '
    "if the fact adds nothing."
)
# how the answer agent reads an attribute's value from a memory's text
EXTRACT = {
    "city": [r"lives in (\w+)", r"moved from \w+ to (\w+)"],
    "employer": [r"works at (\w+)"],
    "pet": [r"renamed the dog from \w+ to (\w+)", r"dog named (\w+)"],
    "hobby": [r"(has no hobby)", r"took up (\w+)", r"likes (\w+)"],
}


def answer_from_bank(bank: MemoryBank, question: str, attribute: str, k: int) -> str:
    """The frozen answer agent: the value stated by the best-retrieved memory that states one."""
    for _, text in bank.search(question, k):
        for pattern in EXTRACT[attribute]:
            match = re.search(pattern, text)
            if match:
                return NONE if match.group(1) == "has no hobby" else match.group(1)
    return NONE


def _remove(path: Path) -> None:
    path.unlink(missing_ok=True)


class MemoryR1Env:
    """One dialogue's facts, one manager conversation each; reward: the answer agent's EM."""

    tools: list[Tool] = []
    conversations = True  # rollout.mode=memory: every step opens a fresh conversation
    thread_safe = False  # its SQLite bank may only be used by the thread that opened it

    def __init__(
        self,
        manager_k: int = 5,
        answer_k: int = 5,
        bank_dir: str = "",
        format_penalty: float = 0.0,
        append_only: bool = False,
    ) -> None:
        if manager_k < 1 or answer_k < 1:
            raise ValueError("manager_k and answer_k must be >= 1")
        self.manager_k, self.answer_k = manager_k, answer_k
        self.format_penalty = format_penalty
        self.append_only = append_only  # the baseline: every fact ADDed, the reply ignored
        root = Path(bank_dir) if bank_dir else Path(tempfile.gettempdir()) / "agentic_rl_memory"
        self.bank = MemoryBank(root / f"bank-{uuid.uuid4().hex}.sqlite")
        if not bank_dir:  # a scratch bank: removed with the env; a user's bank_dir is kept
            weakref.finalize(self, _remove, self.bank.path)
        self.task: Task | None = None
        self.position = 0
        self.shown: list[tuple[int, str]] = []
        self.scores: dict[str, float] = {}
        self.ops: dict[str, int] = {}

    # -- conversations --------------------------------------------------------------------
    def _fact(self) -> dict:
        assert self.task is not None, "reset first"
        return self.task.fields["facts"][self.position]

    def _messages(self, note: str = "") -> list[Message]:
        fact = self._fact()["text"]
        self.shown = self.bank.search(fact, self.manager_k)
        memories = "\n".join(f"[{i}] {t}" for i, t in self.shown) or "none"
        text = f"Related memories:\n{memories}\n\nNew fact: {fact}\n\nOperation:"
        if note:
            text = f"Your previous operation was rejected: {note}.\n\n{text}"
        return [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": text}]

    def reset(self, task: Task, seed: int) -> Observation:
        self.task, self.position = task, 0
        self.bank.clear()
        self.scores, self.ops = {}, dict.fromkeys(("ADD", "UPDATE", "DELETE", "NOOP"), 0)
        return Observation(messages=self._messages())

    def step(self, action: Action) -> StepResult:
        """Parse, validate and apply the manager's operation; then the next fact's conversation,
        or after the last fact the answer agent's exact match as the reward."""
        assert self.task is not None, "reset first"
        info: dict[str, float] = {}
        reward, note = 0.0, ""
        if self.append_only:
            op = Operation("ADD", text=self._fact()["text"])
        else:
            try:
                op = parse_operation(action.raw or action.text, {i for i, _ in self.shown})
            except OperationError as err:
                op, note = Operation("NOOP"), str(err)
                info["invalid_action"] = 1
                reward -= self.format_penalty
        self.bank.apply(op)
        self.ops[op.event] += 0 if note else 1
        self.position += 1
        if self.position < len(self.task.fields["facts"]):
            observation = Observation(messages=self._messages(note))
            if note:  # the rejection, as an error observation (also in the next conversation)
                observation.content, observation.name = note, "error"
            return StepResult(observation, reward, info=info)
        em, f1 = self.answer_all()
        info["success"] = em
        return StepResult(None, reward + em, True, info=info)

    def answer_all(self) -> tuple[float, float]:
        """The frozen answer agent on every question: mean EM and mean F1 (kept in `scores`)."""
        assert self.task is not None
        questions = self.task.fields["questions"]
        answers = [
            answer_from_bank(self.bank, q["question"], q["attribute"], self.answer_k)
            for q in questions
        ]
        em = sum(exact_match(a, q["answer"]) for a, q in zip(answers, questions, strict=True))
        f1 = sum(f1_score(a, q["answer"]) for a, q in zip(answers, questions, strict=True))
        self.scores = {"em": em / len(questions), "f1": f1 / len(questions)}
        return self.scores["em"], self.scores["f1"]

    def expert_turn(self) -> str:
        """The scripted manager: ADD a new fact's state, UPDATE the memory a change makes stale
        (or DELETE it when the fact ends it), NOOP for restatements and small talk."""
        fact = self._fact()
        name = self.task.fields["name"] if self.task is not None else ""
        kind, attribute = fact["kind"], fact["attribute"]
        if kind in ("restate", "chat"):
            return render_operation(Operation("NOOP"))
        state = STATE[attribute].format(name=name, value=fact["value"]) if attribute else ""
        stale = next((i for i, t in self.shown if _states(t, attribute)), None)
        if kind == "intro" or stale is None:
            return render_operation(Operation("ADD", text=state))
        if kind == "delete":
            return render_operation(Operation("DELETE", stale))
        return render_operation(Operation("UPDATE", stale, state))


def _states(text: str, attribute: str) -> bool:
    return any(re.search(p, text) for p in EXTRACT.get(attribute, []))
