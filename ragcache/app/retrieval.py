"""A small dense retriever: embedder + FAISS inner-product index, persisted on disk.

The index directory holds ``index.faiss`` (FAISS's own format), ``chunks.json`` and
``meta.json``; each is written to a temporary file and renamed. A directory that fails
its check (missing file, other embedder, count mismatch, unreadable) is rebuilt with a
warning. Nothing is pickled.
"""

from __future__ import annotations

import json
import logging
import shutil
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import faiss
import numpy as np

from ragcache.atomic import atomic_write_bytes
from ragcache.app.corpus import Chunk
from ragcache.hashing import hash_value

log = logging.getLogger(__name__)


class RetrievalEmbedder(Protocol):
    """What the retriever reads of its embedder: a ragcache :class:`~ragcache.models.Embedder` (or
    :class:`ragcache.testing.HashingEmbedder`).

    Attributes:
        name: recorded in the index's ``meta.json``; fingerprint: the index is rebuilt when it differs;
        dim: the vectors' width; max_tokens: word pieces of one text the embedder reads (special tokens
            included), or ``None`` when it does not say (a question is then embedded whole).
    """

    name: str
    fingerprint: str

    @property
    def dim(self) -> int: ...

    @property
    def max_tokens(self) -> int | None: ...

    def count_tokens(self, text: str) -> int:
        """Word pieces of ``text`` (special tokens included), uncut."""
        ...

    def encode(self, texts: list[str]) -> np.ndarray:
        """Unit float32 vectors ``[len(texts), dim]``."""
        ...


@dataclass(frozen=True, slots=True)
class Retrieved:
    chunk: Chunk
    score: float  # cosine similarity in [-1, 1]


@dataclass(frozen=True, slots=True)
class QueryPart:
    """What of a question the retriever embeds.

    Attributes:
        text: the embedded text: the whole question when the embedder reads all of it, else the part
            that asks: its last sentence (split as the answer cache splits it,
            :func:`ragcache.semantic.keying.last_sentence`), or, when even that is too long, the
            question's last words that fit.
        tokens: the question's word pieces (special tokens included); ``None``: not counted (an
            embedder whose :attr:`~ragcache.models.Embedder.max_tokens` is ``None``).
        window: the word pieces the embedder reads (:attr:`~ragcache.models.Embedder.max_tokens`), or ``None``.
    """

    text: str
    tokens: int | None = None
    window: int | None = None

    @property
    def cut(self) -> bool:
        """Whether the question is longer than the embedder reads (only :attr:`text` is embedded)."""
        return self.tokens is not None and self.window is not None and self.tokens > self.window


def query_part(question: str, embedder: RetrievalEmbedder) -> QueryPart:
    """The part of ``question`` to embed for retrieval (:class:`QueryPart`). A sentence embedder
    reads its first ``max_tokens`` word pieces and drops the rest, so a long pasted text followed by
    a question would be searched by the paste's beginning; the ask is at the end."""
    window, count = embedder.max_tokens, embedder.count_tokens
    if window is None:
        return QueryPart(question)
    n = count(question)
    if n <= window:
        return QueryPart(question, n, window)
    from ragcache.semantic.keying import last_sentence

    head, tail = last_sentence(question)
    if head and count(tail) <= window:
        return QueryPart(tail, n, window)
    words = (tail if head else question).split()
    lo, hi = 1, len(words)  # the most trailing words that fit (at least one)
    while lo < hi:
        mid = (lo + hi + 1) // 2
        lo, hi = (mid, hi) if count(" ".join(words[-mid:])) <= window else (lo, mid - 1)
    return QueryPart(" ".join(words[-lo:]), n, window)


