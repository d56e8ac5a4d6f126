"""One sandbox worker as its parent sees it, and how workers are isolated.

`plan_isolation` decides once per pool how its workers run: under bubblewrap where it works
(`_bwrap.py`), else, as root, in namespaces the worker makes itself (`_isolation.py`), else not
at all, which is refused (`SandboxUnavailableError`, saying how to get isolation) unless
unisolated runs are allowed. `WorkerProcess` is the parent's handle on one worker started under
that plan: a `python -I` process with an empty environment (`_worker.py`), a length-prefixed
JSON protocol over its stdin/stdout (one request at a time), and kill/release of everything it
holds (its uid lock, cgroup and working directory). The pool (`pool.py`) keeps these workers
warm and replaces the ones that fail.
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from typing import Any

from agentic_rl.tools.sandbox import _bwrap, _cgroup, _isolation, _seccomp
from agentic_rl.tools.sandbox.limits import SandboxLimits

SANDBOX_DIR = os.path.dirname(os.path.abspath(__file__))
WORKER_BOOT = f"import sys; sys.path.insert(0, {SANDBOX_DIR!r}); import _worker; _worker.main()"
WORKER_ENV = {"PATH": "/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8"}
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
class IsolationPlan:
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


def plan_isolation(limits: SandboxLimits) -> IsolationPlan:
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
            return IsolationPlan(
                "bwrap", root, path, detail == "disable_userns", bpf, cgroup_parent, report
            )
        problems.append(f"bubblewrap cannot start a sandbox here ({detail})")
    report["bwrap_error"] = "; ".join(problems)
    if limits.namespaces and root:
        return IsolationPlan(
            "namespaces", root, seccomp=bpf, cgroup_parent=cgroup_parent, report=report
        )
    if not allow_unisolated(limits):
        who = "root" if root else f"uid {os.geteuid()} (not root)"
        raise SandboxUnavailableError(
            f"refusing to run model code without isolation: running as {who}, and "
            f"{'; '.join(problems)}. {HOW_TO_ISOLATE}"
        )
    return IsolationPlan("none", root, seccomp=bpf, cgroup_parent=cgroup_parent, report=report)


def reachable_temp_dir() -> str:
    """A temporary directory whose every ancestor others may traverse: with a private (0700)
    TMPDIR the sandbox uid could not reach its own working directories (root only)."""
    for candidate in (tempfile.gettempdir(), "/tmp", "/var/tmp", "/dev/shm"):
        path = os.path.realpath(candidate)
        if os.path.isdir(path) and _isolation.blocked_ancestor(path + "/x") is None:
            return path
    raise RuntimeError("no temporary directory that an unprivileged sandbox uid can reach")


class WorkerProcess:
    """The parent's handle on one worker: spawn, one request at a time, kill."""

    def __init__(
        self,
        slot: int,
        limits: SandboxLimits,
        base_dir: str | None,
        fresh: bool,
        plan: IsolationPlan,
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

    def _spawn(self, plan: IsolationPlan, limits: SandboxLimits) -> subprocess.Popen:
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
