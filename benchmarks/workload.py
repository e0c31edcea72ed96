"""``ragcache bench workload``: where chunk KV reuse pays, on streams of RAG requests (issue 48).

Every request is a RAG prompt over the demo's corpus (the Python standard library's docstrings,
:func:`ragcache.app.corpus.stdlib_chunks`), its documents retrieved by the demo's retriever (FAISS over
the packaged embedder, top-k from ``RAGCACHE_TOP_K``), under the demo's system text, answered by the
local engine. Three document-reuse regimes, each a stream of ``requests`` requests:

- ``novel``: no document repeats. Each question asks about a passage not used yet; its top-k are the
  retriever's best passages among those no earlier request used (the regime where LMCache #4663 saw
  chunk reuse decay to about 1x).
- ``zipf``: skewed popularity, as real question streams have: ``topics`` questions, the i-th most
  popular asked with probability proportional to ``1 / i ** zipf_s``, each time in another wording;
  documents come back when topics (or neighbouring ones) do.
- ``demo``: the demo's scripted session (:data:`ragcache.app.demo.DEMO_SESSION`) asked again and
  again, as users running the demo one after another (follow-ups carry their own session's history).

Each stream runs on a fresh engine (the model is loaded once) at each configuration:

- ``defaults``: prefix cache and chunk cache at the engine's defaults (chunk KV computed at a
  document's second miss, ``chunk_admission=2``, in the background queue);
- ``every_miss``: the chunk cache as before issue 48 (every missed document's chunk KV computed after
  its answer on the request's thread: ``chunk_admission=1, chunk_queue=0``);
- ``prefix_only``: chunk cache off, exact prefix cache on (the baseline the targets compare with);
- ``no_cache`` (only when asked for, ``--configs``): neither cache.

The configurations run interleaved (:func:`run_streams`): ``segment`` requests (default 10) on one
configuration's engine, then the same requests on the next, the order turned round every segment, so
they share the machine's load as it drifts. Run one after another they did not: the first full run
(configurations in turn, 45 minutes, load 0.7 rising to 2) measured the defaults at 1.14x the CPU
seconds of ``prefix_only`` on novel documents with the same wall-clock time (362.8 s against 363.3 s of
end-to-end latency), and a run of 8 novel requests interleaved per request measured 0.996x.

Blending follows the model's calibration record, as at the defaults of every entry point. The
admitted chunks still queued when a segment ends are computed (drained) and their CPU counted
(``drain_cpu_s``); the documents seen once are not.

Reported per regime and configuration: total CPU seconds of the process while that configuration ran
(every thread: requests and the chunk queue), the load average at its segments' starts and its CPU
seconds per wall-clock second (below 1: the process waited for a core), p50 / p95 TTFT and end-to-end latency (wall seconds), the share of prompt tokens
whose prefill was reused (prefix and chunk), chunks stored, and chunks ever read again (stored, then
hit by a later request). The plot shows each request's CPU cost (the process's CPU seconds from its
start to the next request's start, so background chunk work lands on the request it delays) against
its position in the stream.

Run: ``ragcache bench workload`` (all of it; see ``--help``), or ``--limit 3 --model PATH`` for a smoke
run on a small model.
"""

from __future__ import annotations

import os
import platform
import random
import re
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
from rich.console import Console
from rich.table import Table

from benchmarks.plotting import draw
from ragcache.atomic import atomic_write_json
from ragcache.engine.chunk import ChunkCache, MemoryChunkStore
from ragcache.prompt.layout import PromptLayout

REGIMES = ("novel", "zipf", "demo")
CONFIGS = ("defaults", "every_miss", "prefix_only", "no_cache")
DEFAULT_CONFIGS = ("defaults", "every_miss", "prefix_only")
TEMPLATES = ("How do I use {n}?", "What does {n} do?", "Show me an example of {n}.", "When should I use {n}?",
             "What arguments does {n} take?", "Explain {n} briefly.")


class CountingStore(MemoryChunkStore):
    """A :class:`MemoryChunkStore` that remembers which chunks were stored and which were read (hit)."""

    def __init__(self) -> None:
        super().__init__(max_bytes=None)
        self.stored: set[str] = set()
        self.read: set[str] = set()

    def get(self, key, *, fingerprint=None):  # type: ignore[override]
        kv = super().get(key, fingerprint=fingerprint)
        if kv is not None:
            self.read.add(key)
        return kv

    def put(self, kv) -> bool:  # type: ignore[override]
        self.stored.add(kv.key)
        return super().put(kv)


