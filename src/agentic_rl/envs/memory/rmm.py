"""RMM, Reflective Memory Management (Tan et al. 2025, "In Prospect and Retrospect: Reflective
Memory Management for Long-term Personalized Dialogue Agents").

- Prospective reflection (`reflect`): each dialogue session is split into TOPIC memories (one
  summary per topic the session talks about); each is added to the bank, or merged into the most
  similar memory already there when their cosine similarity reaches `merge_threshold` (the
  newer summary replaces the older one: later sessions state the current facts).
- Retrospective reflection (`Reranker`): the retriever's top-K memories are re-scored by linear
  residual maps of the query and memory embeddings, M of them are picked by Gumbel top-M, and the
  answerer CITES the ones it used; cited memories earn +1, picked but uncited -1, and the
  reranker learns online by REINFORCE with a running-mean baseline (algos/rerank.py).

The world (`MemoryWorld`): the generated multi-session dialogues of many people
(envs/memory/dialogues.py) reflected into one bank; the question "Where does X live now?" needs
X's city topic memory (`needed`). Embeddings are hashed bags of word stems (`HashEmbedder`, no
model download); the retriever ranks by their cosine, which the reranker starts from (W = 0).
`RMMEnv` asks the policy a question with the M picked memories and reads its citations
(`<cite>1, 4</cite>`) and answer; the reranker shared by the process's envs (`shared_world`)
learns from those citations as episodes finish. `cite_by_extraction` is the frozen extractive
answerer the benchmark uses (it cites the picked memories that name the person and state the
asked attribute).
"""

from __future__ import annotations

import random
import re
import zlib
from dataclasses import dataclass, field
from functools import lru_cache

import torch

from agentic_rl.algos.rerank import citation_reinforce_loss, gumbel_top_m, residual_scores
from agentic_rl.envs.memory.bank import stems
from agentic_rl.envs.memory.dialogues import NONE, make_dialogue_tasks
from agentic_rl.envs.memory.memory_r1 import EXTRACT
from agentic_rl.rewards.qa import exact_match
from agentic_rl.tools.base import Tool
from agentic_rl.types import Action, Observation, StepResult, Task

_CITE = re.compile(r"<cite>(.*?)</cite>", re.DOTALL)


class HashEmbedder:
    """Unit vectors of hashed word stems (`bank.stems`): deterministic, offline, instant."""

    def __init__(self, dim: int = 512) -> None:
        self.dim = dim

    def __call__(self, texts: list[str]) -> torch.Tensor:
        out = torch.zeros(len(texts), self.dim)
        for row, text in enumerate(texts):
            for stem in stems(text):
                out[row, zlib.crc32(stem.encode()) % self.dim] += 1.0
        return torch.nn.functional.normalize(out, dim=-1)


@dataclass
class Memory:
    text: str
    keys: set[tuple[str, str]] = field(default_factory=set)  # (person, attribute) it covers


def reflect(
    bank: list[Memory],
    session: list[dict],
    person: str,
    embed: HashEmbedder,
    merge_threshold: float,
) -> int:
    """Prospective reflection of one session into `bank`: one summary per topic (the facts'
    attribute), added, or merged into the most similar memory of the same person when their
    cosine similarity reaches `merge_threshold`; returns the number of merges."""
    topics: dict[str, list[str]] = {}
    for fact in session:
        topics.setdefault(fact["attribute"] or "chat", []).append(fact["text"])
    merges = 0
    for topic, texts in topics.items():
        summary = Memory(" ".join(texts), {(person, topic)})
        mine = [i for i, m in enumerate(bank) if any(p == person for p, _ in m.keys)]
        if mine:  # the user's own memories (RMM keeps one bank per user)
            sims = embed([bank[i].text for i in mine]) @ embed([summary.text])[0]
            best = int(torch.argmax(sims))
            if float(sims[best]) >= merge_threshold:
                i = mine[best]
                bank[i] = Memory(summary.text, bank[i].keys | summary.keys)
                merges += 1
                continue
        bank.append(summary)
    return merges


