"""Shared fixtures: one tiny random engine and one embedder per test session (CPU, no network)."""

from __future__ import annotations

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import pytest  # noqa: E402


@pytest.fixture(scope="session")
def tiny_engine():
    """A LocalEngine over ragcache's tiny random Llama, with a chunk cache (structure tests)."""
    from langchain_ragcache.chat_models import TINY_RANDOM_MODEL, shared_engine

    return shared_engine(TINY_RANDOM_MODEL)


@pytest.fixture(scope="session")
def tiny_engine_plain():
    """The tiny random model with the exact prefix cache only (cheapest engine)."""
    from langchain_ragcache.chat_models import TINY_RANDOM_MODEL, shared_engine

    return shared_engine(TINY_RANDOM_MODEL, chunk_cache=False)


@pytest.fixture(scope="session")
def embedder():
    """The packaged all-MiniLM-L6-v2, loaded once."""
    from ragcache.models import load_embedder

    return load_embedder()


@pytest.fixture(autouse=True)
def _no_global_llm_cache():
    """Every test starts and ends without a global LangChain LLM cache."""
    from langchain_core.globals import set_llm_cache

    set_llm_cache(None)
    yield
    set_llm_cache(None)


@pytest.fixture(autouse=True)
def _answers_in_tmp(tmp_path, monkeypatch):
    """The default answer cache is persistent (under $RAGCACHE_HOME): each test gets its own folder,
    so no test reads another's answers and nothing is written to the user's home."""
    monkeypatch.setenv("RAGCACHE_ANSWERS_DIR", str(tmp_path / "answers"))
    monkeypatch.delenv("RAGCACHE_SEMANTIC_URL", raising=False)
