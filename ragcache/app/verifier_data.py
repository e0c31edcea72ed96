"""Labelled question pairs for fitting and measuring the hit decision: reading, splitting, features.

Pairs are JSONL rows ``{"a": str, "b": str, "same": bool}`` (other keys kept). QQP pairs are split
by cluster: the connected components of the pair links (duplicate or not) over all QQP pairs given,
which are unions of duplicate clusters, so a question, every duplicate of it and every pair it is
in lie in one split only, and each split keeps the source's share of duplicates. A component's
split is fixed by the sha256 of its smallest question (no random state): ``fit`` (60 %),
``choose`` (20 %), ``heldout`` (20 %).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ragcache.app.jsonl import read_jsonl

SPLITS = (("fit", 0.6), ("choose", 0.8), ("heldout", 1.0))
"""Split names and the upper end of each one's share of the hash range."""


def read_pairs(path: str | Path) -> list[dict[str, Any]]:
    """The rows of a pairs JSONL file.

    Raises:
        ValueError: the file is missing, or a line is not ``{"a": str, "b": str, "same": bool}``
            (the message names the line).
    """
    p = Path(path)
    rows = []
    for i, r in read_jsonl(p, missing=f"pairs file {p} not found; give a JSONL file of {{\"a\", \"b\", \"same\"}} rows"):
        if not (isinstance(r, dict) and isinstance(r.get("a"), str) and isinstance(r.get("b"), str)
                and isinstance(r.get("same"), bool) and r["a"].strip() and r["b"].strip()):
            raise ValueError(f"{p}:{i}: expected {{\"a\": non-empty str, \"b\": non-empty str, \"same\": true|false}}, "
                             f"got {json.dumps(r)[:120]!r}")
        rows.append(r)
    return rows


def _find(parent: dict[str, str], x: str) -> str:
    while parent[x] != x:
        parent[x] = parent[parent[x]]
        x = parent[x]
    return x


def components(rows: Iterable[dict[str, Any]], *, same_only: bool = False) -> dict[str, str]:
    """``question -> representative`` (the component's smallest question) over the pair links
    (only the ``same`` ones with ``same_only``: the duplicate clusters)."""
    parent: dict[str, str] = {}
    for r in rows:
        for q in (r["a"], r["b"]):
            parent.setdefault(q, q)
        if r["same"] or not same_only:
            x, y = _find(parent, r["a"]), _find(parent, r["b"])
            if x != y:
                parent[max(x, y)] = min(x, y)
    return {q: _find(parent, q) for q in parent}


def split_of(representative: str) -> str:
    """The split of a component (by the sha256 of its representative question)."""
    u = int.from_bytes(hashlib.sha256(representative.encode("utf-8")).digest()[:8], "big") / 2**64
    return next(name for name, hi in SPLITS if u < hi)


def qqp_splits(rows: Sequence[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    """``{"fit": [...], "choose": [...], "heldout": [...]}`` by duplicate cluster (module docstring);
    duplicate rows (same a, b) are kept once."""
    comp = components(rows)
    out: dict[str, list[dict[str, Any]]] = {name: [] for name, _ in SPLITS}
    seen: set[tuple[str, str]] = set()
    for r in rows:
        key = (r["a"], r["b"]) if r["a"] <= r["b"] else (r["b"], r["a"])
        if key in seen:
            continue
        seen.add(key)
        sa, sb = split_of(comp[r["a"]]), split_of(comp[r["b"]])
        if sa == sb:
            out[sa].append(r)
    return out


def featurize(rows: Sequence[dict[str, Any]], embedder: Any, *, batch: int = 64) -> tuple[np.ndarray, np.ndarray]:
    """``(features [n, len(FEATURE_NAMES)], labels [n])`` for pairs, as the cache computes them at
    lookup (normalised questions, :func:`~ragcache.semantic.text.embed_form` embedded, token states
    from ``embedder``, a :class:`~ragcache.semantic.embedding.QuestionEmbedder`)."""
    from ragcache.semantic.decision.features import feature_guards, question_pair_features
    from ragcache.semantic.text import embed_form, normalize_question

    norm = {q: normalize_question(q) for r in rows for q in (r["a"], r["b"])}
    texts = sorted({embed_form(n) for n in norm.values()})
    vec: dict[str, np.ndarray] = {}
    tok: dict[str, np.ndarray] = {}
    for s in range(0, len(texts), batch):
        chunk = texts[s:s + batch]
        pooled, states = embedder.encode_tokens(chunk)
        pooled = pooled / np.linalg.norm(pooled, axis=1, keepdims=True)
        for t, v, st in zip(chunk, pooled, states, strict=True):
            vec[t], tok[t] = v, st.astype(np.float16).astype(np.float32)
    guards = feature_guards()
    x = np.zeros((len(rows), 0)).tolist()
    for i, r in enumerate(rows):
        a, b = norm[r["a"]], norm[r["b"]]
        ea, eb = embed_form(a), embed_form(b)
        x[i] = question_pair_features(a, b, float(vec[ea] @ vec[eb]), tok[ea], tok[eb], guards)
    y = np.array([1.0 if r["same"] else 0.0 for r in rows])
    return np.array(x, dtype=np.float64).reshape(len(rows), -1), y


def precision_recall(pred: np.ndarray, y: np.ndarray) -> tuple[float, float, int]:
    """``(precision, recall, hits)`` of boolean predictions against labels (precision 1.0 with no hit)."""
    pred, y = np.asarray(pred, bool), np.asarray(y) > 0.5
    tp, hits = int((pred & y).sum()), int(pred.sum())
    return (tp / hits if hits else 1.0), (tp / max(int(y.sum()), 1)), hits


__all__ = ["SPLITS", "components", "featurize", "precision_recall", "qqp_splits", "read_pairs", "split_of"]
