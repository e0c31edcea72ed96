"""The pair benchmark of ``ragcache bench semantic``: precision / recall of each hit decision.

For each labelled pair ``{"a", "b", "same"}``: store ``a`` (in a partition of its own), look up
``b``; a hit on a ``same=false`` pair is a false hit. Compared in one run, on each pair set (the
project's hard pairs; the held-out split of the QQP development pairs,
:func:`ragcache.app.verifier_data.qqp_splits`, never fitted or chosen on):

- plain cosine (no guards, no typo correction) at thresholds 0.80 / 0.85 / 0.90 / 0.95;
- the guards alone (:class:`~ragcache.semantic.decision.guards.GuardSet`, today's rules) at cosine 0.70 /
  0.80 / 0.90 / 0.94 (0.94 was the previous default);
- the learned verifier, the shipped default (``SemanticCache()``: gate and threshold from the head);
- GPTCache (``pip install gptcache``) with the same embedder, FAISS and SQLite. Its FAISS store is
  L2 over unit vectors and its default ``SearchDistanceEvaluation`` scores ``4 - d``, so
  ``similarity_threshold = s`` hits when ``cos >= 2s - 1`` (its default s = 0.8 is cosine 0.6).
"""

from __future__ import annotations

import atexit
import shutil
import tempfile
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.plotting import save_figure
from ragcache.semantic import SemanticCache, partition_key
from ragcache.semantic.decision.guards import GuardSet
from ragcache.semantic.embedding import QuestionEmbedder

THRESHOLDS = (0.80, 0.85, 0.90, 0.95)
GUARDED_THRESHOLDS = (0.70, 0.80, 0.90, 0.94)


def _mixed_kinds(rows: list[dict]) -> frozenset[str]:
    labels: dict[str, set[bool]] = defaultdict(set)
    for r in rows:
        labels[r.get("kind", "pair")].add(bool(r["same"]))
    return frozenset(k for k, v in labels.items() if len(v) > 1)


def kind_of(r: dict, mixed: frozenset[str]) -> str:
    """The row's kind, split by label when a kind holds both (QQP: "qqp/same", "qqp/different")."""
    k = r.get("kind", "pair")
    return f"{k}/{'same' if r['same'] else 'different'}" if k in mixed else k


def score(rows: list[dict], hits: list[bool]) -> dict[str, Any]:
    """Precision / recall overall and hit rate per kind (recall for same kinds, false-hit rate otherwise)."""
    by_kind: dict[str, dict[str, Any]] = defaultdict(lambda: {"n": 0, "hits": 0})
    tp = fp = pos = 0
    mixed = _mixed_kinds(rows)
    for r, h in zip(rows, hits, strict=True):
        k = by_kind[kind_of(r, mixed)]
        k["n"] += 1
        k["hits"] += int(h)
        k["same"] = bool(r["same"])
        pos += int(r["same"])
        tp += int(h and r["same"])
        fp += int(h and not r["same"])
    for k in by_kind.values():
        k["rate"] = k["hits"] / k["n"]
    return {"precision": tp / (tp + fp) if tp + fp else None, "recall": tp / pos if pos else None,
            "true_hits": tp, "false_hits": fp, "by_kind": dict(sorted(by_kind.items()))}


