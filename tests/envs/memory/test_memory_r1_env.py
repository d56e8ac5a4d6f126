"""Memory-R1's pieces: the generated dialogues, the SQLite memory bank, the manager's
operations (parsed, validated, applied) and the frozen answer agent (envs/memory/)."""

from __future__ import annotations

import pytest

from agentic_rl.envs.memory.bank import (
    MemoryBank,
    Operation,
    OperationError,
    parse_operation,
    render_operation,
)
from agentic_rl.envs.memory.dialogues import make_dialogue_tasks
from agentic_rl.envs.memory.memory_r1 import MemoryR1Env, answer_from_bank
from agentic_rl.types import Action


def play(env, task, reply):
    """Play a dialogue; `reply(env)` gives each turn's text. Returns the last StepResult."""
    env.reset(task, seed=0)
    while True:
        result = env.step(Action(kind="none", raw=reply(env)))
        if result.terminated:
            return result


def test_dialogues_change_facts_and_ask_for_the_latest_state():
    tasks = make_dialogue_tasks("train", 20, seed=0)
    assert make_dialogue_tasks("train", 20, seed=0)[3].fields == tasks[3].fields
    evals = make_dialogue_tasks("eval", 20, seed=0)
    assert not {t.fields["name"] for t in tasks} & {t.fields["name"] for t in evals}
    kinds = {f["kind"] for t in tasks for f in t.fields["facts"]}
    assert {"intro", "change", "restate", "chat", "delete"} <= kinds
    for task in tasks:
        latest = {}
        for fact in task.fields["facts"]:
            if fact["attribute"]:
                latest[fact["attribute"]] = fact["value"]
        assert {q["attribute"]: q["answer"] for q in task.fields["questions"]} == latest


def test_bank_is_persisted_in_sqlite(tmp_path):
    bank = MemoryBank(tmp_path / "bank.sqlite")
    first = bank.add("Ana lives in Rome.")
    bank.add("Ana works at ZetaLabs.")
    bank.update(first, "Ana lives in Oslo.")
    bank.close()
    again = MemoryBank(tmp_path / "bank.sqlite")  # a new connection reads the file
    assert again.all() == [(1, "Ana lives in Oslo."), (2, "Ana works at ZetaLabs.")]
    again.delete(2)
    assert again.search("Where does Ana live?", 5) == [(1, "Ana lives in Oslo.")]


def test_operations_are_parsed_and_validated():
    shown = {3, 4}
    assert parse_operation('ok {"event": "add", "text": "X likes chess."}', shown) == Operation(
        "ADD", None, "X likes chess."
    )
    op = Operation("UPDATE", 3, "X lives in Oslo.")
    assert parse_operation(render_operation(op), shown) == op
    assert parse_operation('{"event": "NOOP"}', shown).event == "NOOP"
    for bad, why in [
        ("I would add it", "no JSON"),
        ('{"event": "MERGE"}', "unknown event"),
        ('{"event": "DELETE", "id": 9}', "not shown"),
        ('{"event": "UPDATE", "id": "x", "text": "t"}', "needs the id"),
        ('{"event": "ADD"}', "non-empty text"),
        ('{"event": "ADD", "text": }', "not valid JSON"),
    ]:
        with pytest.raises(OperationError, match=why):
            parse_operation(bad, shown)


def test_expert_manager_keeps_the_latest_state_and_append_everything_does_not():
    tasks = make_dialogue_tasks("eval", 10, seed=0)
    expert = MemoryR1Env()
    assert all(play(expert, t, lambda e: e.expert_turn()).reward == 1.0 for t in tasks)
    assert expert.ops["UPDATE"] > 0 and expert.ops["NOOP"] > 0
    append = MemoryR1Env(append_only=True)
    scores = [play(append, t, lambda e: "").reward for t in tasks]
    assert sum(scores) / len(scores) < 0.6  # stale memories outrank the changes
    assert append.ops["ADD"] == len(tasks[-1].fields["facts"])


def test_invalid_operations_are_observations_and_counted_and_change_nothing():
    task = make_dialogue_tasks("eval", 1, seed=0)[0]
    env = MemoryR1Env()
    env.reset(task, seed=0)
    result = env.step(Action(kind="invalid", raw="Sure! I will remember that."))
    assert result.info["invalid_action"] == 1 and not result.terminated
    assert result.observation.name == "error" and "no JSON" in result.observation.content
    assert "rejected: no JSON" in result.observation.messages[-1]["content"]  # told next time
    assert env.bank.all() == []


def test_answer_agent_reads_the_best_matching_memory(tmp_path):
    bank = MemoryBank(tmp_path / "b.sqlite")
    bank.add("Ana lives in Rome.")
    bank.add("Ana moved from Rome to Oslo.")
    assert answer_from_bank(bank, "Where does Ana live now?", "city", 5) == "Rome"  # stale
    bank.update(1, "Ana lives in Oslo.")
    assert answer_from_bank(bank, "Where does Ana live now?", "city", 5) == "Oslo"
    assert answer_from_bank(bank, "What hobby does Ana have now?", "hobby", 5) == "none"


def test_scratch_banks_are_files_removed_with_the_env():
    env = MemoryR1Env()
    path = env.bank.path
    env.reset(make_dialogue_tasks("eval", 1, seed=0)[0], seed=0)
    assert path.is_file()
    env.bank.close()
    del env
    import gc

    gc.collect()
    assert not path.exists()
