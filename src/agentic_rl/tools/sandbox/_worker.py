"""A warm sandbox worker: one long-lived process that forks a fresh child per execution.

Started by the pool as `python -I -c <boot>` with an empty environment (under bubblewrap where
it works), so neither the parent's variables nor its memory exist here. It sets up its
isolation once (a fork inherits it: see the package docstring for the modes), imports the
runner and the preload modules, then serves length-prefixed JSON frames on stdin/stdout: a
config frame, then one request {"code", "timeout_s"} -> one result dict.

Per request: a fresh working directory, a forked child that sets its rlimits, drops to the
sandbox uid where there is one (root's pools outside bwrap), installs the seccomp filter
(outside bwrap, which installs it itself) and runs the code, while the worker drains its
stdout/stderr (so a full pipe never blocks it) until it exits or the wall timeout passes;
then every leftover process is killed, zombies are reaped, and the working directory (under
bwrap the whole tmpfs, /tmp and /dev/shm) and System V IPC objects are deleted. Standard
library only.
"""

from __future__ import annotations

import contextlib
import importlib
import json
import os
import selectors
import shutil
import signal
import sys
import time
from typing import Any, NoReturn

import _isolation
import _runner

HERE = os.path.dirname(os.path.abspath(__file__))
PIPE_GRACE_S = 0.5  # after the child exits, how long leftovers may hold its pipes open
FRESH_BOOT = (
    f"import sys; sys.path.insert(0, {HERE!r}); import _runner; del sys.path[0]; "
    "_runner.main_fresh()"
)


def _read_exact(fd: int, size: int) -> bytes:
    data = b""
    while len(data) < size:
        chunk = os.read(fd, size - len(data))
        if not chunk:
            return b""
        data += chunk
    return data


def read_frame(fd: int) -> Any:
    """One length-prefixed JSON frame, or None at end of file."""
    header = _read_exact(fd, 4)
    if not header:
        return None
    return json.loads(_read_exact(fd, int.from_bytes(header, "big")))


def write_frame(fd: int, obj: Any) -> None:
    data = json.dumps(obj).encode()
    view = memoryview(len(data).to_bytes(4, "big") + data)
    while view:
        view = view[os.write(fd, view) :]


class Capture:
    """Bytes from one pipe, keeping the first `cap` and counting the rest."""

    def __init__(self, cap: int) -> None:
        self.cap, self.total, self.parts = cap, 0, []

    def add(self, chunk: bytes) -> None:
        kept = min(self.total, self.cap)
        if kept < self.cap:
            self.parts.append(chunk[: self.cap - kept])
        self.total += len(chunk)

    def data(self) -> bytes:
        return b"".join(self.parts)

    def text(self, max_chars: int) -> str:
        """Decoded (invalid UTF-8 replaced), cut to max_chars with a marker saying so."""
        text = self.data().decode("utf-8", errors="replace")
        if len(text) <= max_chars and self.total <= self.cap:
            return text
        return text[:max_chars] + f"\n[... output truncated; {self.total:,} bytes in all]"


def minimal_env(workdir: str) -> dict[str, str]:
    """The child's whole environment: nothing from the parent."""
    return {
        "PATH": "/usr/local/bin:/usr/bin:/bin",
        "HOME": workdir,
        "TMPDIR": workdir,
        "LANG": "C.UTF-8",
        "LC_ALL": "C.UTF-8",
        "PYTHONIOENCODING": "utf-8",
        # numeric libraries start one thread per core otherwise, each counting toward NPROC
        "OMP_NUM_THREADS": "1",
        "OPENBLAS_NUM_THREADS": "1",
        "MKL_NUM_THREADS": "1",
    }


def _wait(pid: int, block: bool) -> tuple[int, Any] | None:
    try:
        got, status, rusage = os.wait4(pid, 0 if block else os.WNOHANG)
    except ChildProcessError:  # already reaped elsewhere: report a plain kill
        return signal.SIGKILL, None
    return None if got == 0 else (status, rusage)


