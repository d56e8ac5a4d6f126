"""A WebShop-like shop (Yao et al. 2022): a generated catalogue, instructions sampled from it,
text pages, `search[...]` / `click[...]` actions and WebShop's purchase score.

WebShop's 1.18M scraped Amazon products cannot be downloaded here, so the catalogue is
generated (seeded, offline, `catalogue_size` products, 1,200 by default): 24 product types in
WebShop's five top categories (fashion, beauty, grocery, home, electronics), each product with
a brand, a title, 2-4 attributes from its type's pool ("lightweight", "gluten free"), bullet
points, a description, options (color, size, flavor, count... 2-4 values each) and a price.

An instruction is sampled from one product, as WebShop's are: 1-2 of its attributes, one value
of each of its options and a price limit above its price ("i need a lightweight breathable
running shoes in black, size 9, and price lower than 60.00 dollars"). Tasks keep only
instructions whose product is on the first results page for the expert's query.

Pages, rendered as compact text (WebShop's "text" observation mode, one element a line):
search (`search[keywords]`) -> results (BM25 over the catalogue, retrieval/bm25.py, 50 results,
`results_per_page` per page; `click[<product id>]`, `click[Next >]`, `click[< Prev]`,
`click[Back to Search]`) -> product (options as `[value]`, `click[value]` selects one;
`click[Description]`, `click[Features]`, `click[Buy Now]`, `click[< Prev]`) -> description /
features (`click[< Prev]`). Actions go in `<action>...</action>`, several separated by `||`
(envs/discrete.py); an action that is not available on the current page is invalid (format
penalty, no effect: WebShop's invalid actions do nothing). `click[Buy Now]` ends the episode
with reward = WebShop's score (rewards/webshop.py) and success = (score == 1); after
`max_steps` actions the episode is truncated with reward 0.

The scripted expert searches the product type and the wanted attributes, opens the instructed
product, selects the wanted options and buys. Observations carry `anchor` = (page, query,
results page, product, selected options, subpage), the hashable state GiGPO groups steps on.
"""

from __future__ import annotations

import functools
import hashlib
import json
import random
import re
from collections.abc import Hashable
from dataclasses import dataclass, field
from typing import Any, Literal

from agentic_rl.envs.discrete import ACTION_SEP, DiscreteActionEnv
from agentic_rl.envs.splits import split_of
from agentic_rl.retrieval.bm25 import BM25Index
from agentic_rl.rewards.webshop import webshop_score
from agentic_rl.types import Task

Split = Literal["train", "eval"]
NUM_RESULTS = 50  # WebShop returns 50 results per search

COLORS = ("black", "white", "red", "blue", "green", "grey", "navy", "pink", "brown", "beige")
OPTIONS: dict[str, tuple[str, ...]] = {
    "color": COLORS,
    "size": ("small", "medium", "large", "x-large", "xx-large"),
    "shoe size": ("6", "7", "8", "9", "10", "11", "12"),
    "volume": ("1.7 ounce", "3.4 ounce", "8 ounce", "16 ounce"),
    "flavor": ("chocolate", "vanilla", "peanut butter", "strawberry", "caramel", "mint"),
    "count": ("6 count", "12 count", "24 count", "48 count"),
    "length": ("3 feet", "6 feet", "10 feet"),
    "pack": ("pack of 1", "pack of 2", "pack of 4"),
}


@dataclass(frozen=True)
class ProductType:
    category: str  # "top › middle › type"
    name: str  # the type as written in titles and instructions
    nouns: tuple[str, ...]  # the type's nouns (WebShop's title-noun overlap)
    attributes: tuple[str, ...]
    options: tuple[str, ...]  # keys of OPTIONS
    price: tuple[float, float]


