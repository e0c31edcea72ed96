"""Stream benchmark of the semantic cache's hit decision: QQP duplicate clusters, random order, repeats.

Clusters are the connected components of the duplicate links (``same: true``) of a QQP pairs file
(default ``../shared/data/qqp_dev_20k.jsonl``); each cluster's "answer" is its id, so the oracle
equivalence is cluster-id equality. The stream: ``rows`` pairs drawn at random (seed ``seed``), the
whole cluster of both their questions (so the near-topic non-duplicate partner is in the stream
too), every question once in a random order, and before each one, with probability ``repeat`` per
draw, a verbatim repeat of a question already seen. Each question is looked up; on a miss its
"answer" (cluster id) is stored. Every method runs the same stream over its own fresh cache, back
to back, with the same precomputed embeddings (embedded once). The pairs are drawn from one half
of the file: ``half="first"`` for tuning, ``"second"`` (the default) for reporting; the clusters
and labels come from the whole file.

Reported per method: hits, the error among hits (hits whose cluster differs from the question's),
split into *labelled* wrong hits (the two clusters have a pair labelled not-duplicate between
them: surely wrong) and *unlabelled* ones (no label links the clusters: possibly label noise,
reported in their own column); the recall against the questions that could have hit (their
cluster was seen before), overall and for paraphrases alone (verbatim repeats excluded); and
explorations (``max_error`` only). Methods: ragcache with guards at static thresholds, ragcache
with ``max_error`` (0.01 / 0.02 / 0.05), GPTCache 0.1.x at its default setting with the same
embedder, and a "verifier" decider when one is importable (``ragcache.semantic.decision.verifier``).

The project's own labelled rows of the near-miss kinds (:data:`benchmarks.semantic.OWN_KINDS`:
bounds, complements, relative times, the same words in another case or with another symbol, and
paraphrases beside them) are inserted into the stream, each ``b`` after its ``a``; their labels join
the clusters, so a near miss served counts as a labelled wrong hit.

Run: ``ragcache bench semantic --stream`` or ``python -m benchmarks.semantic_stream``.
"""

from __future__ import annotations

import atexit
import hashlib
import importlib
import json
import os
import random
import shutil
import tempfile
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

from benchmarks.plotting import draw, save_figure
from benchmarks.semantic import OWN_KINDS, fmt, machine_info, memo_embedder, print_table
from ragcache.semantic import SemanticCache
from ragcache.semantic.embedding import QuestionEmbedder, resolve_embedder
from ragcache.semantic.text import embed_form, normalize_question

STATIC = (0.80, 0.85, 0.88, 0.90, 0.92, 0.94, 0.96, 0.98, 0.99)
BOUNDS = (0.01, 0.02, 0.05)
GPTCACHE_MAX_SIZE = 100_000


def clusters(rows: list[dict]) -> tuple[dict[str, int], set[frozenset[int]]]:
    """``(cluster id of each question, cluster pairs linked by a not-duplicate label)``: connected
    components of the ``same`` links (union-find), ids numbered in order of first appearance."""
    parent: dict[str, str] = {}

    def find(x: str) -> str:
        parent.setdefault(x, x)
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    for r in rows:
        a, b = find(r["a"]), find(r["b"])
        if r["same"] and a != b:
            parent[a] = b
    ids: dict[str, int] = {}
    cid = {q: ids.setdefault(find(q), len(ids)) for q in parent}
    linked = {frozenset((cid[r["a"]], cid[r["b"]])) for r in rows if not r["same"]}
    return cid, linked


def add_kind_rows(stream: list[str], kinds: list[dict], seed: int) -> list[str]:
    """``stream`` with the two questions of each labelled kind row inserted (``a`` at a random place,
    ``b`` later), so each ``b`` is looked up after its ``a`` was seen: a near miss served is a labelled
    wrong hit, a paraphrase served a true one."""
    rng = random.Random(f"{seed}:kinds")
    out = list(stream)
    for r in kinds:
        i = rng.randrange(len(out) + 1)
        out.insert(i, r["a"])
        out.insert(rng.randrange(i + 1, len(out) + 1), r["b"])
    return out


