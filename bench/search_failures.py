"""Why the default recipe's held-out questions fail: each failed episode of a run's evaluation,
read from its trajectory file, sorted into what went wrong.

The default recipe (`search_qa_grpo`) asks about people of a generated corpus, so each failure
has one of a few causes the corpus can tell apart:

- `no_search`: the episode answered (or stopped) without a search;
- `query_misspelled`: a search named someone else (a misspelt name) and the person's own
  document never came back;
- `not_retrieved`: the policy searched the right name, BM25's top k did not return the
  person's document, and the policy answered without searching again (the scripted expert
  searches once more with the attribute's words);
- `wrong_answer`: the person's document was shown and the answer was still wrong (a copy
  error, the wrong attribute, a neighbour's fact); `doc_form` says which of the corpus's
  sentence forms the person's document uses.

    .venv/bin/python bench/search_failures.py runs/search_qa_grpo            # the last evaluation
    .venv/bin/python bench/search_failures.py RUN_DIR --splits eval_warm_start eval --out F.json

Run it on a run made with `trainer.log_trajectories=-1` (every evaluation episode is kept). The
JSON also keeps where the run's time went (each evaluation, the RL steps), read from its
metrics.
"""

from __future__ import annotations

import argparse
import collections
import json
import re
import sys
from pathlib import Path
from typing import Any

from agentic_rl.retrieval.qa_corpus import DEFAULT_NUM_ENTITIES, build_world
from agentic_rl.rewards.qa import normalize_answer
from agentic_rl.train.trajectory_log import read_trajectories

TASK_ID = re.compile(r"^sqa-(?:train|eval)-(?P<doc>\d+)-(?P<attribute>[a-z_]+)-\d+$")
TITLE = re.compile(r'\(Title: "([^"]+)"\)')
# The corpus's sentence forms for a person (retrieval/qa_corpus.py `_person_text`).
DOC_FORMS = {
    "born_first": re.compile(r"^Born in \d+ in "),
    "year_in_brackets": re.compile(r"^[^(]+\(\d+\) is "),
    "who_was_born": re.compile(r" who was born in "),
}


def doc_form(text: str) -> str:
    body = text.split("\n", 1)[-1]
    return next((name for name, pattern in DOC_FORMS.items() if pattern.search(body)), "other")


def searches(record: dict[str, Any]) -> tuple[list[str], list[set[str]], str | None]:
    """An episode's search queries, the document titles each search showed, and its answer."""
    pieces = record["pieces"]
    queries: list[str] = []
    shown: list[set[str]] = []
    answer = None
    for turn in record["turns"]:
        action = turn.get("action") or {}
        if action.get("kind") == "tool":
            queries.append(str((action.get("arguments") or {}).get("query", "")))
            start, end = turn.get("obs") or (0, 0)
            shown.append(set(TITLE.findall("".join(pieces[start:end]))))
        elif action.get("kind") == "answer":
            answer = action.get("text")
    return queries, shown, answer


def task_of(record: dict[str, Any]) -> re.Match[str]:
    """The person's document id and the attribute asked, from the episode's task id."""
    match = TASK_ID.match(record["task_id"])
    if match is None:
        raise ValueError(f"not a search_qa task id: {record['task_id']!r}")
    return match


def search_behaviour(records: list[dict[str, Any]], people: dict[str, Any]) -> dict[str, Any]:
    """How the policy searched: episodes by number of searches, and those whose first search
    did not show the person's document, how many searched again until it did (`recovered`)
    and how many of those then answered right."""
    counts: collections.Counter[int] = collections.Counter()
    missed = recovered = recovered_right = 0
    for record in records:
        name = people[task_of(record)["doc"]].name
        _, shown, _ = searches(record)
        counts[len(shown)] += 1
        if shown and name not in shown[0]:
            missed += 1
            if any(name in later for later in shown[1:]):
                recovered += 1
                recovered_right += bool(record["success"])
    return {
        "episodes_by_searches": {str(n): counts[n] for n in sorted(counts)},
        "first_search_missed": missed,
        "recovered": recovered,
        "recovered_and_right": recovered_right,
    }


