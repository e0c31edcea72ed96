"""A small dense retriever: embedder + FAISS inner-product index, persisted on disk.

The index directory holds ``index.faiss`` (FAISS's own format), ``chunks.json`` and
``meta.json``; each is written to a temporary file and renamed. A directory that fails
its check (missing file, other embedder, count mismatch, unreadable) is rebuilt with a
warning. Nothing is pickled.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import faiss
import numpy as np
from tqdm.auto import tqdm

from ragcache.atomic import atomic_write_bytes
from ragcache.app.corpus import Chunk
from ragcache.hashing import hash_value

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Retrieved:
    chunk: Chunk
    score: float  # cosine similarity in [-1, 1]


class Retriever:
    """Top-k dense retrieval over chunks.

    Args:
        chunks: the passages.
        embedder: a :class:`ragcache.models.Embedder` (L2-normalised vectors).
        index_dir: where to keep the index; ``None`` keeps it in memory only.
    """

    def __init__(self, chunks: Sequence[Chunk], embedder, index_dir: str | Path | None = None,
                 batch_size: int = 64, progress: bool = True) -> None:
        if not chunks:
            raise ValueError("no chunks to index: give at least one document")
        self.chunks = list(chunks)
        self.embedder = embedder
        self.index_dir = Path(index_dir) if index_dir else None
        self.loaded_from_disk = False
        key = hash_value([embedder.fingerprint, [(c.id, c.content_hash) for c in self.chunks]])
        self._key = key
        if self.index_dir and self._load():
            self.loaded_from_disk = True
            return
        vecs = []
        bar = tqdm(total=len(self.chunks), desc="Embedding chunks", unit="chunk", disable=not progress)
        for i in range(0, len(self.chunks), batch_size):
            batch = self.chunks[i:i + batch_size]
            vecs.append(embedder.encode([c.text for c in batch]))
            bar.update(len(batch))
        bar.close()
        mat = np.concatenate(vecs).astype(np.float32)
        self.index = faiss.IndexFlatIP(mat.shape[1])
        self.index.add(mat)
        if self.index_dir:
            self._save()

    def _save(self) -> None:
        d = self.index_dir
        d.mkdir(parents=True, exist_ok=True)
        atomic_write_bytes(d / "index.faiss", faiss.serialize_index(self.index).tobytes())
        chunks = [{"id": c.id, "text": c.text, "source": c.source} for c in self.chunks]
        atomic_write_bytes(d / "chunks.json", json.dumps(chunks).encode())
        meta = {"key": self._key, "count": len(self.chunks), "embedder": self.embedder.name}
        atomic_write_bytes(d / "meta.json", json.dumps(meta).encode())  # written last: marks completeness

    def _load(self) -> bool:
        d = self.index_dir
        try:
            meta = json.loads((d / "meta.json").read_text())
            if meta.get("key") != self._key:
                return False
            index = faiss.deserialize_index(np.frombuffer((d / "index.faiss").read_bytes(), dtype=np.uint8))
            if index.ntotal != len(self.chunks) or index.d != self.embedder.dim:
                raise ValueError(f"index holds {index.ntotal} vectors of dim {index.d}")
        except FileNotFoundError:
            return False
        except (OSError, ValueError, RuntimeError) as e:
            log.warning("index under %s is unreadable (%s); rebuilding it", d, e)
            return False
        self.index = index
        return True

    def search(self, query: str, k: int = 4) -> list[Retrieved]:
        """Top-``k`` chunks by cosine similarity, best first.

        Raises:
            ValueError: for an empty query or ``k < 1``.
        """
        if not query or not query.strip():
            raise ValueError("query is empty: give a question")
        if k < 1:
            raise ValueError(f"k must be >= 1, got {k}")
        vec = self.embedder.encode([query])
        scores, ids = self.index.search(vec, min(k, len(self.chunks)))
        return [Retrieved(self.chunks[i], float(s)) for s, i in zip(scores[0], ids[0]) if i >= 0]

    @classmethod
    def load_chunks(cls, index_dir: str | Path) -> list[Chunk] | None:
        """Chunks saved with an index, or ``None`` when absent or unreadable."""
        try:
            data = json.loads((Path(index_dir) / "chunks.json").read_text())
            return [Chunk(c["id"], c["text"], c["source"]) for c in data]
        except (OSError, ValueError, KeyError, TypeError):
            return None