TYPES = (
    ProductType("fashion › shoes › running shoes", "running shoes", ("shoes",),
                ("lightweight", "breathable", "non slip", "rubber sole", "memory foam",
                 "arch support"), ("color", "shoe size"), (30, 120)),
    ProductType("fashion › shoes › boots", "boots", ("boots",),
                ("waterproof", "leather", "slip resistant", "steel toe", "insulated",
                 "rubber sole"), ("color", "shoe size"), (50, 200)),
    ProductType("fashion › shoes › sandals", "sandals", ("sandals",),
                ("open toe", "adjustable strap", "arch support", "quick drying", "lightweight"),
                ("color", "shoe size"), (15, 60)),
    ProductType("fashion › tops › t-shirt", "t-shirt", ("t-shirt", "shirt"),
                ("cotton", "short sleeve", "machine wash", "slim fit", "relaxed fit",
                 "moisture wicking"), ("color", "size"), (10, 40)),
    ProductType("fashion › tops › hoodie", "hoodie", ("hoodie",),
                ("fleece lined", "pullover", "long sleeve", "machine wash", "zip up"),
                ("color", "size"), (25, 80)),
    ProductType("fashion › bottoms › jeans", "jeans", ("jeans",),
                ("slim fit", "stretch", "high waist", "straight leg", "machine wash"),
                ("color", "size"), (25, 90)),
    ProductType("fashion › accessories › backpack", "backpack", ("backpack",),
                ("water resistant", "laptop compartment", "lightweight", "anti theft",
                 "usb charging port"), ("color",), (20, 90)),
    ProductType("beauty › skin care › face moisturizer", "face moisturizer", ("moisturizer",),
                ("fragrance free", "paraben free", "sensitive skin", "anti aging",
                 "hyaluronic acid", "vegan"), ("volume",), (8, 60)),
    ProductType("beauty › hair care › shampoo", "shampoo", ("shampoo",),
                ("sulfate free", "dry hair", "natural ingredients", "color safe", "vegan"),
                ("volume", "pack"), (6, 35)),
    ProductType("beauty › makeup › lipstick", "lipstick", ("lipstick",),
                ("long lasting", "matte", "cruelty free", "moisturizing", "waterproof"),
                ("color",), (5, 30)),
    ProductType("beauty › fragrance › perfume", "perfume", ("perfume",),
                ("long lasting", "floral", "travel size", "alcohol free"), ("volume",),
                (20, 120)),
    ProductType("grocery › snacks › protein bars", "protein bars", ("protein", "bars"),
                ("gluten free", "low sugar", "high protein", "keto friendly", "non gmo",
                 "plant based"), ("flavor", "count"), (12, 45)),
    ProductType("grocery › beverages › coffee", "coffee", ("coffee",),
                ("organic", "medium roast", "dark roast", "fair trade", "decaf"),
                ("flavor", "count"), (8, 40)),
    ProductType("grocery › pantry › olive oil", "olive oil", ("oil",),
                ("extra virgin", "cold pressed", "organic", "non gmo"), ("volume", "pack"),
                (8, 40)),
    ProductType("grocery › snacks › trail mix", "trail mix", ("mix",),
                ("gluten free", "non gmo", "individually wrapped", "no added sugar"),
                ("flavor", "count"), (6, 30)),
    ProductType("home › bedding › pillow", "pillow", ("pillow",),
                ("memory foam", "hypoallergenic", "machine washable", "cooling", "queen size"),
                ("color", "pack"), (15, 70)),
    ProductType("home › kitchen › frying pan", "frying pan", ("pan",),
                ("non stick", "dishwasher safe", "stainless steel", "oven safe",
                 "induction compatible"), ("size", "color"), (15, 90)),
    ProductType("home › decor › table lamp", "table lamp", ("lamp",),
                ("dimmable", "usb charging port", "touch control", "energy efficient"),
                ("color",), (15, 80)),
    ProductType("home › furniture › office chair", "office chair", ("chair",),
                ("ergonomic", "lumbar support", "adjustable height", "breathable mesh",
                 "easy assembly"), ("color",), (60, 300)),
    ProductType("home › bath › bath towels", "bath towels", ("towels",),
                ("cotton", "quick drying", "highly absorbent", "machine washable"),
                ("color", "pack"), (15, 60)),
    ProductType("electronics › audio › headphones", "headphones", ("headphones",),
                ("wireless", "noise cancelling", "bluetooth", "long battery life", "over ear",
                 "built in microphone"), ("color",), (20, 250)),
    ProductType("electronics › accessories › phone case", "phone case", ("case",),
                ("shockproof", "slim", "wireless charging compatible", "clear",
                 "screen protector"), ("color",), (8, 40)),
    ProductType("electronics › accessories › usb cable", "usb cable", ("cable",),
                ("fast charging", "braided", "data transfer", "durable"), ("length", "pack"),
                (6, 25)),
    ProductType("electronics › computers › keyboard", "keyboard", ("keyboard",),
                ("wireless", "mechanical", "backlit", "ergonomic", "quiet keys"), ("color",),
                (20, 150)),
)  # fmt: skip

