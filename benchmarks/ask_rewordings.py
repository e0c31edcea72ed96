"""``ragcache bench ask-rewordings``: rewordings and near misses through ``ragcache ask`` with real retrieval.

Each pair ``(a, b)`` is asked in both directions over a folder of notes (default: the project's own wiki,
``bench/data/ask_wiki/``, and its pairs, ``bench/data/ask_wiki_pairs.jsonl``): ``a`` is asked and its
answer stored in an answer folder of its own, then ``b`` is asked, and what served ``b`` is recorded.
A paraphrase served is a true hit; a near miss served is a wrong answer. Two configurations, back to
back per direction on the same index:

- ``partition only``: the answer cache looked up in ``b``'s own partition (its exact retrieved set), as
  before stored-question retrieval;
- ``default``: then, on a miss, the partitions the stored questions nearest ``b`` retrieve now
  (:func:`ragcache.app.ask.via_stored_question`).

The retriever, the embedder, the answer cache and its hit decision (pair model and guards) are the
real ones at the defaults; the model is replaced by a fixed answer (which answer is served is
what is measured, not its text), so no language model runs. Also recorded: how many directions
retrieved the same set for both questions, and the time the stored-question step adds to a miss
(``via_s``: the neighbour search, the retrievals and the lookups; wall seconds, with the load).
"""

from __future__ import annotations

import json
import os
import tempfile
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

CONFIGS = ("partition only", "default")


def _pairs(path: Path, split: str) -> list[dict[str, Any]]:
    rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    return [r for r in rows if split == "all" or r.get("split") == split]


def _quantile(xs: list[float], q: float) -> float | None:
    if not xs:
        return None
    s = sorted(xs)
    return s[min(len(s) - 1, int(q * len(s)))]


def main(*, pairs: str | None = None, docs: str | None = None, json_path: str | None = None,
         plot_path: str | None = None, split: str = "all", top_k: int | None = None) -> dict[str, Any]:
    """Run every pair of ``pairs`` (JSONL: ``a``, ``b``, ``label`` paraphrase / near_miss, ``kind``, ``split``)
    in both directions over ``docs`` under both configurations; print a table, write ``json_path``,
    draw ``plot_path``. Returns the results.

    Raises:
        FileNotFoundError: ``pairs`` or ``docs`` missing. ValueError: no pair in ``split``.
    """
    root = Path(__file__).resolve().parents[1]
    pairs_path = Path(pairs) if pairs else root / "bench" / "data" / "ask_wiki_pairs.jsonl"
    docs_path = Path(docs) if docs else root / "bench" / "data" / "ask_wiki"
    if not pairs_path.is_file() or not docs_path.is_dir():
        raise FileNotFoundError(f"need the pairs file {pairs_path} and the notes folder {docs_path}")
    rows = _pairs(pairs_path, split)
    if not rows:
        raise ValueError(f"no pair with split {split!r} in {pairs_path} (use dev, heldout or all)")
    work = Path(tempfile.mkdtemp(prefix="ragcache-bench-rewordings-"))

    from dataclasses import replace

    from rich.console import Console

    from ragcache.app.ask import ask
    from ragcache.config import Config
    from ragcache.testing.answer_contract import ScriptedBackend

    backend = ScriptedBackend("the stored answer", approximate=False)  # no language model: which answer serves
    base = replace(Config.from_env(), index_dir=work / "index", semantic_url=None)  # its own index and answers
    via_s: list[float] = []
    quiet = Console(file=open(os.devnull, "w"))  # noqa: SIM115 - lives as long as the run
    load_before = os.getloadavg()
    t_start = time.perf_counter()
    n = 0
    out_rows: list[dict[str, Any]] = []
    for r in rows:
        for first, second in ((r["a"], r["b"]), (r["b"], r["a"])):
            rec: dict[str, Any] = {"id": r["id"], "label": r["label"], "kind": r.get("kind"), "split": r.get("split"),
                                   "stored": first, "asked": second}
            for config in CONFIGS:
                n += 1
                cfg = replace(base, answers_dir=work / f"answers-{n}")
                on = config == "default"
                stored = ask(first, docs_path, cfg=cfg, console=quiet, quiet=True, top_k=top_k, llm=backend,
                             stored_retrieval=on)
                res = ask(second, docs_path, cfg=cfg, console=quiet, quiet=True, top_k=top_k, llm=backend,
                          stored_retrieval=on)
                via_s += [x.timings["stored_retrieval_s"] for x in (stored, res) if "stored_retrieval_s" in x.timings]
                own = res.own_sources if res.retrieved_for is not None else res.sources
                rec[config] = {"served": res.answer.layer == "semantic", "via": res.retrieved_for is not None,
                               "similarity": res.answer.similarity}
                rec["same_retrieval"] = {x.chunk.id for x in stored.sources} == {x.chunk.id for x in own}
            out_rows.append(rec)
    elapsed = time.perf_counter() - t_start
    summary = _summary(out_rows)
    result = {
        "pairs": str(pairs_path.relative_to(root) if pairs_path.is_relative_to(root) else pairs_path),
        "docs": str(docs_path.relative_to(root) if docs_path.is_relative_to(root) else docs_path),
        "split": split, "top_k": top_k, "directions": len(out_rows), "summary": summary,
        "via_s": {"n": len(via_s), "p50": _quantile(via_s, 0.5), "p95": _quantile(via_s, 0.95),
                  "max": max(via_s) if via_s else None},
        "wrong": [x for x in out_rows if x["label"] == "near_miss" and any(x[c]["served"] for c in CONFIGS)],
        "rows": out_rows, "elapsed_s": elapsed, "load_before": load_before, "load_after": os.getloadavg(),
        "cpu_count": os.cpu_count(),
        "model": "none: a fixed answer (the retriever, embedder and hit decision are the real defaults)",
    }
    _print(result)
    if json_path:
        Path(json_path).parent.mkdir(parents=True, exist_ok=True)
        Path(json_path).write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
    from benchmarks.plotting import draw

    draw(lambda: _plot(result, plot_path), plot_path)
    return result


