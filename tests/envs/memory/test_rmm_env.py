"""RMM (envs/memory/rmm.py): prospective reflection into topic memories, and the reranker
trained online from citations (retrospective reflection)."""

from __future__ import annotations

import torch

from agentic_rl.envs.memory.dialogues import make_dialogue_tasks
from agentic_rl.envs.memory.rmm import (
    HashEmbedder,
    Memory,
    MemoryWorld,
    RMMEnv,
    cite_by_extraction,
    online_reflection,
    reflect,
)
from agentic_rl.types import Action


def test_prospective_reflection_writes_topic_summaries_and_merges_a_persons_updates():
    task = make_dialogue_tasks("eval", 1, seed=0)[0]
    name = task.fields["name"]
    bank: list[Memory] = []
    sessions: dict[int, list[dict]] = {}
    for fact in task.fields["facts"]:
        sessions.setdefault(fact["session"], []).append(fact)
    embed = HashEmbedder()
    assert reflect(bank, sessions[1], name, embed, 0.4) == 0
    assert [next(iter(m.keys))[1] for m in bank] == ["city", "employer", "pet", "hobby"]
    merges = sum(reflect(bank, s, name, embed, 0.4) for k, s in sessions.items() if k > 1)
    assert merges > 0
    latest = {q["attribute"]: q["answer"] for q in task.fields["questions"]}
    city = next(m for m in bank if (name, "city") in m.keys)
    assert latest["city"] in city.text  # the merged memory holds the current city
    assert all(p == name for m in bank for p, _ in m.keys)


def test_reranker_learns_from_citations_and_recall_rises():
    world = MemoryWorld(num_people=20, seed=0, merge_threshold=0.4)
    held_out = world.questions["eval"]
    before = world.recall_at(held_out, 2)
    w_before = world.reranker.w_q.detach().clone()
    stats = online_reflection(world, world.questions["train"], passes=4)
    assert stats["updates"] == 4 * len(world.questions["train"])
    assert not torch.equal(world.reranker.w_q.detach(), w_before)
    assert world.recall_at(held_out, 2) > before


def test_without_citations_nothing_is_learned():
    world = MemoryWorld(num_people=20, seed=0, merge_threshold=0.4)
    task = world.questions["train"][0]
    q, retrieved, shown = world.show(task, sample=True)
    scores = world.reranker.scores(q, world.vectors[retrieved]).detach()
    world.learn(q, retrieved, shown, cited={shown[1]})
    after = world.reranker.scores(q, world.vectors[retrieved]).detach()
    pos = retrieved.index(shown[1])
    gain = (after - scores)[pos] - (after - scores).mean()
    assert gain > 0  # the cited memory rose relative to the others


def test_env_reads_citations_updates_the_shared_reranker_and_counts_bad_ones():
    env = RMMEnv(num_people=20)
    env.world.reset_reranker()
    task = env.world.questions["train"][0]
    obs = env.reset(task, seed=3)
    assert "[4]" in obs.messages[0]["content"] and task.prompt in obs.messages[0]["content"]
    reply = env.expert_turn()
    answer, cited = cite_by_extraction(task, [env.world.memories[i].text for i in env.shown])
    result = env.step(Action(kind="answer", text=answer, raw=reply))
    assert result.terminated and env.world.reranker.updates == 1
    assert result.reward == float(bool(cited))  # the needed memory shown -> right answer
    env.reset(task, seed=3)
    bad = env.step(Action(kind="answer", text="x", raw="<answer>x</answer>"))
    assert bad.info["invalid_action"] == 1 and env.world.reranker.updates == 2
