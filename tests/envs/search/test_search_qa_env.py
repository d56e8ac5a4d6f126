"""SearchQAEnv and its generated corpus: determinism, disjoint splits, retrievability, expert."""

import pytest

from agentic_rl.envs.check import check_env
from agentic_rl.envs.registry import make_env
from agentic_rl.envs.search.single_hop import (
    QUESTIONS,
    SearchQAEnv,
    get_search_tool,
    make_search_qa_tasks,
)
from agentic_rl.retrieval.qa_corpus import build_corpus, build_world
from agentic_rl.rewards.qa import cover_exact_match
from agentic_rl.types import Action


def test_check_env_passes():
    tasks = make_search_qa_tasks("eval", 100) + make_search_qa_tasks("train", 30, seed=1)
    check_env(SearchQAEnv(), tasks)


def test_check_env_passes_on_a_small_world():
    env = SearchQAEnv(num_entities=40, corpus_seed=7)
    check_env(env, make_search_qa_tasks("eval", 20, num_entities=40, corpus_seed=7))


def test_corpus_is_deterministic_and_in_search_r1_format():
    corpus = build_corpus(num_entities=100, seed=0)
    assert corpus == build_corpus(num_entities=100, seed=0)
    assert corpus != build_corpus(num_entities=100, seed=1)
    world = build_world(100, 0)
    assert len(corpus) == 100 + len(world.cities) + len(world.companies) == 100 + 20 + 12
    assert [doc["id"] for doc in corpus] == [str(i) for i in range(len(corpus))]
    for doc in corpus:
        title, _, text = doc["contents"].partition("\n")
        assert title.startswith('"') and title.endswith('"') and text
    assert len({p.name for p in world.people}) == 100


def test_corpus_copies_do_not_alias_the_cache():
    corpus = build_corpus(num_entities=100, seed=0)
    corpus[0]["contents"] = "changed"
    assert build_corpus(num_entities=100, seed=0)[0]["contents"] != "changed"


def test_tasks_are_deterministic_and_cover_all_attributes():
    tasks = make_search_qa_tasks("train", 200, seed=0)
    assert tasks == make_search_qa_tasks("train", 200, seed=0)
    assert [t.prompt for t in tasks] != [t.prompt for t in make_search_qa_tasks("train", 200, 1)]
    assert {t.fields["attribute"] for t in tasks} == set(QUESTIONS)
    assert all(len(templates) >= 2 for templates in QUESTIONS.values())
    assert len({t.task_id for t in tasks}) == 200


def test_splits_use_disjoint_entities():
    train = make_search_qa_tasks("train", 2000)  # every train (person, attribute) pair
    evals = make_search_qa_tasks("eval", 500)
    train_people = {t.fields["entity"] for t in train}
    eval_people = {t.fields["entity"] for t in evals}
    assert len(train_people) == 400 and len(eval_people) == 100
    assert train_people.isdisjoint(eval_people)
    assert {t.prompt for t in train}.isdisjoint(t.prompt for t in evals)


def test_answers_are_short_and_in_the_support_document():
    corpus = {doc["id"]: doc["contents"] for doc in build_corpus()}
    for task in make_search_qa_tasks("eval", 500):
        assert len(task.answers[0].split()) <= 2
        (support,) = task.fields["support_doc_ids"]
        assert task.fields["entity"] in corpus[support]
        assert cover_exact_match(corpus[support], task.answers) == 1.0


def test_bm25_top3_finds_the_support_document():
    tasks = make_search_qa_tasks("eval", 500)
    results = get_search_tool().retrieve([t.fields["entity"] for t in tasks], topk=3)
    hits = sum(
        t.fields["support_doc_ids"][0] in {r["document"]["id"] for r in row}
        for t, row in zip(tasks, results, strict=True)
    )
    assert hits / len(tasks) >= 0.95


def test_too_many_tasks_raises():
    with pytest.raises(ValueError, match="at most 150 eval questions"):
        make_search_qa_tasks("eval", 151, num_entities=50)


def test_search_index_is_shared_between_envs():
    assert SearchQAEnv().tools[0] is make_env("search_qa").tools[0]
    assert SearchQAEnv(topk=5).tools[0].topk == 5


def test_reset_refuses_a_task_from_another_world():
    task = make_search_qa_tasks("eval", 1, num_entities=40, corpus_seed=7)[0]
    with pytest.raises(ValueError, match="num_entities=40 but this env uses 500"):
        SearchQAEnv().reset(task, seed=0)


