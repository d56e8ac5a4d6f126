"""Load QA datasets in Search-R1 / veRL layout (parquet or JSONL) into `Task`s.

Search-R1's preprocessing (scripts/data_process/nq_search.py) keeps the FlashRAG columns and adds
veRL's: one row is

    {"id": "train_0", "question": "...", "golden_answers": ["..."],
     "data_source": "nq", "prompt": [{"role": "user", "content": "<instructions> ... question"}],
     "ability": "fact-reasoning",
     "reward_model": {"style": "rule", "ground_truth": {"target": ["..."]}},
     "extra_info": {"split": "train", "index": 0}}

Plain JSONL rows need only a question and answers. The question is taken from `question`, else
from the last user message of `prompt` (veRL-only files); the gold answers from
`golden_answers`, else `reward_model.ground_truth` (`{"target": [...]}`, a list, or a string),
else `answers`. `Task.prompt` is the bare question: the env adds its own instructions.
StepSearch's extras (`ground_truth.search_keys`, `extra_info.support_docs`) land in
`Task.fields`, with `data_source` and `extra_info`, and so do the columns the env needs
(`required`: its class's `task_fields`, e.g. MemAgent's `context`), which every row must have.
Every error names the file and the row (0-based, blank JSONL lines skipped).

Parquet needs pyarrow (imported only when a parquet file is read).
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from agentic_rl.errors import UserInputError
from agentic_rl.types import Task

ANSWER_COLUMNS = ("golden_answers", "reward_model.ground_truth", "answers")
QUESTION_COLUMNS = ("question", "prompt")


class DatasetError(UserInputError, ValueError):
    """A dataset file or row that cannot be turned into tasks; the message says where."""


def _plain(value: Any) -> Any:
    """numpy arrays / scalars (pandas, datasets) -> Python lists / scalars, recursively."""
    if hasattr(value, "tolist") and not isinstance(value, str | bytes):
        value = value.tolist()
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    return value


def _answer_list(value: Any, where: str, column: str) -> list[str]:
    if isinstance(value, Mapping):
        if "target" not in value:
            raise DatasetError(f"{where}: column '{column}' has no 'target' key")
        value = value["target"]
    if isinstance(value, str | int | float) and not isinstance(value, bool):
        value = [value]
    if not isinstance(value, list) or not value:
        raise DatasetError(f"{where}: column '{column}' must hold a non-empty list of answers")
    answers = [str(a) for a in value if a is not None and str(a).strip()]
    if not answers:
        raise DatasetError(f"{where}: column '{column}' holds no non-empty answer")
    return answers


def _question(row: Mapping[str, Any], where: str) -> str:
    question = row.get("question")
    if isinstance(question, str) and question.strip():
        return question.strip()
    prompt = row.get("prompt")
    if isinstance(prompt, str) and prompt.strip():
        return prompt.strip()
    if isinstance(prompt, list):
        users = [m for m in prompt if isinstance(m, Mapping) and m.get("role") == "user"]
        if users and isinstance(users[-1].get("content"), str) and users[-1]["content"].strip():
            return users[-1]["content"].strip()
    if question is not None or prompt is not None:
        raise DatasetError(f"{where}: 'question' / 'prompt' is empty or not text")
    raise DatasetError(
        f"{where}: missing column 'question' (or a veRL 'prompt' message list); "
        f"row has: {', '.join(sorted(row)) or 'nothing'}"
    )


def _ground_truth(row: Mapping[str, Any]) -> Any:
    reward_model = row.get("reward_model")
    return reward_model.get("ground_truth") if isinstance(reward_model, Mapping) else None


def _answers(row: Mapping[str, Any], where: str) -> list[str]:
    """Gold answers from the first of `ANSWER_COLUMNS` that the row has."""
    if row.get("golden_answers") is not None:
        return _answer_list(row["golden_answers"], where, "golden_answers")
    truth = _ground_truth(row)
    if truth is not None:
        return _answer_list(truth, where, "reward_model.ground_truth")
    if row.get("answers") is not None:
        return _answer_list(row["answers"], where, "answers")
    raise DatasetError(
        f"{where}: missing gold answers: need column 'golden_answers' or "
        f"'reward_model.ground_truth' ({{\"target\": [...]}}); row has: "
        f"{', '.join(sorted(row)) or 'nothing'}"
    )


def _support_docs(value: Any) -> list[str]:
    """StepSearch support documents as texts: strings stay, `{"title", "paragraph_text"}` (or
    Search-R1 `{"contents"}`) dicts become `"Title"\ntext`."""
    docs = []
    for item in value if isinstance(value, list) else [value]:
        if isinstance(item, Mapping):
            if "contents" in item:
                docs.append(str(item["contents"]))
            else:
                text = str(item.get("paragraph_text") or item.get("text") or "")
                title = item.get("title")
                docs.append(f'"{title}"\n{text}' if title else text)
        elif item is not None:
            docs.append(str(item))
    return [doc for doc in docs if doc.strip()]


def _required_fields(
    row: Mapping[str, Any], required: Sequence[str], where: str, env: str
) -> dict[str, Any]:
    """The columns an env reads from every task (`required`), checked present: a row without
    one would load and fail mid-episode."""
    missing = [name for name in required if row.get(name) is None]
    if missing:
        needs = f"env {env} needs" if env else "the env needs"
        raise DatasetError(
            f"{where}: missing column '{missing[0]}', which {needs} in every row (it reads "
            f"{', '.join(repr(r) for r in required)}); row has: {', '.join(sorted(row)) or 'nothing'}"
        )
    return {name: row[name] for name in required}


def row_to_task(
    row: Mapping[str, Any],
    *,
    source: str = "row",
    index: int = 0,
    required: Sequence[str] = (),
    env: str = "",
) -> Task:
    """One dataset row -> Task. `source` and `index` only name the row in errors and ids;
    `required` columns (the env's `task_fields`; `env` names it in errors) must be present and
    land in `Task.fields`."""
    where = f"{source}: row {index}"
    if not isinstance(row, Mapping):
        raise DatasetError(f"{where}: expected an object, got {type(row).__name__}")
    row = _plain(row)
    needed = _required_fields(row, required, where, env)
    question = _question(row, where)
    answers = _answers(row, where)
    truth = _ground_truth(row)
    truth = truth if isinstance(truth, Mapping) else {}
    extra = row.get("extra_info") if isinstance(row.get("extra_info"), Mapping) else {}
    data_source = row.get("data_source")
    fields: dict[str, Any] = {"row": index}
    if data_source is not None:
        fields["data_source"] = data_source
    if extra:
        fields["extra_info"] = extra
    if truth.get("search_keys"):
        fields["search_keys"] = truth["search_keys"]
    if extra.get("support_docs"):
        fields["support_docs"] = _support_docs(extra["support_docs"])
    if isinstance(row.get("context"), str):  # long-document QA (MemAgent): the document
        fields["context"] = row["context"]
    fields.update(needed)
    task_id = row.get("id")
    if task_id is None or str(task_id) == "":
        split = extra.get("split", "")
        task_id = "-".join(
            str(p) for p in (data_source or Path(source).stem, split, index) if p != ""
        )
    return Task(task_id=str(task_id), prompt=question, answers=answers, fields=fields)


def iter_jsonl_rows(path: str | Path) -> Iterator[tuple[int, dict[str, Any]]]:
    """(0-based row index, row) for each non-blank line; bad JSON names the file and line."""
    path = Path(path)
    with path.open(encoding="utf-8") as handle:
        row = 0
        for lineno, line in enumerate(handle, start=1):
            if not line.strip():
                continue
            try:
                value = json.loads(line)
            except json.JSONDecodeError as exc:
                raise DatasetError(f"{path}: line {lineno} is not valid JSON ({exc.msg})") from None
            if not isinstance(value, dict):
                raise DatasetError(f"{path}: line {lineno} is not a JSON object")
            yield row, value
            row += 1


def read_parquet_rows(path: str | Path) -> list[dict[str, Any]]:
    """All rows of a parquet file as plain dicts (needs pyarrow)."""
    try:
        import pyarrow.parquet as pq
    except ImportError:  # pragma: no cover - depends on the environment
        raise ImportError(
            f"reading {path} needs pyarrow: pip install pyarrow (or the 'data' extra)"
        ) from None
    try:
        return pq.read_table(str(path)).to_pylist()
    except Exception as exc:  # pyarrow raises several types for corrupt files
        raise DatasetError(
            f"{path}: not a readable parquet file ({type(exc).__name__}: {exc})"
        ) from None


def tasks_from_rows(
    rows: Iterable[tuple[int, Mapping[str, Any]]],
    source: str,
    required: Sequence[str] = (),
    env: str = "",
) -> list[Task]:
    """Tasks from (index, row) pairs; duplicate task ids are an error (they key groups)."""
    tasks: list[Task] = []
    seen: dict[str, int] = {}
    for index, row in rows:
        task = row_to_task(row, source=source, index=index, required=required, env=env)
        if task.task_id in seen:
            first = seen[task.task_id]
            raise DatasetError(
                f"{source}: row {index} repeats task id {task.task_id!r} of row {first}"
            )
        seen[task.task_id] = index
        tasks.append(task)
    return tasks


def load_tasks(
    path: str | Path, limit: int | None = None, required: Sequence[str] = (), env: str = ""
) -> list[Task]:
    """Tasks from a `.parquet`, `.jsonl` or `.json` (a list of rows) file; first `limit` rows,
    each with the `required` columns (the `task_fields` of `env`) or a DatasetError naming it."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"dataset file {path} not found")
    suffix = path.suffix.lower()
    if suffix == ".parquet":
        rows: Iterable[tuple[int, Mapping[str, Any]]] = enumerate(read_parquet_rows(path))
    elif suffix == ".jsonl":
        rows = iter_jsonl_rows(path)
    elif suffix == ".json":
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except json.JSONDecodeError as exc:
            raise DatasetError(f"{path}: not valid JSON ({exc.msg}, line {exc.lineno})") from None
        if not isinstance(data, list):
            raise DatasetError(f"{path}: a .json dataset must be a list of rows")
        rows = enumerate(data)
    else:
        raise DatasetError(f"{path}: unknown dataset format {suffix!r} (.parquet, .jsonl, .json)")
    if limit is not None:
        rows = itertools.islice(rows, max(limit, 0))
    tasks = tasks_from_rows(rows, str(path), required, env)
    if not tasks:
        raise DatasetError(f"{path}: no rows")
    return tasks


def task_to_row(task: Task, data_source: str = "agentic_rl") -> dict[str, Any]:
    """A Task as a Search-R1 / veRL row (the inverse of `row_to_task` for its columns)."""
    truth: dict[str, Any] = {"target": list(task.answers)}
    if task.fields.get("search_keys"):
        truth["search_keys"] = task.fields["search_keys"]
    extra = {"index": task.fields.get("row", 0)}
    if task.fields.get("support_docs"):
        extra["support_docs"] = task.fields["support_docs"]
    return {
        "id": task.task_id,
        "question": task.prompt,
        "golden_answers": list(task.answers),
        "data_source": data_source,
        "prompt": [{"role": "user", "content": task.prompt}],
        "ability": "fact-reasoning",
        "reward_model": {"style": "rule", "ground_truth": truth},
        "extra_info": extra,
    }


def write_jsonl(tasks: Iterable[Task], path: str | Path, data_source: str = "agentic_rl") -> Path:
    """Write tasks as Search-R1 rows, one JSON object per line."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", encoding="utf-8") as handle:
        for task in tasks:
            handle.write(json.dumps(task_to_row(task, data_source), ensure_ascii=False) + "\n")
    return path
