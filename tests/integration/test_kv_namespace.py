"""Issue 24 kind 1 and issue 23 part 3: every KV key carries the engine's namespace (memory, disk
and Valkey chunk stores, and the prefix cache), a new namespace really stops reuse after weights
change in memory, and one request's chunk lookups cost one round trip to Valkey."""

from __future__ import annotations

import copy
import uuid

import pytest
import torch

from ragcache.engine.chunk import ChunkCache, ChunkHit, ChunkMiss, DiskChunkStore, MemoryChunkStore
from ragcache.engine.engine import LocalEngine
from engine_doubles import blending_engine, chunk_engine
from ragcache.hashing import hash_chunk
from ragcache.models import LoadedModel

DOCS = ["The canary deployment lasts fifteen minutes before traffic shifts to the new version entirely.",
        "Rollbacks are triggered automatically when the error rate exceeds two percent for five minutes.",
        "Each region keeps three replicas of the service, and a fourth one is added during peak hours."]


def rag(question="How long does the canary last?", docs=DOCS):
    return [{"role": "system", "content": "Answer from the passages."},
            {"role": "user", "content": [{"type": "text", "text": d, "ragcache_kind": "document"} for d in docs]
             + [{"type": "text", "text": question, "ragcache_kind": "question"}]}]


def store_factory(kind, tmp_path, valkey_url=None):
    """A function giving a new handle on ONE shared chunk store of ``kind`` (as another process would)."""
    if kind == "memory":
        shared = MemoryChunkStore()
        return lambda: shared
    if kind == "disk":
        return lambda: DiskChunkStore(tmp_path / "chunks")
    from ragcache.engine.chunk.stores.redis_store import RedisChunkStore

    prefix = f"ns{uuid.uuid4().hex[:8]}:"
    return lambda: RedisChunkStore(valkey_url, prefix=prefix)


@pytest.fixture(params=["memory", "disk", "redis"])
def shared_store(request, tmp_path):
    url = None
    if request.param == "redis":
        pytest.importorskip("redis")
        url = request.getfixturevalue("valkey_server").url
    return store_factory(request.param, tmp_path, url)


def shared_engine(loaded, store, namespace):
    """A blending engine (any hit blended) on a new handle of the shared ``store``: with the prefix cache
    off in :func:`ask`, the chunk store alone decides reuse."""
    return blending_engine(loaded, store(), namespace=namespace)


def ask(eng, question="How long does the canary last?"):
    return eng.generate(rag(question), max_new_tokens=2, use_prefix_cache=False)


@pytest.mark.parametrize("first,second", [("tenant-a", "tenant-b"), ("tenant-a", None), (None, ""),
                                          ("A", "a")])
def test_engines_with_different_namespaces_never_share_chunk_kv(tiny, shared_store, first, second):
    a, b = shared_engine(tiny, shared_store, first), shared_engine(tiny, shared_store, second)
    assert ask(a).stats.docs_missed == 3
    assert ask(a, "When do rollbacks happen?").stats.docs_hit == 3  # A reuses its own chunks
    got = ask(b)
    assert got.stats.docs_hit == 0 and got.stats.docs_missed == 3 and got.stats.chunk_tokens_reused == 0
    assert ask(b, "When do rollbacks happen?").stats.docs_hit == 3  # B's own chunks, stored next to A's
    assert ask(a, "How many replicas?").stats.docs_hit == 3  # A's are still there


def test_one_chunk_cache_shared_by_two_engines_keeps_namespaces_apart(tiny):
    cc = ChunkCache(MemoryChunkStore(), dtype=torch.float32)
    a = LocalEngine(tiny, chunk_cache=cc, namespace="a", min_reuse_tokens=0, calibration=False,
                   chunk_admission=1, chunk_queue=0)
    b = LocalEngine(tiny, chunk_cache=cc, namespace="b", min_reuse_tokens=0, calibration=False,
                   chunk_admission=1, chunk_queue=0)
    ask(a)
    assert ask(b).stats.docs_hit == 0
    assert len(cc.store) == 6
    a.namespace = "b"  # a namespace changed on a live engine applies to its next request
    assert ask(a, "When do rollbacks happen?").stats.docs_hit == 3


def test_chunk_keys_carry_the_namespace():
    ids = [5, 6, 7]
    keys = {hash_chunk("fp", [1], ids, "float16", ns) for ns in (None, "", "a", "b", "a\x00")}
    assert len(keys) == 5
    assert hash_chunk("fp", [1], ids) == hash_chunk("fp", [1], ids, "float16", None)


def _changed_in_memory(loaded, scale=0.05):
    """The same model object's weights changed after loading (its fingerprint does not change)."""
    model = copy.deepcopy(loaded.model)
    g = torch.Generator().manual_seed(1)
    state = {k: v + scale * torch.randn(v.shape, generator=g) if v.is_floating_point() else v
             for k, v in model.state_dict().items()}
    model.load_state_dict(state)
    return LoadedModel(model, loaded.tokenizer, loaded.fingerprint)


