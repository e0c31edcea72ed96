"""Resolve what ``SemanticCache(embedder=...)`` was given into one small interface.

Accepted: ``None`` (the packaged all-MiniLM-L6-v2 via :func:`ragcache.models.load_embedder`),
a sentence-transformers model name or local path, an object with
``encode(list[str]) -> array`` (a ragcache ``Embedder`` or a ``SentenceTransformer``),
or any callable ``list[str] -> array [n, dim]``. Output rows are L2-normalised
here again, so a callable need not normalise.

The embedder's window (how many word pieces it reads, special tokens included) and a token
counter come from its own tokenizer when it has one (sentence-transformers' ``max_seq_length``
and ``tokenizer``; all-MiniLM-L6-v2: 256). An embedder without a tokenizer gets a conservative
bound: UTF-8 bytes + 2 against a window of 256 (no subword tokenizer makes more pieces than
bytes), so a question is never assumed to fit when it might not (see :mod:`ragcache.semantic.keying`).
"""

from __future__ import annotations

import hashlib
import re
import threading
from collections import OrderedDict
from collections.abc import Callable, Container
from typing import Any, Protocol, runtime_checkable

import numpy as np

_ALPHA = re.compile(r"^[a-z]{2,}$")

TokenFn = Callable[[list[str]], tuple[Any, list[Any]]]
"""``texts -> (sentence vectors [n, dim], per text its last hidden states [pieces, dim])`` in one pass."""

TOKEN_MEMO = 2048
"""Texts whose word-piece states a :class:`QuestionEmbedder` remembers (float16, ~12 KB a question)."""

DEFAULT_WINDOW = 256
"""Window assumed for an embedder whose tokenizer is unknown (counted in UTF-8 bytes + 2)."""


@runtime_checkable
class TextEncoder(Protocol):
    """An embedder object ``SemanticCache(embedder=...)`` accepts: ``encode(list[str]) -> array [n, dim]``
    (a ragcache :class:`~ragcache.models.Embedder`, a ``SentenceTransformer``, :class:`ragcache.testing.HashingEmbedder`,
    one's own). It may also declare :class:`Named`, :class:`Fingerprinted`, :class:`Dimensioned` and
    :class:`Windowed`; :func:`resolve_embedder` reads them once, into the :class:`QuestionEmbedder` the
    cache holds."""

    def encode(self, texts: list[str]) -> Any: ...


@runtime_checkable
class Named(Protocol):
    """An embedder that names itself (``name``: what the pair model and the learned verifier are matched on)."""

    name: str


@runtime_checkable
class Fingerprinted(Protocol):
    """An embedder that states its identity (``fingerprint``: a str that changes whenever its vectors may;
    a persistent cache refuses another)."""

    fingerprint: str


@runtime_checkable
class Dimensioned(Protocol):
    """An embedder that states its width (``dim``: the length of its vectors) without embedding a probe."""

    dim: int


@runtime_checkable
class Windowed(Protocol):
    """An embedder that states its window: it reads ``window`` word pieces of a text (special tokens
    included), as ``count_tokens`` counts them (else they come from its sentence-transformers model)."""

    window: int

    def count_tokens(self, text: str) -> int: ...


