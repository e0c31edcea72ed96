"""The chat template belongs in the model identity (issue 32 section 2): a template changed in the model
folder or set in memory (``tokenizer.chat_template``) changes the fingerprint, hence the answer
partition and the KV keys; records that measure the weights alone (blend calibration) keep their key."""

from __future__ import annotations

import json
import shutil

import pytest

from ragcache.engine.backend import LocalBackend
from ragcache.engine.blend.calibration import Calibration, load_calibration, save_calibration
from ragcache.engine.engine import LocalEngine
from ragcache.identity import folder_chat_template, template_digest
from ragcache.models import load_model, model_fingerprint
from ragcache.testing import tiny_llama

MESSAGES = [{"role": "system", "content": "Answer from the manual. " * 12},
            {"role": "user", "content": "How do I reset the router?"}]


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    lm = tiny_llama(seed=3)
    root = tmp_path_factory.mktemp("tiny-model")
    lm.model.save_pretrained(root)
    lm.tokenizer.save_pretrained(root)
    return root


def _copy(folder, tmp_path):
    dst = tmp_path / "model"
    shutil.copytree(folder, dst)
    return dst


def _edit_jinja(d):
    (d / "chat_template.jinja").write_text((d / "chat_template.jinja").read_text() + "{# house style v2 #}")


def _add_named(d):
    (d / "additional_chat_templates").mkdir()
    (d / "additional_chat_templates" / "tool_use.jinja").write_text("{{ messages[0]['content'] }}")


def _move_to_config(d, text=None):
    cfg = json.loads((d / "tokenizer_config.json").read_text())
    template = (d / "chat_template.jinja").read_text()
    (d / "chat_template.jinja").unlink()
    cfg["chat_template"] = template if text is None else text
    (d / "tokenizer_config.json").write_text(json.dumps(cfg))


def _config_list(d):
    _move_to_config(d)
    cfg = json.loads((d / "tokenizer_config.json").read_text())
    cfg["chat_template"] = [{"name": "default", "template": cfg["chat_template"]},
                            {"name": "rag", "template": "{{ messages[-1]['content'] }}"}]
    (d / "tokenizer_config.json").write_text(json.dumps(cfg))


def _remove(d):
    (d / "chat_template.jinja").unlink()


@pytest.mark.parametrize("change", [_edit_jinja, _add_named, lambda d: _move_to_config(d, "{{ 'x' }}"), _config_list,
                                    _remove], ids=["edited", "named-added", "config-other", "config-list", "removed"])
def test_changed_template_in_the_folder_changes_the_fingerprint(folder, tmp_path, change):
    before = load_model(str(folder)).fingerprint
    changed = _copy(folder, tmp_path)
    change(changed)
    loaded = load_model(str(changed))
    after = loaded.fingerprint
    assert after.revision == before.revision and after.weights_digest != after.digest  # same weights
    assert after.template != before.template and after.digest != before.digest
    assert after.template == template_digest(loaded.tokenizer.chat_template)
    # known before loading, the same as once loaded (the CLI looks answers up before it loads the model)
    assert model_fingerprint(str(changed)) == after
    assert folder_chat_template(changed) == loaded.tokenizer.chat_template


def test_unchanged_folder_keeps_its_fingerprint(folder, tmp_path):
    a = load_model(str(folder)).fingerprint
    assert load_model(str(_copy(folder, tmp_path))).fingerprint.digest != a.digest  # the name is the path
    assert load_model(str(folder)).fingerprint == a == model_fingerprint(str(folder))
    moved = _copy(folder, tmp_path / "x")
    _move_to_config(moved)  # the same template, kept in tokenizer_config.json instead: the same identity
    assert load_model(str(moved)).fingerprint.template == a.template


TEMPLATES = ["{# v2 #}", "{%- set house = 1 -%}"]


@pytest.mark.parametrize("edit", TEMPLATES)
def test_template_set_in_memory_changes_identity_partition_and_kv_keys(tiny, edit):
    lm = tiny_llama(seed=0)
    engine = LocalEngine(lm, calibration=False)
    backend = LocalBackend(engine)
    original = lm.tokenizer.chat_template
    fp, ident, model_id = engine.fingerprint, engine.answer_identity, backend.model_id
    engine.generate(MESSAGES, max_new_tokens=1)
    assert engine.generate(MESSAGES, max_new_tokens=1).stats.prefix_tokens_reused > 0

    lm.tokenizer.chat_template = original + edit  # renders the same tokens: only the identity tells
    assert engine.build_prompt(MESSAGES).input_ids == LocalEngine(tiny).build_prompt(MESSAGES).input_ids
    assert engine.fingerprint.digest != fp.digest and engine.fingerprint.weights_digest == fp.weights_digest
    assert engine.answer_identity != ident and backend.model_id != model_id
    assert engine.generate(MESSAGES, max_new_tokens=1).stats.prefix_tokens_reused == 0  # new KV keys

    lm.tokenizer.chat_template = original  # back: the old identity and its KV again
    assert engine.fingerprint == fp and backend.model_id == model_id
    assert engine.generate(MESSAGES, max_new_tokens=1).stats.prefix_tokens_reused > 0


def test_named_templates_in_memory_are_part_of_the_identity():
    lm = tiny_llama(seed=0)
    engine = LocalEngine(lm, calibration=False)
    base = engine.fingerprint.digest
    lm.tokenizer.chat_template = {"default": lm.tokenizer.chat_template, "tool_use": "{{ 'tools' }}"}
    named = engine.fingerprint.digest
    lm.tokenizer.chat_template = {"tool_use": "{{ 'tools' }}", "default": lm.tokenizer.chat_template["default"]}
    assert engine.fingerprint.digest == named != base  # order-free
    lm.tokenizer.chat_template = None
    assert engine.fingerprint.digest not in (base, named)
    with pytest.raises(TypeError, match="chat template"):
        template_digest(["{{ x }}"])


def test_calibration_is_keyed_by_the_weights(tmp_path):
    lm = tiny_llama(seed=0)
    engine = LocalEngine(lm, calibration=False)
    cal = Calibration(fingerprint=engine.fingerprint.weights_digest, model="tiny", recompute_ratio=0.3,
                      blend_allowed=True, rule={"name": "decisive-flips-v1"}, min_agreement=0.95, max_ratio=0.5)
    save_calibration(cal, home=tmp_path)
    lm.tokenizer.chat_template = lm.tokenizer.chat_template + "{# v2 #}"
    assert load_calibration(engine.fingerprint, home=tmp_path, packaged=False) == cal
