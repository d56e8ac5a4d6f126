"""A solver and a verifier answer arithmetic word problems together; both roles learn.

Two roles act in one episode and exchange messages through the env (in the spirit of MAPoRL,
Park et al. 2025, agents rewarded by a verifier, and of solver / verifier debate):

- the **solver** sees the word problem (envs/math/calculator.py's generator); it may compute
  once, `<calc>expression</calc>` (the result comes back in its next conversation), and
  proposes `<answer>number</answer>`;
- the **verifier** sees the problem and the proposed answer; it may compute once too, then
  says `<verdict>accept</verdict>` or `<verdict>reject</verdict>`. A rejected answer goes back
  to the solver (with "the verifier rejected N"), up to `max_attempts` proposals.

Rewards: the team's outcome, 1 when the accepted answer is correct (else 0, also when every
proposal was rejected), is every sample's step reward at the end. The verifier has its own
term, `verifier_reward` for each correct verdict (accepting a correct answer or rejecting a
wrong one), reported as `env/verifier_reward` (`role_reward_key`): it is
added to the verifier's samples' rewards on top of the team's, and acts on their advantages
with algo.role_groups (each role normalised within its own (task group x role) bucket). A role's
term is summed over the episode (rollout/roles.py), so with `verdict_credit="sum"` (as first
measured) every rejection, which opens another verdict, can earn the term again: a verifier
that rejects everything earns up to `max_attempts` x `verifier_reward` on a weak solver's
episodes, and accepting a right answer at once earns it once. `verdict_credit="mean"` reports
the term so that its episode sum is `verifier_reward` x the fraction of the verifier's verdicts
that were right (each verdict adds the change of that running mean), so a rejection earns no
more than an acceptance. `verdict_credit="counterfactual"` pays each verdict by what it did
better than accepting would have (a difference reward, as COMA's counterfactual baseline, Foerster
et al. 2018): `verifier_reward` x (verdict right - proposal right), so catching a wrong answer
earns `verifier_reward`, rejecting a right one costs it, and accepting earns 0 either way (the
team's outcome already pays a right acceptance). The other two credits also pay the verifier for
the solver's doing (a right acceptance needs a right proposal), which this one removes: a
verifier that accepts everything earns 0 whatever the solver does. It does not remove the pull
toward rejecting that a weak solver exerts on a verifier that cannot tell right from wrong:
rejecting everything earns `verifier_reward` x (wrong - right proposals), above 0 while most
proposals are wrong (as under "sum", whose per-verdict threshold is the same); checking earns
more than either on every proposal. The solver may have one too, `solver_reward` for each
correct proposal whatever the verdict (`env/solver_reward`; off by default, on in the recipe):
without it a solver whose verifier rejects everything sees the team's 0 on every sample and
gets no signal. On the seed whose verifier collapsed it kept the solver learning but did not
stop the verifier's collapse (docs/recipes/solver_verifier.md). What the verifier does with
right and wrong answers is reported apart (`env/verdicts`, `env/verdicts_on_wrong`,
`env/wrong_rejected`, `env/right_rejected`): the team's success alone does not tell a verifier
that checks from one that accepts everything.

Every reply is its own conversation (rollout.mode=memory, `conversations = True`), tagged with
its role, so each role's turns are its own token-native samples; with model.role_policies
each role is its own LoRA adapter (adapters) or full model (models). A reply that is not its role's action costs `format_penalty`, is
counted (`invalid_action`) and answered in the role's next conversation.

The scripted team (`expert_turn`) computes and answers; on `expert_mistakes` of the tasks (by
task id) the scripted solver first guesses a wrong answer without computing, which the scripted
verifier checks and rejects, so the warm start shows both verdicts (and trains the solver on
its guesses). `expert_mistake` is the same guess for recovery demonstrations
(warm_start.recovery_fraction): shown with loss mask 0, so only the rejection and the fix train.
"""

from __future__ import annotations

from agentic_rl.envs.multiagent import (
    CALC_TOOL,
    answer_is_correct,
    calculation,
    open_conversation,
    role_reward_key,
    scripted_mistake,
)
from agentic_rl.tools.base import EnvActionTool
from agentic_rl.types import Action, Observation, StepResult, Task

SOLVER, VERIFIER = "solver", "verifier"
ACCEPT, REJECT = "accept", "reject"
# The verdicts by kind, summed over an episode (env metrics): all verdicts, those on a wrong
# proposal, the ones of them that rejected it (their ratio: the fraction of wrong answers the
# verifier caught), and rejected right proposals (over verdicts - verdicts_on_wrong: the fraction
# of right answers it rejected)
VERDICTS = "env/verdicts"
WRONG_PROPOSALS = "env/verdicts_on_wrong"
WRONG_REJECTED = "env/wrong_rejected"
RIGHT_REJECTED = "env/right_rejected"

