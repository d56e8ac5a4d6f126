"""A knowledge tool for envs with named actions (KnownSelf's "knowledgeable thinking").

`<knowledge>topic</knowledge>` returns a "When ..., the agent should ..." rule about the current
state from the env's small rule base (`knowledge()`); consulting it is not an action (no step is
counted, reward 0). `KnowledgeMixin` adds the tool and answers it in `step`; the env class
defines `knowledge()`. Used by Blocksworld (`knowledge: true`) and the household env
(`household_knowledge`), and by train/knownself.py, which labels the steps where the model
needs it.
"""

from __future__ import annotations

from typing import Any

from agentic_rl.tools.base import EnvActionTool
from agentic_rl.types import Action, Observation, StepResult

KNOWLEDGE_HINT = " To consult the knowledge base, write <knowledge>help</knowledge>."


KNOWLEDGE_TOOL = EnvActionTool(
    "knowledge", "Consult the knowledge base about the current state.", "topic", result_tag="rule"
)
"""`<knowledge>topic</knowledge>`: a rule about the current state, answered by the env's `step`."""


class KnowledgeMixin:
    """Put before a `DiscreteActionEnv` subclass in the bases; call `enable_knowledge()` in
    `__init__` to offer the tool, and define `knowledge()`."""

    tools: list[Any]
    done: bool

    def enable_knowledge(self) -> None:
        self.tools.append(KNOWLEDGE_TOOL)

    @property
    def has_knowledge(self) -> bool:
        return any(t.name == KNOWLEDGE_TOOL.name for t in self.tools)

    def knowledge(self) -> str:
        """The rule for the current state."""
        raise NotImplementedError

    def step(self, action: Action) -> StepResult:
        if action.kind == "tool" and action.name == KNOWLEDGE_TOOL.name and not self.done:
            if not self.has_knowledge:
                return self._invalid("the knowledge tool is not enabled")  # type: ignore[attr-defined]
            return StepResult(
                Observation(
                    content=self.knowledge(),
                    name=KNOWLEDGE_TOOL.name,
                    anchor=self.anchor_key(),  # type: ignore[attr-defined]
                ),
                0.0,
                info={"tool_call": 1, "knowledge_call": 1},
            )
        return super().step(action)  # type: ignore[misc]
