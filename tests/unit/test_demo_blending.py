"""``ragcache demo`` with blending on (issue 40): the second run from a fresh home reuses every document it
finds in the chunk cache, whatever the machine's prefill rate, and its ``chunk KV:`` line is one plain
sentence (what is on, why it is safe, where to read more) while ``--verbose`` logs the whole verdict.

The demo runs as written (:func:`ragcache.app.demo.demo`: its engine settings, its chunk store under
``$RAGCACHE_HOME``, its session loop and summary) with the tiny random model, the hashing embedder, a
few short documents and three turns, so it takes seconds, not the real demo's minutes."""

from __future__ import annotations

import logging

import pytest
from rich.console import Console

from ragcache.app.corpus import Chunk
from ragcache.config import Config

CHUNKS = [
    Chunk("csv#0", "csv.DictReader reads each row of a CSV file into a dict keyed by the header row's field "
                   "names; pass fieldnames= when the file has no header row.", "csv"),
    Chunk("csv#1", "csv.reader returns an iterator over the rows of a CSV file, each a list of strings; use "
                   "newline='' when opening the file.", "csv"),
    Chunk("datetime#0", "datetime.strptime(date_string, format) parses a string into a datetime using format "
                        "codes such as %Y-%m-%d.", "datetime"),
    Chunk("sorted#0", "sorted(iterable, key=None, reverse=False) returns a new sorted list; key= takes a function "
                      "such as operator.itemgetter('name').", "builtins"),
]


@pytest.fixture()
def tiny_demo(monkeypatch, tmp_path, tiny_seed1):
    """The demo over the tiny model and four documents; returns ``run(**env) -> (summary, answers, text)``."""
    from ragcache.app import demo as demo_mod
    from ragcache.engine.engine import LocalEngine
    from ragcache.testing import HashingEmbedder

    monkeypatch.setenv("RAGCACHE_HOME", str(tmp_path / "home"))  # a fresh home: chunk KV on disk under it
    for var in ("RAGCACHE_KV_DIR", "RAGCACHE_KV_URL", "RAGCACHE_MIN_REUSE_TOKENS", "RAGCACHE_RECOMPUTE_RATIO"):
        monkeypatch.delenv(var, raising=False)
    emb = HashingEmbedder()
    built: list = []

    def build_engine(cfg, model=None, *, chunk_cache=True, recompute_ratio=None):
        from ragcache.app.runtime import chunk_store
        from ragcache.engine.chunk.cache import ChunkCache

        engine = LocalEngine(tiny_seed1, chunk_cache=ChunkCache(chunk_store(cfg)) if chunk_cache else None,
                             recompute_ratio=cfg.recompute_ratio, min_reuse_tokens=cfg.min_reuse_tokens,
                             calibration=False, home=cfg.paths)
        engine.prefill_rate.value = 1e7  # a fast machine: the cost rule's 0.1 s is worth ~10M tokens here
        built.append(engine)
        return engine

    answers: list = []
    real_session = demo_mod.run_session

    def run_session(*a, **kw):
        answers[:] = real_session(*a, **kw)
        return answers

    monkeypatch.setattr(demo_mod, "build_engine", build_engine)
    monkeypatch.setattr(demo_mod, "query_embedder", lambda cfg: emb)
    monkeypatch.setattr(demo_mod, "bulk_embedder", lambda cfg: (lambda: emb))
    monkeypatch.setattr(demo_mod, "stdlib_chunks", lambda: CHUNKS)
    monkeypatch.setattr(demo_mod, "run_session", run_session)
    monkeypatch.setattr(demo_mod, "DEMO_SESSION", (demo_mod.DEMO_SESSION[0], demo_mod.DEMO_SESSION[1],
                                                   demo_mod.DEMO_SESSION[4]))

    def run(**env):
        for k, v in env.items():
            monkeypatch.setenv(k, v)
        console = Console(width=1000, record=True, force_terminal=False)
        cfg = Config.from_env(top_k=2)
        summary = demo_mod.demo(cfg=cfg, max_new_tokens=2, console=console)
        return summary, list(answers), console.export_text(), built[-1]

    return run


def test_the_second_run_reuses_every_document_it_finds(tiny_demo):
    first, *_ = tiny_demo(RAGCACHE_RECOMPUTE_RATIO="0.15")
    assert first["chunk_docs_total"] > 0
    summary, answers, text, engine = tiny_demo()  # the same home: every document's chunk KV is on disk
    assert engine.recompute_ratio == 0.15 and engine.reuse_policy.min_reuse_tokens == 0
    assert summary["chunk_docs_hit"] == summary["chunk_docs_total"] > 0, "the second run should find every document"
    assert summary["chunk_docs_reused"] == summary["chunk_docs_hit"], text
    model = [a for a in answers if a.layer != "semantic"]
    assert model and all(a.approximate and a.usage.chunk_reused > 0 for a in model)
    assert all(a.blend_setting and "r=0.15" in a.blend_setting for a in model)
    assert "reused (blended" in text and f"chunk cache documents reused (blended)" in text
    assert summary["prefill_tokens_reused"] > first["prefill_tokens_reused"]


def test_a_set_minimum_is_kept(tiny_demo):
    """RAGCACHE_MIN_REUSE_TOKENS still wins: the demo only fills in the unset default."""
    *_, engine = tiny_demo(RAGCACHE_RECOMPUTE_RATIO="0.15", RAGCACHE_MIN_REUSE_TOKENS="100000")
    assert engine.reuse_policy.min_reuse_tokens == 100000


def _line(text: str) -> str:
    return " ".join(next(x for x in text.splitlines() if x.startswith("chunk KV:")).split())


@pytest.mark.parametrize("ratio", [None, "0.15"])
def test_the_chunk_kv_line_is_one_plain_sentence_and_verbose_gives_the_verdict(tiny_demo, caplog, ratio):
    with caplog.at_level(logging.INFO, logger="ragcache"):
        _, _, text, _ = tiny_demo(**({"RAGCACHE_RECOMPUTE_RATIO": ratio} if ratio else {}))
    line = _line(text)
    assert line.endswith("more in docs/guides/local-engine.md.") and line.count(". ") == 0, line
    assert "approximate" in line
    if ratio:
        assert "are reused" in line and "r=0.15" in line and "you asked for it" in line
    else:
        assert "computes them again, exactly" in line and "RAGCACHE_RECOMPUTE_RATIO=0.15" in line
    detail = [r.getMessage() for r in caplog.records if r.getMessage().startswith("chunk KV: calibration:")]
    assert detail and "no calibration record" in detail[0]
