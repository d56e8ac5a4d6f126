"""Search-R1 / veRL dataset loaders: parquet and JSONL rows -> Tasks, clear errors."""

import json

import pytest

from agentic_rl.envs.search.multihop import make_multihop_tasks
from agentic_rl.envs.task_files import (
    DatasetError,
    load_tasks,
    row_to_task,
    task_to_row,
    write_jsonl,
)

SEARCH_R1_ROW = {
    "id": "train_0",
    "question": "total number of death row inmates in the us?",
    "golden_answers": ["2,718"],
    "data_source": "nq",
    "prompt": [{"role": "user", "content": "Answer the given question. ... Question: total?"}],
    "ability": "fact-reasoning",
    "reward_model": {"style": "rule", "ground_truth": {"target": ["2,718"]}},
    "extra_info": {"split": "train", "index": 0},
}
VERL_ONLY_ROW = {  # no FlashRAG columns: question from the prompt, answers from ground_truth
    "data_source": "hotpotqa",
    "prompt": [
        {"role": "system", "content": "You are a search agent."},
        {"role": "user", "content": "Who wrote Bluebeard's Castle?"},
    ],
    "reward_model": {
        "style": "rule",
        "ground_truth": {"target": ["Béla Balázs", "Balázs"], "search_keys": [["Bluebeard"]]},
    },
    "extra_info": {"split": "test", "index": 7, "support_docs": ["Bluebeard's Castle is ..."]},
}


def _write_jsonl(path, rows):
    path.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    return path


def _write_parquet(path, rows):
    pa = pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq

    pq.write_table(pa.Table.from_pylist(rows), str(path))
    return path


def test_search_r1_row():
    task = row_to_task(SEARCH_R1_ROW, source="nq.parquet", index=0)
    assert task.task_id == "train_0"
    assert task.prompt == "total number of death row inmates in the us?"
    assert task.answers == ["2,718"]
    assert task.fields["data_source"] == "nq"
    assert task.fields["extra_info"] == {"split": "train", "index": 0}


def test_verl_only_row_takes_the_last_user_message_and_ground_truth_target():
    task = row_to_task(VERL_ONLY_ROW, source="hotpot.parquet", index=3)
    assert task.prompt == "Who wrote Bluebeard's Castle?"
    assert task.answers == ["Béla Balázs", "Balázs"]
    assert task.task_id == "hotpotqa-test-3"  # no id column: data_source-split-row
    assert task.fields["search_keys"] == [["Bluebeard"]]
    assert task.fields["support_docs"] == ["Bluebeard's Castle is ..."]


@pytest.mark.parametrize(
    ("truth", "answers"),
    [("Paris", ["Paris"]), (["a", "b"], ["a", "b"]), ({"target": "x"}, ["x"]), (1912, ["1912"])],
)
def test_ground_truth_shapes(truth, answers):
    row = {"question": "q?", "reward_model": {"ground_truth": truth}}
    assert row_to_task(row).answers == answers


def test_stepsearch_support_docs_become_texts():
    docs = [{"title": "Bluebeard", "paragraph_text": "An opera."}, "plain", {"contents": '"T"\nx'}]
    row = {"question": "q?", "golden_answers": ["a"], "extra_info": {"support_docs": docs}}
    assert row_to_task(row).fields["support_docs"] == ['"Bluebeard"\nAn opera.', "plain", '"T"\nx']


def test_numpy_values_from_pandas_are_accepted():
    np = pytest.importorskip("numpy")
    row = {"question": "q?", "golden_answers": np.array(["a", "b"], dtype=object)}
    assert row_to_task(row).answers == ["a", "b"]


def test_jsonl_and_parquet_give_the_same_tasks(tmp_path):
    rows = [SEARCH_R1_ROW, VERL_ONLY_ROW]
    from_jsonl = load_tasks(_write_jsonl(tmp_path / "d.jsonl", rows))
    from_parquet = load_tasks(_write_parquet(tmp_path / "d.parquet", rows))
    assert [t.task_id for t in from_jsonl] == ["train_0", "hotpotqa-test-1"]
    for a, b in zip(from_jsonl, from_parquet, strict=True):
        assert (a.task_id, a.prompt, a.answers) == (b.task_id, b.prompt, b.answers)
        assert a.fields.get("search_keys") == b.fields.get("search_keys")
    assert len(load_tasks(tmp_path / "d.jsonl", limit=1)) == 1


