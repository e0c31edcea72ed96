"""PostgreSQL test helpers shared by the store tests: caches opened in one schema, closed and the
schema dropped when the test ends."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any


def schema_for(prefix: str, test_name: str, width: int) -> str:
    """A schema name of ``prefix`` and the test's name (non-alphanumerics as ``_``, at most ``width``)."""
    return prefix + re.sub(r"[^0-9a-z]", "_", test_name.lower())[:width]


@contextmanager
def pg_caches(url: str, schema: str, **defaults: Any) -> Iterator[Callable[..., Any]]:
    """Yield ``factory(**kw)`` opening a ``PgSemanticCache`` in ``schema`` (``defaults`` first,
    ``kw`` wins); on exit every cache it opened is closed and the schema dropped."""
    import psycopg

    from ragcache.semantic.pg_cache import PgSemanticCache

    opened: list[PgSemanticCache] = []

    def factory(**kw: Any) -> PgSemanticCache:
        c = PgSemanticCache(url, schema=schema, **{**defaults, **kw})
        opened.append(c)
        return c

    try:
        yield factory
    finally:
        for c in opened:
            c.close()
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")
