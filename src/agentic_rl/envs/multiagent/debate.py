"""Two or more debaters answer arithmetic word problems, read each other's answers and answer
again; all learn (MAPoRL, Park et al. 2025, arXiv 2502.18439: agents answer independently, then
discuss over several turns; a verifier scores every answer; the agents are co-trained).

Round 1: each debater, in a conversation of its own, sees the problem (envs/math/calculator.py's
generator), may compute once (`<calc>expression</calc>`, the result comes back in the same
round) and answers `<answer>number</answer>` without seeing the other's answer. Rounds 2 to
`rounds`: each sees the problem, its own answer and the other's from the round before, may
compute once, and answers again (keeping or changing its answer). Within a round the debaters
answer independently: a debater never sees another's answer of the same round. `debaters`
(2 by default, up to 6: roles first, second, third, ...) sets how many; from round 2 each sees
every other debater's answer of the round before.

Rewards (the verifier is exact: an answer is correct when it equals the task's number):
- the team's outcome, every sample's reward at the end: 1 when every debater's final answer is
  correct (the debate ends on the right answer), else 0; it is `success`;
- each debater's own term (`role_reward_key`, added to that debater's samples on top of the
  team's, rollout/roles.py): per round t, `answer_reward` x R_t, where R_t is 1 when its
  round-t answer is correct, plus from round 2 the MAPoRL-style shaping `alpha` x (R_t - Q_t)
  with Q_t the mean of its own earlier rounds' R (MARTI's margin mode, R' = R + alpha (R - Q):
  a correction is paid, a regression costs), plus `persuasion_reward` when its answer of the
  round before was correct, the other's was wrong, and the other is now correct (with more than
  two debaters: `persuasion_reward` x the fraction of the others that went from wrong to right
  while it was right; with two it is the same). MAPoRL's exact
  incentive terms are not public in full; the historical mean here is over the episode's earlier
  rounds, not over training (MARTI's Q; unconfirmed).

Every reply is its own conversation (rollout.mode=memory, `conversations = True`), tagged with
its role, so each debater's turns are its own token-native samples; with model.role_policies
each debater is its own LoRA adapter (adapters) or full model (models), or one shared model
told its role by its prompt (shared). A reply that is not `<calc>` (once a round) or `<answer>`
costs `format_penalty`, is counted (`invalid_action`) and answered in the debater's next
conversation.

The scripted debaters (`expert_turn`) compute and answer; on `expert_mistakes` of the tasks (by
task id) the second debater first guesses a wrong number without computing, then, shown the
first's correct answer, computes and corrects itself, so the warm start shows a correction
(with one round there is nothing to correct, and it never guesses). `expert_mistake` is the
same guess for recovery demonstrations (warm_start.recovery_fraction): shown with loss mask 0,
so only the correction trains.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping
from typing import Any

from agentic_rl.envs.multiagent import (
    CALC_TOOL,
    answer_is_correct,
    calculation,
    open_conversation,
    role_reward_key,
    scripted_mistake,
)
from agentic_rl.types import Action, Observation, StepResult, Task

DEBATERS = ("first", "second", "third", "fourth", "fifth", "sixth")
"""The debaters' role names, in the order they answer; a debate with N debaters uses the first N."""
PROMPT = (
    "You are one of {count} debaters solving a math problem. To calculate, write "
    "<calc>expression</calc>; the result comes back. Then write <answer>number</answer> with "
    "only the number. After each round you see {others}: keep your answer "
    "if you are right, change it if you are wrong."
)
DEFAULT_DEBATERS = 2
NUMBERS = {2: "two", 3: "three", 4: "four", 5: "five", 6: "six"}


