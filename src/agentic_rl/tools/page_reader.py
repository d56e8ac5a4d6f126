"""Condense long web pages for the agent: HTML -> text -> chunks -> the relevant ones.

DeepResearcher (Zheng et al. 2025) and ASearcher (Gao et al. 2025) do not paste whole pages into
the context: a reading step keeps what bears on the question. `PageReader` does it without a
model: strip the HTML to text (stdlib `html.parser`), split it into chunks of about
`chunk_chars`, score each chunk against the question with TF-IDF

    score(c) = sum over distinct question terms t of tf(t, c) * idf(t) / sqrt(len(c)),
    idf(t) = ln((1 + N) / (1 + df(t))) + 1     (N chunks, df = chunks containing t)

and keep the best chunks, in page order, within `max_chars`. An optional `LLMSummarizer` (any
Generator + tokenizer) then rewrites the kept text as notes for the question.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from dataclasses import dataclass
from html.parser import HTMLParser
from typing import Any, Protocol

from agentic_rl.types import SamplingParams

_SKIP = {"script", "style", "noscript", "template", "svg", "head"}
_BLOCK = {
    "p", "div", "br", "li", "ul", "ol", "tr", "table", "section", "article", "header", "footer",
    "h1", "h2", "h3", "h4", "h5", "h6", "blockquote", "pre", "title", "nav", "aside", "dd", "dt",
}  # fmt: skip
_WORD = re.compile(r"\w+")
_STOP_WORDS = (
    "a an the of in on at to for and or is are was were be by with what which who whom whose "
    "when where why how did does do this that from as it its into about"
)
_STOP = frozenset(_STOP_WORDS.split())
GAP = "\n...\n"


class _TextExtractor(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.parts: list[str] = []
        self.skip_depth = 0
        self.title = ""
        self._in_title = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "title":
            self._in_title = True
        if tag in _SKIP:
            self.skip_depth += 1
        elif tag in _BLOCK:
            self.parts.append("\n")

    def handle_endtag(self, tag: str) -> None:
        if tag == "title":
            self._in_title = False
        if tag in _SKIP:
            self.skip_depth = max(self.skip_depth - 1, 0)
        elif tag in _BLOCK:
            self.parts.append("\n")

    def handle_data(self, data: str) -> None:
        if self._in_title:
            self.title += data
        if not self.skip_depth:
            self.parts.append(data)


def looks_like_html(text: str) -> bool:
    """A cheap check: the text has tags such as <p>, <div>, <html> or <body>."""
    return bool(re.search(r"<(html|body|p|div|span|br|h[1-6]|li|table|a)\b", text, re.I))


def html_to_text(html: str) -> str:
    """Visible text of an HTML page: scripts/styles/head dropped, one line per block element,
    entities decoded, runs of spaces collapsed, blank lines removed. Malformed HTML is fine."""
    parser = _TextExtractor()
    try:
        parser.feed(html)
        parser.close()
    except Exception:  # html.parser is lenient; keep whatever was read on a real failure
        pass
    text = "".join(parser.parts)
    lines = (" ".join(line.split()) for line in text.splitlines())
    return "\n".join(line for line in lines if line)


def html_title(html: str) -> str:
    """The page's <title> text ("" if none)."""
    parser = _TextExtractor()
    try:
        parser.feed(html)
    except Exception:
        return ""
    return " ".join(parser.title.split())


def chunk_text(text: str, chunk_chars: int = 600) -> list[str]:
    """Split text into chunks of at most `chunk_chars`: whole lines are merged while they fit,
    longer lines are split at sentence ends, then at spaces (a word longer than the limit is cut).
    """
    if chunk_chars < 20:
        raise ValueError(f"chunk_chars must be >= 20, got {chunk_chars}")
    pieces: list[str] = []
    for line in text.splitlines():
        line = line.strip()
        while len(line) > chunk_chars:
            window = line[:chunk_chars]
            cut = max(window.rfind(". "), window.rfind("? "), window.rfind("! "))
            cut = cut + 1 if cut > chunk_chars // 3 else window.rfind(" ")
            cut = cut if cut > 0 else chunk_chars
            pieces.append(line[:cut].strip())
            line = line[cut:].strip()
        if line:
            pieces.append(line)
    chunks: list[str] = []
    for piece in pieces:
        if chunks and len(chunks[-1]) + 1 + len(piece) <= chunk_chars:
            chunks[-1] += "\n" + piece
        else:
            chunks.append(piece)
    return chunks