class Reranker:
    """RMM's reranker: residual maps W_q, W_m (zero at the start: the retriever's order),
    Gumbel top-M picks, REINFORCE from citations with a running-mean baseline."""

    def __init__(
        self,
        dim: int,
        m: int = 4,
        tau: float = 0.5,
        lr: float = 1e-3,
        seed: int = 0,
        weight_decay: float = 10.0,
    ) -> None:
        self.w_q = torch.zeros(dim, dim, requires_grad=True)
        self.w_m = torch.zeros(dim, dim, requires_grad=True)
        self.m, self.tau = m, tau
        # decoupled decay (lr x weight_decay = 1% shrink per update at the defaults): without it
        # the maps keep growing and held-out recall peaks, then falls (bench/README.md)
        self.optimizer = torch.optim.AdamW([self.w_q, self.w_m], lr=lr, weight_decay=weight_decay)
        self.generator = torch.Generator().manual_seed(seed)
        self.baseline = 0.0
        self.updates = 0

    def scores(self, q: torch.Tensor, memories: torch.Tensor) -> torch.Tensor:
        return residual_scores(q, memories, self.w_q, self.w_m)

    def pick(self, q: torch.Tensor, memories: torch.Tensor, sample: bool) -> list[int]:
        """Positions (into `memories`) of the M memories shown to the answerer."""
        with torch.no_grad():
            scores = self.scores(q, memories)
        noise = self.generator if sample else None
        return gumbel_top_m(scores, self.m, self.tau, noise).tolist()

    def update(
        self, q: torch.Tensor, memories: torch.Tensor, picked: list[int], cited: list[bool]
    ) -> float:
        """One REINFORCE step: +1 for each picked memory that was cited, -1 otherwise."""
        rewards = torch.tensor([1.0 if c else -1.0 for c in cited])
        loss = citation_reinforce_loss(
            self.scores(q, memories), torch.tensor(picked), rewards, self.baseline, self.tau
        )
        self.optimizer.zero_grad()
        loss.backward()
        self.optimizer.step()
        self.baseline = 0.9 * self.baseline + 0.1 * float(rewards.mean())
        self.updates += 1
        return loss.item()


