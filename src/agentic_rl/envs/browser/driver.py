"""Headless Chromium through the system's chromedriver, pooled across episodes.

Starting a browser takes a second or two, so browsers are started once per process and reused:
a `BrowserPool` holds up to `max_browsers` browsers, each with up to `tabs_per_browser` tabs,
and every episode leases one tab (`Lease`; the env resets the tab's page for its episode).
Tabs share two renderer processes, so a browser with 8 tabs holds ~0.7 GB (PSS, measured).
Envs are created fresh for every episode and never closed by the trainer, and the rollout may
stop an episode without telling its env, so a lease is given back when its episode ends, when
its env is garbage-collected, or, when the pool is full, taken from the least recently used
episode. An env whose lease was taken (or whose browser
died) gets a new one and replays its episode there: pages are seeded, so the replay reaches the
same page (see miniwob.py). That is also how a browser that dies is survived: any WebDriver
error marks the browser dead, its process group is ended, and the next lease starts a fresh
one.

A browser dies with its owner, however the owner ends (SIGKILL included): every browser has a
watchdog, a tiny stdlib-only Python process in its own session that reads a pipe only the
owner holds. When the owner exits or is killed, the kernel closes the pipe; the watchdog then
kills the browser's process group (chromedriver, Chromium and its helpers) and removes the
browser's profile directory. (A parent-death signal, `PR_SET_PDEATHSIG`, is not used: it fires
when the *thread* that started the child ends, which would kill browsers started from a worker
thread, and it reaches only chromedriver, not the Chromium it starts.)

Every browser has time limits: page loads (`page_load_timeout_s`) and scripts
(`script_timeout_s`). Nothing is downloaded: the browser and chromedriver must be installed
(Debian/Ubuntu: `apt-get install chromium chromium-driver`; `make setup` does it as root).
"""

from __future__ import annotations

import contextlib
import itertools
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
from dataclasses import dataclass, field
from typing import Any

BROWSERS = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")


class BrowserUnavailable(RuntimeError):
    """No usable headless Chromium + chromedriver (or selenium) on this machine; says what to
    install."""


class BrowserDied(RuntimeError):
    """A browser stopped answering (crashed, killed, hung past its time limit). An
    infrastructure failure, not a model error: the env replays the episode on a fresh one."""


def find_browser() -> tuple[str, str]:
    """(browser binary, chromedriver) from PATH, or BrowserUnavailable saying what is missing.
    `AGENTIC_RL_CHROME` / `AGENTIC_RL_CHROMEDRIVER` override the search."""
    try:
        import selenium  # noqa: F401
    except ImportError as err:
        raise BrowserUnavailable(
            "selenium is not installed: pip install 'agentic-rl[gui]'"
        ) from err
    browser = os.environ.get("AGENTIC_RL_CHROME") or next(
        (p for p in map(shutil.which, BROWSERS) if p), None
    )
    driver = os.environ.get("AGENTIC_RL_CHROMEDRIVER") or shutil.which("chromedriver")
    if not browser or not driver:
        raise BrowserUnavailable(
            "no headless Chromium with chromedriver on PATH (Debian/Ubuntu: apt-get install "
            "chromium chromium-driver; elsewhere install Chrome/Chromium and the matching "
            "chromedriver, or set AGENTIC_RL_CHROME and AGENTIC_RL_CHROMEDRIVER)"
        )
    return browser, driver


def browser_available() -> str:
    """ "" when a browser can be started here, else the reason it cannot (for test skips)."""
    try:
        find_browser()
    except BrowserUnavailable as err:
        return str(err)
    return ""


