"""Which semantic cache a URL names: the one dispatch for ``SemanticCache.from_url``, the CLI and servers.

The URL is parsed and its kind looked up in :data:`ragcache.store_kinds.ANSWER_STORES` (the one table of
answer stores: ``postgresql://`` / ``postgres://`` -> :class:`~ragcache.semantic.pg_cache.PgSemanticCache`,
shared by every process on that database; a directory path or ``file://DIR`` -> the embedded cache on
disk); ``None`` -> an in-memory embedded cache (the app layer passes ``RAGCACHE_SEMANTIC_URL``). Every
kind is the same :class:`~ragcache.semantic.decision.policy.SemanticPolicy` over a different store.
"""

from __future__ import annotations

from typing import Any

from ragcache.store_kinds import AnswerStoreKind, answer_store_kind, load
from ragcache.semantic.decision.policy import SemanticPolicy


def cache_class(kind: AnswerStoreKind) -> type[SemanticPolicy]:
    """The cache class a row of :data:`~ragcache.store_kinds.ANSWER_STORES` names (imported on first use)."""
    return load(kind.cache)


def open_semantic_cache(url: str | None = None, *, file_cache: type[SemanticPolicy], **kwargs: Any) -> SemanticPolicy:
    """Open the cache ``url`` names; ``file_cache`` is the class for paths and ``None`` (the embedded
    :class:`~ragcache.semantic.cache.SemanticCache` or a subclass). ``kwargs`` go to the constructor.

    Raises:
        ValueError: an unknown URL scheme (the error lists :data:`~ragcache.store_kinds.ANSWER_STORES`).
    """
    if not url:
        return file_cache(None, **kwargs)
    kind = answer_store_kind(url)
    if kind.folder:
        return file_cache(url.removeprefix("file://"), **kwargs)
    return cache_class(kind)(url, **kwargs)
