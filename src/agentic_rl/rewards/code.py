"""Code rewards: SWE-RL patch similarity and execution-based unit-test rewards.

SWE-RL (Wei et al. 2025, "SWE-RL: Advancing LLM Reasoning via Reinforcement Learning on Open
Software Evolution"). The completion is `<think>...</think><solution>...</solution>`, the
solution a list of SEARCH/REPLACE edits::

    ```python
    ### path/to/file.py
    <<<<<<< SEARCH
    exact lines of the current file
    =======
    their replacement
    >>>>>>> REPLACE
    ```

The edits are applied to the buggy files; for every file changed by the prediction or the
oracle, the unified diffs (old -> predicted, old -> oracle) are compared:

    reward = (1 / |F|) * sum_{f in F} SequenceMatcher(None, pred_diff_f, oracle_diff_f,
                                                      autojunk=False).ratio()

with F = files changed by either; a file changed by only one side scores 0. Format errors
(each of the four tags not exactly once, empty thinking, no edit block, a SEARCH text not in
the file, SEARCH == REPLACE) give -1. No code is executed.

Qwen3-Coder-style execution reward: the fraction of unit tests that pass when each test runs
in the sandbox against the patched files (`code_tests_reward`). The patched code and the test
run in separate processes and the asserts compare plain values in the test's process
(`_test_harness.py`), so the reward cannot be won by tricking the asserts.
"""

from __future__ import annotations

import difflib
import functools
import re
import secrets
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from agentic_rl.tools.sandbox.client import CodeRunner

FORMAT_ERROR_REWARD = -1.0
_TAGS = ("<think>", "</think>", "<solution>", "</solution>")
_BLOCK = re.compile(
    r"```[^\n]*\n### (?P<path>[^\n]+)\n<<<<<<< SEARCH\n(?P<search>.*?)\n?=======\n"
    r"(?P<replace>.*?)\n?>>>>>>> REPLACE\n```",
    re.DOTALL,
)


class FormatError(ValueError):
    """The completion does not follow the think / solution / SEARCH-REPLACE format."""


def extract_think_solution(text: str) -> tuple[str, str]:
    """(thinking, solution) of `<think>...</think><solution>...</solution>`.

    Raises FormatError unless each tag occurs exactly once, in that order, with non-empty
    thinking (the SWE-RL format check).
    """
    for tag in _TAGS:
        if text.count(tag) != 1:
            raise FormatError(f"{tag} must occur exactly once, found {text.count(tag)}")
    positions = [text.index(tag) for tag in _TAGS]
    if positions != sorted(positions):
        raise FormatError("tags out of order: expected <think></think><solution></solution>")
    thinking = text[positions[0] + len(_TAGS[0]) : positions[1]].strip()
    solution = text[positions[2] + len(_TAGS[2]) : positions[3]].strip()
    if not thinking:
        raise FormatError("empty <think> block")
    return thinking, solution


def parse_search_replace(solution: str) -> dict[str, list[tuple[str, str]]]:
    """path -> [(search, replace), ...] in the order written. Raises FormatError if none."""
    edits: dict[str, list[tuple[str, str]]] = {}
    for match in _BLOCK.finditer(solution):
        edits.setdefault(match.group("path").strip(), []).append(
            (match.group("search"), match.group("replace"))
        )
    if not edits:
        raise FormatError("no well-formed SEARCH/REPLACE block")
    return edits


def apply_edits(
    files: Mapping[str, str], edits: Mapping[str, Sequence[tuple[str, str]]]
) -> dict[str, str]:
    """New content of every edited file. Each SEARCH must match whole lines of the current
    content (checked after a leading newline, so indentation counts); its first occurrence is
    replaced. Raises FormatError for an unknown file, a SEARCH not found, or SEARCH == REPLACE.
    """
    new_files: dict[str, str] = {}
    for path, pairs in edits.items():
        if path not in files:
            raise FormatError(f"unknown file {path!r}")
        content = "\n" + files[path]
        for search, replace in pairs:
            if search == replace:
                raise FormatError("SEARCH and REPLACE are identical")
            if not search.strip():
                raise FormatError("empty SEARCH block")
            needle = "\n" + search
            if needle not in content:
                raise FormatError(f"SEARCH text not found in {path}: {search[:80]!r}")
            content = content.replace(needle, "\n" + replace, 1)
        new_files[path] = content[1:]
    return new_files


def unified_diff(old: str, new: str, context: int = 3) -> str:
    """The hunks of `difflib.unified_diff(old, new)` without the two file-name header lines
    (so the path never counts in a similarity); "" when nothing changed."""
    lines = list(
        difflib.unified_diff(old.splitlines(), new.splitlines(), "a", "b", lineterm="", n=context)
    )
    return "\n".join(lines[2:])


def diff_similarity(pred_diff: str, oracle_diff: str) -> float:
    """difflib ratio 2M / (|a| + |b|) of two diffs; 0 when either is empty."""
    if not pred_diff or not oracle_diff:
        return 0.0
    return difflib.SequenceMatcher(None, pred_diff, oracle_diff, autojunk=False).ratio()


