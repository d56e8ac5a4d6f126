r"""Search agents' reward schemes for the QA envs: Search-R1, ReSearch, R1-Searcher, StepSearch.

A scheme fixes what the agent is told (the system prompt and tags), how the scripted expert
writes (thoughts, \boxed{} answers) and how an episode is scored (rewards/search.py):

| scheme               | prompt and tags                              | episode score                    |
|----------------------|----------------------------------------------|----------------------------------|
| em / f1              | the env's own, no thoughts                   | EM / F1 of the answer            |
| search_r1            | <think> each turn, <search>, <information>   | Search-R1 v0.3 EM + format       |
| research             | <think>, <search>, <result>, \boxed{} answer | F1 of \boxed{}, 0.1 good format  |
| r1_searcher_stage1   | one <think> spanning the searches            | +-1 cover-EM, +0.5 search, +0.5  |
| r1_searcher_stage2   | as stage 1                                   | F1, -2 for bad format            |
| stepsearch           | as search_r1                                 | F1 + 0.618 key match, -1 no answ |
| deepresearcher       | <think> each turn; web tools (web_qa.py)     | F1, -1 if any turn malformed     |
| asearcher(_em)       | optional <think>; web tools                  | F1 (EM) x per-turn format flags  |

The completion-level scores read the whole transcript (model turns with the inserted results),
which the env rebuilds from its history with the tag format's own rendering. The reward of each
turn is the change of the transcript's score: r_t = S(transcript_t) - S(transcript_{t-1}),
S(empty) = 0. This is potential-based shaping (Ng, Harada & Russell 1999, with potential S and
gamma = 1), so the optimal policy is unchanged, and every episode's return is S(completion)
exactly, however it ends: at an answer, or cut by a turn or token budget (where an answer-less
transcript keeps, e.g., R1-Searcher stage 2's -2), without the env knowing it was the last turn.
Search-R1 and ReSearch give 0 to any transcript without an answer, so their whole reward lands
on the answer turn, as in the papers.

Tags are this project's (Search-R1's), except ReSearch's `<result>`; R1-Searcher's own
`<|begin_of_query|>` strings are not tag-format tools, so the R1-Searcher rules are applied to
`<search>` / `<information>` (same rules, other strings). The schemes need the tag chat format
(`rollout.chat_format=tags`): hermes turns have none of these tags.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any, Literal

from agentic_rl.formats.chat import TagFormat
from agentic_rl.rewards.search import (
    asearcher_score,
    deepresearcher_score,
    r1_searcher_stage1_score,
    r1_searcher_stage2_score,
    research_score,
    search_r1_score,
    stepsearch_outcome_score,
)
from agentic_rl.rewards.search_format import DEFAULT_TAGS, RESEARCH_TAGS, SearchTags, extract_boxed
from agentic_rl.rewards.step_search import split_documents, step_search_rewards
from agentic_rl.tools.base import Tool
from agentic_rl.types import Action, Observation, Task

RewardKind = Literal[
    "em",
    "f1",
    "search_r1",
    "research",
    "r1_searcher_stage1",
    "r1_searcher_stage2",
    "stepsearch",
    "deepresearcher",
    "asearcher",
    "asearcher_em",
]
Thoughts = Literal["none", "per_turn", "spanning"]

_TASK = "The question needs two facts: find the first, then search for the entity it names. "
SEARCH_R1_PROMPT = (
    "Answer the given question. You must conduct reasoning inside <think> and </think> first "
    "every time you get new information. After reasoning, if you find you lack some knowledge, "
    "you can call a search engine by <search> query </search> and it will return the top "
    "searched results between <information> and </information>. You can search as many times "
    "as you want. " + _TASK + "If you find no further external knowledge needed, you can "
    "directly provide the answer inside <answer> and </answer>, without detailed illustrations. "
    "For example, <answer> Beijing </answer>."
)
RESEARCH_PROMPT = (
    "You are a helpful assistant that can solve the given question step by step with the help "
    "of the search tool. Given a question, you need to first think about the reasoning process "
    "in the mind and then provide the answer. During thinking, you can invoke the search tool to "
    "search for fact information about specific topics if needed. " + _TASK + "The reasoning "
    "process and answer are enclosed within <think> </think> and <answer> </answer> tags "
    "respectively, and the search query and result are enclosed within <search> </search> and "
    "<result> </result> tags respectively. For example, <think> This is the reasoning process. "
    "</think> <search> search query here </search> <result> search result here </result> "
    "<think> This is the reasoning process. </think> <answer> The final answer is "
    "\\boxed{answer here} </answer>. In the last part of the answer, the final exact answer is "
    "enclosed within \\boxed{} with latex format."
)
R1_SEARCHER_PROMPT = (
    "The user asks a question, and the assistant solves it. The assistant first thinks about "
    "the reasoning process in the mind and then provides the final answer. The reasoning "
    "process is enclosed within <think> </think> and the answer within <answer> </answer>. "
    "During thinking, the assistant can search for information by writing <search> query "
    "</search>; the results appear between <information> and </information>, and the thinking "
    "goes on. " + _TASK + "Write exactly one <think> ... </think> holding all the searches, "
    "then <answer> answer </answer> with only the answer inside."
)

ScoreFn = Callable[[str, Task], float]


def _golds(task: Task) -> list[str]:
    return list(task.answers)


@dataclass(frozen=True)
class Scheme:
    """A reward scheme: its completion score (None = the env scores the answer alone), tags,
    system prompt (None = the env's), the expert's thought layout and answer wrapping."""

    name: str
    score: ScoreFn | None
    tags: SearchTags = DEFAULT_TAGS
    prompt: str | None = None
    thoughts: Thoughts = "none"
    boxed: bool = False

    def answer_text(self, text: str) -> str:
        r"""The answer inside an <answer> span's text (the \boxed{} content for ReSearch)."""
        if not self.boxed:
            return text
        return extract_boxed(text) or ""


SCHEMES: dict[str, Scheme] = {
    "em": Scheme("em", None),
    "f1": Scheme("f1", None),
    "search_r1": Scheme(
        "search_r1",
        lambda text, task: search_r1_score(text, _golds(task)),
        prompt=SEARCH_R1_PROMPT,
        thoughts="per_turn",
    ),
    "research": Scheme(
        "research",
        lambda text, task: research_score(text, _golds(task), tags=RESEARCH_TAGS),
        tags=RESEARCH_TAGS,
        prompt=RESEARCH_PROMPT,
        thoughts="per_turn",
        boxed=True,
    ),
    "r1_searcher_stage1": Scheme(
        "r1_searcher_stage1",
        lambda text, task: r1_searcher_stage1_score(text, _golds(task)),
        prompt=R1_SEARCHER_PROMPT,
        thoughts="spanning",
    ),
    "r1_searcher_stage2": Scheme(
        "r1_searcher_stage2",
        lambda text, task: r1_searcher_stage2_score(text, _golds(task)),
        prompt=R1_SEARCHER_PROMPT,
        thoughts="spanning",
    ),
    "stepsearch": Scheme(
        "stepsearch",
        lambda text, task: stepsearch_outcome_score(
            text, _golds(task), search_keys=task.fields.get("search_keys") or []
        ),
        prompt=SEARCH_R1_PROMPT,
        thoughts="per_turn",
    ),
    # web research (envs/search/web_qa.py gives the prompt and the expert): every tool tag is an action
    "deepresearcher": Scheme(
        "deepresearcher",
        lambda text, task: deepresearcher_score(text, _golds(task)),
        thoughts="per_turn",
    ),
    "asearcher": Scheme(
        "asearcher", lambda text, task: asearcher_score(text, _golds(task)), thoughts="per_turn"
    ),
    "asearcher_em": Scheme(
        "asearcher_em",
        lambda text, task: asearcher_score(text, _golds(task), metric="em"),
        thoughts="per_turn",
    ),
}


def get_scheme(name: str) -> Scheme:
    """The scheme called `name`; ValueError naming the valid ones otherwise."""
    if name not in SCHEMES:
        raise ValueError(f"reward must be one of {', '.join(SCHEMES)}; got {name!r}")
    return SCHEMES[name]


class RetaggedTool:
    """A tool whose results the tag format wraps in `<result_tag>` (ReSearch's `<result>`).

    Delegates everything else (calls, `set_task`, `retrieve`) to the wrapped tool, so a shared
    index is not rebuilt."""

    def __init__(self, tool: Tool, result_tag: str) -> None:
        self.tool = tool
        self.name = tool.name
        self.description = tool.description
        self.parameters = tool.parameters
        self.result_tag = result_tag

    def __call__(self, **arguments: Any) -> str:
        return self.tool(**arguments)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.tool, name)