def _terms(text: str) -> list[str]:
    return [w for w in _WORD.findall(text.lower()) if w not in _STOP]


def score_chunks(chunks: list[str], question: str) -> list[float]:
    """TF-IDF relevance of each chunk to the question (see the module docstring)."""
    query = set(_terms(question))
    counts = [Counter(_terms(chunk)) for chunk in chunks]
    n = len(chunks)
    scores = []
    for chunk, counter in zip(chunks, counts, strict=True):
        total = 0.0
        for term in query:
            if counter[term]:
                df = sum(1 for c in counts if c[term])
                total += counter[term] * (math.log((1 + n) / (1 + df)) + 1)
        scores.append(total / math.sqrt(max(len(chunk), 1)))
    return scores


class Summarizer(Protocol):
    def summarize(self, question: str, text: str) -> str: ...


@dataclass
class LLMSummarizer:
    """Rewrites page text as notes for the question with a Generator (greedy by default)."""

    generator: Any
    tokenizer: Any
    max_new_tokens: int = 256
    temperature: float = 0.0

    PROMPT = (
        "Read the web page excerpt and write down, briefly, the facts in it that help answer the "
        "question. If nothing helps, write 'No relevant information.'\n\n"
        "Question: {question}\n\nPage:\n{text}\n\nRelevant information:"
    )

    def summarize(self, question: str, text: str) -> str:
        from agentic_rl.model.tokens import encode_prompt, encode_text

        prompt = self.PROMPT.format(question=question or "(none given)", text=text)
        if getattr(self.tokenizer, "chat_template", None):
            ids = encode_prompt(self.tokenizer, [{"role": "user", "content": prompt}])
        else:
            ids = encode_text(self.tokenizer, prompt)
        params = SamplingParams(max_new_tokens=self.max_new_tokens, temperature=self.temperature)
        completion = self.generator.generate([ids], params)[0]
        out = self.tokenizer.decode(completion.token_ids, skip_special_tokens=True).strip()
        return out or text


@dataclass
class PageReader:
    """Condense a page (HTML or text) to at most `max_chars` of the parts relevant to a question.

    Short pages come back whole. Without a question the page's first chunks are kept. Skipped
    stretches are marked with "...". `summarizer`, if set, rewrites the kept text."""

    max_chars: int = 3000
    chunk_chars: int = 600
    summarizer: Summarizer | None = None

    def read(self, page: str, question: str = "") -> str:
        text = html_to_text(page) if looks_like_html(page) else page.strip()
        if len(text) > self.max_chars:
            text = self.condense(text, question)
        if self.summarizer is not None and text:
            text = self.summarizer.summarize(question, text)
        return text

    def condense(self, text: str, question: str) -> str:
        """The best-scoring chunks in page order, joined with "..." gaps, within max_chars."""
        # A chunk and its "..." gap must fit the budget, or a full-size chunk is never kept.
        chunks = chunk_text(text, max(20, min(self.chunk_chars, self.max_chars - len(GAP))))
        scores = score_chunks(chunks, question) if question.strip() else [0.0] * len(chunks)
        # best first; ties (and no question) keep page order, so the lead is preferred
        order = sorted(range(len(chunks)), key=lambda i: (-scores[i], i))
        kept: list[int] = []
        used = 0
        for i in order:
            cost = len(chunks[i]) + len(GAP)
            if used + cost > self.max_chars:
                continue
            kept.append(i)
            used += cost
        kept.sort()
        out, previous = [], -1
        for i in kept:
            if out and i != previous + 1:
                out.append(GAP.strip("\n"))
            out.append(chunks[i])
            previous = i
        return "\n".join(out)
