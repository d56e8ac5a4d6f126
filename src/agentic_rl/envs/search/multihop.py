"""Two-hop search QA over the generated world: questions that need two searches.

"In which city was the employer of X founded?" needs X's page (which names the employer, the
*bridge* entity) and then the employer's page (which names the city). This is the HotpotQA /
2Wiki "bridge" question type that Search-R1, R1-Searcher and StepSearch train on, built over the
fictional world of qa_corpus.py so the answers cannot come from a model's memory.

The corpus is a NEW one (`build_multihop_corpus`): the person documents of `build_world` verbatim,
plus organisation and city documents whose facts are stored (the single-hop corpus writes random
city/company facts straight into text). Organisation and city documents never mention people,
and a pair is only asked when its answer is absent from the person's page, so the first search
(the person) cannot answer the question: the second hop is required.

Train and eval questions are about disjoint people (`split_people`); organisations and cities
are shared, as bridges are in HotpotQA, so a question is only answerable by finding the bridge.
"""

from __future__ import annotations

import dataclasses
import random
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Literal

from agentic_rl.envs.base import ToolEnv
from agentic_rl.envs.search.schemes import (
    RewardKind,
    SchemeScorer,
    dress_expert_turn,
    get_scheme,
    retag,
    transcript,
)
from agentic_rl.envs.search.single_hop import check_task_world, schedule_questions
from agentic_rl.formats.chat import TagFormat
from agentic_rl.retrieval.qa_corpus import (
    DEFAULT_NUM_ENTITIES,
    PRODUCTS,
    Person,
    World,
    _unique_words,
    _word,
    build_world,
    split_people,
)
from agentic_rl.rewards.qa import exact_match, f1_score, normalize_answer
from agentic_rl.tools.base import Tool
from agentic_rl.tools.search import BM25Search
from agentic_rl.types import Action, Observation, StepResult, Task

Split = Literal["train", "eval"]

SYSTEM_PROMPT = (
    "Answer the question using the search tool. The question needs two facts: find the first, "
    "then search for the entity it names. To search, write <search>query</search> and the "
    "results will appear between <information> and </information>. Search as often as you need. "
    "When you know the answer, write <answer>answer</answer> with only the answer inside."
)

# relation -> (first hop attribute of the person, question wordings)
QUESTIONS: dict[str, list[str]] = {
    "employer_city": [
        "In which city was the employer of {name} founded?",
        "Where was the company that employs {name} founded?",
        "In which city was {name}'s employer founded?",
    ],
    "employer_year": [
        "In what year was the employer of {name} founded?",
        "When was the company {name} works for founded?",
        "What is the founding year of {name}'s employer?",
    ],
    "employer_product": [
        "What does the employer of {name} make?",
        "What does the company {name} works for produce?",
        "Which product is made by {name}'s employer?",
    ],
    "birthplace_river": [
        "On which river lies the town where {name} was born?",
        "Which river flows through the birthplace of {name}?",
        "What river is {name}'s home town on?",
    ],
    "birthplace_year": [
        "In what year was the town where {name} was born founded?",
        "When was the birthplace of {name} founded?",
        "What is the founding year of {name}'s home town?",
    ],
}
# Words the expert adds to its second (bridge) query.
BRIDGE_HINTS = {
    "employer_city": "founded city",
    "employer_year": "founded year",
    "employer_product": "makes",
    "birthplace_river": "river",
    "birthplace_year": "founded year",
}
_FEATURES = ["bridges", "markets", "gardens", "mills", "towers", "festivals", "harbours", "walls"]


@dataclass(frozen=True)
class Organisation:
    """A company of the world with stored facts (its page is the second hop)."""

    doc_id: str
    name: str
    city: str
    founded_year: int
    product: str


@dataclass(frozen=True)
class City:
    """A town of the world with stored facts."""

    doc_id: str
    name: str
    river: str
    founded_year: int


