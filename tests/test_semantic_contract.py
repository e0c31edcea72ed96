"""The semantic-cache contract suite (ragcache.testing.semantic_contract) against both stores:
FAISS + SQLite on disk and PostgreSQL + pgvector started by the session fixture."""

from __future__ import annotations

import pytest

from ragcache.semantic import SemanticCache
from ragcache.testing import HashingEmbedder
from ragcache.testing.semantic_contract import SemanticCacheContract

EMB = HashingEmbedder(64)


class TestFaissSQLite(SemanticCacheContract):
    @pytest.fixture()
    def open_cache(self, tmp_path):
        opened: list[SemanticCache] = []

        def factory(**kw) -> SemanticCache:
            kw.setdefault("embedder", EMB)
            c = SemanticCache(tmp_path / "answers", **kw)
            opened.append(c)
            return c

        yield factory
        for c in opened:
            c.close()


class TestPostgres(SemanticCacheContract):
    @pytest.fixture()
    def open_cache(self, request):
        pytest.importorskip("psycopg", reason="pip install 'ragcache[shared]'")
        pytest.importorskip("pgvector", reason="pip install 'ragcache[shared]'")
        from ragcache.semantic.pg_cache import PgSemanticCache

        pg_server = request.getfixturevalue("pg_server")
        schema = "c_" + "".join(ch if ch.isalnum() else "_" for ch in request.node.name.lower())[:50]
        opened: list[PgSemanticCache] = []

        def factory(**kw) -> PgSemanticCache:
            kw.setdefault("embedder", EMB)
            c = PgSemanticCache(pg_server.url, schema=schema, **kw)
            opened.append(c)
            return c

        yield factory
        import psycopg

        for c in opened:
            c.close()
        with psycopg.connect(pg_server.url, autocommit=True) as conn:
            conn.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")
