"""Shared retrieval fixtures: a toy corpus with known answers, the built-in corpus, one embedder.

The MiniLM model is loaded once per session and its document embeddings are reused across
index kinds, which keeps the dense tests to a few seconds on two CPU cores.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from agentic_rl.retrieval.corpus import load_corpus, write_builtin_corpus, write_corpus
from agentic_rl.retrieval.dense import MiniLMEmbedder

SMALL_WORLD = 50  # entities in the built-in corpus used by tests (70 documents)

TOY_DOCS = [
    {
        "id": "car",
        "contents": '"Car repair"\nA mechanic fixes broken automobiles and replaces worn engine parts.',
    },
    {
        "id": "poem",
        "contents": '"Engine (poem)"\nEngine, engine, number nine: a children\'s rhyme about a train engine.',
    },
    {"id": "kettle", "contents": '"Kettle"\nA kettle boils water for tea on the stove.'},
    {
        "id": "zorvan",
        "contents": '"Zorvan Kettle"\nZorvan Kettle is a painter born in Brimholt in 1874.',
    },
    {
        "id": "felines",
        "contents": '"Felines"\nCats are small domesticated carnivores that people keep as pets.',
    },
    {
        "id": "stevens",
        "contents": '"Cat Stevens"\nCat Stevens is a singer-songwriter; his albums sold millions.',
    },
    {"id": "brimholt", "contents": '"Brimholt"\nBrimholt is a town on the river Ness.'},
    {
        "id": "python",
        "contents": '"Python"\nPython is a programming language used for scripting and data science.',
    },
]


@pytest.fixture(scope="session")
def toy_corpus(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("toy") / "toy.jsonl"
    write_corpus(path, TOY_DOCS)
    return path


@pytest.fixture(scope="session")
def small_world() -> int:
    return SMALL_WORLD


@pytest.fixture(scope="session")
def builtin_corpus(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("builtin") / "corpus.jsonl"
    write_builtin_corpus(path, num_entities=SMALL_WORLD, seed=0)
    return path


@pytest.fixture(scope="session")
def embedder() -> MiniLMEmbedder:
    model = MiniLMEmbedder(batch_size=32)
    model.load()
    return model


@pytest.fixture(scope="session")
def builtin_embeddings(builtin_corpus: Path, embedder: MiniLMEmbedder) -> np.ndarray:
    return embedder.encode([doc["contents"] for doc in load_corpus(builtin_corpus)])
