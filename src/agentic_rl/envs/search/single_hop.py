"""Single-hop search QA over a generated fictional corpus, with a BM25 `search` tool.

Answers exist only in the project's own corpus (see qa_corpus.py), so reward comes from searching,
reading and copying, the Search-R1 skill set, on a task a CPU-sized model can learn. Train and
eval questions are about disjoint sets of people in the same corpus, so eval answers cannot be
memorised in training.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from functools import lru_cache
from typing import Literal, TypeVar

from agentic_rl.envs.base import ToolEnv
from agentic_rl.retrieval.qa_corpus import DEFAULT_NUM_ENTITIES, build_world, split_people
from agentic_rl.rewards.qa import cover_exact_match, exact_match
from agentic_rl.tools.search import BM25Search
from agentic_rl.types import Observation, Task

Split = Literal["train", "eval"]
Pair = TypeVar("Pair")

SYSTEM_PROMPT = (
    "Answer the question using the search tool. To search, write <search>query</search> and the "
    "results will appear between <information> and </information>. Search as often as you need. "
    "When you know the answer, write <answer>answer</answer> with only the answer inside."
)

QUESTIONS: dict[str, list[str]] = {
    "birthplace": [
        "In which city was {name} born?",
        "Where was {name} born?",
        "What is the birthplace of {name}?",
    ],
    "birth_year": [
        "In what year was {name} born?",
        "When was {name} born?",
        "What is the birth year of {name}?",
    ],
    "profession": [
        "What is the profession of {name}?",
        "What does {name} do for a living?",
        "What job does {name} have?",
    ],
    "instrument": [
        "Which instrument does {name} play?",
        "What musical instrument does {name} play?",
        "What instrument is {name} known for playing?",
    ],
    "employer": [
        "Which company does {name} work for?",
        "What company employs {name}?",
        "Who is the employer of {name}?",
    ],
}
# Words the expert adds to its second query when the first did not show the answer.
QUERY_HINTS = {
    "birthplace": "born city",
    "birth_year": "born year",
    "profession": "profession",
    "instrument": "plays instrument",
    "employer": "works for company",
}


def schedule_questions(
    pairs: Sequence[Pair],
    n: int,
    wordings: int,
    rng: random.Random,
    *,
    what: str,
    num_entities: int,
) -> list[tuple[Pair, int]]:
    """`n` (pair, wording index) draws: every pair once before any pair comes again, each time
    with its next wording, from a start wording drawn per pair.

    Why: a task set should cover as many (person, fact) pairs as it can, and a repeat should be
    a new wording rather than the same prompt twice. Asking for more than pairs x wordings
    raises ValueError (`what` names the questions, e.g. "eval two-hop questions").
    """
    if n > len(pairs) * wordings:
        raise ValueError(
            f"at most {len(pairs) * wordings} {what} exist for num_entities="
            f"{num_entities}; asked for {n} (raise num_entities)"
        )
    order = list(pairs)
    rng.shuffle(order)
    offsets = [rng.randrange(wordings) for _ in order]
    schedule = []
    for i in range(n):
        round_, j = divmod(i, len(order))
        schedule.append((order[j], (offsets[j] + round_) % wordings))
    return schedule


def check_task_world(task: Task, num_entities: int, corpus_seed: int) -> None:
    """Raise ValueError when `task` was made over another world than `(num_entities,
    corpus_seed)`.

    Why: a question about a person of another generated world is unanswerable with this env's
    corpus, so it would train on noise; a task without these fields is taken as this world's.
    """
    for key, mine in (("num_entities", num_entities), ("corpus_seed", corpus_seed)):
        theirs = task.fields.get(key, mine)
        if theirs != mine:
            raise ValueError(
                f"task {task.task_id} was made with {key}={theirs} but this env uses {mine}"
            )


def make_search_qa_tasks(
    split: Split,
    n: int,
    seed: int = 0,
    *,
    num_entities: int = DEFAULT_NUM_ENTITIES,
    corpus_seed: int = 0,
) -> list[Task]:
    """`n` single-hop questions about the `split` people of the world `(num_entities, corpus_seed)`.

    `seed` only orders and words the questions; the corpus is fixed by `corpus_seed`. Each
    (person, attribute) pair is used once before any is reused with another wording; asking
    for more than pairs x wordings raises ValueError.
    """
    world = build_world(num_entities, corpus_seed)
    people = split_people(world, split)
    pairs = [(person, attribute) for person in people for attribute in QUESTIONS]
    schedule = schedule_questions(
        pairs,
        n,
        min(len(templates) for templates in QUESTIONS.values()),
        random.Random(f"search_qa/tasks/{split}/{seed}"),
        what=f"{split} questions",
        num_entities=num_entities,
    )
    tasks = []
    for (person, attribute), wording in schedule:
        tasks.append(
            Task(
                task_id=f"sqa-{split}-{person.doc_id}-{attribute}-{wording}",
                prompt=QUESTIONS[attribute][wording].format(name=person.name),
                answers=[person.attribute(attribute)],
                fields={
                    "support_doc_ids": [person.doc_id],
                    "entity": person.name,
                    "attribute": attribute,
                    "num_entities": num_entities,
                    "corpus_seed": corpus_seed,
                },
            )
        )
    return tasks


@lru_cache(maxsize=8)
def get_search_tool(
    num_entities: int = DEFAULT_NUM_ENTITIES, corpus_seed: int = 0, topk: int = 3
) -> BM25Search:
    """The BM25 tool over a world's corpus, built once per process and shared (it is read-only).

    Many envs are created per batch; indexing the corpus for each would dominate reset time.
    """
    return BM25Search(build_world(num_entities, corpus_seed).corpus, topk=topk)


class SearchQAEnv(ToolEnv):
    """Questions about fictional people; a `search` tool over their corpus; exact-match reward."""

    def __init__(
        self,
        num_entities: int = DEFAULT_NUM_ENTITIES,
        corpus_seed: int = 0,
        topk: int = 3,
        format_penalty: float = 0.1,
        tool_timeout_s: float = 10.0,
        max_tool_output_chars: int = 2000,
        tool_call_reward: float = 0.0,
    ) -> None:
        super().__init__(
            [get_search_tool(num_entities, corpus_seed, topk)],
            format_penalty=format_penalty,
            tool_timeout_s=tool_timeout_s,
            max_tool_output_chars=max_tool_output_chars,
            tool_call_reward=tool_call_reward,
        )
        self.num_entities = num_entities
        self.corpus_seed = corpus_seed

    def system_prompt(self) -> str:
        return SYSTEM_PROMPT

    def reset(self, task: Task, seed: int) -> Observation:
        check_task_world(task, self.num_entities, self.corpus_seed)
        return super().reset(task, seed)

    def score_answer(self, text: str) -> float:
        assert self.task is not None
        return exact_match(text, self.task.answers)

    def expert_turn(self) -> str:
        """Search the person's name; answer once their document showed the answer, else search
        once more with the attribute's words (this also recovers from `expert_mistake`)."""
        assert self.task is not None, "expert_turn() before reset()"
        fields = self.task.fields
        searches = self.num_tool_calls()
        shown = self.last_observation()
        # Their own document (titled with the name): another person's may hold the same city.
        seen = f'"{fields["entity"]}"' in shown and cover_exact_match(shown, self.task.answers) > 0
        if searches == 0:
            return f"<search>{fields['entity']}</search>"
        if not seen and searches == 1:
            return f"<search>{fields['entity']} {QUERY_HINTS[fields['attribute']]}</search>"
        return f"<answer>{self.task.answers[0]}</answer>"

    def expert_mistake(self) -> str | None:
        """The first search, for the person's name misspelt as the policy misspells it (one
        letter after the first dropped from one part), chosen among those whose top k leaves
        the person's document out; None after the first search, and where no such misspelling
        exists. The episode's seed picks it.

        Why: the policy's own misspelt searches return someone else's document and it answers
        from that (bench/search_failures.py, `query_misspelled`); the scripted expert never
        misspells, so no demonstration shows the recovery, a second search, without this."""
        assert self.task is not None, "expert_mistake() before reset()"
        if self.num_tool_calls():
            return None
        name, doc_id = self.task.fields["entity"], str(self.task.fields["support_doc_ids"][0])
        parts = name.split()
        misspelt = [
            " ".join([*parts[:i], part[:j] + part[j + 1 :], *parts[i + 1 :]])
            for i, part in enumerate(parts)
            for j in range(1, len(part))
        ]
        tool = self.tools[0]
        assert isinstance(tool, BM25Search)
        hits = tool.retrieve(misspelt)
        missing = [
            q
            for q, top in zip(misspelt, hits, strict=True)
            if all(hit["document"]["id"] != doc_id for hit in top)
        ]
        if not missing:
            return None
        query = random.Random(f"search_qa/mistake/{self.task.task_id}/{self.seed}").choice(missing)
        return f"<search>{query}</search>"
