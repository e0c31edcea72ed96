"""The default hit decision on the packaged embedder: the guards at 0.94, or else the learned verifier
(:class:`ragcache.semantic.decision.verifier.GuardsOrVerifier`)."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

from ragcache.semantic import SemanticCache, partition_key
from ragcache.semantic.decision.guards import DIFFERENT_QUESTION, GuardSet, GuardVerdict
from ragcache.semantic.decision.policy import guards_of, make_decider
from ragcache.semantic.decision.verifier import DEFAULT_VERIFIER_THRESHOLD, GuardsOrVerifier, load_head
from ragcache.semantic.embedding import QuestionEmbedder

# One pair per guard that marks a different question: the default refuses each, in both directions,
# and names the guard (never "verifier": the second branch cannot overrule a different question).
DIFFERENT = [
    ("number", "Can I bring a 100ml bottle in my carry-on?", "Can I bring a 200ml bottle in my carry-on?"),
    ("negation", "Is the API rate limited?", "Is the API not rate limited?"),
    ("question_type", "Who founded Acme?", "When was Acme founded?"),
    ("antonym", "How do I upload a file?", "How do I download a file?"),
    ("scope", "What are the daily limits?", "What are the monthly limits?"),
    ("direction", "How do I get from Boston to Denver?", "How do I get from Denver to Boston?"),
    ("bound", "How many copies does the backup keep?", "How many copies does the backup keep at most?"),
    ("complement", "How many employees does Acme have in Europe?", "How many employees does Acme have outside Europe?"),
    ("relative_time", "How do I rotate keys this week?", "How do I rotate keys next week?"),
    ("symbol", "What does %Y mean in strftime?", "What does %y mean in strftime?"),
    ("symbol", "What is 10 / 2?", "What is 10 * 2?"),
]


@pytest.fixture(scope="module")
def embedder():
    from ragcache.semantic.embedding import resolve_embedder

    return resolve_embedder(None)


@pytest.fixture(scope="module")
def default(embedder):
    with SemanticCache(embedder=embedder) as c:
        yield c


def _ask(cache, stored, asked, tag, **kw):
    pk = partition_key(namespace=f"{tag}-{hash((stored, asked)) & 0xffffff}", model="m")
    cache.store(stored, "the stored answer", partition=pk)
    return cache.lookup(asked, partition=pk, **kw), cache.candidates_for(asked, partition=pk, **kw)[0]


def test_the_default_is_guards_or_verifier_on_the_packaged_embedder(default):
    assert isinstance(default.guards, GuardsOrVerifier)
    assert default.threshold == load_head().floor == 0.75
    assert default.guards.head.threshold == DEFAULT_VERIFIER_THRESHOLD
    assert default.guards.names[-1] == "verifier" and "substitution" in default.guards.names


def test_constructing_the_default_cache_loads_no_model():
    code = ("import sys; from ragcache.semantic import SemanticCache; c = SemanticCache(); "
            "assert type(c.guards).__name__ == 'GuardsOrVerifier'; assert 'torch' not in sys.modules, 'torch'")
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)


@pytest.mark.parametrize(("kind", "stored", "asked"), [*DIFFERENT, *((k, b, a) for k, a, b in DIFFERENT)])
def test_a_different_question_is_refused_with_the_guards_reason(default, kind, stored, asked):
    hit, cand = _ask(default, stored, asked, kind, threshold=None)
    assert hit is None
    if cand.similarity >= default.threshold:
        assert cand.verdict.reason in DIFFERENT_QUESTION, cand.verdict
        assert cand.verdict.reason == kind, cand.verdict


def test_the_verifier_branch_serves_what_the_gate_alone_refused(embedder, default):
    # cosine 0.937: below the guards' gate, which the guards alone refuse; the verifier accepts it
    stored, asked = "How do I cancel my order?", "What should I do to cancel my order?"
    with SemanticCache(embedder=embedder, threshold=0.94) as guards_only:
        assert isinstance(guards_only.guards, GuardSet)
        hit, cand = _ask(guards_only, stored, asked, "g")
        assert hit is None and cand.similarity < 0.94
    hit, cand = _ask(default, stored, asked, "d")
    assert hit is not None and hit.answer == "the stored answer" and 0.75 <= hit.similarity < 0.94


def test_a_threshold_the_caller_sets_is_the_guards_gate(embedder, default):
    stored, asked = "How do I cancel my order?", "What should I do to cancel my order?"
    hit, _ = _ask(default, stored, asked, "explicit", threshold=0.94)
    assert hit is None  # per call: the guards at 0.94, as before
    with SemanticCache(embedder=embedder, threshold=0.8) as c:
        assert isinstance(c.guards, GuardSet) and c.threshold == 0.8
        hit, _ = _ask(c, stored, asked, "cache")
        assert hit is not None  # the guards at the caller's 0.8
    with SemanticCache(embedder=embedder, max_error=0.05) as c:
        assert isinstance(c.guards, GuardsOrVerifier)  # max_error decides with the guards (guards_of)
        assert isinstance(guards_of(c.guards), GuardSet)


def test_a_refusal_below_the_gate_is_counted_as_the_verifiers(default):
    hit, cand = _ask(default, "How do I delete my account?", "What's the process for deleting my account?", "below")
    assert default.threshold <= cand.similarity < 0.94
    assert hit is None and cand.verdict.reason == "verifier" and "verifier score" in cand.verdict.detail


def _fake(name: str) -> QuestionEmbedder:
    rng = np.random.default_rng(0)
    table: dict[str, np.ndarray] = {}

    def fn(texts):
        out = []
        for t in texts:
            v = table.setdefault(t, rng.normal(size=8))
            out.append(v / np.linalg.norm(v))
        return np.array(out, np.float32)

    return QuestionEmbedder(fn, name=name, fingerprint=f"fake-{name}", dim=8)


def test_another_embedder_keeps_the_guards_alone():
    assert isinstance(make_decider(True, None, _fake("my-own-embedder")), GuardSet)


def test_the_heads_embedder_without_token_states_decides_with_the_guards_alone():
    d = make_decider(True, None, _fake("all-MiniLM-L6-v2"))
    assert isinstance(d, GuardsOrVerifier) and d.learned is None
    assert d.check("How do I cancel my order?", "How do I cancel my order?", 0.99).ok
    below = d.check("How do I cancel my order?", "What should I do to cancel my order?", 0.90)
    assert below == GuardVerdict("verifier", below.detail) and "no token states" in below.detail
    assert d.check("Is the API rate limited?", "Is the API not rate limited?", 0.99).reason == "negation"


def test_a_user_verifier_or_guard_set_is_kept():
    emb = _fake("all-MiniLM-L6-v2")
    gs = GuardSet.default()
    assert make_decider(gs, None, emb) is gs
    assert isinstance(make_decider(True, lambda a, b: True, emb), GuardSet)
    assert isinstance(make_decider(False, None, emb), GuardSet)
