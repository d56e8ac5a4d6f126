"""bench/search_failures.py: each cause of a failed default-recipe episode, on hand-made records
of real held-out people, and the time a run spent, from hand-written metrics."""

from __future__ import annotations

import gzip
import importlib.util
import json
from pathlib import Path

import pytest

from agentic_rl.retrieval.qa_corpus import DEFAULT_NUM_ENTITIES, build_world, split_people

SPEC = importlib.util.spec_from_file_location(
    "search_failures", Path(__file__).resolve().parent.parent / "bench" / "search_failures.py"
)
assert SPEC is not None and SPEC.loader is not None
bench = importlib.util.module_from_spec(SPEC)
SPEC.loader.exec_module(bench)


def episode(step: int, split: str, task_id: str, success: bool, turns: list[tuple]) -> dict:
    """A trajectory record: `turns` of (action, shown text or None); pieces one per character."""
    pieces: list[str] = list("PROMPT")
    records = []
    for action, shown in turns:
        pieces.append("x")
        obs = None
        if shown is not None:
            obs = [len(pieces), len(pieces) + len(shown)]
            pieces.extend(shown)
        records.append({"span": [0, 1], "obs": obs, "reward": 0.0, "action": action})
    return {"step": step, "split": split, "task_id": task_id, "success": success,
            "pieces": pieces, "turns": records}  # fmt: skip


def search(query: str) -> dict:
    return {"kind": "tool", "name": "search", "arguments": {"query": query}}


def answer(text: str) -> dict:
    return {"kind": "answer", "text": text}


def titles(*names: str) -> str:
    return "".join(f'Doc {i}(Title: "{name}") ...\n' for i, name in enumerate(names, 1))


@pytest.fixture
def run_dir(tmp_path):
    world = build_world(DEFAULT_NUM_ENTITIES, 0)
    a, b, other = split_people(world, "eval")[:3]
    records = [
        # the warm-start evaluation: one failure, no search at all
        episode(0, "eval_warm_start", f"sqa-eval-{a.doc_id}-profession-0", False,
                [(answer("pilot"), None)]),
        episode(2, "eval", f"sqa-eval-{a.doc_id}-birthplace-1", True,
                [(search(a.name), titles(a.name)), (answer(a.birthplace), None)]),
        episode(2, "eval", f"sqa-eval-{a.doc_id}-employer-0", False,
                [(search(a.name), titles(a.name, other.name)), (answer("Nowhere Ltd"), None)]),
        episode(2, "eval", f"sqa-eval-{b.doc_id}-instrument-2", False,
                [(search(b.name[:-1]), titles(other.name)), (answer("oboe"), None)]),
        episode(2, "eval", f"sqa-eval-{b.doc_id}-birth_year-0", False,
                [(search(b.name.upper()), titles(other.name)), (answer("1900"), None)]),
    ]  # fmt: skip
    lines = "".join(json.dumps(r) + "\n" for r in records).encode()
    (tmp_path / "trajectories.jsonl.gz").write_bytes(gzip.compress(lines))
    (tmp_path / "config.json").write_text(json.dumps({"env": {"name": "search_qa"}}))
    metrics = [
        {"step": 0, "time": 1000.0, "eval_before/seconds": 90.0},
        {"step": 0, "time": 1100.0, "eval_warm_start/seconds": 60.0},
        {"step": 1, "time": 1110.0, "train/step_seconds": 10.0},
        {"step": 2, "time": 1121.0, "train/step_seconds": 11.0},
        {"step": 2, "time": 1180.0, "eval/seconds": 59.0},
    ]
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(m) + "\n" for m in metrics))
    return tmp_path, a, b


def test_each_cause_by_hand(run_dir):
    path, a, b = run_dir
    result = bench.failures(path, "eval")
    assert (result["step"], result["episodes"], result["failed"]) == (2, 4, 3)
    causes = {f["task_id"]: f["cause"] for f in result["failures"]}
    assert causes == {
        f"sqa-eval-{a.doc_id}-employer-0": "wrong_answer",  # the person's doc was shown
        f"sqa-eval-{b.doc_id}-instrument-2": "query_misspelled",
        f"sqa-eval-{b.doc_id}-birth_year-0": "not_retrieved",  # the right name, other docs
    }
    wrong = next(f for f in result["failures"] if f["cause"] == "wrong_answer")
    assert (wrong["answer"], wrong["gold"]) == ("Nowhere Ltd", a.employer)
    assert wrong["doc_form"] in bench.DOC_FORMS
    assert result["by_cause"] == {"wrong_answer": 1, "query_misspelled": 1, "not_retrieved": 1}
    assert sum(result["episodes_by_doc_form"].values()) == 4
    warm = bench.failures(path, "eval_warm_start")
    assert warm["by_cause"] == {"no_search": 1}


def test_time_spent_by_hand(run_dir):
    path, _, _ = run_dir
    spent = bench.time_spent(path)
    assert spent["train/step_seconds"] == 21.0 and spent["eval/seconds"] == 59.0
    assert spent["run"] == 1180.0 - (1000.0 - 90.0)  # from the first evaluation's start


def test_every_corpus_form_is_named():
    docs = build_world(DEFAULT_NUM_ENTITIES, 0).corpus
    people = {p.doc_id for p in build_world(DEFAULT_NUM_ENTITIES, 0).people}
    forms = {bench.doc_form(d["contents"]) for d in docs if d["id"] in people}
    assert forms == set(bench.DOC_FORMS)


def test_missing_split_is_a_clear_error(run_dir):
    path, _, _ = run_dir
    with pytest.raises(SystemExit, match="no 'eval_before' episodes"):
        bench.failures(path, "eval_before")


def test_search_behaviour_by_hand(tmp_path):
    """Searches per episode; a first search that missed the person's document, recovered by a
    second one (answered right, and wrong), and one never recovered."""
    world = build_world(DEFAULT_NUM_ENTITIES, 0)
    a, b, other = split_people(world, "eval")[:3]
    records = [
        episode(1, "eval", f"sqa-eval-{a.doc_id}-birthplace-1", True,
                [(search(a.name), titles(a.name)), (answer(a.birthplace), None)]),
        episode(1, "eval", f"sqa-eval-{b.doc_id}-employer-0", True,
                [(search(b.name[:-1]), titles(other.name)), (search(b.name), titles(b.name)),
                 (answer(b.employer), None)]),
        episode(1, "eval", f"sqa-eval-{b.doc_id}-profession-0", False,
                [(search(b.name[:-1]), titles(other.name)), (search(b.name), titles(b.name)),
                 (answer("pilot"), None)]),
        episode(1, "eval", f"sqa-eval-{a.doc_id}-employer-2", False,
                [(search(a.name[:-1]), titles(other.name)), (answer("Nowhere Ltd"), None)]),
    ]  # fmt: skip
    people = {p.doc_id: p for p in world.people}
    assert bench.search_behaviour(records, people) == {
        "episodes_by_searches": {"1": 2, "2": 2},
        "first_search_missed": 3,
        "recovered": 2,
        "recovered_and_right": 1,
    }
