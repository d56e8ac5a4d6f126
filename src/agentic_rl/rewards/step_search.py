"""StepSearch step rewards: information gain and redundancy penalty per search step.

StepSearch (Wang et al. 2025, "StepSearch: Igniting LLMs Search Ability via Step-Wise Proximal
Policy Optimization") rewards each search step t by how much closer its retrieved documents
bring the agent to the gold support documents, and penalises re-retrieving documents:

    m_t(j)  = max over step t's documents d of cos_tfidf(d, gold_j)
    IG_t    = (1 / |gold|) * sum_j max(m_t(j) - M_{t-1}(j), 0),  M_t(j) = max(M_{t-1}(j), m_t(j)),
              M_0 = 0
    RP_t    = (number of step t's documents retrieved before) / (number of step t's documents)
    r_t     = 0.6 * (IG_t - RP_t)   placed at step t's </search>

The cosine is the reference's `subm_tfidf_cosine`: a TF-IDF model (scikit-learn defaults:
lower-case, tokens of 2+ word characters, raw term counts, smooth idf
idf(w) = ln((1 + n) / (1 + df(w))) + 1, rows l2-normalised) fitted on the document and the gold
documents together (n = 1 + |gold|), then cos(d, gold_j) = v_d . v_j, floored at 0. Texts are
SQuAD-normalised first, as in the reference. scikit-learn is used when installed, else an equal
numpy implementation. "Retrieved before" compares normalised document texts and, as in the
reference, also counts a repeat within the same step.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Sequence
from typing import Literal

import numpy as np

from agentic_rl.rewards.qa import normalize_answer
from agentic_rl.rewards.search_format import DEFAULT_TAGS, SearchTags

Backend = Literal["auto", "sklearn", "numpy"]
STEP_WEIGHT = 0.6
_TOKEN = re.compile(r"(?u)\b\w\w+\b")  # scikit-learn's default token_pattern
_DOC_START = re.compile(r"(?m)^\s*Doc \d+\s*\(Title:")


def _have_sklearn() -> bool:
    try:
        import sklearn  # noqa: F401
    except ImportError:
        return False
    return True


def _numpy_tfidf(texts: list[str]) -> np.ndarray:
    counts = [Counter(_TOKEN.findall(text.lower())) for text in texts]
    vocab = sorted(set().union(*counts))
    if not vocab:
        return np.zeros((len(texts), 0))
    index = {word: i for i, word in enumerate(vocab)}
    tf = np.zeros((len(texts), len(vocab)))
    for row, counter in enumerate(counts):
        for word, count in counter.items():
            tf[row, index[word]] = count
    df = (tf > 0).sum(axis=0)
    idf = np.log((1 + len(texts)) / (1 + df)) + 1
    weights = tf * idf
    norms = np.linalg.norm(weights, axis=1, keepdims=True)
    return np.divide(weights, norms, out=np.zeros_like(weights), where=norms > 0)


def _sklearn_tfidf(texts: list[str]) -> np.ndarray:
    from sklearn.feature_extraction.text import TfidfVectorizer

    try:
        return TfidfVectorizer().fit_transform(texts).toarray()
    except ValueError:  # empty vocabulary: no token of two or more characters
        return np.zeros((len(texts), 0))


def tfidf_cosines(doc: str, golds: Sequence[str], backend: Backend = "auto") -> list[float]:
    """cos_tfidf(doc, gold_j) for each gold, the model fitted on [doc, *golds] (see module)."""
    if not golds:
        return []
    if not doc.strip():
        return [0.0] * len(golds)
    if backend == "auto":
        backend = "sklearn" if _have_sklearn() else "numpy"
    texts = [doc, *golds]
    matrix = _sklearn_tfidf(texts) if backend == "sklearn" else _numpy_tfidf(texts)
    if matrix.shape[1] == 0:
        return [0.0] * len(golds)
    return [max(float(matrix[0] @ matrix[j]), 0.0) for j in range(1, len(texts))]


def information_gains(
    steps: Sequence[Sequence[str]], golds: Sequence[str], backend: Backend = "auto"
) -> list[float]:
    """IG_t for each step (a list of retrieved document texts per step); [] without golds."""
    gold_texts = [normalize_answer(g) for g in golds]
    if not gold_texts:
        return [0.0] * len(steps)
    running = [0.0] * len(gold_texts)
    gains = []
    for docs in steps:
        current = [0.0] * len(gold_texts)
        for doc in docs:
            for j, cos in enumerate(tfidf_cosines(normalize_answer(doc), gold_texts, backend)):
                current[j] = max(current[j], cos)
        gains.append(
            sum(max(c - m, 0.0) for c, m in zip(current, running, strict=True)) / len(gold_texts)
        )
        running = [max(c, m) for c, m in zip(current, running, strict=True)]
    return gains


def redundancy_penalties(steps: Sequence[Sequence[str]]) -> list[float]:
    """RP_t: share of step t's documents already retrieved (earlier, or earlier in step t)."""
    seen: set[str] = set()
    penalties = []
    for docs in steps:
        repeats = 0
        for doc in docs:
            key = normalize_answer(doc)
            repeats += key in seen
            seen.add(key)
        penalties.append(repeats / len(docs) if docs else 0.0)
    return penalties


def step_search_rewards(
    steps: Sequence[Sequence[str]],
    golds: Sequence[str],
    weight: float = STEP_WEIGHT,
    backend: Backend = "auto",
) -> list[float]:
    """r_t = weight * (IG_t - RP_t) for each search step."""
    gains = information_gains(steps, golds, backend)
    penalties = redundancy_penalties(steps)
    return [weight * (g - p) for g, p in zip(gains, penalties, strict=True)]


def split_documents(information: str) -> list[str]:
    """The documents of one rendered result block (`Doc 1(Title: "T") text` lines, as
    tools/search.py writes them); a block without that layout is one document."""
    starts = [m.start() for m in _DOC_START.finditer(information)]
    if not starts:
        return [information.strip()] if information.strip() else []
    bounds = [*starts, len(information)]
    docs = []
    for a, b in zip(bounds, bounds[1:], strict=False):
        text = information[a:b].strip()
        # drop the "Doc i(Title: " prefix, keep the title and the text
        docs.append(re.sub(r"^Doc \d+\s*\(Title:\s*", "", text).replace(")", "", 1).strip())
    return docs


def search_steps(text: str, tags: SearchTags = DEFAULT_TAGS) -> list[tuple[str, list[str]]]:
    """(query, retrieved documents) for each `<search>q</search>` followed by its result span."""
    pattern = (
        re.escape(tags.search[0])
        + r"(.*?)"
        + re.escape(tags.search[1])
        + r"\s*"
        + re.escape(tags.result[0])
        + r"(.*?)"
        + re.escape(tags.result[1])
    )
    return [
        (query.strip(), split_documents(info))
        for query, info in re.findall(pattern, text, flags=re.DOTALL)
    ]
