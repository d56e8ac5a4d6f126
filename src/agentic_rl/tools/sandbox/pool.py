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
from dataclasses import dataclass, field
from typing import Any

from agentic_rl.tools.sandbox import _bwrap, _cgroup, _isolation, _seccomp
from agentic_rl.tools.sandbox.limits import ExecutionResult, SandboxLimits

SANDBOX_DIR = os.path.dirname(os.path.abspath(__file__))
WORKER_BOOT = f"import sys; sys.path.insert(0, {SANDBOX_DIR!r}); import _worker; _worker.main()"
WORKER_ENV = {"PATH": "/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8"}
GRACE_S = 10.0  # beyond the code's own timeout: fork, cleanup, a loaded machine
ALLOW_UNISOLATED_ENV = "AGENTIC_RL_SANDBOX_ALLOW_UNISOLATED"
HOW_TO_ISOLATE = (
    "Get isolation with one of: install bubblewrap (Debian/Ubuntu: `apt-get install "
    "bubblewrap`, Fedora: `dnf install bubblewrap`) with unprivileged user namespaces allowed "
    "(`sysctl -w kernel.unprivileged_userns_clone=1` on older Debian kernels, "
    "`user.max_user_namespaces` above 0, and on Ubuntu 24.04+ "
    "`kernel.apparmor_restrict_unprivileged_userns=0` or an AppArmor profile for bwrap); or run "
    "the sandbox as root (e.g. `agentic-rl serve-sandbox` as root, its URL as the env's "
    "sandbox_url). To run model code without isolation anyway (it can then read and write your "
    "files, signal your processes and reach the network): SandboxLimits(allow_unisolated=True), "
    f"`agentic-rl serve-sandbox --allow-unisolated`, or {ALLOW_UNISOLATED_ENV}=1."
)


class WorkerError(RuntimeError):
    """The worker process died, hung or broke the protocol."""


class SandboxUnavailableError(RuntimeError):
    """No operating-system isolation can be had here and unisolated runs were not allowed."""


@dataclass
class _Plan:
    """How this pool's workers are isolated (decided once, in `plan_isolation`)."""

    mode: str  # "bwrap" | "namespaces" | "none"
    root: bool
    bwrap: str | None = None
    disable_userns: bool = False
    seccomp: bytes | None = None
    cgroup_parent: str | None = None
    report: dict[str, Any] = field(default_factory=dict)


def allow_unisolated(limits: SandboxLimits) -> bool:
    return limits.allow_unisolated or os.environ.get(ALLOW_UNISOLATED_ENV, "") == "1"


def plan_isolation(limits: SandboxLimits) -> _Plan:
    """bubblewrap where it works, else (root) our own namespaces, else nothing; raises
    SandboxUnavailableError for nothing unless unisolated runs are allowed."""
    root = os.geteuid() == 0
    bpf, seccomp_error = _seccomp.filter_bpf() if limits.seccomp else (None, "turned off")
    cgroup_parent, cgroup_error = _cgroup.find_parent()
    report: dict[str, Any] = {"seccomp": bpf is not None, "cgroup": cgroup_parent is not None}
    if seccomp_error:
        report["seccomp_error"] = seccomp_error
    if cgroup_error:
        report["cgroup_error"] = cgroup_error
    problems = []
    if not limits.namespaces:
        problems.append("namespaces are turned off (SandboxLimits.namespaces=False)")
    elif not limits.bwrap:
        problems.append("bubblewrap is turned off (SandboxLimits.bwrap=False)")
    elif (path := _bwrap.find_bwrap()) is None:
        problems.append("bubblewrap (bwrap) is not installed")
    else:
        ok, detail = _bwrap.probe(path, root, limits.disk_mb, bpf)
        if ok:
            return _Plan(
                "bwrap", root, path, detail == "disable_userns", bpf, cgroup_parent, report
            )
        problems.append(f"bubblewrap cannot start a sandbox here ({detail})")
    report["bwrap_error"] = "; ".join(problems)
    if limits.namespaces and root:
        return _Plan("namespaces", root, seccomp=bpf, cgroup_parent=cgroup_parent, report=report)
    if not allow_unisolated(limits):
        who = "root" if root else f"uid {os.geteuid()} (not root)"
        raise SandboxUnavailableError(
            f"refusing to run model code without isolation: running as {who}, and "
            f"{'; '.join(problems)}. {HOW_TO_ISOLATE}"
        )
    return _Plan("none", root, seccomp=bpf, cgroup_parent=cgroup_parent, report=report)


