"""A browser dies with its owner (envs/browser/driver.py's watchdog): a process that started
a browser and is killed with SIGKILL leaves no chromedriver, no Chromium, none of its helpers
and no profile directory behind; a closed pool leaves nothing either. Real headless Chromium,
marked `browser`."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from agentic_rl.envs.browser.driver import BrowserPool, browser_available

needs_browser = pytest.mark.skipif(bool(browser_available()), reason=browser_available() or "-")

OWNER = """
import time
from agentic_rl.envs.browser.driver import BrowserPool
pool = BrowserPool(max_browsers=1, tabs_per_browser=2)
pool.acquire()
browser = pool.browsers[0]
browser.driver.get("data:text/html,<p>hello</p>")
print(browser.pid(), browser.profile, flush=True)
time.sleep(600)
"""


def browser_processes(group: int, profile: str) -> list[str]:
    """The live processes of a browser: its process group's, and any naming its profile (the
    crash handler leaves the group)."""
    out = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            with open(f"/proc/{name}/cmdline", "rb") as f:
                command = f.read().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if fields[0] in ("Z", "X"):
            continue
        if int(fields[2]) == group or profile in command:
            out.append(f"{name} {command[:60]}")
    return out


def gone(group: int, profile: str, timeout_s: float = 20.0) -> list[str]:
    """Wait until the browser's processes and profile are gone; what is left otherwise."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        left = browser_processes(group, profile)
        if not left and not Path(profile).exists():
            return []
        time.sleep(0.1)
    return browser_processes(group, profile) + [profile] * Path(profile).exists()


@pytest.mark.browser
@needs_browser
def test_an_owner_killed_with_sigkill_leaves_no_browser():
    owner = subprocess.Popen(
        [sys.executable, "-c", OWNER], stdout=subprocess.PIPE, text=True, start_new_session=True
    )
    try:
        assert owner.stdout is not None
        line = owner.stdout.readline().split()
        group, profile = int(line[0]), line[1]
        running = browser_processes(group, profile)
        assert any("chromium" in p or "chrome" in p for p in running), running
        assert Path(profile).is_dir()
    finally:
        os.kill(owner.pid, signal.SIGKILL)
        owner.wait()
    assert gone(group, profile) == []


@pytest.mark.browser
@needs_browser
def test_a_closed_pool_leaves_no_browser():
    pool = BrowserPool(max_browsers=1, tabs_per_browser=1)
    pool.acquire()
    browser = pool.browsers[0]
    group, profile = browser.pid(), browser.profile
    assert group is not None and Path(profile).is_dir()
    pool.close()
    assert gone(group, profile, timeout_s=5.0) == []
    assert browser.watchdog is not None and browser.watchdog.poll() == 0
