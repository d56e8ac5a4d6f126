"""The stray-process check of the recipe tests (`no_stray_processes`, tests/strays.py): it fails
on a process the test started and left behind, also one that double-forked out of the test's
tree, and ignores processes that are not the test's: a child that lived before the test and
starts helpers meanwhile (as a browser an earlier test left open does), and a process outside
the test's tree."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys

import pytest
from strays import ProcessWatch, no_strays

# A daemon: a new session whose leader forks a sleeper, prints its pid, waits for a line on
# stdin and exits, so the sleeper is re-parented out of the starter's tree.
DAEMON = (
    "import os, sys, time\n"
    "os.setsid()\n"
    "pid = os.fork()\n"
    "if pid == 0:\n"
    "    time.sleep(60)\n"
    "    os._exit(0)\n"
    "print(pid, flush=True)\n"
    "sys.stdin.readline()\n"
)
# Lives on and starts a sleeper whenever it reads a line (a browser starting a helper).
SPAWNER = "while read x; do sleep 60 & echo $!; done"


def kill(*pids: int) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


def daemon(watch: ProcessWatch | None = None) -> int:
    """Start DAEMON; return the sleeper's pid once its session leader has exited (`watch`,
    when given, samples /proc while the leader is alive, as its polling thread would)."""
    leader = subprocess.Popen(
        [sys.executable, "-c", DAEMON], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    assert leader.stdout is not None and leader.stdin is not None
    sleeper = int(leader.stdout.readline())
    if watch is not None:
        watch.sample()
    leader.stdin.close()
    leader.wait()
    return sleeper


def test_a_child_left_behind_fails_the_check():
    with pytest.raises(AssertionError, match="sleep 60"), no_strays(timeout_s=0.2):
        child = subprocess.Popen(["sleep", "60"])
    kill(child.pid)
    child.wait()


def test_a_double_forked_child_that_left_the_tree_fails_the_check():
    left = pytest.raises(AssertionError, match="processes left behind")
    with left as caught, no_strays(timeout_s=0.2) as watch:
        sleeper = daemon(watch)
    kill(sleeper)
    assert str(sleeper) in str(caught.value)


def test_a_child_stopped_by_the_test_passes():
    with no_strays(timeout_s=5.0):
        child = subprocess.Popen(["sleep", "60"])
        kill(child.pid)
        child.wait()


def test_helpers_of_a_process_that_lived_before_are_not_the_tests():
    spawner = subprocess.Popen(
        ["sh", "-c", SPAWNER], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    assert spawner.stdin is not None and spawner.stdout is not None
    try:
        with no_strays(timeout_s=0.2) as watch:
            spawner.stdin.write("go\n")
            spawner.stdin.flush()
            helper = int(spawner.stdout.readline())
            watch.sample()
            os.kill(helper, 0)  # alive, started during the block, below the test process
    finally:
        kill(helper, spawner.pid)
        spawner.wait()


def test_a_process_outside_the_tests_tree_is_not_the_tests():
    outside = daemon()  # started and detached before the watch began
    try:
        with no_strays(timeout_s=0.2) as watch:
            os.kill(outside, 0)
            assert outside not in {p.pid for p in watch.strays()}
    finally:
        kill(outside)
