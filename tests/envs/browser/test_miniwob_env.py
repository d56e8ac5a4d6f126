"""MiniWoB++ in a real headless Chromium (envs/browser/): the page text, the actions, the scripted
experts, MiniWoB's reward, malformed actions as data, and the browser pool (reuse, reclaim,
restart after the driver is killed).

The browser tests are marked `browser` and skipped, saying why, only where no Chromium +
chromedriver (or selenium / miniwob) is installed; `make setup` installs them as root on Debian.
"""

from __future__ import annotations

import importlib.util
import os
import signal

import pytest

from agentic_rl.envs.browser.actions import (
    BrowserAction,
    BrowserActionError,
    parse_browser_action,
)
from agentic_rl.envs.browser.driver import BrowserPool, browser_available
from agentic_rl.envs.browser.miniwob import MiniWoBEnv
from agentic_rl.envs.browser.page import Element, Snapshot
from agentic_rl.envs.browser.suite import make_miniwob_tasks
from agentic_rl.envs.check import check_env
from agentic_rl.envs.registry import make_env, task_generator
from agentic_rl.types import Action

TASKS = ["click-button", "click-link", "focus-text", "enter-text", "click-checkboxes"]


def act(text: str) -> Action:
    return Action(kind="tool", name="action", arguments={"actions": text})


def expert_action(env: MiniWoBEnv) -> Action:
    return act(env.expert_action().render())


# -- no browser needed --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("click(3)", BrowserAction("click", 3)),
        ("click( [12] )", BrowserAction("click", 12)),
        ("CLICK 4", BrowserAction("click", 4)),
        ('type(2, "Ann Lee")', BrowserAction("type", 2, "Ann Lee")),
        ("type(2, 'x, y')", BrowserAction("type", 2, "x, y")),
        ("type(5, Bob)", BrowserAction("type", 5, "Bob")),
        ('press("Enter")', BrowserAction("press", text="Enter")),
        ("press(Tab)", BrowserAction("press", text="Tab")),
        ('scroll("DOWN")', BrowserAction("scroll", text="down")),
    ],
)
def test_actions_parse(text, expected):
    assert parse_browser_action(text) == expected
    assert parse_browser_action(expected.render()) == expected  # the expert's text round-trips


@pytest.mark.parametrize(
    "text",
    ["", "click()", "click(the button)", "type(3)", "hover(2)", 'press("F13")', "scroll(left)"],
)
def test_malformed_actions_raise(text):
    with pytest.raises(BrowserActionError):
        parse_browser_action(text)


def test_task_generator_splits_are_disjoint_and_checked():
    train = make_miniwob_tasks("train", 20, seed=0)
    held_out = make_miniwob_tasks("eval", 20, seed=0)
    assert {t.fields["page_seed"] for t in train}.isdisjoint(
        t.fields["page_seed"] for t in held_out
    )
    assert [t.fields["miniwob_task"] for t in train[:5]] == TASKS  # round-robin
    assert task_generator("miniwob") is make_miniwob_tasks
    with pytest.raises(ValueError, match="click-buton.*did you mean click-button"):
        make_miniwob_tasks("train", 2, tasks="click-button,click-buton")


def test_page_text_is_compact_with_ids():
    snap = Snapshot(
        "Select ab and click Submit.",
        (
            "Pick some",
            Element(1, "checkbox", "ab", checked=False),
            Element(2, "textbox", "", value="Ann", focused=True),
            Element(3, "button", "Submit"),
        ),
        done=False,
        raw_reward=0.0,
    )
    assert snap.render() == (
        'text "Pick some"\n[1] checkbox "ab" checked=false\n'
        '[2] textbox "" value="Ann" focused\n[3] button "Submit"'
    )


# -- in the browser -------------------------------------------------------------------------------

needs_browser = pytest.mark.skipif(
    bool(browser_available()) or importlib.util.find_spec("miniwob") is None,
    reason=browser_available() or "the MiniWoB++ pages need `miniwob` (pip install '.[gui]')",
)


