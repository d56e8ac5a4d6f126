"""Adversarial code against the sandbox pool: each attack is contained, reported in the result,
and the pool serves a correct normal run right after it (`assert_pool_healthy`).

Every test runs three times: with a pool of the current user (root in CI: bubblewrap with a
uid per worker), with a pool started by a fresh unprivileged user (`sandbox_user.UserPool`:
bubblewrap in an unprivileged user namespace, how most researchers run it), and as root
without bubblewrap (root's own network and mount namespaces, the fallback). Where the tests
themselves run unprivileged, the last two are skipped: the first already is that case. Limits are small (1-2 s, 256 MB, 16 processes) so
the whole file runs in seconds.
"""

from __future__ import annotations

import os
import socket
import time
import uuid
from dataclasses import replace
from pathlib import Path

import pytest
import sandbox_user

from agentic_rl.tools.sandbox._bwrap import find_bwrap
from agentic_rl.tools.sandbox.limits import SandboxLimits
from agentic_rl.tools.sandbox.pool import SandboxPool

LIMITS = SandboxLimits(timeout_s=2.0, memory_mb=256, nproc=16, max_output_chars=1000)
PROJECT_DIR = Path(__file__).resolve().parents[2]
USERS = ["current user", "unprivileged user", "root without bwrap"]


def make_pool(user: str, size: int, limits: SandboxLimits):
    if user == "current user":
        return SandboxPool(size, limits)
    if user == "root without bwrap":  # the fallback: root's own namespaces, a uid per worker
        if os.geteuid() != 0:
            pytest.skip("root's own namespaces need root")
        return SandboxPool(size, replace(limits, bwrap=False))
    uid, why = sandbox_user.test_uid()
    if uid is None:
        pytest.skip(why)
    if find_bwrap() is None:  # test_an_unprivileged_user_without_bwrap_is_refused covers it
        pytest.skip("bubblewrap is not installed: an unprivileged pool would refuse to start")
    return sandbox_user.UserPool(size, limits, uid)


@pytest.fixture(scope="module", params=USERS)
def user(request):
    return request.param


@pytest.fixture(scope="module")
def pool(user):
    with make_pool(user, 2, LIMITS) as pool:
        yield pool


def trainer_pid(pool) -> int:
    """The process that owns the pool (the test process, or the unprivileged driver)."""
    return getattr(pool, "trainer_pid", os.getpid())


def leftovers(pool) -> int:
    if isinstance(pool, sandbox_user.UserPool):
        return pool.leftover_processes()
    return sandbox_user.leftover_processes(pool)


def assert_pool_healthy(pool) -> None:
    result = pool.run("x = 6\nx * 7", timeout_s=10)
    assert result.ok, result
    assert result.stdout == "42\n"
    if pool.isolation["pidns"] or pool.isolation["uid_drop"]:
        assert leftovers(pool) == 0  # nothing left running after the attack


def needs(pool, *features: str) -> None:
    missing = [f for f in features if not pool.isolation.get(f)]
    if missing:
        pytest.skip(f"not enforceable here: {', '.join(missing)} ({pool.isolation})")


def test_the_pool_is_isolated(pool, user):
    iso = pool.isolation
    assert iso["mode"] in ("bwrap", "namespaces"), iso  # never "none" without the switch
    assert iso["netns"] and iso["mountns"] and iso["readonly_fs"]
    if user == "unprivileged user" or not iso["root"]:
        assert iso["mode"] == "bwrap" and iso["userns"] and iso["pidns"], iso
    if iso["mode"] == "bwrap":
        assert iso["worker_protected"] and iso["private_tmp"]


def test_an_unprivileged_user_without_bwrap_is_refused():
    # The case the old sandbox let through silently: code ran as the researcher's own user.
    uid, why = sandbox_user.test_uid()
    if uid is None:
        pytest.skip(why)
    with pytest.raises(RuntimeError, match="refusing to run model code without isolation"):
        sandbox_user.UserPool(1, replace(LIMITS, bwrap=False), uid).close()


def test_infinite_loop_hits_the_wall_time_limit(pool):
    start = time.monotonic()
    result = pool.run("while True:\n    pass", timeout_s=1.0)
    assert result.timed_out and not result.ok
    # A busy loop spends CPU as fast as wall time, so on an idle machine the 1 s CPU limit can
    # fire first; either limit stopping it is correct (the CPU limit has its own test below).
    assert "time limit of 1 s" in result.error
    assert time.monotonic() - start < 5
    assert_pool_healthy(pool)


