"""One Java virtual machine per process for the benchmarks whose simulator is a jar in its wheel.

ScienceWorld (`scienceworld`) and TextWorldExpress (`textworld-express`) ship their simulators as
Scala jars and drive them over py4j. Their Python classes start one JVM per instance (about a
second each, and a few hundred MB), but the trainer builds a fresh env for every episode of
every batch. Here the JVM of a jar is started once per process, on first use, and every env
instance creates its own simulator object inside it (the jar's `PythonInterface`, the object
the package's own Python class wraps): simulators in one JVM are independent (tested: two
interleaved episodes of two tasks both reach full score), cost ~15 ms to create, and are
freed by the JVM's garbage collector when their env is.

The JVM dies with its owner however the owner ends: it is started with py4j's
`--die-on-broken-pipe`, so it exits when the pipe to its standard input closes, which the
kernel does when the owner exits or is killed. A forked child (a Ray worker) starts its own.
`close_jvms()` ends them all (also at interpreter exit); tests call it so that one JVM serves a
test module and none outlives it.

ScienceWorld's simulator iterates over sets ordered by the JVM's identity hashes, which a JVM
draws anew for every object: the same variation loaded twice in one JVM can list same-kind
objects in another order and generate another gold path. `DETERMINISTIC_HASHES` (a constant
identity hash, `-XX:hashCode=2`) makes every load of a variation the same (measured: gold paths
and whole gold-path traces repeat; the step time stayed within this machine's noise).

A JVM that dies or stops answering is an infrastructure failure, not a model error: the call
raises `SimulatorDied` (a `ToolInfrastructureError`: the episode is retried with fresh envs or
dropped, never trained on), and the next env starts a new JVM.
"""

from __future__ import annotations

import atexit
import contextlib
import importlib
import os
import shutil
import subprocess
import threading
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, TypeVar

from agentic_rl.errors import UserInputError
from agentic_rl.tools.base import ToolInfrastructureError

T = TypeVar("T")

JAVA_HINT = (
    "a Java runtime (java 8 or newer on PATH; Debian/Ubuntu: apt-get install "
    "default-jre-headless, which `make setup` installs when run as root)"
)


DETERMINISTIC_HASHES = ("-XX:+UnlockExperimentalVMOptions", "-XX:hashCode=2")


class BenchmarkUnavailable(UserInputError, RuntimeError):
    """A benchmark's package or the Java runtime it needs is missing; says what to install."""


class SimulatorDied(ToolInfrastructureError):
    """The benchmark's JVM died or stopped answering (an infrastructure failure)."""


def require_java() -> str:
    """The `java` executable (JAVA_HOME's first, then PATH), or BenchmarkUnavailable."""
    home = os.environ.get("JAVA_HOME")
    if home and os.access(os.path.join(home, "bin", "java"), os.X_OK):
        return os.path.join(home, "bin", "java")
    found = shutil.which("java")
    if found is None:
        raise BenchmarkUnavailable(f"the ScienceWorld / TextWorldExpress envs need {JAVA_HINT}")
    return found


def import_package(module: str, extra: str) -> Any:
    """Import a benchmark's package, or say which extra installs it."""
    try:
        return importlib.import_module(module)
    except ImportError:
        raise BenchmarkUnavailable(
            f"this env needs the PyPI package of its benchmark: pip install 'agentic-rl[{extra}]'"
        ) from None


@dataclass
class _Jvm:
    gateway: Any  # py4j JavaGateway
    process: subprocess.Popen[bytes]
    pid: int  # the process that started it (a forked child starts its own)

    def alive(self) -> bool:
        return self.pid == os.getpid() and self.process.poll() is None


_jvms: dict[str, _Jvm] = {}
_lock = threading.Lock()


def _start(jar: str, javaopts: tuple[str, ...]) -> _Jvm:
    java = require_java()
    from py4j.java_gateway import GatewayParameters, JavaGateway, launch_gateway

    def launch(opts: tuple[str, ...]) -> tuple[int, subprocess.Popen[bytes]]:
        return launch_gateway(  # type: ignore[no-any-return]
            classpath=jar,
            die_on_exit=True,
            cwd=os.path.dirname(jar),
            java_path=java,
            javaopts=list(opts),
            return_proc=True,
        )

    try:
        port, process = launch(javaopts)
    except ValueError:  # the JVM refused an option and printed no port: start it without
        if not javaopts:
            raise
        warnings.warn(
            f"java refused {' '.join(javaopts)}; the simulator runs without them",
            RuntimeWarning,
            stacklevel=3,
        )
        port, process = launch(())
    gateway = JavaGateway(
        gateway_parameters=GatewayParameters(auto_field=True, port=port), java_process=process
    )
    return _Jvm(gateway, process, os.getpid())


def jvm(jar: str, javaopts: tuple[str, ...] = ()) -> Any:
    """The JVM (py4j gateway) running `jar` in this process, started on first use with
    `javaopts` (the first caller's options hold for the JVM's life)."""
    with _lock:
        current = _jvms.get(jar)
        if current is None or not current.alive():
            if current is not None and current.pid == os.getpid():
                _stop(current)
            current = _jvms[jar] = _start(jar, javaopts)
        return current.gateway


def _stop(entry: _Jvm) -> None:
    with contextlib.suppress(Exception):
        entry.gateway.shutdown()
    if entry.process.poll() is None:
        with contextlib.suppress(Exception):
            assert entry.process.stdin is not None
            entry.process.stdin.close()  # --die-on-broken-pipe: the JVM exits
        try:
            entry.process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            entry.process.kill()
            entry.process.wait()


@atexit.register
def close_jvms() -> None:
    """End every JVM this process started (also run at interpreter exit)."""
    with _lock:
        entries = [e for e in _jvms.values() if e.pid == os.getpid()]
        _jvms.clear()
    for entry in entries:
        _stop(entry)


def running_jvms() -> int:
    """How many JVMs this process holds now (tests check that `close_jvms` ends them)."""
    with _lock:
        return sum(1 for e in _jvms.values() if e.alive())


@contextlib.contextmanager
def simulator_calls(what: str) -> Iterator[None]:
    """Turn a py4j network error (the JVM died or hung up) into SimulatorDied naming `what`."""
    from py4j.protocol import Py4JNetworkError

    try:
        yield
    except Py4JNetworkError as err:
        raise SimulatorDied(f"{what}: the simulator's JVM stopped answering ({err})") from err


def call(what: str, fn: Callable[[], T]) -> T:
    """`fn()` with `simulator_calls(what)`."""
    with simulator_calls(what):
        return fn()