def memo_embedder(emb: QuestionEmbedder, texts: list[str]) -> QuestionEmbedder:
    """``emb`` with the embeddings (and token states) of ``texts`` precomputed in batches: the same
    vectors, less CPU. Accuracy runs embed each pair text several times (each system); the memo
    keeps them identical across systems and the run short on a shared CPU."""
    memo: dict[str, tuple[np.ndarray, np.ndarray | None]] = {}
    raw = emb.token_fn

    def fill(batch: list[str]) -> None:
        missing = list(dict.fromkeys(t for t in batch if t not in memo))
        for s in range(0, len(missing), 64):
            chunk = missing[s:s + 64]
            if raw is None:
                memo.update(zip(chunk, ((v, None) for v in emb.encode(chunk))))
            else:
                pooled, states = raw(chunk)
                memo.update(zip(chunk, zip(np.asarray(pooled, np.float32), states)))

    def fn(batch: list[str]) -> np.ndarray:
        if not batch:
            return np.zeros((0, emb.dim), np.float32)
        fill(batch)
        return np.stack([memo[t][0] for t in batch])

    def tokens(batch: list[str]) -> tuple[np.ndarray, list[np.ndarray]]:
        fill(batch)
        return fn(batch), [memo[t][1] for t in batch]

    fill(texts)
    window = {"window": emb.window, "count_tokens": emb.count_tokens} if emb.exact_window else {}
    return QuestionEmbedder(fn, name=emb.name, fingerprint=emb.fingerprint, dim=emb.dim, known_words=emb.known_words,
                            token_fn=None if raw is None else tokens, count_unknown=emb.unknown_pieces, **window)


def accuracy(rows: list[dict], emb: QuestionEmbedder) -> dict[str, Any]:
    """Every ragcache decision and plain cosine on the pairs (one entry per partition)."""
    default = SemanticCache(embedder=emb)
    guards = SemanticCache(embedder=emb, guards=GuardSet.default(), threshold=min(GUARDED_THRESHOLDS))
    plain = SemanticCache(embedder=emb, guards=False, typo_correction=False, threshold=-1.0)
    hits, sims = [], []
    sweep: dict[float, list[bool]] = {t: [] for t in GUARDED_THRESHOLDS}
    rejections: dict[str, int] = defaultdict(int)
    for i, r in enumerate(rows):
        pk = partition_key(namespace=f"pair-{i}", model=emb.fingerprint)
        for c in (default, guards, plain):
            c.store(r["a"], "A", partition=pk)
        best = guards.candidates_for(r["b"], partition=pk)[0]  # one entry per partition: the only candidate
        for t in GUARDED_THRESHOLDS:
            sweep[t].append(best.similarity >= t and best.verdict.ok)
        hit = default.lookup(r["b"], partition=pk)
        hits.append(hit is not None)
        sims.append(plain.candidates_for(r["b"], partition=pk)[0].similarity)
    for k, v in default.stats.rejections.items():
        rejections[k] += v
    return {"verifier": {"gate": default.threshold, "threshold": getattr(default.guards, "head", None)
                         and default.guards.head.threshold, "decider": type(default.guards).__name__,
                         **score(rows, hits), "rejections": dict(rejections)},
            "plain_cosine": {f"{t:.2f}": score(rows, [s >= t for s in sims]) for t in THRESHOLDS},
            "guards": {f"{t:.2f}": score(rows, h) for t, h in sweep.items()},
            "plain_curve": [[round(float(t), 3), score(rows, [s >= t for s in sims])["precision"],
                             score(rows, [s >= t for s in sims])["recall"]] for t in np.arange(0.50, 1.0, 0.01)]}


