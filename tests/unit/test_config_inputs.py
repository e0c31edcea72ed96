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


def test_config_with_a_bad_variable_names_it_and_still_shows_the_others(tmp_path, monkeypatch):
    """`ragcache config` with RAGCACHE_TOP_K=abc printed only the error; the command that shows the
    settings still shows them: each bad variable with its raw value, the others in effect, exit 2."""
    from ragcache.app.cli import app
    from ragcache.config import ENV_VARS

    monkeypatch.setenv("RAGCACHE_HOME", str(tmp_path))
    monkeypatch.setenv("RAGCACHE_TOP_K", "abc")
    monkeypatch.setenv("RAGCACHE_PORT", "0")
    monkeypatch.setenv("RAGCACHE_MAX_NEW_TOKENS", "64")
    r = CliRunner().invoke(app, ["config"], env={"COLUMNS": "400"})
    assert r.exit_code == 2 and isinstance(r.exception, SystemExit), r.output
    err = " ".join(r.stderr.split())
    assert "error: environment variable RAGCACHE_TOP_K='abc' is not an integer: fix or unset it" in err, err
    assert "error: RAGCACHE_PORT must be in 1..65535, got 0" in err, err
    rows = {line.split(None, 1)[0]: line.split(None, 1)[1] for line in r.stdout.splitlines() if line.strip()}
    assert set(rows) == {e.name for e in ENV_VARS}
    assert rows["RAGCACHE_TOP_K"].startswith("'abc' (bad, not used") and "it would be 4" in rows["RAGCACHE_TOP_K"]
    assert rows["RAGCACHE_PORT"].startswith("'0' (bad, not used")
    assert rows["RAGCACHE_MAX_NEW_TOKENS"].startswith("64 ") and rows["RAGCACHE_HOME"].startswith(str(tmp_path))
    monkeypatch.delenv("RAGCACHE_TOP_K")
    monkeypatch.delenv("RAGCACHE_PORT")
    assert CliRunner().invoke(app, ["config"]).exit_code == 0


def test_a_bad_home_is_left_out_and_named(tmp_path):
    from ragcache.config import from_env_skipping_bad

    (tmp_path / "file").write_text("x")
    cfg, bad = from_env_skipping_bad({"RAGCACHE_HOME": str(tmp_path / "file"), "RAGCACHE_TOP_K": "7"})
    assert set(bad) == {"RAGCACHE_HOME"} and "is a file, not a folder" in bad["RAGCACHE_HOME"][1]
    assert cfg.top_k == 7 and cfg.home != tmp_path / "file"
    assert from_env_skipping_bad({"RAGCACHE_HOME": str(tmp_path)})[1] == {}
