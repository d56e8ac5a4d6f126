"""WebShop (Yao et al. 2022, arXiv 2207.01206) on the benchmark's own products and human
instructions, read from the user's copy of its data.

WebShop's data is not on a package registry (its `setup.sh` fetches it from a file host); a user
who has it points `data_dir` (or the WEBSHOP_DATA environment variable) at the folder that holds
it, in the official layout (WebShop's `data/`):

    DATA_DIR/items_shuffle_1000.json   the products (catalogue "1000", WebShop's small set)
    DATA_DIR/items_ins_v2_1000.json    asin -> {"attributes": [...], ...}
    DATA_DIR/items_human_ins.json      asin -> [{"instruction", "instruction_attributes",
                                                 "instruction_options"}, ...]
    (catalogue "full": items_shuffle.json and items_ins_v2.json, the 1.18M products)

What is WebShop's own, read as its `web_agent_site/engine` reads it: the products (asins that
are "nan" or longer than 10 characters and repeats are skipped; the title, description, bullet
points, category, the search query it was scraped for; options with "/" written " | "; a price
drawn in a price range, here seeded per asin), the attributes (`DUMMY_ATTR` where a product has
none), the human goals (instructions with no attribute skipped; a price limit drawn from the
next four multiples of 10 above the price, seeded per goal, appended to the instruction) in
WebShop's order (a shuffle with seed 233), and its splits by position in that order: the first
500 goals are `test` (what WebShop papers report), the next 1,000 `dev`, the rest `train`
(`test_goals` / `dev_goals` change the sizes, for small data). The reward is WebShop's score
(rewards/webshop.py) and success is a score of 1; `env/score` is the mean score x 100, as papers
report it.

What differs, and why:
- Search is BM25 over each product's WebShop index text (title, description, first bullet, the
  options), this project's index (retrieval/bm25.py), not WebShop's Lucene index.
- The type reward's nouns: WebShop tags titles with spaCy's `en_core_web_lg`, a model that is not
  on a package registry. `noun_tagger: spacy` uses it where the user has installed it (the run
  stops at load time where it is missing); the default `words` takes a title's words minus
  function words and common title adjectives, an approximation that gives a product bought as
  instructed the full type reward (same title, same words) and can differ from spaCy for other
  products.
- Pages are this project's text pages (envs/worlds/webshop.py): search, results, product (with
  its options), description and features; WebShop's reviews and attributes pages are not shown.

Training goals are left out unless the expert's query (the goal's attributes and the product's
search query) finds the product on the first results page, so the warm start never shows a
search that fails; evaluation goals are never filtered.

Only tested on a small fixture written in this layout by the tests (tests/webshop_fixture.py);
never run on the real data files.
"""

from __future__ import annotations

import functools
import itertools
import json
import os
import random
import re
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from pathlib import Path
from typing import Any

from agentic_rl.envs.worlds.webshop import WebShopEnv, option_value
from agentic_rl.envs.worlds.webshop_catalogue import Catalogue, expert_query
from agentic_rl.errors import UserInputError
from agentic_rl.retrieval.bm25 import BM25Index
from agentic_rl.types import Action, StepResult, Task

DATA_ENV = "WEBSHOP_DATA"
CATALOGUES = {
    "1000": ("items_shuffle_1000.json", "items_ins_v2_1000.json"),
    "full": ("items_shuffle.json", "items_ins_v2.json"),
}
HUMAN_GOALS = "items_human_ins.json"
LAYOUT = "DATA_DIR/{items_shuffle_1000.json, items_ins_v2_1000.json, items_human_ins.json}"
SPLITS = ("train", "dev", "test")
GOAL_ORDER_SEED = 233  # WebShop shuffles its goals with this seed before splitting them
PRICE_LIMITS = [10.0 * i for i in range(1, 100)]  # WebShop's PRICE_RANGE
NO_PRICE = 100.0  # WebShop's price for a product without pricing
NOUN_TAGGERS = ("words", "spacy")
# Words that are never nouns in a product title (the `words` tagger drops them).
_NOT_NOUNS = (
    "a an and are as at be by for from in into is it its of on or per than the this to up "
    "with without your our you my all any both each more most no not only other so very new "
    "best premium quality high low large small big mini extra super soft hard light heavy long "
    "short wide slim thin thick portable adjustable compatible durable natural organic original "
    "professional classic casual comfortable cute multi free ultra"
)
FUNCTION_WORDS = frozenset(_NOT_NOUNS.split())
_WORD = re.compile(r"[a-z][a-z'.-]*[a-z]|[a-z]")


