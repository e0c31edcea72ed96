"""The answer-path contract (:mod:`ragcache.testing.answer_contract`) over RagCache and `ragcache ask`
(in-process): miss -> store -> hit, unfinished answers not stored, 8 concurrent identical misses ->
one backend call, and an answer stored through one entry point served through the other with equal
Answer fields. Both keep answers in the default store ($RAGCACHE_HOME/answers) with the packaged
embedder; the model is the contract's scripted backend."""

from __future__ import annotations

from pathlib import Path

import pytest

from ragcache.answering import Answer
from ragcache.testing.answer_contract import AnswerPathContract, ScriptedBackend


def _notes(folder: Path) -> Path:
    folder.mkdir()
    (folder / "backups.md").write_text("# Backups\n\nBackups run nightly at 02:30 UTC and are kept for 30 days.\n")
    (folder / "deploy.txt").write_text("Deploys go out on Tuesdays after the change review meeting.\n")
    return folder


@pytest.fixture()
def notes(tmp_path, monkeypatch) -> Path:
    """A notes folder and a fresh $RAGCACHE_HOME whose default answer store both entry points use."""
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


ENTRIES = {"ragcache": lambda b, f, mp: RagCacheEntry(b, f), "ask": AskEntry}


@pytest.fixture(params=sorted(ENTRIES))
def make_entry(request, notes, monkeypatch):
    return lambda backend: ENTRIES[request.param](backend, notes, monkeypatch)


@pytest.fixture(params=sorted(ENTRIES))
def make_other(request, notes, monkeypatch):
    return lambda backend: ENTRIES[request.param](backend, notes, monkeypatch)


class TestAnswerPath(AnswerPathContract):
    """Every check of the contract, over RagCache and `ragcache ask`."""


def test_the_default_answer_store_is_under_ragcache_home_and_none_means_none(notes, tmp_path):
    from ragcache import RagCache
    from ragcache.config import Config
    from ragcache.semantic.defaults import default_cache

    backend = ScriptedBackend()
    rag = RagCache(backend)
    assert rag.semantic is default_cache(config=Config.from_env())  # the one store every entry point opens
    rag.answer("When do the backups run?", ["Backups run nightly."])
    assert rag.answer("When do the backups run?", ["Backups run nightly."]).layer == "semantic"
    assert (tmp_path / "home" / "answers" / "semantic.sqlite3").is_file() and backend.calls == 1
    off = RagCache(backend, semantic=None)
    assert off.semantic is None
    assert off.answer("When do the backups run?", ["Backups run nightly."]).layer != "semantic"
    assert off.answer("When do the backups run?", ["Backups run nightly."]).layer != "semantic"
    assert backend.calls == 3


def test_the_test_session_never_uses_the_real_home():
    import os

    real = Path("~/.cache/ragcache").expanduser().resolve()
    assert Path(os.environ["RAGCACHE_HOME"]).resolve() != real
