"""ZeroSearch: an LLM simulates the search engine during training.

ZeroSearch (Sun et al. 2025, "ZeroSearch: Incentivize the Search Capability of LLMs without
Searching") replaces the real engine with an LLM asked, per query, for "five useful" or "five
noisy" documents of about 30 words; the prompt names the user's question and its gold answer, so
useful documents can contain it. Which kind is served is drawn per query with probability
`p_noisy`, raised over training by the curriculum

    p_noisy(i) = p_s + (b^(i/m) - 1) / (b - 1) * (p_e - p_s),   b = 4, p_s = 0, p_e = 0.5

(step i of m; `noise_at_progress` takes f = i / m), so the policy first learns the search format on easy, helpful results and then
learns to cope with noise. `SimulatedSearchEngine.retrieve` returns exactly what the real
retriever client returns (Search-R1 `{"document": {"id", "contents"}, "score"}` rows) and
`SimulatedSearchTool` is the agent-facing `search` tool, rendered as Search-R1 does.

The engine is any `Generator` (`generate(prompts: list[list[int]], params) -> list[Completion]`,
backends/hf.py) plus its tokenizer: the bundled model by default, or a second model. Generated
text is parsed leniently: numbered `Doc i:` blocks, else one document per line; fragments are
dropped, so a malformed generation yields fewer documents, never an error.
"""

from __future__ import annotations

import random
import re
import threading
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from agentic_rl.model.tokens import encode_prompt, encode_text
from agentic_rl.tools.search import SEARCH_DESCRIPTION, answer_search, search_parameters
from agentic_rl.types import SamplingParams

Results = list[list[dict[str, Any]]]

USEFUL_PROMPT = (
    "You are the Google search engine.\n"
    "Given a query, you need to generate {count} useful documents for the query.\n\n"
    'The user is trying to answer the question: "{question}" whose answer is {answer}.\n'
    "Each document should contain about {words} words, and these documents should contain useful "
    "information.\n\nQuery: {query}\nUseful Output:\n"
)
NOISY_PROMPT = (
    "You are the Google search engine.\n"
    "Given a query, you need to generate {count} noisy documents for the query.\n\n"
    "{context}Each document should contain about {words} words, and these documents should "
    "contain noisy information.\n\nQuery: {query}\nNoisy Output:\n"
)
_COUNT_WORDS = ("one", "two", "three", "four", "five")
_MARKER = re.compile(
    r"(?im)^[ \t]*(?:[*#]+[ \t]*)?"  # optional markdown bold / heading
    r"(?:doc(?:ument)?[ \t]*\d+|\d+)"  # "Doc 3", "Document 3" or "3"
    r"[ \t]*(?:\*+[ \t]*)?[:.)\-](?:[ \t]*\*+)?"  # separator, maybe wrapped in bold
)
_INLINE_MARKER = re.compile(r"(?i)\bdoc(?:ument)?\s*\d+\s*[:.)\-]")
_SPECIAL = re.compile(r"<\|[^|<>]{0,40}\|>|</?s>")


def noise_probability(
    step: int, total_steps: int, p_start: float = 0.0, p_end: float = 0.5, base: float = 4.0
) -> float:
    """ZeroSearch's curriculum: p_s + (base^(i/m) - 1) / (base - 1) * (p_e - p_s), i in [0, m]."""
    if total_steps <= 0:
        raise ValueError(f"total_steps must be > 0, got {total_steps}")
    return noise_at_progress(step / total_steps, p_start, p_end, base)


def noise_at_progress(
    progress: float, p_start: float = 0.0, p_end: float = 0.5, base: float = 4.0
) -> float:
    """The same curriculum at a fraction of training done, f = i / m clamped to [0, 1]:
    p_s + (base^f - 1) / (base - 1) * (p_e - p_s)."""
    if base <= 1:
        raise ValueError(f"base must be > 1, got {base}")
    f = min(max(float(progress), 0.0), 1.0)
    return p_start + (base**f - 1) / (base - 1) * (p_end - p_start)


