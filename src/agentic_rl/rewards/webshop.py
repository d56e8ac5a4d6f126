"""WebShop's purchase score (Yao et al. 2022, "WebShop: Towards Scalable Real-World Web
Interaction with Grounded Language Agents"; `web_agent_site/engine/goal.py:get_reward`).

For a goal with attributes U_att, options U_opt and a price limit u_price, buying product Y
with the chosen options Y_opt at price y_price scores

    R = r_type x (N_att + N_opt + 1[y_price <= u_price]) / (|U_att| + |U_opt| + 1)

- N_att: goal attributes matched by one of Y's attributes (fuzzy token-set ratio > 85) or
  found as a substring of Y's title, bullet points or description;
- N_opt: chosen options that match a goal option, counted per chosen option as WebShop does:
  both sides first reduced to the first of WebShop's colour words each contains
  (`normalize_color`: "rose gold" -> "gold", and, as in WebShop, "standard" -> "tan"); an
  option named "size" must then equal a goal option, any other matches one with token-set
  ratio > 85; a chosen option that matches none still counts when it is a substring of Y's
  title, bullet points or description;
- r_type from the product type: title_score = |nouns(Y) & nouns(goal)| / |nouns(goal)| (0.2
  if the goal has none); r_type = 1, except 0.5 when neither the query, nor >= 2 category
  levels, nor title_score > 0.2 match; 0.1 when title_score < 0.1; 0 when title_score = 0.
  WebShop takes the nouns from spaCy part-of-speech tags; the generated catalogue
  (envs/worlds/webshop_catalogue.py) stores each product's type nouns, and the official data's reader
  (envs/benchmarks/webshop.py) tags titles, which this uses instead.

Success is R = 1. `token_set_ratio` is fuzzywuzzy's, on difflib (its pure-Python backend).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from difflib import SequenceMatcher
from typing import Any

_NON_ALNUM = re.compile(r"[^0-9a-z]+")
MATCH_THRESHOLD = 85
EXACT_MATCH_OPTIONS = ("size",)  # option names whose value must equal a goal option
# WebShop's colour words (web_agent_site/engine/normalize.py), in its alphabetical order: an
# option value is reduced to the first of them it contains.
_COLOR_WORDS = (
    "alabaster apricot aqua ash asphalt azure banana beige black blue blush bordeaux bronze "
    "brown burgundy camel camo caramel champagne charcoal cheetah chestnut chocolate christmas "
    "coffee cognac copper coral cranberry cream crystal dark denim eggplant elephant espresso "
    "fuchsia gold granite grape graphite grass gray green grey heather indigo ivory ivy khaki "
    "lavender lemon leopard light lilac lime magenta maroon mauve merlot midnight mint mocha "
    "multicolor mushroom mustard natural navy nude olive orange peach pewter pink plum purple "
    "rainbow red rose royal rust sand sapphire seashell silver skull slate steel stone "
    "stonewash sunflower tan taupe teal tiger turquoise violet walnut wheat white wine yellow"
)
COLORS = tuple(_COLOR_WORDS.split())


def _process(text: str) -> str:
    return _NON_ALNUM.sub(" ", text.lower()).strip()


def _ratio(a: str, b: str) -> int:
    if not a and not b:
        return 0
    return round(100 * SequenceMatcher(None, a, b).ratio())


def token_set_ratio(a: str, b: str) -> int:
    """fuzzywuzzy's `token_set_ratio` (0-100): the best ratio among the sorted intersection
    and the intersection plus each side's remaining tokens; 0 if either side is empty."""
    t1, t2 = set(_process(a).split()), set(_process(b).split())
    if not t1 or not t2:
        return 0
    common = " ".join(sorted(t1 & t2))
    first = f"{common} {' '.join(sorted(t1 - t2))}".strip()
    second = f"{common} {' '.join(sorted(t2 - t1))}".strip()
    return max(_ratio(common, first), _ratio(common, second), _ratio(first, second))


def type_reward(product: Mapping[str, Any], goal: Mapping[str, Any]) -> float:
    """r_type in {1, 0.5, 0.1, 0} (see the module doc)."""
    query_match = product["query"] == goal["query"]
    levels = lambda x: {c.strip() for c in x["category"].split("›")}  # noqa: E731
    category_match = len(levels(product) & levels(goal)) >= 2
    wanted = {n.lower() for n in goal["nouns"]}
    got = {n.lower() for n in product["nouns"]}
    title_score = len(wanted & got) / len(wanted) if wanted else 0.2
    r_type = 1.0 if (query_match or category_match or title_score > 0.2) else 0.5
    if title_score < 0.1:
        r_type = 0.1
    if title_score == 0.0:
        r_type = 0.0
    return r_type


def attribute_matches(product: Mapping[str, Any], attributes: Sequence[str]) -> int:
    """N_att: goal attributes matched by the product's attributes or found in its text."""
    text = _product_text(product)
    matched = 0
    for wanted in attributes:
        if (
            any(token_set_ratio(have, wanted) > MATCH_THRESHOLD for have in product["attributes"])
            or wanted.lower() in text
        ):
            matched += 1
    return matched


def normalize_color(value: str) -> str:
    """WebShop's `normalize_color`: the first colour word `value` contains, else `value`."""
    return next((color for color in COLORS if color in value), value)


def _product_text(product: Mapping[str, Any]) -> str:
    return " ".join([product["title"], *product["bullets"], product["description"]]).lower()


def option_matches(
    product: Mapping[str, Any], chosen: Mapping[str, str], wanted: Sequence[str]
) -> int:
    """N_opt: chosen options (name -> value) that match a goal option (module doc)."""
    goals = [normalize_color(w) for w in wanted]
    text = _product_text(product)
    matched = 0
    for name, raw in chosen.items():
        value = normalize_color(raw)
        if name.lower() in EXACT_MATCH_OPTIONS:
            hit = value in goals
        else:
            hit = any(token_set_ratio(goal, value) > MATCH_THRESHOLD for goal in goals)
        matched += hit or value in text
    return matched


def webshop_score(
    product: Mapping[str, Any],
    chosen_options: Mapping[str, str],
    price: float,
    goal: Mapping[str, Any],
) -> float:
    """WebShop's R for buying `product` with `chosen_options` (option name -> value) at
    `price` (module doc).

    `product` needs title, bullets, description, attributes, category, query, nouns; `goal`
    needs attributes, options (values), price_upper, category, query, nouns."""
    n_att = attribute_matches(product, goal["attributes"])
    n_opt = option_matches(product, chosen_options, goal["options"])
    in_budget = float(price <= goal["price_upper"])
    total = len(goal["attributes"]) + len(goal["options"]) + 1
    return type_reward(product, goal) * (n_att + n_opt + in_budget) / total
