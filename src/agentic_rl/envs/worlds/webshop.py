"""A WebShop-like shop (Yao et al. 2022): text pages, `search[...]` / `click[...]` actions and
WebShop's purchase score, over the generated catalogue and instructions of
webshop_catalogue.py (or WebShop's own data, envs/benchmarks/webshop.py).

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

import json
import re
from collections.abc import Hashable
from typing import Any

from agentic_rl.envs.discrete import ACTION_SEP, DiscreteActionEnv
from agentic_rl.envs.worlds.webshop_catalogue import (
    NUM_RESULTS,
    Catalogue,
    expert_query,
    make_catalogue,
)
from agentic_rl.rewards.webshop import webshop_score
from agentic_rl.types import Task

SYSTEM_PROMPT = (
    "You are shopping in a web shop for the product the instruction describes. Actions: "
    "search[keywords] on the search page; click[button] for a button, product id or option "
    "shown in brackets, like click[B0A1B2C3D4], click[black], click[Buy Now]. Select every "
    "option the instruction asks for before you click[Buy Now]. Write up to {k} actions "
    "separated by ||, like <action>search[red running shoes]</action>."
)


def option_value(text: str) -> str:
    """An option value as the shop's pages show it (WebShop's: "/" as " | ", lower case)."""
    return text.strip().replace("/", " | ").lower()


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