def parse_documents(
    text: str, max_docs: int = 5, min_words: int = 4, max_words: int = 60
) -> list[str]:
    """Documents in generated text: `Doc 1: ...` / `1. ...` blocks, else non-empty lines.

    Special tokens are removed, whitespace collapsed, blocks under `min_words` words or without
    letters dropped, repeats dropped, each cut to `max_words` words; at most `max_docs`."""
    text = _SPECIAL.sub(" ", text or "")
    starts = [m for m in _MARKER.finditer(text)]
    if starts:
        bounds = [(m.end(), nxt.start()) for m, nxt in zip(starts, starts[1:], strict=False)]
        pieces = [text[a:b] for a, b in bounds] + [text[starts[-1].end() :]]
    else:
        pieces = text.splitlines()
    docs: list[str] = []
    for piece in pieces:
        words = _INLINE_MARKER.sub(" ", piece).split()
        if len(words) < min_words or not re.search(r"[A-Za-z]", piece):
            continue
        doc = " ".join(words[:max_words])
        if doc not in docs:
            docs.append(doc)
        if len(docs) == max_docs:
            break
    return docs


def _title(doc: str, words: int = 5) -> str:
    title = " ".join(doc.replace('"', "").split()[:words])
    return title.rstrip(".,;:!?") or "Result"