class QuestionEmbedder:
    """Wraps an embedding function: ``encode(texts) -> float32 [n, dim]`` with unit rows.

    Attributes:
        name: human-readable name; fingerprint: identity stored with a persistent cache
            (a cache directory refuses another embedder): a ragcache ``Embedder``'s covers every
            file of its folder that can change a vector (:func:`ragcache.models.embedder_revision`),
            a ``SentenceTransformer`` object's every module's type, config and weights; another
            object's own ``fingerprint`` attribute, else its class and name; dim: width (probed lazily);
        known_words: whole words of the embedder's tokenizer vocabulary (anything ``in`` works:
            a set, or :class:`VocabWords`), or None. Typo correction only rewrites words outside it.
        count_unknown: ``text -> (unknown word pieces, word pieces)`` from the embedder's tokenizer
            (pieces it maps to its unknown token, ``[UNK]``; special tokens not counted), or None (or a
            function returning None) when the tokenizer is not known (see :meth:`unknown_pieces`).
    """

    name: str
    fingerprint: str

    def __init__(self, fn: Callable[[list[str]], Any], *, name: str, fingerprint: str,
                 dim: int | None = None, known_words: Container[str] | None = None,
                 window: int | None = None, count_tokens: Callable[[str], int] | None = None,
                 token_fn: TokenFn | None = None,
                 count_unknown: Callable[[str], tuple[int, int]] | None = None) -> None:
        self._count_unknown = count_unknown
        self._fn = fn
        self._token_fn = token_fn
        self._token_memo: OrderedDict[str, np.ndarray] = OrderedDict()
        self._token_lock = threading.Lock()
        self.name = name
        self.fingerprint = fingerprint
        self._dim = dim
        self.known_words = known_words
        if (window is None) != (count_tokens is None):
            raise ValueError("give both window and count_tokens (the embedder's window and its token counter), "
                             "or neither (a conservative byte count is used)")
        if window is not None and window < 8:
            raise ValueError(f"window must be >= 8 word pieces, got {window}")
        self.window: int = DEFAULT_WINDOW if window is None else int(window)
        self._count = count_tokens
        self.exact_window = count_tokens is not None

    def count_tokens(self, text: str) -> int:
        """Word pieces the embedder sees for ``text`` (special tokens included, no truncation);
        UTF-8 bytes + 2 (an upper bound) when the embedder's tokenizer is unknown."""
        if self._count is None:
            return len(text.encode("utf-8")) + 2
        return int(self._count(text))

    def unknown_pieces(self, text: str) -> tuple[int, int] | None:
        """``(unknown, total)``: of the word pieces the embedder's tokenizer makes of ``text`` (special
        tokens not counted), how many are its unknown token (all-MiniLM-L6-v2's ``[UNK]``: most Han,
        Thai and Georgian, many Hangul and emoji), which the vector cannot tell apart. ``None`` when
        the tokenizer is not known (a plain callable): what the embedder reads is then unknown."""
        got = None if self._count_unknown is None else self._count_unknown(text)
        return None if got is None else (int(got[0]), int(got[1]))

    @property
    def dim(self) -> int:
        if self._dim is None:
            self._dim = int(self.encode(["dimension probe"]).shape[1])
        return self._dim

    @property
    def token_fn(self) -> TokenFn | None:
        """The wrapped one-pass ``texts -> (sentence vectors, raw last hidden states)``, or None."""
        return self._token_fn

    @property
    def has_tokens(self) -> bool:
        """Whether :meth:`token_states` is available (the embedder exposes its last hidden states)."""
        return self._token_fn is not None

    def token_states(self, text: str) -> np.ndarray | None:
        """Unit-norm contextual word-piece vectors of ``text`` ``[pieces, dim]`` (float32, [CLS] and
        [SEP] dropped) from the embedder's own last layer, or ``None`` when it has no token output.

        A text embedded by :meth:`encode` in a small batch (a lookup, a single store) is remembered
        (the last :data:`TOKEN_MEMO` texts), so its states cost no second forward pass."""
        if self._token_fn is None:
            return None
        with self._token_lock:
            got = self._token_memo.get(text)
            if got is not None:
                self._token_memo.move_to_end(text)
                return got.astype(np.float32)
        self._encode_with_tokens([text])
        with self._token_lock:
            got = self._token_memo.get(text)
        return None if got is None else got.astype(np.float32)

    def encode_tokens(self, texts: list[str]) -> tuple[np.ndarray, list[np.ndarray]]:
        """One forward pass, nothing remembered: (sentence vectors ``[n, dim]`` as the wrapped model
        returns them, per text its unit word-piece vectors ``[pieces, dim]`` without [CLS] / [SEP]).

        Raises:
            ValueError: the embedder exposes no token states (:attr:`has_tokens` is False).
        """
        if self._token_fn is None:
            raise ValueError(f"embedder {self.name!r} exposes no token states (use a sentence-transformers "
                             "Transformer -> mean Pooling model or the packaged all-MiniLM-L6-v2)")
        pooled, states = self._token_fn(list(texts))
        out = []
        for st in states:
            st = np.asarray(st, dtype=np.float32)
            st = st[1:-1] if len(st) > 2 else st
            out.append(st / np.maximum(np.linalg.norm(st, axis=1, keepdims=True), 1e-12))
        return np.asarray(pooled, dtype=np.float32), out

    def _encode_with_tokens(self, texts: list[str]) -> np.ndarray:
        pooled, states = self.encode_tokens(texts)
        with self._token_lock:
            for t, st in zip(texts, states, strict=True):
                self._token_memo[t] = st.astype(np.float16)
                self._token_memo.move_to_end(t)
            while len(self._token_memo) > TOKEN_MEMO:
                self._token_memo.popitem(last=False)
        return pooled

    def warm(self) -> None:
        """Load whatever this embedder loads on first use (nothing here: it is loaded already). The answer
        path calls it once, outside the lookup deadline (:data:`ragcache.answering.COLD_LOAD_TIMEOUT_S`), so a
        cold load is not taken for a hang."""

    def encode(self, texts: list[str]) -> np.ndarray:
        """Embed ``texts``. Returns float32 ``[len(texts), dim]``, rows of unit L2 norm.

        Raises:
            ValueError: the wrapped function returned the wrong shape, a NaN or infinite value, or a zero vector.
        """
        small = self._token_fn is not None and 0 < len(texts) <= 8
        out = np.asarray(self._encode_with_tokens(list(texts)) if small else self._fn(list(texts)), dtype=np.float32)
        if out.ndim == 1 and len(texts) == 1:
            out = out[None, :]
        if out.ndim != 2 or out.shape[0] != len(texts):
            raise ValueError(f"embedder returned shape {out.shape} for {len(texts)} texts; expected [n, dim]")
        if not np.isfinite(out).all():
            bad = int((~np.isfinite(out).all(axis=1)).sum())
            raise ValueError(f"embedder returned NaN or infinite values for {bad} of {len(texts)} texts; a cosine of "
                             "them is undefined (check the embedder's weights and its input)")
        norms = np.linalg.norm(out, axis=1, keepdims=True)
        if np.any(norms == 0):
            raise ValueError("embedder returned a zero vector; cosine similarity is undefined for it")
        out = np.ascontiguousarray(out / norms, dtype=np.float32)
        if self._dim is None:
            self._dim = int(out.shape[1])
        return out


