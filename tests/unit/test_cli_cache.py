"""`ragcache cache stats|ls|show|invalidate|evict|clear` on a populated RAGCACHE_HOME, each with --json."""

import json

import pytest
from typer.testing import CliRunner

from ragcache.app.cli import app
from cli_doubles import ask_two_answers, cli
from ragcache.backend import BackendResult, CacheUsage

runner = CliRunner()


@pytest.fixture()
def populated(tmp_path, monkeypatch, tiny_seed1):
    home = tmp_path / "home"
    monkeypatch.setenv("RAGCACHE_HOME", str(home))
    base = ask_two_answers(tmp_path, monkeypatch, tiny_seed1)  # chunk KV on disk, two answers
    notes = tmp_path / "notes"
    return {"home": home, "notes": notes, "base": base}


def test_cache_commands(populated):
    notes = populated["notes"]
    s = json.loads(cli("cache", "stats", "--json").stdout)
    assert s["answers"]["entries"] == 2 and s["chunks"]["files"] >= 1 and s["index"]["folders"] == 1
    assert s["chunks"]["bytes"] > 0 and s["prefix"]["persisted"] is False
    assert "answers" in cli("cache", "stats").stdout

    rows = json.loads(cli("cache", "ls", "--json").stdout)
    assert {r["question"] for r in rows} == {"When do backups run?", "When do deploys go out?"}
    text = cli("cache", "ls").stdout
    assert "answer to [When do" in text  # brackets printed literally
    chunks = json.loads(cli("cache", "ls", "--layer", "chunks", "--json").stdout)
    assert chunks and chunks[0]["n_tokens"] > 0
    assert json.loads(cli("cache", "ls", "--layer", "index", "--json").stdout)[0]["source"] == str(notes.resolve())

    one = json.loads(cli("cache", "show", str(rows[0]["id"]), "--json").stdout)
    assert one["answer"].startswith("answer to [") and one["provenance"]["finish_reason"] == "stop"
    assert one["budget"]["finish_reason"] == "stop" and one["budget"]["max_tokens"] is not None  # not null (issue 29)
    kv = json.loads(cli("cache", "show", chunks[0]["key"], "--json").stdout)
    assert kv["metadata"]["format"] == "ragcache-chunk-kv-v2"
    r = runner.invoke(app, ["cache", "show", "99999"])
    assert r.exit_code == 2 and "no stored answer" in r.output
    for bad in ("../../etc/passwd", "ABCDEF", "notes.md#0", "0a/../0b"):  # never read as a path
        r = runner.invoke(app, ["cache", "show", bad])
        assert r.exit_code == 2 and "neither an answer id" in r.output, (bad, r.output)
    r = runner.invoke(app, ["cache", "show", "ab" * 32])
    assert r.exit_code == 2 and "no answer id or chunk key" in r.output

    inv = json.loads(cli("cache", "invalidate", str(notes / "deploy.md"), "--json").stdout)
    assert inv["answers_removed"] == 1
    left = json.loads(cli("cache", "ls", "--json").stdout)
    assert [r["question"] for r in left] == ["When do backups run?"]

    assert json.loads(cli("cache", "evict", "--keep", "0", "--json").stdout)["removed"] == 1
    assert json.loads(cli("cache", "stats", "--json").stdout)["answers"]["entries"] == 0
    ev = json.loads(cli("cache", "evict", "--layer", "chunks", "--max-bytes", "0", "--json").stdout)
    assert ev["removed"] == len(chunks) and ev["bytes_freed"] > 0

    out = json.loads(cli("cache", "clear", "--json", "--yes").stdout)
    assert set(out) == {"answers", "chunks", "index"}
    s = json.loads(cli("cache", "stats", "--json").stdout)
    assert s["answers"]["entries"] == 0 and s["chunks"]["files"] == 0 and s["index"]["folders"] == 0


def test_evicted_answers_stay_gone_after_reopen(populated, monkeypatch):
    cli("cache", "evict", "--keep", "1")
    r = runner.invoke(app, [*populated["base"], "--json", "When do backups run?"], catch_exceptions=False)
    data = json.loads(r.stdout)
    remaining = json.loads(cli("cache", "ls", "--json").stdout)
    assert len(remaining) == 2 and data["layer"] == "model"  # the evicted answer was not served, it was asked anew


@pytest.mark.parametrize("answer, preview", [
    ("line one\nline two", "line one line two"),
    ("a\r\nb\tc", "a b c"),
    ("first\n\n- item\n- item", "first - item - item"),
])
def test_ls_previews_an_answer_on_one_line(populated, monkeypatch, answer, preview):
    def generate(self, layout, *, max_new_tokens, temperature, tenant=None):
        return BackendResult(answer + " \x1b[31mred", "model", CacheUsage.local(prompt_tokens=5))

    monkeypatch.setattr("ragcache.engine.backend.LocalBackend.generate", generate)
    cli(*populated["base"], "How are the notes laid out?")
    text = cli("cache", "ls").stdout
    assert preview in text and "\\x0a" not in text and "\\x09" not in text and "\\x0d" not in text
    assert "\\x1b[31mred" in text  # other control characters stay visible escapes
    full = [r for r in json.loads(cli("cache", "ls", "--json").stdout) if r["question"] == "How are the notes laid out?"]
    assert full and full[0]["answer"].startswith(answer[:8])  # --json keeps the text as stored


def test_cache_stats_counts_every_process_lookups(populated):
    """`cache stats` reports the lookups of every `ragcache ask` run, misses included, and the hit rate."""
    s = json.loads(cli("cache", "stats", "--json").stdout)["answers"]
    assert (s["lookups"], s["lookup_hits"], s["lookup_misses"]) == (2, 0, 2) and s["hit_rate"] == 0.0
    cli(*populated["base"], "When do backups run?")  # a repeat: answered from the cache
    cli(*populated["base"], "When do backups run?")
    s = json.loads(cli("cache", "stats", "--json").stdout)["answers"]
    assert (s["lookups"], s["lookup_hits"], s["lookup_misses"]) == (4, 2, 2) and s["hit_rate"] == 0.5
    text = " ".join(cli("cache", "stats").stdout.split())
    assert "4 lookups: 2 hits, 2 misses (hit rate 50%)" in text


def test_lookup_totals_of_several_caches_on_one_folder_add_up(tmp_path):
    from ragcache.semantic.stores.folder_admin import FolderAnswers as AnswerStore
    from ragcache.semantic import SemanticCache, partition_key
    from ragcache.testing import HashingEmbedder

    pk = partition_key(namespace="n", model="m")
    assert AnswerStore(tmp_path).stats()["hit_rate"] is None
    with SemanticCache(tmp_path, embedder=HashingEmbedder()) as a, SemanticCache(tmp_path, embedder=HashingEmbedder()) as b:
        assert a.lookup("What is the refund window?", partition=pk) is None
        a.store("What is the refund window?", "30 days", partition=pk)
        a.flush()
        assert b.lookup("What is the refund window?", partition=pk) is not None
        assert b.lookup("Who signs the expense reports?", partition=pk) is None
        a.flush()
        a.flush()  # a second flush adds nothing twice
    s = AnswerStore(tmp_path).stats()
    assert (s["lookups"], s["lookup_hits"], s["lookup_misses"], s["hit_rate"]) == (3, 1, 2, 1 / 3)
