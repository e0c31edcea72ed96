"""Resolve what ``SemanticCache(embedder=...)`` was given into one small interface.

Accepted: ``None`` (the packaged all-MiniLM-L6-v2 via :func:`ragcache.models.load_embedder`),
a sentence-transformers model name or local path, an object with
``encode(list[str]) -> array`` (a ragcache ``Embedder`` or a ``SentenceTransformer``),
or any callable ``list[str] -> array [n, dim]``. Output rows are L2-normalised
here again, so a callable need not normalise.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable
from typing import Any

import numpy as np

_ALPHA = re.compile(r"^[a-z]{2,}$")


class QuestionEmbedder:
    """Wraps an embedding function: ``encode(texts) -> float32 [n, dim]`` with unit rows.

    Attributes:
        name: human-readable name; fingerprint: identity stored with a persistent cache
            (a cache directory refuses another embedder); dim: width (probed lazily);
        known_words: whole words of the embedder's tokenizer vocabulary, or None. Typo
            correction only rewrites words outside this set.
    """

    def __init__(self, fn: Callable[[list[str]], Any], *, name: str, fingerprint: str,
                 dim: int | None = None, known_words: frozenset[str] | None = None) -> None:
        self._fn = fn
        self.name = name
        self.fingerprint = fingerprint
        self._dim = dim
        self.known_words = known_words

    @property
    def dim(self) -> int:
        if self._dim is None:
            self._dim = int(self.encode(["dimension probe"]).shape[1])
        return self._dim

    def encode(self, texts: list[str]) -> np.ndarray:
        """Embed ``texts``. Returns float32 ``[len(texts), dim]``, rows of unit L2 norm.

        Raises:
            ValueError: the wrapped function returned the wrong shape or a zero vector.
        """
        out = np.asarray(self._fn(list(texts)), dtype=np.float32)
        if out.ndim == 1 and len(texts) == 1:
            out = out[None, :]
        if out.ndim != 2 or out.shape[0] != len(texts):
            raise ValueError(f"embedder returned shape {out.shape} for {len(texts)} texts; expected [n, dim]")
        norms = np.linalg.norm(out, axis=1, keepdims=True)
        if np.any(norms == 0):
            raise ValueError("embedder returned a zero vector; cosine similarity is undefined for it")
        out = np.ascontiguousarray(out / norms, dtype=np.float32)
        if self._dim is None:
            self._dim = int(out.shape[1])
        return out


def _vocab_words(model: Any) -> frozenset[str] | None:
    for obj in (model, getattr(model, "_model", None), getattr(model, "model", None)):
        tok = getattr(obj, "tokenizer", None)
        if tok is not None and hasattr(tok, "get_vocab"):
            try:
                vocab = tok.get_vocab()
            except Exception:  # noqa: BLE001 - any tokenizer without a vocab simply disables typo correction
                return None
            return frozenset(w for w in vocab if _ALPHA.match(w))
    return None


def resolve_embedder(embedder: Any = None) -> QuestionEmbedder:
    """Turn the ``embedder`` argument of :class:`SemanticCache` into a :class:`QuestionEmbedder`.

    Raises:
        ValueError: ``embedder`` is none of the accepted kinds.
        ragcache.models.ModelNotFoundError: a name or path cannot be loaded offline.
    """
    if isinstance(embedder, QuestionEmbedder):
        return embedder
    if embedder is None or isinstance(embedder, str):
        from ragcache.models import load_embedder

        embedder = load_embedder(embedder)
    encode = getattr(embedder, "encode", None)
    if callable(encode):
        fp = getattr(embedder, "fingerprint", None)
        name = str(getattr(embedder, "name", None) or type(embedder).__name__)
        if not isinstance(fp, str):
            fp = hashlib.sha256(f"{type(embedder).__module__}.{type(embedder).__qualname__}:{name}".encode()).hexdigest()
        dim = getattr(embedder, "dim", None)
        if type(embedder).__name__ == "SentenceTransformer":

            def fn(texts: list[str]) -> Any:
                return embedder.encode(texts, convert_to_numpy=True, normalize_embeddings=True,
                                       show_progress_bar=False)

            return QuestionEmbedder(fn, name=name, fingerprint=fp, known_words=_vocab_words(embedder))
        return QuestionEmbedder(encode, name=name, fingerprint=fp, dim=dim if isinstance(dim, int) else None,
                                known_words=_vocab_words(embedder))
    if callable(embedder):
        name = getattr(embedder, "__qualname__", type(embedder).__name__)
        fp = getattr(embedder, "fingerprint", None)
        if not isinstance(fp, str):
            fp = hashlib.sha256(f"callable:{getattr(embedder, '__module__', '')}.{name}".encode()).hexdigest()
        return QuestionEmbedder(embedder, name=str(name), fingerprint=fp)
    raise ValueError(
        f"embedder must be None, a sentence-transformers name or path, an object with encode(), "
        f"or a callable list[str] -> array; got {type(embedder).__name__}"
    )
