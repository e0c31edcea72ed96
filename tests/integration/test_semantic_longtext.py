"""Questions longer than the embedder's window (all-MiniLM-L6-v2: 256 word pieces): nothing that reaches the model is ignored."""

import os

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
pytestmark = pytest.mark.slow  # loads the packaged MiniLM

from ragcache.semantic import SemanticCache, partition_key
from ragcache.semantic.keying import last_sentence, question_key
from ragcache.semantic.text import normalize_question

PK = partition_key(namespace="long", model="m")
LOG_LINE = "2024-07-26 ERROR worker-{i} failed to connect to db-{i}.internal port 5432 timeout."


@pytest.fixture(scope="module")
def cache_embedder():
    from ragcache.models import load_embedder

    return load_embedder()


def paste_of(embedder, target_pieces: int) -> str:
    """A pasted log of about ``target_pieces`` word pieces (special tokens included), whole lines."""
    lines, i = [], 0
    while True:
        nxt = " ".join([*lines, LOG_LINE.format(i=i)])
        if SemanticCache(embedder=embedder).embedder.count_tokens(nxt) > target_pieces:
            return " ".join(lines)
        lines.append(LOG_LINE.format(i=i))
        i += 1


def test_embedder_window_is_read_from_its_tokenizer(cache_embedder):
    c = SemanticCache(embedder=cache_embedder)
    assert c.embedder.window == 256 and c.embedder.exact_window
    assert c.embedder.count_tokens("How do I reset my password?") == 9  # [CLS] + 7 pieces + [SEP]


@pytest.mark.parametrize("pieces", [200, 250, 255, 256, 257, 262, 300, 600])
def test_asks_that_differ_after_a_long_paste_never_share_an_answer(cache_embedder, pieces):
    c = SemanticCache(embedder=cache_embedder, threshold=0.70)
    paste = paste_of(cache_embedder, pieces)
    a = f"{paste} How do I increase the connection timeout?"
    b = f"{paste} How do I find which worker crashed first?"
    c.store(a, "raise timeout", partition=PK)
    hit = c.lookup(b, partition=PK)
    assert hit is None, (pieces, c.key(b, partition=PK).mode, hit)
    # the same long question is still served, exactly
    again = c.lookup(a, partition=PK)
    assert again is not None and again.answer == "raise timeout"


@pytest.mark.parametrize("pieces", [257, 300, 600, 1200])
def test_over_length_keeps_the_paste_exact_and_embeds_the_ask(cache_embedder, pieces):
    c = SemanticCache(embedder=cache_embedder, threshold=0.70)
    paste = paste_of(cache_embedder, pieces)
    a = f"{paste} How can I increase the connection timeout?"
    key = c.key(a, partition=PK)
    assert key.mode == "split" and key.tokens > 256
    assert key.embed_text == "How can I increase the connection timeout?"
    assert key.partition.digest != PK.digest and key.partition.namespace == PK.namespace
    c.store(a, "raise timeout", partition=PK)
    # a reworded ask after the same paste hits
    hit = c.lookup(f"{paste} How do I increase the connection timeout?", partition=PK)
    assert hit is not None and hit.answer == "raise timeout"
    # one changed character inside the paste (past the window) is another question
    edited = paste.replace("port 5432", "port 5433", 1)
    assert edited != paste
    assert c.lookup(f"{edited} How can I increase the connection timeout?", partition=PK) is None
    # a short question equal to the ask alone never matches the long entry
    assert c.lookup("How can I increase the connection timeout?", partition=PK) is None


def test_guards_see_the_whole_over_length_text(cache_embedder):
    c = SemanticCache(embedder=cache_embedder, threshold=0.70)
    paste = paste_of(cache_embedder, 400)
    c.store(f"{paste} Why did the worker fail?", "A", partition=PK)
    cands = c.candidates_for(f"{paste} Why did the worker not fail?", partition=PK)
    assert cands and cands[0].verdict.reason == "negation"
    assert cands[0].question.startswith(paste[:200])  # the stored question is the whole text


def test_no_sentence_boundary_means_exact_only(cache_embedder):
    c = SemanticCache(embedder=cache_embedder, threshold=0.70)
    blob = " ".join(f"key{i}=value{i}" for i in range(300))  # one 'sentence' longer than the window
    key = c.key(blob + " what is wrong", partition=PK)
    assert key.mode == "exact"
    c.store(blob + " what is wrong", "A", partition=PK)
    assert c.lookup(blob + " what is wrong", partition=PK).answer == "A"
    assert c.lookup(blob + " what is broken", partition=PK) is None
    assert c.lookup(blob + " What is wrong", partition=PK, threshold=0.0) is None  # case kept: exact text


def test_last_sentence_split():
    assert last_sentence("one. two? three") == ("one. two?", "three")
    assert last_sentence("just one") == ("", "just one")


def test_unknown_embedder_uses_a_conservative_byte_bound():
    from ragcache.testing import HashingEmbedder

    c = SemanticCache(embedder=HashingEmbedder())
    assert not c.embedder.exact_window and c.embedder.window == 256
    short = normalize_question("How do I reset my password?")
    assert question_key(short, PK, c.embedder).mode == "embed"
    long = normalize_question("x" * 300 + ". How do I reset my password?")
    assert question_key(long, PK, c.embedder).mode == "split"


def test_over_length_entries_survive_reopen(cache_embedder, tmp_path):
    paste = paste_of(cache_embedder, 500)
    with SemanticCache(tmp_path, embedder=cache_embedder, threshold=0.70) as c:
        c.store(f"{paste} How can I increase the connection timeout?", "raise timeout", partition=PK)
    with SemanticCache(tmp_path, embedder=cache_embedder, threshold=0.70) as c2:
        hit = c2.lookup(f"{paste} How do I increase the connection timeout?", partition=PK)
        assert hit is not None and hit.answer == "raise timeout"
        assert c2.lookup(f"{paste} How do I find which worker crashed first?", partition=PK) is None
        assert c2.clear("long") == 1 and len(c2) == 0
