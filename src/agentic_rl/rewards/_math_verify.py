"""The symbolic half of math answer checking: a verifier subprocess and what runs inside it.

`rewards/math.py` decides easy cases in process (exact numbers); anything symbolic comes here.
sympy (or math-verify) can hang for good on inputs like 9^{9^{9^9}} and a hung thread cannot be
stopped, so the comparison runs in a child process that answers one JSON line per request and
is killed at the timeout (the comparison then counts as wrong); a fresh one starts on the next
call. Inside the child, `serve_verifier` compares with math-verify where installed, else with
sympy through the small LaTeX converter `latex_to_sympy_text`.
"""

from __future__ import annotations

import atexit
import contextlib
import importlib.util
import json
import os
import re
import select
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any


def braced_content(text: str, start: int) -> str | None:
    """Content of the brace group opening at text[start] ('{'), nested braces included."""
    depth = 0
    for i in range(start, len(text)):
        if text[i] == "{":
            depth += 1
        elif text[i] == "}":
            depth -= 1
            if depth == 0:
                return text[start + 1 : i]
    return None  # unbalanced: a truncated completion


# -- the parent side: a long-lived verifier subprocess -------------------------------------


class Verifier:
    """A long-lived subprocess that answers {"pred", "gold"} -> {"equal"} one line at a time.

    Killed and forgotten when a check outlives its timeout (sympy cannot be interrupted
    reliably, not even by signals, inside a huge integer power); restarted lazily.
    """

    def __init__(self, backend: str = "auto", start_timeout_s: float = 120.0) -> None:
        if backend not in ("auto", "math_verify", "sympy"):
            raise ValueError(f"unknown verifier backend {backend!r}; use auto, math_verify, sympy")
        if backend == "auto":
            backend = "math_verify" if importlib.util.find_spec("math_verify") else "sympy"
        self.backend = backend
        self.start_timeout_s = start_timeout_s
        self.timeouts = 0
        self._proc: subprocess.Popen | None = None
        self._owner = os.getpid()
        self._lock = threading.Lock()

    def _start(self) -> subprocess.Popen:
        src = str(Path(__file__).resolve().parents[2])  # .../src, so the child can import us
        boot = (
            f"import sys; sys.path.insert(0, {src!r}); "
            f"from agentic_rl.rewards._math_verify import serve_verifier; serve_verifier({self.backend!r})"
        )
        proc = subprocess.Popen(
            [sys.executable, "-c", boot],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        if self._read_line(proc, time.monotonic() + self.start_timeout_s) != {"ready": True}:
            proc.kill()
            raise RuntimeError("the math verifier subprocess did not start")
        return proc

    @staticmethod
    def _read_line(proc: subprocess.Popen, deadline: float) -> Any:
        remaining = deadline - time.monotonic()
        if remaining <= 0 or not select.select([proc.stdout], [], [], remaining)[0]:
            return None
        line = proc.stdout.readline()
        return json.loads(line) if line else None

    def check(self, pred: str, gold: str, timeout_s: float) -> bool | None:
        """True / False, or None when the check timed out or the subprocess failed."""
        with self._lock:
            if self._owner != os.getpid():  # a forked copy must not share the parent's pipes
                self._proc, self._owner = None, os.getpid()
            try:
                if self._proc is None or self._proc.poll() is not None:
                    self._proc = self._start()
                proc = self._proc
                proc.stdin.write((json.dumps({"pred": pred, "gold": gold}) + "\n").encode())
                proc.stdin.flush()
                reply = self._read_line(proc, time.monotonic() + timeout_s)
            except (OSError, ValueError, RuntimeError):
                reply = None
            if not isinstance(reply, dict):
                self.timeouts += 1
                self.close_locked()
                return None
            return bool(reply.get("equal"))

    def close_locked(self) -> None:
        if self._proc is not None and self._owner == os.getpid():
            self._proc.kill()
            self._proc.wait()
        self._proc = None

    def close(self) -> None:
        with self._lock:
            self.close_locked()


_verifiers: dict[str, Verifier] = {}
_verifiers_lock = threading.Lock()


def get_verifier(backend: str = "auto") -> Verifier:
    """The process-wide verifier for `backend` (started on first use, closed at exit)."""
    with _verifiers_lock:
        if backend not in _verifiers:
            _verifiers[backend] = Verifier(backend)
        return _verifiers[backend]


@atexit.register
def _close_verifiers() -> None:
    for verifier in list(_verifiers.values()):
        verifier.close()


# -- inside the verifier subprocess ---------------------------------------------------------

_LATEX_WORDS = {
    "cdot": "*", "times": "*", "div": "/", "pi": " pi ", "infty": " oo ", "ln": " log ",
    "log": " log ", "sin": " sin ", "cos": " cos ", "tan": " tan ", "exp": " exp ",
}  # fmt: skip
_SYMPY_NAMES = ("sqrt", "log", "sin", "cos", "tan", "exp", "pi", "oo", "factorial")
_SAFE_CHARS = re.compile(r"[0-9A-Za-z+\-*/^().,!\s]*")
_IDENTIFIER = re.compile(r"[A-Za-z_]\w*")


def _argument(text: str, i: int) -> tuple[str, int] | None:
    """The LaTeX argument at text[i] ({group} or one character) and the index after it."""
    while i < len(text) and text[i] == " ":
        i += 1
    if i >= len(text):
        return None
    if text[i] != "{":
        return text[i], i + 1
    inner = braced_content(text, i)
    return None if inner is None else (inner, i + len(inner) + 2)


def latex_to_sympy_text(text: str) -> str | None:
    """A small LaTeX -> sympy-syntax converter (\\frac, \\sqrt[n]{}, \\cdot, \\pi, braces);
    None for anything it does not know, which then counts as not equal."""
    out, i = [], 0
    while i < len(text):
        if text.startswith("\\frac", i):
            num = _argument(text, i + 5)
            den = num and _argument(text, num[1])
            parts = [latex_to_sympy_text(a[0]) for a in (num, den) if a]
            if len(parts) != 2 or None in parts:
                return None
            out.append(f"(({parts[0]})/({parts[1]}))")
            i = den[1]
        elif text.startswith("\\sqrt", i):
            j, index = i + 5, None
            if text.startswith("[", j) and "]" in text[j:]:
                index, j = text[j + 1 : text.index("]", j)], text.index("]", j) + 1
            arg = _argument(text, j)
            inner = latex_to_sympy_text(arg[0]) if arg else None
            root = latex_to_sympy_text(index) if index is not None else "2"
            if inner is None or root is None:
                return None
            out.append(f"(({inner})**(1/({root})))")
            i = arg[1]
        elif text[i] == "\\":
            match = re.match(r"\\([a-zA-Z]+)", text[i:])
            if match is None or match.group(1) not in _LATEX_WORDS:
                return None
            out.append(_LATEX_WORDS[match.group(1)])
            i += len(match.group(0))
        else:
            out.append({"{": "(", "}": ")"}.get(text[i], text[i]))
            i += 1
    return "".join(out)


def _safe_for_sympy(text: str) -> bool:
    # parse_expr evaluates Python: allow only arithmetic, one-letter symbols and a few functions,
    # so nothing like exec(chr(..)) or attribute access can get through.
    if not _SAFE_CHARS.fullmatch(text) or re.search(r"\.(?!\d)", text):
        return False
    return all(len(n) == 1 or n in _SYMPY_NAMES for n in _IDENTIFIER.findall(text))


def _to_sympy(text: str) -> Any:
    import sympy
    from sympy.parsing.sympy_parser import (
        convert_xor,
        implicit_multiplication_application,
        parse_expr,
        standard_transformations,
    )

    converted = latex_to_sympy_text(text)
    if converted is None or not _safe_for_sympy(converted):
        return None
    names = [*_SYMPY_NAMES, "Integer", "Float", "Rational", "Symbol", "Function", "E", "I"]
    global_dict = {"__builtins__": {}, **{name: getattr(sympy, name) for name in names}}
    transformations = (*standard_transformations, implicit_multiplication_application, convert_xor)
    return parse_expr(
        converted,
        local_dict={"e": sympy.E},
        global_dict=global_dict,
        transformations=transformations,
    )


def _sympy_equal(pred: str, gold: str) -> bool:
    import sympy

    a, b = _to_sympy(pred), _to_sympy(gold)
    if a is None or b is None:
        return False
    if a == b:
        return True
    try:
        if sympy.simplify(a - b) == 0:
            return True
        return bool(abs(complex(sympy.N(a - b))) <= 1e-9 * max(1.0, abs(complex(sympy.N(b)))))
    except (TypeError, ValueError, AttributeError):
        return False  # free symbols left, or tuples: not numerically comparable


def _math_verify_equal(pred: str, gold: str) -> bool:
    from math_verify import parse, verify

    # Timeouts off: math-verify's own use signal.alarm, which cannot stop a huge integer power;
    # the parent kills this whole process instead.
    gold_parsed = parse(f"${gold}$", parsing_timeout=None)
    pred_parsed = parse(f"${pred}$", parsing_timeout=None)
    if not gold_parsed or not pred_parsed:
        return False
    return bool(verify(gold_parsed, pred_parsed, timeout_seconds=None))


def serve_verifier(backend: str) -> None:
    """Main loop of the verifier subprocess: one JSON request per line in, one answer out."""
    import logging
    import resource

    with contextlib.suppress(ValueError, OSError):  # MemoryError rather than eating the machine
        resource.setrlimit(resource.RLIMIT_AS, (4 << 30, resource.getrlimit(resource.RLIMIT_AS)[1]))
    logging.getLogger("math_verify").setLevel(logging.ERROR)
    equal = _math_verify_equal if backend == "math_verify" else _sympy_equal
    equal("1", "1")  # import and warm up before saying ready: start-up is not check time
    print(json.dumps({"ready": True}), flush=True)
    for line in sys.stdin:
        try:
            request = json.loads(line)
            result = equal(str(request["pred"]), str(request["gold"]))
        except Exception:  # unparsable answers are simply not equal
            result = False
        print(json.dumps({"equal": bool(result)}), flush=True)
