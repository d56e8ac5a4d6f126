"""The generated catalogue and instructions of the WebShop-like shop (Yao et al. 2022; the
pages, actions and expert are in webshop.py, which also serves WebShop's own data through
envs/benchmarks/webshop.py).

WebShop's 1.18M scraped Amazon products cannot be downloaded here, so the catalogue is
generated (seeded, offline, `catalogue_size` products, 1,200 by default): 24 product types in
WebShop's five top categories (fashion, beauty, grocery, home, electronics), each product with
a brand, a title, 2-4 attributes from its type's pool ("lightweight", "gluten free"), bullet
points, a description, options (color, size, flavor, count... 2-4 values each) and a price.

An instruction is sampled from one product, as WebShop's are: 1-2 of its attributes, one value
of each of its options and a price limit above its price ("i need a lightweight breathable
running shoes in black, size 9, and price lower than 60.00 dollars"). Tasks keep only
instructions whose product is on the first results page for the expert's query.
"""

from __future__ import annotations

import functools
import hashlib
import json
import random
from dataclasses import dataclass, field
from typing import Any, Literal

from agentic_rl.envs.splits import split_of
from agentic_rl.retrieval.bm25 import BM25Index
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
