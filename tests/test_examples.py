"""Every script in examples/ runs, as a newcomer would run it, in its cheap tiny-model mode."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLES_DIR = Path(__file__).resolve().parents[1] / "examples"

# file -> (arguments after the script, with {out} for a scratch folder; output patterns)
EXAMPLES = {
    "custom_env.py": (
        ["--out", "{out}"],
        [r"check_env: ok", r"trained 2 steps: success \d\.\d\d"],
    ),
    "byo_agent.py": (
        ["--out", "{out}", "--questions", "1", "--group-size", "2", "--max-tokens", "4"],
        [r"q0-0-0: reward -?\d\.\d{3}, \d+ tool calls", r"GRPO update on 2 episodes"],
    ),
    "byo_team.py": (
        # 4 plays of 8 tokens: the verifier's group has reward variance unless all four replies
        # decode to the same length (about 1e-4; 2 plays of 4 tokens tied about once in 10)
        ["--questions", "1", "--group-size", "4", "--max-tokens", "8", "--train-roles", "verifier"],
        [r"serving a team of roles solver, verifier", r"q0-0: solver proposed",
         r"GRPO update on 8 episodes \(both roles\), skipped False; "
         r"adapter moved: solver no, verifier yes"],
    ),
    "own_levels.py": (
        ["--out", "{out}"],
        [r"sokoban-file-train-1: shortest plan 'Right Right Right'", r"check_env: ok",
         r"refused: .*levels\.xsb: level 2's shortest plan takes 3 moves"],
    ),
    "own_task_file.py": (
        ["--out", "{out}"],
        [r"memagent rows need: question, answers, context", r"docs-1: Where does Bob live\?",
         r"refused: .*no_context\.jsonl: row 0: missing column 'context'"],
    ),
    "gymnasium_env.py": (
        [],
        [r"\[B:passenger\]|\[[RGYB]:passenger", r":destination\]", r"CliffWalking: success 1\.0",
         r"refused: Gymnasium env 'CartPole-v1' has no text rendering"],
    ),
    "own_picture.py": (
        ["--out", "{out}"],
        [r"observation with 1 picture: .*chart\.png",
         r"refused: image .*broken\.png is not a readable picture"],
    ),
}  # fmt: skip
SLOW = {
    "byo_agent.py",
    "byo_team.py",
}  # start their own policy server (also run in-process by tests/serving)


def test_every_example_is_run_here():
    assert sorted(p.name for p in EXAMPLES_DIR.glob("*.py")) == sorted(EXAMPLES)


@pytest.mark.parametrize(
    "name",
    [pytest.param(name, marks=[pytest.mark.slow] if name in SLOW else []) for name in EXAMPLES],
)
def test_example_runs(name, tmp_path):
    args, patterns = EXAMPLES[name]
    command = [sys.executable, str(EXAMPLES_DIR / name)]
    command += [arg.format(out=tmp_path / "out") for arg in args]
    result = subprocess.run(
        command, cwd=tmp_path, capture_output=True, text=True, timeout=300, check=False
    )
    output = result.stdout + result.stderr
    assert result.returncode == 0, output[-3000:]
    for pattern in patterns:
        assert re.search(pattern, result.stdout), f"{pattern!r} not in:\n{result.stdout[-3000:]}"