BRANDS = (
    "Alderly", "Brightloom", "Cedarfield", "Dovetail", "Everpine", "Fernway", "Glenmoor",
    "Harborline", "Ironbark", "Juniper & Co", "Kestrel", "Larkspur", "Maplecrest", "Northvale",
    "Oakhurst", "Pinecove", "Quillon", "Riverstone", "Silverleaf", "Thistledown", "Umberly",
    "Valewood", "Willowby", "Yarrowgate", "Zephyrine",
)  # fmt: skip

SYSTEM_PROMPT = (
    "You are shopping in a web shop for the product the instruction describes. Actions: "
    "search[keywords] on the search page; click[button] for a button, product id or option "
    "shown in brackets, like click[B0A1B2C3D4], click[black], click[Buy Now]. Select every "
    "option the instruction asks for before you click[Buy Now]. Write up to {k} actions "
    "separated by ||, like <action>search[red running shoes]</action>."
)


# ---------------------------------------------------------------------------------------------
# The catalogue
# ---------------------------------------------------------------------------------------------


def _product(rng: random.Random, index: int, kind: ProductType) -> dict[str, Any]:
    brand = rng.choice(BRANDS)
    attributes = rng.sample(kind.attributes, rng.randint(2, min(4, len(kind.attributes))))
    options = {
        key: sorted(rng.sample(OPTIONS[key], rng.randint(2, min(4, len(OPTIONS[key])))))
        for key in kind.options
    }
    low, high = kind.price
    price = round(rng.uniform(low, high), 2)
    shown = attributes[: rng.randint(1, 2)]  # the title names one or two attributes
    title = f"{brand} {' '.join(shown)} {kind.name}".replace("  ", " ")
    bullets = [f"{a.capitalize()}: made to be {a} for everyday use" for a in attributes]
    digest = hashlib.sha256(f"{index}/{title}".encode()).hexdigest().upper()
    return {
        "asin": f"B0{digest[:8]}",
        "title": title,
        "category": kind.category,
        "query": kind.name,
        "nouns": list(kind.nouns),
        "attributes": attributes,
        "bullets": bullets,
        "description": f"The {brand} {kind.name}: {', '.join(attributes)}.",
        "options": options,
        "price": price,
    }


@dataclass
class Catalogue:
    """The generated products and a BM25 index over their text."""

    products: list[dict[str, Any]]
    index: BM25Index = field(repr=False)
    by_asin: dict[str, int] = field(default_factory=dict, repr=False)

    def search(self, query: str, k: int = NUM_RESULTS) -> list[dict[str, Any]]:
        hits = self.index.search([query], k)[0] if query.strip() else []
        return [self.products[row] for row, _ in hits]