def retag(tools: Sequence[Tool], scheme: Scheme) -> list[Tool]:
    """`tools` with their results wrapped in the scheme's result tag."""
    tag = scheme.tags.result[0][1:-1]
    if tag == "information":
        return list(tools)
    return [RetaggedTool(tool, tag) for tool in tools]


def transcript(history: Sequence[tuple[Action, Observation | None]], fmt: TagFormat) -> str:
    """The completion as the rollout builds it in the tag format: each model turn's raw text,
    then its observation rendered by `fmt` (results in the tool's tag, errors in <error>).

    Inserted text is data, not the model's markup: its "<" become "&lt;", so an error hint that
    names <answer>...</answer> (or a document quoting a tag) never counts as the model's tags."""
    parts = []
    for action, observation in history:
        rendered = action.kind in ("tool", "answer") and not action.raw
        parts.append(fmt.render_action(action) if rendered else action.raw)
        if observation is not None:
            inert = replace(observation, content=observation.content.replace("<", "&lt;"))
            parts.append(fmt.render_observation(inert))
    return "".join(parts)


_ACTION = re.compile(r"<(\w+)>(.*?)</\1>", re.DOTALL)


def dress_expert_turn(scheme: Scheme, text: str, first: bool) -> str:
    r"""The scripted expert's plain `<search>q</search>` / `<answer>a</answer>` turn written the
    scheme's way: a thought first (one <think> per turn, or one spanning every turn as in
    R1-Searcher) and the answer in \boxed{} for ReSearch."""
    match = _ACTION.search(text)
    if scheme.thoughts == "none" or match is None:
        return text
    name, body = match.group(1), match.group(2).strip()
    final = name == "answer"
    if final and scheme.boxed:
        text = f"<answer>The final answer is \\boxed{{{body}}}</answer>"
    thought = f"The documents say the answer is {body}." if final else f"I should look up {body}."
    if scheme.thoughts == "per_turn":
        return f"<think>{thought}</think>{text}"
    opening = "<think>" if first else ""
    closing = "</think>" if final else " "
    return f"{opening}{thought}{closing}{text}"