def test_infinite_loop_hits_the_cpu_limit(user):
    # The wall limit is far away: only RLIMIT_CPU (SIGXCPU after 1 s of CPU) can stop it.
    with make_pool(user, 1, SandboxLimits(cpu_s=1, timeout_s=20, max_timeout_s=20)) as pool:
        result = pool.run("while True:\n    pass", timeout_s=20)
        assert result.timed_out and not result.ok
        assert "CPU time limit of 1 s" in result.error
        assert result.duration_s < 15
        assert_pool_healthy(pool)


def test_fork_bomb_is_contained_by_nproc(pool):
    needs(pool, "nproc")
    bomb = "import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass"
    result = pool.run(bomb, timeout_s=1.0)
    assert result.timed_out and not result.ok
    assert os.fork is not None and os.getloadavg()  # the test process is still fine
    # The bomb hit NPROC: a plain fork loop fails fast with EAGAIN instead of timing out.
    result = pool.run("import os\nwhile True:\n    os.fork()", timeout_s=5.0)
    assert not result.ok and not result.timed_out
    assert result.error.startswith("BlockingIOError")
    assert_pool_healthy(pool)


def test_memory_bomb_raises_memory_error(pool):
    result = pool.run("bytearray(10**10)")
    assert not result.ok and result.error == "MemoryError"
    # Filling 256 MB page by page can take seconds on a loaded machine: not a time test.
    code = "chunks = []\nwhile True:\n    chunks.append(bytearray(10**6))"
    result = pool.run(code, timeout_s=20)
    assert not result.ok and result.error == "MemoryError", result
    assert_pool_healthy(pool)


def test_cannot_write_outside_the_work_dir(pool):
    name = f"agentic_rl_escape_{uuid.uuid4().hex}"
    # The project, its .venv (and so checkpoints and the home directory beside them) and the
    # root file system: refused. /tmp: read-only, or (bwrap) a private tmpfs: never the host's.
    refused = [str(PROJECT_DIR / name), str(PROJECT_DIR / ".venv" / name), f"/dev/shm/../{name}"]
    targets = [*refused, f"/tmp/{name}"]
    try:
        for target in targets:
            result = pool.run(f"open({target!r}, 'w').write('pwned')")
            assert not os.path.exists(os.path.normpath(target)), target
            if target in refused:
                assert not result.ok, target
                reasons = ("Read-only file system", "Permission", "No such file")
                assert any(reason in result.error for reason in reasons), result.error
    finally:
        for target in targets:
            if os.path.exists(os.path.normpath(target)):
                os.unlink(os.path.normpath(target))
    # Inside its own directory it may write and read back; the next run starts empty.
    result = pool.run("open('a.txt', 'w').write('hi')\nopen('a.txt').read()")
    assert result.ok and result.stdout == "'hi'\n"
    result = pool.run("import os\nsorted(os.listdir('.'))")
    assert result.stdout == "[]\n"
    assert_pool_healthy(pool)


def test_cannot_read_the_trainers_private_files(pool, user):
    # A file only the trainer's user may read (under bwrap the code runs as that very user).
    home = Path(os.path.expanduser("~"))
    place = next((d for d in (PROJECT_DIR, home) if os.access(d, os.W_OK | os.X_OK)), None)
    if place is None:
        pytest.skip("neither the project nor the home directory is writable here")
    secret = place / f".agentic_rl_secret_{uuid.uuid4().hex}"
    secret.write_text("s3cr3t-token")
    try:
        secret.chmod(0o600)
        if user == "unprivileged user":
            os.chown(secret, pool.uid, pool.uid)
        result = pool.run(f"print(open({str(secret)!r}).read())")
        assert not result.ok and "s3cr3t-token" not in result.stdout
        assert "No such file" in result.error or "Permission" in result.error, result.error
    finally:
        secret.unlink()
    assert_pool_healthy(pool)


def test_parent_environment_is_not_visible(user):
    os.environ["AGENTIC_SANDBOX_SECRET"] = "s3cr3t-value"
    try:
        with make_pool(user, 1, LIMITS) as pool:  # started while the secret is set
            code = (
                "import os\n"
                "def read(path):\n"
                "    try:\n"
                "        return open(path, 'rb').read().decode('latin-1')\n"
                "    except OSError as exc:\n"
                "        return type(exc).__name__\n"
                "print(dict(os.environ))\n"
                "print(read('/proc/self/environ'))\n"
                "print(read(f'/proc/{os.getppid()}/environ'))\n"
                "print(read(f'/proc/{os.getppid()}/mem'))\n"
                f"print(read('/proc/{trainer_pid(pool)}/environ'))\n"
                f"print(read('/proc/{trainer_pid(pool)}/mem'))\n"
            )
            result = pool.run(code)
            assert result.ok, result
            assert "s3cr3t-value" not in result.stdout
            assert "AGENTIC_SANDBOX_SECRET" not in result.stdout
            assert "PATH" in result.stdout  # a minimal environment, not none at all
            assert_pool_healthy(pool)
    finally:
        del os.environ["AGENTIC_SANDBOX_SECRET"]