class DebateEnv:
    """2 to 6 debaters, `rounds` rounds on calculator word problems (module docstring)."""

    conversations = True  # rollout.mode=memory: every step opens a fresh conversation
    roles: tuple[str, ...] = DEBATERS[:DEFAULT_DEBATERS]  # an instance's: the first `debaters`
    answer_ends_episode = False  # one debater's answer does not end the debate (check_env)

    def __init__(
        self,
        rounds: int = 2,
        answer_reward: float = 0.5,
        alpha: float = 0.5,
        persuasion_reward: float = 0.25,
        format_penalty: float = 0.1,
        expert_mistakes: float = 0.25,
        debaters: int = DEFAULT_DEBATERS,
    ) -> None:
        if rounds < 1:
            raise ValueError(f"rounds must be at least 1, got {rounds}")
        if not 2 <= debaters <= len(DEBATERS):
            raise ValueError(f"debaters must be 2 to {len(DEBATERS)}, got {debaters}")
        self.roles = DEBATERS[:debaters]
        if not 0.0 <= expert_mistakes <= 1.0:
            raise ValueError(f"expert_mistakes must be in [0, 1], got {expert_mistakes}")
        self.rounds = rounds
        self.answer_reward = answer_reward
        self.alpha = alpha
        self.persuasion_reward = persuasion_reward
        self.format_penalty = format_penalty
        self.expert_mistakes = expert_mistakes
        # each debater computes and answers in every round: two conversations a round each
        self.expert_turn_limit = 2 * debaters * rounds
        others = "the other debater's answer" if debaters == 2 else "the others' answers"
        self.prompt = PROMPT.format(count=NUMBERS[debaters], others=others)
        self.tools = [CALC_TOOL]
        self.task: Task | None = None
        self.round = 1
        self.turn = 0  # index into self.roles of the debater whose conversation is open
        self.calc = ""  # the open conversation's calculation, "expression = result"
        self.answers: dict[str, list[str]] = {}  # each debater's answers, one a round

    @staticmethod
    def roles_for(options: Mapping[str, Any]) -> tuple[str, ...]:
        """The roles a debate with env.options `options` has (config validation reads them)."""
        return DEBATERS[: int(options.get("debaters", DEFAULT_DEBATERS))]

    def role(self) -> str:
        """The debater whose conversation is open."""
        return self.roles[self.turn]

    def _others(self, role: str) -> list[str]:
        return [other for other in self.roles if other != role]

    def _open(self, note: str = "") -> Observation:
        assert self.task is not None
        role = self.role()
        lines = [f"Problem: {self.task.prompt}", f"Round {self.round} of {self.rounds}."]
        if self.round > 1:
            mine, others = self.answers[role][-1], self._others(role)
            if len(others) == 1:
                theirs = f"The other debater's answer: {self.answers[others[0]][-1]}."
            else:
                listed = ", ".join(f"{other} {self.answers[other][-1]}" for other in others)
                theirs = f"The other debaters' answers: {listed}."
            lines.append(f"Your answer last round: {mine}. {theirs}")
        if self.calc:
            lines.append(f"Calculator: {self.calc}\n\nNow write <answer>number</answer>.")
        if note:
            lines.append(f"Your previous reply was rejected: {note}.")
        return open_conversation(role, self.prompt, "\n\n".join(lines))

    # -- the env contract -------------------------------------------------------------------
    def reset(self, task: Task, seed: int) -> Observation:
        del seed  # the debate is deterministic given the replies
        self.task, self.round, self.turn, self.calc = task, 1, 0, ""
        self.answers = {role: [] for role in self.roles}
        return self._open()

    def step(self, action: Action) -> StepResult:
        """Apply the open debater's reply and open the next conversation (or end the debate)."""
        assert self.task is not None, "reset first"
        if action.kind == "tool" and action.name == CALC_TOOL.name and not self.calc:
            self.calc = calculation(action.arguments[CALC_TOOL.argument])
            return StepResult(self._open(), 0.0, info={"calc_calls": 1.0})
        if action.kind != "answer":
            note = action.error or "write <calc> once a round, then <answer>"
            reopen = self._open(note)
            reopen.content, reopen.name = note, "error"
            return StepResult(reopen, -self.format_penalty, info={"invalid_action": 1.0})
        role = self.role()
        self.answers[role].append(action.text.strip())
        self.calc = ""
        if self.turn + 1 < len(self.roles):
            self.turn += 1
            return StepResult(self._open(), 0.0, info={"answers": 1.0})
        info = self._round_rewards()
        if self.round == self.rounds:
            finals = [self._correct(self.answers[r][-1]) for r in self.roles]
            team = float(all(finals))
            agreed = len({self.answers[r][-1] for r in self.roles}) == 1
            info.update({"success": team, "final_agreement": float(agreed)})
            return StepResult(None, team, terminated=True, info=info)
        self.round, self.turn = self.round + 1, 0
        return StepResult(self._open(), 0.0, info=info)

    def _round_rewards(self) -> dict[str, float]:
        """Every debater's own reward for the round that just closed (module docstring), and
        the round's counts (changed answers, corrections)."""
        info = {"answers": 1.0}
        t = self.round
        right = {r: [float(self._correct(a)) for a in self.answers[r]] for r in self.roles}
        for role in self.roles:
            mine, others = right[role], self._others(role)
            reward = self.answer_reward * mine[-1]
            if t > 1:
                reward += self.alpha * (mine[-1] - statistics.mean(mine[:-1]))
                if mine[-2] == 1.0:  # it was right: paid for each other it brought to right
                    won = sum(right[o][-2] == 0.0 and right[o][-1] == 1.0 for o in others)
                    reward += self.persuasion_reward * won / len(others)
            info[role_reward_key(role)] = reward
        if t > 1:
            info["changed_answers"] = float(
                sum(self.answers[r][-1] != self.answers[r][-2] for r in self.roles)
            )
            info["corrections"] = float(
                sum(right[r][-2] == 0.0 and right[r][-1] == 1.0 for r in self.roles)
            )
        return info

    def _correct(self, answer: str) -> bool:
        assert self.task is not None
        return answer_is_correct(self.task, answer)

    # -- the scripted debaters (warm start) ---------------------------------------------------
    def expert_turn(self) -> str:
        """The open debater's scripted reply: compute the task's expression, then answer (the
        second debater's first answer is a wrong guess on `expert_mistakes` of the tasks)."""
        assert self.task is not None, "expert_turn() before reset()"
        expression, answer = self.task.fields["expression"], self.task.answers[0]
        second_guesses = self.role() == self.roles[1] and self.round == 1 < self.rounds
        if second_guesses and scripted_mistake(self.task, self.expert_mistakes):
            return f"<answer>{int(float(answer)) + 10}</answer>"
        if not self.calc:
            return f"<calc>{expression}</calc>"
        return f"<answer>{answer}</answer>"

    def expert_mistake(self) -> str | None:
        """The second debater's first-round answer as a wrong guess, not computed (as
        `expert_mistakes` plays it), offered at that turn only. With
        warm_start.recovery_fraction it is shown untrained, so the warm start shows the
        correction in the next round without teaching the debater to guess (`expert_mistakes`
        trains its guesses: set it to 0 to keep only these)."""
        assert self.task is not None, "expert_mistake() before reset()"
        if self.role() != self.roles[1] or not self.round == 1 < self.rounds or self.calc:
            return None
        return f"<answer>{int(float(self.task.answers[0])) + 10}</answer>"
