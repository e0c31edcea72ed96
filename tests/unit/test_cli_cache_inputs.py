"""`ragcache cache show|evict` with keys and numbers a user may mistype: exit 2 with a named error,
never a stack trace, and nothing stored is removed. No model: the answers come from a
SemanticCache with the hashing test embedder, read back by the CLI's AnswerStore."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from ragcache import SemanticCache
from ragcache.testing import HashingEmbedder

runner = CliRunner()


@pytest.fixture()
def home(tmp_path, monkeypatch):
    monkeypatch.setenv("RAGCACHE_HOME", str(tmp_path))
    with SemanticCache(tmp_path / "answers", embedder=HashingEmbedder()) as cache:
        for q in ("What is a canary?", "How long are backups kept?"):
            cache.store(q, "stored answer")
    kv = tmp_path / "kv" / "chunks"
    kv.mkdir(parents=True)
    (kv / ".safetensors").write_bytes(b"not a chunk")  # what an empty key would name as a path
    return tmp_path


def invoke(*args):
    from ragcache.app.cli import app

    r = runner.invoke(app, ["cache", *args])
    assert "Traceback" not in r.output and (r.exception is None or isinstance(r.exception, SystemExit)), \
        (args, r.output, r.exception)
    return r


def entries():
    return len(json.loads(invoke("ls", "--json").stdout))


@pytest.mark.parametrize("entry", ["9" * 19, "9" * 40, str(1 << 63), "0" + "9" * 30])
def test_answer_ids_beyond_sqlite_are_not_found(home, entry):
    r = invoke("show", entry)
    assert r.exit_code == 2 and "no stored answer with id" in r.output


@pytest.mark.parametrize("entry", ["²", "١٢", "¹²³", "٣"])
def test_non_ascii_digits_are_neither_ids_nor_keys(home, entry):
    r = invoke("show", entry)
    assert r.exit_code == 2 and "neither an answer id" in r.output


def test_an_empty_key_is_not_read_as_a_path(home):
    r = invoke("show", "")
    assert r.exit_code == 2 and "neither an answer id" in r.output and "not a safetensors file" not in r.output


def test_existing_ids_still_show(home):
    ids = [row["id"] for row in json.loads(invoke("ls", "--json").stdout)]
    for i in ids:
        assert json.loads(invoke("show", str(i), "--json").stdout)["answer"] == "stored answer"


@pytest.mark.parametrize("bad", ["nan", "-1", "-inf"])
def test_evict_refuses_nan_and_negative_ages_and_keeps_everything(home, bad):
    r = invoke("evict", "--older-than", bad)
    assert r.exit_code == 2 and "--older-than and --keep must be >= 0" in r.output
    assert entries() == 2


def test_evict_offers_only_the_layers_it_evicts(home):
    """`cache evict --help` listed <answers|chunks|index> beside "answers or chunks", then refused index."""
    from ragcache.app.cli import app

    usage = " ".join(runner.invoke(app, ["cache", "evict", "--help"], env={"COLUMNS": "200"}).stdout.split())
    assert "--layer <answers|chunks> answers or chunks" in usage and "clear --layer index" in usage, usage
    r = invoke("evict", "--layer", "index")
    assert r.exit_code == 2 and "'index' is not one of 'answers', 'chunks'" in r.output, r.output
    assert entries() == 2
