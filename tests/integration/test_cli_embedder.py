"""The NumPy BERT runtime (the CLI's fast path) gives sentence-transformers' vectors and fingerprint, without torch."""

import subprocess
import sys

import numpy as np
import pytest

from ragcache.models import load_embedder

TEXTS = ["How do I read a CSV file with a header row?", "x",
         "Regular expressions like [/a-z]+ and list[str] annotations, é ü 漢字. " * 12]


def test_numpy_runtime_matches_sentence_transformers():
    fast = load_embedder(runtime="numpy")
    ref = load_embedder(runtime="torch")
    a, b = fast.encode(TEXTS), ref.encode(TEXTS)
    assert a.shape == b.shape == (3, 384) and a.dtype == np.float32
    assert np.abs(a - b).max() < 1e-5
    assert np.allclose(np.linalg.norm(a, axis=1), 1.0, atol=1e-6)
    assert fast.fingerprint == ref.fingerprint and fast.dim == ref.dim


def test_numpy_runtime_does_not_import_torch():
    code = ("import sys; from ragcache.models import load_embedder; "
            "v = load_embedder(runtime='numpy').encode(['hello']); "
            "assert v.shape == (1, 384); assert 'torch' not in sys.modules, 'torch imported'")
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)


def test_bad_runtime_is_refused():
    with pytest.raises(ValueError, match="runtime"):
        load_embedder(runtime="onnx")