@dataclass
class SimulatedSearchEngine:
    """Simulated retrieval with a noise curriculum; thread-safe. See the module docstring.

    `p_noisy` is the current probability of a noisy answer (set it, or call `set_step`; a
    tool may pass its own per call). `answer_in_noisy_prompt` keeps ZeroSearch's noisy prompt,
    which also names the question and answer; False hides them from the noisy prompt.
    `num_docs` and `doc_words` size the request (ZeroSearch: five documents of about 30 words;
    fewer, shorter ones make a CPU-bound simulator proportionally cheaper). `cache_size` > 0
    keeps that many generated answers keyed by the exact prompt (query, question, answer and
    kind), so a repeated query of the same kind costs nothing, as a real engine's cache; 0
    samples every call afresh.
    """

    generator: Any
    tokenizer: Any
    topk: int = 5
    p_noisy: float = 0.0
    max_new_tokens: int = 256
    temperature: float = 0.7
    seed: int = 0
    use_chat_template: bool = True
    answer_in_noisy_prompt: bool = True
    num_docs: int = 5
    doc_words: int = 30
    cache_size: int = 0
    counts: dict[str, int] = field(
        default_factory=lambda: {"useful": 0, "noisy": 0, "docs": 0, "cache_hits": 0}
    )
    _rng: random.Random = field(init=False, repr=False)
    _lock: threading.Lock = field(init=False, repr=False, default_factory=threading.Lock)
    _calls: int = field(init=False, default=0)
    _cache: OrderedDict[str, list[str]] = field(init=False, repr=False, default_factory=OrderedDict)
    _pending: list[str] = field(init=False, repr=False, default_factory=list)
    _ready: dict[str, list[str]] = field(init=False, repr=False, default_factory=dict)
    _flush_lock: threading.Lock = field(init=False, repr=False, default_factory=threading.Lock)

    def __post_init__(self) -> None:
        if self.topk < 1:
            raise ValueError(f"topk must be >= 1, got {self.topk}")
        if not 1 <= self.num_docs <= len(_COUNT_WORDS):
            raise ValueError(f"num_docs must be in 1..{len(_COUNT_WORDS)}, got {self.num_docs}")
        if self.doc_words < 1 or self.cache_size < 0:
            raise ValueError("doc_words must be >= 1 and cache_size >= 0")
        self._rng = random.Random(f"zerosearch/{self.seed}")

    def set_step(
        self, step: int, total_steps: int, p_start: float = 0.0, p_end: float = 0.5
    ) -> float:
        """Move the curriculum to training step `step` of `total_steps`; returns p_noisy."""
        self.p_noisy = noise_probability(step, total_steps, p_start, p_end)
        return self.p_noisy

    def build_prompt(self, query: str, question: str, answers: Sequence[str], useful: bool) -> str:
        """The ZeroSearch prompt for one query."""
        answer = ", ".join(answers) if answers else "unknown"
        size = {"count": _COUNT_WORDS[self.num_docs - 1], "words": self.doc_words}
        if useful:
            return USEFUL_PROMPT.format(
                question=question or query, answer=answer, query=query, **size
            )
        context = ""
        if self.answer_in_noisy_prompt and (question or answers):
            context = f'The user is trying to answer the question: "{question or query}" '
            context += f"whose answer is {answer}.\n"
        return NOISY_PROMPT.format(context=context, query=query, **size)

    def _encode(self, prompt: str) -> list[int]:
        if self.use_chat_template and getattr(self.tokenizer, "chat_template", None):
            return encode_prompt(self.tokenizer, [{"role": "user", "content": prompt}])
        return encode_text(self.tokenizer, prompt)

    def draw_kinds(self, n: int, p_noisy: float | None = None) -> list[bool]:
        """`n` draws of the answer kind (True = useful), noisy with probability `p_noisy`
        (None = the engine's)."""
        p = self.p_noisy if p_noisy is None else p_noisy
        with self._lock:
            return [self._rng.random() >= p for _ in range(n)]

    def submit(self, query: str, question: str, answers: Sequence[str], useful: bool) -> None:
        """Queue a query for the next `flush`: many episodes' searches of one turn are then
        generated in one batched call instead of one call each."""
        prompt = self.build_prompt(query, question, answers, useful)
        with self._lock:
            if prompt not in self._pending and prompt not in self._cache:
                self._pending.append(prompt)

    def flush(self) -> int:
        """Generate every queued prompt in one call; `retrieve` then serves them (until the next
        flush that has work). Returns how many prompts were generated."""
        with self._flush_lock:
            with self._lock:
                prompts, self._pending = self._pending, []
                seed = self._rng.randrange(2**31)
            if not prompts:
                return 0
            docs = self._generate(prompts, seed)
            with self._lock:
                self._ready = dict(zip(prompts, docs, strict=True))
            for prompt, found in zip(prompts, docs, strict=True):
                self._store(prompt, found)
            return len(prompts)

    def _cached(self, prompt: str) -> list[str] | None:
        with self._lock:
            if prompt in self._ready:  # generated by the last batch for this very search
                return self._ready[prompt]
            docs = self._cache.get(prompt)
            if docs is not None:
                self._cache.move_to_end(prompt)
                self.counts["cache_hits"] += 1
            return docs

    def _store(self, prompt: str, docs: list[str]) -> None:
        if not self.cache_size:
            return
        with self._lock:
            self._cache[prompt] = docs
            while len(self._cache) > self.cache_size:
                self._cache.popitem(last=False)

    def retrieve(
        self,
        queries: list[str],
        topk: int | None = None,
        *,
        question: str = "",
        answers: Sequence[str] = (),
        useful: Sequence[bool] | None = None,
        p_noisy: float | None = None,
    ) -> Results:
        """Generated documents per query, as the retriever client returns them.

        `useful` forces the kind per query; by default it is drawn with `p_noisy` (this call's,
        else the engine's). Scores are 1.0 (the simulator has no ranking). One generate call
        serves all queries whose answer is not cached."""
        if not queries:
            return []
        k = min(topk or self.topk, self.num_docs)
        kinds = list(useful) if useful is not None else self.draw_kinds(len(queries), p_noisy)
        if len(kinds) != len(queries):
            raise ValueError(f"{len(queries)} queries but {len(kinds)} useful flags")
        texts = [
            self.build_prompt(q, question, answers, kind)
            for q, kind in zip(queries, kinds, strict=True)
        ]
        found = [self._cached(text) for text in texts]
        missing = [i for i, docs in enumerate(found) if docs is None]
        with self._lock:
            self._calls += 1
            calls, seed = self._calls, self._rng.randrange(2**31)
        if missing:
            generated = self._generate([texts[i] for i in missing], seed)
            for i, docs in zip(missing, generated, strict=True):
                found[i] = docs
                self._store(texts[i], docs)
        results: Results = []
        for index, (docs, kind) in enumerate(zip(found, kinds, strict=True)):
            assert docs is not None
            docs = docs[:k]
            results.append(
                [
                    {
                        "document": {
                            "id": f"sim-{calls}-{index}-{rank}",
                            "contents": f'"{_title(doc)}"\n{doc}',
                        },
                        "score": 1.0,
                    }
                    for rank, doc in enumerate(docs)
                ]
            )
            with self._lock:
                self.counts["useful" if kind else "noisy"] += 1
                self.counts["docs"] += len(docs)
        return results

    def _generate(self, texts: list[str], seed: int) -> list[list[str]]:
        """Documents parsed from one generation per prompt text."""
        params = SamplingParams(
            max_new_tokens=self.max_new_tokens, temperature=self.temperature, seed=seed
        )
        completions = self.generator.generate([self._encode(t) for t in texts], params)
        if len(completions) != len(texts):
            raise RuntimeError(
                f"simulator generator returned {len(completions)} completions for "
                f"{len(texts)} prompts"
            )
        out = []
        for completion in completions:
            text = completion.text or self.tokenizer.decode(
                completion.token_ids, skip_special_tokens=True
            )
            out.append(parse_documents(text, max_docs=self.num_docs))
        return out

    def tool(
        self,
        question: str = "",
        answers: Sequence[str] = (),
        topk: int = 3,
        p_noisy: float | None = None,
    ) -> SimulatedSearchTool:
        """A `search` tool bound to this engine (one per env; call `set_task` on reset)."""
        return SimulatedSearchTool(
            self, question=question, answers=list(answers), topk=topk, p_noisy=p_noisy
        )


