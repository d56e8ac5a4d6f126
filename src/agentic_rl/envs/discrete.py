"""A base for envs with a small set of named actions (Sokoban, Gymnasium text envs), RAGEN-style.

The agent writes `<action>Up || Left || Left</action>`: several actions per turn separated by
`||` (RAGEN's `action_sep`), at most `max_actions_per_turn` of them (extra ones are dropped, as
RAGEN's ctx_manager does), each executed in order until the episode ends. Each action is named
(case-insensitive; "move up", "Up." and "`UP`" all parse) or given by its index. Invalid
actions are dropped; a turn with any invalid or dropped action costs `format_penalty` once
(RAGEN's es_manager: -0.1), and a turn without a single valid action also shows an error
observation (name "error") and leaves the state unchanged. After `max_steps` executed actions
the episode is truncated (RAGEN's `max_actions_per_traj`). `<answer>` gives up (reward 0).
Every action turn returns the new state as its observation, also the last one (the rollout
inserts nothing after a final step).

Subclasses hold the world state and implement `_new_episode`, `_apply`, `state_text` and
`_success`, and, where they have a scripted expert, `expert_turn` (with `expert_text`); the step reward of a turn is the sum of its actions' rewards (RAGEN's
turn-level `acc_reward`). Observations carry `anchor` = `anchor_key()` (the state text by
default), which GiGPO groups steps on.
"""

from __future__ import annotations

import re
from collections.abc import Hashable, Sequence
from typing import Any

from agentic_rl.envs.base import check_steppable
from agentic_rl.tools.base import EnvActionTool
from agentic_rl.types import Action, Observation, StepResult, Task

ACTION_SEP = "||"
_TRIM = re.compile(r"^[^\w]+|[^\w]+$")
_VERBS = re.compile(r"^(?:move|go|push|walk|step|action|press)\s+", re.IGNORECASE)


ACTION_TOOL = EnvActionTool(
    "action", "Act in the environment: one or more actions separated by ' || '.", "actions"
)
"""The `<action>A || B</action>` call, applied by the env's `step` (chat formats parse it)."""


def parse_action(token: str, names: Sequence[str], index_base: int = 0) -> int | None:
    """The index (0-based, into `names`) of one action written by the model, or None.

    Accepts the name in any case with surrounding punctuation or quotes ("up", "Up.", "`UP`"),
    a leading verb ("move up", "push left"), the name's unambiguous first letter ("U"), or the
    action's number counted from `index_base` ("0" for Gymnasium's first action)."""
    text = _VERBS.sub("", _TRIM.sub("", token.strip())).strip().lower()
    text = _TRIM.sub("", text)
    if not text:
        return None
    lowered = [name.lower() for name in names]
    if text in lowered:
        return lowered.index(text)
    if text.isdigit():
        index = int(text) - index_base
        return index if 0 <= index < len(names) else None
    if len(text) == 1:
        matches = [i for i, name in enumerate(lowered) if name.startswith(text)]
        return matches[0] if len(matches) == 1 else None
    return None


def split_actions(text: str) -> list[str]:
    """The action tokens of one `<action>` body: `||`-separated, empty parts dropped."""
    return [part.strip() for part in text.split(ACTION_SEP) if part.strip()]


def action_call_error(action: Action) -> str | None:
    """Why `action` is not an `<action>` call (`ACTION_TOOL`), or None when it is.

    Why: the envs that act only through `<action>` (these discrete envs, the manipulation
    table) turn anything else into the same invalid-action reason, so the model reads one
    wording wherever it made the mistake.
    """
    if action.kind != "tool":
        return action.error or "no action in this turn"
    if action.name != ACTION_TOOL.name:
        return f"unknown action tag '{action.name}'"
    return None


