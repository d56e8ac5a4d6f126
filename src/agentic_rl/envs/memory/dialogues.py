"""Multi-session dialogues whose facts change over time (LoCoMo-like), for Memory-R1.

Memory-R1 (Yan et al. 2025) trains its memory manager on LoCoMo: long conversations between two
people over many sessions, with questions about what was said. What makes memory management
matter is that facts CHANGE: a person moves, changes jobs, renames a pet, gives up a hobby; an
answer about "now" needs the latest state, and a memory bank that only appends keeps the stale
fact beside the new one. This generator builds such dialogues from a seed (fictional names):

- session 1 introduces a person's four facts (city, employer, pet's name, hobby);
- later sessions change some of them ("moved from A to B", "left A and now works at B", "renamed
  the dog from A to B", "gave up A" - a deletion), restate others ("still lives in A": nothing
  new), and add small talk;
- the questions ask for the latest value of every fact ("none" for a hobby given up).

Each turn is given as the fact it states (Memory-R1 extracts facts from the dialogue with an
LLM first; here the extraction is given, so the manager's decisions are what is learned), with
its structure in `Task.fields["facts"]`: {"text", "attribute", "value", "kind"} where kind is
"intro", "change", "delete", "restate" or "chat".
"""

from __future__ import annotations

import random
from typing import Any, Literal

from agentic_rl.types import Task

Split = Literal["train", "eval"]

ATTRIBUTES = ("city", "employer", "pet", "hobby")
HOBBIES = ["chess", "rowing", "pottery", "archery", "gardening", "painting", "climbing", "baking"]
_ONSETS = ["b", "d", "f", "g", "k", "l", "m", "n", "p", "r", "s", "t", "v", "z"]
_VOWELS = ["a", "e", "i", "o", "u"]

# the sentence that states an attribute's current value (what a memory should hold)
STATE = {
    "city": "{name} lives in {value}.",
    "employer": "{name} works at {value}.",
    "pet": "{name} has a dog named {value}.",
    "hobby": "{name} likes {value}.",
}
CHANGE = {
    "city": "{name} moved from {old} to {value}.",
    "employer": "{name} left {old} and now works at {value}.",
    "pet": "{name} renamed the dog from {old} to {value}.",
    "hobby": "{name} gave up {old} and took up {value}.",
}
DELETE = "{name} gave up {old} and has no hobby now."
RESTATE = {
    "city": "{name} still lives in {value}.",
    "employer": "{name} still works at {value}.",
    "pet": "{name} still has the dog named {value}.",
    "hobby": "{name} still likes {value}.",
}
CHAT = [
    "{name} watched a film last weekend.",
    "{name} had lunch with an old friend.",
    "{name} thinks the weather has been cold.",
    "{name} is reading a long novel.",
]
QUESTIONS = {
    "city": "Where does {name} live now?",
    "employer": "Where does {name} work now?",
    "pet": "What is the name of the dog of {name} now?",
    "hobby": "What hobby does {name} have now?",
}
NONE = "none"


def _word(rng: random.Random, syllables: int = 2) -> str:
    return "".join(rng.choice(_ONSETS) + rng.choice(_VOWELS) for _ in range(syllables)).capitalize()


def _value(rng: random.Random, attribute: str, avoid: set[str]) -> str:
    while True:
        if attribute == "city":
            value = _word(rng) + rng.choice(["ford", "holt", "mere", "dale"])
        elif attribute == "employer":
            value = _word(rng) + rng.choice(["Mills", "Labs", "Press", "Works"])
        elif attribute == "pet":
            value = _word(rng)
        else:
            value = rng.choice(HOBBIES)
        if value not in avoid:
            return value


def make_dialogue_tasks(
    split: Split, n: int, seed: int = 0, *, sessions: int = 3, changes_per_session: int = 2
) -> list[Task]:
    """`n` dialogues of `sessions` sessions (module docstring); train and eval from disjoint
    seeds. Task.prompt is the dialogue's first question, Task.answers its answer; all
    questions are in `fields["questions"]` as {"question", "answer", "attribute"}."""
    if sessions < 2 or not 1 <= changes_per_session <= len(ATTRIBUTES):
        raise ValueError(
            f"sessions must be >= 2 and changes_per_session in 1..{len(ATTRIBUTES)}, got "
            f"{sessions}, {changes_per_session}"
        )
    tasks = []
    for i in range(n):
        rng = random.Random(f"dialogues/{split}/{seed}/{i}")
        name = _word(rng)
        state: dict[str, str] = {}
        facts: list[dict[str, Any]] = []
        for attribute in ATTRIBUTES:
            state[attribute] = _value(rng, attribute, set())
            text = STATE[attribute].format(name=name, value=state[attribute])
            facts.append({"text": text, "attribute": attribute, "value": state[attribute]})
            facts[-1].update(kind="intro", session=1)
        for session in range(2, sessions + 1):
            turns: list[dict[str, Any]] = []
            live = [a for a in ATTRIBUTES if state.get(a) != NONE]
            for attribute in rng.sample(live, min(changes_per_session, len(live))):
                old = state[attribute]
                if attribute == "hobby" and rng.random() < 0.3:
                    state[attribute] = NONE
                    text, kind = DELETE.format(name=name, old=old), "delete"
                else:
                    state[attribute] = _value(rng, attribute, {old})
                    text = CHANGE[attribute].format(name=name, old=old, value=state[attribute])
                    kind = "change"
                turns.append({"text": text, "attribute": attribute, "value": state[attribute]})
                turns[-1]["kind"] = kind
            kept = [a for a in ATTRIBUTES if state[a] != NONE]
            same = rng.choice(kept) if kept else None
            if same is not None and not any(t["attribute"] == same for t in turns):
                text = RESTATE[same].format(name=name, value=state[same])
                turns.append({"text": text, "attribute": same, "value": state[same]})
                turns[-1]["kind"] = "restate"
            chat = rng.choice(CHAT).format(name=name)
            turns.append({"text": chat, "attribute": "", "value": "", "kind": "chat"})
            rng.shuffle(turns)
            for turn in turns:
                turn["session"] = session
            facts += turns
        questions = [
            {
                "question": QUESTIONS[a].format(name=name),
                "answer": state[a],
                "attribute": a,
            }
            for a in ATTRIBUTES
        ]
        tasks.append(
            Task(
                task_id=f"dialogue-{split}-{seed}-{i}",
                prompt=questions[0]["question"],
                answers=[questions[0]["answer"]],
                fields={"name": name, "facts": facts, "questions": questions},
            )
        )
    return tasks