def build_stream(rows: list[dict], cid: dict[str, int], n_rows: int, repeat: float, seed: int) -> list[str]:
    """The question stream (see the module doc): the clusters of ``n_rows`` random pairs, shuffled,
    with verbatim repeats (geometric, ``repeat`` per draw) of questions already seen."""
    rng = random.Random(seed)
    members: dict[int, list[str]] = defaultdict(list)
    for q, c in cid.items():
        members[c].append(q)
    picked = rng.sample(rows, min(n_rows, len(rows)))
    chosen = list(dict.fromkeys(cid[q] for r in picked for q in (r["a"], r["b"])))
    items = [q for c in chosen for q in members[c]]
    rng.shuffle(items)
    stream: list[str] = []
    for i, q in enumerate(items):
        while i and rng.random() < repeat:
            stream.append(items[rng.randrange(i)])
        stream.append(q)
    return stream


class Tally:
    """Counts of one method over the stream (see the module doc for the columns)."""

    def __init__(self, cid: dict[str, int], linked: set[frozenset[int]]) -> None:
        self.cid, self.linked = cid, linked
        self.seen_c: set[int] = set()
        self.seen_q: set[str] = set()
        self.n = self.hittable = self.para_hittable = self.hits = self.para_hits = 0
        self.wrong_labelled = self.wrong_unlabelled = 0

    def ask(self, q: str) -> None:
        c = self.cid[q]
        self.n += 1
        can, repeat = c in self.seen_c, q in self.seen_q
        self.hittable += can
        self.para_hittable += can and not repeat
        self._repeat = repeat
        self.seen_c.add(c)
        self.seen_q.add(q)

    def hit(self, q: str, answer: str) -> None:
        self.hits += 1
        c, got = self.cid[q], int(answer)
        if got == c:
            self.para_hits += not self._repeat
        elif frozenset((c, got)) in self.linked:
            self.wrong_labelled += 1
        else:
            self.wrong_unlabelled += 1

    def result(self, seconds: float, **extra: Any) -> dict[str, Any]:
        wrong = self.wrong_labelled + self.wrong_unlabelled
        return {"lookups": self.n, "hittable": self.hittable, "hits": self.hits, "wrong_hits": wrong,
                "wrong_labelled": self.wrong_labelled, "wrong_unlabelled": self.wrong_unlabelled,
                "error": wrong / self.hits if self.hits else None,
                "error_labelled": self.wrong_labelled / self.hits if self.hits else None,
                "error_per_lookup": wrong / self.n if self.n else None,
                "hit_rate": self.hits / self.n if self.n else None,
                "recall": (self.hits - wrong) / self.hittable if self.hittable else None,
                "paraphrase_hittable": self.para_hittable, "paraphrase_hits": self.para_hits,
                "paraphrase_recall": self.para_hits / self.para_hittable if self.para_hittable else None,
                "seconds": seconds, **extra}


def run_cache(cache: Any, stream: list[str], cid: dict[str, int], linked: set[frozenset[int]]) -> dict[str, Any]:
    """Look each question up; on a miss store its cluster id (the fresh "answer")."""
    tally = Tally(cid, linked)
    t0 = time.perf_counter()
    for q in stream:
        tally.ask(q)
        hit = cache.lookup(q)
        if hit is not None:
            tally.hit(q, hit.answer)
        else:
            cache.store(q, str(cid[q]))
    st = cache.stats
    return tally.result(time.perf_counter() - t0, explorations=st.explorations,
                        outcomes_correct=st.outcomes_correct, outcomes_wrong=st.outcomes_wrong)