class DiscreteActionEnv:
    """Base class: multi-action turns over a fixed list of action names (see module doc)."""

    anchor_states = True  # every observation carries `anchor` (GiGPO groups steps on it)
    index_base = 0  # how action numbers are counted in the text ("0" = the first action)

    def __init__(
        self,
        action_names: Sequence[str],
        max_actions_per_turn: int = 5,
        max_steps: int = 10,
        format_penalty: float = 0.1,
    ) -> None:
        if max_actions_per_turn < 1:
            raise ValueError(f"max_actions_per_turn must be >= 1, got {max_actions_per_turn}")
        if max_steps < 1:
            raise ValueError(f"max_steps must be >= 1, got {max_steps}")
        self.tools: list[Any] = [ACTION_TOOL]
        self.action_names = list(action_names)
        self.max_actions_per_turn = max_actions_per_turn
        self.max_steps = max_steps
        self.format_penalty = format_penalty
        self.task: Task | None = None
        self.steps = 0  # executed actions this episode
        self.done = False

    # -- hooks for subclasses -------------------------------------------------------------
    def _new_episode(self, task: Task, seed: int) -> None:
        """Set up the world state of `task` (deterministic given task and seed)."""
        raise NotImplementedError

    def _apply(self, index: Any) -> tuple[float, bool, bool]:
        """Execute action `index` (what `parse_token` returned: an index by default); returns (reward, terminated, truncated), where `truncated`
        is the world's own time limit (a Gymnasium TimeLimit), not `max_steps`."""
        raise NotImplementedError

    def state_text(self) -> str:
        """The current state as text (the observation)."""
        raise NotImplementedError

    def system_prompt(self) -> str:
        raise NotImplementedError

    def _success(self) -> bool:
        """Whether the episode ended in success (checked when it ends)."""
        raise NotImplementedError

    def parse_token(self, token: str) -> Any | None:
        """What `_apply` receives for one action the model wrote, or None if it is not an
        action now; by default its index into `action_names` (`parse_action`)."""
        return parse_action(token, self.action_names, self.index_base)

    def anchor_key(self) -> Hashable:
        """The hashable state GiGPO groups steps on; the state text by default."""
        return self.state_text()

    # -- the protocol ---------------------------------------------------------------------
    def reset(self, task: Task, seed: int) -> Observation:
        self.task = task
        self.steps = 0
        self.done = False
        self._new_episode(task, seed)
        state = self.state_text()
        return Observation(
            messages=[
                {"role": "system", "content": self.system_prompt()},
                {"role": "user", "content": state},
            ],
            anchor=self.anchor_key(),
        )

    def step(self, action: Action) -> StepResult:
        check_steppable(self.task, self.done)
        if action.kind == "answer":
            self.done = True
            return StepResult(None, 0.0, terminated=True, info={"answered": 1, "success": 0.0})
        why = action_call_error(action)
        if why is not None:
            return self._invalid(why)
        tokens = split_actions(str(action.arguments.get("actions", "")))
        dropped = max(len(tokens) - self.max_actions_per_turn, 0)
        tokens = tokens[: self.max_actions_per_turn]
        # each token is parsed just before it runs, against the actions legal then (envs whose
        # action set changes with the state, like the household's admissible commands)
        reward, terminated, truncated, executed, bad = 0.0, False, False, 0, []
        for token in tokens:
            if terminated or truncated or self.steps >= self.max_steps:
                break
            parsed = self.parse_token(token)
            if parsed is None:
                bad.append(token)
                continue
            r, terminated, truncated = self._apply(parsed)
            reward += r
            self.steps += 1
            executed += 1
        if not executed:
            why = f"'{bad[0][:40]}' is not an action" if bad else "empty action"
            return self._invalid(why)
        penalised = bool(bad or dropped)
        if penalised:
            reward -= self.format_penalty
        truncated = not terminated and (truncated or self.steps >= self.max_steps)
        info: dict[str, Any] = {"tool_call": 1, "actions": executed}
        if penalised:
            info["invalid_action"] = 1
        if terminated or truncated:
            self.done = True
            info["success"] = float(terminated and self._success())
        state = self.state_text()
        notes = []
        if bad:
            notes.append(f"Ignored invalid action(s): {', '.join(t[:20] for t in bad)}.")
        if dropped:
            limit = self.max_actions_per_turn
            notes.append(f"Ignored {dropped} action(s) over the limit of {limit}.")
        content = "\n".join([state, *notes])
        return StepResult(
            Observation(content=content, name=ACTION_TOOL.name, anchor=self.anchor_key()),
            reward,
            terminated=terminated,
            truncated=truncated,
            info=info,
        )

    def _invalid(self, why: str) -> StepResult:
        names = ", ".join(self.action_names)
        message = (
            f"Invalid action: {why}. Write <action>A || B</action> with up to "
            f"{self.max_actions_per_turn} of: {names}.\n{self.state_text()}"
        )
        return StepResult(
            Observation(content=message, name="error", anchor=self.anchor_key()),
            -self.format_penalty,
            info={"invalid_action": 1},
        )

    def expert_budget(self) -> int:
        """How many actions the expert may write this turn (at least 1)."""
        return max(min(self.max_actions_per_turn, self.max_steps - self.steps), 1)

    def expert_text(self, plan: Sequence[int]) -> str:
        """An expert turn writing `plan` (action indices, capped at `expert_budget()`).

        Subclasses with a scripted expert define `expert_turn()` with it; this base defines
        none, so `has_expert` is false for envs without one (the generic Gymnasium adapter)."""
        assert self.task is not None, "expert_turn() before reset()"
        if self.done:
            return "<answer>done</answer>"
        names = f" {ACTION_SEP} ".join(self.action_names[i] for i in plan[: self.expert_budget()])
        return f"<action>{names}</action>"