class VocabWords:
    """Whole lower-case words (``[a-z]{2,}``) of a tokenizer's vocabulary, as a set one can only ask
    ``word in words``: each question is answered by the tokenizer's own ``token_to_id`` lookup,
    so nothing is built when the embedder loads (building the set of 30k MiniLM pieces cost a hit
    in every process; the answers are the same as ``word in frozenset(filtered vocabulary)``)."""

    __slots__ = ("_token_to_id",)

    def __init__(self, token_to_id: Callable[[str], Any]) -> None:
        self._token_to_id = token_to_id

    def __contains__(self, word: object) -> bool:
        return isinstance(word, str) and bool(_ALPHA.match(word)) and self._token_to_id(word) is not None


def _inside(model: Any) -> tuple[Any, Any, Any]:
    """Where an embedder's tokenizer and window may be found: the object itself, the model a ragcache
    :class:`~ragcache.models.Embedder` runs (:attr:`~ragcache.models.Embedder.encoder`), and a third-party
    wrapper's ``model``."""
    from ragcache.models import Embedder

    return model, model.encoder if isinstance(model, Embedder) else None, getattr(model, "model", None)


def _vocab_words(model: Any) -> Container[str] | None:
    for obj in _inside(model):
        tok = getattr(obj, "tokenizer", None)
        if tok is None:
            continue
        rust = tok if callable(getattr(tok, "token_to_id", None)) else getattr(tok, "backend_tokenizer", None)
        if callable(getattr(rust, "token_to_id", None)):  # a Rust tokenizers.Tokenizer: ask it word by word
            return VocabWords(rust.token_to_id)
        if hasattr(tok, "get_vocab"):
            try:
                vocab = tok.get_vocab()
            except Exception:  # noqa: BLE001 - any tokenizer without a vocab simply disables typo correction
                return None
            return frozenset(w for w in vocab if _ALPHA.match(w))
    return None


