"""One partition's FAISS index over question embeddings (inner product = cosine on unit vectors).

Small partitions use ``IndexIDMap2(IndexFlatIP)`` (exact search, removal by id).
Above ``hnsw_threshold`` vectors the index is rebuilt as ``IndexIDMap2(IndexHNSWFlat)``
(Malkov & Yashunin, TPAMI 2018) with ``M`` links per node; HNSW cannot remove
vectors, so removed ids become tombstones filtered out of results and the graph
is rebuilt from the stored vectors once tombstones pass a quarter of it.

Not thread-safe by itself: :class:`~ragcache.semantic.cache.SemanticCache`
serialises writers and lets searches run concurrently.
"""

from __future__ import annotations

import faiss
import numpy as np


class PartitionIndex:
    """FAISS index of one partition.

    Args:
        dim: embedding width.
        hnsw_threshold: size above which the flat index becomes HNSW.
        hnsw_m, ef_construction, ef_search: HNSW parameters (links per node, build and search beam).
    """

    def __init__(self, dim: int, *, hnsw_threshold: int = 20_000, hnsw_m: int = 32,
                 ef_construction: int = 80, ef_search: int = 64) -> None:
        self.dim = dim
        self.hnsw_threshold = hnsw_threshold
        self.hnsw_m = hnsw_m
        self.ef_construction = ef_construction
        self.ef_search = ef_search
        self._index = self._new_flat()
        self._tombstones: set[int] = set()

    # ---------------------------------------------------------------- construction
    def _new_flat(self) -> faiss.IndexIDMap2:
        return faiss.IndexIDMap2(faiss.IndexFlatIP(self.dim))

    def _new_hnsw(self) -> faiss.IndexIDMap2:
        inner = faiss.IndexHNSWFlat(self.dim, self.hnsw_m, faiss.METRIC_INNER_PRODUCT)
        inner.hnsw.efConstruction = self.ef_construction
        inner.hnsw.efSearch = self.ef_search
        return faiss.IndexIDMap2(inner)

    @property
    def kind(self) -> str:
        """``"flat"`` or ``"hnsw"``."""
        return "hnsw" if isinstance(self._inner, faiss.IndexHNSW) else "flat"

    @property
    def _inner(self) -> faiss.Index:
        return faiss.downcast_index(self._index.index)

    def __len__(self) -> int:
        return int(self._index.ntotal) - len(self._tombstones)

    def ids(self) -> np.ndarray:
        """Live ids, int64 ``[len(self)]``."""
        all_ids = faiss.vector_to_array(self._index.id_map).astype(np.int64)
        if not self._tombstones:
            return all_ids
        return all_ids[~np.isin(all_ids, np.fromiter(self._tombstones, dtype=np.int64))]

    def vectors(self) -> tuple[np.ndarray, np.ndarray]:
        """(ids int64 [n], vectors float32 [n, dim]) of the live entries."""
        all_ids = faiss.vector_to_array(self._index.id_map).astype(np.int64)
        n = int(self._index.ntotal)
        vecs = self._index.index.reconstruct_n(0, n) if n else np.zeros((0, self.dim), np.float32)
        if self._tombstones:
            keep = ~np.isin(all_ids, np.fromiter(self._tombstones, dtype=np.int64))
            all_ids, vecs = all_ids[keep], vecs[keep]
        return all_ids, np.ascontiguousarray(vecs, dtype=np.float32)

    # ---------------------------------------------------------------- writes
    def add(self, ids: np.ndarray, vecs: np.ndarray) -> None:
        """Add unit vectors ``vecs`` float32 ``[n, dim]`` under int64 ``ids`` ``[n]``."""
        ids = np.ascontiguousarray(ids, dtype=np.int64)
        vecs = np.ascontiguousarray(vecs, dtype=np.float32)
        if vecs.ndim != 2 or vecs.shape[1] != self.dim or vecs.shape[0] != ids.shape[0]:
            raise ValueError(f"expected vectors [n, {self.dim}] and ids [n]; got {vecs.shape} and {ids.shape}")
        if self.kind == "flat" and int(self._index.ntotal) + len(ids) > self.hnsw_threshold:
            old_ids, old_vecs = self.vectors()
            self._index = self._new_hnsw()
            self._tombstones.clear()
            ids = np.concatenate([old_ids, ids])
            vecs = np.concatenate([old_vecs, vecs])
        self._index.add_with_ids(vecs, ids)

    def remove(self, ids: np.ndarray | list[int]) -> None:
        """Remove ids (unknown ids are ignored)."""
        arr = np.asarray(list(ids), dtype=np.int64)
        if arr.size == 0:
            return
        if self.kind == "flat":
            self._index.remove_ids(faiss.IDSelectorBatch(arr))
            return
        self._tombstones.update(int(i) for i in arr)
        if len(self._tombstones) * 4 > int(self._index.ntotal):
            self.rebuild()

    def rebuild(self) -> None:
        """Rebuild from the live vectors (drops tombstones; picks flat or HNSW by size)."""
        ids, vecs = self.vectors()
        self._tombstones.clear()
        self._index = self._new_hnsw() if len(ids) > self.hnsw_threshold else self._new_flat()
        if len(ids):
            self._index.add_with_ids(vecs, ids)

    # ---------------------------------------------------------------- search
    def search(self, vec: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        """Top-``k`` cosine similarities for one unit query vector ``[dim]``.

        Returns (similarities float32 [<=k], ids int64 [<=k]) in descending similarity.
        """
        if len(self) == 0:
            return np.zeros(0, np.float32), np.zeros(0, np.int64)
        q = np.ascontiguousarray(vec, dtype=np.float32).reshape(1, self.dim)
        kk = min(int(self._index.ntotal), k + len(self._tombstones))
        sims, ids = self._index.search(q, kk)
        sims, ids = sims[0], ids[0]
        keep = ids >= 0
        if self._tombstones:
            keep &= ~np.isin(ids, np.fromiter(self._tombstones, dtype=np.int64))
        return sims[keep][:k], ids[keep][:k]

    # ---------------------------------------------------------------- persistence
    def to_bytes(self) -> bytes:
        """FAISS's own serialisation (no pickle). Tombstones are not saved: the caller re-syncs ids."""
        return faiss.serialize_index(self._index).tobytes()

    @classmethod
    def from_bytes(cls, data: bytes, dim: int, **kwargs: int) -> PartitionIndex:
        """Load an index written by :meth:`to_bytes`.

        Raises:
            ValueError: the bytes are not a FAISS ``IndexIDMap2`` of width ``dim``.
        """
        try:
            idx = faiss.deserialize_index(np.frombuffer(data, dtype=np.uint8))
        except Exception as e:  # noqa: BLE001 - FAISS raises RuntimeError subclasses for corrupt input
            raise ValueError(f"corrupt FAISS index: {e}") from None
        if not isinstance(idx, faiss.IndexIDMap2) or idx.d != dim:
            raise ValueError(f"expected an IndexIDMap2 of dim {dim}, got {type(idx).__name__} of dim {idx.d}")
        out = cls(dim, **kwargs)
        out._index = idx
        if out.kind == "hnsw":
            out._inner.hnsw.efSearch = out.ef_search
        return out
