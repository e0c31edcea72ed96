"""A BERT sentence encoder in NumPy, for embedding a question without importing torch.

The CLI's semantic-cache hit path (``ragcache ask`` asked again) must answer in about a second;
importing torch and sentence-transformers alone takes 5-25 s on a loaded 2-core CPU. This module
runs the packaged all-MiniLM-L6-v2 (a 6-layer BERT, Wang et al. 2020, arXiv 2002.10957) with
NumPy on the same ``model.safetensors`` and the same Rust ``tokenizers`` file, then mean pooling
over the attention mask and L2 normalisation, as its sentence-transformers modules
(Transformer -> Pooling(mean) -> Normalize) do. Vectors match sentence-transformers' to about
1e-6 (tested), so both runtimes share one fingerprint and one cache.

Only the pipeline implemented here is accepted (:func:`check_pipeline`): a BERT-family
checkpoint with absolute positions at the folder's root, mean pooling and nothing else in
``modules.json`` but an optional ``Normalize`` (vectors are L2-normalised anyway), no lower-casing
by sentence-transformers and no default prompt. Anything else (a ``Dense`` or ``LayerNorm``
module, CLS / max / weighted pooling, a prompt) raises ``ValueError`` naming it, instead of being
silently skipped: use the torch runtime for it.
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


_TRANSFORMER = "sentence_transformers.models.Transformer"
_POOLING = "sentence_transformers.models.Pooling"
_NORMALIZE = "sentence_transformers.models.Normalize"


_ST_DTYPES = {"F32": np.float32, "F16": np.float16, "F64": np.float64, "I64": np.int64, "I32": np.int32}


def map_safetensors(path: str | Path) -> dict[str, np.ndarray]:
    """The tensors of a ``.safetensors`` file as read-only NumPy views of one memory map (no copy).

    The format (huggingface/safetensors, "Format" in its README): an unsigned little-endian 64-bit
    header length ``N``, ``N`` bytes of JSON mapping each name to ``dtype``, ``shape`` and
    ``data_offsets`` ``[begin, end)`` relative to the byte after the header, then the data
    (little-endian, C order). Mapping instead of ``safetensors.numpy.load_file`` turns the 90 MB
    copy of a hit's embedder load (80-250 ms of CPU on this project's machine) into page-cache
    reads of the pages the forward pass touches. A dtype NumPy lacks (BF16, F8) falls back to
    ``load_file``.

    Raises:
        ValueError: a header that is not the format's (too short, not JSON, offsets past the end).
    """
    import struct

    path = Path(path)
    with open(path, "rb") as f:
        head = f.read(8)
        n = struct.unpack("<Q", head)[0] if len(head) == 8 else -1
        size = path.stat().st_size
        if n < 2 or 8 + n > size:
            raise ValueError(f"{path} is not a safetensors file (header length {n}, file size {size})")
        try:
            header = json.loads(f.read(n))
        except ValueError:
            raise ValueError(f"{path} is not a safetensors file (its header is not JSON)") from None
    header.pop("__metadata__", None)
    if any(v.get("dtype") not in _ST_DTYPES for v in header.values()):
        from safetensors.numpy import load_file

        return load_file(str(path))
    raw = np.memmap(path, dtype=np.uint8, mode="r")
    out = {}
    for name, v in header.items():
        begin, end = (8 + n + int(o) for o in v["data_offsets"])
        dt = np.dtype(_ST_DTYPES[v["dtype"]]).newbyteorder("<")
        if not 8 + n <= begin <= end <= size or end - begin != math.prod(v["shape"]) * dt.itemsize:
            raise ValueError(f"{path}: tensor {name!r} has offsets {v['data_offsets']} that do not fit its "
                             f"shape {v['shape']} or the file")
        out[name] = np.ndarray(tuple(v["shape"]), dtype=dt, buffer=raw, offset=begin)
    return out


def _read_json(path: Path) -> dict:
    return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}


def check_pipeline(path: str | Path) -> None:
    """Refuse a sentence-transformers folder whose pipeline :class:`NumpyBertEncoder` does not implement.

    Raises:
        ValueError: names the first unsupported part (model type, module, pooling mode, lower-casing,
            default prompt) and the fix (``runtime="torch"``).
    """
    path = Path(path)
    fix = "; load it with the torch runtime (runtime='torch')"
    cfg = _read_json(path / "config.json")
    if cfg.get("model_type") != "bert" or cfg.get("position_embedding_type", "absolute") != "absolute":
        raise ValueError(f"{path} is not an absolute-position BERT model" + fix)
    modules = json.loads((path / "modules.json").read_text(encoding="utf-8")) if (path / "modules.json").is_file() \
        else [{"type": _TRANSFORMER, "path": ""}, {"type": _POOLING, "path": "1_Pooling"}]
    types = [str(m.get("type", "")) for m in modules]
    if types[:2] != [_TRANSFORMER, _POOLING] or any(t != _NORMALIZE for t in types[2:]):
        extra = [t for t in types if t not in (_TRANSFORMER, _POOLING, _NORMALIZE)] or types
        raise ValueError(f"{path}/modules.json runs {types}; the NumPy runtime implements only Transformer -> "
                         f"Pooling(mean) [-> Normalize], not {extra}" + fix)
    if str(modules[0].get("path", "")) not in ("", "."):
        raise ValueError(f"{path}: the transformer module lives in {modules[0]['path']!r}, not the folder root" + fix)
    pool = _read_json(path / str(modules[1].get("path", "1_Pooling")) / "config.json")
    modes = sorted(k for k, v in pool.items() if k.startswith("pooling_mode_") and v)
    if pool and modes != ["pooling_mode_mean_tokens"]:
        raise ValueError(f"{path} pools with {modes or 'no mode'}; the NumPy runtime implements mean pooling only" + fix)
    if pool and int(pool.get("word_embedding_dimension", cfg.get("hidden_size"))) != int(cfg.get("hidden_size", 0)):
        raise ValueError(f"{path}: pooling width {pool.get('word_embedding_dimension')} is not the hidden size" + fix)
    if _read_json(path / "sentence_bert_config.json").get("do_lower_case"):
        raise ValueError(f"{path} lower-cases text before tokenising (do_lower_case)" + fix)
    st = _read_json(path / "config_sentence_transformers.json")
    if st.get("default_prompt_name"):
        raise ValueError(f"{path} prepends the prompt {st['default_prompt_name']!r} to every text" + fix)


class NumpyBertEncoder:
    """``encode(list[str]) -> float32 [n, dim]`` with unit rows, from a sentence-transformers folder.

    Args:
        path: folder with ``config.json``, ``model.safetensors``, ``tokenizer.json`` and
            ``sentence_bert_config.json`` (the packaged all-MiniLM-L6-v2's layout).

    Raises:
        ValueError: the folder's pipeline is not the one implemented here (:func:`check_pipeline`).
    """

    def __init__(self, path: str | Path) -> None:
        from tokenizers import Tokenizer

        path = Path(path)
        check_pipeline(path)
        cfg = json.loads((path / "config.json").read_text())
        st = _read_json(path / "sentence_bert_config.json")
        self.max_len = int(st.get("max_seq_length", cfg.get("max_position_embeddings", 512)))
        self.heads = int(cfg["num_attention_heads"])
        self.layers = int(cfg["num_hidden_layers"])
        self.eps = float(cfg.get("layer_norm_eps", 1e-12))
        self.tokenizer = Tokenizer.from_file(str(path / "tokenizer.json"))
        self.tokenizer.no_padding()
        self.tokenizer.enable_truncation(self.max_len)
        w = map_safetensors(path / "model.safetensors")
        self._w = {k.removeprefix("bert."): v for k, v in w.items()}
        self.dim = int(cfg["hidden_size"])

    def get_sentence_embedding_dimension(self) -> int:
        return self.dim

    def _p(self, name: str) -> np.ndarray:
        return self._w[name]

    def _forward(self, ids: np.ndarray, mask: np.ndarray, types: np.ndarray | None = None) -> np.ndarray:
        """ids, mask (and BERT's segment ids ``types``, default all 0): ``[b, t]`` -> last hidden states
        ``[b, t, hidden]`` (float32)."""
        b, t = ids.shape
        p = self._p
        seg = p("embeddings.token_type_embeddings.weight")
        x = p("embeddings.word_embeddings.weight")[ids] + p("embeddings.position_embeddings.weight")[:t][None] \
            + (seg[0][None, None] if types is None else seg[types])
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

    def encode_tokens(self, texts: list[str], threads: int | None = 1) -> tuple[np.ndarray, list[np.ndarray]]:
        """One forward pass: (unit sentence vectors ``[n, dim]``, per text its last hidden states
        ``[tokens, dim]`` without padding, special tokens included), for token-level alignment."""
        try:
            from threadpoolctl import threadpool_limits
        except ImportError:  # pragma: no cover - threadpoolctl ships with scikit-learn / numpy stacks
            return self._encode(texts, 32, keep_tokens=True)
        with threadpool_limits(limits=threads, user_api="blas"):
            return self._encode(texts, 32, keep_tokens=True)

    def _encode(self, texts: list[str], batch_size: int, keep_tokens: bool = False):  # noqa: ANN202

        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        states: list[np.ndarray] = [np.zeros((0, self.dim), np.float32)] * len(texts)
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
            if keep_tokens:
                for r, i in enumerate(idx):
                    states[i] = hs[r, :len(encs[i].ids)]
        return (out, states) if keep_tokens else out


__all__ = ["NumpyBertEncoder", "check_pipeline"]
