"""Every MiniWoB++ task of the installed package, and pages a model can read and act on: tabs
and the links in their panels, selects with their options and value, controls inside a named
container, dialogs outside the task area; `type` into a button refused without clicking it; an
episode the page ended stops the env; a long malformed action is cut where it is echoed.
Real headless Chromium where marked `browser` (as test_miniwob_env.py)."""

from __future__ import annotations

import importlib.util
import re
import time

import pytest

from agentic_rl.envs.browser.actions import BrowserActionError, parse_browser_action
from agentic_rl.envs.browser.driver import BrowserPool, browser_available
from agentic_rl.envs.browser.experts import EXPERTS, ExpertError
from agentic_rl.envs.browser.miniwob import MAX_WHY, MiniWoBEnv
from agentic_rl.envs.browser.page import Element, Snapshot
from agentic_rl.envs.browser.suite import make_miniwob_tasks, page_names, suite_names
from agentic_rl.envs.check import check_env
from agentic_rl.types import Action

needs_miniwob = pytest.mark.skipif(
    importlib.util.find_spec("miniwob") is None,
    reason="the MiniWoB++ pages need `miniwob` (pip install '.[gui]')",
)
needs_browser = pytest.mark.skipif(
    bool(browser_available()) or importlib.util.find_spec("miniwob") is None,
    reason=browser_available() or "the MiniWoB++ pages need `miniwob` (pip install '.[gui]')",
)


def act(text: str) -> Action:
    return Action(kind="tool", name="action", arguments={"actions": text})


# -- no browser needed --------------------------------------------------------------------------


@needs_miniwob
def test_any_task_of_the_installed_package_can_be_named():
    pages = page_names()
    assert len(pages) >= 100 and set(EXPERTS) <= set(pages)
    suite = suite_names()  # the registered ones: the benchmark's set
    assert "book-flight" in suite and "click-tab-2" in suite and set(suite) <= set(pages)
    assert "simon-says" in pages and "simon-says" not in suite  # shipped, not registered
    tasks = make_miniwob_tasks("eval", len(suite), tasks="all")
    assert [t.fields["miniwob_task"] for t in tasks] == suite  # each task once, in order
    assert {t.prompt for t in tasks if t.fields["has_expert"]} == set(EXPERTS)
    named = make_miniwob_tasks("train", 2, tasks="simon-says,click-tab-2")
    assert [t.fields["has_expert"] for t in named] == [False, False]


@pytest.mark.parametrize(
    "text",
    [
        "x" * 5000,
        "click(" + "9" * 5000 + ")",
        "type(" + "1" * 5000 + ', "a")',
        'type(2, "a' + "b" * 5000,
        "press(" + "F" * 5000 + ")",
        "scroll(" + "s" * 5000 + ")",
        "clack" * 1000 + "(1)",
    ],
)
def test_a_long_malformed_action_is_cut_in_its_error(text):
    with pytest.raises(BrowserActionError) as err:
        parse_browser_action(text)
    assert len(str(err.value)) < 120


def test_select_parses_and_the_page_text_shows_a_select_and_tabs():
    assert parse_browser_action('select(3, "Bob Lee")').render() == 'select(3, "Bob Lee")'
    snap = Snapshot(
        "Select Bob.",
        (
            Element(1, "tab", "Tab #1", selected=True, expanded=True),
            Element(2, "combobox", "", value="Ann", options=("Ann", "Bob")),
        ),
        done=False,
        raw_reward=0.0,
    )
    assert snap.render() == (
        '[1] tab "Tab #1" selected=true expanded=true\n'
        '[2] combobox "" value="Ann" options=["Ann", "Bob"]'
    )


# -- in the browser -------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def pool():
    pool = BrowserPool(max_browsers=1, tabs_per_browser=4)
    yield pool
    pool.close()


def start(pool, name: str, seed: int = 0, **options) -> MiniWoBEnv:
    env = MiniWoBEnv(pool=pool, **options)
    env.reset(make_miniwob_tasks("eval", 1, seed=seed, tasks=name)[0], 0)
    return env


def element(env: MiniWoBEnv, role: str, name: str | None = None) -> Element:
    assert env.snapshot is not None
    found = [e for e in env.snapshot.elements if e.role == role and name in (None, e.name)]
    assert found, env.snapshot.render()
    return found[0]


@pytest.mark.browser
@needs_browser
def test_tabs_and_the_links_in_their_panels_get_ids(pool):
    """click-tab-2: every tab is numbered by its name, and the links of the shown panel too;
    switching tabs until the named link shows, then clicking it, solves the task."""
    env = start(pool, "click-tab-2")
    assert env.snapshot is not None
    wanted = re.search(r'"([^"]+)"', env.snapshot.utterance).group(1)
    tabs = [e for e in env.snapshot.elements if e.role == "tab"]
    assert [t.name for t in tabs] == ["Tab #1", "Tab #2", "Tab #3"]
    assert sum(bool(t.selected) for t in tabs) == 1
    for tab in tabs:
        result = env.step(act(f"click({element(env, 'tab', tab.name).ref})"))
        assert not result.terminated
        assert element(env, "tab", tab.name).selected is True
        links = [e for e in env.snapshot.elements if e.role == "link"]
        assert links, env.snapshot.render()  # the panel's links are reachable
        if any(link.name.strip(",.") == wanted for link in links):
            target = next(link for link in links if link.name.strip(",.") == wanted)
            result = env.step(act(f"click({target.ref})"))
            assert result.terminated and result.info["success"] == 1.0
            return
    raise AssertionError(f"link {wanted!r} never shown")


