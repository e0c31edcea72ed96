"""Configuration from RAGCACHE_* variables, and a library that never changes the process environment."""

import os
from pathlib import Path

import pytest

from ragcache.config import ENV_VARS, Config, env_table


def test_defaults_follow_home(tmp_path):
    cfg = Config.from_env({"RAGCACHE_HOME": str(tmp_path)})
    assert cfg.home == tmp_path
    assert cfg.answers_dir == tmp_path / "answers" and cfg.index_dir == tmp_path / "index"
    assert cfg.kv_dir == tmp_path / "kv" / "chunks" and cfg.kv_max_bytes == 2 << 30
    assert cfg.threshold is None and cfg.metrics == "off" and cfg.upstream is None and cfg.allow_downloads is False


def test_every_variable_is_read(tmp_path):
    env = {"RAGCACHE_HOME": str(tmp_path), "RAGCACHE_MODEL": "/m", "RAGCACHE_EMBEDDER": "/e",
           "RAGCACHE_ALLOW_DOWNLOADS": "1", "RAGCACHE_ANSWERS_DIR": str(tmp_path / "a"),
           "RAGCACHE_INDEX_DIR": str(tmp_path / "i"), "RAGCACHE_KV_DIR": str(tmp_path / "k"),
           "RAGCACHE_KV_MAX_BYTES": "1_000", "RAGCACHE_PREFIX_MAX_BYTES": "2000", "RAGCACHE_THRESHOLD": "0.9",
           "RAGCACHE_SEMANTIC_MAX_ENTRIES": "7", "RAGCACHE_SEMANTIC_TTL_S": "60", "RAGCACHE_RECOMPUTE_RATIO": "0.3",
           "RAGCACHE_TOP_K": "2", "RAGCACHE_MAX_NEW_TOKENS": "9", "RAGCACHE_HOST": "0.0.0.0", "RAGCACHE_PORT": "9000",
           "RAGCACHE_UPSTREAM": "http://up", "RAGCACHE_UPSTREAM_TIMEOUT_S": "5", "RAGCACHE_METRICS": "prometheus",
           "RAGCACHE_THREADS": "1", "RAGCACHE_DATA_DIR": str(tmp_path / "d"),
           "RAGCACHE_SEMANTIC_URL": "postgresql://u@h/db", "RAGCACHE_KV_URL": "redis://h:6379/0",
           "RAGCACHE_KV_FORMAT": "int4", "RAGCACHE_KV_GROUP_SIZE": "32", "RAGCACHE_DECODE_CACHE": "quantized",
           "RAGCACHE_MIN_REUSE_TOKENS": "0", "RAGCACHE_SERVE_KEY": "k" * 16, "RAGCACHE_TENANT_HEADER": "x-tenant",
           "RAGCACHE_UPSTREAM_AUTH": "operator",
           "RAGCACHE_BENCH_THREADS": "2", "RAGCACHE_WORDNET_DIR": str(tmp_path / "wn"),
           "RAGCACHE_MAX_FILE_BYTES": "2048", "RAGCACHE_ALLOW_LOW_THRESHOLD": "1",
           "RAGCACHE_MODELS_DIR": str(tmp_path / "m"), "RAGCACHE_CHUNK_ADMISSION": "3", "RAGCACHE_CHUNK_QUEUE": "0"}
    assert set(env) == {v.name for v in ENV_VARS}  # the table documents every variable read
    cfg = Config.from_env(env)
    got = {v.name: getattr(cfg, v.field) for v in ENV_VARS}
    assert got["RAGCACHE_KV_MAX_BYTES"] == 1000 and got["RAGCACHE_ALLOW_DOWNLOADS"] is True
    assert got["RAGCACHE_ANSWERS_DIR"] == tmp_path / "a" and got["RAGCACHE_PORT"] == 9000
    assert (got["RAGCACHE_KV_FORMAT"], got["RAGCACHE_KV_GROUP_SIZE"], got["RAGCACHE_DECODE_CACHE"]) == ("int4", 32, "quantized")
    assert got["RAGCACHE_SEMANTIC_URL"] == "postgresql://u@h/db" and got["RAGCACHE_KV_URL"] == "redis://h:6379/0"
    assert (got["RAGCACHE_CHUNK_ADMISSION"], got["RAGCACHE_CHUNK_QUEUE"]) == (3, 0)
    for bad in ({"RAGCACHE_KV_FORMAT": "int3"}, {"RAGCACHE_DECODE_CACHE": "fast"}, {"RAGCACHE_KV_GROUP_SIZE": "0"}):
        with pytest.raises(ValueError, match=next(iter(bad))):
            Config.from_env({"RAGCACHE_HOME": str(tmp_path), **bad})
    assert got["RAGCACHE_SEMANTIC_TTL_S"] == 60.0 and got["RAGCACHE_THREADS"] == 1 and got["RAGCACHE_BENCH_THREADS"] == 2
    assert got["RAGCACHE_WORDNET_DIR"] == tmp_path / "wn" and got["RAGCACHE_MAX_FILE_BYTES"] == 2048
    assert got["RAGCACHE_ALLOW_LOW_THRESHOLD"] is True and cfg.paths.models == got["RAGCACHE_MODELS_DIR"] == tmp_path / "m"
    assert got["RAGCACHE_DATA_DIR"] == Path(tmp_path / "d") and got["RAGCACHE_UPSTREAM"] == "http://up"
    assert (got["RAGCACHE_SERVE_KEY"], got["RAGCACHE_TENANT_HEADER"], got["RAGCACHE_UPSTREAM_AUTH"]) == \
        ("k" * 16, "x-tenant", "operator")
    assert "k" * 16 not in repr(cfg)  # the serve key is a secret
    with pytest.raises(ValueError, match="RAGCACHE_UPSTREAM_AUTH"):
        Config.from_env({"RAGCACHE_HOME": str(tmp_path), "RAGCACHE_UPSTREAM_AUTH": "anyone"})
    assert Config.from_env(env, top_k=5, model=None).top_k == 5  # explicit options win; None keeps the env value
    assert "RAGCACHE_KV_MAX_BYTES" in env_table()


