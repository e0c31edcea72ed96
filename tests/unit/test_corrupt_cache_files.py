"""A corrupt answer-cache SQLite file: one clear `error:` line naming the file and the fix (no traceback),
exit code 2, and the file left untouched for recovery. Also the `ask --threshold` help states the real
default."""

import json
import re

import pytest
from typer.testing import CliRunner

from ragcache.app.cli import app
from ragcache.semantic import DEFAULT_THRESHOLD, SemanticCache

runner = CliRunner()
GARBAGE = b"garbage" * 2000


@pytest.fixture()
def corrupt_home(tmp_path, monkeypatch):
    home = tmp_path / "home"
    (home / "answers").mkdir(parents=True)
    db = home / "answers" / "semantic.sqlite3"
    db.write_bytes(GARBAGE)
    monkeypatch.setenv("RAGCACHE_HOME", str(home))
    return db


@pytest.mark.parametrize("args", [["cache", "stats"], ["cache", "stats", "--json"], ["cache", "ls", "--json"],
                                  ["cache", "show", "1"], ["cache", "evict", "--keep", "1"]])
def test_cli_names_corrupt_answer_db(corrupt_home, args):
    r = runner.invoke(app, args)
    assert r.exit_code == 2, r.output
    assert r.exception is None or isinstance(r.exception, SystemExit), repr(r.exception)
    out = r.stderr
    assert "Traceback" not in out and r.stdout == ""  # errors go to stderr
    if "--json" in args:  # one JSON object under --json
        assert json.loads(out)["exit_code"] == 2
        out = json.loads(out)["error"]
    assert out.startswith("error: ") or "--json" in args, out
    assert str(corrupt_home) in out.replace("\n", "")
    assert "move it aside" in out and "RAGCACHE_ANSWERS_DIR" in out.replace("\n", "")
    assert corrupt_home.read_bytes() == GARBAGE  # nothing deleted or overwritten


def test_semantic_cache_open_raises_value_error(corrupt_home):
    with pytest.raises(ValueError, match=re.escape(str(corrupt_home)) + r".*cannot be read.*move it aside"):
        SemanticCache(corrupt_home.parent)
    assert corrupt_home.read_bytes() == GARBAGE


def test_ask_help_states_the_real_default_threshold():
    r = runner.invoke(app, ["ask", "--help"], env={"COLUMNS": "400"})
    assert r.exit_code == 0
    text = " ".join(r.output.split())
    from ragcache.semantic.decision.verifier import load_head

    from ragcache.semantic.decision.pair_model import load_card

    assert f"$RAGCACHE_THRESHOLD, else the decider's gate: {load_card().floor:.2f} with the pair model (the " \
           f"default), {load_head().floor:.2f} with the learned verifier, {DEFAULT_THRESHOLD:.2f} with the guards " \
           f"alone" in text, text


@pytest.mark.parametrize("content", [b"\x01\x02", b"\xff" * 8 + b"{}", (1000).to_bytes(8, "little") + b'{"__metadata__": {"n_tok',
                                     (3).to_bytes(8, "little") + b"[1]"])
def test_cache_show_names_a_bad_chunk_file(tmp_path, monkeypatch, content):
    home = tmp_path / "home"
    kv = home / "kv" / "chunks"
    kv.mkdir(parents=True)
    key = "ab" * 32
    f = kv / f"{key}.safetensors"
    f.write_bytes(content)
    monkeypatch.setenv("RAGCACHE_HOME", str(home))
    r = runner.invoke(app, ["cache", "show", key])
    out = " ".join(r.output.split())
    assert r.exit_code == 2, r.output
    assert out.startswith("error: ") and str(f) in r.output.replace("\n", ""), out
    assert "cache clear --layer chunks" in out, out
    assert f.read_bytes() == content


def test_invalidate_a_missing_file_says_so(tmp_path, monkeypatch):
    monkeypatch.setenv("RAGCACHE_HOME", str(tmp_path / "home"))
    r = runner.invoke(app, ["cache", "invalidate", str(tmp_path / "gone.md")])
    assert r.exit_code == 2, r.output  # issue 22: a path that does not exist is an error naming it
    out = " ".join(r.stderr.split())
    assert "no file" in out and str(tmp_path / "gone.md") in out and "gone.md#0" in out, out
