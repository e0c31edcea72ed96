"""A deterministic, dependency-free embedder for tests and examples (not semantic).

``HashingEmbedder`` maps character trigrams of the lower-cased text into a
fixed number of buckets (the hashing trick, sha1-based so it is stable across
processes) and L2-normalises. Equal texts get equal vectors and similar
spellings get similar vectors; meaning is not modelled. Use it where a test is
about the cache's bookkeeping (persistence, concurrency, eviction), not about
which paraphrases hit.
"""

from __future__ import annotations

import hashlib

import numpy as np


class HashingEmbedder:
    """``encode(list[str]) -> float32 [n, dim]`` with unit rows; ``dim`` buckets (default 64)."""

    def __init__(self, dim: int = 64) -> None:
        if dim < 8:
            raise ValueError(f"dim must be >= 8, got {dim}")
        self.dim = dim
        self.name = f"hashing-trigram-{dim}"
        self.fingerprint = hashlib.sha256(self.name.encode()).hexdigest()

    def encode(self, texts: list[str]) -> np.ndarray:
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        for r, text in enumerate(texts):
            t = f"  {text.lower()}  "
            for i in range(len(t) - 2):
                h = int.from_bytes(hashlib.sha1(t[i : i + 3].encode()).digest()[:4], "little")
                out[r, h % self.dim] += 1.0 if (h >> 31) & 1 else -1.0
            n = np.linalg.norm(out[r])
            if n == 0:
                out[r, 0] = 1.0
            else:
                out[r] /= n
        return out

    def __call__(self, texts: list[str]) -> np.ndarray:
        return self.encode(texts)
