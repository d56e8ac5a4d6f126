"""Run a `SandboxPool` as another, unprivileged user, for the hostile suite (and its driver).

Most researchers run the sandbox as a normal user, so the attacks must be tried that way too.
When the tests run as root, `UserPool` starts this file as a driver process that becomes a
fresh unprivileged user and serves a pool over JSON lines on stdin/stdout; `UserPool` offers
the pool's interface to the tests. The Python installation may sit where that user cannot go
(pyenv under /root, mode 0700): the driver starts as root in a mount namespace of its own where
such directories are covered by an empty tmpfs with only Python bound back (the sandbox's own
`_expose_hidden`), then drops to the user for good before anything else runs.

    python tests/tools/sandbox_user.py UID     (started by UserPool, as root)
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
from typing import Any

from agentic_rl.tools.sandbox.limits import ExecutionResult, SandboxLimits

TEST_USER = "agentic-rl-sbx-test"
FALLBACK_UID = 65534  # nobody


def test_uid() -> tuple[int | None, str]:
    """(uid of an unprivileged test user, "") or (None, why there is none). Root only: the
    user is created with useradd when missing (else nobody's uid is used)."""
    if os.geteuid() != 0:
        return None, "not root: the tests already run as an unprivileged user"
    import pwd

    with contextlib.suppress(KeyError):
        return pwd.getpwnam(TEST_USER).pw_uid, ""
    useradd = shutil.which("useradd") or shutil.which("useradd", path="/usr/sbin:/sbin")
    if useradd:
        subprocess.run(
            [useradd, "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", TEST_USER],
            capture_output=True,
            check=False,
        )
        with contextlib.suppress(KeyError):
            return pwd.getpwnam(TEST_USER).pw_uid, ""
    return FALLBACK_UID, ""


def leftover_processes(pool: Any) -> int:
    """Processes the pool's executions left behind: in a worker's PID namespace (bwrap) or
    running as a sandbox uid (root's namespaces), the workers themselves excepted."""
    workers = set(pool.worker_pids())
    namespaces = set()
    if pool.isolation.get("pidns"):
        for pid in workers:
            with contextlib.suppress(OSError):
                namespaces.add(os.readlink(f"/proc/{pid}/ns/pid"))
    uids = set(pool.sandbox_uids()) if not namespaces else set()
    count = 0
    for name in os.listdir("/proc"):
        if not name.isdigit() or int(name) in workers:
            continue
        try:
            if namespaces and os.readlink(f"/proc/{name}/ns/pid") in namespaces:
                count += 1
                continue
            if uids:
                with open(f"/proc/{name}/status") as f:
                    uid_line = next(line for line in f if line.startswith("Uid:"))
                count += int(uid_line.split()[1]) in uids
        except (OSError, StopIteration):
            continue
    return count


class UserPool:
    """A SandboxPool living in a driver process that runs as `uid`; same interface."""

    def __init__(self, size: int, limits: SandboxLimits, uid: int) -> None:
        env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8", "HOME": "/"}
        for key, value in os.environ.items():  # what a test wants the "trainer" to hold
            if key in ("TMPDIR", "AGENTIC_RL_SANDBOX_ALLOW_UNISOLATED") or key.startswith(
                "AGENTIC_SANDBOX_"
            ):
                env[key] = value
        self.proc = subprocess.Popen(
            [sys.executable, os.path.abspath(__file__), str(uid)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            env=env,
            text=True,
        )
        self.uid = uid
        self.size = size
        self.limits = limits
        try:
            reply = self._ask(op="start", size=size, limits=limits.to_dict())
        except BaseException:
            self.close()
            raise
        self.isolation: dict[str, Any] = reply["isolation"]
        self.trainer_pid: int = reply["pid"]

    def _ask(self, **request: Any) -> Any:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(json.dumps(request) + "\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError(f"the sandbox driver died (exit {self.proc.wait()})")
        reply = json.loads(line)
        if "error" in reply:
            raise RuntimeError(reply["error"])
        return reply["value"]

    def run(self, code: str, timeout_s: float | None = None) -> ExecutionResult:
        return ExecutionResult.from_dict(self._ask(op="run", code=code, timeout_s=timeout_s))

    def _attr(self, name: str) -> Any:
        return self._ask(op="attr", name=name)

    restarts = property(lambda self: self._attr("restarts"))
    executions = property(lambda self: self._attr("executions"))

    @property
    def grace_s(self) -> float:
        return self._attr("grace_s")

    @grace_s.setter
    def grace_s(self, value: float) -> None:
        self._ask(op="set_grace", value=value)

    def worker_pids(self) -> list[int]:
        return self._attr("worker_pids")

    def sandbox_uids(self) -> list[int]:
        return self._attr("sandbox_uids")

    def leftover_processes(self) -> int:
        return self._attr("leftovers")

    def close(self) -> None:
        if self.proc.poll() is None:
            with contextlib.suppress(Exception):
                self._ask(op="close")
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(timeout=30)
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()

    def __enter__(self) -> UserPool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


# -- the driver ----------------------------------------------------------------------------


def _become(uid: int) -> None:
    """As root: a private mount namespace where the Python installation is reachable, then
    `uid` for good (no supplementary groups), then a fresh interpreter as that user."""
    from agentic_rl.tools.sandbox import _isolation

    _isolation.unshare(_isolation.CLONE_NEWNS)
    _isolation.mount(None, "/", None, _isolation.MS_REC | _isolation.MS_PRIVATE)
    here = os.path.dirname(os.path.abspath(__file__))
    _isolation._expose_hidden(_isolation._needed_paths([here, *sys.path]))
    os.setgroups([])
    os.setgid(uid)
    os.setuid(uid)
    os.execv(sys.executable, [sys.executable, os.path.abspath(__file__), "--serve"])


def _serve() -> None:
    from agentic_rl.tools.sandbox.pool import SandboxPool

    pool = None
    for line in sys.stdin:
        request = json.loads(line)
        op = request["op"]
        try:
            if op == "start":
                raw = request["limits"]
                raw["preload"], raw["ro_paths"] = tuple(raw["preload"]), tuple(raw["ro_paths"])
                pool = SandboxPool(request["size"], SandboxLimits(**raw))
                value: Any = {"isolation": pool.isolation, "pid": os.getpid()}
            elif op == "run":
                value = pool.run(request["code"], request["timeout_s"]).to_dict()
            elif op == "attr":
                name = request["name"]
                if name == "leftovers":
                    value = leftover_processes(pool)
                elif name in ("worker_pids", "sandbox_uids"):
                    value = getattr(pool, name)()
                else:
                    value = getattr(pool, name)
            elif op == "set_grace":
                pool.grace_s = float(request["value"])
                value = None
            elif op == "close":
                if pool is not None:
                    pool.close()
                print(json.dumps({"value": None}), flush=True)
                return
            else:
                raise ValueError(f"unknown op {op!r}")
            reply = {"value": value}
        except Exception as exc:
            reply = {"error": f"{type(exc).__name__}: {exc}"}
        print(json.dumps(reply), flush=True)


if __name__ == "__main__":
    if sys.argv[1] == "--serve":
        _serve()
    else:
        _become(int(sys.argv[1]))
