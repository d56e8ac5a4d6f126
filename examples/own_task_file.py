"""Your own task file for a recipe that reads tasks: MemAgent's {context, question, answers}
JSONL. The env names the columns every row needs (`task_fields`); a row without one is refused
at load, naming the file and the row.

    python examples/own_task_file.py --out /tmp/tasks
    agentic-rl train memagent env.train_file=/tmp/tasks/docs.jsonl \\
        env.eval_file=/tmp/tasks/docs.jsonl
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from agentic_rl.envs.registry import task_fields
from agentic_rl.envs.task_files import DatasetError, load_tasks

DOC = "Ada likes tea. Ada was born in Paris. Bob has lived in Rome since 2001."
ROWS = [
    {"question": "Where was Ada born?", "answers": ["Paris"], "context": DOC},
    {"question": "Where does Bob live?", "answers": ["Rome"], "context": DOC},
]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", default="tasks", help="folder for the task files")
    out = Path(parser.parse_args().out)
    out.mkdir(parents=True, exist_ok=True)
    good, bad = out / "docs.jsonl", out / "no_context.jsonl"
    good.write_text("".join(json.dumps(row) + "\n" for row in ROWS))
    bad.write_text(json.dumps({"question": "Who?", "answers": ["Bob"]}) + "\n")

    needed = task_fields("memagent")
    print(f"memagent rows need: question, answers, {', '.join(needed)}")
    for task in load_tasks(good, required=needed, env="memagent"):
        print(f"{task.task_id}: {task.prompt} -> {task.answers}")
    try:
        load_tasks(bad, required=needed, env="memagent")
    except DatasetError as err:
        print(f"refused: {err}")


if __name__ == "__main__":
    main()