def test_host_processes_are_out_of_sight_and_reach(pool):
    needs(pool, "pidns")
    trainer = trainer_pid(pool)
    code = (
        "import os, signal\n"
        "print(sorted(int(p) for p in os.listdir('/proc') if p.isdigit()))\n"
        f"print(os.path.exists('/proc/{trainer}'))\n"
        f"os.kill({trainer}, signal.SIGKILL)\n"
    )
    result = pool.run(code)
    assert not result.ok and result.error.startswith("ProcessLookupError"), result
    lines = result.stdout.splitlines()
    assert max(eval(lines[0])) < 100 and lines[1] == "False"  # only the sandbox's own pids
    assert_pool_healthy(pool)  # the trainer (test process or driver) is alive and serving


def test_no_network_through_subprocesses_or_ctypes(pool):
    needs(pool, "netns")  # the Python-level socket block of the fallback cannot stop these
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()
    server.setblocking(False)
    port = server.getsockname()[1]
    connect = f"import socket; socket.create_connection(('127.0.0.1', {port}), timeout=1)"
    code = (
        "import ctypes, socket, struct, subprocess, sys\n"
        f"done = subprocess.run([sys.executable, '-c', {connect!r}], capture_output=True)\n"
        "print('subprocess', done.returncode)\n"
        "libc = ctypes.CDLL(None, use_errno=True)\n"
        "fd = libc.socket(socket.AF_INET, socket.SOCK_STREAM, 0)\n"
        f"addr = struct.pack('!HH4s8x', socket.AF_INET, {port}, socket.inet_aton('127.0.0.1'))\n"
        "addr = struct.pack('=H', socket.AF_INET) + addr[2:]\n"
        "print('ctypes', libc.connect(fd, addr, len(addr)), ctypes.get_errno())\n"
    )
    try:
        result = pool.run(code, timeout_s=10)
        assert result.ok, result
        lines = result.stdout.splitlines()
        assert lines[0] != "subprocess 0" and lines[1].startswith("ctypes -1 ")
        with pytest.raises(BlockingIOError):
            server.accept()  # nobody connected
    finally:
        server.close()
    assert_pool_healthy(pool)


def test_cannot_debug_the_worker_or_make_namespaces(pool):
    code = (
        "import ctypes, os\n"
        "libc = ctypes.CDLL(None, use_errno=True)\n"
        "print(libc.ptrace(16, os.getppid(), 0, 0), ctypes.get_errno())\n"  # PTRACE_ATTACH
        "print(libc.unshare(0x10000000), ctypes.get_errno())\n"  # CLONE_NEWUSER
    )
    result = pool.run(code)
    assert result.ok, result
    ptrace, unshare = result.stdout.splitlines()
    assert ptrace == "-1 1"  # EPERM
    if pool.isolation["seccomp"] or pool.isolation.get("userns"):
        assert unshare.startswith("-1 ")
    assert_pool_healthy(pool)


def test_no_network_to_a_loopback_server(pool):
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()
    server.setblocking(False)
    port = server.getsockname()[1]
    try:
        code = f"import socket\nsocket.create_connection(('127.0.0.1', {port}), timeout=1)"
        result = pool.run(code)
        assert not result.ok
        # A network namespace has only its own loopback (bwrap brings it up): nothing listens.
        expected = ("Network is unreachable", "Connection refused")
        if not pool.isolation["netns"]:
            expected = ("network access",)
        assert any(e in result.error for e in expected), result.error
        with pytest.raises(BlockingIOError):
            server.accept()  # nobody connected
    finally:
        server.close()
    assert_pool_healthy(pool)


def test_killing_the_parent_or_its_group_is_contained(pool):
    restarts = pool.restarts
    for code in [
        "import os, signal\nos.kill(os.getppid(), signal.SIGKILL)",
        "import os, signal\nos.kill(os.getppid(), signal.SIGINT)",
        "import os, signal\nos.killpg(os.getpgid(os.getppid()), signal.SIGKILL)",
        "import os, signal\nos.kill(-1, signal.SIGKILL)",
        "import os, signal\nos.killpg(0, signal.SIGKILL)",  # its own group: kills only itself
    ]:
        pool.run(code)
        assert_pool_healthy(pool)
    if pool.isolation["worker_protected"]:
        assert pool.restarts == restarts  # the workers were out of reach, not merely replaced