def patch_similarity(
    files: Mapping[str, str], pred: Mapping[str, str], oracle: Mapping[str, str]
) -> float:
    """Mean over files changed by either side of the similarity of their unified diffs."""
    pred_diffs = {p: d for p, c in pred.items() if (d := unified_diff(files.get(p, ""), c))}
    oracle_diffs = {p: d for p, c in oracle.items() if (d := unified_diff(files.get(p, ""), c))}
    paths = sorted(set(pred_diffs) | set(oracle_diffs))
    if not paths:
        return 0.0
    scores = [diff_similarity(pred_diffs.get(p, ""), oracle_diffs.get(p, "")) for p in paths]
    return sum(scores) / len(scores)


def predicted_files(completion: str, files: Mapping[str, str]) -> dict[str, str]:
    """Files after the completion's edits. Raises FormatError (see the module docstring)."""
    _, solution = extract_think_solution(completion)
    return apply_edits(files, parse_search_replace(solution))


def swe_rl_reward(completion: str, files: Mapping[str, str], oracle: Mapping[str, str]) -> float:
    """SWE-RL reward in [0, 1], or -1 on a format error (see the module docstring)."""
    try:
        pred = predicted_files(completion, files)
    except FormatError:
        return FORMAT_ERROR_REWARD
    return patch_similarity(files, pred, oracle)


def search_replace_blocks(path: str, old: str, new: str, context: int = 1) -> str:
    """SEARCH/REPLACE blocks turning `old` into `new` (the scripted expert's edit).

    One block per group of changed lines with `context` lines around it, widened until the
    SEARCH text occurs once in `old`; `apply_edits` on the result gives `new` back.
    """
    old_lines, new_lines = old.splitlines(), new.splitlines()
    matcher = difflib.SequenceMatcher(None, old_lines, new_lines, autojunk=False)
    blocks = []
    for group in matcher.get_grouped_opcodes(context):
        i1, i2, j1, j2 = group[0][1], group[-1][2], group[0][3], group[-1][4]
        while i1 == i2 or ("\n" + old).count("\n" + "\n".join(old_lines[i1:i2])) != 1:
            if i1 == 0 and i2 == len(old_lines):
                break
            if i1 > 0:
                i1, j1 = i1 - 1, j1 - 1
            if i2 < len(old_lines):
                i2, j2 = i2 + 1, j2 + 1
        search, replace = "\n".join(old_lines[i1:i2]), "\n".join(new_lines[j1:j2])
        blocks.append(
            f"```python\n### {path}\n<<<<<<< SEARCH\n{search}\n=======\n{replace}\n"
            ">>>>>>> REPLACE\n```"
        )
    return "\n".join(blocks)


# -- execution-based rewards ---------------------------------------------------------------


@functools.lru_cache(maxsize=1)
def _harness_source() -> str:
    return (Path(__file__).parent / "_test_harness.py").read_text(encoding="utf-8")


def unit_test_program(files: Mapping[str, str], test: str, marker: str) -> str:
    """The sandbox program for one test: the harness (`_test_harness.py`) writes `files` into
    the working directory, imports them in a separate candidate process, runs `test` (top-level
    asserts that import from those files) in its own process against proxies that answer with
    plain values, and prints `marker` only if the test code got to its end."""
    source = _harness_source()
    return (
        f"_HARNESS = {source!r}\n"
        "exec(compile(_HARNESS, '<harness>', 'exec'))\n"
        f"t_main(_HARNESS, {dict(files)!r}, {test!r}, {marker!r})\n"
    )


def run_unit_tests(
    runner: CodeRunner,
    files: Mapping[str, str],
    tests: Sequence[str],
    timeout_s: float = 5.0,
    max_workers: int = 4,
) -> list[bool]:
    """Whether each test passes: one sandbox execution per test, run concurrently.

    The candidate's code runs in its own process, apart from the test (see _test_harness.py):
    the asserts compare plain values in a process the candidate cannot reach, and only that
    process can print the fresh random marker a pass needs, so an object whose `__eq__` is
    always True, reading the marker, `print(marker); os._exit(0)` or `sys.exit(0)` in the
    patched files all fail.
    """
    marker = f"TESTS-PASSED-{secrets.token_hex(16)}"

    def one(test: str) -> bool:
        result = runner.run(unit_test_program(files, test, marker), timeout_s)
        return result.ok and result.stdout.rstrip("\n").endswith(marker)

    if not tests:
        return []
    with ThreadPoolExecutor(max_workers=min(max_workers, len(tests))) as executor:
        return list(executor.map(one, tests))


@dataclass
class UnitTestOutcome:
    """`reward` = passed / total; `error` is set (and reward is `format_error_reward`) when the
    completion could not be applied."""

    reward: float
    passed: int = 0
    total: int = 0
    error: str = ""
    results: list[bool] = field(default_factory=list)


def code_tests_reward(
    runner: CodeRunner,
    completion: str,
    files: Mapping[str, str],
    tests: Sequence[str],
    timeout_s: float = 5.0,
    format_error_reward: float = 0.0,
) -> UnitTestOutcome:
    """Qwen3-Coder-style reward: fraction of `tests` passing on the completion's patched files.

    reward = #passed / #tests; `format_error_reward` when the edits cannot be parsed or applied.
    """
    try:
        new_files = {**files, **predicted_files(completion, files)}
    except FormatError as err:
        return UnitTestOutcome(reward=format_error_reward, total=len(tests), error=str(err))
    results = run_unit_tests(runner, new_files, tests, timeout_s)
    passed = sum(results)
    return UnitTestOutcome(
        reward=passed / len(tests) if tests else 0.0,
        passed=passed,
        total=len(tests),
        results=results,
    )
