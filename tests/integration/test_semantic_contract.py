"""The semantic-cache contract suite (ragcache.testing.semantic_contract) against both stores:
FAISS + SQLite on disk and PostgreSQL + pgvector started by the session fixture."""

from __future__ import annotations

import pytest

from pg_doubles import pg_caches, schema_for
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
        pg_server = request.getfixturevalue("pg_server")
        with pg_caches(pg_server.url, schema_for("c_", request.node.name, 50), embedder=EMB) as factory:
            yield factory