class Worker:
    """State of one worker process (see the module docstring)."""

    def __init__(self, config: dict[str, Any]) -> None:
        self.limits: dict[str, Any] = config["limits"]
        self.base: str = config["base_dir"]
        self.fresh: bool = bool(config.get("fresh", False))
        self.mode: str = config.get("mode", "none")
        self.uid: int | None = config.get("uid")  # the uid code runs as (root pools only)
        seccomp = config.get("seccomp")
        self.seccomp: bytes | None = bytes.fromhex(seccomp) if seccomp else None
        self.child_uid = self.uid  # whom the child becomes; None: it stays the worker's uid
        root = os.geteuid() == 0
        if self.mode == "bwrap":  # leftovers of an earlier owner of the uid died with its PID 1
            self.isolation = self._setup_bwrap()
        else:
            if self.uid is not None and root:  # whatever a crashed earlier owner left behind
                _isolation.sweep_uid(self.uid)
                _isolation.reap()
            self.isolation = _isolation.setup_worker(
                self.base, self.limits["disk_mb"], [HERE], self.mode == "namespaces"
            )
            self.isolation.update(pidns=False, userns=False, private_tmp=False)
            self.isolation["nproc"] = self.isolation["worker_protected"] = self.uid is not None
        self.isolation.update(root=root, uid=self.uid, uid_drop=self.uid is not None)
        self.isolation["socket_block"] = not self.isolation["netns"]
        failed = []
        for name in self.limits.get("preload", []):
            try:
                importlib.import_module(name)
            except Exception:
                failed.append(name)
        self.isolation["preload_failed"] = failed
        if self.isolation["socket_block"]:
            import socket  # noqa: F401  (imported here so the child only patches it)
        self.devnull = os.open(os.devnull, os.O_RDWR)
        self.runs = 0

    def _setup_bwrap(self) -> dict[str, Any]:
        """Inside bubblewrap: the namespaces and file system exist already. As root's sandbox,
        become the worker's own uid (bwrap left only CAP_SETUID/CAP_SETGID for this); then
        make this process unreachable to the code, which shares its uid."""
        if self.uid is not None:
            _isolation.drop_privileges(self.uid)
            self.child_uid = None
            # A change of uid clears bwrap's --die-with-parent signal: set it again.
            _isolation.prctl(_isolation.PR_SET_PDEATHSIG, signal.SIGKILL)
        _isolation.set_dumpable(False)  # no ptrace, no /proc/1/mem or /proc/1/fd for the code
        # PID 1 gets only the signals it handles; Python's own SIGINT handler would let the
        # code raise KeyboardInterrupt in the worker.
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        return {
            "netns": True,
            "mountns": True,
            "pidns": os.getpid() == 1,
            "userns": self.uid is None,
            "ipcns": True,
            "utsns": True,
            "readonly_fs": True,
            "tmpfs": True,
            "private_shm": True,
            "private_tmp": True,
            "subreaper": True,  # PID 1: every orphan comes back to us
            "hidden_dirs": [],
            # a uid of its own (root), or a user namespace of its own counted apart (5.14+)
            "nproc": self.uid is not None or _isolation.nproc_per_user_namespace(),
            "worker_protected": os.getpid() == 1,
        }

    # -- the child ---------------------------------------------------------------------------
    def _child(self, code: str, cpu_s: int, workdir: str, fds: tuple[int, int, int]) -> NoReturn:
        try:
            os.setsid()  # own process group: the wall-time kill takes its children too
            for target, fd in zip((1, 2, 3), fds, strict=True):
                os.dup2(fd, target)
            os.dup2(self.devnull, 0)
            _isolation.close_fds_from(4)  # protocol pipes, lock file, anything else
            os.chdir(workdir)
            env = minimal_env(workdir)
            os.environ.clear()
            os.environ.update(env)
            signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # EFBIG error instead of a kill
            signal.signal(signal.SIGINT, signal.default_int_handler)
            _isolation.apply_rlimits(self.limits, cpu_s)
            if self.child_uid is not None:
                _isolation.drop_privileges(self.child_uid)
            elif self.mode == "bwrap":
                _isolation.set_dumpable(True)  # the worker is not; the code may be
            _isolation.no_new_privs()
            if self.seccomp is not None:  # under bwrap the filter is in place already
                _isolation.load_bpf(self.seccomp)
            if self.isolation["socket_block"]:
                _isolation.block_sockets()
            if self.fresh:
                os.execve(sys.executable, [sys.executable, "-I", "-c", FRESH_BOOT], env)
            sys.path[:] = ["", *(p for p in sys.path if p != HERE)]
            _runner.run_child(code)
        except BaseException as exc:
            with contextlib.suppress(BaseException):
                message = f"SandboxError: setup failed: {_runner.error_line(exc)}"
                os.write(3, json.dumps({"ok": False, "error": message}).encode())
        os._exit(70)

    # -- the worker side -----------------------------------------------------------------------
    def _sweep(self, pid: int) -> None:
        """Kill everything the execution left running."""
        if self.mode == "bwrap" and self.isolation["pidns"]:
            _isolation.sweep_namespace()
        elif self.child_uid is not None:
            _isolation.sweep_uid(self.child_uid)
        else:
            _isolation.kill_descendants(pid)

    def _collect(self, pid: int, captures: dict[int, Capture], timeout: float) -> tuple:
        """Drain the pipes until the child exits and they close, or the deadline passes."""
        sel = selectors.DefaultSelector()
        for fd in captures:
            os.set_blocking(fd, False)
            sel.register(fd, selectors.EVENT_READ)
        try:
            pidfd = os.pidfd_open(pid)  # readable when the child exits: no polling
            sel.register(pidfd, selectors.EVENT_READ)
        except (AttributeError, OSError):
            pidfd = None
        start = time.monotonic()
        deadline, grace_end, wait, timed_out = start + timeout, 0.0, None, False
        try:
            while True:
                if wait is None and (wait := _wait(pid, block=False)) is not None:
                    if not self.isolation["subreaper"] or _isolation.has_children():
                        self._sweep(pid)  # leftovers die, so the pipes they hold reach EOF
                    grace_end = time.monotonic() + PIPE_GRACE_S
                readers = [k.fd for k in sel.get_map().values() if k.fd != pidfd]
                if wait is not None and not readers:
                    break
                now = time.monotonic()
                end = grace_end if wait is not None else deadline
                if now >= end:
                    if wait is not None:
                        break
                    timed_out = True
                    with contextlib.suppress(OSError):
                        os.killpg(pid, signal.SIGKILL)
                    self._sweep(pid)
                    wait = _wait(pid, block=True)
                    grace_end = time.monotonic() + 0.1
                    continue
                step = end - now if pidfd is not None else min(end - now, 0.02)
                for key, _ in sel.select(step):
                    if key.fd == pidfd:
                        sel.unregister(pidfd)  # reaped at the top of the loop
                        continue
                    chunk = os.read(key.fd, 65536)
                    if chunk:
                        captures[key.fd].add(chunk)
                    else:
                        sel.unregister(key.fd)
        finally:
            sel.close()
            for fd in [*captures, *([pidfd] if pidfd is not None else [])]:
                os.close(fd)
        return wait, timed_out, time.monotonic() - start

    def execute(self, request: dict[str, Any]) -> dict[str, Any]:
        code, timeout = request["code"], float(request["timeout_s"])
        limits = self.limits
        if len(code) > limits["max_code_chars"]:  # the pool checks first; never trust input
            return _rejected(
                f"CodeTooLarge: {len(code)} characters (limit {limits['max_code_chars']})"
            )
        cpu_s = int(request["cpu_s"])
        _isolation.reap(0.0)  # zombies of the last run would count toward this run's NPROC
        self.runs += 1
        workdir = os.path.join(self.base, f"run-{self.runs}")
        os.mkdir(workdir, 0o700)
        owned = [workdir]
        if self.fresh:  # the exec'd interpreter reads the code from a file
            owned.append(os.path.join(workdir, _runner.FRESH_CODE_FILE))
            with open(owned[-1], "w", encoding="utf-8") as f:
                f.write(code)
        if self.child_uid is not None:
            for path in owned:
                os.chown(path, self.child_uid, self.child_uid)
        pipes = [os.pipe() for _ in range(3)]
        pid = os.fork()
        if pid == 0:
            self._child(code, cpu_s, workdir, tuple(w for _, w in pipes))
        for _, w in pipes:
            os.close(w)
        cap = 4 * int(limits["max_output_chars"]) + 4  # UTF-8 needs at most 4 bytes a char
        out, err, status = Capture(cap), Capture(cap), Capture(1 << 16)
        captures = {pipes[0][0]: out, pipes[1][0]: err, pipes[2][0]: status}
        try:
            wait, timed_out, duration = self._collect(pid, captures, timeout)
        finally:
            _isolation.reap()
            if self.mode == "bwrap":  # the whole tmpfs: the code may write beside its run dir
                _isolation.wipe_dir(self.base)
                _isolation.remove_sysv_ipc(None)  # our own IPC namespace
            else:
                shutil.rmtree(workdir, ignore_errors=True)
                if self.child_uid is not None:
                    _isolation.remove_sysv_ipc(self.child_uid)
            if self.isolation["private_shm"]:
                _isolation.wipe_dir("/dev/shm")
            if self.isolation["private_tmp"]:
                _isolation.wipe_dir("/tmp")
        result = _interpret(wait, timed_out, status.data(), timeout, cpu_s)
        max_chars = int(limits["max_output_chars"])
        result.update(stdout=out.text(max_chars), stderr=err.text(max_chars), duration_s=duration)
        return result


