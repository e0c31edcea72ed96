"""RAGCACHE_* folders that are files, and a NaN TTL: a clear error naming the variable and the fix
(before: a bare `[Errno 17] File exists` from deep inside `ask`)."""

import pytest
from typer.testing import CliRunner

from ragcache.app.cli import app
from ragcache.config import Config


@pytest.mark.parametrize("var", ["RAGCACHE_HOME", "RAGCACHE_ANSWERS_DIR", "RAGCACHE_INDEX_DIR", "RAGCACHE_KV_DIR",
                                 "RAGCACHE_DATA_DIR"])
def test_folder_setting_that_is_a_file(tmp_path, var):
    f = tmp_path / "a-file"
    f.write_text("x")
    env = {"RAGCACHE_HOME": str(tmp_path / "home"), var: str(f)}
    with pytest.raises(ValueError, match=f"{var}=.*is a file, not a folder: point {var} at a folder"):
        Config.from_env(env)
    env[var] = str(f / "sub")
    with pytest.raises(ValueError, match=f"{var}=.*lies under .*a-file, which is a file"):
        Config.from_env(env)
    assert f.read_text() == "x"


def test_folders_that_do_not_exist_yet_are_fine(tmp_path):
    cfg = Config.from_env({"RAGCACHE_HOME": str(tmp_path / "new" / "home")})
    assert cfg.answers_dir == tmp_path / "new" / "home" / "answers"


def test_nan_ttl_is_refused():
    with pytest.raises(ValueError, match="RAGCACHE_SEMANTIC_TTL_S must be > 0"):
        Config.from_env({"RAGCACHE_SEMANTIC_TTL_S": "nan"})


def test_cli_names_the_variable(tmp_path, monkeypatch):
    f = tmp_path / "a-file"
    f.write_text("x")
    monkeypatch.setenv("RAGCACHE_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("RAGCACHE_ANSWERS_DIR", str(f))
    r = CliRunner().invoke(app, ["cache", "stats"])
    assert r.exit_code == 2 and r.output.startswith("error: RAGCACHE_ANSWERS_DIR="), r.output


@pytest.mark.parametrize("var", ["RAGCACHE_HOME", "RAGCACHE_ANSWERS_DIR", "RAGCACHE_INDEX_DIR", "RAGCACHE_KV_DIR"])
def test_folder_that_can_never_be_created_names_the_variable(tmp_path, monkeypatch, var):
    ro = tmp_path / "read-only"
    ro.mkdir()
    ro.chmod(0o555)
    # this suite runs as root in CI, where every folder is writable: deny writes to `ro` alone
    monkeypatch.setattr("ragcache.config._cannot_create_in",
                        lambda q: "it is not writable by this user" if q == ro else None)
    env = {"RAGCACHE_HOME": str(tmp_path / "home"), var: str(ro / "cache" / "sub")}
    with pytest.raises(ValueError, match=f"{var}=.*cannot be created: .*read-only exists but it is not writable by "
                                         f"this user; "
                                         f"point {var} at a folder you can write"):
        Config.from_env(env)
    if var == "RAGCACHE_HOME":  # an existing read-only home: the folders under it are named, the fix is HOME
        env[var] = str(ro)
        with pytest.raises(ValueError, match="RAGCACHE_ANSWERS_DIR=.*cannot be created.*point RAGCACHE_HOME at"):
            Config.from_env(env)
    env.update({v: str(ro) for v in ("RAGCACHE_ANSWERS_DIR", "RAGCACHE_INDEX_DIR", "RAGCACHE_KV_DIR")})
    env[var] = str(ro)  # an existing folder is read as is (stats / ls need no write permission)
    assert Config.from_env(env)
    env = {"RAGCACHE_HOME": str(tmp_path / "home"), "RAGCACHE_DATA_DIR": str(ro / "missing")}
    assert Config.from_env(env).data_dir == ro / "missing"  # only read: never created


def test_unwritable_home_through_the_cli(tmp_path, monkeypatch):
    ro = tmp_path / "read-only"
    ro.mkdir()
    monkeypatch.setattr("ragcache.config._cannot_create_in",
                        lambda q: "it is not writable by this user" if q == ro else None)
    monkeypatch.setenv("RAGCACHE_HOME", str(ro / "home"))
    r = CliRunner().invoke(app, ["cache", "stats"])
    assert r.exit_code == 2 and "RAGCACHE_HOME" in r.output and "Traceback" not in r.output


@pytest.mark.parametrize("home", ["/proc/ragcache-home", "/sys/ragcache-home", "/proc/self/ragcache/home"])
def test_a_home_on_a_file_system_that_refuses_folders_is_named_even_for_root(home, monkeypatch):
    """Permission bits pass for root on /proc and /sys; creating the folder does not. The error names the
    variable, the folder that refuses and the reason, never a bare Errno."""
    from pathlib import Path

    top = Path("/" + home.split("/")[1])
    if not top.is_dir():
        pytest.skip(f"no {top} here")
    monkeypatch.setenv("RAGCACHE_HOME", home)
    r = CliRunner().invoke(app, ["cache", "stats"])
    out = " ".join(r.output.split())
    assert r.exit_code == 2 and out.startswith(f"error: RAGCACHE_HOME={home!r} cannot be created:"), out
    assert "creating a folder in it fails" in out or "not writable" in out
    assert "point RAGCACHE_HOME at a folder you can write" in out and "Errno" not in out


@pytest.mark.parametrize("var,value", [("RAGCACHE_THRESHOLD", "1e9"), ("RAGCACHE_THRESHOLD", "nan"),
                                       ("RAGCACHE_MAX_NEW_TOKENS", "0"), ("RAGCACHE_TOP_K", "0"),
                                       ("RAGCACHE_THREADS", "0"), ("RAGCACHE_KV_GROUP_SIZE", "0"),
                                       ("RAGCACHE_TOP_K", "abc")])
def test_a_bad_variable_is_named_with_the_fix(tmp_path, var, value):
    with pytest.raises(ValueError, match=f"{var}.*fix or unset it"):
        Config.from_env({"RAGCACHE_HOME": str(tmp_path / "home"), var: value})
