"""The real embedded model end to end with blending forced on at a setting (``recompute_ratio=0.15``, as
``RAGCACHE_RECOMPUTE_RATIO=0.15``): documents found in the chunk cache at new positions are blended and
the answer is labelled approximate with its setting, through ``RagCache`` and through the local
OpenAI-compatible route (headers and body); the stored blended answer is not served to an exact run."""

from __future__ import annotations

import httpx
import pytest

pytestmark = [pytest.mark.slow, pytest.mark.integration]

DOCS = [
    {"id": "keys", "text": "To rotate the API keys, open Settings > Keys and press Rotate. Old keys keep working "
                           "for 24 hours, then stop."},
    {"id": "backups", "text": "Backups run nightly at 02:30 UTC and are kept for 30 days in the eu-west bucket."},
    {"id": "deploys", "text": "Deploys go out on Tuesdays after the change review meeting; hotfixes need two "
                              "approvals."},
]
QUESTION = "How do I rotate the API keys?"


def test_a_blended_answer_of_the_real_model_is_labelled_everywhere(smol):
    from ragcache import ChunkCache, LocalBackend, LocalEngine, RagCache
    from ragcache.semantic import SemanticCache
    from ragcache.server.app import running_server
    from ragcache.testing import HashingEmbedder

    engine = LocalEngine(smol, chunk_cache=ChunkCache(), recompute_ratio=0.15, min_reuse_tokens=0, calibration=False,
                         chunk_admission=1, chunk_queue=0)
    assert engine.blend_setting_name() == "infoflow r=0.15"
    store = SemanticCache(None, embedder=HashingEmbedder())
    rag = RagCache(LocalBackend(engine), semantic=store, doc_order="given", max_new_tokens=4)
    cold = rag.answer(QUESTION, DOCS)
    assert not cold.approximate and cold.layer in ("model", "prefix")  # nothing cached yet: exact prefill
    shifted = rag.answer("Where do backups go and when?", DOCS[::-1])
    assert "chunk" in shifted.layer and shifted.usage.chunk_reused > 0
    assert shifted.approximate and shifted.recompute_ratio == 0.15 and shifted.blend_setting == "infoflow r=0.15"
    assert shifted.approximation == "approximate (blended at infoflow r=0.15)"

    # the stored blended answer is not served to the same model at exact settings
    exact = RagCache(LocalBackend(engine, use_chunk_cache=False), semantic=store, doc_order="given",
                     max_new_tokens=4)
    assert LocalBackend(engine, use_chunk_cache=False).blend_setting is None
    again = exact.answer("Where do backups go and when?", DOCS[::-1])
    assert again.layer != "semantic" and not again.approximate

    # the route on an engine of its own (same setting, empty chunk cache): the RagCache runs above stored
    # these texts' chunk KV under the same (default) tenant, which the route would otherwise reuse at once
    served = LocalEngine(smol, chunk_cache=ChunkCache(), recompute_ratio=0.15, min_reuse_tokens=0, calibration=False,
                         chunk_admission=1, chunk_queue=0)
    with running_server(served) as url:
        model = httpx.get(f"{url}/v1/models").json()["data"][0]["id"]

        def ask(docs):
            parts = [{"type": "text", "text": d["text"]} for d in docs] + [{"type": "text", "text": QUESTION}]
            body = {"model": model, "max_tokens": 4, "temperature": 0, "messages": [{"role": "user", "content": parts}]}
            return httpx.post(f"{url}/v1/chat/completions", json=body, timeout=1200)

        assert ask(DOCS).headers["x-ragcache-approximate"] == "false"  # stores each text part's chunk KV
        r = ask([DOCS[1], DOCS[2], DOCS[0]])
    assert r.status_code == 200, r.text
    assert "chunk" in r.headers["x-ragcache-layer"]
    assert r.headers["x-ragcache-approximate"] == "true"
    assert r.headers["x-ragcache-blend-setting"] == "infoflow r=0.15"
    assert r.json()["ragcache"]["approximate"] is True and r.json()["ragcache"]["blend_setting"] == "infoflow r=0.15"
