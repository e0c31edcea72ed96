"""The embedded model is converted once when several processes start together on a new home: one
converts under a file lock, the others wait and find it converted (no second conversion replacing the
folder under a reader). Threads stand for processes (each takes the file lock on its own)."""

import json
import time

from ragcache import models
from ragcache.testing import run_in_threads


def _fake_convert(calls):
    def convert(target):
        calls.append(target)
        time.sleep(0.3)  # the real conversion takes ~40 s; the others must wait, not start their own
        target.mkdir(parents=True, exist_ok=True)
        (target / "model.safetensors").write_bytes(b"x")
        (target / "config.json").write_text("{}")
        (target / "ragcache_source.json").write_text(json.dumps({"gguf": "fake"}))
    return convert


def test_starting_together_converts_once(tmp_path, monkeypatch):
    calls: list = []
    monkeypatch.setattr(models, "_convert_embedded_gguf", _fake_convert(calls))
    monkeypatch.setattr(models, "_check_safetensors", lambda path: None)
    got, errors = run_in_threads(lambda: models.embedded_model_dir(tmp_path), 4)
    assert errors == [] and len(calls) == 1 and len(set(got)) == 1
    assert models.embedded_model_dir(tmp_path) == got[0] and len(calls) == 1  # converted: no lock, no work


def test_a_corrupt_conversion_is_converted_again(tmp_path, monkeypatch):
    calls: list = []
    monkeypatch.setattr(models, "_convert_embedded_gguf", _fake_convert(calls))
    monkeypatch.setattr(models, "_check_safetensors", lambda path: None)
    target = models.embedded_model_dir(tmp_path)
    (target / "config.json").write_text("{not json")
    assert models.embedded_model_dir(tmp_path) == target and len(calls) == 2
    assert json.loads((target / "config.json").read_text()) == {}


def test_run_in_threads_returns_results_and_errors():
    import itertools
    import threading

    counter, lock = itertools.count(), threading.Lock()

    def call():
        with lock:
            i = next(counter)
        if i % 2:
            raise ValueError(i)
        return i

    results, errors = run_in_threads(call, 6)
    assert sorted(results) == [0, 2, 4] and sorted(e.args[0] for e in errors) == [1, 3, 5]
