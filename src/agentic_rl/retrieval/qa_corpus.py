"""A deterministic fictional world for search QA: people, cities, companies and their documents.

Every name is made up by a seeded syllable generator, so no pretrained model can know the
answers: the only way to answer is to search the corpus. People share first names and surnames
and city/company documents mention people, so retrieval is not a trivial exact-title lookup.
Documents use Search-R1's format `{"id": str, "contents": "\"Title\"\ntext"}`.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import lru_cache

DEFAULT_NUM_ENTITIES = 500
EVAL_EVERY = 5  # person i is an eval entity iff i % EVAL_EVERY == 0 (20% held out)

# Repeats weight the draw towards short, pronounceable names (they also tokenize shorter).
_SINGLE_ONSETS = ["b", "d", "f", "g", "h", "k", "l", "m", "n", "p", "r", "s", "t", "v", "z"]
_ONSETS = _SINGLE_ONSETS * 2 + ["br", "dr", "gr", "kl", "pr", "st", "th"]
_VOWELS = ["a", "e", "i", "o", "u"] * 3 + ["ai", "ea", "oa"]
_CODAS = ["n", "r", "l", "s", "m", "nd", "rk", "th"] + [""] * 6
_CITY_SUFFIXES = ["holt", "ford", "mere", "wick", "dale", "stead", "burg", "haven", "moor", "field"]
_COMPANY_KINDS = [
    "Mills",
    "Works",
    "Labs",
    "Foundry",
    "Shipping",
    "Textiles",
    "Press",
    "Motors",
    "Optics",
]

PROFESSIONS = [
    "painter",
    "engineer",
    "chemist",
    "architect",
    "pilot",
    "surgeon",
    "librarian",
    "carpenter",
    "journalist",
    "botanist",
    "astronomer",
    "baker",
    "sculptor",
    "geologist",
    "lawyer",
    "photographer",
    "tailor",
    "economist",
    "nurse",
    "teacher",
    "poet",
    "farmer",
    "diplomat",
]
INSTRUMENTS = [
    "cello",
    "harp",
    "flute",
    "violin",
    "oboe",
    "trumpet",
    "piano",
    "clarinet",
    "accordion",
    "banjo",
    "viola",
]
PRODUCTS = [
    "paper",
    "rope",
    "glass",
    "lamps",
    "clocks",
    "bicycles",
    "fabric",
    "ink",
    "ceramics",
    "radios",
]


@dataclass(frozen=True)
class Person:
    """A fictional person and the attributes questions ask about."""

    doc_id: str
    first: str
    last: str
    birthplace: str
    birth_year: int
    profession: str
    instrument: str
    employer: str

    @property
    def name(self) -> str:
        return f"{self.first} {self.last}"

    def attribute(self, key: str) -> str:
        """The answer for an attribute key (see ATTRIBUTES), as text."""
        return str(getattr(self, key))


@dataclass
class World:
    """All generated entities plus the corpus built from them."""

    people: list[Person]
    cities: list[str]
    companies: list[str]
    corpus: list[dict[str, str]] = field(default_factory=list)


def _syllable(rng: random.Random) -> str:
    return rng.choice(_ONSETS) + rng.choice(_VOWELS) + rng.choice(_CODAS)


def _word(rng: random.Random, syllables: int) -> str:
    return "".join(_syllable(rng) for _ in range(syllables)).capitalize()


def _unique_words(
    rng: random.Random, count: int, make: Callable[[random.Random], str], taken: set[str]
) -> list[str]:
    # Names must be unique across all kinds so that one token never names two things by accident.
    words: list[str] = []
    while len(words) < count:
        word = make(rng)
        if len(word) >= 5 and word.lower() not in taken:
            taken.add(word.lower())
            words.append(word)
    return words


def _person_text(rng: random.Random, p: Person) -> str:
    templates = [
        "{name} is {a_profession} who was born in {city} in {year}. {last} works for "
        "{employer} and plays the {instrument}.",
        "Born in {year} in {city}, {name} is {a_profession}. {first} plays the {instrument} "
        "and is employed by {employer}.",
        "{name} ({year}) is {a_profession} from {city}. Besides working at {employer}, {first} "
        "is known for playing the {instrument}.",
    ]
    return rng.choice(templates).format(
        name=p.name,
        first=p.first,
        last=p.last,
        a_profession=("an " if p.profession[0] in "aeiou" else "a ") + p.profession,
        city=p.birthplace,
        year=p.birth_year,
        employer=p.employer,
        instrument=p.instrument,
    )


def _doc(doc_id: int, title: str, text: str) -> dict[str, str]:
    return {"id": str(doc_id), "contents": f'"{title}"\n{text}'}


@lru_cache(maxsize=8)
def build_world(num_entities: int = DEFAULT_NUM_ENTITIES, seed: int = 0) -> World:
    """Generate the world deterministically from (num_entities, seed). Cached: do not mutate."""
    if num_entities < EVAL_EVERY * 2:
        raise ValueError(f"num_entities must be >= {EVAL_EVERY * 2}, got {num_entities}")
    rng = random.Random(f"search_qa/world/{seed}")
    taken: set[str] = set()
    cities = _unique_words(
        rng, max(10, num_entities // 5), lambda r: _word(r, 1) + r.choice(_CITY_SUFFIXES), taken
    )
    company_stems = _unique_words(rng, max(10, num_entities // 8), lambda r: _word(r, 2), taken)
    companies = [f"{stem} {rng.choice(_COMPANY_KINDS)}" for stem in company_stems]
    # Fewer first names and surnames than people: names overlap, as real ones do.
    firsts = _unique_words(rng, max(10, num_entities // 3), lambda r: _word(r, 2), taken)
    lasts = _unique_words(rng, max(10, num_entities // 2), lambda r: _word(r, 2), taken)

    people: list[Person] = []
    names: set[str] = set()
    while len(people) < num_entities:
        first, last = rng.choice(firsts), rng.choice(lasts)
        if (first, last) in names:
            continue
        names.add((first, last))
        people.append(
            Person(
                doc_id=str(len(people)),
                first=first,
                last=last,
                birthplace=rng.choice(cities),
                birth_year=rng.randint(1950, 2005),
                profession=rng.choice(PROFESSIONS),
                instrument=rng.choice(INSTRUMENTS),
                employer=rng.choice(companies),
            )
        )
    world = World(people=people, cities=cities, companies=companies)
    world.corpus = _build_corpus(world, rng)
    return world


def _build_corpus(world: World, rng: random.Random) -> list[dict[str, str]]:
    corpus = [_doc(int(p.doc_id), p.name, _person_text(rng, p)) for p in world.people]
    born_in: dict[str, list[str]] = {city: [] for city in world.cities}
    for person in world.people:
        born_in[person.birthplace].append(person.name)
    # Distractors: they mention people and years, so a vague query retrieves the wrong page.
    for city in world.cities:
        notable = born_in[city][:3]
        text = (
            f"{city} is a town on the river {_word(rng, 1)}, founded in {rng.randint(1200, 1900)}."
        )
        if notable:
            text += f" Notable people born in {city} include {', '.join(notable)}."
        corpus.append(_doc(len(corpus), city, text))
    for company in world.companies:
        text = (
            f"{company} is a company based in {rng.choice(world.cities)}, founded in "
            f"{rng.randint(1950, 2005)}. It makes {rng.choice(PRODUCTS)}."
        )
        corpus.append(_doc(len(corpus), company, text))
    return corpus


def build_corpus(num_entities: int = DEFAULT_NUM_ENTITIES, seed: int = 0) -> list[dict[str, str]]:
    """The Search-R1-format corpus of the world `(num_entities, seed)` (a fresh list)."""
    return [dict(doc) for doc in build_world(num_entities, seed).corpus]


def split_people(world: World, split: str) -> list[Person]:
    """People whose questions belong to `split`: eval and train people are disjoint."""
    if split not in ("train", "eval"):
        raise ValueError(f"split must be 'train' or 'eval', got {split!r}")
    is_eval = split == "eval"
    return [p for i, p in enumerate(world.people) if (i % EVAL_EVERY == 0) == is_eval]
