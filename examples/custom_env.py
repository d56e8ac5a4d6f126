"""A custom tool-using environment in ~60 lines, validated with `check_env` and trained.

The agent must look a word up in a tiny dictionary tool and answer with its definition's first
word. Run it (a few tiny steps on a randomly initialised model, then the real bundled model):

    .venv/bin/python examples/custom_env.py            # smoke: tiny model, seconds
    .venv/bin/python examples/custom_env.py --bundled  # SmolLM2-135M, minutes

The same pattern (a `ToolEnv` subclass with `score_answer` and a scripted `expert_turn`) is how the
built-in `calculator` and `search_qa` environments are written.
"""

from __future__ import annotations

import argparse
import random

from agentic_rl.envs.base import ToolEnv
from agentic_rl.envs.check import check_env
from agentic_rl.envs.registry import register_env
from agentic_rl.rewards.qa import exact_match
from agentic_rl.tools.base import FunctionTool, ToolError
from agentic_rl.types import Task

WORDS = {"quell": "calm a disturbance", "brisk": "quick and energetic", "gaunt": "lean and haggard"}


def lookup(word: str) -> str:
    if word.strip().lower() not in WORDS:
        raise ToolError(f"no entry for {word!r}")  # becomes an error observation, not a crash
    return WORDS[word.strip().lower()]


class DictionaryEnv(ToolEnv):
    def __init__(self, format_penalty: float = 0.1, tool_timeout_s: float = 5.0) -> None:
        schema = {
            "type": "object",
            "properties": {"word": {"type": "string"}},
            "required": ["word"],
        }
        tool = FunctionTool(lookup, "lookup", "Look a word up.", schema, result_tag="definition")
        super().__init__([tool], format_penalty=format_penalty, tool_timeout_s=tool_timeout_s)

    def score_answer(self, text: str) -> float:
        assert self.task is not None
        return exact_match(text, self.task.answers)

    def expert_turn(self) -> str:
        assert self.task is not None
        if self.num_tool_calls() == 0:
            return f"<lookup>{self.task.fields['word']}</lookup>"
        return f"<answer>{self.task.answers[0]}</answer>"


def make_tasks(split: str, n: int, seed: int = 0) -> list[Task]:
    rng = random.Random(f"{split}-{seed}")
    words = sorted(WORDS)
    tasks = []
    for i in range(n):
        word = rng.choice(words)
        prompt = f"What is the first word of the definition of '{word}'?"
        tasks.append(Task(f"{split}-{i}", prompt, [WORDS[word].split()[0]], {"word": word}))
    return tasks


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--bundled", action="store_true", help="train the bundled model")
    parser.add_argument("--out", default="runs", help="folder of the run's outputs")
    args = parser.parse_args()

    check_env(DictionaryEnv(), make_tasks("eval", 5))
    print("check_env: ok")

    # Registering the env makes its name usable as env.name in this process. An installed
    # package does the same through an `agentic_rl.envs` entry point (see the README).
    register_env("dictionary", DictionaryEnv, make_tasks)

    from agentic_rl.config.load import load_config
    from agentic_rl.train.loop import train

    overrides = [
        "env.name=dictionary",
        "trainer.run_name=dictionary",
        f"trainer.out_dir={args.out}",
    ]
    if not args.bundled:
        overrides.append("model.name=tiny")
    summary = train(load_config("calculator_grpo", overrides, smoke=True))
    print(f"trained {summary['steps']} steps: success {summary['after']['success']:.2f}")


if __name__ == "__main__":
    main()