VERDICT_CREDITS = ("sum", "mean", "counterfactual")  # how verdicts earn the verifier's term

VERDICT_TOOL = EnvActionTool(
    "verdict", "Accept or reject the proposed answer.", "decision", choices=(ACCEPT, REJECT)
)

SOLVER_PROMPT = (
    "You are the solver of a team. Solve the math problem. To calculate, write "
    "<calc>expression</calc>; the result comes back. Then write <answer>number</answer> with "
    "only the number. A verifier checks your answer."
)
VERIFIER_PROMPT = (
    "You are the verifier of a team. Check the proposed answer to the math problem. To "
    "calculate, write <calc>expression</calc>; the result comes back. Then write "
    "<verdict>accept</verdict> if the answer is correct or <verdict>reject</verdict> if not."
)


class SolverVerifierEnv:
    """The solver / verifier team on calculator word problems (module docstring).

    Phases: "solve" (a solver conversation) and "verify" (a verifier conversation), each
    allowed one `<calc>` before its final action."""

    conversations = True  # rollout.mode=memory: every step opens a fresh conversation
    roles = (SOLVER, VERIFIER)
    answer_ends_episode = False  # the verifier reviews the solver's answer (check_env)
    expert_turn_limit = 8  # a rejected guess, then computed and accepted: 7 conversations

    def __init__(
        self,
        max_attempts: int = 2,
        verifier_reward: float = 0.5,
        solver_reward: float = 0.0,
        verdict_credit: str = "sum",
        format_penalty: float = 0.1,
        expert_mistakes: float = 0.25,
    ) -> None:
        if max_attempts < 1:
            raise ValueError(f"max_attempts must be at least 1, got {max_attempts}")
        if verdict_credit not in VERDICT_CREDITS:
            raise ValueError(
                f"verdict_credit must be one of {', '.join(VERDICT_CREDITS)}, "
                f"got {verdict_credit!r}"
            )
        if verdict_credit != "sum" and not verifier_reward:
            raise ValueError(
                f"verdict_credit={verdict_credit!r} shapes the verifier's own term, which "
                "verifier_reward=0 turns off: set verifier_reward or leave verdict_credit"
            )
        if not 0.0 <= expert_mistakes <= 1.0:
            raise ValueError(f"expert_mistakes must be in [0, 1], got {expert_mistakes}")
        self.max_attempts = max_attempts
        self.verifier_reward = verifier_reward
        self.solver_reward = solver_reward
        self.verdict_credit = verdict_credit
        self.format_penalty = format_penalty
        self.expert_mistakes = expert_mistakes
        self.tools = [CALC_TOOL, VERDICT_TOOL]
        self.task: Task | None = None
        self.phase = "solve"
        self.calc = ""  # the open conversation's calculation, "expression = result"
        self.proposals: list[str] = []  # the solver's answers so far, in order
        self.verdicts_right: list[bool] = []  # whether each verdict so far was right

    # -- the conversations each role sees ---------------------------------------------------
    def _solver(self, note: str = "") -> Observation:
        assert self.task is not None
        lines = [f"Problem: {self.task.prompt}"]
        if self.proposals:
            lines.append(f"The verifier rejected your answer {self.proposals[-1]}. Try again.")
        if self.calc:
            lines.append(f"Calculator: {self.calc}\n\nNow write <answer>number</answer>.")
        if note:
            lines.append(f"Your previous reply was rejected: {note}.")
        return open_conversation(SOLVER, SOLVER_PROMPT, "\n\n".join(lines))

    def _verifier(self, note: str = "") -> Observation:
        assert self.task is not None
        lines = [f"Problem: {self.task.prompt}", f"Proposed answer: {self.proposals[-1]}"]
        if self.calc:
            lines.append(
                f"Calculator: {self.calc}\n\nNow write <verdict>accept</verdict> or "
                "<verdict>reject</verdict>."
            )
        if note:
            lines.append(f"Your previous reply was rejected: {note}.")
        return open_conversation(VERIFIER, VERIFIER_PROMPT, "\n\n".join(lines))

    def role(self) -> str:
        """The role whose conversation is open."""
        return SOLVER if self.phase == "solve" else VERIFIER

    # -- the env contract -------------------------------------------------------------------
    def reset(self, task: Task, seed: int) -> Observation:
        self.task, self.phase, self.calc, self.proposals = task, "solve", "", []
        self.verdicts_right = []
        return self._solver()

    def step(self, action: Action) -> StepResult:
        """Apply the open role's reply and open the next conversation (or end the episode)."""
        assert self.task is not None, "reset first"
        if action.kind == "tool" and action.name == CALC_TOOL.name and not self.calc:
            self.calc = calculation(action.arguments[CALC_TOOL.argument])
            reopen = self._solver() if self.phase == "solve" else self._verifier()
            return StepResult(reopen, 0.0, info={"calc_calls": 1.0})
        if self.phase == "solve":
            return self._solve_step(action)
        return self._verify_step(action)

    def _invalid(self, note: str) -> StepResult:
        reopen = self._solver(note) if self.phase == "solve" else self._verifier(note)
        reopen.content, reopen.name = note, "error"
        return StepResult(reopen, -self.format_penalty, info={"invalid_action": 1.0})

    def _solve_step(self, action: Action) -> StepResult:
        if action.kind != "answer":
            return self._invalid(action.error or "the solver writes <calc> once, then <answer>")
        self.proposals.append(action.text.strip())
        self.phase, self.calc = "verify", ""
        info = {"proposals": 1.0}
        if self.solver_reward:  # the solver's own term: a correct proposal, whatever the verdict
            correct = float(self._is_correct(self.proposals[-1]))
            info[role_reward_key(SOLVER)] = self.solver_reward * correct
        return StepResult(self._verifier(), 0.0, info=info)

    def _verify_step(self, action: Action) -> StepResult:
        assert self.task is not None
        decision = action.arguments.get(VERDICT_TOOL.argument, "").strip().lower()
        if (
            action.kind != "tool"
            or action.name != VERDICT_TOOL.name
            or decision
            not in (
                ACCEPT,
                REJECT,
            )
        ):
            return self._invalid(
                action.error
                or "the verifier writes <calc> once, then <verdict>accept</verdict> "
                "or <verdict>reject</verdict>"
            )
        correct = self._is_correct(self.proposals[-1])
        right = (decision == ACCEPT) == correct
        info = {
            role_reward_key(VERIFIER): self._verdict_term(right, correct),
            VERDICTS: 1.0,
            # what the verifier did with right and with wrong answers: a verifier that accepts
            # everything and one that checks can have the same team success
            WRONG_PROPOSALS: float(not correct),
            WRONG_REJECTED: float(not correct and decision == REJECT),
            RIGHT_REJECTED: float(correct and decision == REJECT),
        }
        if decision == ACCEPT or len(self.proposals) >= self.max_attempts:
            team = float(decision == ACCEPT and correct)
            info.update({"success": team, "attempts": float(len(self.proposals))})
            return StepResult(None, team, terminated=True, info=info)
        self.phase, self.calc = "solve", ""
        return StepResult(self._solver(), 0.0, info=info)

    def _verdict_term(self, right: bool, proposal_right: bool) -> float:
        """This verdict's share of the verifier's own term (module docstring: `verdict_credit`):
        "sum" pays every right verdict; "mean" the change of the running fraction of right
        verdicts, so the episode's sum is `verifier_reward` x that fraction; "counterfactual"
        the verdict's gain over accepting, `verifier_reward` x (right - proposal_right)."""
        if self.verdict_credit == "counterfactual":
            return self.verifier_reward * (float(right) - float(proposal_right))
        done = self.verdicts_right
        previous = sum(done) / len(done) if done else 0.0
        done.append(right)
        if self.verdict_credit == "sum":
            return self.verifier_reward * float(right)
        return self.verifier_reward * (sum(done) / len(done) - previous)

    def _is_correct(self, answer: str) -> bool:
        assert self.task is not None
        return answer_is_correct(self.task, answer)

    # -- the scripted team (warm start) ------------------------------------------------------
    def _guesses(self) -> bool:
        """Whether the scripted solver's first proposal is a wrong guess on this task."""
        assert self.task is not None
        return scripted_mistake(self.task, self.expert_mistakes)

    def expert_turn(self) -> str:
        """The scripted reply of the role that acts next: the solver computes the task's
        expression and answers (on `expert_mistakes` of the tasks it first guesses a wrong
        number without computing); the verifier computes the expression and accepts exactly
        the correct answers."""
        assert self.task is not None, "expert_turn() before reset()"
        expression, answer = self.task.fields["expression"], self.task.answers[0]
        if self.phase == "solve":
            if not self.proposals and self._guesses():
                return f"<answer>{int(answer) + 10}</answer>"
            if not self.calc:
                return f"<calc>{expression}</calc>"
            return f"<answer>{answer}</answer>"
        if not self.calc:
            return f"<calc>{expression}</calc>"
        verdict = ACCEPT if self._is_correct(self.proposals[-1]) else REJECT
        return f"<verdict>{verdict}</verdict>"

    def expert_mistake(self) -> str | None:
        """The solver's first proposal as a guess, wrong and not computed (as `expert_mistakes`
        plays it), offered until the solver first acts. With warm_start.recovery_fraction it is
        shown untrained, so the warm start shows the verifier's rejection and the solver's
        computed answer without teaching the solver to guess (`expert_mistakes` trains its
        guesses: set it to 0 to keep only these)."""
        assert self.task is not None, "expert_mistake() before reset()"
        if self.phase != "solve" or self.proposals or self.calc:
            return None
        return f"<answer>{int(self.task.answers[0]) + 10}</answer>"
