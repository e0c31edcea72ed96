"""What the rest of ragcache reads of a local engine is declared, and a LocalEngine is it (issue 49 item 1):
:class:`~ragcache.engine.interface.ServedEngine` (the local servers), :class:`~ragcache.engine.interface.EngineView`
(the blend, the calibration), the types ``LocalBackend``, ``LocalEngine``, ``ChunkCache`` and the servers check once
where they are given an argument, and the one fingerprint type at the chunk cache and the calibration record."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

import pytest
import torch

from ragcache.engine.backend import LocalBackend
from ragcache.engine.blend.calibration import record_digest
from ragcache.engine.chunk import ChunkCache, MemoryChunkStore
from ragcache.engine.chunk.admission import Sightings
from ragcache.engine.chunk.cache import StoreCalls, fingerprint_digest
from ragcache.engine.chunk.stores import ChunkStore, DiskChunkStore
from ragcache.engine.engine import LocalEngine
from ragcache.engine.engine_config import EngineConfig
from ragcache.engine.interface import BlendConfig, EngineView, KeyedEngine, ServedEngine
from ragcache.engine.request import EngineRequest
from ragcache.identity import ModelFingerprint

MODEL = SimpleNamespace(config=SimpleNamespace(bos_token_id=1))
FP = ModelFingerprint("m", "r" * 40, "float32", template="t" * 64)


@pytest.fixture(scope="module")
def local(tiny_wide3):
    return LocalEngine(tiny_wide3, calibration=False)


def test_a_local_engine_is_a_served_engine_and_every_member_answers(local):
    assert isinstance(local, ServedEngine)
    served: ServedEngine = local
    assert served.fingerprint.digest == local.fingerprint.digest and served.fingerprint.name
    assert served.context_window == local.model.config.max_position_embeddings
    assert served.count_tokens("How long do refunds take?") > 0
    ids = served.build_prompt([{"role": "user", "content": "Hi"}]).input_ids
    assert ids and served.tokenizer.decode(ids)

    async def run() -> list:
        return [ev async for ev in served.astream(EngineRequest("Hi", max_new_tokens=1))]

    events = asyncio.run(run())
    assert events[-1].generation is not None and events[-1].generation.stats.decode_tokens == 1


def test_the_engine_view_reads_the_config_and_the_kv_salt(local):
    view: EngineView = local
    assert isinstance(view.config, EngineConfig)
    config: BlendConfig = EngineConfig(rank_by="deviation")
    assert config.blend_setting is None and config.rank_by == "deviation"
    assert view.config.blend_setting is None and view.config.rank_by is None
    assert view.kv_salt(None) == local.namespace and view.kv_salt("acme").startswith("tenant:")
    assert view.kv_reuse_blocker is None and view.fingerprint.digest == local.fingerprint.digest


def test_a_local_engine_is_a_keyed_engine(local):
    assert isinstance(local, KeyedEngine)
    keyed: KeyedEngine = local
    assert keyed.model is local.model and keyed.tokenizer is local.tokenizer
    assert keyed.fingerprint == local.fingerprint and keyed.kv_salt("acme") == local.kv_salt("acme")
    assert not isinstance(local.model, KeyedEngine)  # a bare model is told apart (precompute's other form)


@pytest.mark.parametrize("bad", [None, "engine", 3, SimpleNamespace(fingerprint=FP, context_window=8)])
def test_the_servers_refuse_what_is_not_a_served_engine(bad):
    pytest.importorskip("starlette")
    from ragcache.server.anthropic import AnthropicLocalServer
    from ragcache.server.openai import OpenAILocalServer

    for server in (OpenAILocalServer, AnthropicLocalServer):
        with pytest.raises(TypeError, match=f"{server.__name__} needs a LocalEngine.*ServedEngine"):
            server(bad)


def test_the_servers_read_the_engine_directly(local):
    pytest.importorskip("starlette")
    from ragcache.server.openai import OpenAILocalServer, default_model_id

    server = OpenAILocalServer(local)
    assert server.system_fingerprint == f"ragcache-{local.fingerprint.digest[:12]}"
    assert server.models == (default_model_id(local),) == ("tiny-llama",)


@pytest.mark.parametrize("bad", [None, "engine", 3, SimpleNamespace(model=None, tokenizer=None, fingerprint=FP)])
def test_engine_and_backend_take_their_own_types(bad):
    with pytest.raises(TypeError, match="LocalEngine takes a LoadedModel"):
        LocalEngine(bad)
    with pytest.raises(TypeError, match="LocalBackend needs a LocalEngine"):
        LocalBackend(bad)


def test_a_backend_keys_by_the_engines_answer_identity(tiny_wide3):
    plain = LocalEngine(tiny_wide3, calibration=False)
    named = LocalEngine(tiny_wide3, calibration=False, namespace="team-a")
    dated = LocalEngine(tiny_wide3, calibration=False, template_date="2025-03-01")
    assert LocalBackend(plain).model_id == plain.answer_identity == plain.fingerprint.digest
    assert LocalBackend(named).model_id == named.answer_identity != plain.answer_identity
    assert LocalBackend(dated).model_id == f"{dated.answer_identity}@template-date=2025-03-01"


class _HalfStore:
    """The two methods the chunk cache once probed for, and nothing else of :class:`ChunkStore`."""

    def get_many(self, keys, *, fingerprint=None):
        return [None] * len(keys)

    def put(self, kv):
        return True


@pytest.mark.parametrize("bad", ["abc", 1, object(), _HalfStore()])
def test_a_chunk_cache_takes_a_chunk_store(bad):
    with pytest.raises(TypeError, match="store must be a ChunkStore"):
        ChunkCache(bad)


def _members(protocol: type) -> set[str]:
    return {n for n in vars(protocol) if not n.startswith("_") or n == "__len__"} | set(protocol.__annotations__)


def test_the_cache_checks_every_store_member_but_the_remote_round_trip():
    assert _members(StoreCalls) == _members(ChunkStore) - {"nbytes"}


def test_a_chunk_cache_opens_over_a_store_that_is_down():
    """Checking the store's type makes no call into it: a Redis store whose server is down (a refused port) is
    taken, and the first read is a miss (the store's boundary), not an error."""
    pytest.importorskip("redis")
    from ragcache.engine.chunk.stores.redis_store import RedisChunkStore

    store = RedisChunkStore("redis://127.0.0.1:1", timeout_s=1)
    cc = ChunkCache(store)
    assert cc.store is store and cc.lookup(MODEL, FP, [5, 6, 7]) is None


def test_every_packaged_store_is_a_chunk_store_and_the_cache_reads_its_stats(tmp_path):
    for store in (MemoryChunkStore(), DiskChunkStore(tmp_path / "kv")):
        assert isinstance(store, ChunkStore) and isinstance(store, Sightings)
        cc = ChunkCache(store)
        assert cc.stats is store.stats
        assert cc.lookup(MODEL, FP, [5, 6, 7]) is None and cc.stats.misses == 1


@pytest.mark.parametrize("fingerprint", [FP, FP.digest, ModelFingerprint("x", "y", "float16")])
def test_one_fingerprint_type_at_the_chunk_keys(fingerprint):
    cc = ChunkCache()
    digest = fingerprint if isinstance(fingerprint, str) else fingerprint.digest
    assert fingerprint_digest(fingerprint) == digest
    assert cc.bind(MODEL, fingerprint).fingerprint == digest
    assert cc.key(MODEL, fingerprint, [5, 6]) == cc.key(MODEL, digest, [5, 6])


@pytest.mark.parametrize("bad", [None, 7, b"f" * 64, SimpleNamespace(digest="f" * 64)])
def test_a_fingerprint_of_another_type_is_refused(bad):
    with pytest.raises(TypeError, match="fingerprint must be a ModelFingerprint or its digest"):
        ChunkCache().bind(MODEL, bad)


@pytest.mark.parametrize("fingerprint", [FP, ModelFingerprint("m", "r" * 40, "float32")])
def test_a_calibration_record_is_keyed_by_the_weights(fingerprint):
    assert record_digest(fingerprint) == fingerprint.weights_digest == FP.weights_digest
    assert record_digest(fingerprint.weights_digest) == fingerprint.weights_digest  # a record's own field


def test_precompute_takes_an_engine_or_a_model(local):
    cc = ChunkCache(dtype=torch.float32)
    with pytest.raises(TypeError, match="precompute takes a LocalEngine or a bare torch model"):
        cc.precompute(SimpleNamespace(model=local.model), [[5, 6]], progress=False)