def run_gptcache(stream: list[str], cid: dict[str, int], linked: set[frozenset[int]],
                 emb: QuestionEmbedder) -> dict[str, Any]:
    """GPTCache 0.1.x at its default ``similarity_threshold=0.8`` (cosine >= 0.6 over its L2 FAISS),
    same embedder, FAISS and SQLite, driven as :func:`benchmarks.semantic.gptcache_accuracy` does."""
    try:
        import gptcache
        from gptcache import Cache, Config
        from gptcache.adapter.api import get, put
        from gptcache.manager import CacheBase, VectorBase, get_data_manager
        from gptcache.processor.pre import get_prompt
        from gptcache.similarity_evaluation.distance import SearchDistanceEvaluation
    except ImportError as e:
        return {"error": f"gptcache not importable ({e}); pip install gptcache"}
    root = Path(tempfile.mkdtemp(prefix="gptcache-stream-"))
    atexit.register(shutil.rmtree, root, True)
    c = Cache()
    # max_size: GPTCache's default is 1,000 entries with LRU eviction; with it, our first run's process
    # died without a traceback after 874 entries. 100,000 is ragcache's default capacity.
    dm = get_data_manager(CacheBase("sqlite", sql_url=f"sqlite:///{root}/sqlite.db"),
                          VectorBase("faiss", dimension=emb.dim, index_path=str(root / "faiss.index")),
                          max_size=GPTCACHE_MAX_SIZE)
    c.init(pre_embedding_func=get_prompt,
           embedding_func=lambda x, **_: emb.encode([embed_form(normalize_question(x))])[0],
           data_manager=dm, similarity_evaluation=SearchDistanceEvaluation(), config=Config(similarity_threshold=0.8))
    tally = Tally(cid, linked)
    t0 = time.perf_counter()
    for q in stream:
        tally.ask(q)
        got = get(q, cache_obj=c)
        if got is not None:
            tally.hit(q, got)
        else:
            put(q, str(cid[q]), cache_obj=c)
    return tally.result(time.perf_counter() - t0, version=gptcache.__version__,
                        config="Cache(get_prompt, same MiniLM, sqlite, faiss, SearchDistanceEvaluation, "
                               f"similarity_threshold=0.8 default), max_size={GPTCACHE_MAX_SIZE}")


def verifier_decider() -> tuple[Any | None, str]:
    """A decider named "verifier" (``ragcache.semantic.decision.verifier``: ``default_decider()``,
    ``load_default()`` or ``Verifier.default()``), or ``None`` with the reason it is skipped."""
    try:
        mod = importlib.import_module("ragcache.semantic.decision.verifier")
    except ImportError as e:
        return None, f"skipped: no verifier decider in this build ({e})"
    for name in ("default_decider", "load_default"):
        fn = getattr(mod, name, None)
        if callable(fn):
            return fn(), f"ragcache.semantic.decision.verifier.{name}()"
    cls = getattr(mod, "Verifier", None)
    if cls is not None and callable(getattr(cls, "default", None)):
        return cls.default(), "ragcache.semantic.decision.verifier.Verifier.default()"
    return None, "skipped: ragcache.semantic.decision.verifier has no default_decider / load_default / Verifier.default"


def matched_static(result: dict[str, Any], bound_key: str) -> dict[str, Any] | None:
    """The static threshold with the most hits whose observed error is at most the bound run's,
    and the ratio of hits (bound / static); ``None`` when no static threshold is that accurate."""
    b = result["methods"][bound_key]
    if b["error"] is None:
        return None
    best = None
    for k, v in result["methods"].items():
        if k.startswith("static") and v["error"] is not None and v["error"] <= b["error"] + 1e-12:
            if best is None or v["hits"] > result["methods"][best]["hits"]:
                best = k
    if best is None:
        return None
    s = result["methods"][best]
    return {"static": best, "static_error": s["error"], "static_hits": s["hits"],
            "hit_ratio": b["hits"] / s["hits"] if s["hits"] else None,
            "paraphrase_hit_ratio": b["paraphrase_hits"] / s["paraphrase_hits"] if s["paraphrase_hits"] else None}