class WebShopDataError(UserInputError, ValueError):
    """The user's WebShop data cannot be used; the message names the path and the layout."""


# ---------------------------------------------------------------------------------------------
# The data: its folder, its products, its goals
# ---------------------------------------------------------------------------------------------


def data_root(data_dir: str = "") -> Path:
    """The WebShop data folder: `data_dir`, else $WEBSHOP_DATA."""
    text = data_dir or os.environ.get(DATA_ENV, "")
    if not text:
        raise WebShopDataError(
            "env webshop_official reads WebShop's own products and instructions, which are not "
            f"on a package registry: set env.options.data_dir=DIR (or the {DATA_ENV} "
            f"environment variable) to the folder that holds them ({LAYOUT}); WebShop's "
            "setup.sh downloads them into its data/ folder"
        )
    root = Path(text).expanduser()
    if not root.is_dir():
        source = "env.options.data_dir" if data_dir else DATA_ENV
        raise WebShopDataError(f"WebShop data folder {root} ({source}) does not exist")
    return root


def _read_json(path: Path) -> Any:
    if not path.is_file():
        raise WebShopDataError(
            f"WebShop file {path} does not exist: expected the official layout {LAYOUT}"
        )
    try:
        return json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise WebShopDataError(f"WebShop file {path} cannot be read as JSON: {err}") from None


def title_nouns(title: str, tagger: str = "words") -> list[str]:
    """The nouns of a product title that WebShop's type reward compares (module doc)."""
    if tagger == "spacy":
        return [t.text.lower() for t in _spacy()(title) if t.pos_ in ("PNOUN", "NOUN", "PROPN")]
    return [w for w in _WORD.findall(title.lower()) if w not in FUNCTION_WORDS]


@functools.cache
def _spacy() -> Any:
    try:
        import spacy

        return spacy.load("en_core_web_lg")
    except (ImportError, OSError) as err:
        raise WebShopDataError(
            "env.options.noun_tagger=spacy needs spaCy with its en_core_web_lg model, as WebShop "
            f"uses (pip install spacy, then the model): {err}; or use noun_tagger=words"
        ) from None


def parse_pricing(pricing: Any) -> list[float]:
    """WebShop's pricing text ("$12.99", "$10.99 - $15.99") as its one or two prices; 100
    where there is none (as WebShop)."""
    if not pricing:
        return [NO_PRICE]
    prices = []
    for part in str(pricing).split("$")[1:]:
        try:
            prices.append(float(Decimal(re.sub(r"[^\d.]", "", part))))
        except InvalidOperation:
            continue
    return prices[:2] or [NO_PRICE]


def _product(raw: dict[str, Any], attributes: dict[str, Any], tagger: str) -> dict[str, Any]:
    """One WebShop product in the shop's own form (envs/worlds/webshop.py)."""
    asin = str(raw["asin"])
    bullets = raw.get("small_description") or []
    options: dict[str, list[str]] = {}
    for name, contents in (raw.get("customization_options") or {}).items():
        if contents:
            options[name.lower()] = [option_value(str(c["value"])) for c in contents]
    pricing = parse_pricing(raw.get("pricing"))
    price = pricing[0] if len(pricing) == 1 else random.Random(asin).uniform(*pricing)
    title = str(raw.get("name") or "")
    return {
        "asin": asin,
        "title": title,
        "category": str(raw.get("product_category") or ""),
        "query": str(raw.get("query") or "").lower().strip(),
        "nouns": title_nouns(title, tagger),
        "attributes": list((attributes.get(asin) or {}).get("attributes") or ["DUMMY_ATTR"]),
        "bullets": [str(b) for b in (bullets if isinstance(bullets, list) else [bullets])],
        "description": str(raw.get("full_description") or ""),
        "options": options,
        "price": round(price, 2),
    }


