"""cgroup v2 memory and process limits for sandbox workers, where a cgroup is writable.

RLIMIT_AS bounds each process and RLIMIT_NPROC the number of processes; only a cgroup bounds
their sum (32 processes of 1 GB each are 32 GB). Each worker gets a child cgroup with
`memory.max` (the execution's memory_mb plus the worker's own share), `memory.swap.max` 0 and
`pids.max`, under a parent that must already be delegated to us: AGENTIC_RL_SANDBOX_CGROUP
(e.g. a systemd scope started with `systemd-run --user --scope -p Delegate=yes`), else our own
cgroup when its `cgroup.subtree_control` enables (or lets us enable) memory and pids. Where
none is writable (cgroup v1 hosts, containers without delegation) the rlimits stand alone, and
`isolation["cgroup_error"]` says why.
"""

from __future__ import annotations

import contextlib
import os
import time

CGROUP_ENV = "AGENTIC_RL_SANDBOX_CGROUP"
WORKER_OVERHEAD_MB = 128  # the worker's interpreter and preloaded modules, beside the code
NEEDED = ("memory", "pids")


def _cgroup2_mount(mountinfo: str = "/proc/self/mountinfo") -> str | None:
    with contextlib.suppress(OSError), open(mountinfo, encoding="utf-8") as f:
        for line in f:
            left, _, right = line.partition(" - ")
            if right.split()[:1] == ["cgroup2"]:
                return left.split()[4]
    return None


def own_cgroup(proc_cgroup: str = "/proc/self/cgroup") -> str | None:
    """Directory of this process's cgroup v2, or None (no unified hierarchy mounted)."""
    mount = _cgroup2_mount()
    if mount is None:
        return None
    with contextlib.suppress(OSError), open(proc_cgroup, encoding="utf-8") as f:
        for line in f:
            if line.startswith("0::"):
                return os.path.join(mount, line[3:].strip().lstrip("/"))
    return None


def _controllers(directory: str) -> set[str]:
    with open(os.path.join(directory, "cgroup.subtree_control"), encoding="utf-8") as f:
        return set(f.read().split())


def usable_parent(directory: str) -> str:
    """ "" when workers' cgroups can be made under `directory`, else why not."""
    try:
        enabled = _controllers(directory)
        missing = [c for c in NEEDED if c not in enabled]
        if missing:
            with open(os.path.join(directory, "cgroup.subtree_control"), "w") as f:
                f.write(" ".join(f"+{c}" for c in missing))
            if not set(NEEDED) <= _controllers(directory):
                return f"{directory}: could not enable {', '.join(missing)} for child cgroups"
    except OSError as exc:
        return f"{directory}: {exc.strerror or exc} (no delegated cgroup v2 with memory and pids)"
    if not os.access(directory, os.W_OK):
        return f"{directory}: not writable"
    return ""


def find_parent() -> tuple[str | None, str]:
    """(parent directory, "") or (None, why not)."""
    directory = os.environ.get(CGROUP_ENV) or own_cgroup()
    if not directory:
        return None, "no cgroup v2 hierarchy mounted"
    problem = usable_parent(directory)
    return (None, problem) if problem else (directory, "")


class WorkerCgroup:
    """One worker's cgroup: created with its limits; `add(pid)` moves a process in."""

    def __init__(self, parent: str, name: str, memory_mb: int, pids: int) -> None:
        self.path = os.path.join(parent, name)
        os.mkdir(self.path)
        try:
            self._write("memory.max", str((int(memory_mb) + WORKER_OVERHEAD_MB) << 20))
            self._write("pids.max", str(int(pids)))
            with contextlib.suppress(OSError):  # absent without swap accounting
                self._write("memory.swap.max", "0")
        except OSError:
            self.remove()
            raise

    def _write(self, name: str, value: str) -> None:
        with open(os.path.join(self.path, name), "w") as f:
            f.write(value)

    def add(self, pid: int) -> None:
        self._write("cgroup.procs", str(pid))

    def remove(self) -> None:
        """Delete the cgroup once its processes are gone (retried briefly while they exit)."""
        for _ in range(50):
            try:
                os.rmdir(self.path)
                return
            except FileNotFoundError:
                return
            except OSError:
                time.sleep(0.02)