def plot(result: dict[str, Any], path: str) -> None:
    """Error among hits against recall (of hittable questions) for every method."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 5))
    for name, m in result["methods"].items():
        if m.get("error") is None:
            continue
        style = "o" if name.startswith("static") else ("s" if name.startswith("max_error") else "x")
        ax.plot(m["recall"], m["error"], style, label=name)
    for b in BOUNDS:
        ax.axhline(b, color="grey", lw=0.5, ls=":")
    ax.set_xlabel("recall (correct hits / questions that could hit)")
    ax.set_ylabel("error among hits")
    ax.set_title(f"semantic cache on a QQP cluster stream ({result['stream']['lookups']} lookups)")
    ax.legend(fontsize=7, loc="upper left")
    save_figure(fig, path)


def _methods(memo: QuestionEmbedder, static: tuple[float, ...], bounds: tuple[float, ...],
             extra: bool = True) -> dict[str, Any]:
    """Name -> zero-argument constructor of a fresh cache (or a note string for a skipped method);
    ``extra``: also vCache's per-lookup rule, the per-entry-only variant and the verifier slot."""
    out: dict[str, Any] = {f"static {t:.2f}": (lambda t=t: SemanticCache(embedder=memo, threshold=t)) for t in static}
    for b in bounds:
        out[f"max_error {b:.2f}"] = lambda b=b: SemanticCache(embedder=memo, max_error=b)
    if not extra:
        return out
    out["max_error 0.02 (vCache per-lookup rule)"] = lambda: SemanticCache(embedder=memo, max_error=0.02,
                                                                         error_scope="lookups")

    def per_entry_only() -> SemanticCache:  # each entry on its own evidence, as vCache (no pooled prior)
        c = SemanticCache(embedder=memo, max_error=0.02)
        c.error_bound.pool_weight = 0.0
        return c

    out["max_error 0.02 (per-entry only, pool_weight=0)"] = per_entry_only
    decider, note = verifier_decider()
    if decider is None:
        out["verifier"] = note
    else:
        from ragcache.semantic.stores.faiss_store import FaissAnswerStore
        from ragcache.semantic.decision.policy import SemanticPolicy

        def verifier_cache() -> SemanticPolicy:
            store = FaissAnswerStore(None, embedder=memo)
            return SemanticPolicy(store, embedder=memo, threshold=-1.0, ttl_s=None, decider=decider, candidates=4,
                                  locks=store.locks, speller=store)

        out[f"verifier ({note})"] = verifier_cache
    return out


