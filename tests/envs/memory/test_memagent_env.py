"""The MemAgent env and its RULER-HotpotQA-like documents (envs/memory/)."""

from __future__ import annotations

import json

import pytest

from agentic_rl.envs.check import check_env
from agentic_rl.envs.memory.long_qa import CHARS_PER_TOKEN, document_text, make_long_qa_tasks
from agentic_rl.envs.memory.memagent import MemAgentEnv
from agentic_rl.envs.task_files import load_tasks
from agentic_rl.model.tokens import encode_text
from agentic_rl.types import Action


def test_documents_are_seeded_and_hide_the_gold_passages_among_distractors(tokenizer):
    a = make_long_qa_tasks("train", 4, seed=3, doc_tokens=2048)
    b = make_long_qa_tasks("train", 4, seed=3, doc_tokens=2048)
    assert [t.prompt for t in a] == [t.prompt for t in b]
    assert document_text(a[0]) == document_text(b[0])
    evals = make_long_qa_tasks("eval", 4, seed=3, doc_tokens=2048)
    assert not {t.prompt for t in a} & {t.prompt for t in evals}
    for task in a:
        doc = document_text(task)
        for fact in task.fields["facts"]:
            assert doc.count(fact) == 1  # the supporting fact, once, somewhere
        assert doc.count("Passage ") > 20  # among many distractor passages
        assert 0.85 < len(encode_text(tokenizer, doc)) / 2048 < 1.15


def test_two_hop_questions_need_the_bridge_passage():
    task = make_long_qa_tasks("eval", 1, seed=0, doc_tokens=1024, hops=2)[0]
    person, company = task.fields["facts"]
    assert "works for" in task.prompt and "founded" in task.prompt
    assert task.answers[0] in company and task.answers[0] not in person


def test_documents_reach_256k_tokens_lazily():
    task = make_long_qa_tasks("eval", 1, seed=0, doc_tokens=262_144)[0]
    assert "context" not in task.fields and len(json.dumps(task.fields)) < 2000  # a recipe only
    assert len(document_text(task)) >= 0.95 * 262_144 * CHARS_PER_TOKEN


def test_bad_generator_settings_are_errors():
    with pytest.raises(ValueError, match="hops"):
        make_long_qa_tasks("train", 1, hops=3)
    with pytest.raises(ValueError, match="reader"):
        MemAgentEnv(reader="skim")


def test_user_jsonl_context_question_answers(tmp_path):
    path = tmp_path / "long.jsonl"
    row = {"context": "Passage 1: Ada\nAda keeps a goat named Pim.", "question": "Goat?"}
    path.write_text(json.dumps({**row, "answers": ["Pim"]}) + "\n")
    (task,) = load_tasks(path)
    assert document_text(task) == row["context"] and task.answers == ["Pim"]
    env = MemAgentEnv()
    env.reset(task, seed=0)
    assert env.document() == row["context"]


def test_final_answer_is_exact_match_and_malformed_answers_are_counted():
    env = MemAgentEnv()
    task = make_long_qa_tasks("eval", 1, seed=0, doc_tokens=256)[0]
    env.reset(task, seed=0)
    gold = task.answers[0]
    right = env.step(Action(kind="answer", text=gold.lower(), raw=""))
    assert right.reward == 1.0 and right.terminated and right.info["success"] == 1.0
    env.reset(task, seed=0)
    boxed = env.step(Action(kind="none", raw=f"It is \\boxed{{{gold}}}."))
    assert boxed.reward == 1.0  # MemAgent's \boxed{} is accepted too
    env.reset(task, seed=0)
    bad = env.step(Action(kind="invalid", error="no action", raw="I think so"))
    assert bad.reward == 0.0 and bad.info["invalid_action"] == 1
    assert bad.observation is not None and bad.observation.name == "error"


def test_expert_keeps_the_facts_it_has_read_then_answers():
    env = MemAgentEnv()
    task = make_long_qa_tasks("eval", 1, seed=0, doc_tokens=256)[0]
    env.reset(task, seed=0)
    env.begin_conversation("memory", "Passage 1: Nobody\nnothing here", "<|im_end|>")
    assert env.expert_turn() == "Nothing yet.<|im_end|>"
    fact = task.fields["facts"][0]
    env.begin_conversation("memory", f"... {fact}. ...", "<|im_end|>")
    assert env.expert_turn() == f"{fact}.<|im_end|>"
    env.begin_conversation("memory", "more distractors", "<|im_end|>")
    assert fact in env.expert_turn()  # the memory keeps it
    env.begin_conversation("final")
    assert env.expert_turn() == f"<answer>{task.answers[0]}</answer>"


def test_check_env_accepts_it():
    check_env(MemAgentEnv(), make_long_qa_tasks("eval", 1, seed=0, doc_tokens=256))
