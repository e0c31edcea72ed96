"""``ragcache bench workload`` end to end on a tiny model and a small slice of the demo's corpus (a smoke run:
the real one is ``ragcache bench workload`` on the embedded model)."""

import json

import pytest
from typer.testing import CliRunner

from ragcache.app.cli import app


@pytest.fixture()
def small_corpus(monkeypatch, tmp_path):
    from ragcache.app import corpus, demo, runtime
    from ragcache.testing import HashingEmbedder, tiny_llama

    monkeypatch.setenv("RAGCACHE_HOME", str(tmp_path / "home"))
    emb = HashingEmbedder()
    chunks = corpus.stdlib_chunks()[:40]
    monkeypatch.setattr(corpus, "stdlib_chunks", lambda: chunks)
    monkeypatch.setattr(runtime, "query_embedder", lambda cfg: emb)
    monkeypatch.setattr(demo, "bulk_embedder", lambda cfg: (lambda: emb))
    lm = tiny_llama(seed=1)
    model = tmp_path / "tiny"
    lm.model.save_pretrained(model)
    lm.tokenizer.save_pretrained(model)
    return model


def test_bench_workload_writes_every_regime_and_configuration(small_corpus, tmp_path):
    out, png = tmp_path / "workload.json", tmp_path / "workload.png"
    r = CliRunner().invoke(app, ["bench", "workload", "--model", str(small_corpus), "--limit", "3",
                                 "--max-new-tokens", "2", "--json", str(out), "--plot", str(png)])
    assert r.exit_code == 0, r.output
    d = json.loads(out.read_text())
    assert set(d["regimes"]) == {"novel", "zipf", "demo"} and d["requests"] == 3
    novel = d["regimes"]["novel"]
    assert novel["distinct_docs"] == novel["doc_slots"]  # no document repeats
    for regime in d["regimes"].values():
        assert set(regime["configs"]) == {"defaults", "every_miss", "prefix_only"}
        for m in regime["configs"].values():
            assert len(m["rows"]) == 3 and m["total_cpu_s"] > 0 and 0 <= m["prefill_reused_share"] <= 1
            assert m["chunks_read_again"] <= m["chunks_stored"] and m["drained"]
            assert m["ttft_p50_s"] <= m["ttft_p95_s"] and m["e2e_p50_s"] <= m["e2e_p95_s"]
    cs = novel["configs"]
    assert cs["defaults"]["chunks_stored"] == 0  # seen once each: admission at the second sighting computes none
    assert cs["every_miss"]["chunks_stored"] == novel["distinct_docs"] and cs["every_miss"]["chunks_read_again"] == 0
    assert cs["prefix_only"]["chunks_stored"] == 0 and cs["prefix_only"]["docs_hit"] == 0
    assert "workload" in r.stdout and "prefix_only" in r.stdout


def test_bench_workload_names_a_bad_regime(small_corpus, tmp_path):
    r = CliRunner().invoke(app, ["bench", "workload", "--model", str(small_corpus), "--limit", "1",
                                 "--regimes", "novel,sometimes", "--json", str(tmp_path / "w.json")])
    assert r.exit_code != 0 and "sometimes" in r.output and "novel" in r.output
