"""Embedder identity (issue 24, kind 6): every file and setting that changes a vector is in the
fingerprint, and the NumPy runtime refuses a pipeline it does not implement."""

import json
import shutil

import numpy as np
import pytest
from safetensors.numpy import save_file

from ragcache.home import Home
from ragcache import models
from ragcache.bert_numpy import NumpyBertEncoder, check_pipeline
from ragcache.models import ModelNotFoundError, embedder_revision, load_embedder

PACKAGED = models._package_dir(models._MINILM_PACKAGE, models._MINILM_INSTALL) / "model"


@pytest.fixture(autouse=True)
def fresh(tmp_path, monkeypatch):
    monkeypatch.setattr(Home, "default", classmethod(lambda cls: cls(tmp_path / "home")))  # the library's default home
    monkeypatch.setattr(models, "_EMBEDDERS", {})  # every load reads the folder again


@pytest.fixture()
def folder(tmp_path):
    """A copy of the packaged all-MiniLM-L6-v2 (weights linked, not copied)."""
    dst = tmp_path / "minilm"
    shutil.copytree(PACKAGED, dst, ignore=shutil.ignore_patterns("model.safetensors"))
    (dst / "model.safetensors").symlink_to(PACKAGED / "model.safetensors")
    return dst


def _edit_json(path, **changes):
    data = json.loads(path.read_text())
    data.update(changes)
    path.write_text(json.dumps(data, indent=2))


def _add_module(folder, module_type, name, path):
    mods = json.loads((folder / "modules.json").read_text())
    mods.insert(len(mods) - 1, {"idx": len(mods), "name": name, "path": path, "type": module_type})
    (folder / "modules.json").write_text(json.dumps(mods, indent=2))


def add_dense(folder, seed=0):
    d = folder / "2_Dense"
    d.mkdir(exist_ok=True)
    (d / "config.json").write_text(json.dumps({"in_features": 384, "out_features": 128, "bias": True,
                                               "activation_function": "torch.nn.modules.activation.Tanh"}))
    rng = np.random.default_rng(seed)
    save_file({"linear.weight": rng.standard_normal((128, 384)).astype(np.float32),
               "linear.bias": np.zeros(128, np.float32)}, str(d / "model.safetensors"))
    if seed == 0:
        _add_module(folder, "sentence_transformers.models.Dense", "dense", "2_Dense")


EDITS = {
    "dense layer added": add_dense,
    "pooling changed in place to CLS": lambda f: _edit_json(f / "1_Pooling" / "config.json",
                                                           pooling_mode_mean_tokens=False, pooling_mode_cls_token=True),
    "normalize removed": lambda f: (f / "modules.json").write_text(
        json.dumps(json.loads((f / "modules.json").read_text())[:2])),
    "max_seq_length": lambda f: _edit_json(f / "sentence_bert_config.json", max_seq_length=128),
    "tokenizer lower-casing": lambda f: _edit_json(f / "tokenizer_config.json", do_lower_case=False),
    "default prompt": lambda f: _edit_json(f / "config_sentence_transformers.json",
                                           prompts={"query": "query: "}, default_prompt_name="query"),
    "vocabulary": lambda f: (f / "vocab.txt").write_text((f / "vocab.txt").read_text().replace("[unused1]", "zzzz")),
    "layer norm module": lambda f: _add_module(f, "sentence_transformers.models.LayerNorm", "9", "9_LayerNorm"),
}


@pytest.mark.parametrize("edit", sorted(EDITS))
def test_every_vector_changing_file_is_in_the_identity(folder, edit):
    before = embedder_revision(folder)
    assert embedder_revision(folder) == before  # stable
    EDITS[edit](folder)
    assert embedder_revision(folder) != before, edit


def test_dense_weights_changed_in_place_change_the_identity(folder):
    add_dense(folder)
    before = embedder_revision(folder)
    add_dense(folder, seed=1)  # same file names and sizes, other weights
    assert embedder_revision(folder) != before


@pytest.mark.parametrize("name", ["README.md", "data_config.json", ".gitattributes"])
def test_model_card_and_training_records_do_not_change_the_identity(folder, name):
    before = embedder_revision(folder)
    (folder / name).write_text((folder / name).read_text() + "\nedited\n")
    assert embedder_revision(folder) == before


def test_loaded_embedder_fingerprint_follows_the_folder(folder):
    a = load_embedder(str(folder), runtime="numpy")
    (folder / "sentence_bert_config.json").write_text(json.dumps({"max_seq_length": 128, "do_lower_case": False}))
    models._EMBEDDERS.clear()
    b = load_embedder(str(folder), runtime="numpy")
    assert a.fingerprint != b.fingerprint
    assert b.encode(["how do refunds work?"]).shape == (1, 384)


REFUSED = {
    "dense layer added": (add_dense, "Dense"),
    "pooling changed in place to CLS": (EDITS["pooling changed in place to CLS"], "mean pooling only"),
    "max pooling too": (lambda f: _edit_json(f / "1_Pooling" / "config.json", pooling_mode_max_tokens=True),
                        "mean pooling only"),
    "layer norm module": (EDITS["layer norm module"], "LayerNorm"),
    "default prompt": (EDITS["default prompt"], "prompt"),
    "sentence-transformers lower-casing": (lambda f: _edit_json(f / "sentence_bert_config.json", do_lower_case=True),
                                           "do_lower_case"),
    "transformer in a subfolder": (lambda f: (f / "modules.json").write_text(json.dumps(
        [dict(m, path="0_Transformer") if i == 0 else m
         for i, m in enumerate(json.loads((f / "modules.json").read_text()))])), "folder root"),
}


@pytest.mark.parametrize("case", sorted(REFUSED))
def test_numpy_runtime_refuses_a_pipeline_it_does_not_implement(folder, case):
    edit, words = REFUSED[case]
    edit(folder)
    with pytest.raises(ValueError, match=words) as e:
        NumpyBertEncoder(folder)
    assert "runtime='torch'" in str(e.value)
    with pytest.raises(ModelNotFoundError, match=words):
        load_embedder(str(folder), runtime="numpy")


def test_numpy_runtime_accepts_the_packaged_pipeline_and_without_normalize(folder):
    check_pipeline(PACKAGED)
    EDITS["normalize removed"](folder)  # rows are L2-normalised by ragcache anyway
    v = NumpyBertEncoder(folder).encode(["a question"])
    assert abs(float(np.linalg.norm(v)) - 1.0) < 1e-5


def test_sentence_transformer_objects_with_other_modules_get_other_fingerprints(folder):
    from sentence_transformers import SentenceTransformer

    from ragcache.semantic.embedding import resolve_embedder

    plain = resolve_embedder(SentenceTransformer(str(folder), device="cpu", local_files_only=True))
    again = resolve_embedder(SentenceTransformer(str(folder), device="cpu", local_files_only=True))
    add_dense(folder)
    dense = resolve_embedder(SentenceTransformer(str(folder), device="cpu", local_files_only=True))
    assert plain.fingerprint == again.fingerprint
    assert dense.fingerprint != plain.fingerprint
    assert dense.encode(["x"]).shape == (1, 128)
