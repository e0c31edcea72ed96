"""Test doubles, local test servers and contract suites that users may import too: nothing here is used by the
library itself (the pattern of ``langchain-tests``).

* :mod:`ragcache.testing.local_servers`: throwaway PostgreSQL + pgvector and Valkey servers on loopback.
* :mod:`ragcache.testing.chunk_stores`: the chunk KV store contract suite (needs ``pytest``).
* :mod:`ragcache.testing.semantic_contract`: the semantic cache contract suite, over any answer store.
* :mod:`ragcache.testing.answer_admin_contract`: the answer stores' admin contract suite (what ``ragcache cache``
  calls).

* :func:`tiny_llama`: a tiny random Llama model (float32) with the embedded model's real
  tokenizer, for fast exactness tests of the KV caches.
* :class:`HashingEmbedder`: a deterministic, dependency-free embedder (not semantic).
  It maps character trigrams of the lower-cased text into a fixed number of buckets
  (the hashing trick, sha1-based so it is stable across processes) and L2-normalises.
  Equal texts get equal vectors and similar spellings get similar vectors; meaning is
  not modelled. Use it where a test is about the cache's bookkeeping (persistence,
  concurrency, eviction), not about which paraphrases hit.
* :func:`run_in_threads`: call a function in several threads released together, for races.
"""


from __future__ import annotations

import hashlib
import json
import threading
from collections.abc import Callable
from typing import Any, TypeVar

import numpy as np

from ragcache.models import LoadedModel, ModelFingerprint, embedded_model_dir


T = TypeVar("T")


def run_in_threads(fn: Callable[[], T], n: int) -> tuple[list[T], list[BaseException]]:
    """Call ``fn`` in ``n`` threads released together (a barrier); wait for all of them.

    Returns:
        ``(results, errors)``: what the calls returned and what they raised, each in finishing order.
    """
    start = threading.Barrier(n)
    results: list[T] = []
    errors: list[BaseException] = []

    def one() -> None:
        try:
            start.wait()
            results.append(fn())
        except BaseException as e:  # noqa: BLE001 - returned to the caller, who asserts on it
            errors.append(e)

    threads = [threading.Thread(target=one) for _ in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return results, errors


class HashingEmbedder:
    """``encode(list[str]) -> float32 [n, dim]`` with unit rows; ``dim`` buckets (default 64)."""

    def __init__(self, dim: int = 64) -> None:
        if dim < 8:
            raise ValueError(f"dim must be >= 8, got {dim}")
        self.dim = dim
        self.name = f"hashing-trigram-{dim}"
        self.fingerprint = hashlib.sha256(self.name.encode()).hexdigest()

    max_tokens: int | None = None
    """No window: it reads a text whole (the retriever embeds a question whole,
    :func:`ragcache.app.retrieval.query_part`)."""

    def count_tokens(self, text: str) -> int:
        """The character trigrams it hashes for ``text`` (every one is read)."""
        return len(text) + 2

    def encode(self, texts: list[str]) -> np.ndarray:
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        for r, text in enumerate(texts):
            t = f"  {text.lower()}  "
            for i in range(len(t) - 2):
                h = int.from_bytes(hashlib.sha1(t[i : i + 3].encode()).digest()[:4], "little")
                out[r, h % self.dim] += 1.0 if (h >> 31) & 1 else -1.0
            n = np.linalg.norm(out[r])
            if n == 0:
                out[r, 0] = 1.0
            else:
                out[r] /= n
        return out

    def __call__(self, texts: list[str]) -> np.ndarray:
        return self.encode(texts)


def tiny_llama(seed: int = 0, **overrides: Any) -> LoadedModel:
    """A tiny random Llama model (float32) with a real tokenizer, for fast exactness tests.

    Uses the embedded SmolLM2 tokenizer (49,152 ids; converting the packaged model on first use).
    The default config has 4 layers, 4 query heads and 2 KV heads of width 16; any
    ``LlamaConfig`` field can be overridden (e.g. ``num_hidden_layers=2``).
    """
    import torch
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

    tok_dir = embedded_model_dir()
    tokenizer = AutoTokenizer.from_pretrained(str(tok_dir))
    cfg = dict(
        vocab_size=len(tokenizer),
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=4,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=16,
        max_position_embeddings=2048,
        rope_theta=10000.0,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        tie_word_embeddings=True,
    )
    cfg.update(overrides)
    torch.manual_seed(seed)
    model = LlamaForCausalLM(LlamaConfig(**cfg)).to(torch.float32).eval()
    rev = hashlib.sha256(json.dumps({"seed": seed, **{k: str(v) for k, v in cfg.items()}}, sort_keys=True).encode())
    return LoadedModel(model, tokenizer, ModelFingerprint("tiny-llama", rev.hexdigest(), "float32"))
