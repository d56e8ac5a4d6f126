"""A planner and an executor answer two-hop questions together: a multi-agent search system.

Two roles act in one episode and exchange messages through the env (MATPO, Mo et al. 2025,
arXiv 2510.04678: planner and worker roles in one model, selected by their system prompts):

- the **planner** sees the question and the executor's reports so far; it either hands the
  executor a sub-question, `<task>In which company does X work?</task>`, or answers,
  `<answer>...</answer>`;
- the **executor** sees only its sub-question: it searches the two-hop world's corpus
  (`<search>query</search>`, BM25 over envs/search/multihop.py's corpus), then reads the results
  and reports one fact back, `<report>X works for Acme</report>`.

Every reply is its own conversation (rollout.mode=memory with `conversations = True`: each
conversation is a training sample of its role, tagged with `Observation.role`), so a role's
turns are its own token-native trajectories and the planner's context holds the executor's
reports as text the env wrote, never the executor's tokens. The team's reward is the answer's
exact match; every sample of an episode shares it (MATPO: each worker rollout gets its parent
planner rollout's advantage, which the group estimators' per-episode advantage gives).
`rollout.train_roles` freezes the roles not listed (their samples keep loss mask 0): a user
trains one agent inside a fixed system that way (Agent Lightning's "optimise selected agents").

A reply that is not its role's action is counted (`invalid_action`), costs `format_penalty`
and is answered in the role's next conversation; an executor that fails reports that it found
nothing. After `max_delegations` sub-questions the planner is told to answer.
"""

from __future__ import annotations

import re

from agentic_rl.envs.multiagent import open_conversation
from agentic_rl.envs.search.multihop import (
    BRIDGE_HINTS,
    get_multihop_search_tool,
    mentions,
)
from agentic_rl.retrieval.qa_corpus import DEFAULT_NUM_ENTITIES
from agentic_rl.rewards.qa import exact_match
from agentic_rl.tools.base import EnvActionTool
from agentic_rl.types import Action, Observation, StepResult, Task

PLANNER, EXECUTOR = "planner", "executor"

TASK_TOOL = EnvActionTool(
    "task", "Hand the executor one sub-question; its report comes back.", "question"
)
SEARCH_TOOL = EnvActionTool("search", "Search the knowledge base.", "query")
REPORT_TOOL = EnvActionTool("report", "Report the fact that answers your task.", "fact")

PLANNER_PROMPT = (
    "You are the planner of a team. The question needs two facts. You cannot search: give the "
    "executor one simple sub-question at a time with <task>sub-question</task> and read its "
    "report. When you know the answer, write <answer>answer</answer> with only the answer."
)
EXECUTOR_PROMPT = (
    "You are the executor of a team. Find the fact your task asks for: write "
    "<search>query</search> to search, then report the fact with <report>fact</report>."
)
_DOC_PREFIX = re.compile(r"^Doc \d+\(Title: [^)]*\)\s*")  # format_results' line head


