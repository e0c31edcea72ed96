"""Which semantic cache a URL names: the one dispatch for ``SemanticCache.from_url``, the CLI and servers.

``postgresql://`` / ``postgres://`` -> :class:`~ragcache.semantic.pg_cache.PgSemanticCache` (shared by
every process on that database); a directory path or ``file://DIR`` -> the embedded cache on disk;
``None`` -> an in-memory embedded cache (the app layer passes ``RAGCACHE_SEMANTIC_URL``). Both are the same
:class:`~ragcache.semantic.decision.policy.SemanticPolicy` over different stores.
"""

from __future__ import annotations

from typing import Any

from ragcache.semantic.decision.policy import SemanticPolicy

POSTGRES_SCHEMES = ("postgresql", "postgres")


def url_scheme(url: str) -> str:
    """The lower-case scheme of ``url`` (``""`` for a plain path)."""
    return url.split("://", 1)[0].lower() if "://" in url else ""


def open_semantic_cache(url: str | None = None, *, file_cache: type[SemanticPolicy], **kwargs: Any) -> SemanticPolicy:
    """Open the cache ``url`` names; ``file_cache`` is the class for paths and ``None`` (the embedded
    :class:`~ragcache.semantic.cache.SemanticCache` or a subclass). ``kwargs`` go to the constructor.

    Raises:
        ValueError: an unknown URL scheme.
    """
    if not url:
        return file_cache(None, **kwargs)
    scheme = url_scheme(url)
    if scheme in POSTGRES_SCHEMES:
        from ragcache.semantic.pg_cache import PgSemanticCache

        return PgSemanticCache(url, **kwargs)
    if scheme in ("", "file"):
        return file_cache(url.removeprefix("file://"), **kwargs)
    raise ValueError(f"unknown semantic cache URL scheme {scheme!r}: use postgresql://..., file://DIR or a path")
