"""The report in a real browser: headless Chromium driven by Selenium through the system's
chromedriver (Debian: `apt-get install chromium chromium-driver`; nothing is downloaded).

Skipped, saying why, only where no Chromium + chromedriver (or no selenium) is installed.
Screenshots are kept under each test's tmp dir."""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path

import pytest

from agentic_rl.report.html import write_report

pytestmark = pytest.mark.browser

BROWSERS = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")


def _chromium() -> tuple[str | None, str | None, str]:
    """(browser, chromedriver, why not)."""
    try:
        import selenium  # noqa: F401
    except ImportError:
        return None, None, "selenium is not installed (pip install -e '.[dev]')"
    browser = next((p for p in map(shutil.which, BROWSERS) if p), None)
    driver = shutil.which("chromedriver")
    if browser is None or driver is None:
        return (
            browser,
            driver,
            "no headless Chromium with chromedriver on PATH "
            "(Debian/Ubuntu: apt-get install chromium chromium-driver)",
        )
    return browser, driver, ""


@pytest.fixture(scope="module")
def driver():
    browser, chromedriver, why = _chromium()
    if why:
        pytest.skip(why)
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    os.environ.setdefault("SE_AVOID_STATS", "true")  # selenium-manager: no telemetry
    options = webdriver.ChromeOptions()
    options.binary_location = browser
    for arg in (
        "--headless=new",
        "--no-sandbox",  # root in containers
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--window-size=1500,1100",
        "--host-resolver-rules=MAP * ~NOTFOUND",  # the page must not need the network
    ):
        options.add_argument(arg)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    chrome = webdriver.Chrome(service=Service(chromedriver), options=options)
    chrome.set_page_load_timeout(60)
    yield chrome
    chrome.quit()


@pytest.fixture(scope="module")
def report(report_runs, tmp_path_factory) -> Path:
    return write_report(list(report_runs), tmp_path_factory.mktemp("report") / "report.html")


def open_page(driver, path: Path) -> None:
    driver.get(path.resolve().as_uri())
    deadline = time.time() + 30
    while driver.execute_script("return document.body && document.body.dataset.ready") != "1":
        assert time.time() < deadline, "the page did not finish rendering"
        time.sleep(0.1)


def console_errors(driver) -> list[dict]:
    return [e for e in driver.get_log("browser") if e["level"] in ("SEVERE", "ERROR")]


def scroll_to(driver, element_id: str) -> None:
    driver.execute_script(f"document.getElementById('{element_id}').scrollIntoView()")


def background(driver, css: str) -> str:
    return driver.execute_script(
        f"return getComputedStyle(document.querySelector('{css}')).backgroundColor"
    )


def test_the_page_loads_without_errors_or_network(driver, report, tmp_path):
    open_page(driver, report)
    assert console_errors(driver) == []
    # nothing was fetched: no script, style, image or font resources at all
    assert driver.execute_script("return performance.getEntriesByType('resource').length") == 0
    assert "grpo" in driver.find_element("id", "runs").text
    driver.save_screenshot(str(tmp_path / "report_top.png"))


def test_each_curve_has_data(driver, report):
    open_page(driver, report)
    curves = driver.execute_script(
        "return [...document.querySelectorAll('#curves .curve')].map(d => ({panel: d.dataset.panel,"
        " points: (d.data || []).map(t => t.x.length)}))"
    )
    panels = {c["panel"] for c in curves}
    assert {"reward", "success", "kl", "entropy", "clip", "lengths", "tools", "time"} <= panels
    for curve in curves:
        assert curve["points"] and all(n > 0 for n in curve["points"]), curve
    # every panel drew its traces (an SVG path per trace)
    drawn = driver.execute_script(
        "return [...document.querySelectorAll('#curves .curve')]"
        ".map(d => d.querySelectorAll('.scatterlayer .trace').length)"
    )
    assert all(n > 0 for n in drawn)


def test_the_evaluation_table_and_the_config(driver, report):
    open_page(driver, report)
    table = driver.find_element("id", "eval-table").text
    assert "before RL" in table and "after the warm start" in table and "step 2" in table
    diff = driver.find_element("id", "config-diff").text
    assert "algo.name" in diff and "rloo" in diff


