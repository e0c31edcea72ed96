"""The answer stores' admin interface (:class:`ragcache.semantic.stores.admin.AnswerAdmin`, what ``ragcache cache``
calls): the shipped contract (:class:`ragcache.testing.answer_admin_contract.AnswerAdminContract`) over the
embedded folder (:class:`FolderAnswers`) and PostgreSQL (:class:`PgAnswers`), each filled by its own semantic
cache and read back without an embedder."""

from __future__ import annotations

import pytest

from ragcache.semantic import SemanticCache
from ragcache.semantic.stores.folder_admin import FolderAnswers
from ragcache.testing.answer_admin_contract import EMB, AnswerAdminContract


class TestFolderAnswers(AnswerAdminContract):
    @pytest.fixture()
    def opened(self, tmp_path):
        caches: list[SemanticCache] = []

        def open_folder() -> SemanticCache:
            caches.append(SemanticCache(tmp_path / "answers", embedder=EMB, threshold=0.9))
            return caches[-1]
        yield open_folder, FolderAnswers(tmp_path / "answers")
        for c in caches:
            c.close()


class TestPgAnswers(AnswerAdminContract):
    @pytest.fixture()
    def opened(self, request):
        pytest.importorskip("psycopg")
        from pg_doubles import pg_caches, schema_for

        from ragcache.semantic.stores.pg_admin import PgAnswers

        pg_server = request.getfixturevalue("pg_server")
        schema = schema_for("adm_", request.node.name, 40)
        with pg_caches(pg_server.url, schema, embedder=EMB, threshold=0.9) as factory:
            yield factory, PgAnswers(pg_server.url, schema=schema)