def gptcache_accuracy(rows: list[dict], emb: QuestionEmbedder) -> dict[str, Any]:
    """GPTCache 0.1.x with the same embedder, FAISS (IDMap,Flat L2) and SQLite, one cache per pair."""
    try:
        import gptcache
        from gptcache import Cache, Config
        from gptcache.adapter.api import get, put
        from gptcache.manager import CacheBase, VectorBase, get_data_manager
        from gptcache.processor.pre import get_prompt
        from gptcache.similarity_evaluation.distance import SearchDistanceEvaluation
    except ImportError as e:
        return {"error": f"gptcache not importable ({e}); pip install gptcache"}
    settings = {f"s={(t + 1) / 2:.3f} (cos>={t:.2f})": (t + 1) / 2 for t in THRESHOLDS}
    settings["s=0.800 default (cos>=0.60)"] = 0.8
    hits: dict[str, list[bool]] = {k: [] for k in settings}
    root = Path(tempfile.mkdtemp(prefix="gptcache-bench-"))
    # GPTCache flushes every cache's FAISS file at interpreter exit; remove the folder after that
    # (atexit runs handlers last-in first-out, so register before creating the caches).
    atexit.register(shutil.rmtree, root, True)
    t0 = time.perf_counter()
    for i, r in enumerate(rows):
        d = root / str(i)
        d.mkdir()
        c = Cache()
        dm = get_data_manager(CacheBase("sqlite", sql_url=f"sqlite:///{d}/sqlite.db"),
                              VectorBase("faiss", dimension=emb.dim, index_path=str(d / "faiss.index")))
        c.init(pre_embedding_func=get_prompt, embedding_func=lambda x, **_: emb.encode([x])[0],
               data_manager=dm, similarity_evaluation=SearchDistanceEvaluation(),
               config=Config(similarity_threshold=0.8))
        put(r["a"], "A", cache_obj=c)
        for name, s in settings.items():
            c.config.similarity_threshold = s
            hits[name].append(get(r["b"], cache_obj=c) is not None)
    return {"version": gptcache.__version__, "seconds": time.perf_counter() - t0,
            "config": "Cache(pre_embedding_func=get_prompt, embedding=same MiniLM, CacheBase('sqlite'), "
                      "VectorBase('faiss'), SearchDistanceEvaluation())",
            "results": {k: score(rows, v) for k, v in hits.items()}}


def systems(res: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """(row label, score) for the table: plain cosine, GPTCache, guards alone, the verifier default."""
    out = [(f"plain cosine >= {t}", s) for t, s in res["plain_cosine"].items()]
    out += [(f"GPTCache {k}", s) for k, s in res.get("gptcache", {}).get("results", {}).items()]
    out += [(f"guards alone, cosine >= {t}" + (" (previous default)" if t == "0.94" else ""), s)
            for t, s in res["guards"].items()]
    v = res["verifier"]
    out.append((f"learned verifier (default: gate {v['gate']:.2f}, score >= {v['threshold'] or 0:.3f})", v))
    return out


def plot(sets: dict[str, dict[str, Any]], path: str) -> None:
    """Precision against recall of every system, one panel per pair set, as a PNG."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(sets), figsize=(6.5 * len(sets), 5), squeeze=False)
    for ax, (name, res) in zip(axes[0], sets.items(), strict=True):
        curve = [(r, p) for _, p, r in res["plain_curve"] if p is not None]
        ax.plot([c[0] for c in curve], [c[1] for c in curve], "-", color="grey", label="plain cosine (0.50-0.99)")
        for t, s in res["guards"].items():
            if s["precision"] is not None:
                ax.plot(s["recall"], s["precision"], "o", color="tab:blue")
                ax.annotate(t, (s["recall"], s["precision"]), textcoords="offset points", xytext=(4, 4), fontsize=8)
        ax.plot([], [], "o", color="tab:blue", label="guards alone (cosine gate)")
        for s in res.get("gptcache", {}).get("results", {}).values():
            if s["precision"] is not None:
                ax.plot(s["recall"], s["precision"], "x", color="tab:red")
        ax.plot([], [], "x", color="tab:red", label="GPTCache (same embedder)")
        v = res["verifier"]
        if v["precision"] is not None:
            ax.plot(v["recall"], v["precision"], "*", color="tab:green", markersize=14, label="learned verifier (default)")
        ax.set_xlabel("recall (true hits / same pairs)")
        ax.set_ylabel("precision (true hits / hits)")
        ax.set_xlim(0, 1)
        ax.set_ylim(0.3, 1.02)
        ax.grid(alpha=0.3)
        ax.set_title(f"{name} ({res['n']} pairs)")
        ax.legend(loc="lower left", fontsize=8)
    save_figure(fig, path)


__all__ = ["GUARDED_THRESHOLDS", "THRESHOLDS", "accuracy", "gptcache_accuracy", "kind_of", "memo_embedder", "plot",
           "score", "systems"]
