"""The generated web shop: catalogue, instructions, pages and actions, WebShop's score (hand
computed), the expert and anchor states."""

import json

import pytest

from agentic_rl.envs.check import check_env
from agentic_rl.envs.registry import ENVS, TASKS
from agentic_rl.envs.worlds.webshop import BUY, WebShopEnv
from agentic_rl.envs.worlds.webshop_catalogue import (
    expert_query,
    make_catalogue,
    make_webshop_tasks,
)
from agentic_rl.rewards.webshop import (
    normalize_color,
    option_matches,
    token_set_ratio,
    type_reward,
    webshop_score,
)
from agentic_rl.types import Action


def act(text):
    return Action(kind="tool", name="action", arguments={"actions": text})


PRODUCT = {
    "title": "Acme lightweight running shoes",
    "bullets": ["Breathable: made to be breathable"],
    "description": "The Acme running shoes.",
    "attributes": ["lightweight", "breathable", "rubber sole"],
    "category": "fashion › shoes › running shoes",
    "query": "running shoes",
    "nouns": ["shoes"],
}
GOAL = {
    "attributes": ["lightweight", "non slip"],
    "options": ["black", "9"],
    "price_upper": 50.0,
    "category": "fashion › shoes › running shoes",
    "query": "running shoes",
    "nouns": ["shoes"],
}


def test_token_set_ratio_is_fuzzywuzzys():
    assert token_set_ratio("rubber sole", "sole rubber") == 100  # order does not matter
    assert token_set_ratio("non slip", "non-slip") == 100  # punctuation is a separator
    assert token_set_ratio("black", "blue") < 85 and token_set_ratio("", "x") == 0


def test_webshop_score_by_hand():
    # 1 of 2 attributes (lightweight), 1 of 2 options (black), price 40 <= 50: (1 + 1 + 1) / 5
    chosen = {"color": "black", "shoe size": "10"}
    assert webshop_score(PRODUCT, chosen, 40.0, GOAL) == pytest.approx(3 / 5)
    # over budget and no option: (1 + 0 + 0) / 5
    assert webshop_score(PRODUCT, {}, 60.0, GOAL) == pytest.approx(1 / 5)
    # an attribute found only in the bullets still counts (substring): "non slip" there
    rich = {**PRODUCT, "bullets": ["Non slip grip"]}
    assert webshop_score(rich, {"color": "black", "shoe size": "9"}, 40.0, GOAL) == 1.0


def test_option_matches_count_chosen_options_as_webshop_does():
    wanted = ["jet black", "x-large", "pack of 12"]
    # colours reduce to WebShop's colour word on both sides: "black" == "jet black"
    assert option_matches(PRODUCT, {"color": "black"}, wanted) == 1
    # an option named "size" must equal a goal option; other names match fuzzily (> 85)
    assert option_matches(PRODUCT, {"size": "large"}, wanted) == 0
    assert option_matches(PRODUCT, {"fit": "large"}, wanted) == 1  # "large" in "x-large"
    assert option_matches(PRODUCT, {"size": "x-large"}, wanted) == 1
    # a chosen option that matches no goal option counts when the product's text holds it
    assert option_matches(PRODUCT, {"material": "rubber"}, wanted) == 0
    assert option_matches(PRODUCT, {"feature": "breathable"}, wanted) == 1
    # counted per chosen option: nothing chosen, nothing matched
    assert option_matches(PRODUCT, {}, wanted) == 0
    assert normalize_color("rose gold") == "gold" and normalize_color("standard") == "tan"
    assert normalize_color("12 count") == "12 count"


def test_type_reward_levels():
    assert type_reward(PRODUCT, GOAL) == 1.0
    # other query and category, one of two goal nouns (title_score 0.5 > 0.2): still 1
    two = {**GOAL, "nouns": ["shoes", "laces"], "query": "x", "category": "a › b › c"}
    assert type_reward(PRODUCT, two) == 1.0
    # one of five nouns (0.2, not > 0.2) and nothing else matches: 0.5
    five = {**two, "nouns": ["shoes", "a", "b", "c", "d"]}
    assert type_reward(PRODUCT, five) == 0.5
    # one of eleven (< 0.1): 0.1; none: 0
    eleven = {**two, "nouns": ["shoes", *"abcdefghij"]}
    assert type_reward(PRODUCT, eleven) == 0.1
    assert type_reward(PRODUCT, {**two, "nouns": ["mug"]}) == 0.0
    # no goal nouns: title_score 0.2, with a category match r_type 1
    assert type_reward(PRODUCT, {**GOAL, "nouns": [], "query": "x"}) == 1.0