@dataclass(slots=True)
class Request:
    """One request of a stream: its question, retrieved documents and (demo follow-ups) the turn it follows."""

    question: str
    docs: list[dict]
    follow_up_of: int | None = None


def topic_name(text: str) -> str:
    """What a passage is about, from its first line: ``heapq.merge``, ``the argparse module``."""
    first = text.strip().splitlines()[0] if text.strip() else "this passage"
    m = re.match(r"Module ([\w.]+)", first)
    if m:
        return f"the {m.group(1).rstrip('.')} module"
    name = re.split(r"[(\s]", first, maxsplit=1)[0].strip(".:,")
    return name if re.match(r"^[A-Za-z_][\w.]*$", name) and len(name) > 2 else " ".join(first.split()[:6])


def novel_stream(chunks: Sequence[Any], retriever: Any, n: int, k: int, seed: int) -> list[Request]:
    """``n`` requests whose documents never repeat: a question about an unused passage, its top-``k``
    among the passages no earlier request used."""
    rng = random.Random(seed)
    order = list(range(len(chunks)))
    rng.shuffle(order)
    used: set[str] = set()
    out: list[Request] = []
    for i in order:
        if len(out) == n:
            break
        if chunks[i].id in used:
            continue
        q = rng.choice(TEMPLATES).format(n=topic_name(chunks[i].text))
        hits = [r.chunk for r in retriever.search(q, k=len(chunks)) if r.chunk.id not in used][:k]  # ranked, unused
        if len(hits) < k:
            continue
        used.update(c.id for c in hits)
        out.append(Request(q, [{"id": c.id, "text": c.text} for c in hits]))
    if len(out) < n:
        raise ValueError(f"the corpus gives only {len(out)} requests without a repeated document at top-k {k}; "
                         f"ask for fewer (--requests) or a smaller top-k")
    return out


def zipf_stream(chunks: Sequence[Any], retriever: Any, n: int, k: int, seed: int, topics: int,
                s: float) -> list[Request]:
    """``n`` requests over ``topics`` topics of Zipf(``s``) popularity, each asked in a rotating wording."""
    rng = random.Random(seed + 1)
    pool = rng.sample(range(len(chunks)), min(topics, len(chunks)))
    weights = [1.0 / (i + 1) ** s for i in range(len(pool))]
    out: list[Request] = []
    asked: dict[int, int] = {}
    for _ in range(n):
        t = rng.choices(range(len(pool)), weights)[0]
        asked[t] = asked.get(t, 0) + 1
        q = TEMPLATES[(asked[t] - 1) % len(TEMPLATES)].format(n=topic_name(chunks[pool[t]].text))
        out.append(Request(q, [{"id": r.chunk.id, "text": r.chunk.text} for r in retriever.search(q, k=k)]))
    return out


def demo_stream(retriever: Any, n: int, k: int) -> list[Request]:
    """The demo's session again and again (``n`` requests); a follow-up takes its turn's documents."""
    from ragcache.app.demo import DEMO_SESSION

    out: list[Request] = []
    while len(out) < n:
        base = len(out)
        for turn in DEMO_SESSION:
            if len(out) == n:
                break
            if turn.follow_up_of is not None:
                out.append(Request(turn.question, out[base + turn.follow_up_of].docs, base + turn.follow_up_of))
            else:
                out.append(Request(turn.question, [{"id": r.chunk.id, "text": r.chunk.text}
                                                   for r in retriever.search(turn.question, k=k)]))
    return out


def _pct(xs: Sequence[float], q: float) -> float:
    if not xs:
        return 0.0
    s = sorted(xs)
    return s[min(len(s) - 1, max(0, round(q * (len(s) - 1))))]


