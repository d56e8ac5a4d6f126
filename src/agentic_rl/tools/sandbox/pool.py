"""`SandboxPool`: warm worker processes that each run one execution at a time.

Each worker is a separate `python -I` process started with an empty environment (see
`_worker.py`), under bubblewrap where it works (`_bwrap.py`), else, as root, in namespaces it
makes itself; it forks a fresh child per execution, so a call costs a fork instead of an
interpreter start-up. Where no isolation can be had the pool refuses to start
(`SandboxUnavailableError`, saying how to get it) unless `allow_unisolated` is set. The pool is
thread-safe: `run` takes an idle worker from a queue and gives it back. A worker that dies,
hangs or answers garbage is killed and replaced on its next use, and the caller gets an error
result: the pool keeps serving.
"""

from __future__ import annotations

import math
import os
import queue
import shutil
import tempfile
import threading
import time
import weakref
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from agentic_rl.tools.sandbox.limits import ExecutionResult, SandboxLimits
from agentic_rl.tools.sandbox.worker_process import (
    HOW_TO_ISOLATE,
    SandboxUnavailableError,
    WorkerError,
    WorkerProcess,
    allow_unisolated,
    plan_isolation,
    reachable_temp_dir,
)

GRACE_S = 10.0  # beyond the code's own timeout: fork, cleanup, a loaded machine


