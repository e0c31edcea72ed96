"""The tokenizer and generation-config files belong in the model identity: an edited normaliser, special
token setting or end-of-sequence id changes the answers, so it changes the fingerprint's digest (the
answer partition and KV keys), never its weights_digest (calibration records measure the weights). The
embedded model keeps its source identity only while its tokenizer files are the ones its conversion
wrote; the fingerprint predicted without loading equals the one load_model gives."""

from __future__ import annotations

import json
import os
import shutil
from dataclasses import replace
from pathlib import Path

import pytest
from cli_doubles import tiny_dir  # noqa: F401 - fixture

from ragcache.config import DEFAULT_MODEL
from ragcache.home import Home
from ragcache.identity import ModelFingerprint, folder_digest, tokenizer_digest
from ragcache.models import (
    _conversion_source,
    _embedded_gguf,
    _source_revision,
    load_model,
    model_fingerprint,
)

REAL_MODEL = Path(os.environ.get("RAGCACHE_HOME", "~/.cache/ragcache")).expanduser() / "models" / DEFAULT_MODEL


@pytest.fixture(autouse=True, scope="module")
def _real_model_converted():
    """REAL_MODEL holds the converted embedded model: on a machine where nothing converted it yet (a fresh
    home, this module run alone) it is converted first, once (``embedded_model_dir``)."""
    from ragcache.models import embedded_model_dir

    assert embedded_model_dir(Home(REAL_MODEL.parent.parent)) == REAL_MODEL
WEIGHTS = ("model.safetensors", "config.json")


def _copy_real(folder: Path) -> Path:
    """The converted embedded model in ``folder``: weights and config linked, every other file copied
    (so a test can edit it); no source record."""
    folder.mkdir(parents=True)
    for f in REAL_MODEL.iterdir():
        if f.name in WEIGHTS:
            (folder / f.name).symlink_to(f)
        elif f.name != "ragcache_source.json":
            shutil.copy2(f, folder / f.name)
    return folder


def _edit_json(path: Path, **changes) -> None:
    data = json.loads(path.read_text())
    data.update(changes)
    path.write_text(json.dumps(data))


EDITS = {
    "tokenizer.json normaliser": lambda d: _edit_json(d / "tokenizer.json", normalizer={"type": "Lowercase"}),
    "generation_config.json eos": lambda d: _edit_json(d / "generation_config.json", eos_token_id=13),
    "tokenizer_config.json eos": lambda d: _edit_json(d / "tokenizer_config.json", eos_token="<|endoftext|>"),
    "special_tokens_map.json added": lambda d: (d / "special_tokens_map.json").write_text('{"eos_token": "x"}'),
}


@pytest.mark.parametrize("edit", list(EDITS), ids=list(EDITS))
def test_an_edited_tokenizer_file_changes_the_digest_not_the_weights_digest(tmp_path, edit):
    folder = _copy_real(tmp_path / "model")
    home = Home(tmp_path / "home")
    before = model_fingerprint(str(folder), home=home)
    assert before is not None and before.tokenizer == tokenizer_digest(folder)
    EDITS[edit](folder)
    after = model_fingerprint(str(folder), home=home)
    assert after.digest != before.digest
    assert (after.weights_digest, after.revision, after.template) == (before.weights_digest, before.revision,
                                                                      before.template)


def test_an_unedited_copy_keeps_its_digest_and_unknown_tokenizer_keeps_the_old_digest(tmp_path):
    a = model_fingerprint(str(_copy_real(tmp_path / "a")), home=Home(tmp_path / "home"))
    b = model_fingerprint(str(_copy_real(tmp_path / "b")), home=Home(tmp_path / "home"))
    assert a.tokenizer == b.tokenizer and a.revision == b.revision
    old = ModelFingerprint("m", "rev", "float32", template="t")  # as a fingerprint was before the field
    assert old.digest == ModelFingerprint("m", "rev", "float32", (), "t", None).digest != replace(old, tokenizer="x").digest
    assert replace(old, tokenizer="x").weights_digest == old.weights_digest
    bare = ModelFingerprint("m", "rev", "float32")
    assert bare.digest == bare.weights_digest != replace(bare, tokenizer="x").digest


def _embedded(tmp_path, *, record_tokenizer: bool = True) -> tuple[Home, Path]:
    home = Home(tmp_path / "home")
    folder = _copy_real(home.model_dir(DEFAULT_MODEL))
    record = {**_conversion_source(_embedded_gguf(), None), "converted": folder_digest(folder)}
    if record_tokenizer:
        record["tokenizer"] = tokenizer_digest(folder)
    (folder / "ragcache_source.json").write_text(json.dumps(record))
    return home, folder


def test_the_embedded_source_identity_needs_the_tokenizer_files_the_conversion_wrote(tmp_path):
    home, folder = _embedded(tmp_path)
    predicted = model_fingerprint(None, home=Home(tmp_path / "fresh"))  # nothing converted there
    fp = model_fingerprint(None, home=home)
    assert fp == predicted and fp.revision.startswith("source:") and fp.tokenizer is None
    EDITS["tokenizer.json normaliser"](folder)
    edited = model_fingerprint(None, home=home)
    assert (edited.revision, edited.tokenizer) == (folder_digest(folder), tokenizer_digest(folder))
    assert edited.digest != fp.digest
    assert edited.weights_digest == replace(fp, revision=folder_digest(folder)).weights_digest


def test_a_source_record_without_the_tokenizer_digest_falls_back_to_the_files(tmp_path):
    home, folder = _embedded(tmp_path, record_tokenizer=False)
    fp = model_fingerprint(None, home=home)
    assert (fp.revision, fp.tokenizer) == (folder_digest(folder), tokenizer_digest(folder))
    assert not fp.revision.startswith("source:") and _source_revision(json.loads(
        (folder / "ragcache_source.json").read_text())) != fp.revision


def test_prediction_equals_load_for_the_embedded_model(tmp_path):
    home, folder = _embedded(tmp_path)
    assert load_model(None, home=home).fingerprint == model_fingerprint(None, home=home)  # source identity
    EDITS["generation_config.json eos"](folder)
    loaded = load_model(None, home=home)
    assert loaded.model.generation_config.eos_token_id == 13  # what the decoder stops on
    assert loaded.fingerprint == model_fingerprint(None, home=home)
    assert loaded.fingerprint.tokenizer == tokenizer_digest(folder)


def test_prediction_equals_load_for_a_model_folder(tiny_dir, tmp_path):  # noqa: F811 - fixture
    folder = tmp_path / "model"
    shutil.copytree(tiny_dir, folder)
    home = Home(tmp_path / "home")
    before = load_model(str(folder), home=home).fingerprint
    assert before == model_fingerprint(str(folder), home=home) and before.tokenizer is not None
    _edit_json(folder / "generation_config.json", eos_token_id=5)
    after = load_model(str(folder), home=home).fingerprint
    assert after == model_fingerprint(str(folder), home=home)
    assert after.digest != before.digest and after.weights_digest == before.weights_digest