class StreamRun:
    """One configuration's engine answering a stream, a segment of requests at a time (:func:`run_streams`)."""

    def __init__(self, loaded: Any, config: str, stream: Sequence[Request], *, system: str, max_new_tokens: int,
                 home: Any) -> None:
        from ragcache.engine.engine import LocalEngine

        self.config, self.stream, self.system, self.max_new_tokens = config, stream, system, max_new_tokens
        self.store = CountingStore()
        kw: dict[str, Any] = {"home": home}
        if config == "every_miss":
            kw.update(chunk_admission=1, chunk_queue=0)
        self.chunked = config in ("defaults", "every_miss")
        self.engine = LocalEngine(loaded, chunk_cache=ChunkCache(self.store) if self.chunked else None, **kw)
        self.use_prefix = config != "no_cache"
        self.rows: list[dict[str, Any]] = []
        self.answers: dict[int, str] = {}
        self.drain_cpu = 0.0
        self.drained = True
        self.loads: list[float] = []

    def run(self, start: int, end: int) -> None:
        """Answer requests ``start .. end - 1`` back to back, then wait for the chunk queue's admitted work (its
        CPU counted as drain). A request's CPU runs from its start to the next one's (background chunk work
        included); the last of the segment's to the segment's end."""
        self.loads.append(os.getloadavg()[0])
        first = len(self.rows)
        for i in range(start, end):
            req = self.stream[i]
            history: list[dict] = []
            if req.follow_up_of is not None:
                history = [{"role": "user", "content": self.stream[req.follow_up_of].question},
                           {"role": "assistant", "content": self.answers[req.follow_up_of]}]
            layout = PromptLayout.build(question=req.question, system=self.system, documents=req.docs,
                                        history=history, lint="off")
            c, t = time.process_time(), time.perf_counter()
            gen = self.engine.generate(layout, max_new_tokens=self.max_new_tokens, use_prefix_cache=self.use_prefix)
            wall = time.perf_counter() - t
            self.answers[i] = gen.text
            st = gen.stats
            self.rows.append({"cpu_start": c, "e2e_s": wall, "ttft_s": st.ttft_s, "prompt_tokens": st.prompt_tokens,
                              "prefill_tokens_reused": st.prefill_tokens_reused,
                              "prefix_tokens_reused": st.prefix_tokens_reused,
                              "chunk_tokens_reused": st.chunk_tokens_reused, "docs_hit": st.docs_hit,
                              "docs_missed": st.docs_missed, "approximate": st.approximate,
                              "chunk_store_s": st.chunk_store_s})
        end_cpu = time.process_time()
        seg = self.rows[first:]
        for j, r in enumerate(seg):
            r["cpu_s"] = (seg[j + 1]["cpu_start"] if j + 1 < len(seg) else end_cpu) - r["cpu_start"]
        if self.chunked:
            c = time.process_time()
            self.drained = self.engine.drain_chunk_queue(3600) and self.drained
            self.drain_cpu += time.process_time() - c

    def result(self) -> dict[str, Any]:
        """The configuration's totals and rows (``cpu_start``: seconds of this configuration's CPU before the request)."""
        rows, store = self.rows, self.store
        acc = 0.0
        for r in rows:
            r["cpu_start"], acc = acc, acc + r["cpu_s"]
        stream_cpu = acc
        prompt = sum(r["prompt_tokens"] for r in rows)
        return {
            "config": self.config, "requests": len(rows), "stream_cpu_s": stream_cpu, "drain_cpu_s": self.drain_cpu,
            "total_cpu_s": stream_cpu + self.drain_cpu, "drained": self.drained,
            "load_average": sum(self.loads) / len(self.loads) if self.loads else None,
            "cpu_per_wall": stream_cpu / s if (s := sum(r["e2e_s"] for r in rows)) else None,
            "ttft_p50_s": _pct([r["ttft_s"] for r in rows], 0.5), "ttft_p95_s": _pct([r["ttft_s"] for r in rows], 0.95),
            "e2e_p50_s": _pct([r["e2e_s"] for r in rows], 0.5), "e2e_p95_s": _pct([r["e2e_s"] for r in rows], 0.95),
            "prefill_reused_share": sum(r["prefill_tokens_reused"] for r in rows) / prompt if prompt else 0.0,
            "chunk_reused_share": sum(r["chunk_tokens_reused"] for r in rows) / prompt if prompt else 0.0,
            "docs_hit": sum(r["docs_hit"] for r in rows), "docs_missed": sum(r["docs_missed"] for r in rows),
            "blended_requests": sum(r["approximate"] for r in rows),
            "chunks_stored": len(store.stored), "chunks_read_again": len(store.stored & store.read),
            "chunk_queue": self.engine.chunk_queue_stats.to_dict() if self.chunked else None,
            "blend_setting": self.engine.blend_setting_name(),
            "rows": rows,
        }