WATCHDOG = """
import os, shutil, signal, sys, time
profile = sys.argv[1]
line = sys.stdin.buffer.readline()  # the browser's process group, once it has started
sys.stdin.buffer.read()  # returns at EOF: the owner closed the pipe, or died
if line.strip():
    group = int(line)
    try:
        os.killpg(group, signal.SIGKILL)
    except OSError:
        pass
    deadline = time.monotonic() + 10.0
    while time.monotonic() < deadline:  # the profile is removed once nothing writes to it
        try:
            os.killpg(group, 0)
        except OSError:
            break
        time.sleep(0.05)
shutil.rmtree(profile, ignore_errors=True)
"""


def start_watchdog(profile: str) -> subprocess.Popen[bytes]:
    """A browser's watchdog (module doc): told the browser's process group by `watch_group`,
    it kills that group and removes `profile` when its stdin closes, which happens when this
    process closes it (`Browser.quit`) or exits in any way. Its own session, so a Ctrl-C to
    the owner's terminal group does not stop it before it acts."""
    return subprocess.Popen(
        [sys.executable, "-I", "-S", "-c", WATCHDOG, profile],
        stdin=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )


def watch_group(watchdog: subprocess.Popen[bytes], group: int) -> None:
    """Tell `watchdog` the process group it guards."""
    assert watchdog.stdin is not None
    watchdog.stdin.write(f"{group}\n".encode())
    watchdog.stdin.flush()


def _watched_service(chromedriver: str, watchdog: subprocess.Popen[bytes]) -> Any:
    """A chromedriver Service in its own process group (chromedriver, Chromium and its
    helpers), so `quit` and the watchdog can end all of it even when chromedriver is already
    dead; the watchdog learns the group the moment the process exists."""
    from selenium.webdriver.chrome.service import Service

    class WatchedService(Service):  # type: ignore[misc]
        def _start_process(self, path: str) -> None:
            super()._start_process(path)
            watch_group(watchdog, self.process.pid)

    return WatchedService(chromedriver, popen_kw={"start_new_session": True})


def _webdriver_errors() -> tuple[type[BaseException], ...]:
    from selenium.common.exceptions import WebDriverException
    from urllib3.exceptions import HTTPError

    return (WebDriverException, HTTPError, ConnectionError, OSError)


@dataclass
class Browser:
    """One running Chromium and its chromedriver; `tabs` maps a lease id to its window."""

    driver: Any
    watchdog: subprocess.Popen[bytes] | None = None  # ends the browser when its owner dies
    profile: str = ""  # Chromium's profile directory (removed by the watchdog)
    tabs: dict[int, str] = field(default_factory=dict)
    free_windows: list[str] = field(default_factory=list)
    current: str | None = None  # the window the driver is switched to
    dead: bool = False

    def pid(self) -> int | None:
        """The chromedriver process id (tests kill it to simulate a crash)."""
        process = getattr(getattr(self.driver, "service", None), "process", None)
        return getattr(process, "pid", None)

    def quit(self) -> None:
        """End the browser and chromedriver, whatever state they are in: a polite quit, then
        the whole process group (Chromium's helpers too, and a browser whose chromedriver
        died)."""
        pid = self.pid()
        with contextlib.suppress(Exception):
            self.driver.quit()
        if pid is not None:
            with contextlib.suppress(OSError):
                os.killpg(pid, signal.SIGKILL)  # the group chromedriver leads
        if self.watchdog is not None:  # EOF: it removes the profile and exits
            with contextlib.suppress(OSError):
                if self.watchdog.stdin is not None:
                    self.watchdog.stdin.close()
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.watchdog.wait(timeout=15.0)


