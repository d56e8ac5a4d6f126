"""Long-document QA in the style of RULER's HotpotQA task: the facts that answer a question are
scattered among many distractor passages, in documents of any length (2K to 256K+ tokens).

MemAgent (Yu et al. 2025) trains on HotpotQA gold paragraphs hidden among distractor
paragraphs (up to 200 documents, ~32K tokens) and evaluates up to 3.5M tokens. Here the world
is fictional and generated offline from a seed (syllable names nobody can know), so the only way
to answer is to read the document:

- hops=1: "In which city was Dorak Venlis born?" - one supporting passage about the person;
- hops=2: "In which city was the company that Dorak Venlis works for founded?" - the person's
  passage names the company (the bridge), the company's passage names the city, as HotpotQA's
  bridge questions do.

Distractor passages use the same sentence templates about other people and companies (so the
answer cannot be found by matching "was born in"), and the gold passages sit at random depths.
A task stores only the recipe of its document (`fields["document"]`: seed, target length, the
gold passages), not its text: `document_text(task)` rebuilds it deterministically, so thousands
of 256K-token tasks cost nothing until read. A user's own `{context, question, answers}` JSONL
(envs/task_files.py) puts the text in `fields["context"]`, which `document_text` returns as is.

Lengths are targets in tokens of the bundled tokenizer, estimated at `CHARS_PER_TOKEN` (measured
on these passages); the rollout reports the exact token count it read.
"""

from __future__ import annotations

import random
from typing import Any, Literal

from agentic_rl.types import Task

Split = Literal["train", "eval"]

CHARS_PER_TOKEN = 2.67  # SmolLM2's tokenizer on these passages (syllable names split finely)
_ONSETS = ["b", "d", "f", "g", "k", "l", "m", "n", "p", "r", "s", "t", "v", "z", "br", "dr", "st"]
_VOWELS = ["a", "e", "i", "o", "u", "a", "e", "o"]
_CODAS = ["n", "r", "l", "s", "k", "m", "", "", ""]
PROFESSIONS = ["baker", "pilot", "nurse", "tailor", "painter", "farmer", "lawyer", "chemist"]
PETS = ["cat", "dog", "parrot", "rabbit", "horse", "turtle"]
_COMPANY_KINDS = ["Mills", "Works", "Labs", "Foundry", "Press", "Motors", "Optics"]


def _word(rng: random.Random, syllables: int) -> str:
    parts = [
        rng.choice(_ONSETS) + rng.choice(_VOWELS) + rng.choice(_CODAS) for _ in range(syllables)
    ]
    return "".join(parts).capitalize()


def _person(rng: random.Random) -> str:
    return f"{_word(rng, 2)} {_word(rng, 2)}"


def _city(rng: random.Random) -> str:
    return _word(rng, 2) + rng.choice(["ford", "holt", "mere", "dale", "burg", "wick"])


def _company(rng: random.Random) -> str:
    return f"{_word(rng, 2)} {rng.choice(_COMPANY_KINDS)}"


def person_passage(name: str, city: str, job: str, company: str, pet: str, pet_name: str) -> str:
    """A passage about a person: every fact a question can ask about, one sentence each."""
    return (
        f"{name} was born in {city}. {name} works as a {job} for {company}. "
        f"{name} has a {pet} named {pet_name}."
    )


def company_passage(company: str, city: str, year: int, founder: str) -> str:
    return f"{company} was founded in {city} in {year}. Its first director was {founder}."


def _random_person_passage(rng: random.Random, avoid: set[str]) -> tuple[str, str]:
    name = _person(rng)
    while name in avoid:
        name = _person(rng)
    text = person_passage(
        name,
        _city(rng),
        rng.choice(PROFESSIONS),
        _company(rng),
        rng.choice(PETS),
        _word(rng, 2),
    )
    return name, text


def _random_company_passage(rng: random.Random, avoid: set[str]) -> tuple[str, str]:
    company = _company(rng)
    while company in avoid:
        company = _company(rng)
    return company, company_passage(company, _city(rng), rng.randrange(1850, 2000), _person(rng))


