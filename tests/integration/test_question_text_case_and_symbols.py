""""The same words" is the same text: case and symbols that change meaning make another question.

Exact matching (``threshold=1.0``, the entry always among the candidates, the replaced entry on
store, the single-flight key) compares the text after NFC, width / ligature folds and whitespace
normalisation alone (superscripts, subscripts, fractions and circled digits stay as written); the
guards (``symbol``) refuse a near-duplicate that differs only in a code span, an operator or the
case of a code, flag, constant or unit. Checked at the defaults, at ``threshold=1.0``, with the
verifier, and on PostgreSQL. HashingEmbedder lower-cases and drops symbols, so each pair below
scores a high cosine (MiniLM is uncased too); the guards are checked at a low threshold as well.
"""

from __future__ import annotations

import pytest

from ragcache.semantic import SemanticCache, partition_key
from ragcache.semantic.decision.guards import GuardSet
from ragcache.semantic.flight import flight_key
from ragcache.semantic.text import exact_form, normalize_question
from ragcache.testing import HashingEmbedder

EMB = HashingEmbedder(64)
PK = partition_key(namespace="same-words", model="m")

# (stored, asked): each pair differs only in case or symbols, and asks another question
DIFFERENT = [
    # strftime-style format codes in two cases
    ("What does %Y print in strftime?", "What does %y print in strftime?"),
    ("What does %m mean in a strftime format?", "What does %M mean in a strftime format?"),
    ("Is %H the 24-hour clock in strftime?", "Is %h the 24-hour clock in strftime?"),
    ("What does %d output in date format strings?", "What does %D output in date format strings?"),
    ("How does %S differ in strftime?", "How does %s differ in strftime?"),
    # command-line flags in two cases
    ("What does the -v flag do in grep?", "What does the -V flag do in grep?"),
    ("What does ls -r do?", "What does ls -R do?"),
    ("What does the -p option of ssh do?", "What does the -P option of ssh do?"),
    ("Is tar -c for creating archives?", "Is tar -C for creating archives?"),
    ("What does rm -f do?", "What does rm -F do?"),
    # a constant named by a lower- or upper-case letter
    ("What is the value of G?", "What is the value of g?"),
    ("What is the value of the constant K in this formula?", "What is the value of the constant k in this formula?"),
    ("How is R defined in the gas law?", "How is r defined in the gas law?"),
    ("What does e stand for in the equation?", "What does E stand for in the equation?"),
    ("What is the unit of C in physics?", "What is the unit of c in physics?"),
    # units in two cases
    ("How many MB is the upload limit?", "How many Mb is the upload limit?"),
    ("Is a 5 mW laser pointer safe?", "Is a 5 MW laser pointer safe?"),
    ("Is 100 Mbps enough for streaming?", "Is 100 MBps enough for streaming?"),
    ("Does the plan include 10 GB of storage?", "Does the plan include 10 Gb of storage?"),
    ("What is 1 kB in bytes?", "What is 1 KB in bytes?"),
    ("Is 50 ms latency good?", "Is 50 Ms latency good?"),
    # arithmetic with another operator
    ("What is 10 / 2?", "What is 10 * 2?"),
    ("What is 7 + 3?", "What is 7 - 3?"),
    ("What does x ** 2 return in Python?", "What does x * 2 return in Python?"),
    ("Is a == b the same as a != b?", "Is a = b the same as a != b?"),
    ("What does 2^3 equal?", "What does 2*3 equal?"),
    # slices
    ("What does a[1:] return in Python?", "What does a[:1] return in Python?"),
    ("What is s[::-1] in Python?", "What is s[::1] in Python?"),
    ("What does lst[-1] give?", "What does lst[1] give?"),
    ("What does arr[2:5] select?", "What does arr[2,5] select?"),
    ("What does df.iloc[0] return?", "What does df.iloc[[0]] return?"),
    # runs of a symbol: a double factorial, a range, a spread
    ("What is 5!?", "What is 5!!?"),
    ("What is 7!! equal to?", "What is 7! equal to?"),
    ("What does 1..5 mean in Kotlin?", "What does 1.5 mean in Kotlin?"),
    ("What does a..b match in Rust?", "What does a.b match in Rust?"),
    ("What does [...arr] do in JavaScript?", "What does [arr] do in JavaScript?"),
    # other symbols and case-meaningful words
    ("What is $HOME on Linux?", "What is $home on Linux?"),
    ("How do I print MAX_SIZE?", "How do I print max_size?"),
    ("Can the IT team reset it?", "Can the it team reset it?"),
    ("Where is the US office?", "Where is the us office?"),
]

