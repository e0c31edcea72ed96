import os

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


@pytest.fixture(scope="session")
def tiny():
    """A tiny random float32 Llama model with the embedded SmolLM2 tokenizer."""
    from ragcache.testing import tiny_llama

    return tiny_llama(seed=0)


@pytest.fixture(scope="session")
def smol():
    """The real embedded SmolLM2-135M-Instruct (converted once under RAGCACHE_HOME)."""
    from ragcache.models import load_model

    return load_model()