def main(data: str = "../shared/data/qqp_dev_20k.jsonl", json_path: str = "bench/results/semantic_stream.json",
         plot_path: str | None = None, *, rows: int = 3000, repeat: float = 0.2, seed: int = 0, half: str = "second",
         static: tuple[float, ...] = STATIC, bounds: tuple[float, ...] = BOUNDS, gptcache: bool = True,
         extra: bool = True, embedder: Any = None, kinds: str | None = OWN_KINDS) -> dict[str, Any]:
    """Run the stream benchmark, print the table, write JSON to ``json_path`` and the PNG to
    ``plot_path`` (default: ``json_path`` with ``.png``). Returns the result dict.

    Raises:
        ValueError: ``data`` missing (the message names the file), ``rows < 1``, ``repeat`` outside [0, 1).
    """
    src = Path(data)
    if not src.is_file():
        raise ValueError(f"pairs file {data} not found: pass --pairs PATH (QQP pairs, JSONL with a, b, same)")
    if rows < 1 or not 0.0 <= repeat < 1.0:
        raise ValueError(f"rows must be >= 1 and repeat in [0, 1); got rows={rows}, repeat={repeat}")
    import torch

    torch.set_num_threads(1)
    pairs = [json.loads(line) for line in src.read_text().splitlines() if line.strip()]
    if half not in ("first", "second"):
        raise ValueError(f"half must be 'first' (tuning) or 'second' (reporting), got {half!r}")
    own = [json.loads(x) for x in Path(kinds).read_text().splitlines() if x.strip()] \
        if kinds and Path(kinds).is_file() else []  # the project's labelled near-miss kinds (development rows)
    cid, linked = clusters(pairs + own)  # over the whole file: every label links its clusters
    pool = pairs[: len(pairs) // 2] if half == "first" else pairs[len(pairs) // 2:]
    stream = add_kind_rows(build_stream(pool, cid, rows, repeat, seed), own, seed)
    emb = resolve_embedder(embedder)
    t0 = time.perf_counter()
    memo = memo_embedder(emb, list(dict.fromkeys(embed_form(normalize_question(q)) for q in stream)))
    result: dict[str, Any] = {
        "machine": machine_info(), "embedder": emb.name,
        "data": {"path": str(data), "pairs": len(pairs), "sha256": hashlib.sha256(src.read_bytes()).hexdigest(),
                 "clusters": len(set(cid.values()))},
        "stream": {"rows": rows, "repeat": repeat, "seed": seed, "half": half, "lookups": len(stream),
                   "kind_rows": {"path": kinds, "pairs": len(own), "same": sum(bool(r["same"]) for r in own)},
                   "unique_questions": len(set(stream)), "clusters": len({cid[q] for q in stream}),
                   "embed_seconds": time.perf_counter() - t0},
        "methods": {}, "notes": {},
    }
    for name, make in _methods(memo, static, bounds, extra).items():
        if isinstance(make, str):
            result["notes"][name] = make
            continue
        with make() as cache:
            result["methods"][name] = run_cache(cache, stream, cid, linked)
        print(f"{name}: {result['methods'][name]['hits']} hits, error {fmt(result['methods'][name]['error'])}",
              flush=True)
        _write(result, json_path)  # after each method: a crash later keeps what was measured
    if gptcache:
        g = run_gptcache(stream, cid, linked, memo)
        if "error" in g and "hits" not in g:
            result["notes"]["GPTCache"] = g["error"]
        else:
            result["methods"]["GPTCache default (s=0.8)"] = g
    result["matched"] = {k: matched_static(result, k) for k in result["methods"] if k.startswith("max_error")}
    result["machine"]["loadavg_1m_after"] = os.getloadavg()[0]
    _print(result)
    out = _write(result, json_path)
    print(f"wrote {out}")
    png = plot_path or str(out.with_suffix(".png"))
    if draw(lambda: plot(result, png), png):
        print(f"drew {png}")
    return result


def _write(result: dict[str, Any], json_path: str) -> Path:
    """Write ``result`` to ``json_path`` atomically."""
    out = Path(json_path)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_suffix(out.suffix + ".tmp")
    tmp.write_text(json.dumps(result, indent=2, default=float))
    os.replace(tmp, out)
    return out


def _print(result: dict[str, Any]) -> None:
    s = result["stream"]
    print_table(f"QQP cluster stream: {s['lookups']} lookups, {s['unique_questions']} questions, "
                f"{s['clusters']} clusters",
                ["method", "hits", "error", "wrong (labelled)", "wrong (unlabelled)", "recall", "paraphrase recall",
                 "explorations", "s"],
                [[k, str(m["hits"]), fmt(m["error"]), str(m["wrong_labelled"]), str(m["wrong_unlabelled"]),
                  fmt(m["recall"]), fmt(m["paraphrase_recall"]), str(m.get("explorations", "-")), f"{m['seconds']:.0f}"]
                 for k, m in result["methods"].items()])
    for k, v in result["matched"].items():
        if v and k == "max_error 0.02":
            met = v["hit_ratio"] is not None and v["hit_ratio"] >= 2.0
            print(f"target (max_error 0.02: hits >= 2x the static threshold at the same error): "
                  f"{'met' if met else 'missed'} (x{fmt(v['hit_ratio'])})")
        if v:
            print(f"{k}: {result['methods'][k]['hits']} hits vs {v['static']} {v['static_hits']} hits at error "
                  f"{fmt(v['static_error'])} -> x{fmt(v['hit_ratio'])} (paraphrases x{fmt(v['paraphrase_hit_ratio'])})")
        else:
            print(f"{k}: no static threshold reaches its observed error")
    for k, m in result["methods"].items():
        b = k.split()[1] if k.startswith("max_error") else None
        if b and m["error"] is not None and "per-lookup" in k:
            e = m["error_per_lookup"]
            print(f"{k}: observed error per lookup {e:.4f} {'<=' if e <= float(b) else '>'} bound {b} "
                  f"(among hits {m['error']:.4f})")
        elif b and m["error"] is not None:
            print(f"{k}: observed error among hits {m['error']:.4f} {'<=' if m['error'] <= float(b) else '>'} bound {b}")
    for k, v in result["notes"].items():
        print(f"{k}: {v}")


if __name__ == "__main__":
    main()
