"""Settings a user may get wrong (ragcache.config): ~user paths, upstream timeouts; and the docs'
configuration page is the one generated from ENV_VARS (no variable missing, no hand-copied table)."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from ragcache.config import Config, env_table

UNKNOWN = "~no_such_user_ragcache_test"


@pytest.mark.parametrize("var", ["RAGCACHE_HOME", "RAGCACHE_ANSWERS_DIR", "RAGCACHE_INDEX_DIR", "RAGCACHE_KV_DIR",
                                 "RAGCACHE_DATA_DIR"])
def test_home_of_an_unknown_user_names_the_variable(tmp_path, var):
    env = {"RAGCACHE_HOME": str(tmp_path), var: f"{UNKNOWN}/cache"}
    with pytest.raises(ValueError, match=f"{var}=.*give {var} as a full path"):
        Config.from_env(env)


def test_unknown_user_home_through_the_cli(monkeypatch):
    from ragcache.app.cli import app

    monkeypatch.setenv("RAGCACHE_HOME", f"{UNKNOWN}/x")
    r = CliRunner().invoke(app, ["cache", "stats"])
    assert r.exit_code == 2 and "RAGCACHE_HOME" in r.output and r.exception is not None
    assert isinstance(r.exception, SystemExit), r.exception


def test_tilde_of_this_user_still_expands(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))
    cfg = Config.from_env({"RAGCACHE_HOME": "~/rc", "RAGCACHE_KV_DIR": "~/kv"})
    assert cfg.home == tmp_path / "rc" and cfg.kv_dir == tmp_path / "kv" and cfg.answers_dir == tmp_path / "rc" / "answers"


@pytest.mark.parametrize("value", ["nan", "0", "-5", "inf"])
def test_upstream_timeout_must_be_positive_and_finite(tmp_path, value):
    with pytest.raises(ValueError, match="RAGCACHE_UPSTREAM_TIMEOUT_S must be a finite number of seconds > 0"):
        Config.from_env({"RAGCACHE_HOME": str(tmp_path), "RAGCACHE_UPSTREAM_TIMEOUT_S": value})
    assert Config.from_env({"RAGCACHE_HOME": str(tmp_path), "RAGCACHE_UPSTREAM_TIMEOUT_S": "0.5"}).upstream_timeout_s == 0.5


def test_configuration_page_is_generated_from_env_vars():
    import runpy

    from ragcache.config import ENV_VARS

    root = Path(__file__).resolve().parents[2]
    page = runpy.run_path(str(root / "docs" / "gen_reference.py"), run_name="gen_reference")["configuration_page"]()
    for v in ENV_VARS:
        assert f"| `{v.name}` | {v.default} |" in page and v.doc.replace("|", "/") in page, v.name
    header = env_table().splitlines()[0]
    for md in [root / "README.md", *sorted((root / "docs").rglob("*.md"))]:  # one source: no hand-copied table
        assert header not in md.read_text(encoding="utf-8"), f"{md} copies the RAGCACHE_* table: link the page"


@pytest.mark.parametrize("var", ["RAGCACHE_HOME", "RAGCACHE_ANSWERS_DIR", "RAGCACHE_INDEX_DIR", "RAGCACHE_KV_DIR"])
def test_dangling_symlink_names_the_variable(tmp_path, var):
    link = tmp_path / "link"
    link.symlink_to(tmp_path / "gone")
    for path in (link, link / "sub"):
        env = {"RAGCACHE_HOME": str(tmp_path / "home"), var: str(path)}
        with pytest.raises(ValueError, match=f"{var}=.*symbolic link to .*gone.*does not exist"):
            Config.from_env(env)
    (tmp_path / "gone").mkdir()  # once the target exists the link is an ordinary folder
    assert Config.from_env({"RAGCACHE_HOME": str(tmp_path / "home"), var: str(link)})


def test_data_dir_is_only_read_so_a_dangling_link_is_like_a_missing_folder(tmp_path):
    link = tmp_path / "data"
    link.symlink_to(tmp_path / "gone")
    assert Config.from_env({"RAGCACHE_HOME": str(tmp_path / "home"), "RAGCACHE_DATA_DIR": str(link)}).data_dir == link
