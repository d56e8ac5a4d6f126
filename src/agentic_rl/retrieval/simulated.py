"""ZeroSearch: an LLM simulates the search engine during training.

ZeroSearch (Sun et al. 2025, "ZeroSearch: Incentivize the Search Capability of LLMs without
Searching") replaces the real engine with an LLM asked, per query, for "five useful" or "five
noisy" documents of about 30 words; the prompt names the user's question and its gold answer, so
useful documents can contain it. Which kind is served is drawn per query with probability
`p_noisy`, raised over training by the curriculum

    p_noisy(i) = p_s + (b^(i/m) - 1) / (b - 1) * (p_e - p_s),   b = 4, p_s = 0, p_e = 0.5

(step i of m), so the policy first learns the search format on easy, helpful results and then
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
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from agentic_rl.rollout.chat import encode_prompt, encode_text
from agentic_rl.tools.base import ToolError
from agentic_rl.tools.search import format_results
from agentic_rl.types import SamplingParams

Results = list[list[dict[str, Any]]]

USEFUL_PROMPT = (
    "You are the Google search engine.\n"
    "Given a query, you need to generate five useful documents for the query.\n\n"
    'The user is trying to answer the question: "{question}" whose answer is {answer}.\n'
    "Each document should contain about 30 words, and these documents should contain useful "
    "information.\n\nQuery: {query}\nUseful Output:\n"
)
NOISY_PROMPT = (
    "You are the Google search engine.\n"
    "Given a query, you need to generate five noisy documents for the query.\n\n"
    "{context}Each document should contain about 30 words, and these documents should contain "
    "noisy information.\n\nQuery: {query}\nNoisy Output:\n"
)
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
    if base <= 1:
        raise ValueError(f"base must be > 1, got {base}")
    i = min(max(step, 0), total_steps)
    return p_start + (base ** (i / total_steps) - 1) / (base - 1) * (p_end - p_start)


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

    `p_noisy` is the current probability of a noisy answer (set it, or call `set_step`).
    `answer_in_noisy_prompt` keeps ZeroSearch's noisy prompt, which also names the question and
    answer; False hides them from the noisy prompt.
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
    counts: dict[str, int] = field(default_factory=lambda: {"useful": 0, "noisy": 0, "docs": 0})
    _rng: random.Random = field(init=False, repr=False)
    _lock: threading.Lock = field(init=False, repr=False, default_factory=threading.Lock)
    _calls: int = field(init=False, default=0)

    def __post_init__(self) -> None:
        if self.topk < 1:
            raise ValueError(f"topk must be >= 1, got {self.topk}")
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
        if useful:
            return USEFUL_PROMPT.format(question=question or query, answer=answer, query=query)
        context = ""
        if self.answer_in_noisy_prompt and (question or answers):
            context = f'The user is trying to answer the question: "{question or query}" '
            context += f"whose answer is {answer}.\n"
        return NOISY_PROMPT.format(context=context, query=query)

    def _encode(self, prompt: str) -> list[int]:
        if self.use_chat_template and getattr(self.tokenizer, "chat_template", None):
            return encode_prompt(self.tokenizer, [{"role": "user", "content": prompt}])
        return encode_text(self.tokenizer, prompt)

    def _draw_useful(self, n: int) -> list[bool]:
        with self._lock:
            return [self._rng.random() >= self.p_noisy for _ in range(n)]

    def retrieve(
        self,
        queries: list[str],
        topk: int | None = None,
        *,
        question: str = "",
        answers: Sequence[str] = (),
        useful: Sequence[bool] | None = None,
    ) -> Results:
        """Generated documents per query, as the retriever client returns them.

        `useful` forces the kind per query; by default it is drawn with `p_noisy`. Scores are
        1.0 (the simulator has no ranking). One generate call serves all queries."""
        if not queries:
            return []
        k = min(topk or self.topk, 5)
        kinds = list(useful) if useful is not None else self._draw_useful(len(queries))
        if len(kinds) != len(queries):
            raise ValueError(f"{len(queries)} queries but {len(kinds)} useful flags")
        prompts = [
            self._encode(self.build_prompt(q, question, answers, kind))
            for q, kind in zip(queries, kinds, strict=True)
        ]
        with self._lock:
            self._calls += 1
            seed = self._rng.randrange(2**31)
        params = SamplingParams(
            max_new_tokens=self.max_new_tokens, temperature=self.temperature, seed=seed
        )
        completions = self.generator.generate(prompts, params)
        if len(completions) != len(prompts):
            raise RuntimeError(
                f"simulator generator returned {len(completions)} completions for "
                f"{len(prompts)} prompts"
            )
        results: Results = []
        for index, (completion, kind) in enumerate(zip(completions, kinds, strict=True)):
            text = completion.text or self.tokenizer.decode(
                completion.token_ids, skip_special_tokens=True
            )
            docs = parse_documents(text, max_docs=k)
            results.append(
                [
                    {
                        "document": {
                            "id": f"sim-{self._calls}-{index}-{rank}",
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

    def tool(
        self, question: str = "", answers: Sequence[str] = (), topk: int = 3
    ) -> SimulatedSearchTool:
        """A `search` tool bound to this engine (one per env; call `set_task` on reset)."""
        return SimulatedSearchTool(self, question=question, answers=list(answers), topk=topk)


def _search_parameters() -> dict[str, Any]:
    return {
        "type": "object",
        "properties": {"query": {"type": "string", "description": "The search query."}},
        "required": ["query"],
        "additionalProperties": False,
    }


@dataclass
class SimulatedSearchTool:
    """Tool "search" answered by a `SimulatedSearchEngine` for the current task's question."""

    engine: SimulatedSearchEngine
    question: str = ""
    answers: list[str] = field(default_factory=list)
    topk: int = 3
    name: str = "search"
    description: str = "Search the knowledge base and return the most relevant documents."
    parameters: dict[str, Any] = field(default_factory=_search_parameters)
    result_tag: str = "information"

    def set_task(self, question: str, answers: Sequence[str]) -> None:
        """Point the simulator at a new task (its prompts name this question and answer)."""
        self.question, self.answers = question, list(answers)

    def retrieve(self, queries: list[str], topk: int | None = None) -> Results:
        return self.engine.retrieve(
            queries, topk or self.topk, question=self.question, answers=self.answers
        )

    def __call__(self, query: str) -> str:
        if not isinstance(query, str) or not query.strip():
            raise ToolError("empty search query; write the words to search for")
        results = self.retrieve([query])[0]
        if not results:
            return f"No results found for '{query.strip()}'."
        return format_results(results)