@pytest.fixture(scope="module")
def pool():
    pool = BrowserPool(max_browsers=1, tabs_per_browser=8)
    yield pool
    pool.close()


@pytest.mark.browser
@needs_browser
def test_check_env_passes(pool):
    env = MiniWoBEnv(pool=pool)
    assert check_env(env, make_miniwob_tasks("eval", 5), max_expert_turns=8) == []


@pytest.mark.browser
@needs_browser
@pytest.mark.parametrize("name", TASKS)
def test_expert_solves_each_task(pool, name):
    env = MiniWoBEnv(pool=pool)
    for task in make_miniwob_tasks("train", 3, seed=1, tasks=name):
        first = env.reset(task, 0).messages[1]["content"]
        assert first.startswith("Task: ") and "\nPage:\n" in first and "\n[1] " in first
        for _ in range(8):
            result = env.step(expert_action(env))
            if result.terminated:
                break
        assert result.terminated and result.reward == 1.0 and result.info["success"] == 1.0


@pytest.mark.browser
@needs_browser
def test_wrong_click_ends_with_miniwob_reward(pool):
    env = MiniWoBEnv(pool=pool)
    task = make_miniwob_tasks("eval", 1, tasks="click-button")[0]
    env.reset(task, 0)
    right = env.expert_action().ref
    wrong = next(e.ref for e in env.snapshot.elements if e.role == "button" and e.ref != right)
    result = env.step(act(f"click({wrong})"))
    assert result.terminated and result.reward == -1.0 and result.info["success"] == 0.0


@pytest.mark.browser
@needs_browser
def test_malformed_and_missing_actions_are_data(pool):
    env = MiniWoBEnv(pool=pool)
    task = make_miniwob_tasks("eval", 1, tasks="enter-text")[0]
    env.reset(task, 0)
    for bad in ("clik(1)", "click(99)", "type(1)"):
        result = env.step(act(bad))
        assert not result.terminated and result.reward == -0.1
        assert result.info["invalid_action"] == 1 and result.observation.name == "error"
        assert "[1] textbox" in result.observation.content  # the page is shown again
    result = env.step(Action(kind="invalid", error="no tag"))
    assert result.info["invalid_action"] == 1 and not result.terminated
    # the episode goes on: the expert still solves it
    for _ in range(3):
        result = env.step(expert_action(env))
        if result.terminated:
            break
    assert result.terminated and result.info["success"] == 1.0


@pytest.mark.browser
@needs_browser
def test_resets_are_deterministic_and_step_limit_truncates(pool):
    env = MiniWoBEnv(pool=pool, max_steps=1)
    task = make_miniwob_tasks("train", 5, tasks="click-checkboxes")[3]
    assert env.reset(task, 0) == env.reset(task, 99)  # the task fixes the page seed
    box = next(e.ref for e in env.snapshot.elements if e.role == "checkbox")
    result = env.step(act(f"click({box})"))
    assert result.truncated and not result.terminated and result.info["success"] == 0.0
    # unfinished: the rollout adds MiniWoB's timeout reward to the truncated episode
    assert result.reward == 0.0 and env.truncation_reward() == -1.0


@pytest.mark.browser
@needs_browser
def test_giving_up_scores_as_miniwob_timeout(pool):
    """An episode the agent ends unfinished scores -1, as MiniWoB's timer scores one: never
    better than a wrong click (-1), so stalling cannot beat trying."""
    env = MiniWoBEnv(pool=pool)
    env.reset(make_miniwob_tasks("eval", 1, tasks="click-button")[0], 0)
    result = env.step(Action(kind="answer", text="done"))
    assert result.terminated and result.reward == -1.0 and result.info["success"] == 0.0


@pytest.mark.browser
@needs_browser
@pytest.mark.parametrize("name", TASKS)
def test_in_page_reset_equals_a_fresh_page(pool, name):
    """Episodes after the first reuse the loaded page (MiniWoB's in-page reset): the page they
    build is the one a fresh load builds, also after a played episode left state behind."""
    first, second = make_miniwob_tasks("eval", 2, seed=2, tasks=name)
    fresh = MiniWoBEnv(pool=pool, reload_every=1)  # every reset reloads the page
    reused = MiniWoBEnv(pool=pool)
    reused.reset(first, 0)
    reused.step(expert_action(reused))  # leave focus, values and a finished episode behind
    assert reused.reset(second, 0) == fresh.reset(second, 0)
    assert reused.reset(first, 0) == fresh.reset(first, 0)