@pytest.mark.browser
@needs_browser
def test_a_select_shows_its_options_and_value_and_select_chooses(pool):
    env = start(pool, "choose-list")
    box = element(env, "combobox")
    assert env.snapshot is not None
    wanted = re.match(r"Select (.+) from the list", env.snapshot.utterance).group(1)
    assert box.options and wanted in box.options and box.value == box.options[0]
    assert box.name != "".join(box.options)  # not its options run together
    result = env.step(act(f'select({box.ref}, "nobody here")'))
    assert result.info["invalid_action"] == 1 and "no option" in result.observation.content
    result = env.step(act(f'select({box.ref}, "{wanted}")'))
    assert f'value="{wanted}"' in result.observation.content
    result = env.step(act(f"click({element(env, 'button', 'Submit').ref})"))
    assert result.terminated and result.info["success"] == 1.0


@pytest.mark.browser
@needs_browser
def test_a_control_inside_a_named_container_stays_reachable(pool):
    """click-collapsible: the Submit button sits inside an accordion header (role=tab)."""
    env = start(pool, "click-collapsible")
    header = element(env, "tab")
    assert header.expanded is False
    submit = element(env, "button", "Submit")
    env.step(act(f"click({header.ref})"))
    assert element(env, "tab", header.name).expanded is True
    result = env.step(act(f"click({element(env, 'button', 'Submit').ref})"))
    assert submit.ref and result.terminated and result.info["success"] == 1.0


@pytest.mark.browser
@needs_browser
def test_a_dialog_outside_the_task_area_is_shown(pool):
    env = start(pool, "click-dialog")
    close = element(env, "button", "Close")  # jQuery UI puts the dialog on the body
    result = env.step(act(f"click({close.ref})"))
    assert result.terminated and result.info["success"] == 1.0


@pytest.mark.browser
@needs_browser
def test_typing_into_a_button_does_not_click_it(pool):
    env = start(pool, "enter-text")
    submit = element(env, "button", "Submit")
    result = env.step(act(f'type({submit.ref}, "hello")'))
    assert not result.terminated and result.info["invalid_action"] == 1
    assert "cannot be typed into" in result.observation.content
    assert env.snapshot is not None and not env.snapshot.done  # the page was not submitted
    for _ in range(3):
        result = env.step(act(env.expert_action().render()))
        if result.terminated:
            break
    assert result.terminated and result.info["success"] == 1.0


@pytest.mark.browser
@needs_browser
def test_an_episode_the_page_ended_stops_the_env(pool):
    """MiniWoB's own timer ends the episode (reward -1): the next step, even a malformed
    action, ends the env with the page's reward; a step after that is refused."""
    env = start(pool, "click-button", episode_time_s=0.3)
    time.sleep(1.0)
    result = env.step(act("clik(1)"))
    assert result.terminated and result.reward == -1.0 and result.info["success"] == 0.0
    assert env.done and env.lease is None  # its tab went back to the pool
    with pytest.raises(RuntimeError, match="after the episode terminated"):
        env.step(act("click(1)"))


@pytest.mark.browser
@needs_browser
def test_a_long_malformed_action_is_cut_in_the_observation(pool):
    env = start(pool, "enter-text")
    page = env.snapshot.render() if env.snapshot else ""
    for text in ("x" * 20000, "hover(" + "1" * 20000 + ")"):
        result = env.step(act(text))
        assert result.info["invalid_action"] == 1
        assert len(result.observation.content) <= len(page) + MAX_WHY + 80
    long_error = Action(kind="invalid", error="no tag " + "y" * 20000)
    result = env.step(long_error)
    assert len(result.observation.content) <= len(page) + MAX_WHY + 80


@pytest.mark.browser
@needs_browser
def test_tasks_without_an_expert_play_and_check_env_passes_on_a_mix(pool):
    env = start(pool, "click-tab-2")
    with pytest.raises(ExpertError, match="no scripted expert"):
        env.expert_turn()
    tasks = make_miniwob_tasks("eval", 2, tasks="click-button,click-tab")
    skipped = check_env(MiniWoBEnv(pool=pool), tasks, max_expert_turns=8)
    assert any("has_expert=false" in s for s in skipped)


@needs_miniwob
def test_warm_start_uses_experts_where_they_exist_and_says_where_not(capsys):
    from agentic_rl.train.collect import expert_tasks

    tasks = make_miniwob_tasks("train", 4, tasks="click-button,click-tab-2")
    assert [t.prompt for t in expert_tasks(tasks, "warm start")] == ["click-button"] * 2
    assert "no scripted expert for click-tab-2" in capsys.readouterr().out
    with pytest.raises(ValueError, match="no training task has a scripted expert"):
        expert_tasks(make_miniwob_tasks("train", 2, tasks="click-tab-2"), "warm start")