def classify(record: dict[str, Any], people: dict[str, Any], docs: dict[str, str]) -> dict:
    match = task_of(record)
    person = people[match["doc"]]
    queries, shown_by_search, answer = searches(record)
    shown = set().union(*shown_by_search)
    if not queries:
        cause = "no_search"
    elif person.name in shown:
        cause = "wrong_answer"
    elif any(normalize_answer(q) == normalize_answer(person.name) for q in queries):
        cause = "not_retrieved"
    else:
        cause = "query_misspelled"
    return {
        "task_id": record["task_id"],
        "cause": cause,
        "attribute": match["attribute"],
        "doc_form": doc_form(docs[person.doc_id]),
        "queries": queries,
        "answer": answer,
        "gold": person.attribute(match["attribute"]),
    }


def failures(run_dir: Path, split: str) -> dict[str, Any]:
    config = json.loads((run_dir / "config.json").read_text())
    env = config["env"]
    options = env.get("options") or {}
    world = build_world(
        options.get("num_entities", DEFAULT_NUM_ENTITIES), options.get("corpus_seed", 0)
    )
    people = {p.doc_id: p for p in world.people}
    docs = {d["id"]: d["contents"] for d in world.corpus}
    records = [r for r in read_trajectories(run_dir) if r["split"] == split]
    if not records:
        raise SystemExit(f"{run_dir}: no {split!r} episodes in its trajectory file")
    step = max(r["step"] for r in records)
    records = [r for r in records if r["step"] == step]
    failed = [classify(r, people, docs) for r in records if not r["success"]]
    forms = collections.Counter(
        doc_form(docs[match["doc"]]) for r in records if (match := TASK_ID.match(r["task_id"]))
    )
    return {
        "run": str(run_dir),
        "split": split,
        "step": step,
        "episodes": len(records),
        "failed": len(failed),
        "by_cause": dict(collections.Counter(f["cause"] for f in failed).most_common()),
        "wrong_answer_by_doc_form": dict(
            collections.Counter(f["doc_form"] for f in failed if f["cause"] == "wrong_answer")
        ),
        "episodes_by_doc_form": dict(forms),
        "search_behaviour": search_behaviour(records, people),
        "failures": failed,
    }


def time_spent(run_dir: Path) -> dict[str, float]:
    """Seconds of each evaluation, of all RL steps and of the run from its first evaluation's
    start to its last record (model loading excluded), from the run's metrics.jsonl."""
    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    spent: dict[str, float] = collections.defaultdict(float)
    for record in records:
        for key, value in record.items():
            if key.endswith("/seconds") or key == "train/step_seconds":
                spent[key] += value
    first = records[0]
    start = first["time"] - sum(v for k, v in first.items() if k.endswith("/seconds"))
    spent["run"] = records[-1]["time"] - start
    return {key: round(value, 1) for key, value in spent.items()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("run_dir", type=Path)
    parser.add_argument(
        "--splits", nargs="+", default=["eval"], help="eval, eval_warm_start, eval_before"
    )
    parser.add_argument("--out", type=Path, help="also write the result as JSON here")
    parser.add_argument("--train-command", default="", help="the run's command, kept in --out")
    args = parser.parse_args(argv)
    results = {split: failures(args.run_dir, split) for split in args.splits}
    for result in results.values():
        summary = {k: result[k] for k in ("split", "step", "episodes", "failed", "by_cause")}
        print(json.dumps(summary), file=sys.stdout)
    if args.out:
        command = " ".join([".venv/bin/python bench/search_failures.py", *sys.argv[1:]])
        record = {
            "command": command,
            "train_command": args.train_command,
            "seconds": time_spent(args.run_dir),
            "splits": results,
        }
        args.out.write_text(json.dumps(record, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
