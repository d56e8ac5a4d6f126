"""Two-hop QA: deterministic world, disjoint splits, the second hop is needed, the expert solves."""

import pytest

from agentic_rl.envs.check import check_env
from agentic_rl.envs.search.multihop import (
    BRIDGE_HINTS,
    QUESTIONS,
    MultiHopQAEnv,
    build_multihop_corpus,
    build_multihop_world,
    get_multihop_search_tool,
    make_multihop_tasks,
    mentions,
)
from agentic_rl.envs.search.single_hop import make_search_qa_tasks
from agentic_rl.formats.chat import TagFormat
from agentic_rl.retrieval.qa_corpus import build_corpus, build_world
from agentic_rl.retrieval.simulated import SimulatedSearchEngine
from agentic_rl.tools.web import LocalFakeProvider, make_web_tools
from agentic_rl.types import Action, Completion


def _ids(results):
    return [item["document"]["id"] for item in results]


def test_corpus_is_deterministic_search_r1_format_and_keeps_the_single_hop_corpus():
    corpus = build_multihop_corpus(100, 0)
    assert corpus == build_multihop_corpus(100, 0)
    assert corpus != build_multihop_corpus(100, 1)
    world = build_multihop_world(100, 0)
    assert len(corpus) == 100 + len(world.cities) + len(world.organisations) == 100 + 20 + 12
    assert [doc["id"] for doc in corpus] == [str(i) for i in range(len(corpus))]
    # person documents are the single-hop corpus's, unchanged; that corpus is untouched
    assert corpus[:100] == build_corpus(100, 0)[:100]
    assert len(build_corpus(100, 0)) == 132
    for doc in corpus:
        title, _, text = doc["contents"].partition("\n")
        assert title.startswith('"') and title.endswith('"') and text
    # the stored facts are the ones written in the documents
    for org in world.organisations.values():
        text = corpus[int(org.doc_id)]["contents"]
        assert org.city in text and str(org.founded_year) in text and org.product in text
    for city in world.cities.values():
        assert city.river in corpus[int(city.doc_id)]["contents"]


def test_bridge_documents_never_mention_people():
    world = build_multihop_world(100, 0)
    names = {p.first for p in world.base.people} | {p.last for p in world.base.people}
    for doc in world.corpus[100:]:
        assert not any(mentions(doc["contents"], name) for name in names)


def test_tasks_are_deterministic_with_both_support_docs():
    tasks = make_multihop_tasks("train", 200, seed=0)
    assert tasks == make_multihop_tasks("train", 200, seed=0)
    assert [t.prompt for t in tasks] != [t.prompt for t in make_multihop_tasks("train", 200, 1)]
    assert {t.fields["relation"] for t in tasks} == set(QUESTIONS)
    assert len({t.task_id for t in tasks}) == 200
    world = build_multihop_world()
    for task in tasks:
        person_id, bridge_id = task.fields["support_doc_ids"]
        person_doc, bridge_doc = (world.corpus[int(i)]["contents"] for i in (person_id, bridge_id))
        assert task.fields["support_docs"] == [person_doc, bridge_doc]
        assert task.fields["entity"] in person_doc and task.fields["bridge"] in person_doc
        assert mentions(bridge_doc, task.answers[0])
        assert not mentions(person_doc, task.answers[0])  # hop 1 alone cannot answer
        assert task.fields["search_keys"] == [[task.fields["entity"]], [task.fields["bridge"]]]


def test_splits_use_disjoint_people():
    train = make_multihop_tasks("train", 1500)
    evals = make_multihop_tasks("eval", 400)
    train_people = {t.fields["entity"] for t in train}
    eval_people = {t.fields["entity"] for t in evals}
    assert train_people.isdisjoint(eval_people)
    # the same people as the single-hop split: no eval person is seen in either train set
    single_train = {t.fields["entity"] for t in make_search_qa_tasks("train", 2000)}
    assert eval_people.isdisjoint(single_train)


def test_too_many_tasks_raise():
    with pytest.raises(ValueError, match="raise num_entities"):
        make_multihop_tasks("eval", 10_000, num_entities=50)


