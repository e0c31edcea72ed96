"""A candidate default hit decision, guards-or-verifier, against the guards alone, under a rule fixed first.

Every pair is decided once through the real cache (``a`` stored alone in its partition, ``b`` looked
up; FAISS, the packaged all-MiniLM-L6-v2): whether the guards accept at their gate (0.94), and the
learned verifier's decision score (:meth:`LearnedVerifier.decision_score`: 0 below its floor or on a hard
veto). Guards-or-verifier at threshold ``t`` serves a pair when the guards do, or, below the guards' gate,
when no guard but ``substitution`` refuses it and the score is ``>= t``. The opt-in verifier alone
(``guards="verifier"``, the head's own threshold) is reported beside them.

Sets (development data only):

- the hard pairs (``semantic_pairs_dev.jsonl``), by the fixed tuning / held-out split of
  :mod:`benchmarks.semantic_split`;
- the project's own near-miss kinds (``bench/data/semantic_kinds_dev.jsonl``);
- QQP: 900 pairs of the ``choose`` split and 900 of the ``heldout`` split of ``qqp_dev_20k.jsonl``
  (:func:`ragcache.app.verifier_data.qqp_splits`, cluster-disjoint from the ``fit`` split the head was
  fitted on; each drawn with ``random.Random(0).shuffle``), and ``qqp_dev.jsonl``.

The rule, applied to the ``choose`` split and the hard pairs' tuning part only: the lowest ``t`` on
:data:`GRID` at which the union's QQP-choose precision is at least the guards' alone plus :data:`MARGIN`,
at ``t`` and every higher grid point, with no wrong hit on the hard tuning part; with no such ``t`` the
default stays the guards alone. The held-out parts report it.
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

GRID = tuple(round(0.80 + 0.01 * i, 2) for i in range(11))
"""Verifier thresholds tried (0.80 ... 0.90)."""

MARGIN = 0.01
"""Precision margin over the guards' on the QQP choose split (about one wrong hit in a hundred hits)."""

QQP_SAMPLE = 900
"""Pairs drawn from each QQP split."""


def decide(rows: list[dict], emb: Any, verifier: Any, label: str) -> list[tuple[bool, float, float, float]]:
    """``(guards accept at 0.94, verifier decision score where guards-or-verifier lets it decide, else 0;
    cosine; the verifier's decision score alone)`` per pair, through the real cache."""
    from ragcache.semantic import SemanticCache, partition_key
    from ragcache.semantic.text import normalize_question

    c = SemanticCache(embedder=emb, threshold=0.0)  # an explicit threshold: the guards decide each candidate
    out = []
    for i, r in enumerate(rows):
        pk = partition_key(namespace=f"{label}-{i}", model=emb.fingerprint)
        c.store(r["a"], "A", partition=pk)
        cand = c.candidates_for(r["b"], partition=pk)[0]
        score = verifier.decision_score(normalize_question(r["b"]), normalize_question(r["a"]), cand.similarity)
        ok = cand.verdict.ok
        may = cand.similarity < 0.94 and (ok or cand.verdict.reason == "substitution")
        out.append((cand.similarity >= 0.94 and ok, score if may else 0.0, cand.similarity, score))
    return out


def scores(rows: list[dict], got: list[tuple], idx: list[int], t: float | None, *, alone: bool = False
           ) -> dict[str, Any]:
    """Precision, recall, true and wrong hits over ``idx`` (:func:`benchmarks.semantic_split.part_scores`): the
    guards alone (``t=None``), the union at ``t``, or (``alone``) the verifier alone at ``t``."""
    from benchmarks.semantic_split import part_scores

    hits = [raw >= t if alone else g or (t is not None and v >= t) for g, v, _, raw in got]
    return part_scores(rows, hits, idx)


def choose(results: dict[str, Any]) -> float | None:
    """The rule of the module docstring over ``results["grid"]``; ``None`` when no grid point meets it."""
    base = results["guards"]["qqp_choose"]["precision"]
    ok = [(t, r["qqp_choose"]["precision"] >= base + MARGIN and r["hard_tuning"]["wrong_hits"] == 0)
          for t, r in sorted(results["grid"].items(), key=lambda kv: float(kv[0]))]
    for j, (t, _) in enumerate(ok):
        if all(good for _, good in ok[j:]):
            return float(t)
    return None