@pytest.mark.parametrize("var,value", [("RAGCACHE_PORT", "http"), ("RAGCACHE_THRESHOLD", "2"),
                                       ("RAGCACHE_METRICS", "statsd"), ("RAGCACHE_ALLOW_DOWNLOADS", "maybe")])
def test_bad_value_names_the_variable(var, value):
    with pytest.raises(ValueError, match=var):
        Config.from_env({var: value})


COUNTS = ("RAGCACHE_TOP_K", "RAGCACHE_MAX_NEW_TOKENS", "RAGCACHE_SEMANTIC_MAX_ENTRIES", "RAGCACHE_PREFIX_MAX_BYTES")


@pytest.mark.parametrize("var", [*COUNTS, "RAGCACHE_KV_MAX_BYTES"])
def test_a_count_below_its_least_names_only_that_variable(tmp_path, var):
    with pytest.raises(ValueError) as e:
        Config.from_env({"RAGCACHE_HOME": str(tmp_path), var: "-1"})
    assert str(e.value).startswith(f"{var} must be >= ") and "got -1" in str(e.value)
    assert not any(other in str(e.value) for other in (*COUNTS, "RAGCACHE_KV_MAX_BYTES") if other != var)


@pytest.mark.slow
def test_loading_models_leaves_the_environment_alone(monkeypatch):
    import sentence_transformers  # noqa: F401 - third-party imports set KMP_* / TORCHINDUCTOR_* themselves
    from transformers import AutoModelForCausalLM  # noqa: F401

    from ragcache import models

    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setattr(models, "_EMBEDDERS", {})  # force a real load
    before = dict(os.environ)
    emb = models.load_embedder()
    assert emb.encode(["hello"]).shape == (1, emb.dim)
    lm = models.load_model()
    assert lm.fingerprint.name == models.DEFAULT_MODEL
    assert dict(os.environ) == before and "HF_HUB_OFFLINE" not in os.environ
