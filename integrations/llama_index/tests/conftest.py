"""Shared fixtures: models load once per session (the machine has 2 CPU cores)."""

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import pytest

DOCS = {
    "refunds": "Refunds: annual plans can be refunded within 30 days of purchase. Monthly plans are not refundable.",
    "limits": "Rate limits: the free tier allows 60 requests per minute and the pro tier allows 600 requests per minute.",
    "passwords": "Passwords: reset your password from the account page. Reset links expire after 15 minutes.",
    "regions": "Regions: data of EU customers is stored in Frankfurt and data of US customers in Virginia.",
}


@pytest.fixture(scope="session")
def embed_model():
    """RagCacheEmbedding over the packaged all-MiniLM-L6-v2."""
    from llama_index.embeddings.ragcache import RagCacheEmbedding

    return RagCacheEmbedding()


@pytest.fixture(scope="session")
def tiny():
    """A tiny random float32 Llama (initializer_range 0.2 so that greedy tokens vary)."""
    from ragcache.testing import tiny_llama

    return tiny_llama(seed=0, initializer_range=0.2)


@pytest.fixture(scope="session")
def smol():
    """The embedded SmolLM2-135M-Instruct (answers matter)."""
    from ragcache.models import load_model

    return load_model()


@pytest.fixture()
def documents():
    from llama_index.core import Document

    return [Document(text=t, id_=k) for k, t in DOCS.items()]


@pytest.fixture()
def index(documents, embed_model):
    """A real VectorStoreIndex over the four documents, embedded with RagCacheEmbedding."""
    from llama_index.core import VectorStoreIndex

    return VectorStoreIndex.from_documents(documents, embed_model=embed_model)


@pytest.fixture(autouse=True, scope="module")
def _one_torch_thread():
    """Tiny models run as fast on one thread and do not fight other processes for the 2 cores."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(autouse=True)
def _answers_in_tmp(tmp_path, monkeypatch):
    """The default answer cache is persistent (under $RAGCACHE_HOME): each test gets its own folder,
    so no test reads another's answers and nothing is written to the user's home."""
    monkeypatch.setenv("RAGCACHE_ANSWERS_DIR", str(tmp_path / "answers"))
    monkeypatch.delenv("RAGCACHE_SEMANTIC_URL", raising=False)