class PlannerExecutorEnv:
    """The planner / executor team on two-hop questions (module docstring).

    Phases: "plan" (a planner conversation), "search" and "read" (the executor's two
    conversations for one sub-question). `expert_turn` writes the scripted reply of whichever
    role acts next, so warm-start data holds both roles.
    """

    conversations = True  # rollout.mode=memory: every step opens a fresh conversation
    roles = (PLANNER, EXECUTOR)

    def __init__(
        self,
        num_entities: int = DEFAULT_NUM_ENTITIES,
        corpus_seed: int = 0,
        topk: int = 2,
        max_delegations: int = 3,
        format_penalty: float = 0.1,
    ) -> None:
        if max_delegations < 1:
            raise ValueError(f"max_delegations must be at least 1, got {max_delegations}")
        self.num_entities, self.corpus_seed = num_entities, corpus_seed
        self.search = get_multihop_search_tool(num_entities, corpus_seed, topk)
        self.max_delegations = max_delegations
        self.format_penalty = format_penalty
        self.tools = [TASK_TOOL, SEARCH_TOOL, REPORT_TOOL]
        self.task: Task | None = None
        self.phase = "plan"
        self.reports: list[tuple[str, str]] = []  # (sub-question, report) in order
        self.subquestion = ""
        self.results = ""

    # -- the conversations each role sees ---------------------------------------------------
    def _planner(self, note: str = "") -> Observation:
        assert self.task is not None
        lines = [f"Question: {self.task.prompt}"]
        for k, (sub, report) in enumerate(self.reports, 1):
            lines.append(f"Sub-question {k}: {sub}\nReport {k}: {report}")
        if len(self.reports) >= self.max_delegations:
            lines.append("No sub-questions are left: answer now.")
        if note:
            lines.append(f"Your previous reply was rejected: {note}.")
        return open_conversation(PLANNER, PLANNER_PROMPT, "\n\n".join(lines))

    def _executor(self, note: str = "") -> Observation:
        text = f"Task: {self.subquestion}"
        if self.phase == "read":
            text += f"\n\nSearch results:\n{self.results}\n\nReport the fact with <report>."
        if note:
            text += f"\n\nYour previous reply was rejected: {note}."
        return open_conversation(EXECUTOR, EXECUTOR_PROMPT, text)

    def role(self) -> str:
        """The role whose conversation is open."""
        return PLANNER if self.phase == "plan" else EXECUTOR

    # -- the env contract -------------------------------------------------------------------
    def reset(self, task: Task, seed: int) -> Observation:
        for key, mine in (("num_entities", self.num_entities), ("corpus_seed", self.corpus_seed)):
            theirs = task.fields.get(key, mine)
            if theirs != mine:
                raise ValueError(
                    f"task {task.task_id} was made with {key}={theirs} but this env uses {mine}"
                )
        self.task, self.phase, self.reports = task, "plan", []
        self.subquestion = self.results = ""
        return self._planner()

    def step(self, action: Action) -> StepResult:
        """Apply the open role's reply and open the next conversation (or end with the team's
        exact match)."""
        assert self.task is not None, "reset first"
        if self.phase == "plan":
            return self._plan_step(action)
        return self._executor_step(action)

    def _invalid(self, note: str, reopen: Observation) -> StepResult:
        reopen.content, reopen.name = note, "error"
        return StepResult(reopen, -self.format_penalty, info={"invalid_action": 1.0})

    def _plan_step(self, action: Action) -> StepResult:
        assert self.task is not None
        if action.kind == "answer":
            em = exact_match(action.text, self.task.answers)
            info = {"success": em, "delegations": float(len(self.reports))}
            return StepResult(None, em, terminated=True, info=info)
        if action.kind == "tool" and action.name == TASK_TOOL.name:
            if len(self.reports) >= self.max_delegations:
                return self._invalid("no sub-questions are left; write <answer>", self._planner())
            self.subquestion = action.arguments[TASK_TOOL.argument]
            self.phase = "search"
            return StepResult(self._executor(), 0.0, info={"delegated": 1.0})
        note = action.error or "the planner writes <task>...</task> or <answer>...</answer>"
        return self._invalid(note, self._planner(note))

    def _executor_step(self, action: Action) -> StepResult:
        wanted = SEARCH_TOOL if self.phase == "search" else REPORT_TOOL
        if action.kind == "tool" and action.name == wanted.name:
            argument = action.arguments[wanted.argument]
            if wanted is SEARCH_TOOL:
                self.results = self.search(argument)
                self.phase = "read"
                return StepResult(self._executor(), 0.0, info={"searches": 1.0})
            return self._back_to_planner(argument, {})
        # A failed executor still reports, so the planner's protocol goes on.
        return self._back_to_planner(
            "(the executor found nothing)", {"invalid_action": 1.0}, -self.format_penalty
        )

    def _back_to_planner(self, report: str, info: dict, reward: float = 0.0) -> StepResult:
        self.reports.append((self.subquestion, report.strip()))
        self.phase, self.results = "plan", ""
        return StepResult(self._planner(), reward, info=info)

    # -- the scripted team (warm start) ------------------------------------------------------
    def expert_turn(self) -> str:
        """The scripted reply of the role that acts next: the planner asks for the bridge, then
        for the relation of the bridge, then answers; the executor searches its sub-question's
        entity and reports the sentence of the top result that holds the asked fact."""
        assert self.task is not None, "expert_turn() before reset()"
        fields = self.task.fields
        entity, bridge, relation = fields["entity"], fields["bridge"], fields["relation"]
        if self.phase == "plan":
            hop1 = (
                "Which company does {} work for?"
                if relation.startswith("employer")
                else ("In which town was {} born?")
            )
            if not self.reports:
                return f"<task>{hop1.format(entity)}</task>"
            if len(self.reports) == 1:
                return f"<task>{_HOP2[relation].format(bridge)}</task>"
            return f"<answer>{self.task.answers[0]}</answer>"
        hop = 1 if not self.reports else 2
        if self.phase == "search":
            query = entity if hop == 1 else f"{bridge} {BRIDGE_HINTS[relation]}"
            return f"<search>{query}</search>"
        wanted = bridge if hop == 1 else self.task.answers[0]
        sentences = [
            s
            for line in self.results.splitlines()
            for s in re.split(r"(?<=\.)\s+", _DOC_PREFIX.sub("", line))
        ]
        sentence = next((s for s in sentences if mentions(s, wanted)), wanted)
        return f"<report>{sentence.strip()}</report>"


_HOP2 = {
    "employer_city": "In which city was {} founded?",
    "employer_year": "In what year was {} founded?",
    "employer_product": "What does {} make?",
    "birthplace_river": "On which river lies {}?",
    "birthplace_year": "In what year was {} founded?",
}
