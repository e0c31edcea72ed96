"""Process-wide engines and the cache accounting ChatRagCache reports per request."""

from __future__ import annotations

import threading
from typing import Any

from langchain_core.messages import UsageMetadata

from ragcache.engine.engine import LocalEngine, RequestStats
from ragcache.engine.prompt import Prompt
from ragcache.models import DEFAULT_MODEL

TINY_RANDOM_MODEL = "ragcache/tiny-random-llama"
"""Model name of :func:`ragcache.models.tiny_llama` (random weights; for structure-only tests)."""

_ENGINES: dict[tuple, LocalEngine] = {}
_ENGINES_LOCK = threading.Lock()


def shared_engine(model_name: str = DEFAULT_MODEL, *, chunk_cache: bool = True,
                  prefix_cache_bytes: int = 512 << 20) -> LocalEngine:
    """The process-wide :class:`LocalEngine` for a model (loaded on first use, then shared).

    Chat models with the same ``model_name`` / cache settings share one engine and so one
    prefix and chunk cache. ``model_name`` is a local directory, a Hugging Face id in the
    local hub cache, the embedded ``smollm2-135m-instruct``, or ``ragcache/tiny-random-llama``.

    Raises:
        ragcache.models.ModelNotFoundError: the model cannot be found (the message gives the fix).
    """
    key = (model_name, bool(chunk_cache), int(prefix_cache_bytes))
    with _ENGINES_LOCK:
        eng = _ENGINES.get(key)
        if eng is None:
            from ragcache.models import load_model
            from ragcache.testing import tiny_llama

            cc = None
            if chunk_cache:
                from ragcache.engine.chunk_cache import ChunkCache

                cc = ChunkCache()
            loaded = tiny_llama() if model_name == TINY_RANDOM_MODEL else load_model(model_name)
            eng = LocalEngine(loaded, chunk_cache=cc, prefix_cache_bytes=prefix_cache_bytes)
            _ENGINES[key] = eng
        return eng


def layer_of(stats: RequestStats) -> str:
    """Which KV cache served the prompt: ``chunk`` (a cached document's KV reused),
    ``prefix`` (exact prefix blocks reused), else ``model`` (everything computed)."""
    if stats.docs_hit > 0 and stats.chunk_tokens_reused > 0:
        return "chunk"
    if stats.prefix_tokens_reused > 0:
        return "prefix"
    return "model"


def document_hits(engine: LocalEngine, prompt: Prompt, opts: dict[str, Any]) -> list[tuple[int, bool]]:
    """(tokens, cached) of each document block, checked in the chunk store before the call."""
    cc = engine.chunk_cache
    if cc is None or opts.get("use_chunk_cache") is False:
        return []
    out = []
    for s, e, piece in prompt.document_spans():
        out.append((e - s, bool(cc.store.contains(cc.key(engine.model, engine.fingerprint.digest, piece.ids)))))
    return out


def cache_tokens(stats: RequestStats, docs: list[tuple[int, bool]]) -> tuple[int, int]:
    """(cache_read, cache_creation) prompt tokens of one request.

    cache_read: tokens whose KV came from a cache filled by an earlier request: the exact
    prefix plus the reused tokens of documents that were chunk-cache hits. When hits and
    misses mix in one request, CacheBlend's reused tokens are shared between the looked-up
    documents in proportion to their length. cache_creation: tokens of documents whose
    chunk KV was computed and stored by this request.
    """
    looked_up = docs[len(docs) - (stats.docs_hit + stats.docs_missed):] if docs else []
    hit_tokens = sum(n for n, hit in looked_up if hit)
    all_tokens = sum(n for n, _ in looked_up)
    if stats.docs_missed == 0:
        chunk_read = stats.chunk_tokens_reused
    elif stats.docs_hit == 0 or all_tokens == 0:
        chunk_read = 0
    else:
        chunk_read = round(stats.chunk_tokens_reused * hit_tokens / all_tokens)
    return int(stats.prefix_tokens_reused + chunk_read), int(all_tokens - hit_tokens)


def usage_metadata(stats: RequestStats, docs: list[tuple[int, bool]]) -> UsageMetadata:
    read, created = cache_tokens(stats, docs)
    return UsageMetadata(
        input_tokens=int(stats.prompt_tokens),
        output_tokens=int(stats.decode_tokens),
        total_tokens=int(stats.prompt_tokens + stats.decode_tokens),
        input_token_details={"cache_read": read, "cache_creation": created},
    )