def test_nothing_survives_from_one_run_to_the_next(pool):
    # Files anywhere writable, and System V IPC objects (which outlive their processes).
    plant = (
        "import ctypes, os\n"
        "for d in ('/tmp', '/dev/shm', os.path.dirname(os.getcwd())):\n"
        "    try:\n"
        "        open(os.path.join(d, 'planted'), 'w').write('x')\n"
        "    except OSError:\n"
        "        pass\n"
        "libc = ctypes.CDLL(None, use_errno=True)\n"
        "print(libc.shmget(0x5EC7, 4096, 0o1666))\n"  # IPC_CREAT | 0666
    )
    find = (
        "import ctypes, os\n"
        "dirs = ('/tmp', '/dev/shm', os.path.dirname(os.getcwd()))\n"
        "print([d for d in dirs if os.path.exists(os.path.join(d, 'planted'))])\n"
        "print(ctypes.CDLL(None).shmget(0x5EC7, 0, 0))\n"
    )
    try:
        assert pool.run(plant).ok
        result = pool.run(find)
        assert result.ok and result.stdout == "[]\n-1\n", result
    finally:
        pool.run(
            "import ctypes\nlib = ctypes.CDLL(None)\nlib.shmctl(lib.shmget(0x5EC7, 0, 0), 0, None)"
        )
    assert_pool_healthy(pool)


def test_huge_output_is_truncated_without_hanging(pool):
    result = pool.run("print('x' * 10**7)")
    assert result.ok
    assert len(result.stdout) < 1200 and "output truncated" in result.stdout
    assert "10,000,001 bytes" in result.stdout
    start = time.monotonic()
    result = pool.run("import sys\nwhile True:\n    sys.stderr.write('y' * 4096)", timeout_s=1.0)
    assert result.timed_out and len(result.stderr) < 1200
    assert time.monotonic() - start < 5
    assert_pool_healthy(pool)


def test_non_utf8_output_is_replaced(pool):
    result = pool.run("import sys\nsys.stdout.buffer.write(b'\\xff\\xfeok\\n')\nprint('\\udcff')")
    assert result.ok, result
    assert result.stdout.startswith("\ufffd\ufffdok\n")
    assert "\\udcff" in result.stdout  # a lone surrogate is escaped, not an error
    assert_pool_healthy(pool)


def test_oversized_code_is_rejected_before_running(pool):
    executions = pool.executions
    result = pool.run("x = 1\n" * (LIMITS.max_code_chars // 6 + 1))
    assert not result.ok and result.exit_code is None and result.duration_s == 0.0
    assert result.error.startswith("CodeTooLarge") and str(LIMITS.max_code_chars) in result.error
    assert pool.executions == executions  # never reached a worker
    assert_pool_healthy(pool)


def test_hung_processes_are_killed(pool):
    result = pool.run("import time\ntime.sleep(100)", timeout_s=1.0)
    assert result.timed_out and result.exit_code == -9
    # Closing its pipes does not make the worker stop waiting for the wall limit.
    result = pool.run(
        "import os, time\nfor fd in (1, 2, 3):\n    os.close(fd)\ntime.sleep(100)", 1.0
    )
    assert result.timed_out
    # A daemonised grandchild holding the pipes is swept when the cell ends: no waiting.
    code = (
        "import os, time\nif os.fork() == 0:\n    os.setsid()\n    time.sleep(100)\nprint('done')"
    )
    start = time.monotonic()
    result = pool.run(code, timeout_s=5.0)
    assert result.ok and result.stdout == "done\n"
    assert time.monotonic() - start < 3
    assert_pool_healthy(pool)


def test_a_stopped_worker_is_replaced(user):
    with make_pool(user, 1, LIMITS) as small:
        small.grace_s = 0.5
        (pid,) = small.worker_pids()
        os.kill(pid, 19)  # SIGSTOP: the worker hangs without dying
        result = small.run("print(1)", timeout_s=0.5)
        assert not result.ok and result.error.startswith("SandboxError")
        assert_pool_healthy(small)
        assert small.restarts == 1 and small.worker_pids() != [pid]


def test_a_worker_killed_while_idle_is_replaced(user):
    with make_pool(user, 1, LIMITS) as small:
        (pid,) = small.worker_pids()
        os.kill(pid, 9)
        time.sleep(0.1)  # let it die
        assert_pool_healthy(small)
        assert small.restarts == 1