class MemoryWorld:
    """The bank of many people's reflected dialogues, its embeddings, and the shared reranker."""

    def __init__(
        self,
        num_people: int = 60,
        seed: int = 0,
        merge_threshold: float = 0.4,
        top_k: int = 20,
        top_m: int = 4,
        tau: float = 0.5,
        lr: float = 1e-3,
        dim: int = 512,
    ) -> None:
        self.embed = HashEmbedder(dim)
        self.top_k = top_k
        self.memories: list[Memory] = []
        self.merges = 0
        self.questions: dict[str, list[Task]] = {}
        for split in ("train", "eval"):  # disjoint people, one bank
            dialogues = make_dialogue_tasks(split, num_people // 2, seed=seed)
            self.questions[split] = []
            for d in dialogues:
                name = d.fields["name"]
                sessions: dict[int, list[dict]] = {}
                for fact in d.fields["facts"]:
                    sessions.setdefault(fact["session"], []).append(fact)
                for session in sessions.values():
                    self.merges += reflect(
                        self.memories, session, name, self.embed, merge_threshold
                    )
                for k, q in enumerate(d.fields["questions"]):
                    fields = {"person": name, **q}
                    task_id = f"rmm-{split}-{d.task_id}-{k}"
                    self.questions[split].append(
                        Task(task_id, q["question"], [q["answer"]], fields)
                    )
        self.vectors = self.embed([m.text for m in self.memories])
        self.reranker_args = {"m": top_m, "tau": tau, "lr": lr, "seed": seed}
        self.reranker = Reranker(dim, **self.reranker_args)

    def reset_reranker(self) -> None:
        self.reranker = Reranker(self.embed.dim, **self.reranker_args)

    def needed(self, task: Task) -> int | None:
        """The memory that holds the question's person and attribute (None if merged away)."""
        key = (task.fields["person"], task.fields["attribute"])
        return next((i for i, m in enumerate(self.memories) if key in m.keys), None)

    def retrieve(self, question: str) -> tuple[torch.Tensor, list[int]]:
        """The query vector and the retriever's top-K memory indices (cosine)."""
        q = self.embed([question])[0]
        top = torch.topk(self.vectors @ q, min(self.top_k, len(self.memories))).indices
        return q, top.tolist()

    def show(self, task: Task, sample: bool) -> tuple[torch.Tensor, list[int], list[int]]:
        """(query vector, retrieved indices, the picked indices into the bank, in rank order)."""
        q, retrieved = self.retrieve(task.prompt)
        picked = self.reranker.pick(q, self.vectors[retrieved], sample)
        return q, retrieved, [retrieved[p] for p in picked]

    def learn(self, q: torch.Tensor, retrieved: list[int], shown: list[int], cited: set[int]):
        """Retrospective reflection from the citations of one answer."""
        picked = [retrieved.index(i) for i in shown]
        return self.reranker.update(q, self.vectors[retrieved], picked, [i in cited for i in shown])

    def recall_at(self, tasks: list[Task], k: int) -> float:
        """Share of `tasks` whose needed memory is among the reranker's top-k of the top-K."""
        hits = 0
        for task in tasks:
            q, retrieved = self.retrieve(task.prompt)
            with torch.no_grad():
                order = torch.argsort(
                    self.reranker.scores(q, self.vectors[retrieved]), descending=True
                )
            hits += self.needed(task) in [retrieved[int(i)] for i in order[:k]]
        return hits / max(len(tasks), 1)


@lru_cache(maxsize=4)
def shared_world(num_people: int = 60, seed: int = 0, merge_threshold: float = 0.4) -> MemoryWorld:
    """One world (and reranker) per process and setting, shared by every `RMMEnv`."""
    return MemoryWorld(num_people, seed, merge_threshold)


def cite_by_extraction(task: Task, texts: list[str]) -> tuple[str, list[int]]:
    """The frozen extractive answerer: cites the shown memories (positions) that name the
    person and state the attribute; answers with the value the first of them states."""
    person, attribute = task.fields["person"], task.fields["attribute"]
    cited, answer = [], NONE
    for pos, text in enumerate(texts):
        if person not in text:
            continue
        values = [m.group(1) for p in EXTRACT[attribute] for m in re.finditer(p, text)]
        if values:
            cited.append(pos)
            if len(cited) == 1:
                answer = NONE if values[0] == "has no hobby" else values[0]
    return answer, cited


def make_rmm_tasks(
    split: str,
    n: int,
    seed: int = 0,
    *,
    num_people: int = 60,
    merge_threshold: float = 0.4,
    corpus_seed: int = 0,
) -> list[Task]:
    """The first `n` questions about `split` people of the shared world `corpus_seed` (`seed`
    does not change them: the world fixes its questions)."""
    tasks = shared_world(num_people, corpus_seed, merge_threshold).questions[split]
    if n > len(tasks):
        raise ValueError(f"{len(tasks)} {split} questions exist for num_people={num_people}")
    return tasks[:n]


class RMMEnv:
    """One question over the reranker's M picked memories; the answer cites memory ids."""

    tools: list[Tool] = []

    def __init__(
        self,
        num_people: int = 60,
        merge_threshold: float = 0.4,
        online: bool = True,
        corpus_seed: int = 0,
    ) -> None:
        self.world = shared_world(num_people, corpus_seed, merge_threshold)
        self.online = online  # learn from this env's citations
        self.task: Task | None = None
        self.shown: list[int] = []

    def reset(self, task: Task, seed: int) -> Observation:
        self.task = task
        self.world.reranker.generator.manual_seed(seed)
        self.q, self.retrieved, self.shown = self.world.show(task, sample=True)
        listing = "\n".join(
            f"[{k + 1}] {self.world.memories[i].text}" for k, i in enumerate(self.shown)
        )
        text = (
            f"Memories:\n{listing}\n\nQuestion: {task.prompt}\n\nCite the memories you use as "
            "<cite>numbers</cite>, then answer as <answer>answer</answer>."
        )
        return Observation(messages=[{"role": "user", "content": text}])

    def step(self, action: Action) -> StepResult:
        """EM reward; the citations train the reranker (when `online`). Missing or malformed
        citations count as an invalid action and cite nothing."""
        assert self.task is not None, "reset first"
        info: dict[str, float] = {}
        found = _CITE.search(action.raw or "")
        cited: set[int] = set()
        if found:
            for part in re.split(r"[,\s]+", found.group(1).strip()):
                if part.isdigit() and 1 <= int(part) <= len(self.shown):
                    cited.add(self.shown[int(part) - 1])
        if not found or not cited:
            info["invalid_action"] = 1
        if self.online:
            self.world.learn(self.q, self.retrieved, self.shown, cited)
        text = action.text if action.kind == "answer" else ""
        score = exact_match(text, self.task.answers) if text else 0.0
        info["success"] = score
        return StepResult(None, score, True, info=info)

    def expert_turn(self) -> str:
        assert self.task is not None, "reset first"
        texts = [self.world.memories[i].text for i in self.shown]
        answer, cited = cite_by_extraction(self.task, texts)
        ids = ", ".join(str(p + 1) for p in cited) or "1"
        return f"<cite>{ids}</cite><answer>{answer}</answer>"


def online_reflection(world: MemoryWorld, tasks: list[Task], passes: int, seed: int = 0) -> dict:
    """RMM's retrospective loop with the frozen extractive answerer: pick, cite, update."""
    rng = random.Random(seed)
    losses, cited_share = [], []
    for _ in range(passes):
        order = list(tasks)
        rng.shuffle(order)
        for task in order:
            q, retrieved, shown = world.show(task, sample=True)
            _, cited = cite_by_extraction(task, [world.memories[i].text for i in shown])
            losses.append(world.learn(q, retrieved, shown, {shown[p] for p in cited}))
            cited_share.append(len(cited) / len(shown))
    n = max(len(losses), 1)
    return {"updates": len(losses), "loss": sum(losses) / n, "cited_share": sum(cited_share) / n}