class SandboxPool:
    """`size` warm workers running untrusted Python under `limits` (see the package docstring).

    `fresh_interpreter=True` makes each child exec a new `python -I` instead of running in the
    fork (same limits and namespaces): only useful as the benchmark's baseline. Raises
    SandboxUnavailableError where no isolation can be had, unless `limits.allow_unisolated`.
    """

    def __init__(
        self,
        size: int = 2,
        limits: SandboxLimits | None = None,
        *,
        fresh_interpreter: bool = False,
        start_timeout_s: float = 60.0,
    ) -> None:
        if size < 1:
            raise ValueError(f"pool size must be >= 1, got {size}")
        self.size = size
        self.limits = limits or SandboxLimits()
        self.fresh_interpreter = fresh_interpreter
        self.start_timeout_s = start_timeout_s
        self._plan = plan_isolation(self.limits)
        self._base: str | None = None
        if self._plan.mode != "bwrap":  # bwrap's working directories live in its own tmpfs
            parent = reachable_temp_dir() if self._plan.root else None
            self._base = tempfile.mkdtemp(prefix="agentic-rl-sandbox-", dir=parent)
            os.chmod(self._base, 0o711)  # the sandbox uids must traverse it to their own dirs
            # A pool that is never closed still leaves no directories behind at exit; its
            # workers exit on their own when our end of their stdin closes.
            weakref.finalize(self, shutil.rmtree, self._base, True)
        # bwrap ties its sandbox to the thread that started it (--die-with-parent uses the
        # parent-death signal, sent when that *thread* ends): all workers start from this one.
        self._spawner = ThreadPoolExecutor(1, thread_name_prefix="sandbox-spawner")
        weakref.finalize(self, self._spawner.shutdown, wait=False)
        self._idle: queue.Queue[tuple[int, WorkerProcess | None]] = queue.Queue()
        self._lock = threading.Lock()
        self._closed = False
        self.restarts = 0
        self.executions = 0
        self.grace_s = GRACE_S
        """How long past a code's timeout a worker may take to answer before it is replaced."""
        workers: list[WorkerProcess] = []
        try:
            for slot in range(size):  # all boot in parallel
                workers.append(self._start(slot))
            for worker in workers:
                worker.wait_ready(start_timeout_s)
            self.isolation: dict[str, Any] = workers[0].isolation
            """What the workers could enforce here (mode, netns, pidns, readonly_fs, seccomp...)."""
            self._check_isolated(self.isolation)
        except BaseException:
            for worker in workers:
                worker.kill()
            self._spawner.shutdown(wait=False)
            if self._base is not None:
                shutil.rmtree(self._base, ignore_errors=True)
            raise
        for worker in workers:
            self._idle.put((worker.slot, worker))

    def _check_isolated(self, isolation: dict[str, Any]) -> None:
        """Root's own namespaces can still be refused (a container without CAP_SYS_ADMIN)."""
        if self._plan.mode != "namespaces" or allow_unisolated(self.limits):
            return
        missing = [k for k in ("netns", "mountns", "readonly_fs") if not isolation.get(k)]
        if missing:
            raise SandboxUnavailableError(
                f"refusing to run model code without isolation: as root, "
                f"{isolation.get('bwrap_error', 'bubblewrap is unavailable')}, and the kernel "
                f"refused {', '.join(missing)} ({isolation}). {HOW_TO_ISOLATE}"
            )

    def _start(self, slot: int) -> WorkerProcess:
        return self._spawner.submit(
            WorkerProcess, slot, self.limits, self._base, self.fresh_interpreter, self._plan
        ).result()

    def _checked_out(self) -> tuple[int, WorkerProcess]:
        slot, worker = self._idle.get()
        if self._closed:
            self._idle.put((slot, worker))
            raise RuntimeError("the sandbox pool is closed")
        if worker is None or not worker.alive():  # died while idle, or a failed restart
            if worker is not None:
                worker.kill()
            worker = None
            try:
                worker = self._start(slot)
                worker.wait_ready(self.start_timeout_s)
            except BaseException:
                if worker is not None:
                    worker.kill()
                self._idle.put((slot, None))
                raise
            with self._lock:
                self.restarts += 1
        return slot, worker

    def run(self, code: str, timeout_s: float | None = None) -> ExecutionResult:
        """Run `code` in a fresh sandboxed process; never raises for anything the code does."""
        if self._closed:
            raise RuntimeError("the sandbox pool is closed")
        if not isinstance(code, str):
            return ExecutionResult.rejected(f"TypeError: code must be a string, not {type(code)}")
        if len(code) > self.limits.max_code_chars:
            return ExecutionResult.rejected(
                f"CodeTooLarge: the code has {len(code)} characters; "
                f"the limit is {self.limits.max_code_chars}"
            )
        timeout = self.limits.timeout_s if timeout_s is None else float(timeout_s)
        if not (math.isfinite(timeout) and 0 < timeout <= self.limits.max_timeout_s):
            return ExecutionResult.rejected(
                f"ValueError: timeout_s must be in (0, {self.limits.max_timeout_s:g}]"
            )
        slot, worker = self._checked_out()
        start = time.monotonic()
        try:
            raw = worker.run(code, timeout, self.limits.cpu_limit(timeout), self.grace_s)
            result = ExecutionResult.from_dict(raw)
        except (WorkerError, ValueError, TypeError) as exc:
            # The worker is unusable (killed by the code in the weaker unprivileged mode, hung,
            # or crashed): report, and start a new one on the slot's next use.
            worker.kill()
            worker = None
            result = ExecutionResult(
                stdout="",
                stderr="",
                ok=False,
                error=f"SandboxError: {exc}",
                timed_out="in time" in str(exc),
                exit_code=None,
                duration_s=time.monotonic() - start,
            )
        finally:
            self._idle.put((slot, worker))
        with self._lock:
            self.executions += 1
        return result

    def run_many(self, codes: list[str], timeout_s: float | None = None) -> list[ExecutionResult]:
        """Run several snippets concurrently on the pool's workers; results in input order."""
        with ThreadPoolExecutor(max_workers=self.size) as executor:
            return list(executor.map(lambda code: self.run(code, timeout_s), codes))

    def worker_pids(self) -> list[int]:
        """Process ids (as this process sees them) of the idle, live workers, for monitoring
        and tests; under bwrap, the worker itself rather than bwrap's monitor."""
        with self._idle.mutex:
            workers = [w for _, w in self._idle.queue if w is not None]
        return [w.host_pid or w.proc.pid for w in workers if w.alive()]

    def sandbox_uids(self) -> list[int]:
        """The uids the idle workers run code as (empty when not root)."""
        with self._idle.mutex:
            uids = [w.isolation.get("uid") for _, w in self._idle.queue if w is not None]
        return [uid for uid in uids if uid is not None]

    def health(self) -> dict[str, Any]:
        return {
            "status": "closed" if self._closed else "ok",
            "workers": self.size,
            "executions": self.executions,
            "restarts": self.restarts,
            "isolation": self.isolation,
        }

    def close(self) -> None:
        """Stop every worker (waits for running executions to finish)."""
        if self._closed:
            return
        self._closed = True
        slots = []
        for _ in range(self.size):
            slot, worker = self._idle.get()
            slots.append(slot)
            if worker is not None:
                worker.kill()
        for slot in slots:  # threads still waiting for a worker wake up and see "closed"
            self._idle.put((slot, None))
        self._spawner.shutdown(wait=False)
        if self._base is not None:
            shutil.rmtree(self._base, ignore_errors=True)

    def __enter__(self) -> SandboxPool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
