"""SemanticCache with the packaged all-MiniLM-L6-v2: thresholds, partitions, guards, TTL, LRU, invalidation."""

import asyncio
import os
import time

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
pytestmark = pytest.mark.slow  # loads the packaged MiniLM

from ragcache.hashing import content_hash
from ragcache.semantic import SemanticCache, SemanticHit, partition_key

PK = partition_key(namespace="t", model="m1", params={"temperature": 0.0, "max_tokens": 64}, system="sys",
                   documents=["doc one text", "doc two text"])


@pytest.fixture(scope="module")
def embedder():
    from ragcache.models import load_embedder

    return load_embedder()


FAQ_THRESHOLD = 0.70  # curated FAQ-style traffic; the default (calibrated on QQP) is stricter


@pytest.fixture()
def cache(embedder):
    return SemanticCache(embedder=embedder, threshold=FAQ_THRESHOLD)


def test_exact_repeat_scores_one_and_threshold_one_is_exact_only(cache):
    cache.store("How do I reset my password?", "Click 'Forgot password'.", partition=PK)
    hit = cache.lookup("How do I reset my password?", partition=PK)
    assert isinstance(hit, SemanticHit)
    assert 1 - 1e-5 <= hit.similarity <= 1 + 1e-5
    assert hit.answer == "Click 'Forgot password'."
    # exact means the same text after whitespace and Unicode (NFC, width and ligature folds) normalisation alone
    assert cache.lookup("  How do I  reset my password?\u00a0", partition=PK, threshold=1.0) is not None
    assert cache.lookup("how do I reset my password", partition=PK, threshold=1.0) is None
    assert cache.lookup("how do I reset my password", partition=PK) is not None  # a rewording: the guards pass it
    # a paraphrase that hits at the default is refused when exact is asked for
    para = "What's the way to reset my password?"
    assert cache.lookup(para, partition=PK) is not None
    assert cache.lookup(para, partition=PK, threshold=1.0) is None


def test_threshold_convention_is_inclusive_and_override_is_used(cache):
    from ragcache.semantic.decision.guards import GuardSet

    # the convention, with the guards alone (the learned verifier refuses this pair at cosine 0.52)
    cache = SemanticCache(embedder=cache.embedder, guards=GuardSet.default(), threshold=FAQ_THRESHOLD)
    cache.store("How do I track my package?", "Use the tracking page.", partition=PK)
    q = "Where can I see the shipping status of my order?"
    sim = cache.candidates_for(q, partition=PK)[0].similarity
    assert cache.lookup(q, partition=PK, threshold=sim) is not None  # sim >= threshold hits
    assert cache.lookup(q, partition=PK, threshold=min(1.0, sim + 1e-3)) is None
    with pytest.raises(ValueError, match=r"\[-1, 1\]"):
        cache.lookup(q, partition=PK, threshold=1.5)


def test_sync_and_async_agree(cache):
    from ragcache.semantic.decision.guards import GuardSet

    # sync and async must agree whatever decides; with the guards alone the first query hits
    cache = SemanticCache(embedder=cache.embedder, guards=GuardSet.default(), threshold=FAQ_THRESHOLD)
    cache.store("Why is the sky blue?", "Rayleigh scattering.", partition=PK)
    qs = ["What makes the daytime sky look blue to us?", "Why is the sky not blue?", "Why is grass green?"]
    sync = [cache.lookup(q, partition=PK) for q in qs]

    async def run():
        await cache.astore("Why is grass green?", "Chlorophyll.", partition=PK)
        return [await cache.alookup(q, partition=PK) for q in qs[:2]]

    a = asyncio.run(run())
    assert [h is not None for h in sync[:2]] == [h is not None for h in a]
    assert sync[0].similarity == pytest.approx(a[0].similarity, abs=1e-6)


@pytest.mark.parametrize(
    "other",
    [
        dict(namespace="other-tenant", model="m1", params={"temperature": 0.0, "max_tokens": 64}, system="sys",
             documents=["doc one text", "doc two text"]),
        dict(namespace="t", model="m2", params={"temperature": 0.0, "max_tokens": 64}, system="sys",
             documents=["doc one text", "doc two text"]),
        dict(namespace="t", model="m1", params={"temperature": 0.7, "max_tokens": 64}, system="sys",
             documents=["doc one text", "doc two text"]),
        dict(namespace="t", model="m1", params={"temperature": 0.0, "max_tokens": 65}, system="sys",
             documents=["doc one text", "doc two text"]),
        dict(namespace="t", model="m1", params={"temperature": 0.0, "max_tokens": 64}, system="sys",
             documents=["doc one text", "doc two text EDITED"]),
        dict(namespace="t", model="m1", params={"temperature": 0.0, "max_tokens": 64}, system="sys",
             documents=["doc one text", "doc two text"], history=[{"role": "user", "content": "hi"}]),
    ],
    ids=["tenant", "model", "temperature", "max_tokens", "edited-document", "history"],
)
def test_partition_isolation(cache, other):
    cache.store("What is the refund window?", "30 days.", partition=PK)
    assert cache.lookup("What is the refund window?", partition=PK) is not None
    assert cache.lookup("What is the refund window?", partition=partition_key(**other)) is None


