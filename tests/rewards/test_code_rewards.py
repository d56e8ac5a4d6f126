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


# -- the reward cannot be gamed (issue 21): each trick below passed before the tests ran in a
# process of their own; the candidate's code now runs in another one and answers plain values.

ALWAYS_EQUAL = (
    "class Anything:\n"
    "    def __eq__(self, other):\n"
    "        return True\n"
    "    __hash__ = object.__hash__\n"
    "def double(x):\n"
    "    return Anything()\n"
)
TEST_DOUBLE = ["from pkg.util import double\nassert double(3) == 6\nassert double(4) == 8\n"]


def test_an_object_equal_to_everything_does_not_pass(pool):
    assert run_unit_tests(pool, {"pkg/util.py": ALWAYS_EQUAL}, TEST_DOUBLE) == [False]
    # Nor one that subclasses a plain type to lie about equality: it arrives as its base value.
    int_liar = "class Liar(int):\n    def __eq__(self, other):\n        return True\n"
    int_liar += "def double(x):\n    return Liar(0)\n"
    assert run_unit_tests(pool, {"pkg/util.py": int_liar}, TEST_DOUBLE) == [False]


def test_reading_the_marker_and_exiting_early_does_not_pass(pool):
    # Print whatever looks like the marker from the test's source (linecache, the frames that
    # import this module, any string in memory), then leave with exit code 0.
    steal = (
        "import gc, linecache, os, re, sys\n"
        "found = set()\n"
        "for text in [''.join(v[2]) for v in linecache.cache.values()]:\n"
        "    found.update(re.findall(r'TESTS-PASSED-[0-9a-f]+', text))\n"
        "frame = sys._getframe()\n"
        "while frame is not None:\n"
        "    found.update(re.findall(r'TESTS-PASSED-[0-9a-f]+', str(frame.f_globals)))\n"
        "    frame = frame.f_back\n"
        "for obj in gc.get_objects():\n"
        "    if isinstance(obj, str) and 'TESTS-PASSED-' in obj:\n"
        "        found.update(re.findall(r'TESTS-PASSED-[0-9a-f]+', obj))\n"
        "for marker in found:\n"
        "    print(marker)\n"
        "sys.stdout.flush()\n"
        "os._exit(0)\n"
    )
    assert run_unit_tests(pool, {"pkg/util.py": steal}, TEST_DOUBLE) == [False]


def test_writing_into_the_test_process_does_not_pass(pool):
    # The test process's output, memory and life are out of the candidate's reach.
    attacks = [
        # its stdout through /proc, then an early clean exit
        "import os\nfd = os.open(f'/proc/{os.getppid()}/fd/1', os.O_WRONLY)\n"
        "os.write(fd, b'TESTS-PASSED-0\\n')\nos._exit(0)\n",
        # stop it from ever failing: kill it (no marker can follow)
        "import os, signal\nos.kill(os.getppid(), signal.SIGKILL)\n",
        # a clean exit in the middle of a call
        "import sys\ndef double(x):\n    sys.exit(0)\n",
        "import os\ndef double(x):\n    os._exit(0)\n",
    ]
    for attack in attacks:
        assert run_unit_tests(pool, {"pkg/util.py": attack}, TEST_DOUBLE) == [False], attack


def test_honest_code_still_passes_through_the_process_boundary(pool):
    files = {
        "lib/core.py": (
            "import collections\n"
            "class ParseError(ValueError):\n    pass\n"
            "def parse(text):\n"
            "    if not text:\n        raise ParseError('empty')\n"
            "    return collections.Counter(text.split())\n"
            "def sort_by(items, key):\n    return sorted(items, key=key)\n"
            "def append_one(values):\n    values.append(1)\n"
            "class Box:\n"
            "    def __init__(self, v):\n        self.v = v\n"
            "    def get(self):\n        return [self.v, (self.v,)]\n"
            "    def __len__(self):\n        return 3\n"
            "LIMIT = 10\n"
        ),
    }
    tests = [
        "from lib.core import parse\nassert parse('a b a') == {'a': 2, 'b': 1}\n",
        "from lib import core\ntry:\n    core.parse('')\nexcept core.ParseError as e:\n"
        "    assert str(e) == 'empty' and isinstance(e, ValueError)\nelse:\n"
        "    raise AssertionError('no error')\n",
        "from lib.core import sort_by\nassert sort_by([3, 1, 2], key=lambda x: -x) == [3, 2, 1]\n",
        "from lib.core import append_one\nv = []\nappend_one(v)\nassert v == [1]\n",
        "import lib.core as c\nb = c.Box(2)\nassert b.get() == [2, (2,)] and b.v == 2\n"
        "assert len(b) == 3 and isinstance(b, c.Box) and c.LIMIT == 10\n",
        "from lib.core import parse\nassert parse('x') == {'x': 2}\n",  # an honest failure
    ]
    assert run_unit_tests(pool, files, tests) == [True] * 5 + [False]
