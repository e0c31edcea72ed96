"""Benchmark of the semantic response cache: false hits, recall by kind, lookup latency at scale.

For each labelled pair ``{"a", "b", "same", "kind"}``: store ``a`` (in a partition of its own),
look up ``b``. A hit on a ``same=false`` pair is a false hit. Compared in one run:

- plain cosine (no guards, no typo correction) at thresholds 0.80 / 0.85 / 0.90 / 0.95;
- ragcache with guards at its default threshold;
- GPTCache (``pip install gptcache``) with the same embedder, FAISS and SQLite, at the same
  cosine thresholds. GPTCache's FAISS store is L2 over unit vectors and its default
  ``SearchDistanceEvaluation`` scores ``4 - d``, so ``similarity_threshold = s`` hits when
  ``cos >= 2s - 1`` (its default s = 0.8 is cosine 0.6).

Latency: ``scale`` entries in one partition (synthetic questions; the first
``real_embeddings`` are embedded with the real model, the rest are vectors
mixed from those plus noise, so the index holds realistic directions without
embedding 100k texts on a shared CPU). Reported: FAISS search alone and the full
lookup (normalise + typo correction + embed + search + guards), p50/p99 in ms.

Run: ``ragcache bench semantic --pairs ../shared/data/semantic_pairs_dev.jsonl``
or ``python -m ragcache.app.bench.semantic PAIRS [JSON]``.
"""

from __future__ import annotations

import atexit
import hashlib
import json
import os
import platform
import random
import shutil
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np

from ragcache.semantic import DEFAULT_THRESHOLD, SemanticCache, partition_key
from ragcache.semantic.embedding import QuestionEmbedder, resolve_embedder
from ragcache.semantic.text import embed_form, normalize_question
from ragcache.app.bench.plotting import draw

THRESHOLDS = (0.80, 0.85, 0.90, 0.95)
GUARDED_THRESHOLDS = tuple(sorted({0.70, 0.80, 0.90, DEFAULT_THRESHOLD}))


def _machine() -> dict[str, Any]:
    import faiss
    import torch

    return {
        "platform": platform.platform(),
        "python": sys.version.split()[0],
        "cpu_count": os.cpu_count(),
        "loadavg_1m": os.getloadavg()[0] if hasattr(os, "getloadavg") else None,
        "torch_threads": torch.get_num_threads(),
        "faiss": faiss.__version__,
        "gpu": False,
        "note": "shared 2-core CPU (other jobs running); latency numbers are indicative",
    }


def _load_pairs(path: str) -> list[dict]:
    p = Path(path)
    if not p.exists():
        raise ValueError(f"pairs file {path} not found; pass --pairs ../shared/data/semantic_pairs_dev.jsonl")
    return [json.loads(line) for line in p.read_text().splitlines() if line.strip()]


def _mixed_kinds(rows: list[dict]) -> frozenset[str]:
    labels: dict[str, set[bool]] = defaultdict(set)
    for r in rows:
        labels[r["kind"]].add(bool(r["same"]))
    return frozenset(k for k, v in labels.items() if len(v) > 1)


def _kind(r: dict, mixed: frozenset[str]) -> str:
    """The row's kind, split by label when a kind holds both (QQP: "qqp/same", "qqp/different")."""
    return f"{r['kind']}/{'same' if r['same'] else 'different'}" if r["kind"] in mixed else r["kind"]


def _score(rows: list[dict], hits: list[bool]) -> dict[str, Any]:
    """Precision / recall overall and hit rate per kind (recall for same kinds, false-hit rate otherwise)."""
    by_kind: dict[str, dict[str, Any]] = defaultdict(lambda: {"n": 0, "hits": 0})
    tp = fp = pos = 0
    mixed = _mixed_kinds(rows)
    for r, h in zip(rows, hits, strict=True):
        k = by_kind[_kind(r, mixed)]
        k["n"] += 1
        k["hits"] += int(h)
        k["same"] = bool(r["same"])
        pos += int(r["same"])
        tp += int(h and r["same"])
        fp += int(h and not r["same"])
    for k in by_kind.values():
        k["rate"] = k["hits"] / k["n"]
    return {
        "precision": tp / (tp + fp) if tp + fp else None,
        "recall": tp / pos if pos else None,
        "true_hits": tp,
        "false_hits": fp,
        "by_kind": dict(sorted(by_kind.items())),
    }


def _pr(rows: list[dict], hits: list[bool]) -> tuple[float | None, float | None]:
    sc = _score(rows, hits)
    return sc["precision"], sc["recall"]


