"""SandboxPool behaviour on ordinary code: notebook semantics, errors, limits, concurrency."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import tempfile
import threading

import pytest

from agentic_rl.tools.sandbox.limits import ExecutionResult, SandboxLimits
from agentic_rl.tools.sandbox.pool import SandboxPool
from agentic_rl.tools.sandbox.worker_process import (
    ALLOW_UNISOLATED_ENV,
    SANDBOX_DIR,
    SandboxUnavailableError,
)

LIMITS = SandboxLimits(timeout_s=5.0, memory_mb=512, max_output_chars=200)


@pytest.fixture(scope="module")
def pool():
    with SandboxPool(2, LIMITS) as pool:
        yield pool


def test_bare_last_expression_is_printed(pool):
    assert pool.run("1 + 1").stdout == "2\n"
    assert pool.run("x = [1, 2]\nx").stdout == "[1, 2]\n"
    assert pool.run("'a'").stdout == "'a'\n"  # repr, as in a notebook
    assert pool.run("None").stdout == ""
    assert pool.run("print('hi')").stdout == "hi\n"  # print() returns None: printed once
    assert pool.run("x = 3").stdout == ""
    assert pool.run("for i in range(2):\n    i").stdout == ""  # only a top-level expression


def test_error_gives_the_last_traceback_line(pool):
    result = pool.run("print('before')\n1 / 0")
    assert not result.ok and result.exit_code == 1 and not result.timed_out
    assert result.stdout == "before\n"
    assert result.error == "ZeroDivisionError: division by zero"
    assert 'File "<code>", line 2' in result.stderr and "1 / 0" in result.stderr
    assert "_runner" not in result.stderr  # the sandbox's own frames are hidden
    result = pool.run("def f(:\n    pass")
    assert result.error == "SyntaxError: invalid syntax"
    result = pool.run("undefined_name")
    assert result.error == "NameError: name 'undefined_name' is not defined"


def test_system_exit(pool):
    assert pool.run("import sys\nprint(1)\nsys.exit(0)").ok
    result = pool.run("import sys\nsys.exit(3)")
    assert not result.ok and result.error == "SystemExit: 3"
    result = pool.run("import sys\nsys.exit('bad input')")
    assert not result.ok and "bad input" in result.stderr


def test_stdout_and_stderr_are_captured_and_truncated(pool):
    result = pool.run("import sys\nprint('out')\n_ = sys.stderr.write('err\\n')")
    assert result.ok and result.stdout == "out\n" and result.stderr == "err\n"
    result = pool.run("print('é' * 500)")
    assert result.stdout.startswith("é" * 200)
    assert "output truncated" in result.stdout and "1,001 bytes" in result.stdout


def test_libraries_and_preloaded_modules_work(pool):
    result = pool.run("import fractions, math\nfractions.Fraction(1, 3) + math.floor(2.5)")
    assert result.ok and result.stdout == "Fraction(7, 3)\n"
    result = pool.run("import sympy\nsympy.factor('x**2 - 1')", timeout_s=20)
    assert result.ok, result
    assert result.stdout == "(x - 1)*(x + 1)\n"


def test_random_differs_between_runs(pool):
    # Children fork from one warm worker: random must be reseeded in each.
    outputs = {pool.run("import random\nrandom.random()").stdout for _ in range(3)}
    assert len(outputs) == 3


def test_multiprocessing_works_inside(pool):
    code = (
        "import multiprocessing as mp\n"
        "def square(x):\n    return x * x\n"
        "with mp.Pool(2) as p:\n    print(p.map(square, [1, 2, 3]))"
    )
    result = pool.run(code, timeout_s=20)
    if not pool.isolation["private_shm"]:
        pytest.skip("no private /dev/shm here")
    assert result.ok, result
    assert result.stdout == "[1, 4, 9]\n"


def test_run_many_is_concurrent_and_ordered(pool):
    results = pool.run_many([f"import time\ntime.sleep(0.3)\n{i}" for i in range(4)])
    assert [r.stdout for r in results] == [f"{i}\n" for i in range(4)]
    assert all(isinstance(r, ExecutionResult) for r in results)


def test_threads_share_the_pool_safely(pool):
    results: list[str] = []
    lock = threading.Lock()

    def work(i: int) -> None:
        out = pool.run(f"{i} * 2").stdout
        with lock:
            results.append(out)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(results) == sorted(f"{i * 2}\n" for i in range(8))


def test_bad_arguments_are_rejected(pool):
    assert pool.run(123).error.startswith("TypeError")  # type: ignore[arg-type]
    assert pool.run("1", timeout_s=0).error.startswith("ValueError")
    assert pool.run("1", timeout_s=LIMITS.max_timeout_s + 1).error.startswith("ValueError")
    assert pool.run("1", timeout_s=float("nan")).error.startswith("ValueError")
    with pytest.raises(ValueError):
        SandboxLimits(memory_mb=0)
    with pytest.raises(ValueError):
        SandboxPool(0)


def test_isolation_is_reported(pool):
    iso = pool.isolation
    for key in ("root", "netns", "mountns", "readonly_fs", "uid_drop", "socket_block"):
        assert key in iso
    assert iso["socket_block"] == (not iso["netns"])
    assert pool.health()["status"] == "ok"
    if iso["uid_drop"]:  # one unprivileged uid per worker: NPROC and kill(-1) stay per worker
        uids = pool.sandbox_uids()
        assert len(set(uids)) == pool.size and min(uids) >= LIMITS.uid_base


def test_no_isolation_is_refused_with_instructions(monkeypatch):
    monkeypatch.delenv(ALLOW_UNISOLATED_ENV, raising=False)
    with pytest.raises(SandboxUnavailableError) as info:
        SandboxPool(1, SandboxLimits(namespaces=False))
    message = str(info.value)
    assert "apt-get install bubblewrap" in message and "allow_unisolated" in message
    assert "unprivileged_userns_clone" in message
    # The switch can also come from the environment (envs built from a config).
    monkeypatch.setenv(ALLOW_UNISOLATED_ENV, "1")
    with SandboxPool(1, SandboxLimits(namespaces=False)) as weak:
        assert weak.isolation["mode"] == "none" and weak.run("1 + 1").stdout == "2\n"


def test_fallback_without_namespaces_blocks_sockets():
    # Forces what runs where the kernel refuses namespaces: sockets are blocked in Python.
    with SandboxPool(1, SandboxLimits(namespaces=False, allow_unisolated=True)) as weak:
        assert not weak.isolation["netns"] and weak.isolation["socket_block"]
        server = socket.socket()
        server.bind(("127.0.0.1", 0))
        server.listen()
        port = server.getsockname()[1]
        try:
            code = f"import socket\nsocket.create_connection(('127.0.0.1', {port}))"
            result = weak.run(code)
            assert not result.ok
            assert result.error.startswith("PermissionError") and "network access" in result.error
        finally:
            server.close()
        assert weak.run("2 + 2").stdout == "4\n"


def test_fresh_interpreter_mode_runs_the_same_code():
    with SandboxPool(1, LIMITS, fresh_interpreter=True) as fresh:
        result = fresh.run("import os\nprint(sorted(os.listdir('.')))\n1 / 0")
        assert result.stdout == "[]\n"  # the code file was removed before running
        assert result.error == "ZeroDivisionError: division by zero"
        assert fresh.run("bytearray(10**10)").error == "MemoryError"


def test_closed_pool_refuses_work():
    pool = SandboxPool(1, LIMITS)
    pool.close()
    pool.close()  # idempotent
    with pytest.raises(RuntimeError):
        pool.run("1")


def test_worker_modules_need_only_the_standard_library():
    # The worker imports these by path, outside the package: a stray project import would
    # fail there (or bloat every forked child), so check them in a bare interpreter.
    code = f"import sys; sys.path.insert(0, {SANDBOX_DIR!r}); import _worker, _runner, _isolation"
    subprocess.run([sys.executable, "-I", "-c", code], check=True, timeout=60)


@pytest.mark.parametrize("bwrap", [True, False], ids=["bwrap", "root namespaces"])
def test_a_private_tmpdir_does_not_break_the_sandbox(tmp_path, monkeypatch, bwrap):
    # A 0700 TMPDIR (common on shared machines): the sandbox uid could not reach directories
    # made in it. The code must still have a working directory and tempfile.
    if not bwrap and os.geteuid() != 0:
        pytest.skip("root's own namespaces need root")
    private = tmp_path / "private"
    private.mkdir(mode=0o700)
    monkeypatch.setenv("TMPDIR", str(private))
    monkeypatch.setattr(tempfile, "tempdir", None)  # tempfile caches the directory
    assert tempfile.gettempdir() == str(private)
    with SandboxPool(1, SandboxLimits(bwrap=bwrap)) as pool:
        code = (
            "import os, tempfile\n"
            "open('here.txt', 'w').write('x')\n"
            "fd, name = tempfile.mkstemp()\n"
            "os.write(fd, b'y')\n"
            "print(os.path.dirname(name) == os.getcwd(), open('here.txt').read())"
        )
        result = pool.run(code)
        assert result.ok, result
        assert result.stdout == "True x\n"
        assert not list(private.iterdir())  # nothing of the sandbox's is in the private dir
