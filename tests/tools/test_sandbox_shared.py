"""The process-wide lazy sandbox runner used by envs built from config."""

from __future__ import annotations

from agentic_rl.tools.sandbox.limits import SandboxLimits
from agentic_rl.tools.sandbox.shared import LazyRunner, as_runner, close_shared_pools, shared_pool


def test_lazy_runner_starts_one_shared_pool():
    limits = SandboxLimits(timeout_s=2.0, memory_mb=256)
    try:
        lazy = LazyRunner(pool_size=1, limits=limits)
        assert lazy._runner is None  # nothing started by construction
        assert lazy.run("6 * 7").stdout == "42\n"
        assert lazy.resolve() is shared_pool(1, limits)
        assert LazyRunner(pool_size=1, limits=limits).resolve() is lazy.resolve()
    finally:
        close_shared_pools()
    assert shared_pool(1, limits) is not lazy.resolve()  # a closed pool is replaced
    close_shared_pools()


def test_as_runner_passes_a_given_runner_through():
    sentinel = object()
    assert as_runner(sentinel) is sentinel  # type: ignore[arg-type]
    assert isinstance(as_runner(None, url="http://127.0.0.1:1"), LazyRunner)