def plot(result: dict[str, Any], path: str) -> None:
    """Precision / recall of plain cosine (a curve over thresholds), ragcache guarded (a point per
    threshold) and GPTCache (a point per setting) on one pairs file, as a PNG."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 5))
    curve = [(r, p) for _, p, r in result["plain_curve"] if p is not None]
    ax.plot([c[0] for c in curve], [c[1] for c in curve], "-", color="grey", label="plain cosine (0.30-0.99)")
    for k, (t, res) in enumerate(result["ragcache_sweep"].items()):
        if res["precision"] is not None:
            ax.plot(res["recall"], res["precision"], "o", color="tab:blue")
            ax.annotate(f"{t}", (res["recall"], res["precision"]), textcoords="offset points",
                        xytext=(4, -14 if k % 2 else 6), fontsize=8)
    ax.plot([], [], "o", color="tab:blue", label="ragcache guarded (threshold)")
    for res in result.get("gptcache", {}).get("results", {}).values():
        if res["precision"] is not None:
            ax.plot(res["recall"], res["precision"], "x", color="tab:red")
    ax.plot([], [], "x", color="tab:red", label="GPTCache (same embedder)")
    ax.set_xlabel("recall (true hits / same pairs)")
    ax.set_ylabel("precision (true hits / hits)")
    ax.set_xlim(0, 1)
    ax.set_ylim(0, 1.02)
    ax.grid(alpha=0.3)
    ax.set_title(f"semantic cache on {Path(result['pairs']['path']).name} ({result['pairs']['n']} pairs)")
    ax.legend(loc="lower left")
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    tmp = out.with_name(out.stem + ".tmp.png")
    fig.savefig(tmp, dpi=120)
    os.replace(tmp, out)
    plt.close(fig)


def memo_embedder(emb: QuestionEmbedder, texts: list[str]) -> QuestionEmbedder:
    """``emb`` with the embeddings of ``texts`` precomputed in one batch (same vectors, less CPU).

    Accuracy runs embed each pair text several times (ragcache, plain cosine, GPTCache); the
    memo keeps them identical across systems and keeps the run short on a shared CPU.
    """
    memo: dict[str, np.ndarray] = {}

    def fn(batch: list[str]) -> np.ndarray:
        if not batch:
            return np.zeros((0, emb.dim), np.float32)
        missing = list(dict.fromkeys(t for t in batch if t not in memo))
        if missing:
            memo.update(zip(missing, emb.encode(missing)))
        return np.stack([memo[t] for t in batch])

    fn(texts)
    window = {"window": emb.window, "count_tokens": emb.count_tokens} if emb.exact_window else {}
    return QuestionEmbedder(fn, name=emb.name, fingerprint=emb.fingerprint, dim=emb.dim, known_words=emb.known_words,
                            **window)


def accuracy(rows: list[dict], emb: QuestionEmbedder) -> dict[str, Any]:
    """ragcache (guards, default threshold and a sweep) and plain cosine on the pairs."""
    guarded = SemanticCache(embedder=emb)
    plain = SemanticCache(embedder=emb, guards=False, typo_correction=False, threshold=-1.0)
    g_hits, sims, details = [], [], []
    sweep: dict[float, list[bool]] = {t: [] for t in GUARDED_THRESHOLDS}
    for i, r in enumerate(rows):
        pk = partition_key(namespace=f"pair-{i}", model=emb.fingerprint)
        guarded.store(r["a"], "A", partition=pk)
        plain.store(r["a"], "A", partition=pk)
        best = guarded.candidates_for(r["b"], partition=pk)[0]  # one entry per partition: the only candidate
        for t in GUARDED_THRESHOLDS:
            sweep[t].append(best.similarity >= t and best.verdict.ok)
        hit = guarded.lookup(r["b"], partition=pk)
        g_hits.append(hit is not None)
        cand = plain.candidates_for(r["b"], partition=pk)
        sims.append(cand[0].similarity)
        best = guarded.candidates_for(r["b"], partition=pk)[0]
        details.append({"kind": r["kind"], "same": r["same"], "cosine": round(sims[-1], 4),
                        "cosine_corrected": round(best.similarity, 4), "guard": best.verdict.reason,
                        "hit": hit is not None})
    out = {"ragcache": {"threshold": guarded.threshold, **_score(rows, g_hits),
                        "rejections": guarded.stats.rejections},
           "plain_cosine": {f"{t:.2f}": _score(rows, [s >= t for s in sims]) for t in THRESHOLDS},
           "ragcache_sweep": {f"{t:.2f}": _score(rows, h) for t, h in sweep.items()},
           "plain_curve": [[round(t, 3), *(_pr(rows, [s >= t for s in sims]))] for t in np.arange(0.30, 1.0, 0.01)],
           "pairs_detail": details}
    return out


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
            "results": {k: _score(rows, v) for k, v in hits.items()}}


_VERBS = ["reset", "configure", "delete", "rename", "export", "import", "back", "up", "restore", "migrate", "enable", "monitor", "upgrade", "share", "archive", "sync"]
_NOUNS = ["password", "account", "invoice", "dashboard", "webhook", "API", "key", "database", "backup", "report", "calendar", "workspace", "billing", "plan", "firewall", "rule", "email", "alias", "storage", "bucket", "user", "role", "SSH", "key", "DNS", "record", "log", "stream"]
_PLACES = ["the admin console", "the mobile app", "the CLI", "the web UI", "Terraform", "the REST API", "Kubernetes", "the desktop client", "a Linux server", "Windows"]
_TAILS = ("", " without downtime", " for a team", " after a failed payment", " on a schedule", " for all projects",
          " in bulk", " from a script", " with read-only access", " for a single user")


def synthetic_questions(n: int, seed: int = 0) -> list[str]:
    """``n`` distinct templated support questions (product names numbered so every text is unique)."""
    rng = random.Random(seed)
    out, seen = [], set()
    while len(out) < n:
        q = (f"How do I {rng.choice(_VERBS)} the {rng.choice(_NOUNS)} in {rng.choice(_PLACES)} "
             f"of product P{rng.randrange(10**7)}{rng.choice(_TAILS)}?")
        if q not in seen:
            seen.add(q)
            out.append(q)
    return out


def latency(n: int, emb: QuestionEmbedder, *, real_embeddings: int = 2000, queries: int = 200,
            seed: int = 0, store_embedder: QuestionEmbedder | None = None) -> dict[str, Any]:
    """Build an ``n``-entry partition and time FAISS search alone and the full lookup.

    ``store_embedder`` (e.g. a :func:`memo_embedder`) embeds the stored questions; queries are
    always embedded by ``emb`` at lookup time, so the lookup timing includes a real embedding.
    """
    rng = np.random.default_rng(seed)
    qs = synthetic_questions(n + queries, seed)
    stored, probes = qs[:n], qs[n:]
    n_real = min(n, real_embeddings)
    t0 = time.perf_counter()
    real = (store_embedder or emb).encode(stored[:n_real])
    embed_s = time.perf_counter() - t0
    vecs = np.empty((n, emb.dim), np.float32)
    vecs[:n_real] = real
    if n > n_real:
        a = real[rng.integers(0, n_real, n - n_real)]
        b = real[rng.integers(0, n_real, n - n_real)]
        mix = a + rng.uniform(0.2, 0.8, (n - n_real, 1)).astype(np.float32) * b
        mix += rng.normal(0, 0.02, mix.shape).astype(np.float32)
        vecs[n_real:] = mix / np.linalg.norm(mix, axis=1, keepdims=True)
    cache = SemanticCache(embedder=emb, max_entries=max(n, 1) + queries)
    pk = partition_key(namespace="scale", model=emb.fingerprint)
    t1 = time.perf_counter()
    cache.store_many([(q, "A") for q in stored], partition=pk, vectors=vecs)
    build_s = time.perf_counter() - t1
    index = cache.answer_store._parts[pk.digest].index
    qv = emb.encode(probes)
    search_ms = []
    for v in qv:
        s = time.perf_counter()
        index.search(v, cache.candidates)
        search_ms.append((time.perf_counter() - s) * 1e3)
    exact = None
    if index.kind == "hnsw":  # recall@1 of HNSW against exact search on the same vectors
        import faiss

        flat = faiss.IndexFlatIP(emb.dim)
        flat.add(vecs)
        _, truth = flat.search(qv, 1)
        got = [index.search(v, 1)[1][:1] for v in qv]
        exact = float(np.mean([len(g) and (g[0] - 1) == t[0] for g, t in zip(got, truth)]))
    lookup_ms, embed_ms = [], []
    for q in probes:
        s = time.perf_counter()
        cache.lookup(q, partition=pk)
        lookup_ms.append((time.perf_counter() - s) * 1e3)
    for q in probes[: min(50, len(probes))]:
        s = time.perf_counter()
        emb.encode([q])
        embed_ms.append((time.perf_counter() - s) * 1e3)

    def pct(xs: list[float]) -> dict[str, float]:
        return {"p50": float(np.percentile(xs, 50)), "p99": float(np.percentile(xs, 99))}

    return {"entries": n, "index": index.kind, "real_embeddings": n_real,
            "embed_stored_s": embed_s, "insert_s": build_s, "hnsw_recall_at_1": exact,
            "search_ms": pct(search_ms), "lookup_ms": pct(lookup_ms), "embed_one_ms": pct(embed_ms),
            "queries": len(probes)}


def _table(title: str, columns: list[str], rows: list[list[str]]) -> None:
    from rich.console import Console
    from rich.table import Table

    t = Table(title=title)
    for c in columns:
        t.add_column(c)
    for r in rows:
        t.add_row(*r)
    Console(width=max(120, shutil.get_terminal_size().columns)).print(t)


def _fmt(x: float | None) -> str:
    return "-" if x is None else f"{x:.3f}"


def main(pairs: str = "../shared/data/semantic_pairs_dev.jsonl", json_path: str = "bench/results/semantic.json",
         scale: list[int] = [10000, 100000], *, embedder: Any = None, gptcache: bool = True,  # noqa: B006
         queries: int = 200, plot_path: str | None = None) -> dict:
    """Run the benchmark, print rich tables, write JSON to ``json_path`` and a precision / recall
    PNG to ``plot_path`` (default: ``json_path`` with ``.png``). Returns the result dict."""
    rows = _load_pairs(pairs)
    import torch

    # One intra-op thread: on a shared 2-core CPU, two torch threads made one MiniLM encode ~8x slower
    # (p50 530 ms vs 56 ms at load average 10). Reported in the JSON.
    torch.set_num_threads(1)
    emb = resolve_embedder(embedder)
    result: dict[str, Any] = {
        "machine": _machine(),
        "pairs": {"path": str(pairs), "n": len(rows),
                  "sha256": hashlib.sha256(Path(pairs).read_bytes()).hexdigest()},
        "embedder": emb.name,
        "default_threshold": DEFAULT_THRESHOLD,
    }
    memo = memo_embedder(emb, [embed_form(normalize_question(t)) for r in rows for t in (r["a"], r["b"])])
    result.update(accuracy(rows, memo))
    if gptcache:
        result["gptcache"] = gptcache_accuracy(rows, memo)
    mixed = _mixed_kinds(rows)
    label = {_kind(r, mixed): bool(r["same"]) for r in rows}
    kinds = sorted(label, key=lambda k: (not label[k], k))
    systems: list[tuple[str, dict]] = [(f"cosine >= {t}", result["plain_cosine"][t]) for t in result["plain_cosine"]]
    for name, res in result.get("gptcache", {}).get("results", {}).items():
        systems.append((f"GPTCache {name}", res))
    for t, res in result["ragcache_sweep"].items():
        systems.append((f"ragcache guarded (cos >= {t}){' default' if float(t) == DEFAULT_THRESHOLD else ''}", res))
    _table(f"semantic cache on {Path(pairs).name} ({len(rows)} pairs)", ["system", "precision", "recall", "false hits"],
           [[name, _fmt(res["precision"]), _fmt(res["recall"]), str(res["false_hits"])] for name, res in systems])
    shown = [s for s in systems if s[0].startswith(("cosine >= 0.90", "GPTCache s=0.800", "ragcache guarded (cos >= 0.7)"))
             or s[0].endswith("default")]
    _table("hits by kind (recall for same-answer kinds, false hits for the others)",
           ["kind", "same"] + [name for name, _ in shown],
           [[k, str(label[k])]
            + [f"{res['by_kind'][k]['hits']}/{res['by_kind'][k]['n']}" for _, res in shown] for k in kinds])
    result["latency"] = {}
    store_memo = memo_embedder(emb, [])
    for n in scale:
        result["latency"][str(n)] = latency(n, emb, queries=queries, store_embedder=store_memo)
        result["machine"]["loadavg_1m_after"] = os.getloadavg()[0]
    import faiss

    result["machine"]["faiss_threads"] = faiss.omp_get_max_threads()
    if scale:
        _table("lookup latency (ms)", ["entries", "index", "search p50", "search p99", "embed+search p50",
                                       "embed+search p99", "HNSW recall@1"],
               [[str(v["entries"]), v["index"], f"{v['search_ms']['p50']:.3f}", f"{v['search_ms']['p99']:.3f}",
                 f"{v['lookup_ms']['p50']:.2f}", f"{v['lookup_ms']['p99']:.2f}", _fmt(v["hnsw_recall_at_1"])]
                for v in result["latency"].values()])
    out = Path(json_path)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_suffix(out.suffix + ".tmp")
    tmp.write_text(json.dumps(result, indent=2, default=float))
    os.replace(tmp, out)
    png = plot_path or str(out.with_suffix(".png"))
    print(f"wrote {out}")
    if draw(lambda: plot(result, png), png):
        print(f"drew {png}")
    return result


if __name__ == "__main__":
    args = sys.argv[1:]
    main(args[0] if args else "../shared/data/semantic_pairs_dev.jsonl",
         args[1] if len(args) > 1 else "bench/results/semantic.json",
         [int(x) for x in args[2].split(",")] if len(args) > 2 else [10000, 100000])