def _summary(rows: list[dict[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    groups: dict[tuple[str, str], list[dict[str, Any]]] = defaultdict(list)
    for x in rows:
        groups[(x["split"] or "all", x["label"])].append(x)
        groups[("all", x["label"])].append(x) if x["split"] else None
    for (split, label), xs in sorted(groups.items()):
        d: dict[str, Any] = {"directions": len(xs), "same_retrieval": sum(x["same_retrieval"] for x in xs)}
        for c in CONFIGS:
            d[c] = {"served": sum(x[c]["served"] for x in xs), "via": sum(x[c]["via"] for x in xs)}
        out[f"{split}/{label}"] = d
    return out


def _print(result: dict[str, Any]) -> None:
    print(f"ask rewordings: {result['directions']} directions, top-k {result['top_k'] or 'default'}, "
          f"{result['elapsed_s']:.0f} s, load {result['load_before'][0]:.1f} -> {result['load_after'][0]:.1f}")
    print(f"{'set':<26}{'dirs':>6}{'same set':>10}" + "".join(f"{c:>18}" for c in CONFIGS))
    for name, d in result["summary"].items():
        cells = "".join(f"{d[c]['served']:>12} ({d[c]['via']:>2})" for c in CONFIGS)
        print(f"{name:<26}{d['directions']:>6}{d['same_retrieval']:>10}{cells}")
    v = result["via_s"]
    if v["n"]:
        print(f"stored-question step on a miss: p50 {v['p50'] * 1000:.0f} ms, p95 {v['p95'] * 1000:.0f} ms "
              f"({v['n']} misses)")
    for w in result["wrong"]:
        print(f"WRONG ({w['kind']}): stored {w['stored']!r}, served to {w['asked']!r}")


def _plot(result: dict[str, Any], path: str | None) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from benchmarks.plotting import save_figure

    names = [k for k in result["summary"] if not k.startswith("all/")]
    fig, ax = plt.subplots(figsize=(8, 4))
    width = 0.38
    for j, c in enumerate(CONFIGS):
        vals = [result["summary"][k][c]["served"] / max(1, result["summary"][k]["directions"]) for k in names]
        xs = [i + (j - 0.5) * width for i in range(len(names))]
        ax.bar(xs, vals, width, label=c)
        for x, v, k in zip(xs, vals, names):  # the counts, so a zero shows
            ax.text(x, v + 0.005, f"{result['summary'][k][c]['served']}/{result['summary'][k]['directions']}",
                    ha="center", va="bottom", fontsize=8)
    ax.set_xticks(range(len(names)), names, rotation=15)
    ax.set_ylabel("directions served (share)")
    ax.set_title("ragcache ask: rewordings served (should be high) and near misses served (must be 0)", fontsize=10)
    ax.set_xlabel(f"directions of {result['pairs']}; load {result['load_before'][0]:.1f}-{result['load_after'][0]:.1f}")
    ax.legend()
    save_figure(fig, path)  # type: ignore[arg-type]


__all__ = ["main"]


if __name__ == "__main__":  # pragma: no cover - ``ragcache bench ask-rewordings`` is the entry point
    main(json_path=None)