@pytest.mark.browser
@needs_browser
def test_reclaimed_tab_replays_the_episode():
    """Two episodes share one tab: each reclaim makes the other replay its actions, and both
    still finish (the model never sees the infrastructure)."""
    small = BrowserPool(max_browsers=1, tabs_per_browser=1)
    try:
        a, b = MiniWoBEnv(pool=small), MiniWoBEnv(pool=small)
        ta, tb = make_miniwob_tasks("eval", 2, seed=3, tasks="enter-text")
        a.reset(ta, 0)
        b.reset(tb, 0)
        done = {}
        for _ in range(3):
            for name, env in (("a", a), ("b", b)):
                if name not in done:
                    result = env.step(expert_action(env))
                    if result.terminated:
                        done[name] = result.info["success"]
        assert done == {"a": 1.0, "b": 1.0}
        assert a.infra_failures == 0 and small.started == 1  # reclaimed, not crashed
    finally:
        small.close()


@pytest.mark.browser
@needs_browser
def test_killed_driver_is_restarted():
    """Kill the chromedriver process: the episode in flight is replayed on a fresh browser and
    the next episode works."""
    pool = BrowserPool(max_browsers=1, tabs_per_browser=4)
    try:
        env = make_env("miniwob", pool=pool)
        task = make_miniwob_tasks("train", 1, tasks="enter-text")[0]
        env.reset(task, 0)
        env.step(expert_action(env))  # typed the text
        os.kill(pool.browsers[0].pid(), signal.SIGKILL)
        result = env.step(expert_action(env))  # Submit, on a fresh browser after a replay
        assert result.terminated and result.info["success"] == 1.0
        assert env.infra_failures >= 1 and pool.started == 2 and pool.restarts == 1
        os.kill(pool.browsers[0].pid(), signal.SIGKILL)  # between episodes
        nxt = make_miniwob_tasks("train", 2, tasks="click-button")[1]
        env.reset(nxt, 0)
        result = env.step(expert_action(env))
        assert result.terminated and result.info["success"] == 1.0 and pool.started == 3
    finally:
        pool.close()


@pytest.mark.browser
@needs_browser
def test_success_reward_gives_no_partial_credit(pool):
    """click-checkboxes credits (right - wrong) boxes / boxes: submitting at once scores the
    share of boxes that should stay unchecked. With reward="success" any ending but a solved
    page is -1, and a solved page +1, as with the raw reward."""
    probe = MiniWoBEnv(pool=pool)
    task = next(  # a page with a box to check: submitting at once does not solve it
        t
        for t in make_miniwob_tasks("eval", 40, tasks="click-checkboxes")
        if "Select nothing" not in probe.reset(t, 0).messages[1]["content"]
    )
    scores = {}
    for reward in ("raw", "success"):
        env = MiniWoBEnv(pool=pool, reward=reward)
        env.reset(task, 0)
        submit = next(e.ref for e in env.snapshot.elements if e.role == "button")
        scores[reward] = env.step(act(f"click({submit})"))
        solved = None
        env.reset(task, 0)
        for _ in range(8):
            solved = env.step(expert_action(env))
            if solved.terminated:
                break
        assert solved.reward == 1.0 and solved.info["success"] == 1.0
    partial = scores["raw"]
    assert partial.terminated and partial.info["success"] == 0.0
    assert -1.0 < partial.reward < 1.0  # MiniWoB's partial credit
    assert scores["success"].reward == -1.0 and scores["success"].info["success"] == 0.0


def test_an_unknown_reward_is_refused():
    with pytest.raises(ValueError, match=r"reward must be one of \('raw', 'success'\)"):
        MiniWoBEnv(reward="shaped")