SAME = [  # whitespace and Unicode normalisation only: the same text
    ("What does %Y print in strftime?", "What  does %Y print in strftime? "),
    ("What does the -v flag do in grep?", "What does the -v flag do in grep?\u00a0"),
    ("What is 10 / 2?", "What is 10\u2009/\u20092?"),
    ("Does the plan include 10 GB of storage?", "Does the plan include 10 \uff27\uff22 of storage?"),  # full-width
    ("What does a[1:] return in Python?", "What does a[1:] return\tin Python?"),
]


NOT_THE_SAME_TEXT = [  # the same question, but not the same text: a semantic hit, never an exact one
    ("Is it raining?", "Is it raining??"),
    ("Is the office open on Sunday?", "Is the office open on Sunday?!"),
    ("When do the backups run?", "When do the backups run???"),
]


@pytest.fixture()
def cache():
    return SemanticCache(embedder=EMB)


def _both_directions(pairs):
    return [*pairs, *((b, a) for a, b in pairs)]


@pytest.mark.parametrize(("stored", "asked"), _both_directions(DIFFERENT))
def test_exact_form_and_flight_key_differ(stored, asked):
    a, b = normalize_question(stored), normalize_question(asked)
    assert exact_form(a) != exact_form(b)
    assert flight_key(PK, stored) != flight_key(PK, asked)


@pytest.mark.parametrize(("stored", "asked"), SAME)
def test_whitespace_and_unicode_alone_are_the_same_text(stored, asked):
    assert exact_form(normalize_question(stored)) == exact_form(normalize_question(asked))
    assert flight_key(PK, stored) == flight_key(PK, asked)


@pytest.mark.parametrize(("stored", "asked"), _both_directions(DIFFERENT))
def test_symbol_guard_refuses(stored, asked):
    v = GuardSet.default().check(normalize_question(asked), normalize_question(stored), 1.0)
    assert not v.ok, v
    only = GuardSet.default(disable=["number", "negation", "question_type", "focus", "antonym", "scope", "entity",
                                     "direction", "bound", "complement", "relative_time", "substitution"])
    assert only.check(normalize_question(asked), normalize_question(stored)).reason == "symbol"


@pytest.mark.parametrize(("stored", "asked"), _both_directions(DIFFERENT))
def test_served_neither_at_defaults_nor_exact(cache, stored, asked):
    cache.store(stored, "A", partition=PK)
    assert cache.lookup(asked, partition=PK) is None
    assert cache.lookup(asked, partition=PK, threshold=0.3) is None  # the guards refuse, whatever the cosine
    assert not cache.candidates_for(asked, partition=PK, threshold=0.3)[0].verdict.ok
    assert cache.lookup(asked, partition=PK, threshold=1.0) is None
    assert cache.lookup(stored, partition=PK, threshold=1.0).answer == "A"
    cache.store(asked, "B", partition=PK)  # its own entry, not a replacement
    assert len(cache) == 2
    assert cache.lookup(stored, partition=PK).answer == "A" and cache.lookup(asked, partition=PK).answer == "B"


@pytest.mark.parametrize(("stored", "asked"), SAME)
def test_same_text_hits_exactly(cache, stored, asked):
    cache.store(stored, "A", partition=PK)
    assert cache.lookup(asked, partition=PK, threshold=1.0).answer == "A"
    cache.store(asked, "B", partition=PK)
    assert len(cache) == 1  # replaced


@pytest.mark.parametrize(("a", "b"), [
    ("Is the API rate limited?", "is the api rate limited?"),  # a lower-cased rewording of a long word
    ("What is the capital of France?", "what is the capital of france?"),
    ("HOW DO I RESET MY PASSWORD?", "How do I reset my password?"),  # written in capitals: no case information
    ("API keys expire when?", "When do API keys expire?"),  # a capital that starts a sentence
    ("How do I check-in online?", "How do I check in online?"),
    ("What is Node.js used for?", "What is node.js used for?"),
    ("What is the range of f(x) = sin^-1(x)?", "What is the range of f(x) =sin^-1(x)?"),  # spacing at an operator
    ("Who is your favourite Naruto manga/anime character?", "Who is your favourite Naruto manga / anime character?"),
    ("Which company gives the best SEO services?", "Which company gives the best Seo services?"),  # title-cased acronym
    ("Is he polling at 11% now?", "Is he polling at 11 % now?"),  # the number guard owns amounts
    ("How do I gain 7-10 kg?", "How do I gain 7-10 kg?"),
])
def test_case_without_meaning_passes_the_symbol_guard(a, b):
    only = GuardSet.default(disable=["number", "negation", "question_type", "focus", "antonym", "scope", "entity",
                                     "direction", "bound", "complement", "relative_time", "substitution"])
    assert only.check(a, b).ok and only.check(b, a).ok


