"""A question longer than the embedder reads (a 20,000-character pasted text, then the ask) is
retrieved by the part that asks, not by the paste's beginning, and `ragcache ask` says so."""

import json

import pytest
from typer.testing import CliRunner

from cli_doubles import fixed_answer, home, tiny_dir, write_notes  # noqa: F401 - fixtures
from ragcache.app.cli import app
from ragcache.app.corpus import Chunk
from ragcache.app.retrieval import Retriever, query_part

runner = CliRunner()
PASTE = " ".join(f"Deploy {i} went out on Tuesday after the change review meeting and the release notes were sent."
                 for i in range(220))  # ~20,000 characters about deploys
ASK = "Given all of that, how long are the nightly backups kept?"
LONG = f"{PASTE}\n\n{ASK}"


@pytest.fixture(scope="module", params=["numpy", "torch"])
def embedder(request):
    from ragcache.models import load_embedder

    return load_embedder(runtime=request.param)


def test_the_part_that_asks_is_embedded(embedder):
    assert len(LONG) > 20_000
    part = query_part(LONG, embedder)
    assert part.cut and part.window == 256 and part.tokens > 3000 and part.text == ASK
    short = query_part(ASK, embedder)
    assert not short.cut and short.text == ASK and short.tokens < 20
    one_sentence = "backups " * 600 + "kept how long"  # no sentence end: its last words that fit
    tail = query_part(one_sentence, embedder)
    assert tail.cut and tail.text.endswith("kept how long") and embedder.count_tokens(tail.text) <= 256


def test_an_embedder_without_a_window_embeds_the_question_whole():
    from ragcache.testing import HashingEmbedder

    emb = HashingEmbedder()
    assert emb.max_tokens is None
    for question in (ASK, LONG, "backups " * 600):
        part = query_part(question, emb)
        assert part.text == question and not part.cut and part.tokens is None and part.window is None


def test_a_long_pasted_text_then_a_question_retrieves_the_asked_notes(embedder):
    chunks = [Chunk("backups.md#0", "Backups run nightly at 02:30 UTC and are kept for 30 days.", "backups.md"),
              Chunk("deploy.txt#0", "Deploys go out on Tuesdays after the change review meeting.", "deploy.txt")]
    r = Retriever(chunks, embedder, progress=False)
    assert r.search(LONG, k=1)[0].chunk.id == "backups.md#0"
    # what the embedder alone makes of the whole text: its beginning, the paste about deploys
    vec = embedder.encode([LONG])
    assert r.index.search(vec, 1)[1][0][0] == 1


def test_ask_warns_and_answers_from_the_asked_notes(home, tmp_path, tiny_dir, monkeypatch):
    notes = write_notes(tmp_path / "notes")
    fixed_answer(monkeypatch, "Thirty days.")
    base = ["ask", "--docs", str(notes), "--model", str(tiny_dir), "--top-k", "1"]
    r = runner.invoke(app, [*base, LONG])
    assert r.exit_code == 0, r.output
    text = " ".join(r.output.split())
    assert "word pieces and the embedder reads 256" in text and "how long are the nightly backups kept" in text, text
    assert "sources: backups.md" in text
    r = runner.invoke(app, [*base, "--json", LONG])
    assert json.loads(r.stdout)["sources"][0]["id"].startswith("backups.md")
    r = runner.invoke(app, [*base, "--no-cache", ASK])
    assert "word pieces" not in r.output  # a question the embedder reads whole: no warning