@dataclass
class MultiHopWorld:
    """The base world's people plus organisations and cities with stored facts, and the corpus."""

    base: World
    organisations: dict[str, Organisation]
    cities: dict[str, City]
    corpus: list[dict[str, str]] = field(default_factory=list)

    def bridge(self, person: Person, relation: str) -> Organisation | City:
        """The second-hop entity of `relation` for `person`."""
        if relation.startswith("employer"):
            return self.organisations[person.employer]
        return self.cities[person.birthplace]

    def answer(self, person: Person, relation: str) -> str:
        """The gold answer of `relation` for `person`, as text."""
        target = self.bridge(person, relation)
        key = relation.split("_", 1)[1]
        if isinstance(target, Organisation):
            return {"city": target.city, "year": str(target.founded_year)}.get(key, target.product)
        return target.river if key == "river" else str(target.founded_year)


def _taken_names(world: World) -> set[str]:
    names = set()
    for person in world.people:
        names.update({person.first.lower(), person.last.lower()})
    names.update(city.lower() for city in world.cities)
    names.update(company.split()[0].lower() for company in world.companies)
    return names


@lru_cache(maxsize=8)
def build_multihop_world(num_entities: int = DEFAULT_NUM_ENTITIES, seed: int = 0) -> MultiHopWorld:
    """Generate the two-hop world deterministically from (num_entities, seed). Cached: read-only.

    Corpus ids: people keep ids 0..num_entities-1 (their documents are the base world's), then
    one document per city, then one per organisation.
    """
    base = build_world(num_entities, seed)
    rng = random.Random(f"multihop/world/{seed}")
    rivers = _unique_words(rng, len(base.cities), lambda r: _word(r, 2), _taken_names(base))
    corpus = [dict(doc) for doc in base.corpus[:num_entities]]
    cities: dict[str, City] = {}
    for name, river in zip(base.cities, rivers, strict=True):
        city = City(str(len(corpus)), name, river, rng.randint(1100, 1799))
        cities[name] = city
        text = (
            f"{name} is a town on the river {river}. It was founded in {city.founded_year} and "
            f"is known for its {rng.choice(_FEATURES)}."
        )
        corpus.append({"id": city.doc_id, "contents": f'"{name}"\n{text}'})
    organisations: dict[str, Organisation] = {}
    for name in base.companies:
        org = Organisation(
            str(len(corpus)),
            name,
            rng.choice(base.cities),
            rng.randint(1800, 1949),
            rng.choice(PRODUCTS),
        )
        organisations[name] = org
        text = (
            f"{name} is a company founded in {org.founded_year} in the city of {org.city}. "
            f"It makes {org.product}."
        )
        corpus.append({"id": org.doc_id, "contents": f'"{name}"\n{text}'})
    return MultiHopWorld(base=base, organisations=organisations, cities=cities, corpus=corpus)


def build_multihop_corpus(
    num_entities: int = DEFAULT_NUM_ENTITIES, seed: int = 0
) -> list[dict[str, str]]:
    """The Search-R1-format corpus of the two-hop world (a fresh list of fresh dicts)."""
    return [dict(doc) for doc in build_multihop_world(num_entities, seed).corpus]


def mentions(text: str, answer: str) -> bool:
    """Whether the normalised `answer` occurs in the normalised `text` as whole words."""
    gold = normalize_answer(answer)
    return bool(gold) and f" {gold} " in f" {normalize_answer(text)} "


def _pairs(world: MultiHopWorld, people: list[Person]) -> list[tuple[Person, str]]:
    # Skip pairs whose answer is on the person's own page: one search would answer them.
    pairs = []
    for person in people:
        page = world.corpus[int(person.doc_id)]["contents"]
        pairs.extend(
            (person, relation)
            for relation in QUESTIONS
            if not mentions(page, world.answer(person, relation))
        )
    return pairs