class Lease:
    """One episode's tab in a pooled browser. Valid until released or reclaimed; `driver()`
    switches the browser to this tab and returns it."""

    def __init__(self, pool: BrowserPool, lease_id: int, browser: Browser) -> None:
        self.pool, self.id, self.browser = pool, lease_id, browser

    @property
    def valid(self) -> bool:
        return not self.browser.dead and self.id in self.browser.tabs

    def driver(self) -> Any:
        if not self.valid:
            raise BrowserDied("the lease was reclaimed or its browser died")
        window = self.browser.tabs[self.id]
        self.pool.touch(self.id)
        try:
            if self.browser.current != window:
                self.browser.driver.switch_to.window(window)
                self.browser.current = window
        except _webdriver_errors() as err:
            self.pool.mark_dead(self.browser)
            raise BrowserDied(f"{type(err).__name__}: {err}") from err
        return self.browser.driver

    def run(self, fn: Any, *args: Any) -> Any:
        """`fn(driver, *args)` on this tab; any WebDriver failure marks the browser dead and
        raises BrowserDied (the caller replays the episode elsewhere)."""
        driver = self.driver()
        try:
            return fn(driver, *args)
        except BrowserDied:
            raise
        except _webdriver_errors() as err:
            if _is_page_error(err):
                raise
            self.pool.mark_dead(self.browser)
            raise BrowserDied(f"{type(err).__name__}: {err}") from err

    def release(self) -> None:
        self.pool.release(self)


def _is_page_error(err: BaseException) -> bool:
    """Errors about the page itself (an element that cannot be clicked, a stale element, a
    JavaScript error), which the env reports to the model, not a dead browser."""
    from selenium.common.exceptions import (
        ElementClickInterceptedException,
        ElementNotInteractableException,
        InvalidElementStateException,
        JavascriptException,
        MoveTargetOutOfBoundsException,
        NoSuchElementException,
        StaleElementReferenceException,
    )

    return isinstance(
        err,
        (
            ElementClickInterceptedException,
            ElementNotInteractableException,
            InvalidElementStateException,
            JavascriptException,
            MoveTargetOutOfBoundsException,
            NoSuchElementException,
            StaleElementReferenceException,
        ),
    )


