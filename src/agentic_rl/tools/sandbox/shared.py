"""A process-wide sandbox pool started on first use, for envs and rewards built from config.

Envs are constructed by name with plain keyword arguments (`make_env("math_tool", ...)`), so
they cannot be handed a live `SandboxPool`. They take a `LazyRunner` instead: constructing it
costs nothing, and its first `run` starts (or reuses) one pool per (size, limits) for the whole
process, or talks to `agentic-rl serve-sandbox` when a URL is given. Pools are closed at exit.
"""

from __future__ import annotations

import atexit
import functools
import os
import threading

from agentic_rl.tools.sandbox.client import CodeRunner, SandboxClient
from agentic_rl.tools.sandbox.limits import ExecutionResult, SandboxLimits
from agentic_rl.tools.sandbox.pool import SandboxPool
from agentic_rl.tools.sandbox.worker_process import ALLOW_UNISOLATED_ENV, plan_isolation

_pools: dict[tuple[int, SandboxLimits], SandboxPool] = {}


@functools.lru_cache(maxsize=16)
def _check_isolation(limits: SandboxLimits, allow_env: str | None) -> None:
    """plan_isolation once per (limits, allow switch): envs are built by the batch."""
    plan_isolation(limits)


_pools_lock = threading.Lock()


def shared_pool(size: int = 2, limits: SandboxLimits | None = None) -> SandboxPool:
    """The process-wide pool with `size` workers and `limits` (started on the first call)."""
    key = (size, limits or SandboxLimits())
    with _pools_lock:
        pool = _pools.get(key)
        if pool is None or pool.health()["status"] == "closed":
            pool = _pools[key] = SandboxPool(size, key[1])
        return pool


@atexit.register
def close_shared_pools() -> None:
    """Stop every shared pool (also run at interpreter exit)."""
    with _pools_lock:
        pools = list(_pools.values())
        _pools.clear()
    for pool in pools:
        pool.close()


class LazyRunner:
    """A `CodeRunner` that resolves to a shared pool (or an HTTP client) on its first `run`.

    `runner` short-circuits everything: tests pass their own pool this way. Without a runner
    or URL, construction checks that the sandbox can be isolated here (`plan_isolation`).
    """

    def __init__(
        self,
        url: str | None = None,
        pool_size: int = 2,
        limits: SandboxLimits | None = None,
        runner: CodeRunner | None = None,
    ) -> None:
        self.url = url
        self.pool_size = pool_size
        self.limits = limits
        self._runner = runner
        self._lock = threading.Lock()
        if runner is None and not url:
            # Fail where the env is built, not at the first tool call (whose errors become
            # observations): SandboxUnavailableError when no isolation can be had here.
            _check_isolation(limits or SandboxLimits(), os.environ.get(ALLOW_UNISOLATED_ENV))

    def resolve(self) -> CodeRunner:
        """The runner behind this proxy, created now if needed."""
        with self._lock:
            if self._runner is None:
                if self.url:
                    self._runner = SandboxClient(self.url)
                else:
                    self._runner = shared_pool(self.pool_size, self.limits)
            return self._runner

    def run(self, code: str, timeout_s: float | None = None) -> ExecutionResult:
        return self.resolve().run(code, timeout_s)


def as_runner(
    runner: CodeRunner | None = None, url: str | None = None, pool_size: int = 2
) -> CodeRunner:
    """`runner` itself when given, else a `LazyRunner` for `url` or a shared pool."""
    return runner if runner is not None else LazyRunner(url=url, pool_size=pool_size)
