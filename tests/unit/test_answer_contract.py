"""The answer-path contract (:mod:`ragcache.testing.answer_contract`) over RagCache and `ragcache ask`
(in-process): miss -> store -> hit, unfinished answers not stored, 8 concurrent identical misses ->
one backend call, and an answer stored through one entry point served through the other with equal
Answer fields. Both keep answers in the default store ($RAGCACHE_HOME/answers) with the packaged
embedder; the model is the contract's scripted backend. The tenant case over RagCache (the facade's
namespace, sync and async, and each call's): two tenants of one local engine share no KV unless the
engine opts in."""

from __future__ import annotations

from pathlib import Path

import pytest
from contract_entries import (AskEntry, LangChainEntry, LlamaIndexEntry, RagCacheEntry, RagCacheTenantEntry, notes_folder,
                             restart_in_process)

from ragcache.testing.answer_contract import AnswerPathContract, DefaultsContract, ScriptedBackend, TenantKVContract


@pytest.fixture()
def notes(tmp_path, monkeypatch) -> Path:
    return notes_folder(tmp_path, monkeypatch)


ENTRIES = {"ragcache": lambda b, f, mp: RagCacheEntry(b, f), "ask": AskEntry}


@pytest.fixture(params=sorted(ENTRIES))
def make_entry(request, notes, monkeypatch):
    return lambda backend: ENTRIES[request.param](backend, notes, monkeypatch)


@pytest.fixture(params=sorted(ENTRIES))
def make_other(request, notes, monkeypatch):
    return lambda backend: ENTRIES[request.param](backend, notes, monkeypatch)


class TestAnswerPath(AnswerPathContract):
    """Every check of the contract, over RagCache and `ragcache ask`."""


@pytest.fixture(params=["sync", "async", "per-call"])
def make_tenant_entry(request):
    return lambda engine, tenant: RagCacheTenantEntry(engine, tenant, request.param)


class TestTenantKV(TenantKVContract):
    """Two tenants through RagCache share no KV unless the engine opts in."""


DEFAULT_ENTRIES = {"ragcache": lambda b, f, mp: RagCacheEntry(b, f), "ask": AskEntry,
                   "langchain": lambda b, f, mp: LangChainEntry(b, f), "llamaindex": lambda b, f, mp: LlamaIndexEntry(b, f)}


class TestDefaults(DefaultsContract):
    """At each entry point's defaults (RagCache, `ragcache ask`, the LangChain guide's chain, the LlamaIndex
    query engine), a cut answer is a hit again and after a restart (issue 42)."""

    @pytest.fixture(params=sorted(DEFAULT_ENTRIES))
    def make_entry(self, request, notes, monkeypatch):
        if request.param in ("langchain", "llamaindex"):
            pytest.importorskip("langchain_ragcache" if request.param == "langchain" else "llama_index.core")
        return lambda backend: DEFAULT_ENTRIES[request.param](backend, notes, monkeypatch)

    @pytest.fixture()
    def restart(self):
        return restart_in_process


def test_the_default_answer_store_is_under_ragcache_home_and_none_means_none(notes, tmp_path):
    from ragcache import RagCache
    from ragcache.config import Config
    from ragcache.semantic.defaults import default_cache

    backend = ScriptedBackend()
    rag = RagCache(backend)
    assert rag.semantic is default_cache(config=Config.from_env())  # the one store every entry point opens
    rag.answer("When do the backups run?", ["Backups run nightly."])
    assert rag.answer("When do the backups run?", ["Backups run nightly."]).layer == "semantic"
    assert (tmp_path / "home" / "answers" / "semantic.sqlite3").is_file() and backend.calls == 1
    off = RagCache(backend, semantic=None)
    assert off.semantic is None
    assert off.answer("When do the backups run?", ["Backups run nightly."]).layer != "semantic"
    assert off.answer("When do the backups run?", ["Backups run nightly."]).layer != "semantic"
    assert backend.calls == 3


def test_the_test_session_never_uses_the_real_home():
    import os

    real = Path("~/.cache/ragcache").expanduser().resolve()
    assert Path(os.environ["RAGCACHE_HOME"]).resolve() != real
