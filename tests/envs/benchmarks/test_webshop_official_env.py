"""WebShop from a data folder in the official layout (envs/benchmarks/webshop.py), on the small
fixture tests/webshop_fixture.py writes (never on the real data): products and goals read as
WebShop reads them, its goal order and splits, check_env, the expert buying as instructed,
WebShop's score for a wrong purchase by hand, `env/score`, and the errors a user's data can
cause."""

from __future__ import annotations

import json
import random
import sys

import pytest
from webshop_fixture import write_webshop_data

from agentic_rl.envs.benchmarks.webshop import (
    GOAL_ORDER_SEED,
    OfficialWebShopEnv,
    WebShopDataError,
    load_shop,
    make_webshop_official_tasks,
    parse_pricing,
    split_goals,
    title_nouns,
)
from agentic_rl.envs.check import check_env
from agentic_rl.envs.registry import ENVS, TASKS, make_env, split_options
from agentic_rl.errors import UserInputError
from agentic_rl.types import Action

SPLITS = {"test_goals": 4, "dev_goals": 2}  # the fixture's 12 goals: 4 test, 2 dev, 6 train


def act(text: str) -> Action:
    return Action(kind="tool", name="action", arguments={"actions": text})


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    return write_webshop_data(tmp_path_factory.mktemp("webshop"))


@pytest.fixture(autouse=True)
def no_webshop_data_variable(monkeypatch):
    monkeypatch.delenv("WEBSHOP_DATA", raising=False)


def test_pricing_text_is_read_as_webshop_reads_it():
    assert parse_pricing("$45.99") == [45.99]
    assert parse_pricing("$12.00 - $18.00") == [12.0, 18.0]
    assert parse_pricing("$1,299.00") == [1299.0]
    assert parse_pricing("") == [100.0] and parse_pricing(None) == [100.0]


def test_products_are_read_as_webshop_reads_them(data):
    products = load_shop(data).catalogue.products
    # "nan", an asin over 10 characters and a repeated asin are skipped
    assert [p["asin"] for p in products] == [f"B0000000{i:02d}" for i in range(10)]
    shoes = products[0]
    assert shoes["query"] == "men's running shoes"  # lower-cased
    assert shoes["options"] == {"color": ["black | white", "navy"], "size": ["9", "10"]}
    assert shoes["price"] == 45.99 and shoes["bullets"] == ["Lightweight for everyday use"]
    assert shoes["category"] == "Clothing, Shoes & Jewelry › Men › Shoes › Athletic › Running"
    assert shoes["attributes"] == ["lightweight", "rubber sole", "breathable"]
    tea = products[1]  # "$12.00 - $18.00": a price drawn in the range, the same every time
    assert 12.0 <= tea["price"] <= 18.0 and tea["bullets"] == [
        "Gluten free for everyday use",
        "Caffeine free for everyday use",
    ]
    assert products[2]["price"] == 100.0  # no pricing: WebShop's 100
    assert products[4]["options"] == {}  # customization_options null
    assert products[9]["attributes"] == ["DUMMY_ATTR"]  # not in items_ins_v2


def test_goals_follow_webshops_rules_order_and_splits(data):
    goals = load_shop(data).goals
    # 10 products' first instructions and the two second ones with attributes (two without
    # attributes are skipped), in WebShop's order: its seed-233 shuffle of the product order
    assert len(goals) == 12
    unshuffled = sorted(goals, key=lambda g: (g["asin"], "looking" in g["instruction"]))
    order = list(range(12))
    random.Random(GOAL_ORDER_SEED).shuffle(order)
    assert [g["instruction"] for g in goals] == [unshuffled[i]["instruction"] for i in order]
    for goal in goals:
        product = load_shop(data).catalogue.products[int(goal["asin"][-2:])]
        # the limit: two of the next four multiples of 10 above the price, the larger kept
        above = [10.0 * k for k in range(1, 100) if 10.0 * k > product["price"]][:4]
        assert goal["price_upper"] in above[1:]
        assert goal["instruction"].endswith(
            f", and price lower than {goal['price_upper']:.2f} dollars"
        )
    test = split_goals(goals, "test", **SPLITS)
    dev = split_goals(goals, "dev", **SPLITS)
    train = split_goals(goals, "train", **SPLITS)
    assert [i for i, _ in test] == [0, 1, 2, 3] and [i for i, _ in dev] == [4, 5]
    assert [i for i, _ in train] == list(range(6, 12))
    assert [i for i, _ in split_goals(goals, "test")] == list(range(12))  # 500 by default


def test_tasks_keep_splits_apart_and_say_what_is_short(data):
    kwargs = {"data_dir": str(data), **SPLITS}
    test = make_webshop_official_tasks("eval", 4, **kwargs)
    dev = make_webshop_official_tasks("eval", 2, eval_split="dev", **kwargs)
    train = make_webshop_official_tasks("train", 6, seed=3, **kwargs)
    assert [t.task_id for t in test] == [f"webshop/test/{i}" for i in range(4)]
    assert [t.task_id for t in dev] == ["webshop/dev/4", "webshop/dev/5"]
    assert {t.task_id for t in train} == {f"webshop/train/{i}" for i in range(6, 12)}
    assert train == make_webshop_official_tasks("train", 6, seed=3, **kwargs)
    assert train != make_webshop_official_tasks("train", 6, seed=4, **kwargs)  # shuffled
    goal = json.loads(test[0].fields["goal"])
    assert test[0].prompt == goal["instruction"] and test[0].answers == [goal["asin"]]
    with pytest.raises(ValueError, match="5 eval tasks asked, but WebShop's test split has 4"):
        make_webshop_official_tasks("eval", 5, **kwargs)
    with pytest.raises(ValueError, match="eval_split must be 'test' or 'dev'"):
        make_webshop_official_tasks("eval", 1, eval_split="train", **kwargs)