def test_catalogue_and_tasks():
    catalogue = make_catalogue()
    assert len(catalogue.products) >= 1000
    assert len({p["asin"] for p in catalogue.products}) == len(catalogue.products)
    assert make_catalogue() is catalogue  # cached
    product = catalogue.products[0]
    assert product["options"] and product["attributes"] and product["price"] > 0
    train = make_webshop_tasks("train", 30, seed=0)
    assert [t.prompt for t in train] == [t.prompt for t in make_webshop_tasks("train", 30, 0)]
    evals = make_webshop_tasks("eval", 30, seed=0)
    assert not {t.fields["goal"] for t in train} & {t.fields["goal"] for t in evals}
    for task in train:
        goal = json.loads(task.fields["goal"])
        found = [p["asin"] for p in catalogue.search(expert_query(goal), 10)]
        assert task.answers == [goal["asin"]] and goal["asin"] in found
        assert "price lower than" in task.prompt


def test_registered_and_passes_check_env():
    assert ENVS["webshop"] is WebShopEnv and TASKS["webshop"] is make_webshop_tasks
    assert check_env(WebShopEnv(max_actions_per_turn=2), make_webshop_tasks("eval", 10)) == []


def test_pages_actions_and_score():
    env = WebShopEnv()
    task = make_webshop_tasks("train", 1, seed=3)[0]
    goal = json.loads(task.fields["goal"])
    obs = env.reset(task, seed=0)
    assert obs.messages[-1]["content"] == f"Instruction: {task.prompt}\n[Search]"
    # clicks do nothing on the search page: invalid, penalised, state unchanged
    result = env.step(act("click[Buy Now]"))
    assert result.info["invalid_action"] == 1 and result.reward == pytest.approx(-0.1)
    assert env.page == "search"
    result = env.step(act(f"search[{expert_query(goal)}]"))
    assert env.page == "results" and "[Next >]" in result.observation.content
    assert len(env._page_results()) == 10 and len(env.results) == 50
    assert env.step(act("search[again]")).info["invalid_action"] == 1  # search page only
    env.step(act(f"click[{goal['asin']}]"))
    assert env.page == "product" and f"[{BUY}]" in env.state_text()
    env.step(act("click[Description]"))
    assert env.page == "Description"
    env.step(act("click[< Prev]"))
    assert env.page == "product"
    for option in goal["options"]:
        env.step(act(f"click[{option}]"))
    assert sorted(env.selected.values()) == sorted(goal["options"])
    result = env.step(act("click[Buy Now]"))
    assert result.terminated and result.reward == pytest.approx(1.0)
    assert result.info["success"] == 1.0


def test_buying_without_options_scores_partially():
    env = WebShopEnv(max_actions_per_turn=3)
    task = make_webshop_tasks("train", 1, seed=3)[0]
    goal = json.loads(task.fields["goal"])
    env.reset(task, seed=0)
    result = env.step(
        act(f"search[{expert_query(goal)}] || click[{goal['asin']}] || click[Buy Now]")
    )
    n_att, n_opt = len(goal["attributes"]), len(goal["options"])
    # every attribute and the price match, no option was chosen
    assert result.reward == pytest.approx((n_att + 1) / (n_att + n_opt + 1))
    assert result.info["success"] == 0.0


def test_expert_and_anchor_states():
    task = make_webshop_tasks("eval", 1, seed=1)[0]
    one, two = WebShopEnv(max_actions_per_turn=2), WebShopEnv(max_actions_per_turn=2)
    one.reset(task, 0)
    two.reset(task, 7)
    assert one.anchor_key() == two.anchor_key() == ("search", "", 0, "", ())
    turn = one.expert_turn()
    assert one.page == "search"  # planning the turn leaves the page as it was
    assert turn.startswith("<action>search[") and " || click[B0" in turn
    body = turn.removeprefix("<action>").removesuffix("</action>")
    one.step(act(body))
    two.step(act(body))
    assert one.anchor_key() == two.anchor_key() and one.anchor_key()[0] == "product"
    hash(one.anchor_key())