class BrowserPool:
    """Up to `max_browsers` headless browsers with `tabs_per_browser` tabs each (module doc)."""

    def __init__(
        self,
        max_browsers: int = 2,
        tabs_per_browser: int = 32,
        page_load_timeout_s: float = 30.0,
        script_timeout_s: float = 10.0,
        window_size: tuple[int, int] = (800, 600),
    ) -> None:
        if max_browsers < 1 or tabs_per_browser < 1:
            raise ValueError("max_browsers and tabs_per_browser must be >= 1")
        self.max_browsers = max_browsers
        self.tabs_per_browser = tabs_per_browser
        self.page_load_timeout_s = page_load_timeout_s
        self.script_timeout_s = script_timeout_s
        self.window_size = window_size
        self.browsers: list[Browser] = []
        self._ids = itertools.count(1)
        self._clock = itertools.count()
        self._used: dict[int, int] = {}  # lease id -> last use (for least-recently-used reclaim)
        self._lock = threading.RLock()
        self.started = 0  # browsers started over the pool's life (restarts included)
        self.restarts = 0  # browsers found dead and replaced

    # -- browsers -------------------------------------------------------------------------
    def _start(self) -> Browser:
        from selenium import webdriver

        binary, chromedriver = find_browser()
        os.environ.setdefault("SE_AVOID_STATS", "true")  # selenium-manager: no telemetry
        options = webdriver.ChromeOptions()
        options.binary_location = binary
        width, height = self.window_size
        for arg in (
            "--headless=new",
            "--no-sandbox",  # root in containers
            "--disable-gpu",
            "--disable-dev-shm-usage",
            "--disable-extensions",
            "--disable-crash-reporter",
            "--disable-breakpad",
            "--renderer-process-limit=2",  # tabs share renderers: memory stays flat with tabs
            "--disable-background-networking",
            "--allow-file-access-from-files",
            f"--window-size={width},{height}",
            "--host-resolver-rules=MAP * ~NOTFOUND",  # the pages must not need the network
        ):
            options.add_argument(arg)
        profile = tempfile.mkdtemp(prefix="agentic-rl-chromium-")
        options.add_argument(f"--user-data-dir={profile}")
        watchdog = start_watchdog(profile)
        try:
            driver = webdriver.Chrome(
                service=_watched_service(chromedriver, watchdog), options=options
            )
        except _webdriver_errors() as err:
            Browser(None, watchdog, profile).quit()  # ends what started, removes the profile
            raise BrowserUnavailable(f"could not start {binary}: {err}") from err
        driver.set_page_load_timeout(self.page_load_timeout_s)
        driver.set_script_timeout(self.script_timeout_s)
        self.started += 1
        browser = Browser(driver, watchdog, profile)
        browser.free_windows.append(driver.current_window_handle)
        browser.current = driver.current_window_handle
        return browser

    def mark_dead(self, browser: Browser) -> None:
        """Forget a browser that failed: its leases become invalid and its processes end."""
        with self._lock:
            if browser.dead:
                return
            browser.dead = True
            self.restarts += 1
            for lease_id in browser.tabs:
                self._used.pop(lease_id, None)
            browser.tabs.clear()
            if browser in self.browsers:
                self.browsers.remove(browser)
        browser.quit()

    # -- leases ---------------------------------------------------------------------------
    def acquire(self) -> Lease:
        """A tab for a new episode: a free one, a new one, a new browser, or (the pool being
        full) the least recently used episode's tab."""
        with self._lock:
            for browser in self.browsers:
                if len(browser.tabs) < self.tabs_per_browser:
                    return self._open_tab(browser)
            if len(self.browsers) < self.max_browsers:
                browser = self._start()
                self.browsers.append(browser)
                return self._open_tab(browser)
            oldest = min(self._used, key=self._used.__getitem__)
            for browser in self.browsers:
                if oldest in browser.tabs:
                    browser.free_windows.append(browser.tabs.pop(oldest))
                    del self._used[oldest]
                    return self._open_tab(browser)
            raise RuntimeError("browser pool bookkeeping is inconsistent")  # a bug

    def _open_tab(self, browser: Browser) -> Lease:
        lease_id = next(self._ids)
        if browser.free_windows:
            window = browser.free_windows.pop()
        else:
            try:
                browser.driver.switch_to.new_window("tab")
            except _webdriver_errors() as err:
                self.mark_dead(browser)
                raise BrowserDied(f"{type(err).__name__}: {err}") from err
            window = browser.driver.current_window_handle
            browser.current = window
        browser.tabs[lease_id] = window
        self._used[lease_id] = next(self._clock)
        return Lease(self, lease_id, browser)

    def touch(self, lease_id: int) -> None:
        with self._lock:
            if lease_id in self._used:
                self._used[lease_id] = next(self._clock)

    def release(self, lease: Lease) -> None:
        """Give a tab back (its page stays; the next episode reloads it)."""
        with self._lock:
            window = lease.browser.tabs.pop(lease.id, None)
            self._used.pop(lease.id, None)
            if window is not None and not lease.browser.dead:
                lease.browser.free_windows.append(window)

    def close(self) -> None:
        """End every browser."""
        with self._lock:
            browsers, self.browsers = self.browsers, []
            self._used.clear()
        for browser in browsers:
            browser.dead = True
            browser.quit()


_shared: dict[tuple[Any, ...], BrowserPool] = {}
_shared_lock = threading.Lock()


def shared_pool(**settings: Any) -> BrowserPool:
    """The process-wide pool for these settings (envs of a run share its browsers); ended at
    interpreter exit."""
    key = tuple(sorted(settings.items()))
    with _shared_lock:
        if key not in _shared:
            if not _shared:
                import atexit

                atexit.register(close_shared_pools)
            _shared[key] = BrowserPool(**settings)
        return _shared[key]


def close_shared_pools() -> None:
    """End the browsers of every shared pool."""
    with _shared_lock:
        pools = list(_shared.values())
        _shared.clear()
    for pool in pools:
        pool.close()
