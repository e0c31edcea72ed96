"""Run every code block of README.md and docs/ as a test (Sybil), with the services a block needs.

- ```python blocks run in order, one namespace per page (like a notebook); ```bash blocks run in
  bash with ``set -e``. A block preceded by ``<!-- skip: next "reason" -->`` is reported as skipped
  with that reason; one preceded by ``<!-- slow: reason -->`` gets the ``slow`` marker.
- Each page runs in its own empty working directory with ``RAGCACHE_HOME`` in a temporary folder,
  so the snippets never write to the real cache home. Only the converted embedded model is shared:
  ``$RAGCACHE_HOME/models`` is a link to the real home's ``models`` folder, which the test suite's
  ``smol`` fixture fills the same way.
- ``ANTHROPIC_BASE_URL`` / ``OPENAI_BASE_URL`` point the SDKs at ragcache's local servers (a tiny random
  model answers, serving ``SmolLM2-135M-Instruct`` and the emulated Claude ids), and on the scaling-out
  page ``RAGCACHE_SEMANTIC_URL`` / ``RAGCACHE_KV_URL`` point at a local PostgreSQL + pgvector and Valkey.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from sybil import Sybil
from sybil.evaluators.python import PythonEvaluator
from sybil.parsers.markdown import CodeBlockParser, PythonCodeBlockParser, SkipParser

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

ROOT = Path(__file__).resolve().parent
SLOW = re.compile(r"<!--\s*slow:[^>]*-->\s*$")
SHARED_PAGES = ("docs/guides/scaling-out.md",)


def _run_bash(example) -> None:
    proc = subprocess.run(["bash", "-e", "-c", example.parsed], capture_output=True, text=True, timeout=900,
                          env=os.environ.copy(), check=False)
    if proc.returncode != 0:
        raise AssertionError(f"bash block exited {proc.returncode}\n--- stdout\n{proc.stdout[-3000:]}\n"
                             f"--- stderr\n{proc.stderr[-3000:]}")


@pytest.fixture(scope="session")
def _docs_servers(tmp_path_factory):
    """ragcache's local Anthropic- and OpenAI-compatible server on a tiny random model."""
    import torch

    from ragcache import ChunkCache, LocalEngine, MemoryChunkStore
    from ragcache.server.app import running_server
    from ragcache.testing import tiny_llama

    engine = LocalEngine(tiny_llama(seed=0), chunk_cache=ChunkCache(MemoryChunkStore(), dtype=torch.float32))
    with running_server(engine, models=["SmolLM2-135M-Instruct"]) as url:
        yield url


def _home_state(home: Path) -> dict[str, tuple[int, int]]:
    """(size, mtime) of every file under ``home`` except the shared ``models`` folder."""
    if not home.is_dir():
        return {}
    return {str(p.relative_to(home)): (p.stat().st_size, p.stat().st_mtime_ns) for p in home.rglob("*")
            if p.is_file() and p.relative_to(home).parts[0] != "models"}


@pytest.fixture()
def docs_env(tmp_path, monkeypatch, _docs_servers):
    """A page's environment: its own working directory and RAGCACHE_HOME, SDKs pointed at the local servers.
    Fails the page if anything under the real cache home (outside ``models``) changed while it ran."""
    from ragcache.config import env_setting

    real_home = Path(env_setting("home")).expanduser()
    before = _home_state(real_home)
    real_models = real_home / "models"
    real_models.mkdir(parents=True, exist_ok=True)
    home = tmp_path / "ragcache-home"
    home.mkdir()
    (home / "models").symlink_to(real_models, target_is_directory=True)
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    monkeypatch.setenv("RAGCACHE_HOME", str(home))
    for var in ("RAGCACHE_SEMANTIC_URL", "RAGCACHE_KV_URL", "RAGCACHE_ANSWERS_DIR", "RAGCACHE_INDEX_DIR",
                "RAGCACHE_KV_DIR", "RAGCACHE_RECOMPUTE_RATIO"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("ANTHROPIC_BASE_URL", _docs_servers)
    monkeypatch.setenv("ANTHROPIC_API_KEY", "local")
    monkeypatch.setenv("OPENAI_BASE_URL", f"{_docs_servers}/v1")
    monkeypatch.setenv("OPENAI_API_KEY", "local")
    monkeypatch.setenv("PATH", f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}")
    yield home
    try:  # a page that set LangChain's global cache must not leave it to the next test
        from langchain_core.globals import set_llm_cache

        set_llm_cache(None)
    except ImportError:
        pass
    after = _home_state(real_home)
    changed = sorted(k for k in before.keys() | after.keys() if before.get(k) != after.get(k))
    assert not changed, f"a docs snippet wrote to the real RAGCACHE_HOME ({real_home}): {changed[:10]}"


@pytest.fixture()
def shared_stores_env(docs_env, monkeypatch, tmp_path_factory):
    """RAGCACHE_SEMANTIC_URL / RAGCACHE_KV_URL on a local PostgreSQL + pgvector and Valkey."""
    from ragcache.testing.local_servers import LocalPostgres, LocalValkey, ServerUnavailable

    try:
        pg, valkey = LocalPostgres(), LocalValkey()
    except ServerUnavailable as e:
        pytest.skip(f"cannot start the local PostgreSQL / Valkey for the scaling-out page: {e}")
    monkeypatch.setenv("RAGCACHE_SEMANTIC_URL", pg.url)
    monkeypatch.setenv("RAGCACHE_KV_URL", valkey.url)
    yield
    pg.close()
    valkey.close()


def _parsers():
    return [SkipParser(), PythonCodeBlockParser(), CodeBlockParser("bash", _run_bash)]


_pages = Sybil(parsers=_parsers(), patterns=["README.md", "docs/**/*.md", "docs/*.md"], excludes=list(SHARED_PAGES),
               fixtures=["docs_env"], name="docs")
_shared = Sybil(parsers=_parsers(), filenames=[Path(p).name for p in SHARED_PAGES], fixtures=["shared_stores_env"],
                name="docs-shared")
pytest_collect_file = (_pages + _shared).pytest()


def pytest_collection_modifyitems(config, items):
    """``<!-- slow: reason -->`` right before a block puts the ``slow`` marker on its test."""
    for item in items:
        example = getattr(item, "example", None)
        if example is None:
            continue
        before = example.document.text[:example.start].rstrip("\n").rsplit("\n", 1)[-1]
        if SLOW.search(before):
            item.add_marker(pytest.mark.slow)
