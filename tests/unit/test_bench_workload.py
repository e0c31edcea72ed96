"""``ragcache bench workload`` end to end on a tiny model and a small slice of the demo's corpus (a smoke run:
the real one is ``ragcache bench workload`` on the embedded model)."""

import json

import pytest
from typer.testing import CliRunner

from ragcache.app.cli import app


@pytest.fixture()
def small_corpus(monkeypatch, tmp_path, tiny_seed1):
    from ragcache.app import corpus, demo, runtime
    from ragcache.testing import HashingEmbedder

    monkeypatch.setenv("RAGCACHE_HOME", str(tmp_path / "home"))
    emb = HashingEmbedder()
    chunks = corpus.stdlib_chunks()[:40]
    monkeypatch.setattr(corpus, "stdlib_chunks", lambda: chunks)
    monkeypatch.setattr(runtime, "query_embedder", lambda cfg: emb)
    monkeypatch.setattr(demo, "bulk_embedder", lambda cfg: (lambda: emb))
    lm = tiny_seed1
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


def test_bench_workload_interleaves_configurations_without_changing_what_each_measures(small_corpus, tmp_path):
    """Segments of one request (configurations interleaved, order turned round) measure the same prefill and reuse
    as one segment per stream: each configuration's engine keeps its own caches from segment to segment. Only the
    defaults' chunk queue may get further at a segment's end (its admitted chunks are computed there, as in a
    pause between requests), so they may hit more, never less."""
    got = {}
    for segment in ("1", "100"):
        out = tmp_path / f"w{segment}.json"
        r = CliRunner().invoke(app, ["bench", "workload", "--model", str(small_corpus), "--limit", "3",
                                     "--regimes", "novel,demo", "--max-new-tokens", "2", "--segment", segment,
                                     "--json", str(out), "--plot", str(tmp_path / "w.png")])
        assert r.exit_code == 0, r.output
        d = json.loads(out.read_text())
        assert d["segment"] == int(segment) and f"--segment {segment}" in d["command"]
        got[segment] = {(regime, c): m for regime, rr in d["regimes"].items() for c, m in rr["configs"].items()}
        for m in got[segment].values():
            assert m["total_cpu_s"] == pytest.approx(sum(row["cpu_s"] for row in m["rows"]) + m["drain_cpu_s"])
            assert m["load_average"] is not None and m["cpu_per_wall"] > 0 and m["drained"]
            starts = [row["cpu_start"] for row in m["rows"]]
            assert starts[0] == 0 and starts == sorted(starts)

    def seen(m):
        return [(row["prompt_tokens"], row["prefill_tokens_reused"], row["docs_hit"] + row["docs_missed"])
                for row in m["rows"]]

    for key, m in got["100"].items():
        assert seen(got["1"][key]) == seen(m), key
        if key != ("demo", "defaults"):
            assert got["1"][key]["chunks_stored"] == m["chunks_stored"], key
            assert got["1"][key]["docs_hit"] == m["docs_hit"], key
    assert got["1"][("demo", "defaults")]["docs_hit"] >= got["100"][("demo", "defaults")]["docs_hit"]
    assert got["1"][("novel", "defaults")]["chunks_stored"] == 0  # seen once each: still nothing computed


def test_bench_workload_names_a_bad_regime(small_corpus, tmp_path):
    r = CliRunner().invoke(app, ["bench", "workload", "--model", str(small_corpus), "--limit", "1",
                                 "--regimes", "novel,sometimes", "--json", str(tmp_path / "w.json")])
    assert r.exit_code != 0 and "sometimes" in r.output and "novel" in r.output
