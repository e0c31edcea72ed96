"""A BERT sentence encoder in NumPy, for embedding a question without importing torch.

The CLI's semantic-cache hit path (``ragcache ask`` asked again) must answer in about a second;
importing torch and sentence-transformers alone takes 5-25 s on a loaded 2-core CPU. This module
runs the packaged all-MiniLM-L6-v2 (a 6-layer BERT, Wang et al. 2020, arXiv 2002.10957) with
NumPy on the same ``model.safetensors`` and the same Rust ``tokenizers`` file, then mean pooling
over the attention mask and L2 normalisation, as its sentence-transformers modules
(Transformer -> Pooling(mean) -> Normalize) do. Vectors match sentence-transformers' to about
1e-6 (tested), so both runtimes share one fingerprint and one cache.

Only BERT-family checkpoints with absolute positions and a mean-pooling sentence-transformers
config are accepted; anything else raises ``ValueError`` (use the torch runtime for it).
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np


def _erf(x: np.ndarray) -> np.ndarray:
    """erf by Abramowitz & Stegun 7.1.26 refined with one Newton step (|error| < 1e-7 in float32)."""
    s = np.sign(x)
    a = np.abs(x)
    t = 1.0 / (1.0 + 0.3275911 * a)
    y = 1.0 - (((((1.061405429 * t - 1.453152027) * t) + 1.421413741) * t - 0.284496736) * t + 0.254829592) * t \
        * np.exp(-a * a)
    return s * y


def _gelu(x: np.ndarray) -> np.ndarray:
    return 0.5 * x * (1.0 + _erf(x / math.sqrt(2.0)))


def _layer_norm(x: np.ndarray, w: np.ndarray, b: np.ndarray, eps: float) -> np.ndarray:
    mu = x.mean(-1, keepdims=True)
    var = ((x - mu) ** 2).mean(-1, keepdims=True)
    return (x - mu) / np.sqrt(var + eps) * w + b


class NumpyBertEncoder:
    """``encode(list[str]) -> float32 [n, dim]`` with unit rows, from a sentence-transformers folder.

    Args:
        path: folder with ``config.json``, ``model.safetensors``, ``tokenizer.json`` and
            ``sentence_bert_config.json`` (the packaged all-MiniLM-L6-v2's layout).

    Raises:
        ValueError: the folder is not a mean-pooled BERT sentence-transformers model.
    """

    def __init__(self, path: str | Path) -> None:
        from safetensors.numpy import load_file
        from tokenizers import Tokenizer

        path = Path(path)
        cfg = json.loads((path / "config.json").read_text())
        if cfg.get("model_type") != "bert" or cfg.get("position_embedding_type", "absolute") != "absolute":
            raise ValueError(f"{path} is not an absolute-position BERT model; load it with the torch runtime")
        pooling = path / "1_Pooling" / "config.json"
        if pooling.is_file() and not json.loads(pooling.read_text()).get("pooling_mode_mean_tokens", False):
            raise ValueError(f"{path} does not use mean pooling; load it with the torch runtime")
        st = json.loads((path / "sentence_bert_config.json").read_text()) if (path / "sentence_bert_config.json").is_file() else {}
        self.max_len = int(st.get("max_seq_length", cfg.get("max_position_embeddings", 512)))
        self.heads = int(cfg["num_attention_heads"])
        self.layers = int(cfg["num_hidden_layers"])
        self.eps = float(cfg.get("layer_norm_eps", 1e-12))
        self.tokenizer = Tokenizer.from_file(str(path / "tokenizer.json"))
        self.tokenizer.no_padding()
        self.tokenizer.enable_truncation(self.max_len)
        w = load_file(str(path / "model.safetensors"))
        self._w = {k.removeprefix("bert."): v for k, v in w.items()}
        self.dim = int(cfg["hidden_size"])

    def get_sentence_embedding_dimension(self) -> int:
        return self.dim

    def _p(self, name: str) -> np.ndarray:
        return self._w[name]

    def _forward(self, ids: np.ndarray, mask: np.ndarray) -> np.ndarray:
        """ids, mask: ``[b, t]`` -> last hidden states ``[b, t, hidden]`` (float32)."""
        b, t = ids.shape
        p = self._p
        x = p("embeddings.word_embeddings.weight")[ids] + p("embeddings.position_embeddings.weight")[:t][None] \
            + p("embeddings.token_type_embeddings.weight")[0][None, None]
        x = _layer_norm(x, p("embeddings.LayerNorm.weight"), p("embeddings.LayerNorm.bias"), self.eps)
        h, d = self.heads, self.dim // self.heads
        bias = np.where(mask[:, None, None, :] > 0, 0.0, np.finfo(np.float32).min).astype(np.float32)
        for i in range(self.layers):
            pre = f"encoder.layer.{i}."

            def lin(v: np.ndarray, name: str, pre: str = pre) -> np.ndarray:
                return v @ p(pre + name + ".weight").T + p(pre + name + ".bias")

            q = lin(x, "attention.self.query").reshape(b, t, h, d).transpose(0, 2, 1, 3)
            k = lin(x, "attention.self.key").reshape(b, t, h, d).transpose(0, 2, 3, 1)
            v = lin(x, "attention.self.value").reshape(b, t, h, d).transpose(0, 2, 1, 3)
            s = q @ k / math.sqrt(d) + bias
            s = np.exp(s - s.max(-1, keepdims=True))
            s /= s.sum(-1, keepdims=True)
            ctx = (s @ v).transpose(0, 2, 1, 3).reshape(b, t, h * d)
            x = _layer_norm(x + lin(ctx, "attention.output.dense"), p(pre + "attention.output.LayerNorm.weight"),
                            p(pre + "attention.output.LayerNorm.bias"), self.eps)
            y = lin(_gelu(lin(x, "intermediate.dense")), "output.dense")
            x = _layer_norm(x + y, p(pre + "output.LayerNorm.weight"), p(pre + "output.LayerNorm.bias"), self.eps)
        return x

    def encode(self, texts: list[str], batch_size: int = 32, threads: int | None = None) -> np.ndarray:
        """Embed ``texts``. Returns float32 ``[len(texts), dim]``, rows of unit L2 norm.

        ``threads``: BLAS threads for this call (via ``threadpoolctl`` when installed). Default:
        one for a few texts (a single query's small matrices run 10x slower when BLAS threads
        spin on a busy CPU), BLAS's own setting otherwise.
        """
        if isinstance(texts, str):
            raise TypeError("encode takes a list of strings, not a single string")
        if threads is None and len(texts) <= 4:
            threads = 1
        if threads is not None:
            try:
                from threadpoolctl import threadpool_limits
            except ImportError:
                return self._encode(texts, batch_size)
            with threadpool_limits(limits=threads, user_api="blas"):
                return self._encode(texts, batch_size)
        return self._encode(texts, batch_size)

    def _encode(self, texts: list[str], batch_size: int) -> np.ndarray:
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        encs = self.tokenizer.encode_batch(list(texts)) if texts else []
        order = sorted(range(len(encs)), key=lambda i: len(encs[i].ids))  # similar lengths share a batch
        for s in range(0, len(order), batch_size):
            idx = order[s:s + batch_size]
            t = max(len(encs[i].ids) for i in idx)
            ids = np.zeros((len(idx), t), dtype=np.int64)
            mask = np.zeros((len(idx), t), dtype=np.float32)
            for r, i in enumerate(idx):
                n = len(encs[i].ids)
                ids[r, :n] = encs[i].ids
                mask[r, :n] = 1.0
            hs = self._forward(ids, mask)
            pooled = (hs * mask[..., None]).sum(1) / np.maximum(mask.sum(1, keepdims=True), 1e-9)
            pooled /= np.maximum(np.linalg.norm(pooled, axis=1, keepdims=True), 1e-12)
            out[idx] = pooled
        return out


__all__ = ["NumpyBertEncoder"]