def index_text(product: dict[str, Any]) -> str:
    """The text WebShop indexes a product by: title, description, first bullet, options."""
    options = ", and ".join(f"{k}: {', '.join(v)}" for k, v in product["options"].items())
    first_bullet = product["bullets"][0] if product["bullets"] else ""
    return " ".join([product["title"], product["description"], first_bullet, options]).lower()


def _goal(product: dict[str, Any], human: dict[str, Any], number: int) -> dict[str, Any]:
    """One human goal as WebShop's `get_human_goals` makes it (its price limit seeded)."""
    price = product["price"]
    limits = [p for p in PRICE_LIMITS if p > price][:4]
    instruction = str(human.get("instruction", "")).strip(".")
    if len(limits) >= 2:
        rng = random.Random(f"webshop/price/{product['asin']}/{number}")
        price_upper = sorted(rng.sample(limits, 2))[1]
        instruction += f", and price lower than {price_upper:.2f} dollars"
    else:
        price_upper = 1000000.0
    options = human.get("instruction_options") or []
    return {
        "asin": product["asin"],
        "category": product["category"],
        "query": product["query"],
        "nouns": product["nouns"],
        "attributes": list(human["instruction_attributes"]),
        "options": [str(o) for o in (options.values() if isinstance(options, dict) else options)],
        "price_upper": price_upper,
        "instruction": instruction,
    }


@dataclass(frozen=True)
class OfficialShop:
    """WebShop's catalogue (searchable) and its human goals in WebShop's order."""

    catalogue: Catalogue
    goals: tuple[dict[str, Any], ...]


@functools.cache
def load_shop(root: Path, catalogue: str = "1000", noun_tagger: str = "words") -> OfficialShop:
    """Read the data under `root` (module doc); raises WebShopDataError naming a bad file."""
    if catalogue not in CATALOGUES:
        raise ValueError(f"catalogue must be one of {', '.join(CATALOGUES)}, got {catalogue!r}")
    if noun_tagger not in NOUN_TAGGERS:
        raise ValueError(
            f"noun_tagger must be one of {', '.join(NOUN_TAGGERS)}, got {noun_tagger!r}"
        )
    products_file, attributes_file = (root / name for name in CATALOGUES[catalogue])
    raw_products = _read_json(products_file)
    attributes = _read_json(root / attributes_file)
    human = _read_json(root / HUMAN_GOALS)
    if not isinstance(raw_products, list) or not isinstance(attributes, dict):
        raise WebShopDataError(
            f"WebShop files {products_file.name} / {attributes_file.name} under {root} are not a "
            "list of products / an object by asin: expected the official layout"
        )
    if not isinstance(human, dict):
        raise WebShopDataError(f"WebShop file {root / HUMAN_GOALS} is not an object by asin")
    products, seen = [], set()
    for i, raw in enumerate(raw_products):
        asin = str(raw.get("asin", "nan")) if isinstance(raw, dict) else "nan"
        if asin == "nan" or len(asin) > 10 or asin in seen:
            continue
        seen.add(asin)
        try:
            products.append(_product(raw, attributes, noun_tagger))
        except (KeyError, TypeError, AttributeError) as err:
            raise WebShopDataError(
                f"WebShop product {i} (asin {asin}) in {products_file} is malformed: {err!r}"
            ) from None
    if not products:
        raise WebShopDataError(f"WebShop file {products_file} holds no product")
    goals = []
    for product in products:
        entries = human.get(product["asin"]) or []
        if not isinstance(entries, list) or not all(isinstance(e, dict) for e in entries):
            raise WebShopDataError(
                f"WebShop file {root / HUMAN_GOALS}: the instructions of asin {product['asin']} "
                "are not a list of objects"
            )
        for number, entry in enumerate(entries):
            if entry.get("instruction_attributes"):
                goals.append(_goal(product, entry, number))
    random.Random(GOAL_ORDER_SEED).shuffle(goals)
    shop = Catalogue(products, BM25Index.build([index_text(p) for p in products]))
    shop.by_asin = {p["asin"]: i for i, p in enumerate(products)}
    return OfficialShop(shop, tuple(goals))


