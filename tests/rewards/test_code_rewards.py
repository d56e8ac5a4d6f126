"""SWE-RL patch similarity and sandboxed unit-test rewards, with hand-computed values."""

from __future__ import annotations

import pytest

from agentic_rl.rewards.code import (
    FormatError,
    apply_edits,
    code_tests_reward,
    diff_similarity,
    extract_think_solution,
    parse_search_replace,
    patch_similarity,
    run_unit_tests,
    search_replace_blocks,
    swe_rl_reward,
    unified_diff,
)
from agentic_rl.tools.sandbox.limits import SandboxLimits
from agentic_rl.tools.sandbox.pool import SandboxPool


def block(path: str, search: str, replace: str) -> str:
    return (
        f"```python\n### {path}\n<<<<<<< SEARCH\n{search}\n=======\n{replace}\n>>>>>>> REPLACE\n```"
    )


def completion(*blocks: str, think: str = "reason") -> str:
    return f"<think>{think}</think>\n<solution>\n" + "\n".join(blocks) + "\n</solution>"


FILES = {"a.py": "x = 1\n"}
ORACLE = {"a.py": "x = 2\n"}


def test_unified_diff_drops_the_file_header():
    assert unified_diff("x = 1\n", "x = 2\n") == "@@ -1 +1 @@\n-x = 1\n+x = 2"
    assert unified_diff("same\n", "same\n") == ""


def test_diff_similarity_is_difflib_ratio():
    # "abcd" vs "abce": 3 matching characters, 2 * 3 / 8
    assert diff_similarity("abcd", "abce") == pytest.approx(0.75)
    assert diff_similarity("", "abc") == 0.0


def test_swe_rl_reward_hand_computed():
    assert swe_rl_reward(completion(block("a.py", "x = 1", "x = 2")), FILES, ORACLE) == 1.0
    # "@@ -1 +1 @@\n-x = 1\n+x = 3" vs "...+x = 2": 25 characters each, 24 match: 48 / 50
    assert swe_rl_reward(
        completion(block("a.py", "x = 1", "x = 3")), FILES, ORACLE
    ) == pytest.approx(0.96)


def test_swe_rl_reward_is_a_mean_over_files_changed_by_either_side():
    files = {"a.py": "x = 1\n", "b.py": "y = 1\n"}
    extra = completion(block("a.py", "x = 1", "x = 2"), block("b.py", "y = 1", "y = 5"))
    assert swe_rl_reward(extra, files, ORACLE) == pytest.approx(0.5)  # (1 + 0) / 2
    both = {"a.py": "x = 2\n", "b.py": "y = 2\n"}
    missing = completion(block("a.py", "x = 1", "x = 2"))
    assert swe_rl_reward(missing, files, both) == pytest.approx(0.5)


@pytest.mark.parametrize(
    "text",
    [
        "<solution>" + block("a.py", "x = 1", "x = 2") + "</solution>",  # no think
        completion(block("a.py", "x = 1", "x = 2"), think="  "),  # empty think
        completion(block("a.py", "x = 1", "x = 2")) + "<solution></solution>",  # two solutions
        "<solution>s</solution><think>t</think>",  # out of order
        completion("just prose, no block"),
        completion(block("a.py", "x = 9", "x = 2")),  # SEARCH not in the file
        completion(block("a.py", "x = 1", "x = 1")),  # no-op edit
        completion(block("c.py", "x = 1", "x = 2")),  # unknown file
    ],
)
def test_format_errors_give_minus_one(text):
    assert swe_rl_reward(text, FILES, ORACLE) == -1.0


def test_parse_and_apply_keep_order_and_indentation():
    edits = parse_search_replace(
        block("m.py", "    return a", "    return b") + "\n" + block("m.py", "def g():", "def h():")
    )
    assert edits == {"m.py": [("    return a", "    return b"), ("def g():", "def h():")]}
    files = {"m.py": "def g():\n    return a\n"}
    assert apply_edits(files, edits) == {"m.py": "def h():\n    return b\n"}
    with pytest.raises(FormatError):  # SEARCH must start at a line start
        apply_edits({"m.py": "  return a\n"}, {"m.py": [("return a", "return b")]})
    assert extract_think_solution("<think> t </think><solution> s </solution>") == ("t", "s")


def test_search_replace_blocks_round_trip():
    old = "def f():\n    return 1\n\n\ndef g():\n    return 1\n"
    new = "def f():\n    return 1\n\n\ndef g():\n    return 2\n"
    blocks = search_replace_blocks("m.py", old, new)
    # "    return 1" occurs twice, so the block widens until its SEARCH text is unique
    assert apply_edits({"m.py": old}, parse_search_replace(blocks)) == {"m.py": new}
    assert patch_similarity({"m.py": old}, {"m.py": new}, {"m.py": new}) == 1.0


@pytest.fixture(scope="module")
def pool():
    with SandboxPool(1, SandboxLimits(timeout_s=2.0, memory_mb=512)) as pool:
        yield pool


SOURCE = {"pkg/util.py": "def double(x):\n    return x + x\n"}


def test_unit_tests_run_in_the_sandbox(pool):
    tests = [
        "from pkg.util import double\nassert double(2) == 4\n",
        "from pkg.util import double\nassert double(3) == 7\n",
    ]
    assert run_unit_tests(pool, SOURCE, tests) == [True, False]


def test_code_tests_reward_fraction_and_format_error(pool):
    files = {"pkg/util.py": "def double(x):\n    return x * 3\n"}
    tests = [
        "from pkg.util import double\nassert double(0) == 0\n",
        "from pkg.util import double\nassert double(2) == 4\n",
    ]
    buggy = code_tests_reward(
        pool, completion(block("pkg/util.py", "    return x", "    return x")), files, tests
    )
    assert buggy.reward == 0.0 and buggy.error  # identical SEARCH/REPLACE: format error
    fixed = completion(block("pkg/util.py", "    return x * 3", "    return x * 2"))
    outcome = code_tests_reward(pool, fixed, files, tests)
    assert (outcome.reward, outcome.passed, outcome.total) == (1.0, 2, 2)
    unchanged = code_tests_reward(
        pool,
        completion(block("pkg/util.py", "    return x * 3", "    return x * 3 + 0")),
        files,
        tests,
    )
    assert unchanged.reward == 0.5  # double(0) == 0 passes, double(2) == 4 fails


def test_exiting_early_or_hanging_does_not_pass(pool):
    test = ["from pkg.util import double\nassert double(1) == 5\n"]
    exits = {"pkg/util.py": "import sys\nsys.exit(0)\n"}
    assert run_unit_tests(pool, exits, test) == [False]
    hangs = {"pkg/util.py": "while True:\n    pass\n"}
    assert run_unit_tests(pool, hangs, test, timeout_s=0.5) == [False]