def test_one_search_rarely_suffices_and_the_bridge_search_does():
    tasks = make_multihop_tasks("eval", 200)
    tool = get_multihop_search_tool()
    by_name = tool.retrieve([t.fields["entity"] for t in tasks])
    by_question = tool.retrieve([t.prompt for t in tasks])
    second = [
        tool.retrieve([f"{t.fields['bridge']} {BRIDGE_HINTS[t.fields['relation']]}"])[0]
        for t in tasks
    ]
    hop1_found = hop2_in_first = answer_in_first = hop2_found = 0
    for task, name_hits, question_hits, bridge_hits in zip(
        tasks, by_name, by_question, second, strict=True
    ):
        person_id, bridge_id = task.fields["support_doc_ids"]
        hop1_found += person_id in _ids(name_hits)
        hop2_in_first += bridge_id in _ids(name_hits) or bridge_id in _ids(question_hits)
        text = " ".join(item["document"]["contents"] for item in name_hits + question_hits)
        answer_in_first += mentions(text, task.answers[0])
        hop2_found += bridge_id in _ids(bridge_hits)
    assert hop1_found >= 0.95 * len(tasks)
    assert hop2_in_first <= 0.05 * len(tasks)
    assert answer_in_first <= 0.1 * len(tasks)
    assert hop2_found >= 0.95 * len(tasks)


def test_check_env_passes_with_em_and_f1():
    tasks = make_multihop_tasks("eval", 60) + make_multihop_tasks("train", 40, seed=3)
    check_env(MultiHopQAEnv(), tasks)
    check_env(MultiHopQAEnv(reward="f1"), tasks[:20])
    check_env(
        MultiHopQAEnv(num_entities=40, corpus_seed=5),
        make_multihop_tasks("eval", 15, num_entities=40, corpus_seed=5),
    )


def test_expert_searches_twice_and_sees_the_answer_before_answering():
    env = MultiHopQAEnv()
    fmt = TagFormat(env.tools)
    for task in make_multihop_tasks("eval", 80):
        env.reset(task, 0)
        searches, reward = [], None
        for _ in range(6):
            action = fmt.parse(env.expert_turn(), "stop")
            if action.kind == "tool":
                searches.append(action.arguments["query"])
            result = env.step(action)
            if result.terminated:
                reward = result.reward
                break
        assert reward == 1.0
        assert len(searches) >= 2
        assert task.fields["entity"] in searches[0]
        assert any(task.fields["bridge"] in query for query in searches[1:])
        assert mentions(env.last_observation(), task.answers[0])


def test_f1_reward_gives_partial_credit_and_em_does_not():
    task = next(
        t for t in make_multihop_tasks("eval", 50) if t.fields["relation"] == "employer_city"
    )
    em_env, f1_env = MultiHopQAEnv(), MultiHopQAEnv(reward="f1")
    for env in (em_env, f1_env):
        env.reset(task, 0)
    guess = f"{task.answers[0]} town"  # F1 = 2 * (1/2 * 1) / (1/2 + 1) = 2/3
    assert em_env.step(Action(kind="answer", text=guess)).reward == 0.0
    assert f1_env.step(Action(kind="answer", text=guess)).reward == pytest.approx(2 / 3)
    with pytest.raises(ValueError, match="reward"):
        MultiHopQAEnv(reward="bleu")


def test_tasks_from_another_world_are_rejected():
    env = MultiHopQAEnv(num_entities=40, corpus_seed=5)
    with pytest.raises(ValueError, match="num_entities"):
        env.reset(make_multihop_tasks("eval", 1)[0], 0)
    assert build_world(40, 5).people  # the base world is shared, not rebuilt


class _FixedTextGenerator:
    def generate(self, prompts, params):
        text = "Doc 1: Hamfield is a town on the river Temkerk, founded long ago by settlers."
        return [Completion([1], [0.0], "eos", text=text) for _ in prompts]


def test_other_search_tools_are_pointed_at_each_task(tokenizer):
    tool = SimulatedSearchEngine(_FixedTextGenerator(), tokenizer).tool()
    env = MultiHopQAEnv(tools=[tool])
    tasks = make_multihop_tasks("eval", 3)
    check_env(env, tasks)  # the expert still reaches the answer (after four searches)
    env.reset(tasks[1], 0)
    assert (tool.question, tool.answers) == (tasks[1].prompt, tasks[1].answers)
    result = env.step(Action(kind="tool", name="search", arguments={"query": "Hamfield"}))
    assert "river Temkerk" in result.observation.content

    web = make_web_tools(LocalFakeProvider.from_corpus(build_multihop_corpus()))
    env = MultiHopQAEnv(tools=web)
    env.reset(tasks[0], 0)
    assert [t.name for t in env.tools] == ["web_search", "browse_webpage"]
    assert web[1].question == tasks[0].prompt