def _window(model: Any) -> tuple[int, Callable[[str], int]] | tuple[None, None]:
    """(window, token counter) from an embedder's own attributes or its sentence-transformers model; a
    ragcache :class:`~ragcache.models.Embedder` states both for either runtime (its ``max_tokens`` and
    ``count_tokens``), so the torch and the numpy runtime window and count a question alike."""
    from ragcache.models import Embedder

    if isinstance(model, Embedder) and model.max_tokens is not None:
        return model.max_tokens, model.count_tokens
    for obj in _inside(model):
        if obj is None:
            continue
        if isinstance(obj, Windowed) and isinstance(obj.window, int) and callable(obj.count_tokens):
            return obj.window, obj.count_tokens
        win, tok = getattr(obj, "max_seq_length", None), getattr(obj, "tokenizer", None)
        if isinstance(win, int) and win > 0 and tok is not None and callable(tok):

            def count(text: str, _tok: Any = tok) -> int:
                return len(_tok(text, add_special_tokens=True, truncation=False, verbose=False)["input_ids"])

            return win, count
    return None, None


def _window_kwargs(model: Any) -> dict[str, Any]:
    win, count = _window(model)
    return {"count_unknown": _unknown_fn(model), **({} if win is None else {"window": win, "count_tokens": count})}


def _unknown_fn(model: Any) -> Callable[[str], tuple[int, int]] | None:
    """``text -> (unknown pieces, pieces)`` from an embedder's Hugging Face tokenizer (``unk_token_id``)
    or Rust ``tokenizers.Tokenizer`` (its model's ``unk_token``), or None when it has neither."""
    for obj in _inside(model):
        tok = getattr(obj, "tokenizer", None)
        if tok is None:
            continue
        unk = getattr(tok, "unk_token_id", None)
        if isinstance(unk, int) and callable(tok):

            def count(text: str, _tok: Any = tok, _unk: int = unk) -> tuple[int, int]:
                ids = _tok(text, add_special_tokens=False, truncation=False, verbose=False)["input_ids"]
                return sum(1 for i in ids if i == _unk), len(ids)

            return count
        if callable(getattr(tok, "encode", None)) and callable(getattr(tok, "token_to_id", None)):
            name = getattr(getattr(tok, "model", None), "unk_token", None)
            rust_unk = tok.token_to_id(name) if isinstance(name, str) else None
            if rust_unk is None:
                return None

            def count_rust(text: str, _tok: Any = tok, _unk: int = rust_unk) -> tuple[int, int]:
                ids = _tok.encode(text, add_special_tokens=False).ids
                return ids.count(_unk), len(ids)

            return count_rust
    return None


def resolve_embedder(embedder: Any = None, *, home: Any = None) -> QuestionEmbedder:
    """Turn the ``embedder`` argument of :class:`SemanticCache` into a :class:`QuestionEmbedder`.
    ``home``: the :class:`~ragcache.home.Home` (or folder) where the embedder's file digests are
    remembered (``None``: the default home), as :func:`shared_embedder`'s.

    Raises:
        TypeError: ``embedder`` is none of the accepted kinds.
        ragcache.models.ModelNotFoundError: a name or path cannot be loaded offline.
    """
    if isinstance(embedder, QuestionEmbedder):
        return embedder
    if embedder is None or isinstance(embedder, str):
        return shared_embedder(embedder, home=home)
    return _wrap(embedder)


_SHARED: dict[str, QuestionEmbedder] = {}
_SHARED_LOCK = threading.RLock()