def test_partition_key_document_order_and_forms():
    a = partition_key(model="m", documents=["x", "y"])
    b = partition_key(model="m", documents=[content_hash("y"), {"text": "x", "id": "doc-x"}])
    assert a.digest == b.digest and "doc-x" in b.invalidation_keys
    with pytest.raises(ValueError, match="JSON-like"):
        partition_key(model="m", params={"stop": object()})
    with pytest.raises(ValueError, match="model"):
        partition_key(model="")


@pytest.mark.parametrize(
    ("stored", "query"),
    [
        ("Is the API rate limited?", "Is the API not rate limited?"),
        ("How many vacation days do employees get after 2 years?", "How many vacation days do employees get after 5 years?"),
        ("How do I enable two-factor authentication?", "How do I disable two-factor authentication?"),
        ("What is the best time of year to visit Lisbon?", "What is the best time of year to visit Porto?"),
        ("How do I transfer money from savings to checking?", "How do I transfer money from checking to savings?"),
    ],
    ids=["negation", "number", "antonym", "entity", "direction"],
)
def test_guards_block_false_hits_and_count_reason(cache, stored, query):
    cache.store(stored, "A", partition=PK)
    assert cache.candidates_for(query, partition=PK)[0].similarity >= cache.threshold  # cosine alone would hit
    assert cache.lookup(query, partition=PK) is None
    st = cache.stats
    assert st.rejected_lookups == 1 and sum(st.rejections.values()) >= 1
    # with guards off, plain cosine serves the wrong answer
    plain = SemanticCache(embedder=cache.embedder, guards=False, threshold=FAQ_THRESHOLD)
    plain.store(stored, "A", partition=PK)
    assert plain.lookup(query, partition=PK) is not None


@pytest.mark.parametrize(
    ("stored", "query"),
    [
        ("If I cancel today, will I get a refund?", "Will I get a refund if I cancel today?"),
        ("How do I change the language of the dashboard?", "how do i chnage the langauge of the dashbaord"),
        ("Hey, sorry to bother you, but how do I turn on dark mode in the app?", "dark mode app how"),
        ("How do I cancel my subscription?", "How can I cancel my subscription?"),
    ],
    ids=["reorder", "typo", "formality", "paraphrase"],
)
def test_paraphrases_still_hit(cache, stored, query):
    cache.store(stored, "A", partition=PK)
    hit = cache.lookup(query, partition=PK)
    assert hit is not None and hit.answer == "A"


def test_ttl_lru_invalidate_clear(embedder):
    c = SemanticCache(embedder=embedder, max_entries=2)
    c.store("How do I reset my password?", "p", partition=PK, ttl_s=0.05)
    time.sleep(0.1)
    assert c.lookup("How do I reset my password?", partition=PK) is None
    assert c.stats.expirations == 1 and len(c) == 0
    c.store("What is the refund window?", "r", partition=PK)
    c.store("Why is the sky blue?", "s", partition=PK)
    assert c.lookup("What is the refund window?", partition=PK) is not None  # refund becomes most recent
    c.store("How do I track my package?", "t", partition=PK)  # evicts the sky (least recently used)
    assert c.stats.evictions == 1
    assert c.lookup("Why is the sky blue?", partition=PK) is None
    other = partition_key(namespace="n2", model="m1", documents=[{"text": "other doc", "id": "kb-7"}])
    c.store("Where is my order?", "o", partition=other)
    assert c.invalidate("kb-7") == 1 and c.lookup("Where is my order?", partition=other) is None
    assert c.invalidate(content_hash("doc one text")) == 1  # the package entry (refund was evicted)
    c.store("Where is my order?", "o", partition=other)
    c.store("What is the refund window?", "r", partition=PK)
    assert c.clear("n2") == 1 and len(c) == 1
    assert c.clear() == 1 and len(c) == 0
    d = c.stats.to_dict()
    assert d["lookups"] == d["hits"] + d["misses"] and 0.0 <= d["hit_rate"] <= 1.0


def test_store_replaces_same_question_and_validates(cache):
    i1 = cache.store("Where is my order?", "old", partition=PK)
    i2 = cache.store(" Where  is my order?", "new", partition=PK)  # the same text: replaced
    assert i1 != i2 and len(cache) == 1
    assert cache.lookup("Where is my order?", partition=PK).answer == "new"
    cache.store("where is my order", "other", partition=PK)  # another text (case, no "?"): its own entry
    assert len(cache) == 2
    with pytest.raises(TypeError, match="answer must be a str"):
        cache.store("q?", 3, partition=PK)
    with pytest.raises(ValueError, match="ttl_s"):
        cache.store("q?", "a", partition=PK, ttl_s=0)
    with pytest.raises(TypeError, match="embedder must be"):
        SemanticCache(embedder=42)
