"""Sandbox limits and the result of one execution (parent side; plain dataclasses)."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, fields
from typing import Any

# Light standard-library modules imported once in each warm worker: every forked child then has
# them for free, and they stay importable where the Python installation is not readable by the
# unprivileged sandbox uid (see README of the package: the "hidden prefix" fallback).
DEFAULT_PRELOAD = (
    "math",
    "cmath",
    "fractions",
    "decimal",
    "itertools",
    "functools",
    "collections",
    "statistics",
    "random",
    "re",
    "string",
    "json",
    "heapq",
    "bisect",
)


@dataclass(frozen=True)
class SandboxLimits:
    """Operating-system limits for each execution. Every field is enforced in the child process.

    The uid fields only matter when the pool runs as root: each worker takes its own uid from
    [uid_base, uid_base + uid_count) (held with a lock file), so RLIMIT_NPROC counts only that
    execution's processes and one sandbox can neither signal nor sweep another.
    """

    timeout_s: float = 5.0
    """Default wall-clock limit of one execution; the process group is killed after it."""
    max_timeout_s: float = 60.0
    """Largest timeout a caller may ask for (HTTP requests above it get a 422)."""
    cpu_s: int | None = None
    """RLIMIT_CPU in seconds; None: the wall timeout rounded up (SIGXCPU, then SIGKILL +1 s)."""
    memory_mb: int = 1024
    """RLIMIT_AS: address space per process; allocations beyond it raise MemoryError."""
    nproc: int = 32
    """RLIMIT_NPROC: processes and threads of the sandbox uid (not enforced for uid 0)."""
    fsize_mb: int = 16
    """RLIMIT_FSIZE: largest file the code may write (writes beyond it fail with EFBIG)."""
    nofile: int = 128
    """RLIMIT_NOFILE: open file descriptors."""
    disk_mb: int = 64
    """Size of the per-worker tmpfs that holds the working directories (with mount namespaces)."""
    max_output_chars: int = 10_000
    """stdout and stderr are each cut to this many characters."""
    max_code_chars: int = 100_000
    """Longer code is rejected before it runs."""
    uid_base: int = 61_000
    """First uid of the range the children run as when the pool is root."""
    uid_count: int = 1000
    """Size of that uid range (one uid per live worker across all pools on the machine)."""
    namespaces: bool = True
    """Isolate with namespaces where permitted; False turns off bubblewrap and the root-only
    namespaces alike (then `allow_unisolated` is needed: only to exercise the fallbacks)."""
    bwrap: bool = True
    """Run each worker under bubblewrap (`bwrap`) where it is installed and works; False uses
    the root-only namespaces instead (or, not root, refuses unless `allow_unisolated`)."""
    seccomp: bool = True
    """Install a seccomp filter (libseccomp through `pyseccomp`) where it can be built."""
    allow_unisolated: bool = False
    """Run model code even where no isolation can be had (as the trainer's own user, with its
    files, processes and network in reach). Also set by AGENTIC_RL_SANDBOX_ALLOW_UNISOLATED=1.
    Off by default: the pool refuses to start and says how to get isolation."""
    ro_paths: tuple[str, ...] = ()
    """Extra host directories the code may read (bound read-only under bubblewrap, which
    otherwise shows only the system (/usr, /etc) and the Python installation)."""
    preload: tuple[str, ...] = DEFAULT_PRELOAD
    """Modules each warm worker imports before forking children (e.g. add "sympy", "numpy")."""

    def __post_init__(self) -> None:
        positive = {
            "timeout_s": self.timeout_s,
            "max_timeout_s": self.max_timeout_s,
            "memory_mb": self.memory_mb,
            "nproc": self.nproc,
            "fsize_mb": self.fsize_mb,
            "nofile": self.nofile,
            "disk_mb": self.disk_mb,
            "max_output_chars": self.max_output_chars,
            "max_code_chars": self.max_code_chars,
            "uid_count": self.uid_count,
        }
        for name, value in positive.items():
            if not (isinstance(value, int | float) and math.isfinite(value) and value > 0):
                raise ValueError(f"SandboxLimits.{name} must be a positive number, got {value!r}")
        if self.cpu_s is not None and self.cpu_s < 1:
            raise ValueError(f"SandboxLimits.cpu_s must be >= 1 or None, got {self.cpu_s!r}")
        if self.timeout_s > self.max_timeout_s:
            raise ValueError("SandboxLimits.timeout_s must not exceed max_timeout_s")
        if self.uid_base < 1000:
            raise ValueError("SandboxLimits.uid_base must be >= 1000 (not a system account)")

    def cpu_limit(self, timeout_s: float) -> int:
        """RLIMIT_CPU for one execution with this wall timeout."""
        wall = max(1, math.ceil(timeout_s))
        return wall if self.cpu_s is None else min(self.cpu_s, wall)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form (sent to the worker processes)."""
        out = asdict(self)
        out["preload"] = list(self.preload)
        out["ro_paths"] = list(self.ro_paths)
        return out


@dataclass
class ExecutionResult:
    """What one execution produced.

    `ok` is True when the code ran to the end (or called sys.exit(0)). `error` is the last line
    of the traceback ("ZeroDivisionError: division by zero"), or a sandbox message for timeouts,
    limits and rejected code; empty when ok. `exit_code` is the child's exit status, negative
    for a signal, None when nothing ran.
    """

    stdout: str
    stderr: str
    ok: bool
    error: str
    timed_out: bool
    exit_code: int | None
    duration_s: float

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ExecutionResult:
        names = {f.name for f in fields(cls)}
        missing = names - set(data)
        if missing:
            raise ValueError(f"ExecutionResult is missing field(s): {', '.join(sorted(missing))}")
        return cls(**{name: data[name] for name in names})

    @classmethod
    def rejected(cls, error: str) -> ExecutionResult:
        """A result for code that was refused before running."""
        return cls(
            stdout="",
            stderr="",
            ok=False,
            error=error,
            timed_out=False,
            exit_code=None,
            duration_s=0.0,
        )
