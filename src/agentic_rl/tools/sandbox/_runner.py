"""Run one piece of model code like a notebook cell, inside the sandbox child.

Standard library only (imported by the worker as a top-level module). The outcome goes to the
status descriptor as one JSON object {"ok", "error"}; stdout and stderr are the child's fds 1
and 2, which the worker drains. A bare last expression has its repr printed, as in a notebook.
"""

from __future__ import annotations

import ast
import builtins
import contextlib
import io
import json
import linecache
import os
import sys
import traceback
import types

CODE_FILENAME = "<code>"
STATUS_FD = 3
FRESH_CODE_FILE = ".sandbox_code.py"


def error_line(exc: BaseException) -> str:
    """The last line of the traceback, e.g. "ZeroDivisionError: division by zero"."""
    return traceback.format_exception_only(type(exc), exc)[-1].strip()


def _user_traceback(exc: BaseException) -> str:
    # Start at the first frame of the user's code: the runner's own frames are noise to a model.
    tb = exc.__traceback__
    while tb is not None and tb.tb_frame.f_code.co_filename != CODE_FILENAME:
        tb = tb.tb_next
    return "".join(traceback.format_exception(type(exc), exc, tb))


def _fresh_main_namespace() -> dict:
    # A real __main__ module, so pickling and multiprocessing see the user's definitions.
    main = types.ModuleType("__main__")
    main.__builtins__ = builtins  # type: ignore[attr-defined]
    sys.modules["__main__"] = main
    return main.__dict__


def run_cell(code: str) -> tuple[bool, str]:
    """Execute `code`; print the repr of a bare last expression. Returns (ok, error line)."""
    # Registering the source lets tracebacks show the offending line, as for a file.
    linecache.cache[CODE_FILENAME] = (len(code), None, code.splitlines(True), CODE_FILENAME)
    namespace = _fresh_main_namespace()
    try:
        tree = ast.parse(code, CODE_FILENAME, "exec")
        last = None
        if tree.body and isinstance(tree.body[-1], ast.Expr):
            last = ast.Expression(tree.body.pop().value)
        exec(compile(tree, CODE_FILENAME, "exec"), namespace)
        if last is not None:
            value = eval(compile(last, CODE_FILENAME, "eval"), namespace)
            if value is not None:
                sys.stdout.write(repr(value) + "\n")
    except SystemExit as exc:
        if exc.code is None or exc.code == 0:
            return True, ""
        if not isinstance(exc.code, int):  # sys.exit("message") prints it, as Python does
            sys.stderr.write(f"{exc.code}\n")
        return False, error_line(exc)
    except BaseException as exc:  # the model's errors are its observation, whatever they are
        sys.stderr.write(_user_traceback(exc))
        return False, error_line(exc)
    return True, ""


def setup_streams() -> None:
    """Fresh text streams on fds 0-2 (the worker's own objects may hold stale buffers).
    backslashreplace keeps lone surrogates printable instead of raising."""

    def writer(fd: int) -> io.TextIOWrapper:
        raw = io.BufferedWriter(io.FileIO(fd, "w", closefd=False))
        return io.TextIOWrapper(raw, encoding="utf-8", errors="backslashreplace")

    sys.stdout = sys.__stdout__ = writer(1)
    sys.stderr = sys.__stderr__ = writer(2)
    sys.stdin = sys.__stdin__ = io.TextIOWrapper(io.FileIO(0, "r", closefd=False))
    sys.argv = [""]


def finish(ok: bool, error: str, owner_pid: int) -> None:
    """Report and exit without running atexit hooks or flushing the worker's objects."""
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(BaseException):
            stream.flush()
    if os.getpid() == owner_pid:  # a fork made by the user's code must not report twice
        with contextlib.suppress(OSError):
            os.write(STATUS_FD, json.dumps({"ok": ok, "error": error}).encode())
    os._exit(0 if ok else 1)


def run_child(code: str) -> None:
    """Entry point in a forked child whose limits and uid are already set. Never returns."""
    owner = os.getpid()
    setup_streams()
    ok, error = run_cell(code)
    finish(ok, error, owner)


def main_fresh() -> None:
    """Entry point for the fresh-interpreter mode (`python -I -c ...`, the benchmark baseline):
    the code waits in a file in the working directory, removed before it runs."""
    with open(FRESH_CODE_FILE, encoding="utf-8") as f:
        code = f.read()
    os.unlink(FRESH_CODE_FILE)
    run_child(code)
