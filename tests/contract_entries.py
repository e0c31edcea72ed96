"""The answer-path contract's entry points over a notes folder (RagCache, ``ragcache ask`` in-process),
shared by the unit contract and the ``ragcache ask`` process contract; and RagCache's entries of the
tenant case (:class:`~ragcache.testing.answer_contract.TenantKVContract`) over a local engine.
``ragcache ask`` has no tenant case: it is one user's command, its requests are the default tenant's."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from ragcache.answering import Answer
from ragcache.testing.answer_contract import TENANT_DOCS, TENANT_SYSTEM, ScriptedBackend


def _notes(folder: Path) -> Path:
    folder.mkdir()
    (folder / "backups.md").write_text("# Backups\n\nBackups run nightly at 02:30 UTC and are kept for 30 days.\n")
    (folder / "deploy.txt").write_text("Deploys go out on Tuesdays after the change review meeting.\n")
    return folder


def notes_folder(tmp_path, monkeypatch) -> Path:
    """A notes folder and a fresh $RAGCACHE_HOME whose default answer store every entry point uses."""
    monkeypatch.setenv("RAGCACHE_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("RAGCACHE_THREADS", "1")
    for var in ("RAGCACHE_ANSWERS_DIR", "RAGCACHE_INDEX_DIR", "RAGCACHE_KV_DIR", "RAGCACHE_SEMANTIC_URL"):
        monkeypatch.delenv(var, raising=False)
    return _notes(tmp_path / "notes")


class RagCacheEntry:
    """``RagCache(backend)`` at its defaults (the default answer store) over the folder's chunks,
    with the CLI's system text and budget."""

    name = "RagCache"
    stores_length = False  # cache_truncated=False by default

    def __init__(self, backend: ScriptedBackend, folder: Path) -> None:
        from ragcache import RagCache
        from ragcache.app.corpus import scan_folder
        from ragcache.config import Config
        from ragcache.pipeline import DEFAULT_SYSTEM

        self.docs = [{"id": c.id, "text": c.text} for c in scan_folder(folder).chunks()]
        self.rag = RagCache(backend, system=DEFAULT_SYSTEM, max_new_tokens=Config.from_env().max_new_tokens)

    def ask(self, question: str) -> Answer:
        return self.rag.answer(question, self.docs)


class AskEntry:
    """``ragcache ask`` in-process (:func:`ragcache.app.ask.ask`), its model replaced by the backend."""

    name = "ragcache ask"
    stores_length = True  # cache_truncated=True: documented, served only to the same budget

    def __init__(self, backend: ScriptedBackend, folder: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        monkeypatch.setattr("ragcache.app.ask.LazyLocalBackend", lambda *a, **k: backend)
        self.folder = folder

    def ask(self, question: str) -> Answer:
        from ragcache.app.ask import ask
        from ragcache.config import Config

        return ask(question, self.folder, cfg=Config.from_env(), quiet=True).answer


class RagCacheTenantEntry:
    """``RagCache(LocalBackend(engine))`` without an answer cache, its requests ``tenant``'s: the facade's
    ``namespace=`` (``sync`` / ``async``) or each call's (``per-call``)."""

    stores_length = False

    def __init__(self, engine: Any, tenant: str, mode: str) -> None:
        from ragcache import RagCache
        from ragcache.engine.backend import LocalBackend

        self.name, self.mode, self.tenant = f"RagCache {mode}", mode, tenant
        ns = "default" if mode == "per-call" else tenant
        self.rag = RagCache(LocalBackend(engine), semantic=None, system=TENANT_SYSTEM, namespace=ns, max_new_tokens=2)

    def ask(self, question: str) -> Answer:
        if self.mode == "async":
            return asyncio.run(self.rag.aanswer(question, list(TENANT_DOCS)))
        if self.mode == "per-call":
            return self.rag.answer(question, list(TENANT_DOCS), namespace=self.tenant)
        return self.rag.answer(question, list(TENANT_DOCS))
