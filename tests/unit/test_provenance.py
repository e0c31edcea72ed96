"""Provenance: the one typed record of where a stored answer came from (ragcache.provenance,
re-exported by ragcache.answering). Versioned JSON, and entries stored by earlier releases read:
the pipeline's flat keys, the proxy's, LangChain's serialised generations; a hit built from it."""

from __future__ import annotations

import dataclasses
import json

import pytest

from ragcache.answering import PROVENANCE_KEY, Answer, Provenance, cacheable, hit_answer
from ragcache.backend import BackendResult, CacheUsage
from ragcache.semantic import SemanticCache, partition_key
from ragcache.testing import HashingEmbedder


def test_frozen_slotted_and_versioned_json_round_trip():
    p = Provenance("prefix+chunk", "length", True, 0.15, "local:abc", None, None)
    with pytest.raises(dataclasses.FrozenInstanceError):
        p.layer = "model"  # type: ignore[misc]
    assert not hasattr(p, "__dict__")
    blob = json.loads(json.dumps(p.to_json()))
    assert blob["v"] == Provenance.VERSION == 1
    assert Provenance.from_metadata({PROVENANCE_KEY: blob}) == p


@pytest.mark.parametrize(("kw", "err"), [
    ({"layer": "semantic"}, ValueError), ({"layer": "upstream"}, ValueError), ({"layer": "gpu"}, ValueError),
    ({"layer": "model", "finish_reason": "end_turn"}, ValueError),
    ({"layer": "model", "recompute_ratio": 1.5}, ValueError), ({"layer": "model", "recompute_ratio": True}, ValueError),
    ({"layer": "model", "model": 3}, TypeError), ({"layer": "model", "stop_reason": b"x"}, TypeError),
])
def test_bad_values_are_refused(kw, err):
    with pytest.raises(err):
        Provenance(**kw)


@pytest.mark.parametrize(("meta", "want"), [
    # RagCache.answer before this release (pipeline _entry_metadata)
    ({"finish_reason": "stop", "layer": "prefix+chunk", "approximate": True, "recompute_ratio": 0.15},
     Provenance("prefix+chunk", "stop", True, 0.15)),
    ({"finish_reason": "length", "layer": "model", "approximate": False, "recompute_ratio": None},
     Provenance("model", "length")),
    # the proxy before this release (its forwarded answers were labelled "upstream")
    ({"finish_reason": "stop", "model": "claude-sonnet-4-6", "stop_reason": "stop_sequence", "stop_sequence": "##"},
     Provenance("provider", "stop", model="claude-sonnet-4-6", stop_reason="stop_sequence", stop_sequence="##")),
    ({"layer": "upstream", "finish_reason": "stop"}, Provenance("provider", "stop")),
    # nothing known (metadata of the caller only, or none)
    ({}, Provenance("provider", "stop")), ({"source": "faq"}, Provenance("provider", "stop")),
    # a newer version is read by the fields it shares
    ({PROVENANCE_KEY: {"v": 7, "layer": "chunk", "finish_reason": "stop", "new_field": 1}}, Provenance("chunk")),
])
def test_entries_of_earlier_releases_still_read(meta, want):
    assert Provenance.from_metadata(meta) == want


def test_langchain_generations_of_earlier_releases_still_read():
    lc = pytest.importorskip("langchain_core")
    from langchain_core.load import dumps
    from langchain_core.messages import AIMessage
    from langchain_core.outputs import ChatGeneration

    assert lc
    msg = AIMessage(content="Refunds take 14 days.", response_metadata={
        "model_name": "gpt-x", "ragcache": {"layer": "chunk", "approximate": True, "recompute_ratio": 0.3}})
    meta = {"langchain_generations": dumps([ChatGeneration(message=msg)])}
    assert Provenance.from_metadata(meta) == Provenance("chunk", "stop", True, 0.3, "gpt-x")
    assert Provenance.from_metadata({"langchain_generations": "not json"}) == Provenance("provider")


def test_a_hit_is_built_from_the_stored_provenance_with_zero_usage():
    cache = SemanticCache(None, embedder=HashingEmbedder())
    pk = partition_key(model="m")
    cache.store("How long do refunds take?", "14 days.", partition=pk,
                metadata={"finish_reason": "stop", "layer": "chunk", "approximate": True, "recompute_ratio": 0.2})
    hit = cache.lookup("How long do refunds take?", partition=pk)
    a = hit_answer("How long do refunds take?", hit, 0.004)
    assert isinstance(a, Answer) and a.layer == "semantic" and a.hit and a.usage == CacheUsage()
    assert (a.ttft_s, a.finish_reason, a.approximate, a.recompute_ratio) == (0.004, "stop", True, 0.2)
    assert a.provenance == Provenance("chunk", "stop", True, 0.2)


@pytest.mark.parametrize(("finish", "text", "truncated_ok", "want"), [
    ("stop", "Done.", False, True), ("stop", "   ", False, False), ("length", "Cut", False, False),
    ("length", "Cut", True, True), ("content_filter", "x", True, False), ("tool_calls", "x", True, False),
    ("pause_turn", "x", True, False), ("refusal", "x", True, False), ("context_window", "x", True, False),
    ("incomplete", "x", True, False), ("error", "x", True, False),
])
def test_cacheable_is_one_rule(finish, text, truncated_ok, want):
    r = BackendResult(text, "provider", CacheUsage(), 0.0, finish)  # type: ignore[arg-type]
    assert cacheable(r, cache_truncated=truncated_ok) is want
    with pytest.raises(TypeError):
        cacheable({"text": "x"})  # type: ignore[arg-type]