@functools.lru_cache(maxsize=4)
def make_catalogue(seed: int = 0, size: int = 1200) -> Catalogue:
    """`size` products (seeded, the same for every split) and their BM25 index."""
    if size < len(TYPES):
        raise ValueError(f"catalogue_size must be >= {len(TYPES)}, got {size}")
    rng = random.Random(f"webshop/catalogue/{seed}")
    products = [_product(rng, i, TYPES[i % len(TYPES)]) for i in range(size)]
    docs = [
        " ".join([p["title"], p["category"].replace("›", " "), *p["attributes"], *p["bullets"]])
        for p in products
    ]
    catalogue = Catalogue(products, BM25Index.build(docs))
    catalogue.by_asin = {p["asin"]: i for i, p in enumerate(products)}
    return catalogue


# ---------------------------------------------------------------------------------------------
# Instructions (tasks)
# ---------------------------------------------------------------------------------------------


def option_value(text: str) -> str:
    """An option value as the shop's pages show it (WebShop's: "/" as " | ", lower case)."""
    return text.strip().replace("/", " | ").lower()


def expert_query(goal: dict[str, Any]) -> str:
    return " ".join([*goal["attributes"], goal["query"]])


def draw_goal(rng: random.Random, product: dict[str, Any]) -> dict[str, Any]:
    """A WebShop-style goal from `product`: some attributes, one value per option, a limit."""
    attributes = rng.sample(
        product["attributes"], rng.randint(1, min(2, len(product["attributes"])))
    )
    picked = {key: rng.choice(values) for key, values in product["options"].items()}
    options = list(picked.values())
    limit = float(int(product["price"] * rng.uniform(1.1, 1.6)) + 1)
    described = " ".join(attributes)
    wanted = ", ".join(f"{key} {value}" for key, value in picked.items())
    return {
        "asin": product["asin"],
        "category": product["category"],
        "query": product["query"],
        "nouns": product["nouns"],
        "attributes": attributes,
        "options": options,
        "price_upper": limit,
        "instruction": (
            f"i need {described} {product['query']} with {wanted}, and price lower than "
            f"{limit:.2f} dollars"
        ),
    }


def make_webshop_tasks(
    split: Split,
    n: int,
    seed: int = 0,
    *,
    catalogue_seed: int = 0,
    catalogue_size: int = 1200,
    results_per_page: int = 10,
) -> list[Task]:
    """`n` instructions for `split` (train and eval disjoint by instruction), each sampled from
    a product that the expert's query finds on the first results page."""
    if split not in ("train", "eval"):
        raise ValueError(f"split must be 'train' or 'eval', got {split!r}")
    catalogue = make_catalogue(catalogue_seed, catalogue_size)
    rng = random.Random(f"webshop/{split}/{seed}")
    tasks: list[Task] = []
    seen: set[str] = set()
    for _ in range(50 * n + 1000):
        if len(tasks) == n:
            return tasks
        product = rng.choice(catalogue.products)
        goal = draw_goal(rng, product)
        key = json.dumps(goal, sort_keys=True)
        if key in seen or split_of(key) != split:
            continue
        found = catalogue.search(expert_query(goal), results_per_page)
        if product["asin"] not in {p["asin"] for p in found}:
            continue
        seen.add(key)
        tasks.append(
            Task(
                task_id=f"webshop-{split}-{seed}-{len(tasks)}",
                prompt=goal["instruction"],
                answers=[product["asin"]],
                fields={"goal": key},
            )
        )
    raise RuntimeError(f"could not sample {n} distinct {split} WebShop instructions")


# ---------------------------------------------------------------------------------------------
# The env
# ---------------------------------------------------------------------------------------------

_ACTION = re.compile(r"^\s*(search|click)\s*\[(.*)\]\s*$", re.IGNORECASE | re.DOTALL)
BACK, NEXT, PREV, BUY = "Back to Search", "Next >", "< Prev", "Buy Now"
DESCRIPTION, FEATURES = "Description", "Features"


