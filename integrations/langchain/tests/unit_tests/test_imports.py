import langchain_ragcache

EXPECTED_ALL = [
    "CallRecord",
    "ChatRagCache",
    "RagCacheCallbackHandler", "RagCacheEmbeddings", "RagCacheSemanticCache", "RagPrompt", "__version__",
    "RagCacheMiddleware", "RagPromptLayoutMiddleware", "RagCacheGraphCache", "cache_info", "with_cache_info"]


def test_all_imports() -> None:
    assert sorted(langchain_ragcache.__all__) == sorted(EXPECTED_ALL)
    for name in EXPECTED_ALL:
        assert hasattr(langchain_ragcache, name)


def test_agent_classes_load_lazily() -> None:
    from langchain_ragcache.graph_cache import RagCacheGraphCache
    from langchain_ragcache.middleware import (
        RagCacheMiddleware,
        RagPromptLayoutMiddleware,
    )

    assert langchain_ragcache.RagCacheMiddleware is RagCacheMiddleware
    assert langchain_ragcache.RagPromptLayoutMiddleware is RagPromptLayoutMiddleware
    assert langchain_ragcache.RagCacheGraphCache is RagCacheGraphCache


_PROBE = r"""
import json, sys, tempfile, os
from langchain_ragcache import {names}
made = [{make}]
heavy = sorted(m for m in ("torch", "transformers", "sentence_transformers", "ragcache.engine.engine") if m in sys.modules)
print(json.dumps(heavy))
"""


def _heavy_after(tmp_path, names: str, make: str) -> list[str]:
    import json
    import os
    import subprocess
    import sys

    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p), "RAGCACHE_HOME": str(tmp_path / "home"),
           "RAGCACHE_ANSWERS_DIR": str(tmp_path / "answers")}
    out = subprocess.run([sys.executable, "-c", _PROBE.format(names=names, make=make)], env=env, cwd=tmp_path,
                         capture_output=True, text=True, timeout=600, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_package_import_loads_no_torch(tmp_path) -> None:
    assert _heavy_after(tmp_path, "__version__", "") == []


def test_graph_cache_import_and_construction_load_no_torch(tmp_path) -> None:
    assert _heavy_after(tmp_path, "RagCacheGraphCache", f"RagCacheGraphCache({str(tmp_path / 'g.db')!r})") == []


def test_semantic_cache_default_and_in_memory_load_no_torch(tmp_path) -> None:
    # the default persistent store (packaged embedder: loaded on the first embedding, not here),
    # an in-memory one and an own folder
    make = f"RagCacheSemanticCache(), RagCacheSemanticCache(path=None), RagCacheSemanticCache(path={str(tmp_path / 'own')!r})"
    assert _heavy_after(tmp_path, "RagCacheSemanticCache", make) == []


def test_other_light_names_load_no_torch(tmp_path) -> None:
    names = "RagPrompt, RagCacheCallbackHandler, with_cache_info, RagCacheMiddleware, RagPromptLayoutMiddleware"
    make = "RagPrompt(system='s'), RagCacheCallbackHandler(), with_cache_info(), RagCacheMiddleware(), RagPromptLayoutMiddleware()"
    assert _heavy_after(tmp_path, names, make) == []


def test_chat_model_still_imports_the_engine(tmp_path) -> None:
    # the probe can fail: the one name that needs the engine does import it
    assert "ragcache.engine.engine" in _heavy_after(tmp_path, "ChatRagCache", "")


def test_lazy_default_embedder_is_the_loaded_one() -> None:
    import numpy as np

    from ragcache.models import load_embedder
    from ragcache.semantic.embedding import LazyQuestionEmbedder, shared_embedder

    lazy, loaded = shared_embedder(), load_embedder()
    assert isinstance(lazy, LazyQuestionEmbedder)
    assert lazy.fingerprint == loaded.fingerprint and lazy.dim == loaded.dim
    qs = ["How do I rotate the keys?", "When do backups run?"]
    assert np.allclose(lazy.encode(qs), loaded.encode(qs), atol=1e-6) and lazy.loaded
    assert lazy.window == 256 and lazy.count_tokens("rotate keys") >= 3