def _rejected(error: str) -> dict[str, Any]:
    return dict(
        stdout="", stderr="", ok=False, error=error, timed_out=False, exit_code=None, duration_s=0.0
    )


def _interpret(wait: Any, timed_out: bool, status: bytes, timeout: float, cpu_s: int) -> dict:
    """ok / error / timed_out / exit_code from the wait status and the runner's report."""
    ws, rusage = wait
    signaled = os.WIFSIGNALED(ws)
    sig = os.WTERMSIG(ws) if signaled else 0
    exit_code = -sig if signaled else os.WEXITSTATUS(ws)
    try:
        report = json.loads(status) if status else None
    except ValueError:
        report = None
    cpu_used = rusage.ru_utime + rusage.ru_stime if rusage is not None else 0.0
    out = {"ok": False, "timed_out": timed_out, "exit_code": exit_code}
    if timed_out:
        out["error"] = f"TimeoutError: wall time limit of {timeout:g} s exceeded"
    elif isinstance(report, dict) and not signaled:
        out["ok"], out["error"] = bool(report.get("ok")), str(report.get("error", ""))
    elif sig == signal.SIGXCPU or (sig == signal.SIGKILL and cpu_used >= cpu_s - 0.05):
        out["timed_out"] = True
        out["error"] = f"TimeoutError: CPU time limit of {cpu_s} s exceeded"
    elif signaled:
        try:
            name = signal.Signals(sig).name
        except ValueError:
            name = f"signal {sig}"
        out["error"] = f"SandboxError: killed by {name}"
    else:  # os._exit() or a crash before the runner could report
        out["ok"] = exit_code == 0
        out["error"] = "" if exit_code == 0 else f"SandboxError: exited with code {exit_code}"
    return out


def main() -> None:
    """Serve requests on stdin/stdout until the pool closes stdin."""
    proto_in, proto_out = os.dup(0), os.dup(1)
    devnull = os.open(os.devnull, os.O_RDWR)
    os.dup2(devnull, 0)  # stray prints can never corrupt the protocol
    os.dup2(devnull, 1)
    config = read_frame(proto_in)
    if config is None:
        return
    worker = Worker(config)
    write_frame(proto_out, {"ready": True, "pid": os.getpid(), "isolation": worker.isolation})
    while (request := read_frame(proto_in)) is not None:
        try:
            result = worker.execute(request)
        except Exception as exc:  # the worker must answer; the pool replaces it if it cannot
            result = _rejected(f"SandboxError: {type(exc).__name__}: {exc}")
        try:
            write_frame(proto_out, result)
        except BrokenPipeError:
            return