class Retriever:
    """Top-k dense retrieval over chunks, kept on disk and updated incrementally.

    A rebuild re-embeds only chunks whose text is new: vectors of unchanged chunks are read
    back from the previous index (``IndexFlatIP.reconstruct_n``), so editing one file of a
    folder embeds that file's chunks only.

    Args:
        chunks: the passages.
        embedder: a :class:`RetrievalEmbedder` (a :class:`ragcache.models.Embedder`: L2-normalised vectors);
            embeds queries.
        index_dir: where to keep the index; ``None`` keeps it in memory only.
        source: what the chunks come from (a folder's resolved path, ``stdlib``), stored in
            ``meta.json`` so :func:`prune_indexes` can tell which folders are unused.
        bulk_embedder: zero-argument callable returning the embedder for many chunks (e.g. the
            torch runtime); used when more than ``bulk_min`` chunks need embedding.
        save: write a built index to ``index_dir`` (``False``: a read-only home; the index is read
            from there when it matches, else built in memory).

    Attributes:
        loaded_from_disk: the stored index matched exactly; embedded / reused: chunks embedded in
            this build and chunks whose vectors were reused.
    """

    def __init__(self, chunks: Sequence[Chunk], embedder: RetrievalEmbedder, index_dir: str | Path | None = None,
                 batch_size: int = 64, progress: bool = True, *, source: str | None = None,
                 bulk_embedder: Callable[[], RetrievalEmbedder] | None = None, bulk_min: int = 64, save: bool = True) -> None:
        if not chunks:
            raise ValueError("no chunks to index: give at least one document")
        self.chunks = list(chunks)
        self.embedder = embedder
        self.index_dir = Path(index_dir) if index_dir else None
        self.source = source
        self.loaded_from_disk = False
        self.embedded = 0
        self.reused = 0
        self._key = hash_value([embedder.fingerprint, [(c.id, c.content_hash) for c in self.chunks]])
        old = self._load() if self.index_dir else None
        if old is True:
            self.loaded_from_disk = True
            self.reused = len(self.chunks)
            return
        known: dict[str, np.ndarray] = old if isinstance(old, dict) else {}
        todo = [i for i, c in enumerate(self.chunks) if c.content_hash not in known]
        mat = np.zeros((len(self.chunks), embedder.dim), dtype=np.float32)
        for i, c in enumerate(self.chunks):
            if c.content_hash in known:
                mat[i] = known[c.content_hash]
        from tqdm.auto import tqdm  # imported only to embed: a cache hit path stays lean

        enc = bulk_embedder() if bulk_embedder is not None and len(todo) > bulk_min else embedder
        bar = tqdm(total=len(todo), desc="Embedding chunks", unit="chunk", disable=not progress or not todo)
        for s in range(0, len(todo), batch_size):
            batch = todo[s:s + batch_size]
            mat[batch] = enc.encode([self.chunks[i].text for i in batch])
            bar.update(len(batch))
        bar.close()
        self.embedded, self.reused = len(todo), len(self.chunks) - len(todo)
        self.index = faiss.IndexFlatIP(mat.shape[1])
        self.index.add(mat)
        if self.index_dir and save:
            self._save()

    def _save(self) -> None:
        d = self.index_dir
        d.mkdir(parents=True, exist_ok=True)
        atomic_write_bytes(d / "index.faiss", faiss.serialize_index(self.index).tobytes())
        chunks = [{"id": c.id, "text": c.text, "source": c.source} for c in self.chunks]
        atomic_write_bytes(d / "chunks.json", json.dumps(chunks).encode())
        meta = {"key": self._key, "count": len(self.chunks), "embedder": self.embedder.name,
                "embedder_fingerprint": self.embedder.fingerprint, "source": self.source, "updated": time.time()}
        atomic_write_bytes(d / "meta.json", json.dumps(meta).encode())  # written last: marks completeness

    def _load(self) -> bool | dict[str, np.ndarray] | None:
        """True: the stored index is this one (loaded). A dict: vectors by chunk content hash of
        an older index built with the same embedder (to reuse). None: nothing usable."""
        d = self.index_dir
        try:
            meta = json.loads((d / "meta.json").read_text())
            index = faiss.deserialize_index(np.frombuffer((d / "index.faiss").read_bytes(), dtype=np.uint8))
            if index.d != self.embedder.dim:
                raise ValueError(f"index holds vectors of dim {index.d}, the embedder gives {self.embedder.dim}")
            if meta.get("key") == self._key:
                if index.ntotal != len(self.chunks):
                    raise ValueError(f"index holds {index.ntotal} vectors for {len(self.chunks)} chunks")
                self.index = index
                return True
            if meta.get("embedder_fingerprint") != self.embedder.fingerprint:
                return None
            old = self.load_chunks(d) or []
            if len(old) != index.ntotal:
                raise ValueError(f"index holds {index.ntotal} vectors for {len(old)} stored chunks")
            vecs = index.reconstruct_n(0, index.ntotal) if index.ntotal else np.zeros((0, index.d), np.float32)
            return {c.content_hash: v for c, v in zip(old, vecs)}
        except FileNotFoundError:
            return None
        except (OSError, ValueError, RuntimeError) as e:
            log.warning("index under %s is unreadable (%s); rebuilding it", d, e)
            return None

    def search(self, query: str, k: int = 4) -> list[Retrieved]:
        """Top-``k`` chunks by cosine similarity, best first. A query longer than the embedder reads
        is searched by the part that asks (:func:`query_part`).

        Raises:
            ValueError: for an empty query or ``k < 1``.
        """
        if not query or not query.strip():
            raise ValueError("query is empty: give a question")
        if k < 1:
            raise ValueError(f"k must be >= 1, got {k}")
        vec = self.embedder.encode([query_part(query, self.embedder).text])
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


def prune_indexes(root: str | Path, keep: str | Path) -> list[Path]:
    """Delete index folders under ``root`` that no run will use again: another folder for the same
    source as ``keep`` (an older corpus version or naming), a folder whose source folder no longer
    exists, and folders of the old naming scheme without a recorded source. Returns what was removed.
    """
    root, keep = Path(root), Path(keep)
    try:
        keep_source = json.loads((keep / "meta.json").read_text()).get("source")
    except (OSError, ValueError):
        keep_source = None
    removed = []
    for d in sorted(p for p in root.iterdir() if p.is_dir()) if root.is_dir() else []:
        if d.resolve() == keep.resolve():
            continue
        try:
            src = json.loads((d / "meta.json").read_text()).get("source")
        except (OSError, ValueError):
            src = None
        unused = (src is None and d.name.startswith(("docs-", "stdlib-"))) \
            or (src is not None and src == keep_source) \
            or (src is not None and src != "stdlib" and not Path(src).exists())
        if unused:
            shutil.rmtree(d, ignore_errors=True)
            removed.append(d)
    return removed