@dataclass
class SimulatedSearchTool:
    """Tool "search" answered by a `SimulatedSearchEngine` for the current task's question.
    `p_noisy` (None = the engine's) lets many tools share one engine, each at its own point of
    the curriculum."""

    engine: SimulatedSearchEngine
    question: str = ""
    answers: list[str] = field(default_factory=list)
    topk: int = 3
    p_noisy: float | None = None
    name: str = "search"
    description: str = SEARCH_DESCRIPTION
    parameters: dict[str, Any] = field(default_factory=search_parameters)
    result_tag: str = "information"
    _pinned: dict[str, bool] = field(default_factory=dict, repr=False)

    def set_task(self, question: str, answers: Sequence[str]) -> None:
        """Point the simulator at a new task (its prompts name this question and answer)."""
        self.question, self.answers = question, list(answers)
        self._pinned.clear()

    def prepare(self, query: str) -> None:
        """Draw this query's kind now and queue it on the engine (`engine.flush()` generates the
        queue in one batch); the next `retrieve` of the query uses that kind and generation."""
        (useful,) = self.engine.draw_kinds(1, self.p_noisy)
        self._pinned[query] = useful
        self.engine.submit(query, self.question, self.answers, useful)

    def retrieve(self, queries: list[str], topk: int | None = None) -> Results:
        pinned = [self._pinned.pop(q, None) for q in queries]
        fresh = iter(self.engine.draw_kinds(pinned.count(None), self.p_noisy))
        return self.engine.retrieve(
            queries,
            topk or self.topk,
            question=self.question,
            answers=self.answers,
            useful=[kind if kind is not None else next(fresh) for kind in pinned],
        )

    def __call__(self, query: str) -> str:
        return answer_search(self.retrieve, query)