def test_registered_and_passes_check_env(data):
    assert ENVS["webshop_official"] is OfficialWebShopEnv
    assert TASKS["webshop_official"] is make_webshop_official_tasks
    env_kwargs, task_kwargs = split_options(
        "webshop_official", {"data_dir": str(data), "test_goals": 4, "max_steps": 12}
    )
    assert env_kwargs == {"data_dir": str(data), "max_steps": 12}
    assert task_kwargs == {"data_dir": str(data), "test_goals": 4}
    env = make_env("webshop_official", data_dir=str(data))
    tasks = make_webshop_official_tasks("eval", 12, data_dir=str(data))
    assert check_env(env, tasks) == []


def play_expert(env, task):
    env.reset(task, seed=0)
    results = []
    while not results or not (results[-1].terminated or results[-1].truncated):
        results.append(env.step(act(env.expert_turn()[len("<action>") : -len("</action>")])))
    return results


def test_the_expert_buys_as_instructed_and_env_score_is_webshops_x100(data):
    env = OfficialWebShopEnv(data_dir=str(data), max_steps=15)
    for task in make_webshop_official_tasks("eval", 12, data_dir=str(data)):
        results = play_expert(env, task)
        assert results[-1].terminated and results[-1].info["success"] == 1.0, task.prompt
        assert [r.info["env/score"] for r in results] == [0.0] * (len(results) - 1) + [100.0]
        assert env.product["asin"] == json.loads(task.fields["goal"])["asin"]


def test_a_wrong_purchase_scores_by_hand(data):
    env = OfficialWebShopEnv(data_dir=str(data))
    # "i want lightweight running shoes black | white 9" under 70 dollars (B000000000, $45.99)
    task = next(
        t
        for t in make_webshop_official_tasks("eval", 12, data_dir=str(data))
        if t.answers == ["B000000000"]
    )
    env.reset(task, seed=0)
    env.step(act("search[rubber sole running shoes]"))
    env.step(act("click[B000000005]"))  # Zenith Rubber Sole Running Shoes, $100 (no pricing)
    env.step(act("click[navy]"))
    result = env.step(act("click[Buy Now]"))
    # attribute "lightweight" is one of the product's attributes (items_ins_v2 gives both
    # shoes the same pool): 1; options: "navy" matches neither "black | white" nor "9": 0;
    # price 100 > 70: 0; type: same query, r_type 1. R = (1 + 0 + 0) / (1 + 2 + 1) = 0.25
    assert result.reward == pytest.approx(0.25) and result.info["success"] == 0.0
    assert result.info["env/score"] == pytest.approx(25.0)


def test_an_episode_that_never_buys_reports_score_zero_on_every_step(data):
    env = OfficialWebShopEnv(data_dir=str(data), max_steps=2)
    env.reset(make_webshop_official_tasks("eval", 1, data_dir=str(data))[0], seed=0)
    first = env.step(act("search[tea]"))
    last = env.step(act("click[Back to Search]"))
    assert last.truncated and not last.terminated
    assert first.info["env/score"] == 0.0 and last.info["env/score"] == 0.0


def test_title_nouns():
    # function words and common title adjectives ("for", "soft") are dropped
    assert title_nouns("Acme Soft Breathable Running Shoes for Men") == [
        "acme",
        "breathable",
        "running",
        "shoes",
        "men",
    ]
    assert title_nouns("The Best USB-C Cable, 6 ft") == ["usb-c", "cable", "ft"]


def test_the_spacy_tagger_needs_spacy_and_says_so(data, monkeypatch):
    from agentic_rl.envs.benchmarks import webshop

    webshop._spacy.cache_clear()
    monkeypatch.setitem(sys.modules, "spacy", None)  # import spacy raises ImportError
    with pytest.raises(WebShopDataError, match="noun_tagger=spacy needs spaCy with its en_core"):
        title_nouns("Acme shoes", "spacy")
    webshop._spacy.cache_clear()


def test_the_users_data_errors_name_the_problem(tmp_path, data):
    with pytest.raises(UserInputError, match="set env.options.data_dir=DIR .*WEBSHOP_DATA"):
        make_webshop_official_tasks("eval", 1)
    with pytest.raises(WebShopDataError, match=r"folder .*missing \(env.options.data_dir\) does"):
        OfficialWebShopEnv(data_dir=str(tmp_path / "missing"))
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(WebShopDataError, match=r"items_shuffle_1000.json does not exist"):
        load_shop(empty)
    broken = write_webshop_data(tmp_path / "broken")
    (broken / "items_human_ins.json").write_text("{")
    with pytest.raises(WebShopDataError, match=r"items_human_ins.json cannot be read as JSON"):
        load_shop(broken)
    (broken / "items_human_ins.json").write_text(json.dumps({"B000000000": ["an instruction"]}))
    with pytest.raises(WebShopDataError, match=r"instructions of asin B000000000 are not a list"):
        load_shop(broken)
    with pytest.raises(ValueError, match="catalogue must be one of 1000, full"):
        load_shop(data, "10k")
    with pytest.raises(ValueError, match="noun_tagger must be one of words, spacy"):
        load_shop(data, "1000", "nltk")
