"""Exact means exact: no normalisation folds one number into another (issue 39, section 1).

NFKC folded superscripts, subscripts, vulgar fractions and circled digits into plain digits: "3²"
and "32" were one exact form, hit each other at ``threshold=1.0`` and shared a single-flight key.
Questions are now normalised with NFC plus the compatibility folds that keep meaning (width,
ligatures, the micro sign, the ellipsis; :func:`ragcache.semantic.text.fold_text`), in the lookup, at
``threshold=1.0``, in the single-flight key and in PostgreSQL's stored hash (schema step 5).
"""

from __future__ import annotations

import hashlib

import pytest

from ragcache.semantic import SemanticCache, partition_key
from ragcache.semantic.decision.guards import GuardSet
from ragcache.semantic.flight import flight_key
from ragcache.semantic.text import exact_form, normalize_question, numbers_in_order
from ragcache.testing import HashingEmbedder

EMB = HashingEmbedder(64)
PK = partition_key(namespace="exact-numbers", model="m")

NUMBER_FORMS = [  # (written with a numeral NFKC folded, the plain-digit text it folded into): other questions
    ("What is 3²?", "What is 32?"),
    ("What is x² + 1 at x = 4?", "What is x2 + 1 at x = 4?"),
    ("What is 2¹⁰?", "What is 210?"),
    ("What is 10⁻³ in decimal?", "What is 10-3 in decimal?"),
    ("How do I type H₂O in Word?", "How do I type H2O in Word?"),
    ("How is CO₂ measured?", "How is CO2 measured?"),
    ("What is ½ of 10?", "What is 1/2 of 10?"),
    ("Is ¾ cup of flour enough?", "Is 34 cup of flour enough?"),
    ("What does step ① of the guide say?", "What does step 1 of the guide say?"),
    ("Is item ⑫ in stock?", "Is item 12 in stock?"),
]

NUMERAL_SWAPS = [  # two numerals that are not plain digits, exchanged
    ("What is x²?", "What is x³?"),
    ("What is ¼ of the budget?", "What is ¾ of the budget?"),
    ("What does step ① say?", "What does step ② say?"),
    ("What is the value of x₁ minus x₂?", "What is the value of x₂ minus x₁?"),
]

MEANING_KEPT = [  # compatibility folds that keep meaning: the same text
    ("What is ABC123 used for?", "What is \uff21\uff22\uff23\uff11\uff12\uff13 used for?"),  # full width
    ("How do I file a claim?", "How do I \ufb01le a claim?"),  # the fi ligature
    ("Is 5 \u03bcm thin?", "Is 5 \u00b5m thin?"),  # Greek mu / the micro sign
    ("Wait... does it restart?", "Wait\u2026 does it restart?"),  # the ellipsis
    ("カタカナとは何ですか", "\uff76\uff80\uff76\uff85とは何ですか"),  # halfwidth katakana
    ("What is 10\u00a0GB?", "What is 10\u3000GB?"),  # no-break and ideographic space
]


def _both(pairs):
    return [*pairs, *((b, a) for a, b in pairs)]


@pytest.fixture()
def cache():
    return SemanticCache(embedder=EMB)


@pytest.mark.parametrize(("stored", "asked"), _both(NUMBER_FORMS + NUMERAL_SWAPS))
def test_exact_form_and_flight_key_keep_the_number(stored, asked):
    a, b = normalize_question(stored), normalize_question(asked)
    assert a != b and exact_form(a) != exact_form(b)
    assert flight_key(PK, stored) != flight_key(PK, asked)
    assert [v for _, v in numbers_in_order(a)] != [v for _, v in numbers_in_order(b)]


@pytest.mark.parametrize(("stored", "asked"), _both(NUMBER_FORMS + NUMERAL_SWAPS))
def test_served_neither_exactly_nor_by_similarity(cache, stored, asked):
    cache.store(stored, "A", partition=PK)
    assert cache.lookup(asked, partition=PK, threshold=1.0) is None
    assert cache.lookup(asked, partition=PK) is None
    assert cache.lookup(asked, partition=PK, threshold=0.3) is None
    assert cache.candidates_for(asked, partition=PK, threshold=0.3)[0].verdict.reason == "number"
    assert cache.lookup(stored, partition=PK, threshold=1.0).answer == "A"
    cache.store(asked, "B", partition=PK)  # its own entry, not a replacement
    assert len(cache) == 2