def test_clicking_a_trajectory_opens_it_and_masked_tokens_look_different(driver, report, tmp_path):
    open_page(driver, report)
    scroll_to(driver, "sec-trajectories")
    rows = driver.find_elements("css selector", "tr.traj-row")
    assert rows
    rows[0].click()
    tokens = driver.find_elements("css selector", "#tokens .tok")
    n = driver.execute_script(
        "const r = document.querySelector('tr.traj-row.selected');"
        "return REPORT.runs[r.dataset.run].trajectories[r.dataset.index].ids.length"
    )
    assert len(tokens) == n > 0
    # open the prompt too, then compare an injected (mask 0) with a trained (mask 1) token
    driver.execute_script("document.querySelector('#tokens details.prompt').open = true")
    masked = background(driver, '#tokens .tok[data-mask="0"]')
    trained = background(driver, '#tokens .seg.turn .tok[data-mask="1"]')
    assert masked != trained
    assert driver.find_element("css selector", "#tokens .seg.turn .title").text.startswith("turn 1")
    driver.save_screenshot(str(tmp_path / "trajectory_mask.png"))

    # the other colourings render without errors and change the colours
    for mode in ("advantage", "logprob", "drift", "version"):
        driver.find_element("css selector", f'input[name=color][value="{mode}"]').click()
        assert driver.find_elements("css selector", "#tokens .tok")
    driver.find_element("css selector", 'input[name=color][value="logprob"]').click()
    assert background(driver, '#tokens .seg.turn .tok[data-mask="1"]') != trained
    driver.save_screenshot(str(tmp_path / "trajectory_logprob.png"))
    assert console_errors(driver) == []


def test_filters(driver, report):
    open_page(driver, report)
    from selenium.webdriver.support.ui import Select

    def count() -> int:
        return len(driver.find_elements("css selector", "tr.traj-row"))

    everything = count()
    Select(driver.find_element("id", "f-step")).select_by_value("1")
    steps = driver.execute_script(
        "return [...document.querySelectorAll('tr.traj-row')].map(r => r.children[1].textContent)"
    )
    assert steps and set(steps) == {"1"} and len(steps) < everything
    Select(driver.find_element("id", "f-split")).select_by_value("eval")
    assert count() > 0
    driver.find_element("id", "f-rmin").send_keys("1000")
    assert count() == 0
    assert console_errors(driver) == []


def test_two_runs_compare(driver, report, tmp_path):
    open_page(driver, report)
    traces = driver.execute_script(
        "return document.querySelector('#curves .curve[data-panel=reward]').data.map(t => t.name)"
    )
    assert any(t.startswith("grpo ·") for t in traces)
    assert any(t.startswith("rloo ·") for t in traces)
    from selenium.webdriver.support.ui import Select

    Select(driver.find_element("id", "curve-layout")).select_by_value("side")
    panels = driver.execute_script(
        "return [...document.querySelectorAll('#curves .curve[data-panel=reward]')]"
        ".map(d => d.dataset.runs)"
    )
    assert panels == ["grpo", "rloo"]
    ranges = driver.execute_script(
        "return [...document.querySelectorAll('#curves .curve[data-panel=reward]')]"
        ".map(d => d._fullLayout.yaxis.range)"
    )
    assert ranges[0] == ranges[1]  # side by side on the same scale
    scroll_to(driver, "sec-curves")
    driver.save_screenshot(str(tmp_path / "compare.png"))
    assert console_errors(driver) == []


@pytest.fixture(scope="module")
def large_run(tmp_path_factory) -> Path:
    """A synthetic run of 100 steps x 64 episodes of 300 tokens (6,400 trajectories)."""
    import json
    import random

    from agentic_rl.learner.batch import Episodes
    from agentic_rl.train.trajectory_log import TrajectoryLog
    from agentic_rl.types import Trajectory

    class Words:
        def decode(self, ids):
            return "".join(f" w{i}" for i in ids)

    run = tmp_path_factory.mktemp("large") / "large"
    log = TrajectoryLog(run, Words(), per_step=-1)
    rng = random.Random(0)
    mask = [0] * 100 + [1] * 100 + [0] * 50 + [1] * 50
    with (run / "metrics.jsonl").open("w") as f:
        for step in range(1, 101):
            trajs = [
                Trajectory(
                    token_ids=[rng.randrange(5000) for _ in mask],
                    loss_mask=mask,
                    logprobs=[-rng.random() * m for m in mask],
                    prompt_length=100,
                    turn_spans=[(100, 200), (250, 300)],
                    step_rewards=[0.0, float(e % 2)],
                    reward=float(e % 2),
                    group_id=f"{step}:task{e // 8}",
                )
                for e in range(64)
            ]
            log.write_step(step, Episodes([[t] for t in trajs], [None] * len(trajs)))
            record = {"step": step, "time": step * 10.0, "train/reward": rng.random()}
            f.write(json.dumps(record) + "\n")
    return run


def test_a_large_run_opens_fast(driver, large_run, tmp_path):
    start = time.time()
    report = write_report([large_run], tmp_path / "large.html")
    assert time.time() - start < 60
    assert report.stat().st_size < 20e6
    start = time.time()
    open_page(driver, report)
    assert time.time() - start < 30  # ~5 s on a loaded 2-core machine
    # lazy: the list shows a page of rows, and no token is rendered before one is opened
    assert len(driver.find_elements("css selector", "tr.traj-row")) == 50
    assert driver.find_elements("css selector", ".tok") == []
    note = driver.find_element("id", "sampled-note").text
    assert "of 6400 logged trajectories" in note
    driver.find_elements("css selector", "tr.traj-row")[0].click()
    assert len(driver.find_elements("css selector", "#tokens .tok")) == 300
    assert console_errors(driver) == []
