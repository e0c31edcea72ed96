"""The one conversion of a user's embedder into the :class:`~ragcache.semantic.embedding.QuestionEmbedder`
the cache holds (:func:`~ragcache.semantic.embedding.resolve_embedder`): the members an embedder object
may declare (:class:`TextEncoder`, :class:`Named`, :class:`Fingerprinted`, :class:`Dimensioned`) are read
there once, and a ragcache ``Embedder``'s token states come from the model it runs."""

from __future__ import annotations

import hashlib

import numpy as np
import pytest

from ragcache.semantic.embedding import (
    Dimensioned,
    Fingerprinted,
    Named,
    QuestionEmbedder,
    TextEncoder,
    Windowed,
    resolve_embedder,
)
from ragcache.testing import HashingEmbedder

TEXTS = ["How do I reset my password?", "Where is the refund policy?"]


class Plain:
    """``encode`` alone."""

    def encode(self, texts: list[str]) -> np.ndarray:
        return HashingEmbedder(32).encode(texts)


class Unnamed(Plain):
    name = None
    fingerprint = 42  # not a str: not an identity


def plain_fn(texts: list[str]) -> np.ndarray:
    return HashingEmbedder(24).encode(texts)


def test_a_declared_name_identity_and_width_are_read():
    h = HashingEmbedder(48)
    assert isinstance(h, TextEncoder) and isinstance(h, Named) and isinstance(h, Fingerprinted) \
        and isinstance(h, Dimensioned)
    q = resolve_embedder(h)
    assert isinstance(q, QuestionEmbedder) and resolve_embedder(q) is q
    assert (q.name, q.fingerprint, q.dim) == (h.name, h.fingerprint, 48)
    np.testing.assert_allclose(q.encode(TEXTS), h.encode(TEXTS), atol=1e-6)
    assert not q.has_tokens and q.unknown_pieces("any text") is None and not q.exact_window


@pytest.mark.parametrize("obj", [Plain(), Unnamed()])
def test_an_undeclared_name_or_identity_comes_from_the_class(obj):
    assert isinstance(obj, TextEncoder) and not isinstance(Plain(), Named | Fingerprinted | Dimensioned)
    q = resolve_embedder(obj)
    cls = type(obj)
    assert q.name == cls.__name__
    assert q.fingerprint == hashlib.sha256(f"{cls.__module__}.{cls.__qualname__}:{cls.__name__}".encode()).hexdigest()
    assert q.dim == 32  # probed on first use


def test_a_declared_window_and_counter_are_read():
    class Counted(Plain):
        window = 12

        def count_tokens(self, text: str) -> int:
            return len(text.split()) + 2

    assert isinstance(Counted(), Windowed) and not isinstance(HashingEmbedder(), Windowed)  # a counter alone is not
    q = resolve_embedder(Counted())
    assert q.exact_window and q.window == 12 and q.count_tokens("one two three") == 5
    h = resolve_embedder(HashingEmbedder())
    assert not h.exact_window and h.window == 256 and h.count_tokens("one two three") == len("one two three") + 2


def test_a_callable_and_its_declared_identity():
    q = resolve_embedder(plain_fn)
    assert q.name == "plain_fn" and q.dim == 24
    assert q.fingerprint == hashlib.sha256(f"callable:{__name__}.plain_fn".encode()).hexdigest()

    def fn(texts: list[str]) -> np.ndarray:
        return plain_fn(texts)

    fn.fingerprint = "my-embedder-v2"
    assert resolve_embedder(fn).fingerprint == "my-embedder-v2"


def test_an_encode_that_cannot_be_called_falls_back_to_the_object_as_a_callable():
    class Odd:
        encode = None  # blocked, as a protocol member set to None is

        def __call__(self, texts: list[str]) -> np.ndarray:
            return plain_fn(texts)

    assert not isinstance(Odd(), TextEncoder)
    assert resolve_embedder(Odd()).encode(TEXTS).shape == (2, 24)


@pytest.mark.parametrize("bad", [3, object(), b"bytes"])
def test_anything_else_is_a_type_error_naming_what_is_accepted(bad):
    with pytest.raises(TypeError, match="an object with encode"):
        resolve_embedder(bad)


def test_the_numpy_runtime_gives_token_states_from_the_model_it_runs():
    from ragcache.bert_numpy import NumpyBertEncoder
    from ragcache.models import load_embedder

    emb = load_embedder(runtime="numpy")
    assert isinstance(emb.encoder, NumpyBertEncoder)
    q = resolve_embedder(emb)
    assert q.has_tokens and q.name == emb.name and q.fingerprint == emb.fingerprint and q.dim == 384
    states = q.token_states("reset my password")
    assert states is not None and states.shape[1] == 384
    np.testing.assert_allclose(np.linalg.norm(states, axis=1), 1.0, atol=1e-3)  # kept as float16
    assert resolve_embedder(emb.encoder).has_tokens  # the encoder itself, unwrapped


LONG_QUESTIONS = [
    "How do I reset my password? " * 10,  # 280 bytes, 72 word pieces: read whole by either runtime
    "Wie setze ich mein Passwort zurück, wenn die Bestätigungs-E-Mail nicht ankommt? " * 4,
    "パスワードをリセットするにはどうすればよいですか？" * 8,  # 600 bytes, 202 word pieces
    "Our VPN drops every few minutes on the office wifi. " * 12 + "What should I check first?",  # over the window
    "Please summarise the quarterly report for the board. " * 30,  # over the window, no last sentence fits
]


@pytest.mark.parametrize("question", LONG_QUESTIONS, ids=["en-72", "de-122", "ja-202", "en-split", "en-exact"])
def test_both_runtimes_key_a_long_question_alike(question):
    """``ragcache ask`` / ``serve`` embed with the numpy runtime, the library with torch: both read the
    model's window and count its word pieces, so a long question is embedded, split or matched exactly the
    same way by either (a byte count on one side put a 261-byte question in another partition)."""
    from ragcache.models import load_embedder
    from ragcache.semantic.keying import question_key
    from ragcache.semantic.partition import partition_key

    by_runtime = [resolve_embedder(load_embedder(runtime=r)) for r in ("torch", "numpy")]
    assert [(q.window, q.exact_window) for q in by_runtime] == [(256, True)] * 2
    pk = partition_key(namespace="default", model="m")
    keys = [question_key(question, pk, q) for q in by_runtime]
    assert keys[0].mode == keys[1].mode and keys[0].partition == keys[1].partition
    assert keys[0].tokens == keys[1].tokens


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_an_embedder_returning_nan_or_inf_is_named_not_a_silent_miss(bad):
    """A vector with a NaN or an infinity has no cosine: every lookup of it would miss without a word."""

    def broken(texts):
        out = np.ones((len(texts), 8), dtype=np.float32)
        out[[i for i, t in enumerate(texts) if "broken" in t or "password" in t], 3] = bad
        return out

    q = resolve_embedder(broken)
    with pytest.raises(ValueError, match=r"NaN or infinite values for 1 of 2 texts"):
        q.encode(["fine", "broken"])
    from ragcache.semantic import SemanticCache

    cache = SemanticCache(None, embedder=broken)
    cache.store("Where is the office?", "On the third floor.")
    for op in (lambda: cache.lookup("How do I reset my password?"),
               lambda: cache.store("How do I reset my password?", "Use the portal.")):
        with pytest.raises(ValueError, match="NaN or infinite"):
            op()
    assert len(cache) == 1 and cache.lookup("Where is the office?").answer == "On the third floor."
