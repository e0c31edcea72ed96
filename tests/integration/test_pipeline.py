"""Corpus, retriever, pipeline and CLI bad-input handling (real FAISS, real embedder)."""

import os
import subprocess
import sys

import pytest

from ragcache.app.corpus import folder_chunks, split_text, stdlib_chunks
from ragcache.engine.engine import LocalEngine
from ragcache import LocalBackend, RagCache
from ragcache.app.retrieval import Retriever


@pytest.fixture(scope="module")
def embedder():
    from ragcache.models import load_embedder

    return load_embedder()


def test_stdlib_corpus_is_stable_and_chunked():
    a, b = stdlib_chunks(["csv", "json"]), stdlib_chunks(["csv", "json"])
    assert [c.text for c in a] == [c.text for c in b]
    assert all(len(c.text) <= 1400 for c in a) and len(a) > 3
    assert not any(" at 0x" in c.text for c in a)


def test_split_text_bounds():
    text = "\n\n".join(["x" * 500] * 5 + ["y " * 2000])
    parts = split_text(text, 1000)
    assert all(len(p) <= 1000 for p in parts)
    assert "".join(parts).replace("\n", "").replace(" ", "") == text.replace("\n", "").replace(" ", "")


def test_retriever_persists_and_rebuilds_corrupt_index(tmp_path, embedder):
    chunks = stdlib_chunks(["csv", "datetime"])
    r1 = Retriever(chunks, embedder, tmp_path / "idx", progress=False)
    assert not r1.loaded_from_disk
    top = r1.search("read a CSV file with a header row", k=3)
    assert top[0].chunk.source == "csv" and -1.0 <= top[0].score <= 1.0
    r2 = Retriever(chunks, embedder, tmp_path / "idx", progress=False)
    assert r2.loaded_from_disk
    (tmp_path / "idx" / "index.faiss").write_bytes(b"garbage")
    r3 = Retriever(chunks, embedder, tmp_path / "idx", progress=False)
    assert not r3.loaded_from_disk
    assert r3.search("read a CSV file with a header row", k=1)[0].chunk.id == top[0].chunk.id
    with pytest.raises(ValueError, match="empty"):
        r3.search("  ")


def test_folder_chunks_errors(tmp_path):
    with pytest.raises(ValueError, match="does not exist"):
        folder_chunks(tmp_path / "nope")
    (tmp_path / "a.bin").write_bytes(b"\x00")
    with pytest.raises(ValueError, match="no readable"):
        folder_chunks(tmp_path)
    (tmp_path / "bad.txt").write_bytes(b"\xff\xfe\xfa")
    with pytest.raises(ValueError, match="bad.txt"):
        folder_chunks(tmp_path)
    (tmp_path / "notes.md").write_text("# Title\n\nSome text about caching.")
    assert folder_chunks(tmp_path)[0].source == "notes.md"


def test_pipeline_layers(embedder, tiny_wide):
    from ragcache.semantic import SemanticCache

    engine = LocalEngine(tiny_wide)  # wide init: varied, non-blank answers
    rag = RagCache(LocalBackend(engine), semantic=SemanticCache(None, embedder=embedder), max_new_tokens=6,
                   cache_truncated=True)  # a random tiny model rarely stops before the budget
    docs = ["Doc one: csv.reader reads rows.", "Doc two: csv.DictReader maps rows to dicts."]
    a1 = rag.answer("How do I read a CSV file with a header row?", docs)
    assert a1.text.strip()
    assert a1.layer in ("model", "prefix")
    a2 = rag.answer("How do I read a CSV file with a header row?", list(reversed(docs)))
    assert a2.layer == "semantic" and a2.text == a1.text and a2.similarity >= 1 - 1e-5
    a3 = rag.answer("How do I read a CSV file without a header row?", docs)
    assert a3.layer != "semantic"
    a4 = rag.answer("How do I read a CSV file with a header row?", docs + ["Doc three: new content."])
    assert a4.layer != "semantic"  # other documents: another partition
    assert a4.tokens_reused > 0  # the system text came from the prefix cache
    with pytest.raises(ValueError, match="question is empty"):
        rag.answer("   ", docs)


def _cli(*args, env=None):
    return subprocess.run([sys.executable, "-m", "ragcache.app.cli", *args], capture_output=True, text=True,
                          env={**os.environ, **(env or {})}, timeout=300)


def test_cli_bad_docs_path_is_a_clear_error(tmp_path):
    r = _cli("ask", "--docs", str(tmp_path / "missing"), "What is this?")
    assert r.returncode == 2
    assert "does not exist" in r.stderr and r.stdout == "" and "Traceback" not in r.stderr  # errors on stderr


def test_cli_empty_question_is_a_clear_error(tmp_path):
    (tmp_path / "n.txt").write_text("hello")
    r = _cli("ask", "--docs", str(tmp_path), "  ")
    assert r.returncode == 2 and "question is empty" in r.stderr and "Traceback" not in r.stderr


def test_corrupt_model_cache_is_rebuilt_or_clear(tmp_path):
    """A corrupt converted-model directory under RAGCACHE_HOME is detected and converted again."""
    from ragcache.models import embedded_model_dir

    src = embedded_model_dir()
    home = tmp_path / "home"
    dst = home / "models" / src.name
    dst.mkdir(parents=True)
    for f in src.iterdir():
        (dst / f.name).symlink_to(f)
    (dst / "ragcache_source.json").unlink()
    (dst / "ragcache_source.json").write_text("{not json")
    code = ("import json, sys; from ragcache.models import embedded_model_dir; p = embedded_model_dir(home=sys.argv[1]); "
            "print(json.loads((p / 'ragcache_source.json').read_text())['gguf'])")
    r = subprocess.run([sys.executable, "-c", code, str(home)], capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.strip().endswith(".gguf")
    assert "corrupt" in r.stderr


def test_truncated_safetensors_detected(tmp_path):
    import torch
    from safetensors.torch import save_file

    from ragcache.models import ModelNotFoundError, _check_safetensors, load_model

    f = tmp_path / "model.safetensors"
    save_file({"w": torch.zeros(64, 64)}, str(f))
    _check_safetensors(f)
    f.write_bytes(f.read_bytes()[:200])
    with pytest.raises(ValueError, match="not a readable safetensors"):
        _check_safetensors(f)
    with pytest.raises(ModelNotFoundError, match="does not exist"):
        load_model(str(tmp_path / "missing"))
    with pytest.raises(ModelNotFoundError, match="no config.json"):
        load_model(str(tmp_path))


def test_folder_chunks_skips_binary(tmp_path):
    (tmp_path / "nul.txt").write_bytes(b"\x00" * 100)
    (tmp_path / "ok.md").write_text("Backups run nightly at 02:30 UTC.")
    chunks = folder_chunks(tmp_path)
    assert [c.source for c in chunks] == ["ok.md"]
