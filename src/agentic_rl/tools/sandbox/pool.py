"""`SandboxPool`: warm worker processes that each run one execution at a time.

Each worker is a separate `python -I` process started with an empty environment (see
`_worker.py`); it forks a fresh child per execution, so a call costs a fork instead of an
interpreter start-up. The pool is thread-safe: `run` takes an idle worker from a queue and
gives it back. A worker that dies, hangs or answers garbage is killed and replaced on its next
use, and the caller gets an error result: the pool keeps serving.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import queue
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import weakref
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from agentic_rl.tools.sandbox.limits import ExecutionResult, SandboxLimits

SANDBOX_DIR = os.path.dirname(os.path.abspath(__file__))
WORKER_BOOT = f"import sys; sys.path.insert(0, {SANDBOX_DIR!r}); import _worker; _worker.main()"
WORKER_ENV = {"PATH": "/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8"}
GRACE_S = 10.0  # beyond the code's own timeout: fork, cleanup, a loaded machine


class WorkerError(RuntimeError):
    """The worker process died, hung or broke the protocol."""


class _WorkerProcess:
    """The parent's handle on one worker: spawn, one request at a time, kill."""

    def __init__(self, slot: int, limits: SandboxLimits, base_dir: str, fresh: bool) -> None:
        self.slot = slot
        self.base_dir = os.path.join(base_dir, f"w{slot}-{time.monotonic_ns()}")
        os.mkdir(self.base_dir, 0o711)
        self.proc = subprocess.Popen(
            [sys.executable, "-I", "-c", WORKER_BOOT],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            env=WORKER_ENV,  # the parent's secrets never reach the worker, let alone the code
            start_new_session=True,  # a signal to the worker's group never reaches the pool
            close_fds=True,
        )
        self.isolation: dict[str, Any] = {}
        config = {"limits": limits.to_dict(), "base_dir": self.base_dir, "slot": slot}
        self._send({**config, "fresh": fresh})

    def wait_ready(self, timeout_s: float) -> None:
        ready = self._receive(time.monotonic() + timeout_s)
        if not ready.get("ready"):
            raise WorkerError(f"unexpected first message from the worker: {ready!r}")
        self.isolation = ready["isolation"]

    def alive(self) -> bool:
        return self.proc.poll() is None

    def _send(self, obj: Any) -> None:
        data = json.dumps(obj).encode()
        try:
            self.proc.stdin.write(len(data).to_bytes(4, "big") + data)
            self.proc.stdin.flush()
        except (BrokenPipeError, OSError) as exc:
            raise WorkerError(f"worker is gone ({self._exit_text()})") from exc

    def _read_exact(self, size: int, deadline: float) -> bytes:
        fd, data = self.proc.stdout.fileno(), b""
        while len(data) < size:
            remaining = deadline - time.monotonic()
            if remaining <= 0 or not select.select([fd], [], [], remaining)[0]:
                raise WorkerError("worker did not answer in time")
            chunk = os.read(fd, size - len(data))
            if not chunk:
                raise WorkerError(f"worker died ({self._exit_text()})")
            data += chunk
        return data

    def _receive(self, deadline: float) -> Any:
        size = int.from_bytes(self._read_exact(4, deadline), "big")
        try:
            return json.loads(self._read_exact(size, deadline))
        except ValueError as exc:
            raise WorkerError("worker sent an invalid message") from exc

    def _exit_text(self) -> str:
        try:
            code = self.proc.wait(timeout=1.0)
        except subprocess.TimeoutExpired:
            return "still running"
        return f"killed by signal {-code}" if code < 0 else f"exit code {code}"

    def run(self, code: str, timeout_s: float, cpu_s: int, grace_s: float) -> dict[str, Any]:
        self._send({"code": code, "timeout_s": timeout_s, "cpu_s": cpu_s})
        return self._receive(time.monotonic() + timeout_s + grace_s)

    def kill(self) -> None:
        """Stop the worker. Its sandbox processes die with it or at the uid's next sweep."""
        for close in (self.proc.stdin.close, self.proc.stdout.close):
            with contextlib.suppress(OSError):
                close()
        with contextlib.suppress(OSError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout=5.0)
        shutil.rmtree(self.base_dir, ignore_errors=True)


class SandboxPool:
    """`size` warm workers running untrusted Python under `limits` (see the package docstring).

    `fresh_interpreter=True` makes each child exec a new `python -I` instead of running in the
    fork (same limits and namespaces): only useful as the benchmark's baseline.
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
        self._base = tempfile.mkdtemp(prefix="agentic-rl-sandbox-")
        os.chmod(self._base, 0o711)  # the sandbox uids must traverse it to their own dirs
        # A pool that is never closed still leaves no directories behind at exit; its workers
        # exit on their own when our end of their stdin closes.
        weakref.finalize(self, shutil.rmtree, self._base, True)
        self._idle: queue.Queue[tuple[int, _WorkerProcess | None]] = queue.Queue()
        self._lock = threading.Lock()
        self._closed = False
        self.restarts = 0
        self.executions = 0
        self.grace_s = GRACE_S
        """How long past a code's timeout a worker may take to answer before it is replaced."""
        workers = []
        try:
            workers = [self._start(slot) for slot in range(size)]  # all boot in parallel
            for worker in workers:
                worker.wait_ready(start_timeout_s)
        except BaseException:
            for worker in workers:
                worker.kill()
            shutil.rmtree(self._base, ignore_errors=True)
            raise
        self.isolation: dict[str, Any] = workers[0].isolation
        """What the workers could enforce here (netns, mountns, readonly_fs, uid_drop, ...)."""
        for worker in workers:
            self._idle.put((worker.slot, worker))

    def _start(self, slot: int) -> _WorkerProcess:
        return _WorkerProcess(slot, self.limits, self._base, self.fresh_interpreter)

    def _checked_out(self) -> tuple[int, _WorkerProcess]:
        slot, worker = self._idle.get()
        if self._closed:
            self._idle.put((slot, worker))
            raise RuntimeError("the sandbox pool is closed")
        if worker is None or not worker.alive():  # died while idle, or a failed restart
            if worker is not None:
                worker.kill()
            try:
                worker = self._start(slot)
                worker.wait_ready(self.start_timeout_s)
            except BaseException:
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
        """Process ids of the idle, live workers (for monitoring and tests)."""
        with self._idle.mutex:
            return [w.proc.pid for _, w in self._idle.queue if w is not None and w.alive()]

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
        shutil.rmtree(self._base, ignore_errors=True)

    def __enter__(self) -> SandboxPool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