def run_streams(loaded: Any, configs: Sequence[str], stream: Sequence[Request], *, system: str, max_new_tokens: int,
                home: Any, segment: int = 10) -> dict[str, dict[str, Any]]:
    """Answer ``stream`` at every configuration, each on its own fresh engine, interleaved: ``segment`` requests
    on one configuration, then the same requests on the next, in an order that turns round every segment
    (A B C, C B A, ...). Each engine answers its requests back to back and keeps its caches from segment to
    segment; the configurations share the machine's load as it drifts, so their CPU seconds compare (run one
    after another over 45 minutes they did not: a run at load 0.7 and one at load 2 differed by 14% in CPU
    seconds with the same wall-clock time). After each segment an engine's admitted chunks are computed
    (``drain_cpu_s``) before the next configuration runs, so no engine's background work lands on another's."""
    runs = [StreamRun(loaded, c, stream, system=system, max_new_tokens=max_new_tokens, home=home) for c in configs]
    for k, start in enumerate(range(0, len(stream), segment)):
        for run in (runs if k % 2 == 0 else runs[::-1]):
            run.run(start, min(start + segment, len(stream)))
    return {run.config: run.result() for run in runs}


def run_stream(loaded: Any, config: str, stream: Sequence[Request], *, system: str, max_new_tokens: int,
               home: Any) -> dict[str, Any]:
    """Answer ``stream`` on a fresh engine at ``config``, back to back; per-request and total measurements."""
    return run_streams(loaded, [config], stream, system=system, max_new_tokens=max_new_tokens, home=home,
                       segment=max(1, len(stream)))[config]


def machine() -> str:
    return (f"{platform.machine()} CPU, {os.cpu_count()} cores, {platform.system()}, torch {torch.__version__} "
            f"({torch.get_num_threads()} threads), load average {os.getloadavg()[0]:.1f} at start")


def main(json_path: str | None = "bench/results/workload.json", plot_path: str | None = "bench/results/workload.png",
         requests: int = 60, regimes: Sequence[str] = REGIMES, configs: Sequence[str] = DEFAULT_CONFIGS,
         max_new_tokens: int = 16, threads: int = 1, topics: int = 24, zipf_s: float = 1.1, seed: int = 0,
         limit: int | None = None, model: str | None = None, segment: int = 10,
         console: Console | None = None) -> dict[str, Any]:
    """Run every regime at every configuration; print the table, write JSON, draw the plot.

    Args:
        requests: requests per stream (>= 60 for a result; ``limit`` cuts it for a smoke run).
        threads: torch CPU threads (1: the issue's measurements).
        topics / zipf_s: the ``zipf`` regime's topic count and exponent.
        limit: requests per stream for a smoke run (overrides ``requests``).
        model: LLM folder or cached id (default ``RAGCACHE_MODEL``, the embedded SmolLM2-135M-Instruct).
        segment: requests a configuration answers before the next one takes the same requests
            (:func:`run_streams`).

    Raises:
        ValueError: an unknown regime or configuration, fewer than 1 request or a segment < 1.
    """
    from ragcache.app.corpus import stdlib_chunks, stdlib_corpus_id
    from ragcache.app.demo import DEMO_SYSTEM, build_retriever
    from ragcache.app.runtime import query_embedder
    from ragcache.config import Config
    from ragcache.models import load_model

    bad = [r for r in regimes if r not in REGIMES] + [c for c in configs if c not in CONFIGS]
    if bad:
        raise ValueError(f"unknown regime or configuration {bad}: regimes are {REGIMES}, configurations {CONFIGS}")
    n = limit if limit is not None else requests
    if n < 1:
        raise ValueError(f"requests must be >= 1, got {n}")
    if segment < 1:
        raise ValueError(f"segment must be >= 1 request, got {segment}")
    console = console or Console()
    torch.set_num_threads(threads)
    cfg = Config.from_env()
    emb = query_embedder(cfg)
    chunks = stdlib_chunks()
    retriever = build_retriever(chunks, cfg, emb, f"{stdlib_corpus_id()}-{emb.fingerprint[:8]}")
    k = cfg.top_k
    streams = {"novel": lambda: novel_stream(chunks, retriever, n, k, seed),
               "zipf": lambda: zipf_stream(chunks, retriever, n, k, seed, topics, zipf_s),
               "demo": lambda: demo_stream(retriever, n, k)}
    loaded = load_model(model if model is not None else cfg.model, allow_downloads=cfg.allow_downloads, home=cfg.paths)
    mach, t0 = machine(), time.perf_counter()
    results: dict[str, dict[str, Any]] = {}
    for regime in regimes:
        stream = streams[regime]()
        results[regime] = {"distinct_docs": len({d["id"] for r in stream for d in r.docs}),
                           "doc_slots": sum(len(r.docs) for r in stream), "configs": {}}
        runs = run_streams(loaded, configs, stream, system=DEMO_SYSTEM, max_new_tokens=max_new_tokens,
                           home=cfg.paths, segment=segment)
        for config, res in runs.items():
            results[regime]["configs"][config] = res
            console.print(f"{regime:>6} {config:>12}: {res['total_cpu_s']:.1f} s CPU, p95 e2e {res['e2e_p95_s']:.2f} s, "
                          f"reused {res['prefill_reused_share']:.0%}, stored {res['chunks_stored']}, "
                          f"read again {res['chunks_read_again']}")
    command = (f"ragcache bench workload --requests {n} --regimes {','.join(regimes)} --configs {','.join(configs)} "
               f"--max-new-tokens {max_new_tokens} --threads {threads} --topics {topics} --zipf-s {zipf_s} --seed {seed} "
               f"--segment {segment}"
               + (f" --model {model}" if model else ""))
    out = {"benchmark": "workload", "command": command, "machine": mach, "load_average_end": os.getloadavg()[0],
           "model": str(loaded.fingerprint), "requests": n, "top_k": k, "max_new_tokens": max_new_tokens,
           "threads": threads, "zipf": {"topics": topics, "s": zipf_s}, "seed": seed, "segment": segment,
           "wall_s": time.perf_counter() - t0, "regimes": results}
    out["targets"] = targets(out)
    _table(console, out)
    if json_path:
        atomic_write_json(json_path, out)
    draw(lambda: _plot(plot_path, out), plot_path)
    return out