@pytest.mark.parametrize(("stored", "asked"), _both(NUMBER_FORMS + NUMERAL_SWAPS))
def test_the_guards_and_the_verifier_refuse(stored, asked):
    from ragcache.semantic.decision.verifier import LearnedVerifier, load_head

    a, b = normalize_question(asked), normalize_question(stored)
    assert GuardSet.default().check(a, b, 1.0).reason == "number"
    assert LearnedVerifier(EMB, load_head()).check(a, b, 1.0).reason == "number"


@pytest.mark.parametrize(("stored", "asked"), _both(MEANING_KEPT))
def test_folds_that_keep_meaning_are_the_same_text(cache, stored, asked):
    assert exact_form(normalize_question(stored)) == exact_form(normalize_question(asked))
    assert flight_key(PK, stored) == flight_key(PK, asked)
    cache.store(stored, "A", partition=PK)
    assert cache.lookup(asked, partition=PK, threshold=1.0).answer == "A"


def test_real_embedder_refuses_at_the_defaults_and_with_the_verifier():
    from ragcache.semantic.embedding import resolve_embedder

    emb = resolve_embedder(None)
    with SemanticCache(embedder=emb) as d, SemanticCache(embedder=emb, guards="verifier") as v:
        for name, c in (("default", d), ("verifier", v)):
            for i, (stored, asked) in enumerate(_both(NUMBER_FORMS[:6] + NUMERAL_SWAPS[:2])):
                pk = partition_key(namespace=f"minilm-{name}-{i}", model="m")
                c.store(stored, "A", partition=pk)
                assert c.lookup(asked, partition=pk) is None, (name, stored, asked)
                assert c.lookup(stored, partition=pk).answer == "A"


def test_postgresql_step_5_drops_rows_an_nfkc_fold_may_have_merged(pg_server):
    """A schema written under NFKC stored "What is 3²?" as "What is 32?": a stored question with a
    digit may be another question's fold, so step 5 drops it; a question without one stays, found
    by its exact text; new rows keep their numerals."""
    pytest.importorskip("psycopg")
    import psycopg

    from ragcache.semantic.pg_cache import PgSemanticCache

    s = "t_exact_numbers_migrate"
    c = PgSemanticCache(pg_server.url, embedder=EMB, schema=s)
    try:
        c.clear()
        c.store("What is 3²?", "nine", partition=PK)
        c.store("How do I reset my password?", "Click reset.", partition=PK)
        with psycopg.connect(pg_server.url, autocommit=True) as conn:  # as the NFKC release wrote them
            conn.execute(f"UPDATE {s}.entries SET question = 'What is 32?', qhash = %s WHERE question = 'What is 3²?'",
                         (hashlib.sha256("What is 32?".encode()).hexdigest(),))
            conn.execute(f"DELETE FROM {s}.schema_version WHERE version >= 5")
        c.close()
        c = PgSemanticCache(pg_server.url, embedder=EMB, schema=s)
        assert c.lookup("What is 32?", partition=PK, threshold=1.0) is None  # dropped, not served as 32's answer
        assert c.lookup("How do I reset my password?", partition=PK, threshold=1.0).answer == "Click reset."
        assert len(c) == 1
        c.store("What is 3²?", "nine", partition=PK)
        assert c.lookup("What is 3²?", partition=PK, threshold=1.0).answer == "nine"
        assert c.lookup("What is 32?", partition=PK, threshold=1.0) is None
        with psycopg.connect(pg_server.url) as conn:
            assert conn.execute(f"SELECT max(version) FROM {s}.schema_version").fetchone()[0] == 6  # steps 5 and 6 re-run (6: the lookups table, idempotent)
    finally:
        c.clear()
        c.close()
