"""Memory follows the index (issue 47): an open SQLite + FAISS answer folder holds vectors, ids, questions and
partitions, not the answers; answers are read on a hit; one entry has a size limit and the folder an optional
byte budget."""

from __future__ import annotations

import logging

import pytest

from ragcache.semantic import SemanticCache
from ragcache.testing import HashingEmbedder

EMB = HashingEmbedder()


@pytest.mark.parametrize("size", [10, 50_000, 300_000])
def test_opening_a_folder_reads_no_answer(tmp_path, size):
    answers = {f"How do I rotate key number {i} of service s{i}?": f"{i}:" + "x" * size for i in range(12)}
    with SemanticCache(tmp_path, embedder=EMB) as c:
        for q, a in answers.items():
            c.store(q, a, metadata={"doc": q[:8]})
    with SemanticCache(tmp_path, embedder=EMB) as c:
        held = c.answer_store._entries.values()
        assert len(held) == 12 and not any(hasattr(e, "answer") or hasattr(e, "metadata") for e in held)
        for q, a in answers.items():  # read on a hit, whole
            hit = c.lookup(q)
            assert hit is not None and hit.answer == a and hit.metadata["doc"] == q[:8]


def test_entries_written_by_another_process_are_read_on_a_hit(tmp_path):
    with SemanticCache(tmp_path, embedder=EMB) as reader, SemanticCache(tmp_path, embedder=EMB) as writer:
        assert reader.lookup("What port does the admin API use?") is None
        writer.store("What port does the admin API use?", "8443")
        assert reader.lookup("What port does the admin API use?").answer == "8443"
        writer.store("What port does the admin API use?", "9443")  # replaced: the new answer is read
        assert reader.lookup("What port does the admin API use?").answer == "9443"


@pytest.mark.parametrize("limit", [100, 1000])
def test_an_entry_over_the_size_limit_is_refused_clearly(tmp_path, limit):
    with SemanticCache(tmp_path, embedder=EMB, max_entry_bytes=limit) as c:
        c.store("Short one?", "fits")
        with pytest.raises(ValueError, match=f"max_entry_bytes={limit:,}"):
            c.store("Long one?", "y" * (limit + 1))
        assert len(c) == 1 and c.lookup("Long one?") is None


def test_the_answer_path_answers_an_answer_over_the_limit_unstored(tmp_path, caplog):
    from ragcache import RagCache
    from ragcache.testing.answer_contract import ScriptedBackend

    backend = ScriptedBackend(text="z" * 1500)
    rag = RagCache(backend, semantic=SemanticCache(tmp_path, embedder=EMB, max_entry_bytes=1000))
    with caplog.at_level(logging.WARNING):
        a = rag.answer("Why is the answer long?", ["doc"])
    assert a.text == backend.text and len(rag.semantic) == 0
    assert any("max_entry_bytes" in r.getMessage() for r in caplog.records)
    assert not rag.path.write_boundary.down()  # one refused entry does not back the writes off
    backend.text = "short"
    rag.answer("Why is the answer short?", ["doc"])
    assert len(rag.semantic) == 1


@pytest.mark.parametrize("budget", [3000, 10_000])
def test_a_byte_budget_evicts_the_least_recently_used(tmp_path, budget):
    with SemanticCache(tmp_path, embedder=EMB, max_bytes=budget) as c:
        qs = [f"Where is runbook {i} for cluster c{i * 7}?" for i in range(20)]
        for q in qs:
            c.store(q, "a" * 900)
            assert sum(e.nbytes for e in c.answer_store._entries.values()) <= budget or len(c) == 1
        assert c.lookup(qs[-1]).answer == "a" * 900  # the newest stays
        assert c.lookup(qs[0]) is None  # the oldest went
    with SemanticCache(tmp_path, embedder=EMB, max_bytes=budget) as c:  # sizes known again after a reopen
        assert 0 < sum(e.nbytes for e in c.answer_store._entries.values()) <= budget


@pytest.mark.parametrize("bad", [0, -5, 1.5, True])
def test_bad_limits_are_refused(tmp_path, bad):
    with pytest.raises(ValueError, match="bytes"):
        SemanticCache(tmp_path, embedder=EMB, max_bytes=bad)
    with pytest.raises(ValueError, match="bytes"):
        SemanticCache(tmp_path, embedder=EMB, max_entry_bytes=bad)