def shared_embedder(name: str | None = None, *, home: Any = None) -> QuestionEmbedder:
    """The process-wide :class:`QuestionEmbedder` of a sentence-transformers model (``None``: the
    packaged all-MiniLM-L6-v2), loaded once and then shared by every cache in the process
    (``SemanticCache()``, LangChain's ``RagCacheSemanticCache`` / ``RagCacheMiddleware``, the
    LlamaIndex query engine): the model is read and its vocabulary indexed once. ``home``: where the
    first caller's embedder remembers its file digests (:func:`ragcache.models.digest_cache_file`;
    ``None``: the default home); it never changes the vectors or the fingerprint.

    Raises:
        ragcache.models.ModelNotFoundError: the model cannot be loaded offline.
    """
    from ragcache.models import DEFAULT_EMBEDDER, embedder_fingerprint, load_embedder

    key = name or DEFAULT_EMBEDDER
    with _SHARED_LOCK:
        emb = _SHARED.get(key)
        if emb is None:
            known = embedder_fingerprint(name, home=home)
            if known is None:  # a hub id: its identity is the loaded modules'
                emb = _wrap(load_embedder(name, home=home))  # the same object as for the loaded model
            else:  # a local folder: the identity is its files', the model loads on first embedding
                emb = LazyQuestionEmbedder(lambda: _wrap(load_embedder(name, home=home)), name=known[0],
                                           fingerprint=known[1],
                                           dim=known[2])
            _SHARED[key] = emb
        return emb


class LazyQuestionEmbedder(QuestionEmbedder):
    """A :class:`QuestionEmbedder` whose model is loaded on first use (an embedding, a token count,
    the vocabulary), so opening a cache (``RagCacheSemanticCache()``, ``SemanticCache()``) does not
    import torch and sentence-transformers. ``name`` and ``fingerprint`` are known before loading
    (:func:`ragcache.models.embedder_fingerprint`), and so is ``dim`` (a FAISS index is opened with it);
    the loaded model must have the same fingerprint and width.

    Raises (on first use):
        ragcache.models.ModelNotFoundError: the model cannot be loaded offline.
        RuntimeError: the loaded model's fingerprint differs from the one announced.
    """

    def __init__(self, load: Callable[[], QuestionEmbedder], *, name: str, fingerprint: str, dim: int) -> None:
        self._load = load
        self._known_dim = int(dim)
        self._real: QuestionEmbedder | None = None
        self._load_lock = threading.Lock()
        self.name = name
        self.fingerprint = fingerprint

    @property
    def loaded(self) -> bool:
        """Whether the model has been loaded."""
        return self._real is not None

    def warm(self) -> None:
        """Load the model now (once; concurrent callers wait for the one load).

        Raises:
            ragcache.models.ModelNotFoundError / RuntimeError: as the first use would."""
        self._model()

    def _model(self) -> QuestionEmbedder:
        if self._real is None:
            with self._load_lock:
                if self._real is None:
                    real = self._load()
                    if real.fingerprint != self.fingerprint or real.dim != self._known_dim:
                        raise RuntimeError(f"embedder {self.name!r} changed while loading (fingerprint "
                                           f"{real.fingerprint[:12]} != {self.fingerprint[:12]} or width {real.dim} "
                                           f"!= {self._known_dim}); open the cache again")
                    self._real = real
        return self._real

    @property
    def known_words(self) -> Container[str] | None:  # type: ignore[override]
        return self._model().known_words

    @property
    def window(self) -> int:  # type: ignore[override]
        return self._model().window

    @property
    def exact_window(self) -> bool:  # type: ignore[override]
        return self._model().exact_window

    @property
    def dim(self) -> int:
        return self._known_dim

    @property
    def token_fn(self) -> TokenFn | None:
        return self._model().token_fn

    @property
    def has_tokens(self) -> bool:
        return self._model().has_tokens

    def count_tokens(self, text: str) -> int:
        return self._model().count_tokens(text)

    def unknown_pieces(self, text: str) -> tuple[int, int] | None:
        return self._model().unknown_pieces(text)

    def token_states(self, text: str) -> np.ndarray | None:
        return self._model().token_states(text)

    def encode_tokens(self, texts: list[str]) -> tuple[np.ndarray, list[np.ndarray]]:
        return self._model().encode_tokens(texts)

    def encode(self, texts: list[str]) -> np.ndarray:
        return self._model().encode(texts)


