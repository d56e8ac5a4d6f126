"""Adversarial code against the sandbox pool: each attack is contained, reported in the result,
and the pool serves a correct normal run right after it (`assert_pool_healthy`).

Limits are small (1-2 s, 256 MB, 16 processes) so the whole file runs in seconds.
"""

from __future__ import annotations

import os
import socket
import time
import uuid
from pathlib import Path

import pytest

from agentic_rl.tools.sandbox.limits import SandboxLimits
from agentic_rl.tools.sandbox.pool import SandboxPool

LIMITS = SandboxLimits(timeout_s=2.0, memory_mb=256, nproc=16, max_output_chars=1000)
PROJECT_DIR = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def pool():
    with SandboxPool(2, LIMITS) as pool:
        yield pool


def sandbox_processes(pool: SandboxPool) -> int:
    """Processes running as one of the pool's sandbox uids right now."""
    uids = set(pool.sandbox_uids())
    count = 0
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/status") as f:
                uid_line = next(line for line in f if line.startswith("Uid:"))
        except (OSError, StopIteration):
            continue
        if int(uid_line.split()[1]) in uids:
            count += 1
    return count


def assert_pool_healthy(pool: SandboxPool) -> None:
    result = pool.run("x = 6\nx * 7", timeout_s=10)
    assert result.ok, result
    assert result.stdout == "42\n"
    if pool.isolation["uid_drop"]:
        assert sandbox_processes(pool) == 0  # nothing left running after the attack


def needs(pool: SandboxPool, *features: str) -> None:
    missing = [f for f in features if not pool.isolation.get(f)]
    if missing:
        pytest.skip(f"not enforceable here: {', '.join(missing)} ({pool.isolation})")


def test_infinite_loop_hits_the_wall_time_limit(pool):
    start = time.monotonic()
    result = pool.run("while True:\n    pass", timeout_s=1.0)
    assert result.timed_out and not result.ok
    # A busy loop spends CPU as fast as wall time, so on an idle machine the 1 s CPU limit can
    # fire first; either limit stopping it is correct (the CPU limit has its own test below).
    assert "time limit of 1 s" in result.error
    assert time.monotonic() - start < 5
    assert_pool_healthy(pool)


def test_infinite_loop_hits_the_cpu_limit():
    # The wall limit is far away: only RLIMIT_CPU (SIGXCPU after 1 s of CPU) can stop it.
    with SandboxPool(1, SandboxLimits(cpu_s=1, timeout_s=20, max_timeout_s=20)) as pool:
        result = pool.run("while True:\n    pass", timeout_s=20)
        assert result.timed_out and not result.ok
        assert "CPU time limit of 1 s" in result.error
        assert result.duration_s < 15
        assert_pool_healthy(pool)


def test_fork_bomb_is_contained_by_nproc(pool):
    needs(pool, "uid_drop")
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
    result = pool.run("chunks = []\nwhile True:\n    chunks.append(bytearray(10**6))")
    assert not result.ok and result.error == "MemoryError"
    assert_pool_healthy(pool)


def test_cannot_write_outside_the_work_dir(pool):
    needs(pool, "readonly_fs")
    name = f"agentic_rl_escape_{uuid.uuid4().hex}"
    targets = [f"/tmp/{name}", str(PROJECT_DIR / name), f"/dev/shm/../{name}"]
    try:
        for target in targets:
            result = pool.run(f"open({target!r}, 'w').write('pwned')")
            assert not result.ok, target
            assert "Read-only file system" in result.error or "Permission" in result.error
            assert not os.path.exists(target)
    finally:
        for target in targets:
            if os.path.exists(target):
                os.unlink(target)
    # Inside its own directory it may write and read back; the next run starts empty.
    result = pool.run("open('a.txt', 'w').write('hi')\nopen('a.txt').read()")
    assert result.ok and result.stdout == "'hi'\n"
    result = pool.run("import os\nsorted(os.listdir('.'))")
    assert result.stdout == "[]\n"
    assert_pool_healthy(pool)


def test_parent_environment_is_not_visible():
    os.environ["AGENTIC_SANDBOX_SECRET"] = "s3cr3t-value"
    try:
        with SandboxPool(1, LIMITS) as pool:  # started while the secret is set
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
                f"print(read('/proc/{os.getpid()}/environ'))\n"
            )
            result = pool.run(code)
            assert result.ok, result
            assert "s3cr3t-value" not in result.stdout
            assert "AGENTIC_SANDBOX_SECRET" not in result.stdout
            assert "PATH" in result.stdout  # a minimal environment, not none at all
            assert_pool_healthy(pool)
    finally:
        del os.environ["AGENTIC_SANDBOX_SECRET"]


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
        expected = "Network is unreachable" if pool.isolation["netns"] else "network access"
        assert expected in result.error
        with pytest.raises(BlockingIOError):
            server.accept()  # nobody connected
    finally:
        server.close()
    assert_pool_healthy(pool)


def test_killing_the_parent_or_its_group_is_contained(pool):
    for code in [
        "import os, signal\nos.kill(os.getppid(), signal.SIGKILL)",
        "import os, signal\nos.killpg(os.getpgid(os.getppid()), signal.SIGKILL)",
        "import os, signal\nos.kill(-1, signal.SIGKILL)",
        "import os, signal\nos.killpg(0, signal.SIGKILL)",  # its own group: kills only itself
    ]:
        result = pool.run(code)
        assert not result.ok or "kill(-1" in code, (code, result)
        assert_pool_healthy(pool)
    if pool.isolation["uid_drop"]:
        assert pool.restarts == 0  # the workers were out of reach, not merely replaced


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


def test_a_stopped_worker_is_replaced(pool):
    with SandboxPool(1, LIMITS) as small:
        small.grace_s = 0.5
        (pid,) = small.worker_pids()
        os.kill(pid, 19)  # SIGSTOP: the worker hangs without dying
        result = small.run("print(1)", timeout_s=0.5)
        assert not result.ok and result.error.startswith("SandboxError")
        assert_pool_healthy(small)
        assert small.restarts == 1 and small.worker_pids() != [pid]


def test_a_worker_killed_while_idle_is_replaced():
    with SandboxPool(1, LIMITS) as small:
        (pid,) = small.worker_pids()
        os.kill(pid, 9)
        time.sleep(0.1)  # let it die
        assert_pool_healthy(small)
        assert small.restarts == 1
