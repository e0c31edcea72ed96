"""`ragcache cache stats|ls|show|evict|clear` on the stores the settings point at (issue 42): answers in
PostgreSQL + pgvector (``RAGCACHE_SEMANTIC_URL``) and chunk KV in Valkey (``RAGCACHE_KV_URL``), the real
servers of the session fixtures. ``ragcache ask`` fills them (its engine the tiny random model, then a
scripted answer); every command then reads and prunes those stores and names them."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("psycopg")
pytest.importorskip("redis")

from cli_doubles import ask_two_answers, cli  # noqa: E402


def stats() -> dict:
    return json.loads(cli("cache", "stats", "--json").stdout)


@pytest.fixture()
def shared(tmp_path, monkeypatch, pg_server, valkey_server, tiny_seed1):
    monkeypatch.setenv("RAGCACHE_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("RAGCACHE_SEMANTIC_URL", pg_server.url)
    monkeypatch.setenv("RAGCACHE_KV_URL", valkey_server.url)
    cli("cache", "clear", "--yes")  # the default schema and key prefix: start from empty stores
    base = ask_two_answers(tmp_path, monkeypatch, tiny_seed1)  # chunk KV to Valkey, two answers to PostgreSQL
    cli(*base, "When do backups run?")  # a hit
    yield {"base": base, "pg": pg_server.url, "valkey": valkey_server.url}
    cli("cache", "clear", "--yes")


def test_stats_ls_evict_and_clear_work_on_postgresql_and_valkey_and_name_them(shared):
    s = stats()
    a, c = s["answers"], s["chunks"]
    assert a["store"] == "postgresql" and shared["pg"].split("@")[1] in a["where"], a
    assert a["entries"] == 2 and a["partitions"] == 2 and a["namespaces"] == {"default": 2} and a["bytes"] > 0
    assert a["lookups"] == 3 and a["lookup_hits"] == 1 and a["hit_rate"] == pytest.approx(1 / 3)
    assert c["store"] == "redis" and shared["valkey"].removeprefix("redis://") in c["where"], c
    assert c["files"] >= 1 and c["bytes"] > 0 and c["tokens"] > 0
    text = cli("cache", "stats").stdout
    assert "postgresql" in text and "redis" in text and "127.0.0.1" in text

    rows = json.loads(cli("cache", "ls", "--json").stdout)
    assert {r["question"] for r in rows} == {"When do backups run?", "When do deploys go out?"}
    assert rows[0]["question"] == "When do backups run?"  # most recently used first (the hit)
    shown = json.loads(cli("cache", "show", str(rows[1]["id"]), "--json").stdout)
    assert shown["answer"] == "answer to [When do deploys go out?]"
    chunks = json.loads(cli("cache", "ls", "--layer", "chunks", "--json").stdout)
    assert chunks and all(k["n_tokens"] > 0 for k in chunks)
    assert json.loads(cli("cache", "show", chunks[0]["key"], "--json").stdout)["n_tokens"] == chunks[0]["n_tokens"]
    assert "postgresql" in cli("cache", "ls").stdout

    out = json.loads(cli("cache", "evict", "--keep", "1", "--json").stdout)
    assert out["removed"] == 1 and out["where"].startswith("postgresql://"), out
    assert [r["question"] for r in json.loads(cli("cache", "ls", "--json").stdout)] == ["When do backups run?"]
    cli(*shared["base"], "When do backups run?")  # still served from PostgreSQL
    assert stats()["answers"]["lookup_hits"] == 2

    out = json.loads(cli("cache", "evict", "--layer", "chunks", "--max-bytes", "0", "--json").stdout)
    assert out["removed"] == len(chunks) and out["bytes_freed"] > 0
    assert stats()["chunks"]["files"] == 0

    cleared = json.loads(cli("cache", "clear", "--layer", "answers", "--yes", "--json").stdout)
    assert cleared["answers"]["path"].startswith("postgresql://")
    s = stats()
    assert s["answers"]["entries"] == 0 and s["answers"]["lookups"] == 0