class SchemeScorer:
    """Per-episode state of a scheme's rewards: the score booked so far and, for StepSearch's
    step rewards, the documents of each search step."""

    def __init__(self, scheme: Scheme, step_reward_weight: float = 0.0) -> None:
        if step_reward_weight < 0:
            raise ValueError(f"step_reward_weight must be >= 0, got {step_reward_weight}")
        self.scheme = scheme
        self.step_reward_weight = step_reward_weight
        self.booked = 0.0
        self.steps: list[list[str]] = []

    @property
    def active(self) -> bool:
        """Whether this scorer changes the env's own rewards at all."""
        return self.scheme.score is not None or self.step_reward_weight > 0

    def reset(self) -> None:
        self.booked = 0.0
        self.steps = []

    def outcome_delta(self, text: str, task: Task) -> tuple[float, float]:
        """(S(text) - the score booked so far, S(text)); books S(text)."""
        assert self.scheme.score is not None
        score = float(self.scheme.score(text, task))
        delta, self.booked = score - self.booked, score
        return delta, score

    def step_reward(self, observation: str, task: Task) -> float:
        """StepSearch's r_t = w (IG_t - RP_t) for a search step that returned `observation`,
        against the task's gold support documents (rewards/step_search.py)."""
        self.steps.append(split_documents(observation))
        golds = list(task.fields.get("support_docs") or [])
        return step_search_rewards(self.steps, golds, self.step_reward_weight)[-1]