def make_multihop_tasks(
    split: Split,
    n: int,
    seed: int = 0,
    *,
    num_entities: int = DEFAULT_NUM_ENTITIES,
    corpus_seed: int = 0,
) -> list[Task]:
    """`n` two-hop questions about the `split` people of the world `(num_entities, corpus_seed)`.

    `seed` orders and words the questions. Each (person, relation) pair is used once before any
    is reused with another wording; asking for more than pairs x wordings raises ValueError.
    `fields` hold both support documents (ids and contents, person first), the bridge entity and
    StepSearch-style `search_keys` (one list of accepted phrasings per hop).
    """
    world = build_multihop_world(num_entities, corpus_seed)
    schedule = schedule_questions(
        _pairs(world, split_people(world.base, split)),
        n,
        min(len(templates) for templates in QUESTIONS.values()),
        random.Random(f"multihop/tasks/{split}/{seed}"),
        what=f"{split} two-hop questions",
        num_entities=num_entities,
    )
    tasks = []
    for (person, relation), wording in schedule:
        bridge = world.bridge(person, relation)
        support = [person.doc_id, bridge.doc_id]
        tasks.append(
            Task(
                task_id=f"mhqa-{split}-{person.doc_id}-{relation}-{wording}",
                prompt=QUESTIONS[relation][wording].format(name=person.name),
                answers=[world.answer(person, relation)],
                fields={
                    "support_doc_ids": support,
                    "support_docs": [world.corpus[int(i)]["contents"] for i in support],
                    "entity": person.name,
                    "bridge": bridge.name,
                    "relation": relation,
                    "hops": 2,
                    "search_keys": [[person.name], [bridge.name]],
                    "num_entities": num_entities,
                    "corpus_seed": corpus_seed,
                },
            )
        )
    return tasks


@lru_cache(maxsize=8)
def get_multihop_search_tool(
    num_entities: int = DEFAULT_NUM_ENTITIES, corpus_seed: int = 0, topk: int = 3
) -> BM25Search:
    """The BM25 tool over the two-hop corpus, built once per process and shared (read-only)."""
    return BM25Search(build_multihop_world(num_entities, corpus_seed).corpus, topk=topk)


@lru_cache(maxsize=8)
def remote_search_tool(url: str, topk: int = 3) -> Tool:
    """The `search` tool over a retrieval server, one per (url, topk) per process (its HTTP
    connection pool is shared by every env)."""
    from agentic_rl.retrieval.client import SearchClientTool

    return SearchClientTool(url, topk=topk, timeout_s=5.0, retries=2, backoff_s=0.2)