def test_new_namespace_after_in_memory_weight_change_stops_chunk_reuse(tiny, shared_store, tmp_path):
    old = shared_engine(tiny, shared_store, "weights-v1")
    ask(old)
    changed = _changed_in_memory(tiny)
    new = shared_engine(changed, shared_store, "weights-v2")
    assert new.fingerprint.digest == old.fingerprint.digest  # what no digest can see
    got = ask(new)
    assert got.stats.docs_hit == 0 and not got.stats.approximate
    fresh = chunk_engine(changed, calibration=False)
    right = ask(fresh)
    assert torch.equal(got.first_logits, right.first_logits) and got.token_ids == right.token_ids
    # the remedy is needed: under the old namespace the changed model reads the old weights' KV
    stale = ask(shared_engine(changed, shared_store, "weights-v1"))
    assert stale.stats.docs_hit == 3
    assert (stale.first_logits - right.first_logits).abs().max() > 1e-3


@pytest.mark.parametrize("first,second", [("a", "b"), (None, "b"), ("a", None)])
def test_prefix_cache_keys_carry_the_namespace(tiny, first, second):
    eng = LocalEngine(tiny, namespace=first, calibration=False)
    eng.generate(rag(), max_new_tokens=1)
    assert eng.generate(rag("When do rollbacks happen?"), max_new_tokens=1).stats.prefix_tokens_reused > 0
    eng.namespace = second
    assert eng.generate(rag("How many replicas?"), max_new_tokens=1).stats.prefix_tokens_reused == 0
    eng.namespace = first
    assert eng.generate(rag("How many replicas?"), max_new_tokens=1).stats.prefix_tokens_reused > 0


def test_lookup_many_gives_typed_records_and_counts_inside_the_cache(tiny):
    cc = ChunkCache(MemoryChunkStore(), dtype=torch.float32)
    bound = cc.bind(tiny.model, tiny.fingerprint, "t")
    docs = [[11, 12, 13], [21, 22], [31, 32, 33, 34]]
    assert bound.add_many(docs[:2] + docs[:1]) == 2  # each document once
    spans = [(0, 3, docs[0]), (3, 5, docs[1]), (5, 9, docs[2])]
    plan = bound.lookup_many(spans)
    assert [type(x) for x in plan.hits] == [ChunkHit, ChunkHit] and [type(x) for x in plan.missed] == [ChunkMiss]
    assert [(h.start, h.end, h.kv.token_ids) for h in plan.hits] == [(0, 3, docs[0]), (3, 5, docs[1])]
    assert plan.missed[0].token_ids == docs[2] and plan.missed[0].key == bound.key(docs[2])
    assert plan.reusable_tokens == 5 and (cc.hits, cc.misses) == (2, 1)
    assert cc.bind(tiny.model, tiny.fingerprint, "other").lookup_many(spans).hits == []


def test_one_valkey_round_trip_for_a_requests_chunk_lookups(tiny, valkey_server, monkeypatch):
    """Issue 23 checks: the documents of one request are looked up with one round trip (counted on the
    client: pipelines and single commands; and on the server: INFO commandstats)."""
    redis = pytest.importorskip("redis")
    from ragcache.engine.chunk.stores.redis_store import RedisChunkStore

    store = RedisChunkStore(valkey_server.url, prefix=f"rt{uuid.uuid4().hex[:8]}:")
    eng = chunk_engine(tiny, store, calibration=False)
    docs = DOCS + ["Configuration changes are reviewed by two engineers and rolled out on weekdays before noon."]
    eng.generate(rag(docs=docs), max_new_tokens=1, use_prefix_cache=False)  # stores the 4 chunks
    trips: list[str] = []
    real_execute, real_command = redis.client.Pipeline.execute, redis.Redis.execute_command
    monkeypatch.setattr(redis.client.Pipeline, "execute",
                        lambda self, *a, **k: trips.append("pipeline") or real_execute(self, *a, **k))
    monkeypatch.setattr(redis.Redis, "execute_command",
                        lambda self, *a, **k: trips.append(str(a[0])) or real_command(self, *a, **k))
    admin = redis.Redis.from_url(valkey_server.url)
    admin.config_resetstat()
    trips.clear()
    got = eng.generate(rag("When do rollbacks happen?", docs=docs), max_new_tokens=1, use_prefix_cache=False)
    request_trips = list(trips)
    stats = admin.info("commandstats")
    assert got.stats.docs_hit == 4
    assert request_trips == ["pipeline"]
    assert stats["cmdstat_mget"]["calls"] == 1
    assert not {"cmdstat_get", "cmdstat_exists", "cmdstat_evalsha", "cmdstat_eval"} & set(stats)
    store.clear()


def test_precompute_keys_chunks_under_the_engines_namespace(tiny):
    cc = ChunkCache(MemoryChunkStore(), dtype=torch.float32)
    a = LocalEngine(tiny, chunk_cache=cc, namespace="a", min_reuse_tokens=0, calibration=False,
                   chunk_admission=1, chunk_queue=0)
    b = LocalEngine(tiny, chunk_cache=cc, namespace="b", min_reuse_tokens=0, calibration=False,
                   chunk_admission=1, chunk_queue=0)
    docs = [list(piece.ids) for _, _, piece in b.build_prompt(rag()).document_spans()]
    assert cc.precompute(b, docs, progress=False) == 3
    assert cc.precompute(b, docs, progress=False) == 0  # already there, under b
    assert ask(a).stats.docs_hit == 0
    assert ask(b).stats.docs_hit == 3
    assert cc.precompute(tiny.model, docs, fingerprint=tiny.fingerprint, progress=False) == 3  # no salt
    assert cc.precompute(tiny.model, docs, fingerprint=tiny.fingerprint, salt="a", progress=False) == 0
