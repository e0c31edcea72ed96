"""The user-set error bound (``max_error``): vCache's per-entry thresholds learned online.

Pure functions of :mod:`ragcache.semantic.decision.vcache`; the cache on a synthetic stream whose truth is
known (the observed error among hits stays under the bound); explorations never hit and are
counted; the per-entry state survives reopen in SQLite and PostgreSQL; bad arguments.
"""

from __future__ import annotations

import asyncio
import random
import re

import numpy as np
import pytest

from ragcache.semantic import SemanticCache
from ragcache.semantic.decision import vcache as V
from ragcache.semantic.decision.bound import make_equivalence, normalize_answer

DIM = 32
_Q = re.compile(r"topic (\d+) form (\d+)")


class TopicEmbedder:
    """``"topic T form F"`` -> a unit vector: topic ``T``'s base plus form ``F``'s noise of scale
    ``spread[T]``. Topics ``2k`` and ``2k + 1`` have near bases (different answers, similar
    questions): the truth is the topic, the similarity structure is controlled."""

    name = "topic-embedder"
    fingerprint = "topic-embedder-v1"
    dim = DIM

    def __init__(self, topics: int = 40, seed: int = 0) -> None:
        rng = np.random.default_rng(seed)
        base = rng.normal(size=(topics, DIM))
        base[1::2] = base[0::2] + 0.45 * rng.normal(size=(topics // 2, DIM))  # confusable neighbours
        self.base = base / np.linalg.norm(base, axis=1, keepdims=True)
        self.spread = rng.uniform(0.15, 0.55, size=topics)
        self.seed = seed

    def encode(self, texts: list[str]) -> np.ndarray:
        out = []
        for t in texts:
            m = _Q.search(t)
            if m is None:  # answers (equivalence="embedding") and anything else: a hashed direction
                r = np.random.default_rng(abs(hash(t)) % (2**32))
                out.append(r.normal(size=DIM))
                continue
            k, f = int(m.group(1)), int(m.group(2))
            noise = np.random.default_rng([self.seed, k, f]).normal(size=DIM) / np.sqrt(DIM)
            out.append(self.base[k] + self.spread[k] * noise * (f > 0))
        v = np.asarray(out, np.float32)
        return v / np.linalg.norm(v, axis=1, keepdims=True)


def stream(n: int, topics: int = 40, forms: int = 12, seed: int = 1) -> list[tuple[str, int]]:
    rng = random.Random(seed)
    return [(f"topic {k} form {rng.randrange(forms)}", k) for k in (rng.randrange(topics) for _ in range(n))]


def run(cache, items) -> dict:
    hits = wrong = 0
    for q, truth in items:
        hit = cache.lookup(q)
        if hit is not None:
            hits += 1
            wrong += hit.answer != f"answer {truth}"
        else:
            cache.store(q, f"answer {truth}")
    return {"hits": hits, "wrong": wrong}


# ---------------------------------------------------------------------- pure functions
def test_fit_recovers_threshold_and_confidence_grows():
    rng = np.random.default_rng(0)
    s = rng.uniform(0.5, 1.0, 400)
    y = (rng.random(400) < 1 / (1 + np.exp(-30 * (s - 0.8)))).astype(int)
    fit = V.fit_sigmoid(s, y)
    assert fit is not None and abs(fit.t_hat - 0.8) < 0.03 and 15 < fit.gamma < 50
    small = V.fit_sigmoid(s[:20], y[:20])
    assert small is not None and small.var_t > fit.var_t
    # the lower bound is below the point estimate and increases with similarity
    lb = [V.correct_lower_bound(fit, x) for x in (0.7, 0.8, 0.9, 0.99)]
    assert lb == sorted(lb) and lb[1] < 0.5
    assert V.correct_lower_bound(small, 0.9) < V.correct_lower_bound(fit, 0.9)


def test_separable_observations_fit_finite_and_decreasing_variance():
    few = V.fit_sigmoid([0.6, 0.7, 0.75, 0.85, 0.9, 0.95], [0, 0, 0, 1, 1, 1])
    many = V.fit_sigmoid(np.r_[np.linspace(0.5, 0.79, 30), np.linspace(0.81, 1.0, 30)], [0] * 30 + [1] * 30)
    assert few is not None and many is not None
    assert 0.75 < few.t_hat < 0.85 and 0.78 < many.t_hat < 0.82
    assert np.isfinite(few.gamma) and many.var_t < few.var_t
    assert V.fit_sigmoid([0.9, 0.8], [0, 1]) is None  # similarity does not predict correctness
    assert V.fit_sigmoid([0.9], [1]) is None


def test_explore_probability_rules():
    assert V.explore_probability(0.99, 0.02, "hits", hits=20) == 0.0
    assert V.explore_probability(0.99, 0.02, "hits") == 1.0  # no budget yet for its margin
    assert V.explore_probability(0.97, 0.02, "hits", hits=5) == 1.0
    # vCache's rule: 1 - delta / (1 - alpha), clipped
    assert V.explore_probability(0.5, 0.02, "lookups") == pytest.approx(1 - 0.02 / 0.5)
    assert V.explore_probability(0.99, 0.02, "lookups") == 0.0
    assert V.explore_probability(1.0, 0.02, "lookups") == 0.0


def test_state_observations_are_pure_and_capped():
    s0 = {"other": 1}
    s1 = V.add_observation(s0, 0.912345, True)
    assert s0 == {"other": 1} and s1 == {"other": 1, "obs": [[0.9123, 1]]}
    s = None
    for i in range(V.MAX_OBSERVATIONS + 10):
        s = V.add_observation(s, 0.5 + i / 1000, i % 2 == 0)
    assert len(V.observations(s)) == V.MAX_OBSERVATIONS and V.observations(s)[-1][0] == pytest.approx(0.765)
    assert V.observations({"obs": "junk"}) == [] and V.observations(None) == []
    # without observations of both outcomes an entry is explored; pooled evidence is a prior
    assert V.should_explore(None, 0.99, 0.02, 0.5)[0]
    assert V.should_explore({"obs": [[0.9, 1]] * 50}, 0.99, 0.02, 0.5)[0]
    centres = np.linspace(0.5, 1.0, 51)
    pool = V.Pool(centres, (centres > 0.8) * 40.0, (centres <= 0.8) * 40.0)
    kw = {"hits": 20}  # a budget earned by 20 certain hits (0.42 wrong hits)
    assert not V.should_explore(None, 0.99, 0.02, 0.5, pool=pool, pool_weight=2000, **kw)[0]
    assert V.should_explore(None, 0.75, 0.02, 0.5, pool=pool, pool_weight=2000, **kw)[0]
    assert V.should_explore(None, 0.99, 0.02, 0.5, pool=pool, pool_weight=2, **kw)[0]  # a weak prior alone is not enough
    own = {"obs": [[0.82 + i * 0.003, 1] for i in range(40)] + [[0.6, 0], [0.65, 0]]}
    assert not V.should_explore(own, 0.96, 0.02, 0.5, pool=pool, pool_weight=2, **kw)[0]  # its own evidence decides


def test_hit_budget():
    # an uncertain candidate (alpha 0.9) is served only once enough certain hits paid for it and its margin
    z = V.BUDGET_Z * np.sqrt(0.9 * 0.1)  # about 0.49 wrong hits of margin
    need = int(np.ceil((0.1 + z) / 0.02)) - 1  # certain hits before it
    assert V.explore_probability(0.9, 0.02, "hits", spent=0.0, hits=0) == 1.0
    assert V.explore_probability(0.9, 0.02, "hits", spent=0.0, hits=need - 1) == 1.0
    assert V.explore_probability(0.9, 0.02, "hits", spent=0.0, hits=need + 1) == 0.0
    assert V.explore_probability(0.9, 0.02, "hits", spent=0.5, hits=need + 1) == 1.0
    assert V.explore_probability(0.99999, 0.02, "hits") == 0.0  # within the bound on its own


def test_equivalences():
    assert normalize_answer("  Five DAYS, usually. ") == "five days usually"
    exact = make_equivalence("exact")
    assert exact("5 days.", "5 Days") and not exact("5 days", "6 days")
    emb = TopicEmbedder()
    same = make_equivalence("embedding", emb)
    assert same("topic 3 form 0", "topic 3 form 0") and not same("topic 3 form 0", "topic 9 form 0")
    judge = make_equivalence(lambda a, b: len(a) == len(b))
    assert judge("abc", "xyz") and not judge("a", "xyz")


# ---------------------------------------------------------------------- the cache
@pytest.mark.parametrize("bound", [0.02, 0.05])
def test_synthetic_stream_error_stays_under_bound(bound):
    emb = TopicEmbedder()
    items = stream(2500)
    bounded = SemanticCache(embedder=emb, guards=False, typo_correction=False, max_error=bound)
    got = run(bounded, items)
    static = run(SemanticCache(embedder=emb, guards=False, typo_correction=False, threshold=0.80), items)
    repeats = len(items) - len(set(q for q, _ in items))
    assert got["wrong"] <= bound * got["hits"], got
    assert static["wrong"] > bound * static["hits"]  # the stream is hard: a loose static threshold errs
    assert got["hits"] > repeats  # it learned paraphrases, not only verbatim repeats
    st = bounded.stats
    assert st.explorations > 0 and st.outcomes_correct + st.outcomes_wrong == st.explorations
    assert st.hits + st.misses == st.lookups == len(items)


def test_exploration_never_hits_and_is_counted():
    emb = TopicEmbedder()
    c = SemanticCache(embedder=emb, guards=False, typo_correction=False, max_error=0.02)
    i = c.store("topic 4 form 0", "answer 4")
    for f in range(1, 6):  # no evidence yet: every paraphrase is explored, none served
        assert c.lookup(f"topic 4 form {f}") is None
        pending = c.pending_exploration(f"topic 4 form {f}")
        assert pending is not None and pending.entry_id == i and pending.cached_answer == "answer 4"
        c.store(f"topic 4 form {f}", "answer 4")
        assert c.pending_exploration(f"topic 4 form {f}") is None
    st = c.stats
    assert st.explorations == 5 and st.hits == 0 and st.misses == 5 and st.outcomes_correct == 5
    state = c.candidates_for("topic 4 form 0")[0].state
    assert [o[1] for o in state["obs"]] == [1] * 5
    assert c.lookup("topic 4 form 0").answer == "answer 4"  # the same words are always served
    # explore=False: a miss that records nothing
    assert c.lookup("topic 5 form 3", explore=False) is None and c.pending_exploration("topic 5 form 3") is None


def test_guard_rejection_is_a_miss_never_explored():
    c = SemanticCache(typo_correction=False, max_error=0.05, embedder=TopicEmbedder())
    c.store("How do I reset my password in 2 steps?", "A")
    assert c.lookup("How do I reset my password in 3 steps?") is None  # number guard
    assert c.pending_exploration("How do I reset my password in 3 steps?") is None
    assert c.stats.explorations == 0


def test_wrong_outcome_and_explicit_api_and_async():
    emb = TopicEmbedder()
    c = SemanticCache(embedder=emb, guards=False, typo_correction=False, max_error=0.02,
                      equivalence=lambda fresh, cached: fresh.split()[-1] == cached.split()[-1])
    c.store("topic 6 form 0", "answer 6")
    assert asyncio.run(c.alookup("topic 7 form 1")) is None
    exp = c.pending_exploration("topic 7 form 1")
    assert exp is not None and exp.similarity < 1.0
    asyncio.run(c.astore("topic 7 form 1", "answer 7"))
    assert c.stats.outcomes_wrong == 1
    assert c.candidates_for("topic 6 form 0")[0].state["obs"][-1][1] == 0
    assert c.record_outcome(exp, True)  # a caller who judged it himself
    assert [o[1] for o in c.candidates_for("topic 6 form 0")[0].state["obs"]] == [0, 1]
    assert c.resolve("topic 6 form 9", "x") is None  # nothing pending


def test_bad_arguments():
    emb = TopicEmbedder()
    for bad in (0, 1, 1.5, -0.1, 2, "0.02", True, float("nan")):
        with pytest.raises(ValueError, match="max_error must be an error rate in"):
            SemanticCache(embedder=emb, max_error=bad)
    with pytest.raises(ValueError, match="equivalence must be 'exact'"):
        SemanticCache(embedder=emb, max_error=0.02, equivalence="fuzzy")
    with pytest.raises(ValueError, match="equivalence must be 'exact'"):
        SemanticCache(embedder=emb, equivalence=3)
    with pytest.raises(ValueError, match="error_scope must be 'hits'"):
        SemanticCache(embedder=emb, max_error=0.02, error_scope="requests")
    with pytest.raises(ValueError, match="needs a cache built with max_error"):
        SemanticCache(embedder=emb).record_outcome(None, True)  # type: ignore[arg-type]


def _learn(c) -> int:
    i = c.store("topic 8 form 0", "answer 8")
    for f in range(1, 4):
        assert c.lookup(f"topic 8 form {f}") is None
        c.store(f"topic 8 form {f}", "answer 8")
    c.store("topic 9 form 2", "answer 9")  # no lookup before it: nothing pending, nothing learned
    return i


def _check_reopened(c, i) -> None:
    cand = next(x for x in c.candidates_for("topic 8 form 0") if x.entry_id == i)
    assert [o[1] for o in cand.state["obs"]] == [1, 1, 1]


def test_state_survives_reopen_sqlite(tmp_path):
    emb = TopicEmbedder()
    a = SemanticCache(tmp_path, embedder=emb, guards=False, typo_correction=False, max_error=0.02)
    i = _learn(a)
    a.close()
    b = SemanticCache(tmp_path, embedder=emb, guards=False, typo_correction=False, max_error=0.02)
    _check_reopened(b, i)
    b.close()


def test_state_survives_reopen_postgres(pg_server, request):
    pytest.importorskip("psycopg", reason="pip install 'ragcache[shared]'")
    from ragcache.semantic.pg_cache import PgSemanticCache

    schema = "t_error_bound_reopen"
    emb = TopicEmbedder()
    a = PgSemanticCache(pg_server.url, schema=schema, embedder=emb, guards=False, typo_correction=False,
                        max_error=0.02)
    try:
        a.clear()
        i = _learn(a)
        a.close()
        b = PgSemanticCache(pg_server.url, schema=schema, embedder=emb, guards=False, typo_correction=False,
                            max_error=0.02)
        _check_reopened(b, i)
        b.clear()
        b.close()
    finally:
        a.close()


class TopicBackend:
    """Answers ``answer T`` for a question about topic T (a deterministic stand-in for a model)."""

    name = "topic"
    model_id = "topic-1"

    def __init__(self) -> None:
        self.calls = 0

    def generate(self, layout, *, max_new_tokens, temperature, tenant=None):
        from ragcache.backend import BackendResult, CacheUsage

        self.calls += 1
        k = _Q.search(layout.render()).group(1)
        return BackendResult(f"answer {k}", "model", CacheUsage.local(prompt_tokens=8), 0.001, "stop")


def test_pipeline_explores_and_learns_through_ragcache_answer():
    from ragcache import RagCache

    backend = TopicBackend()
    rag = RagCache(backend, semantic=SemanticCache(embedder=TopicEmbedder(), guards=False, typo_correction=False,
                                                   max_error=0.02))
    first = rag.answer("topic 11 form 0", [])
    assert first.layer != "semantic" and backend.calls == 1
    for f in range(1, 4):
        got = rag.answer(f"topic 11 form {f}", [])
        assert got.layer != "semantic" and got.text == "answer 11"  # explored: the model answered
    assert backend.calls == 4
    st = rag.semantic.stats
    assert st.explorations == 3 and st.outcomes_correct == 3 and st.hits == 0
    again = rag.answer("topic 11 form 0", [])
    assert again.layer == "semantic" and backend.calls == 4
    asyncio.run(rag.aanswer("topic 11 form 5", []))
    assert rag.semantic.stats.outcomes_correct == 4