def _wrap(embedder: Any) -> QuestionEmbedder:
    """A :class:`QuestionEmbedder` over a loaded model or a callable (see :func:`resolve_embedder`)."""
    from ragcache.models import Embedder

    if isinstance(embedder, Embedder):  # loaded once per process: wrap it once too
        key = f"{embedder.fingerprint}|{embedder.runtime}"
        with _SHARED_LOCK:
            if key not in _SHARED:
                _SHARED[key] = _wrap_any(embedder)
            return _SHARED[key]
    return _wrap_any(embedder)


def _wrap_any(embedder: Any) -> QuestionEmbedder:
    """The one conversion of a user's embedder (anything but a name, ``None`` or a :class:`QuestionEmbedder`):
    its declared members (:class:`TextEncoder`, :class:`Named`, :class:`Fingerprinted`,
    :class:`Dimensioned`) are read here once; past this point the cache reads the :class:`QuestionEmbedder`.

    Raises:
        TypeError: ``embedder`` neither has ``encode`` nor is callable.
    """
    if isinstance(embedder, TextEncoder) and callable(embedder.encode):
        fp = embedder.fingerprint if isinstance(embedder, Fingerprinted) else None
        name = str((embedder.name if isinstance(embedder, Named) else None) or type(embedder).__name__)
        is_st = type(embedder).__name__ == "SentenceTransformer"
        if not isinstance(fp, str) and is_st:  # every module's type, config and weights decide the vector
            from ragcache.identity import module_identity

            fp = hashlib.sha256(f"sentence-transformers:{module_identity(embedder)}".encode()).hexdigest()
        elif not isinstance(fp, str):
            fp = hashlib.sha256(f"{type(embedder).__module__}.{type(embedder).__qualname__}:{name}".encode()).hexdigest()
        dim = embedder.dim if isinstance(embedder, Dimensioned) else None
        if is_st:

            def fn(texts: list[str]) -> Any:
                return embedder.encode(texts, convert_to_numpy=True, normalize_embeddings=True,
                                       show_progress_bar=False)

            return QuestionEmbedder(fn, name=name, fingerprint=fp, known_words=_vocab_words(embedder),
                                    token_fn=_token_fn(embedder), **_window_kwargs(embedder))
        return QuestionEmbedder(embedder.encode, name=name, fingerprint=fp, dim=dim if isinstance(dim, int) else None,
                                known_words=_vocab_words(embedder), token_fn=_token_fn(embedder),
                                **_window_kwargs(embedder))
    if callable(embedder):
        name = getattr(embedder, "__qualname__", type(embedder).__name__)
        fp = embedder.fingerprint if isinstance(embedder, Fingerprinted) else None
        if not isinstance(fp, str):
            fp = hashlib.sha256(f"callable:{getattr(embedder, '__module__', '')}.{name}".encode()).hexdigest()
        return QuestionEmbedder(embedder, name=str(name), fingerprint=fp, **_window_kwargs(embedder))
    raise TypeError(
        f"embedder must be None, a sentence-transformers name or path, an object with encode(), "
        f"or a callable list[str] -> array; got {type(embedder).__name__}"
    )


def _token_fn(embedder: Any) -> TokenFn | None:
    """Sentence vectors and last hidden states in one pass, for a ragcache ``Embedder`` (NumPy or
    torch runtime) or a ``SentenceTransformer`` whose pipeline is Transformer -> mean Pooling
    [-> Normalize] (the sentence vector is then the masked mean of those states); else None."""
    from ragcache.bert_numpy import NumpyBertEncoder
    from ragcache.models import Embedder

    model = embedder.encoder if isinstance(embedder, Embedder) else embedder
    if isinstance(model, NumpyBertEncoder):
        return model.encode_tokens
    if type(model).__name__ != "SentenceTransformer":
        return None
    names = [type(m).__name__ for m in model]
    if names[:2] != ["Transformer", "Pooling"] or any(n != "Normalize" for n in names[2:]):
        return None

    def run(texts: list[str]) -> tuple[np.ndarray, list[np.ndarray]]:
        outs = model.encode(texts, output_value=None, convert_to_numpy=False, show_progress_bar=False)
        pooled = np.stack([o["sentence_embedding"].float().numpy() for o in outs])
        return pooled, [o["token_embeddings"][o["attention_mask"].bool()].float().numpy() for o in outs]

    return run