def _reachable_temp_dir() -> str:
    """A temporary directory whose every ancestor others may traverse: with a private (0700)
    TMPDIR the sandbox uid could not reach its own working directories (root only)."""
    for candidate in (tempfile.gettempdir(), "/tmp", "/var/tmp", "/dev/shm"):
        path = os.path.realpath(candidate)
        if os.path.isdir(path) and _isolation.blocked_ancestor(path + "/x") is None:
            return path
    raise RuntimeError("no temporary directory that an unprivileged sandbox uid can reach")


class _WorkerProcess:
    """The parent's handle on one worker: spawn, one request at a time, kill."""

    def __init__(
        self, slot: int, limits: SandboxLimits, base_dir: str | None, fresh: bool, plan: _Plan
    ) -> None:
        self.slot, self.plan = slot, plan
        self.uid: int | None = None
        self._lock_fd: int | None = None
        self._info_fd: int | None = None
        self.host_pid: int | None = None
        self.cgroup: _cgroup.WorkerCgroup | None = None
        self.base_dir = _bwrap.WORK_DIR
        if base_dir is not None:  # outside bwrap: a host directory the worker's uid can reach
            self.base_dir = os.path.join(base_dir, f"w{slot}-{time.monotonic_ns()}")
            os.mkdir(self.base_dir, 0o711)
        self.isolation: dict[str, Any] = {}
        try:
            if plan.root:  # one unprivileged uid per live worker, locked while it lives
                self.uid, self._lock_fd = _isolation.acquire_uid(
                    limits.uid_base, limits.uid_count, slot
                )
            if plan.cgroup_parent is not None:
                with contextlib.suppress(OSError):  # reported as cgroup False for this worker
                    self.cgroup = _cgroup.WorkerCgroup(
                        plan.cgroup_parent,
                        f"agentic-rl-sandbox-{os.getpid()}-{slot}-{time.monotonic_ns()}",
                        limits.memory_mb,
                        limits.nproc + 4,
                    )
            self.proc = self._spawn(plan, limits)
        except BaseException:
            self._release()
            raise
        config = {
            "limits": limits.to_dict(),
            "base_dir": self.base_dir,
            "slot": slot,
            "mode": plan.mode,
            "uid": self.uid,
            "seccomp": None if plan.mode == "bwrap" or not plan.seccomp else plan.seccomp.hex(),
        }
        try:
            self._send({**config, "fresh": fresh})
        except BaseException:
            self.kill()
            raise

    def _spawn(self, plan: _Plan, limits: SandboxLimits) -> subprocess.Popen:
        command = [sys.executable, "-I", "-c", WORKER_BOOT]
        pass_fds: list[int] = []
        info_w = None
        if plan.mode == "bwrap":
            assert plan.bwrap is not None
            self._info_fd, info_w = os.pipe()
            pass_fds.append(info_w)
            seccomp_fd = _bwrap.seccomp_memfd(plan.seccomp) if plan.seccomp else None
            if seccomp_fd is not None:
                pass_fds.append(seccomp_fd)
            command = _bwrap.bwrap_argv(
                plan.bwrap,
                command,
                as_root=plan.root,
                disk_mb=limits.disk_mb,
                ro_paths=limits.ro_paths,
                seccomp_fd=seccomp_fd,
                info_fd=info_w,
                disable_userns=plan.disable_userns,
            )
        try:
            return subprocess.Popen(
                command,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                env=WORKER_ENV,  # the parent's secrets never reach the worker, let alone the code
                start_new_session=True,  # a signal to the worker's group never reaches the pool
                close_fds=True,
                pass_fds=pass_fds,
            )
        finally:
            for fd in pass_fds:
                os.close(fd)

    def _read_info(self, deadline: float) -> None:
        """bwrap's --info-fd JSON: the worker's pid as the host sees it (for signals, cgroups)."""
        fd, data = self._info_fd, b""
        self._info_fd = None
        assert fd is not None
        try:
            while time.monotonic() < deadline and select.select([fd], [], [], 0.1)[0]:
                chunk = os.read(fd, 4096)
                if not chunk:
                    break
                data += chunk
                with contextlib.suppress(ValueError):
                    self.host_pid = int(json.loads(data)["child-pid"])
                    break
        finally:
            os.close(fd)

    def wait_ready(self, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        ready = self._receive(deadline)
        if not ready.get("ready"):
            raise WorkerError(f"unexpected first message from the worker: {ready!r}")
        if self._info_fd is not None:
            self._read_info(deadline)
        if self.host_pid is None:
            self.host_pid = self.proc.pid
        self.isolation = {**ready["isolation"], **self.plan.report, "mode": self.plan.mode}
        if self.cgroup is not None:
            try:
                self.cgroup.add(self.host_pid)
            except OSError as exc:
                self.isolation["cgroup_error"] = f"could not move the worker: {exc}"
                self.cgroup.remove()
                self.cgroup = None
        self.isolation["cgroup"] = self.cgroup is not None

    def alive(self) -> bool:
        if self.proc.poll() is not None:
            return False
        if self.host_pid is None or self.host_pid == self.proc.pid:
            return True
        try:  # under bwrap the worker is bwrap's child: dead (or a zombie) means gone
            with open(f"/proc/{self.host_pid}/stat", "rb") as f:
                stat = f.read()
            return stat[stat.rfind(b")") + 2 : stat.rfind(b")") + 3] not in (b"Z", b"X")
        except OSError:
            return False

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
        """Stop the worker. Its sandbox processes die with it (as PID 1 of their namespace
        under bwrap) or at the uid's next sweep."""
        for close in (self.proc.stdin.close, self.proc.stdout.close):
            with contextlib.suppress(OSError):
                close()
        if self.host_pid is not None and self.host_pid != self.proc.pid and self.alive():
            with contextlib.suppress(OSError):
                os.kill(self.host_pid, signal.SIGKILL)
        with contextlib.suppress(OSError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout=5.0)
        self._release()

    def _release(self) -> None:
        for fd in (self._lock_fd, self._info_fd):
            if fd is not None:
                with contextlib.suppress(OSError):
                    os.close(fd)
        self._lock_fd = self._info_fd = None
        if self.cgroup is not None:
            self.cgroup.remove()
            self.cgroup = None
        if self.base_dir != _bwrap.WORK_DIR:
            shutil.rmtree(self.base_dir, ignore_errors=True)


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
            parent = _reachable_temp_dir() if self._plan.root else None
            self._base = tempfile.mkdtemp(prefix="agentic-rl-sandbox-", dir=parent)
            os.chmod(self._base, 0o711)  # the sandbox uids must traverse it to their own dirs
            # A pool that is never closed still leaves no directories behind at exit; its
            # workers exit on their own when our end of their stdin closes.
            weakref.finalize(self, shutil.rmtree, self._base, True)
        # bwrap ties its sandbox to the thread that started it (--die-with-parent uses the
        # parent-death signal, sent when that *thread* ends): all workers start from this one.
        self._spawner = ThreadPoolExecutor(1, thread_name_prefix="sandbox-spawner")
        weakref.finalize(self, self._spawner.shutdown, wait=False)
        self._idle: queue.Queue[tuple[int, _WorkerProcess | None]] = queue.Queue()
        self._lock = threading.Lock()
        self._closed = False
        self.restarts = 0
        self.executions = 0
        self.grace_s = GRACE_S
        """How long past a code's timeout a worker may take to answer before it is replaced."""
        workers: list[_WorkerProcess] = []
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

    def _start(self, slot: int) -> _WorkerProcess:
        return self._spawner.submit(
            _WorkerProcess, slot, self.limits, self._base, self.fresh_interpreter, self._plan
        ).result()

    def _checked_out(self) -> tuple[int, _WorkerProcess]:
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