def targets(result: dict[str, Any]) -> dict[str, Any]:
    """Issue 48's targets, where the stream has the configurations they compare: ``novel``: defaults' total
    CPU and p95 end-to-end latency within 1.05x of ``prefix_only``; ``zipf``: defaults at least 1.5x cheaper
    (total CPU) than ``prefix_only``."""
    out: dict[str, Any] = {}
    for regime, key in (("novel", "novel_within_1_05x"), ("zipf", "zipf_1_5x_cheaper")):
        cs = result["regimes"].get(regime, {}).get("configs", {})
        if "defaults" not in cs or "prefix_only" not in cs:
            continue
        d, p = cs["defaults"], cs["prefix_only"]
        cpu = d["total_cpu_s"] / p["total_cpu_s"] if p["total_cpu_s"] else float("nan")
        e2e = d["e2e_p95_s"] / p["e2e_p95_s"] if p["e2e_p95_s"] else float("nan")
        out[key] = ({"cpu_ratio": cpu, "e2e_p95_ratio": e2e, "met": cpu <= 1.05 and e2e <= 1.05} if regime == "novel"
                    else {"cpu_speedup": 1 / cpu if cpu else float("nan"), "met": cpu <= 1 / 1.5})
    return out


def _table(console: Console, result: dict[str, Any]) -> None:
    t = Table(title=f"workload: {result['requests']} requests per stream, top-{result['top_k']} ({result['machine']})")
    for c in ("regime", "config", "CPU s", "TTFT p50/p95 s", "e2e p50/p95 s", "prefill reused", "chunks stored",
              "read again"):
        t.add_column(c, justify="right")
    for regime, r in result["regimes"].items():
        for config, m in r["configs"].items():
            t.add_row(regime, config, f"{m['total_cpu_s']:.1f}", f"{m['ttft_p50_s']:.2f}/{m['ttft_p95_s']:.2f}",
                      f"{m['e2e_p50_s']:.2f}/{m['e2e_p95_s']:.2f}", f"{m['prefill_reused_share']:.0%}",
                      str(m["chunks_stored"]), str(m["chunks_read_again"]))
    console.print(t)
    for key, v in result["targets"].items():
        console.print(f"target {key}: {v}")


def _plot(path: str, result: dict[str, Any]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from benchmarks.plotting import save_figure

    regimes = list(result["regimes"])
    fig, axes = plt.subplots(1, len(regimes), figsize=(5.5 * len(regimes), 4.2), squeeze=False)
    for ax, regime in zip(axes[0], regimes):
        for config, m in result["regimes"][regime]["configs"].items():
            xs = range(1, len(m["rows"]) + 1)
            ax.plot(xs, [r["cpu_s"] for r in m["rows"]], lw=1, label=f"{config} ({m['total_cpu_s']:.0f} s)")
        ax.set_title(f"{regime}")
        ax.set_xlabel("request position in the stream")
        ax.set_ylabel(f"CPU seconds per request ({result['threads']} thread(s))")
        ax.legend(fontsize=8)
    fig.suptitle(f"{result['model']}: {result['machine']}", fontsize=7)
    save_figure(fig, path)