def split_goals(
    goals: tuple[dict[str, Any], ...], split: str, test_goals: int = 500, dev_goals: int = 1000
) -> list[tuple[int, dict[str, Any]]]:
    """(position, goal) of `split` by position in WebShop's order: test first, then dev."""
    if split not in SPLITS:
        raise ValueError(f"WebShop split must be one of {', '.join(SPLITS)}, got {split!r}")
    if test_goals < 0 or dev_goals < 0:
        raise ValueError(f"test_goals and dev_goals must be >= 0, got {test_goals}, {dev_goals}")
    bounds = {"test": (0, test_goals), "dev": (test_goals, test_goals + dev_goals)}
    start, end = bounds.get(split, (test_goals + dev_goals, len(goals)))
    return list(enumerate(goals))[start:end]


def make_webshop_official_tasks(
    split: str,
    n: int,
    seed: int = 0,
    *,
    data_dir: str = "",
    catalogue: str = "1000",
    eval_split: str = "test",
    test_goals: int = 500,
    dev_goals: int = 1000,
    results_per_page: int = 10,
    noun_tagger: str = "words",
) -> list[Task]:
    """`n` of WebShop's human goals: "train" from its train split (seeded shuffle, kept where
    the expert's query finds the product on the first page), "eval" from `eval_split` ("test",
    WebShop's reported split, or "dev") in WebShop's order."""
    if split not in ("train", "eval"):
        raise ValueError(f"split must be 'train' or 'eval', got {split!r}")
    if eval_split not in ("test", "dev"):
        raise ValueError(f"eval_split must be 'test' or 'dev', got {eval_split!r}")
    shop = load_shop(data_root(data_dir), catalogue, noun_tagger)
    part = "train" if split == "train" else eval_split
    picked = split_goals(shop.goals, part, test_goals, dev_goals)
    if split == "train":
        random.Random(f"webshop_official/{seed}").shuffle(picked)
        findable = (
            (i, g)
            for i, g in picked
            if g["asin"]
            in {p["asin"] for p in shop.catalogue.search(expert_query(g), results_per_page)}
        )
        picked = list(itertools.islice(findable, n))  # search only as far as needed
    if n > len(picked):
        raise ValueError(
            f"{n} {split} tasks asked, but WebShop's {part} split has {len(picked)} usable goals "
            f"here (of {len(shop.goals)}): lower env.num_{split}_tasks"
        )
    return [
        Task(
            task_id=f"webshop/{part}/{i}",
            prompt=goal["instruction"],
            answers=[goal["asin"]],
            fields={"goal": json.dumps(goal, sort_keys=True)},
        )
        for i, goal in picked[:n]
    ]


class OfficialWebShopEnv(WebShopEnv):
    """The shop's pages and WebShop's score over the user's WebShop data (module doc)."""

    def __init__(
        self,
        max_actions_per_turn: int = 1,
        max_steps: int = 15,
        format_penalty: float = 0.1,
        data_dir: str = "",
        catalogue: str = "1000",
        results_per_page: int = 10,
        noun_tagger: str = "words",
        tool_timeout_s: float = 10.0,
    ) -> None:
        del tool_timeout_s  # actions are not tool calls; accepted for a uniform constructor
        # read the data where the env is built, so a missing folder stops the run at load time
        shop = load_shop(data_root(data_dir), catalogue, noun_tagger)
        self._open(
            shop.catalogue, max_actions_per_turn, max_steps, format_penalty, results_per_page
        )

    def step(self, action: Action) -> StepResult:
        """The shop's step, plus `env/score`: WebShop's score x 100 on the purchase, 0 on every
        other step, so an episode that never buys counts as 0 in the mean score."""
        result = super().step(action)
        result.info["env/score"] = 100.0 * self.score if result.terminated else 0.0
        return result
