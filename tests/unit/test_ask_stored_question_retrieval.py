"""`ragcache ask`: a rewording whose own retrieval moved (another tail document, so another partition) is
served through the documents a stored question retrieves now, and only where those documents are the
current notes and the hit decision accepts the two questions (:func:`ragcache.app.ask.via_stored_question`)."""

import json

import pytest
from typer.testing import CliRunner

from cli_doubles import NOTES, REWORDED, STORED, fixed_answer, home, tiny_dir  # noqa: F401 - fixtures
from ragcache.app.ask import via_stored_question
from ragcache.app.cli import app
from ragcache.app.retrieval import Retrieved
from ragcache.app.corpus import Chunk
from ragcache.pipeline import RagCache
from ragcache.semantic import SemanticCache
from ragcache.testing.answer_contract import ScriptedBackend

runner = CliRunner()



@pytest.fixture()
def notes(tmp_path):
    d = tmp_path / "notes"
    d.mkdir()
    for name, text in NOTES.items():
        (d / name).write_text(text)
    return d


def ask(notes, tiny_dir, *args):
    r = runner.invoke(app, ["ask", "--docs", str(notes), "--model", str(tiny_dir), "--top-k", "2", *args],
                      catch_exceptions=False)
    assert r.exit_code == 0, r.output
    return r


def ids(rows):
    return sorted(x["id"] for x in rows)


def test_a_rewording_with_another_tail_is_served_the_stored_questions_documents(home, notes, tiny_dir, monkeypatch):
    calls = fixed_answer(monkeypatch, "Nightly at 02:30 UTC.")
    first = json.loads(ask(notes, tiny_dir, "--json", STORED).stdout)
    assert first["layer"] == "model" and ids(first["sources"]) == ["backups.md#0", "storage.md#0"]
    out = json.loads(ask(notes, tiny_dir, "--json", REWORDED).stdout)
    assert out["layer"] == "semantic" and out["answer"] == "Nightly at 02:30 UTC." and len(calls) == 1
    assert out["retrieved_for"] == STORED and out["matched_question"] == STORED
    assert ids(out["sources"]) == ["backups.md#0", "storage.md#0"]  # what the answer was made from
    assert ids(out["own_sources"]) == ["backups.md#0", "restore.md#0"]  # what this question retrieved
    shown = ask(notes, tiny_dir, REWORDED).output
    assert "documents as retrieved for the stored question (1 of 2 differ" in shown
    assert "cache miss" not in shown


@pytest.mark.parametrize("near", [
    "When do restores run?",  # another entity
    "When do backups not run?",  # negation
    "How long are backups kept?",  # another question type on the same note
    "When do deploys go out?",  # another topic: no document in common
    "Wann laufen die Deploys?",  # another language, another topic
])
def test_a_near_miss_is_not_served_through_another_partition(home, notes, tiny_dir, monkeypatch, near):
    calls = fixed_answer(monkeypatch, "Nightly at 02:30 UTC.")
    ask(notes, tiny_dir, STORED)
    out = json.loads(ask(notes, tiny_dir, "--json", near).stdout)
    assert out["layer"] == "model" and out["retrieved_for"] is None and len(calls) == 2, out


def test_a_changed_document_is_never_served(home, notes, tiny_dir, monkeypatch):
    """The stored question's documents are retrieved again from the current notes: an edited note makes
    another partition, so the stored answer (made from the old text) is not served."""
    calls = fixed_answer(monkeypatch, "Nightly at 02:30 UTC.")
    ask(notes, tiny_dir, STORED)
    (notes / "storage.md").write_text("# Storage\n\nSnapshots of the database are written to the bucket every hour.\n")
    out = json.loads(ask(notes, tiny_dir, "--json", REWORDED).stdout)
    assert out["layer"] == "model" and out["retrieved_for"] is None and len(calls) == 2


def test_no_lookup_off_the_cache_and_no_store_read_only(home, notes, tiny_dir, monkeypatch):
    calls = fixed_answer(monkeypatch, "Nightly at 02:30 UTC.")
    ask(notes, tiny_dir, STORED)
    out = json.loads(ask(notes, tiny_dir, "--json", "--no-cache", REWORDED).stdout)
    assert out["layer"] == "model" and out["retrieved_for"] is None and len(calls) == 2


def _chunk(cid: str, text: str) -> Retrieved:
    return Retrieved(Chunk(id=cid, text=text, source=cid), 0.5)


class ScriptedRetriever:
    """Fixed results per query text (the real retriever is exercised by the CLI tests above)."""

    def __init__(self, results: dict[str, list[Retrieved]]) -> None:
        self.results, self.asked = results, []

    def search(self, query: str, k: int = 4) -> list[Retrieved]:
        self.asked.append(query)
        return self.results[query][:k]


A, B, C, D = (_chunk(c, f"Note {c}: backups run at 02:30.") for c in "abcd")


def _stored(tmp_path, namespace="default"):
    sem = SemanticCache(tmp_path / "answers")
    rag = RagCache(ScriptedBackend("stored answer", approximate=False), semantic=sem, namespace=namespace)
    rag.answer(STORED, [{"id": r.chunk.id, "text": r.chunk.text} for r in (A, B)])
    return sem, rag


@pytest.mark.parametrize("stored_docs,own,served", [
    ((A, B), (A, D), True),  # one document in common: served
    ((A, B), (C, D), False),  # no document in common: the two questions reach other notes, not looked up
    ((A, C), (A, D), False),  # the stored question now retrieves another set than its answer was made from
])
def test_served_only_from_the_stored_answers_own_documents(tmp_path, stored_docs, own, served):
    sem, rag = _stored(tmp_path)
    r = ScriptedRetriever({STORED: list(stored_docs)})
    via = via_stored_question(rag, sem, r, REWORDED, list(own), top_k=2, threshold=None)
    assert (via is not None) is served
    if served:
        assert via.stored_question == STORED and via.sources == [A, B] and via.own == [A, D]
        assert via.answer.text == "stored answer" and via.answer.layer == "semantic"


def test_the_same_set_is_not_looked_up_twice_and_tenants_stay_apart(tmp_path):
    sem, rag = _stored(tmp_path)
    r = ScriptedRetriever({STORED: [A, B]})
    assert via_stored_question(rag, sem, r, REWORDED, [B, A], top_k=2, threshold=None) is None  # own set: looked up
    other = RagCache(ScriptedBackend("x", approximate=False), semantic=sem, namespace="tenant-2")
    assert via_stored_question(other, sem, r, REWORDED, [A, D], top_k=2, threshold=None) is None
    assert r.asked == [STORED]  # the other tenant's lookup found no stored question to retrieve with
