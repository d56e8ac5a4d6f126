"""agentic_rl.algos must stay pure tensor math: only torch and the standard-library basics."""

from __future__ import annotations

import ast
from pathlib import Path

ALGOS_DIR = Path(__file__).resolve().parents[2] / "src" / "agentic_rl" / "algos"
ALLOWED_ROOTS = {"torch", "math", "typing", "dataclasses", "__future__", "collections", "difflib"}
ALLOWED_PACKAGE = "agentic_rl.algos"
FORBIDDEN_CALLS = {"open", "print", "input", "exec", "eval", "__import__"}


def _allowed(module: str) -> bool:
    return module.split(".")[0] in ALLOWED_ROOTS or (
        module == ALLOWED_PACKAGE or module.startswith(ALLOWED_PACKAGE + ".")
    )


def offending_imports(source: str, filename: str = "<src>") -> list[str]:
    """Every import (at any depth, not only module level) outside the allowed set."""
    bad = []
    for node in ast.walk(ast.parse(source, filename)):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names if not _allowed(a.name)]
            bad += [f"{filename}:{node.lineno}: import {name}" for name in names]
        elif isinstance(node, ast.ImportFrom):
            # level 1 ("from . import x", "from .masked import y") stays inside algos.
            if node.level == 1 or (node.level == 0 and _allowed(node.module or "")):
                continue
            module = "." * node.level + (node.module or "")
            names = ", ".join(a.name for a in node.names)
            bad.append(f"{filename}:{node.lineno}: from {module} import {names}")
        elif isinstance(node, ast.Call) and getattr(node.func, "id", None) in FORBIDDEN_CALLS:
            bad.append(f"{filename}:{node.lineno}: call to {node.func.id}()")
    return bad


def test_algos_sources_exist():
    assert {"advantages.py", "losses.py"} <= {p.name for p in ALGOS_DIR.glob("*.py")}


def test_algos_imports_only_torch_and_stdlib_basics():
    bad = []
    for path in sorted(ALGOS_DIR.glob("*.py")):
        bad += offending_imports(path.read_text(), path.name)
    assert not bad, "agentic_rl.algos must be pure tensor math; offending:\n" + "\n".join(bad)


def test_checker_flags_forbidden_imports():
    source = "\n".join(
        [
            "import torch, numpy as np",
            "from transformers import AutoModel",
            "from agentic_rl.rollout import x",
            "from agentic_rl.algos.masked import masked_mean",
            "from .losses import aggregate_loss",
            "from .. import config",
            "import os.path",
            "def f():",
            "    import json",
            "    return open('x')",
        ]
    )
    bad = offending_imports(source)
    assert [line.split(": ", 1)[1] for line in bad] == [
        "import numpy",
        "from transformers import AutoModel",
        "from agentic_rl.rollout import x",
        "from .. import config",
        "import os.path",
        "import json",
        "call to open()",
    ]
