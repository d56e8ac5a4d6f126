"""A small data folder in WebShop's official layout (its `data/`), written by the tests: the real
products and instructions are not on a package registry, so envs/benchmarks/webshop.py is only
ever tested on this.

Ten products of five types (two of each, so a search has a near miss to rank below the right
one), in WebShop's own fields and formats: pricing text ("$45.99", "$12.00 - $18.00" or none),
customization options with "/" in values, bullet points as a list or a string; plus the rows
WebShop's loader skips (an asin "nan", one longer than 10 characters, a repeated asin). The
human instructions: one or two a product, one of them without attributes (skipped, as WebShop
skips it), options as the shop's pages show them ("black | white").
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

TYPES = [
    # (query, category, noun, attribute pool, options)
    (
        "men's running shoes",
        "Clothing, Shoes & Jewelry › Men › Shoes › Athletic › Running",
        "running shoes",
        ["lightweight", "rubber sole", "breathable"],
        {"Color": ["Black/White", "Navy"], "Size": ["9", "10"]},
    ),
    (
        "green tea",
        "Grocery & Gourmet Food › Beverages › Tea › Green",
        "green tea bags",
        ["gluten free", "caffeine free", "organic"],
        {"Flavor Name": ["Jasmine", "Mint"], "Size": ["20 Count", "100 Count"]},
    ),
    (
        "face moisturizer",
        "Beauty & Personal Care › Skin Care › Face › Moisturizers",
        "face moisturizer cream",
        ["fragrance free", "hyaluronic acid", "dry skin"],
        {"Size": ["1.7 Ounce", "3.4 Ounce"]},
    ),
    (
        "usb c cable",
        "Electronics › Computers & Accessories › Cables › USB Cables",
        "usb c charging cable",
        ["fast charging", "braided", "high speed"],
        {"Color": ["Black", "Grey"], "Size": ["3 Feet", "6 Feet"]},
    ),
    (
        "throw pillow covers",
        "Home & Kitchen › Bedding › Decorative Pillows › Throw Pillow Covers",
        "throw pillow covers",
        ["machine washable", "double sided", "living room"],
        {"Color": ["Beige", "Dark Grey"], "Size": ["18x18 inch", "20x20 inch"]},
    ),
]
BRANDS = ["Acme", "Zenith"]
PRICING = ["$45.99", "$12.00 - $18.00", ""]


def _product(i: int) -> dict[str, Any]:
    query, category, noun, attributes, options = TYPES[i % len(TYPES)]
    brand = BRANDS[i // len(TYPES)]
    title = f"{brand} {attributes[i // len(TYPES)].title()} {noun.title()}"
    bullets: Any = [f"{a.capitalize()} for everyday use" for a in attributes[:2]]
    return {
        "asin": f"B0000000{i:02d}",
        "name": title,
        "query": query.upper() if i == 0 else query,  # WebShop lower-cases the query
        "category": category.split(" › ")[0].lower(),
        "product_category": category,
        "full_description": f"The {title}: made by {brand}.",
        "small_description": bullets if i % 3 else bullets[0],  # a list or one string
        "pricing": PRICING[i % len(PRICING)],
        "images": [f"https://example.invalid/{i}.jpg"],
        "customization_options": {
            name: [{"value": value, "image": None} for value in values]
            for name, values in options.items()
        }
        if i != 4
        else None,  # a product without options
    }


def _human(i: int, product: dict[str, Any]) -> list[dict[str, Any]]:
    query, _, noun, attributes, options = TYPES[i % len(TYPES)]
    first = attributes[i // len(TYPES)]
    # options as the shop's pages show them (lower case, "/" as " | "), which annotators chose
    picked = (
        [values[i % len(values)].lower().replace("/", " | ") for values in options.values()]
        if i != 4
        else []
    )
    rows = [
        {
            "asin": product["asin"],
            "instruction": " ".join(["i want", first, noun, *picked]) + ".",
            "instruction_attributes": [first],
            "instruction_options": picked,
        }
    ]
    if i % 2 == 0:  # a second instruction; every fourth product's has no attributes (skipped)
        rows.append(
            {
                "asin": product["asin"],
                "instruction": f"looking for {noun} by {BRANDS[i // len(TYPES)]}",
                "instruction_attributes": [] if i % 4 == 0 else [attributes[2]],
                "instruction_options": [],
            }
        )
    return rows


def write_webshop_data(folder: Path) -> Path:
    """Write the fixture under `folder` (created) and return it."""
    folder.mkdir(parents=True, exist_ok=True)
    products = [_product(i) for i in range(10)]
    skipped = [
        {**products[1], "asin": "nan"},
        {**products[2], "asin": "B0123456789X"},  # longer than 10 characters
        {**products[3], "name": "A repeat of an asin already read"},
    ]
    rows = products[:5] + skipped + products[5:]
    attributes = {
        p["asin"]: {"attributes": TYPES[i % len(TYPES)][3], "instruction": "x"}
        for i, p in enumerate(products)
        if i != 9  # a product without attributes: WebShop gives it DUMMY_ATTR
    }
    human = {p["asin"]: _human(i, p) for i, p in enumerate(products)}
    (folder / "items_shuffle_1000.json").write_text(json.dumps(rows))
    (folder / "items_ins_v2_1000.json").write_text(json.dumps(attributes))
    (folder / "items_human_ins.json").write_text(json.dumps(human))
    return folder
