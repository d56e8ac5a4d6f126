"""The household env with KnownSelf's knowledge tool (`household_knowledge`).

`<knowledge>help</knowledge>` returns one "When ..., the agent should ..." rule from a small
rule base of pick-and-place know-how (open containers first, take the object when it is in
view, search other rooms, insert into containers / put on surfaces). The rule is chosen by the
next command of TextWorld's walkthrough from the current state, so the selector is an oracle
(KnownSelf selects rules with a model); the rule names the objects involved.
"""

from __future__ import annotations

import re

from agentic_rl.envs.knowledge import KNOWLEDGE_HINT, KnowledgeMixin
from agentic_rl.envs.worlds.household import HouseholdEnv, normalize_command

RULES: tuple[tuple[re.Pattern[str], str], ...] = (
    (
        re.compile(r"^open (?P<a>.+)$"),
        "When the {a} is closed and the task needs what is in it or room in it, the agent "
        "should open the {a} first.",
    ),
    (
        re.compile(r"^take (?P<a>.+?) from (?P<b>.+)$"),
        "When the {a} that the task asks for is in view on or in the {b}, the agent should "
        "take the {a} from the {b} at once.",
    ),
    (
        re.compile(r"^go (?P<a>\w+)$"),
        "When neither the object nor its destination is in this room, the agent should go "
        "{a} to search the next room.",
    ),
    (
        re.compile(r"^insert (?P<a>.+?) into (?P<b>.+)$"),
        "When the agent carries the {a} and the open {b} is here, the agent should insert the "
        "{a} into the {b}.",
    ),
    (
        re.compile(r"^put (?P<a>.+?) on (?P<b>.+)$"),
        "When the agent carries the {a} and the {b} is here, the agent should put the {a} on "
        "the {b}.",
    ),
)


def household_rule(command: str) -> str:
    """The rule base's rule for the walkthrough's next `command`."""
    command = normalize_command(command)
    for pattern, template in RULES:
        match = pattern.match(command)
        if match:
            return template.format(**match.groupdict())
    return f"When unsure what to do next, the agent should {command}."


class HouseholdKnowledgeEnv(KnowledgeMixin, HouseholdEnv):
    """TextWorld household games plus the knowledge tool (see the module doc)."""

    def __init__(
        self,
        max_actions_per_turn: int = 1,
        max_steps: int = 12,
        format_penalty: float = 0.1,
        success_reward: float = 1.0,
        cache_dir: str = "",
        tool_timeout_s: float = 10.0,
    ) -> None:
        super().__init__(
            max_actions_per_turn,
            max_steps,
            format_penalty,
            success_reward,
            cache_dir,
            tool_timeout_s,
        )
        self.enable_knowledge()

    def system_prompt(self) -> str:
        return super().system_prompt() + KNOWLEDGE_HINT

    def knowledge(self) -> str:
        assert self.state is not None, "reset() first"
        plan = list(self.state.policy_commands or [])
        return household_rule(plan[0]) if plan else "When the task is done, the agent should stop."