class MultiHopQAEnv(ToolEnv):
    """Two-hop questions about fictional people; a BM25 `search` tool; a search agent's reward.

    `reward` picks the scheme (envs/search/schemes.py): "em" / "f1" score the answer alone;
    "search_r1", "research", "r1_searcher_stage1", "r1_searcher_stage2" and "stepsearch" score
    the whole transcript by that system's rules, with its prompt, tags and expert style; the
    answer's EM is the `success` metric in every scheme. `step_reward_weight` > 0 adds
    StepSearch's step reward w (IG_t - RP_t) to each successful search turn (0.6 in the paper).

    `tools` replaces the BM25 tool (a retrieval-server client, a ZeroSearch simulated engine's
    tool, web tools over `LocalFakeProvider.from_corpus(build_multihop_corpus())`...). Tools with
    a `set_task(question, answers)` method are pointed at each task on reset. The scripted expert
    writes `<search>` calls, so it needs a tool named "search". `retriever_url` (env.options;
    e.g. `agentic-rl serve-retriever` over this world's corpus) searches a retrieval server
    instead of the in-process BM25: a server that is down is an infrastructure failure, not an
    observation (retrieval/client.py, train/collect.py).
    """

    def __init__(
        self,
        num_entities: int = DEFAULT_NUM_ENTITIES,
        corpus_seed: int = 0,
        topk: int = 3,
        reward: RewardKind = "em",
        format_penalty: float = 0.1,
        tool_timeout_s: float = 10.0,
        max_tool_output_chars: int = 2000,
        tool_call_reward: float = 0.0,
        tools: list[Tool] | None = None,
        step_reward_weight: float = 0.0,
        retriever_url: str = "",
    ) -> None:
        self.scheme = get_scheme(reward)
        self.scorer = SchemeScorer(self.scheme, step_reward_weight)
        if not tools and retriever_url:
            tools = [remote_search_tool(retriever_url, topk)]
        tools = (
            list(tools) if tools else [get_multihop_search_tool(num_entities, corpus_seed, topk)]
        )
        super().__init__(
            retag(tools, self.scheme),
            format_penalty=format_penalty,
            tool_timeout_s=tool_timeout_s,
            max_tool_output_chars=max_tool_output_chars,
            tool_call_reward=tool_call_reward,
        )
        self.num_entities = num_entities
        self.corpus_seed = corpus_seed
        self.reward = reward
        self.fmt = TagFormat(self.tools)  # renders observations as the rollout inserts them

    def system_prompt(self) -> str:
        return self.scheme.prompt or SYSTEM_PROMPT

    def reset(self, task: Task, seed: int) -> Observation:
        check_task_world(task, self.num_entities, self.corpus_seed)
        for tool in self.tools:
            if callable(getattr(tool, "set_task", None)):
                tool.set_task(task.prompt, task.answers)
        self.scorer.reset()
        return super().reset(task, seed)

    def score_answer(self, text: str) -> float:
        """EM (or F1) of the answer; under a transcript scheme, EM, which `step` replaces with the
        scheme's reward (ToolEnv books it as `success`)."""
        assert self.task is not None
        if self.reward == "f1":
            return f1_score(text, self.task.answers)
        return exact_match(self.scheme.answer_text(text), self.task.answers)

    def step(self, action: Action) -> StepResult:
        """ToolEnv's step, then the scheme's reward: the change of the transcript's score (see
        envs/search/schemes.py) plus StepSearch's step reward on a search that returned results.
        Per-turn penalties and tool-call rewards of ToolEnv stay (0 in the search recipes)."""
        result = super().step(action)
        if not self.scorer.active:
            return result
        assert self.task is not None
        info = dict(result.info)
        reward = result.reward
        if self.scheme.score is not None:
            if action.kind == "answer":
                reward = 0.0  # the answer's EM went to `success`; the scheme scores the text
            delta, info["scheme_score"] = self.scorer.outcome_delta(
                transcript(self.history, self.fmt), self.task
            )
            reward += delta
        obs = result.observation
        searched = action.kind == "tool" and obs is not None and obs.name == action.name
        if self.scorer.step_reward_weight > 0 and searched and not info.get("tool_error"):
            info["step_reward"] = self.scorer.step_reward(obs.content, self.task)
            reward += info["step_reward"]
        return dataclasses.replace(result, reward=reward, info=info)

    def expert_turn(self) -> str:
        """Search the person; then the bridge entity named on their page; then answer.

        If the bridge is not in the first results, the expert searches the person again with
        words about the relation, then the bridge. It answers after the bridge search (or after
        four searches), so demonstrations always show both hops. The turn is written the
        scheme's way (thoughts, \\boxed{} answers: `dress_expert_turn`).
        """
        return dress_expert_turn(self.scheme, self._expert_action(), first=not self.history)

    def _expert_action(self) -> str:
        assert self.task is not None, "expert_turn() before reset()"
        fields = self.task.fields
        entity, bridge, relation = fields["entity"], fields["bridge"], fields["relation"]
        queries = [a.arguments.get("query", "") for a, _ in self.history if a.kind == "tool"]
        bridge_searched = any(bridge in query for query in queries)
        if not queries:
            return f"<search>{entity}</search>"
        if not bridge_searched and len(queries) < 4:
            seen = any(mentions(obs.content, bridge) for _, obs in self.history if obs is not None)
            if seen:
                return f"<search>{bridge} {BRIDGE_HINTS[relation]}</search>"
            hop1 = "works for company" if relation.startswith("employer") else "born city"
            return f"<search>{entity} {hop1}</search>"
        if not mentions(self.last_observation(), self.task.answers[0]) and len(queries) < 4:
            return f"<search>{bridge}</search>"
        return f"<answer>{self.task.answers[0]}</answer>"
