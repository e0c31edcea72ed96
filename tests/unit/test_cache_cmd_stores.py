"""``ragcache cache`` goes through the stores (issue 49 item 3): the kinds come from one table
(:mod:`ragcache.store_kinds`), a scheme no kind lists is a clear error naming the kinds, and the app layer
holds no SQL and reads no store's private fields."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from ragcache.app import cache_cmd
from ragcache.config import Config
from ragcache.store_kinds import CHUNK_STORES

_ROOT = Path(__file__).resolve().parents[2]
APP = _ROOT / "ragcache" / "app"


def settings(tmp_path, kv_url=None) -> Config:
    cfg = Config.from_env({"RAGCACHE_HOME": str(tmp_path)})
    object.__setattr__(cfg, "kv_url", kv_url)  # past the settings' own check: what the commands read
    return cfg


@pytest.mark.parametrize("url, shared", [(None, False), ("/var/kv", False), ("file:///var/kv", False),
                                         ("redis://h:6379/0", True), ("valkey://h:6379/0", True),
                                         ("rediss://h", True), ("unix:///tmp/r.sock", True)])
def test_the_table_says_which_store_is_asked_and_which_folder_is_read(tmp_path, url, shared):
    cfg = settings(tmp_path, url)
    assert (cache_cmd.shared_kv_url(cfg) == url) if shared else cache_cmd.shared_kv_url(cfg) is None
    assert cache_cmd.chunk_kind(cfg).folder is not shared
    if not shared:
        want = Path(url.removeprefix("file://")) if url else cfg.kv_dir
        assert cache_cmd.kv_folder(cfg) == want and cache_cmd.chunk_where(cfg) == str(want)


@pytest.mark.parametrize("url", ["memcached://h:11211", "s3://bucket/kv", "http://h/kv"])
def test_an_unknown_scheme_is_an_error_naming_the_kinds(tmp_path, url):
    cfg = settings(tmp_path, url)
    for command in (cache_cmd.shared_kv_url, cache_cmd.chunk_where, cache_cmd.chunk_files):
        with pytest.raises(ValueError) as e:
            command(cfg)
        msg = str(e.value)
        assert msg.startswith(f"unknown RAGCACHE_KV_URL scheme {url.split('://')[0]!r}"), msg
        assert all(f"{k.name}: {k.summary}" in msg for k in CHUNK_STORES.values()), msg


def private_reads(source: str) -> list[str]:
    """``"line: .name"`` for each read of another object's underscore attribute (not a dunder, not of
    ``self`` / ``cls``) in ``source``, in line order."""
    found = [(n.lineno, n.attr) for n in ast.walk(ast.parse(source))
             if isinstance(n, ast.Attribute) and n.attr.startswith("_") and not n.attr.startswith("__")
             and not (isinstance(n.value, ast.Name) and n.value.id in ("self", "cls"))]
    return [f"{line}: .{attr}" for line, attr in sorted(found)]


def test_the_private_read_scan_finds_one():
    assert private_reads("store._r.zrange(store._lru)\nx.__class__\nself._own = 1\n") == ["1: ._lru", "1: ._r"]


@pytest.mark.parametrize("name", ["cache_cmd.py", "answers.py"])
def test_the_cache_commands_read_no_stores_private_field(name):
    found = private_reads((APP / name).read_text(encoding="utf-8"))
    assert not found, f"ragcache/app/{name} reads a store's private fields (give the store a method): {found}"


@pytest.mark.parametrize("module", sorted(APP.glob("*.py")), ids=lambda p: p.name)
def test_the_app_holds_no_sql(module):
    tree = ast.parse(module.read_text(encoding="utf-8"))
    sql = [n.lineno for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, str)
           and any(k in n.value for k in ("SELECT ", "DELETE FROM", "INSERT INTO"))]
    imports = [n.lineno for n in ast.walk(tree) if isinstance(n, ast.Import | ast.ImportFrom)
               and any(a.name in ("sqlite3", "psycopg") for a in n.names) or
               isinstance(n, ast.ImportFrom) and (n.module or "").split(".")[0] in ("sqlite3", "psycopg")]
    assert not sql and not imports, (f"{module.name} speaks to a database itself (lines {sql + imports}): "
                                     "give the store a method (ragcache.semantic.stores.admin.AnswerAdmin)")