def plot(result: dict[str, Any], path: str | Path) -> Path | None:
    """Precision and recall per verifier threshold, the guards alone dashed (``None`` without matplotlib)."""
    from benchmarks.plotting import draw

    ts = sorted(result["grid"], key=float)

    def fig() -> None:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        f, (a1, a2) = plt.subplots(1, 2, figsize=(10, 4))
        for ax, metric, sets in ((a1, "precision", ("qqp_choose", "qqp_heldout")),
                                 (a2, "recall", ("hard_tuning", "hard_heldout", "qqp_heldout"))):
            for part in sets:
                line = ax.plot([result["grid"][t][part][metric] for t in ts], marker="o", label=f"{part}: union")
                ax.axhline(result["guards"][part][metric], linestyle="--", color=line[0].get_color(),
                           label=f"{part}: guards alone")
            ax.set_xticks(range(len(ts)), ts)
            ax.set_xlabel("verifier threshold")
            ax.set_ylabel(metric)
            ax.legend(fontsize=7)
        f.suptitle(f"Default decision: guards or verifier (rule's choice t = {result['chosen']})")
        f.tight_layout()
        f.savefig(path, dpi=110)
        plt.close(f)

    return draw(fig, path)


def main(data: str = "../shared/data", json_path: str = "bench/results/semantic_default_decider.json") -> dict[str, Any]:
    """Decide every set, apply the rule, print a table, write ``json_path`` and its PNG."""
    import torch
    from rich.console import Console
    from rich.table import Table

    from benchmarks.semantic import OWN_KINDS, machine_info
    from benchmarks.semantic_split import split
    from ragcache.app.verifier_data import qqp_splits, read_pairs
    from ragcache.atomic import atomic_write_json
    from ragcache.semantic.decision.verifier import default_verifier, load_head
    from ragcache.semantic.embedding import resolve_embedder

    torch.set_num_threads(1)
    d = Path(data)
    emb = resolve_embedder(None)
    verifier = default_verifier(emb)
    hard = read_pairs(d / "semantic_pairs_dev.jsonl")
    parts = split(hard)
    sets: dict[str, tuple[list[dict], list[int]]] = {}
    got: dict[str, list] = {"hard": decide(hard, emb, verifier, "hard")}
    sets["hard_tuning"] = (hard, parts["tuning"])
    sets["hard_heldout"] = (hard, parts["heldout"])
    if Path(OWN_KINDS).is_file():
        kinds = read_pairs(OWN_KINDS)
        got["kinds"] = decide(kinds, emb, verifier, "kinds")
        sets["own_kinds"] = (kinds, list(range(len(kinds))))
    sp = qqp_splits(read_pairs(d / "qqp_dev_20k.jsonl"))
    for name in ("choose", "heldout"):
        rows = list(sp[name])
        random.Random(0).shuffle(rows)
        rows = rows[:QQP_SAMPLE]
        got[f"qqp_{name}"] = decide(rows, emb, verifier, name)
        sets[f"qqp_{name}"] = (rows, list(range(len(rows))))
    q1 = read_pairs(d / "qqp_dev.jsonl")
    got["qqp_dev"] = decide(q1, emb, verifier, "qqp-dev")
    sets["qqp_dev"] = (q1, list(range(len(q1))))

    def at(t: float | None, alone: bool = False) -> dict[str, Any]:
        return {name: scores(rows, got["hard" if name.startswith("hard") else "kinds" if name == "own_kinds" else name],
                             idx, t, alone=alone) for name, (rows, idx) in sets.items()}

    head = load_head()
    result: dict[str, Any] = {
        "benchmark": "semantic_default_decider", "machine": machine_info(), "embedder": emb.name,
        "rule": __doc__.split("\n\n")[4].replace("\n", " "), "grid_values": list(GRID), "margin": MARGIN,
        "guards": at(None), "grid": {f"{t:.2f}": at(t) for t in GRID},
        "verifier_head_threshold": head.threshold, "verifier_at_head_threshold": at(head.threshold, alone=True),
    }
    result["chosen"] = choose(result)
    result["outcome"] = ("no threshold meets the rule: the default stays the guards alone" if result["chosen"] is None
                         else f"the rule licenses guards-or-verifier at t = {result['chosen']}")
    table = Table(title="Hit decisions: the guards alone (the default), the opt-in verifier, guards-or-verifier")
    table.add_column("set")
    cols = [("guards", result["guards"]), (f"verifier t={head.threshold}", result["verifier_at_head_threshold"]),
            *((f"guards-or-verifier t={t}", result["grid"][f"{t:.2f}"]) for t in (0.84, 0.90))]
    for name, _ in cols:
        table.add_column(f"{name}: hits / wrong", justify="right")
    for part in sets:
        table.add_row(part, *(f"{r[part]['true_hits']} / {r[part]['wrong_hits']}" for _, r in cols))
    Console().print(table)
    print(f"rule: {result['outcome']}")
    path = Path(json_path)
    atomic_write_json(path, result)
    print(f"written: {path.resolve()}")
    png = plot(result, path.with_suffix(".png"))
    if png is not None:
        print(f"written: {Path(png).resolve()}")
    return result


if __name__ == "__main__":
    import sys

    main(*sys.argv[1:])