def test_the_learned_verifier_serves_no_same_words_pair():
    from ragcache.semantic.decision.verifier import LearnedVerifier, load_head

    head = load_head()
    v = LearnedVerifier(EMB, head)
    for stored, asked in _both_directions(DIFFERENT):
        a, b = normalize_question(asked), normalize_question(stored)
        assert not v.check(a, b, 1.0).ok, (a, b)
    for stored, asked in SAME:
        assert v.check(normalize_question(asked), normalize_question(stored), 1.0).ok


def test_on_postgresql(pg_server):
    pytest.importorskip("psycopg")
    from ragcache.semantic.pg_cache import PgSemanticCache

    c = PgSemanticCache(pg_server.url, embedder=EMB, schema="t_same_words")
    try:
        for i, (stored, asked) in enumerate(DIFFERENT[::3]):
            pk = partition_key(namespace=f"pg-{i}", model="m")
            c.store(stored, "A", partition=pk)
            assert c.lookup(asked, partition=pk) is None, asked
            assert c.lookup(asked, partition=pk, threshold=1.0) is None, asked
            assert c.lookup(stored, partition=pk, threshold=1.0).answer == "A"
            c.store(asked, "B", partition=pk)
            assert c.lookup(asked, partition=pk, threshold=1.0).answer == "B"
            assert c.lookup(stored, partition=pk, threshold=1.0).answer == "A"
        stored, asked = SAME[0]
        pk = partition_key(namespace="pg-same", model="m")
        c.store(stored, "A", partition=pk)
        assert c.lookup(asked, partition=pk, threshold=1.0).answer == "A"
    finally:
        c.clear()
        c.close()


def test_postgresql_migration_rehashes_old_rows(pg_server):
    """A schema written by the release that hashed lower-cased words: step 4 rehashes every row, so
    an old row is found by its exact text and is replaced by a store of the same text."""
    pytest.importorskip("psycopg")
    import hashlib

    import psycopg

    from ragcache.semantic.pg_cache import PgSemanticCache

    s = "t_same_words_migrate"
    c = PgSemanticCache(pg_server.url, embedder=EMB, schema=s)
    try:
        c.store("What does %Y print in strftime?", "A", partition=PK)
        old = hashlib.sha256(b"what does y print in strftime").hexdigest()  # the old words form
        with psycopg.connect(pg_server.url, autocommit=True) as conn:
            conn.execute(f"UPDATE {s}.entries SET qhash = %s", (old,))
            conn.execute(f"DELETE FROM {s}.schema_version WHERE version >= 4")
        c.close()
        c = PgSemanticCache(pg_server.url, embedder=EMB, schema=s)
        assert c.lookup("What does %Y print in strftime?", partition=PK, threshold=1.0).answer == "A"
        assert c.lookup("What does %y print in strftime?", partition=PK, threshold=1.0) is None
        c.store("What does %Y print in strftime?", "A2", partition=PK)
        assert len(c) == 1
    finally:
        c.clear()
        c.close()


@pytest.mark.parametrize(("stored", "asked"), _both_directions(NOT_THE_SAME_TEXT))
def test_a_repeated_question_mark_is_a_semantic_hit_not_an_exact_one(cache, stored, asked):
    """Exact (``threshold=1.0``) is the same text after whitespace and Unicode normalisation only; a
    repeated ``?`` or an added ``!`` changes the text, not the question, so the default threshold serves it."""
    assert exact_form(normalize_question(stored)) != exact_form(normalize_question(asked))
    assert flight_key(PK, stored) != flight_key(PK, asked)
    cache.store(stored, "A", partition=PK)
    assert cache.lookup(asked, partition=PK, threshold=1.0) is None
    assert cache.lookup(asked, partition=PK).answer == "A"