def _question(rng: random.Random, hops: int) -> tuple[str, list[str], list[dict[str, str]]]:
    """(question, answers, gold passages {title, text, fact}) for one task."""
    name, city, company = _person(rng), _city(rng), _company(rng)
    job, pet, pet_name = rng.choice(PROFESSIONS), rng.choice(PETS), _word(rng, 2)
    person = {"title": name, "text": person_passage(name, city, job, company, pet, pet_name)}
    if hops == 2:
        hq = _city(rng)
        founded = {
            "title": company,
            "text": company_passage(company, hq, rng.randrange(1850, 2000), _person(rng)),
            "fact": f"{company} was founded in {hq}",
        }
        person["fact"] = f"{name} works as a {job} for {company}"
        question = f"In which city was the company that {name} works for founded?"
        return question, [hq], [person, founded]
    kind = rng.choice(["born", "pet", "employer"])
    if kind == "born":
        person["fact"] = f"{name} was born in {city}"
        return f"In which city was {name} born?", [city], [person]
    if kind == "pet":
        person["fact"] = f"{name} has a {pet} named {pet_name}"
        return f"What is the name of the {pet} of {name}?", [pet_name], [person]
    person["fact"] = f"{name} works as a {job} for {company}"
    return f"Which company does {name} work for?", [company], [person]


def make_long_qa_tasks(
    split: Split,
    n: int,
    seed: int = 0,
    *,
    doc_tokens: int = 2048,
    hops: int = 1,
) -> list[Task]:
    """`n` questions over documents of about `doc_tokens` tokens (see the module docstring).

    Train and eval tasks come from disjoint seeds (`split` is part of every task's seed), so eval
    names and documents are never seen in training. `doc_tokens` may be a single length or, for a
    curriculum of lengths, a list from which each task draws one."""
    if hops not in (1, 2):
        raise ValueError(f"hops must be 1 or 2, got {hops}")
    lengths = doc_tokens if isinstance(doc_tokens, list) else [doc_tokens]
    if not lengths or min(int(x) for x in lengths) < 64:
        raise ValueError(f"doc_tokens must be at least 64 tokens, got {doc_tokens}")
    tasks = []
    for i in range(n):
        rng = random.Random(f"long_qa/{split}/{seed}/{hops}/{i}")
        length = int(lengths[i % len(lengths)])
        question, answers, gold = _question(rng, hops)
        spec = {"seed": f"{split}/{seed}/{hops}/{i}", "tokens": length, "gold": gold}
        tasks.append(
            Task(
                task_id=f"longqa-{split}-{hops}h-{length}-{i}",
                prompt=question,
                answers=answers,
                fields={"document": spec, "facts": [g["fact"] for g in gold], "hops": hops},
            )
        )
    return tasks


def build_document(spec: dict[str, Any]) -> str:
    """The document of a generated task: distractor passages up to the target length, the gold
    passages inserted at random depths; each passage titled "Passage k: <title>"."""
    rng = random.Random(f"long_qa/document/{spec['seed']}")
    gold = spec["gold"]
    avoid = {g["title"] for g in gold}
    budget = int(spec["tokens"] * CHARS_PER_TOKEN) - sum(len(g["text"]) + 40 for g in gold)
    passages: list[tuple[str, str]] = []
    used = 0
    while used < budget:
        make = _random_company_passage if rng.random() < 0.3 else _random_person_passage
        title, text = make(rng, avoid)
        passages.append((title, text))
        used += len(text) + len(title) + 16
    for g in gold:
        passages.insert(rng.randrange(len(passages) + 1), (g["title"], g["text"]))
    return "\n\n".join(f"Passage {k + 1}: {t}\n{x}" for k, (t, x) in enumerate(passages))


def document_text(task: Task) -> str:
    """The document a task is about: the user's `context` column, else the generated one."""
    context = task.fields.get("context")
    if isinstance(context, str):
        return context
    spec = task.fields.get("document")
    if not isinstance(spec, dict):
        raise ValueError(
            f"task {task.task_id} has no document: a memory task needs a 'context' column "
            "(user JSONL {context, question, answers}) or a generated document"
        )
    return build_document(spec)