class WebShopEnv(DiscreteActionEnv):
    """The generated web shop (see the module doc)."""

    # The wanted product, as JSON text: a task-file row needs it (envs/base.py).
    task_fields = ("goal",)

    def __init__(
        self,
        max_actions_per_turn: int = 1,
        max_steps: int = 10,
        format_penalty: float = 0.1,
        catalogue_seed: int = 0,
        catalogue_size: int = 1200,
        results_per_page: int = 10,
        tool_timeout_s: float = 10.0,
    ) -> None:
        del tool_timeout_s  # actions are not tool calls; accepted for a uniform constructor
        self._open(
            make_catalogue(catalogue_seed, catalogue_size),
            max_actions_per_turn,
            max_steps,
            format_penalty,
            results_per_page,
        )

    def _open(
        self,
        catalogue: Catalogue,
        max_actions_per_turn: int,
        max_steps: int,
        format_penalty: float,
        results_per_page: int,
    ) -> None:
        """Set up the shop's pages over `catalogue` (the generated one, or WebShop's own data:
        envs/benchmarks/webshop.py)."""
        super().__init__([], max_actions_per_turn, max_steps, format_penalty)
        if results_per_page < 1:
            raise ValueError(f"results_per_page must be >= 1, got {results_per_page}")
        self.catalogue = catalogue
        self.results_per_page = results_per_page
        self.goal: dict[str, Any] = {}
        self.page = "search"  # search | results | product | Description | Features
        self.query = ""
        self.results: list[dict[str, Any]] = []
        self.page_no = 0
        self.product: dict[str, Any] | None = None
        self.selected: dict[str, str] = {}
        self.score = 0.0

    def system_prompt(self) -> str:
        return SYSTEM_PROMPT.format(k=self.max_actions_per_turn)

    def _new_episode(self, task: Task, seed: int) -> None:
        del seed  # the shop is deterministic
        self.goal = json.loads(task.fields["goal"])
        self.page, self.query, self.results, self.page_no = "search", "", [], 0
        self.product, self.selected, self.score = None, {}, 0.0
        self._refresh()

    # -- what can be clicked ------------------------------------------------------------------
    def _page_results(self) -> list[dict[str, Any]]:
        start = self.page_no * self.results_per_page
        return self.results[start : start + self.results_per_page]

    def clickables(self) -> list[str]:
        """The buttons, ids and option values on the current page."""
        if self.page == "search":
            return []
        if self.page == "results":
            buttons = [BACK]
            if self.page_no > 0:
                buttons.append(PREV)
            if (self.page_no + 1) * self.results_per_page < len(self.results):
                buttons.append(NEXT)
            return buttons + [p["asin"] for p in self._page_results()]
        if self.page == "product":
            assert self.product is not None
            values = [v for vs in self.product["options"].values() for v in vs]
            return [BACK, PREV, DESCRIPTION, FEATURES, BUY, *values]
        return [BACK, PREV]

    def _refresh(self) -> None:
        self.action_names = (
            ["search[...]"] if self.page == "search" else [f"click[{c}]" for c in self.clickables()]
        )

    def parse_token(self, token: str) -> Any | None:
        match = _ACTION.match(token)
        if match is None:
            return None
        verb, value = match.group(1).lower(), match.group(2).strip()
        if verb == "search":
            return ("search", value) if self.page == "search" and value else None
        lowered = {c.lower(): c for c in self.clickables()}
        target = lowered.get(value.lower())
        return ("click", target) if target is not None else None

    # -- transitions ----------------------------------------------------------------------------
    def _apply(self, index: Any) -> tuple[float, bool, bool]:
        verb, value = index
        terminated, reward = False, 0.0
        if verb == "search":
            self.query, self.results = value, self.catalogue.search(value, NUM_RESULTS)
            self.page, self.page_no = "results", 0
        elif value == BACK:
            self.page, self.product, self.selected = "search", None, {}
        elif value == NEXT:
            self.page_no += 1
        elif value == PREV:
            if self.page == "results":
                self.page_no -= 1
            elif self.page == "product":
                self.page, self.product, self.selected = "results", None, {}
            else:
                self.page = "product"
        elif self.page == "results":
            self.product = self.catalogue.products[self.catalogue.by_asin[value]]
            self.page, self.selected = "product", {}
        elif value in (DESCRIPTION, FEATURES):
            self.page = value
        elif value == BUY:
            assert self.product is not None
            self.score = webshop_score(
                self.product, self.selected, self.product["price"], self.goal
            )
            reward, terminated = self.score, True
        else:  # an option value
            assert self.product is not None
            key = next(k for k, vs in self.product["options"].items() if value in vs)
            self.selected[key] = value
        self._refresh()
        return reward, terminated, False

    def _success(self) -> bool:
        return self.score >= 1.0 - 1e-9

    # -- rendering ------------------------------------------------------------------------------
    def state_text(self) -> str:
        lines = [f"Instruction: {self.goal['instruction']}"]
        if self.page == "search":
            lines.append("[Search]")
        elif self.page == "results":
            pages = max(1, -(-len(self.results) // self.results_per_page))
            lines.append(
                f"Results for '{self.query}' (page {self.page_no + 1} of {pages}, "
                f"{len(self.results)} products):"
            )
            lines += [f"[{p['asin']}] {p['title']} ${p['price']:.2f}" for p in self._page_results()]
            if not self.results:
                lines.append("No products found.")
            shown = {p["asin"] for p in self._page_results()}
            lines.append(" ".join(f"[{b}]" for b in self.clickables() if b not in shown))
        else:
            assert self.product is not None
            p = self.product
            lines.append(f"[{p['asin']}] {p['title']} ${p['price']:.2f}")
            if self.page == "product":
                for key, values in p["options"].items():
                    lines.append(f"{key}: {' '.join(f'[{v}]' for v in values)}")
                chosen = ", ".join(f"{k} {v}" for k, v in self.selected.items()) or "none"
                lines.append(f"Selected: {chosen}")
                lines.append(f"[{DESCRIPTION}] [{FEATURES}] [{BUY}] [{PREV}] [{BACK}]")
            elif self.page == DESCRIPTION:
                lines += [p["description"], f"[{PREV}] [{BACK}]"]
            else:
                lines += [*p["bullets"], f"[{PREV}] [{BACK}]"]
        return "\n".join(lines)

    def anchor_key(self) -> Hashable:
        asin = self.product["asin"] if self.product else ""
        return (self.page, self.query, self.page_no, asin, tuple(sorted(self.selected.items())))

    # -- the scripted expert ----------------------------------------------------------------
    def _expert_action(self) -> str:
        goal = self.goal
        if self.page == "search":
            return f"search[{expert_query(goal)}]"
        if self.page in (DESCRIPTION, FEATURES):
            return f"click[{PREV}]"
        if self.page == "results":
            if goal["asin"] in {p["asin"] for p in self._page_results()}:
                return f"click[{goal['asin']}]"
            if NEXT in self.clickables():
                return f"click[{NEXT}]"
            return f"click[{BACK}]"
        assert self.product is not None
        if self.product["asin"] != goal["asin"]:
            return f"click[{PREV}]"
        offered = {v.lower() for vs in self.product["options"].values() for v in vs}
        for wanted in goal["options"]:
            value = option_value(wanted)
            if value in offered and value not in self.selected.values():
                return f"click[{value}]"
        return f"click[{BUY}]"

    def expert_turn(self) -> str:
        """The expert's next actions, simulated on a copy of the page state (up to the turn's
        budget; it stops after buying)."""
        if self.done:
            return "<answer>done</answer>"
        saved = (self.page, self.query, self.results, self.page_no, self.product,
                 dict(self.selected), self.score, list(self.action_names))  # fmt: skip
        actions: list[str] = []
        for _ in range(self.expert_budget()):
            action = self._expert_action()
            actions.append(action)
            _, terminated, _ = self._apply(self.parse_token(action))
            if terminated:
                break
        (self.page, self.query, self.results, self.page_no, self.product, self.selected,
         self.score, self.action_names) = saved  # fmt: skip
        return f"<action>{f' {ACTION_SEP} '.join(actions)}</action>"
