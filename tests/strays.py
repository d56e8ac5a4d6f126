"""Which processes a test started, for the checks that nothing is left behind after it.

A test process may hold long-lived children that are not the test's: a session-wide pool an
earlier test started, or a browser whose helpers come and go whenever it likes (Chromium starts
renderers and utility processes at any time). Counting every new descendant of the test process
blames the test for those. `ProcessWatch` counts only what the test itself started:

- the descendants of the test process, without descending into processes that already lived
  when the watch began (their new children are theirs, not the test's);
- the members of a process group or session that one of the test's own processes led (seen by
  sampling /proc while the test runs), so a double-forked child that left the tree (re-parented
  to init) still counts;
- processes running as a sandbox uid (the code sandbox's workers), when the caller names them.

Zombies (exited, not yet reaped: a Popen not yet polled) run nothing and are never counted.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass


@dataclass(frozen=True)
class Proc:
    """One live process, from /proc/PID/stat and /proc/PID/status."""

    pid: int
    ppid: int
    pgid: int
    sid: int
    uid: int


def processes() -> list[Proc]:
    """Every live (non-zombie) process."""
    out = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat") as f:
                state, ppid, pgid, sid = f.read().rsplit(")", 1)[1].split()[:4]
            if state in ("Z", "X"):
                continue
            with open(f"/proc/{name}/status") as f:
                uid = int(next(line for line in f if line.startswith("Uid:")).split()[1])
        except (OSError, StopIteration, ValueError, IndexError):
            continue
        out.append(Proc(int(name), int(ppid), int(pgid), int(sid), uid))
    return out


def descendants(procs: list[Proc], root: int, prune: set[int]) -> set[int]:
    """Pids below `root`, not descending into (nor counting) the pids in `prune`."""
    children: dict[int, list[int]] = {}
    for p in procs:
        children.setdefault(p.ppid, []).append(p.pid)
    out: set[int] = set()
    frontier = [root]
    while frontier:
        pid = frontier.pop()
        for child in children.get(pid, ()):
            if child not in prune and child not in out:
                out.add(child)
                frontier.append(child)
    return out


class ProcessWatch:
    """The processes started by this process from `start()` on (module doc). A background
    thread samples /proc every `poll_s` seconds to learn the groups and sessions the test's
    processes lead; `sample()` does it once more by hand (tests call it to be deterministic)."""

    def __init__(self, poll_s: float = 0.2) -> None:
        self.root = os.getpid()
        self.poll_s = poll_s
        self.before: set[int] = set()  # the root's descendants when the watch began
        self.old_groups: set[int] = set()  # groups and sessions that existed then
        self.groups: set[int] = set()  # groups and sessions led by the test's processes
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> ProcessWatch:
        procs = processes()
        self.before = descendants(procs, self.root, set())
        self.old_groups = {p.pgid for p in procs} | {p.sid for p in procs}
        self._thread = threading.Thread(target=self._poll, daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()

    def _poll(self) -> None:
        while not self._stop.wait(self.poll_s):
            self.sample()

    def sample(self, procs: list[Proc] | None = None) -> set[int]:
        """Record the groups and sessions the test's processes lead; return those processes."""
        procs = processes() if procs is None else procs
        started = descendants(procs, self.root, self.before)
        for p in procs:
            if p.pid in started:
                self.groups |= {g for g in (p.pgid, p.sid) if g == p.pid} - self.old_groups
        return started

    def strays(self, sandbox_uids: set[int] | None = None) -> list[Proc]:
        """The live processes the test started (module doc)."""
        sandbox_uids = sandbox_uids or set()
        procs = processes()
        started = self.sample(procs)
        return [
            p
            for p in procs
            if p.pid != self.root
            and p.pid not in self.before
            and (
                p.pid in started
                or p.pgid in self.groups
                or p.sid in self.groups
                or p.uid in sandbox_uids
            )
        ]


@contextmanager
def no_strays(
    cleanup: Callable[[], set[int]] = set, timeout_s: float = 20.0
) -> Iterator[ProcessWatch]:
    """Fail (AssertionError naming them) when the block leaves processes it started behind.
    `cleanup()` runs after the block (e.g. closing process-wide pools) and returns the sandbox
    uids whose processes also count; exits get `timeout_s` to happen (slower when loaded)."""
    watch = ProcessWatch().start()
    try:
        yield watch
        uids = cleanup()
        deadline = time.monotonic() + timeout_s
        while watch.strays(uids) and time.monotonic() < deadline:
            time.sleep(0.05)
        left = watch.strays(uids)
        assert left == [], f"processes left behind: {left} ({_commands(left)})"
    finally:
        watch.stop()


def _commands(procs: list[Proc]) -> str:
    names = []
    for p in procs:
        try:
            with open(f"/proc/{p.pid}/cmdline", "rb") as f:
                names.append(f.read().replace(b"\0", b" ").decode(errors="replace")[:80])
        except OSError:
            names.append("?")
    return "; ".join(names)