def test_json_list_and_blank_lines(tmp_path):
    path = tmp_path / "d.json"
    path.write_text(json.dumps([{"question": "q?", "golden_answers": ["a"]}]), encoding="utf-8")
    assert load_tasks(path)[0].answers == ["a"]
    jsonl = tmp_path / "blank.jsonl"
    jsonl.write_text('\n{"question": "q?", "golden_answers": "a"}\n\n', encoding="utf-8")
    assert load_tasks(jsonl)[0].task_id == "blank-0"


def test_missing_answer_column_names_file_row_and_column(tmp_path):
    path = _write_jsonl(tmp_path / "bad.jsonl", [SEARCH_R1_ROW, {"id": "x", "question": "q?"}])
    with pytest.raises(
        DatasetError, match=r"bad\.jsonl: row 1: missing gold answers.*golden_answers"
    ):
        load_tasks(path)


def test_missing_question_in_parquet_names_file_and_row(tmp_path):
    path = _write_parquet(tmp_path / "bad.parquet", [{"golden_answers": ["a"], "id": "0"}])
    with pytest.raises(DatasetError, match=r"bad\.parquet: row 0: missing column 'question'"):
        load_tasks(path)


@pytest.mark.parametrize(
    ("row", "message"),
    [
        ({"question": "q?", "golden_answers": []}, "non-empty list"),
        ({"question": "q?", "golden_answers": ["", None]}, "no non-empty answer"),
        ({"question": "q?", "reward_model": {"ground_truth": {"answer": "a"}}}, "'target'"),
        ({"question": "  ", "golden_answers": ["a"]}, "empty or not text"),
    ],
)
def test_bad_rows(row, message):
    with pytest.raises(DatasetError, match=message):
        row_to_task(row, source="f.jsonl", index=4)


def test_bad_files(tmp_path):
    bad_json = tmp_path / "broken.jsonl"
    bad_json.write_text('{"question": "q?", "golden_answers": ["a"]}\n{oops\n', encoding="utf-8")
    with pytest.raises(DatasetError, match=r"broken\.jsonl: line 2 is not valid JSON"):
        load_tasks(bad_json)
    corrupt = tmp_path / "corrupt.parquet"
    corrupt.write_bytes(b"not parquet at all")
    pytest.importorskip("pyarrow")
    with pytest.raises(DatasetError, match="corrupt.parquet: not a readable parquet file"):
        load_tasks(corrupt)
    empty = tmp_path / "empty.jsonl"
    empty.write_text("\n", encoding="utf-8")
    with pytest.raises(DatasetError, match="no rows"):
        load_tasks(empty)
    with pytest.raises(DatasetError, match="unknown dataset format"):
        load_tasks(_write_jsonl(tmp_path / "d.csv", [SEARCH_R1_ROW]))
    with pytest.raises(FileNotFoundError, match="nothere.jsonl"):
        load_tasks(tmp_path / "nothere.jsonl")


def test_duplicate_ids_are_rejected(tmp_path):
    path = _write_jsonl(tmp_path / "dup.jsonl", [SEARCH_R1_ROW, SEARCH_R1_ROW])
    with pytest.raises(DatasetError, match="row 1 repeats task id 'train_0' of row 0"):
        load_tasks(path)


def test_builtin_multihop_tasks_round_trip_through_search_r1_rows(tmp_path):
    tasks = make_multihop_tasks("eval", 5)
    loaded = load_tasks(write_jsonl(tasks, tmp_path / "mh.jsonl", data_source="multihop"))
    assert [t.task_id for t in loaded] == [t.task_id for t in tasks]
    assert [t.answers for t in loaded] == [t.answers for t in tasks]
    assert loaded[0].fields["search_keys"] == tasks[0].fields["search_keys"]
    assert loaded[0].fields["support_docs"] == tasks[0].fields["support_docs"]
    row = task_to_row(tasks[0])
    assert row["reward_model"]["ground_truth"]["target"] == tasks[0].answers
    rows = [task_to_row(t) for t in tasks]
    assert [t.prompt for t in load_tasks(_write_parquet(tmp_path / "mh.parquet", rows))] == [
        t.prompt for t in tasks
    ]