def test_episode_and_reward():
    env = SearchQAEnv()
    task = make_search_qa_tasks("eval", 1)[0]
    first = env.reset(task, seed=0)
    assert first.messages[0]["content"].startswith("Answer the question using the search tool.")
    assert first.messages[1]["content"] == task.prompt
    name = task.fields["entity"]
    assert env.expert_turn() == f"<search>{name}</search>"
    result = env.step(Action("tool", name="search", arguments={"query": name}))
    assert result.observation.name == "search"
    assert result.observation.content.startswith(f'Doc 1(Title: "{name}")')
    assert env.expert_turn() == f"<answer>{task.answers[0]}</answer>"
    final = env.step(Action("answer", text=f" The {task.answers[0].upper()}. "))
    assert (final.reward, final.terminated) == (1.0, True)


def test_wrong_answer_scores_zero():
    env = SearchQAEnv()
    env.reset(make_search_qa_tasks("eval", 1)[0], seed=0)
    assert env.step(Action("answer", text="Paris")).reward == 0.0


def test_expert_searches_again_when_the_answer_was_not_seen():
    env = SearchQAEnv()
    task = make_search_qa_tasks("eval", 1)[0]
    env.reset(task, seed=0)
    miss = env.step(Action("tool", name="search", arguments={"query": "zzzz"}))
    assert miss.observation.content == "No results found for 'zzzz'."
    hint = {
        "birthplace": "born city",
        "birth_year": "born year",
        "profession": "profession",
        "instrument": "plays instrument",
        "employer": "works for company",
    }
    expected = f"<search>{task.fields['entity']} {hint[task.fields['attribute']]}</search>"
    assert env.expert_turn() == expected
    env.step(Action("tool", name="search", arguments={"query": "zzzz"}))
    assert env.expert_turn() == f"<answer>{task.answers[0]}</answer>"  # two searches: answer


def _dropped_one_letter(misspelt: str, name: str) -> bool:
    """`misspelt` is `name` with one letter after the first of one part removed."""
    wrong, right = misspelt.split(), name.split()
    differ = [(w, r) for w, r in zip(wrong, right, strict=True) if w != r]
    if len(differ) != 1:
        return False
    w, r = differ[0]
    return (
        len(w) == len(r) - 1
        and w[0] == r[0]
        and any(r[:j] + r[j + 1 :] == w for j in range(1, len(r)))
    )


def test_expert_mistake_is_a_misspelt_search_that_loses_the_document_and_is_recovered():
    env = SearchQAEnv(topk=2)
    tasks = make_search_qa_tasks("train", 40, seed=2)
    mistakes = 0
    for task in tasks:
        env.reset(task, seed=5)
        mistake = env.expert_mistake()
        if mistake is None:
            continue
        mistakes += 1
        env.reset(task, seed=5)
        assert env.expert_mistake() == mistake  # the episode's seed picks it
        query = mistake.removeprefix("<search>").removesuffix("</search>")
        assert _dropped_one_letter(query, task.fields["entity"]), (query, task.fields["entity"])
        shown = env.step(Action("tool", name="search", arguments={"query": query}))
        assert f'"{task.fields["entity"]}"' not in shown.observation.content
        recovery = env.expert_turn()
        assert recovery.startswith(f"<search>{task.fields['entity']} ")
        query = recovery.removeprefix("<search>").removesuffix("</search>")
        env.step(Action("tool", name="search", arguments={"query": query}))
        assert env.expert_turn() == f"<answer>{task.answers[0]}</answer>"
        assert env.step(Action("answer", text=task.answers[0])).reward == 1.0
    assert 10 <= mistakes < len(tasks)  # most names have one; some do not


def test_expert_answers_only_from_the_persons_own_document():
    """A town's page names the person and holds their city, but is not their document: the
    expert searches again rather than answer from it."""
    env = SearchQAEnv(topk=1)
    task = next(
        t for t in make_search_qa_tasks("train", 60) if t.fields["attribute"] == "birthplace"
    )
    env.reset(task, seed=0)
    town = env.step(Action("tool", name="search", arguments={"query": task.answers[0]}))
    content = town.observation.content
    assert task.fields["entity"] in content and cover_exact_match(content, task.answers) > 0
    assert f'"{task.fields["entity"]}"' not in content
    assert env.expert_turn().startswith(f"<search>{task.fields['entity']} ")
