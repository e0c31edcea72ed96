"""A tuning part and a held-out part of the hard-pair development set, and per-pair decision changes.

The rules of the cache's hit decision were loosened (and tightened) kind by kind on the *tuning*
part only; the *held-out* part reports what the changes did to pairs never looked at while
changing them. The split is by pair and fixed:

- the pairs are grouped by their ``kind`` (in file order);
- within each kind, the positions ``0..n-1`` are shuffled with ``random.Random(f"{SEED}:{kind}")``;
- the first ``round(HELDOUT_SHARE * n)`` shuffled positions are held out, the rest tune.

So the held-out part holds 30% of every kind, and a pair's part depends only on its kind, its
position among that kind's pairs and the seed (never on the texts). The split was fixed, and the
baseline decisions (:data:`BASELINE`) recorded, before any rule was changed.

:func:`decisions` runs the default cache (the guards at the default threshold) and the opt-in
verifier (``guards="verifier"``) on every pair; :func:`changes` counts, per kind and part, the
pairs that went from hit to miss and from miss to hit against the baseline record.
"""

from __future__ import annotations

import json
import random
from collections import defaultdict
from pathlib import Path
from typing import Any

SEED = 32
"""The split's seed (issue 32)."""

HELDOUT_SHARE = 0.3
"""Share of each kind's pairs held out."""

BASELINE = "bench/results/semantic_pairs_baseline.json"
"""Per-pair decisions of the release before the kind-by-kind changes (indices and booleans only)."""


def split(rows: list[dict], seed: int = SEED, share: float = HELDOUT_SHARE) -> dict[str, list[int]]:
    """``{"tuning": [row index...], "heldout": [row index...]}`` (sorted) for ``rows`` (see the module)."""
    by_kind: dict[str, list[int]] = defaultdict(list)
    for i, r in enumerate(rows):
        by_kind[str(r.get("kind", "pair"))].append(i)
    held: list[int] = []
    for kind, idx in by_kind.items():
        order = list(range(len(idx)))
        random.Random(f"{seed}:{kind}").shuffle(order)
        held += [idx[j] for j in order[: round(share * len(idx))]]
    hs = set(held)
    return {"tuning": [i for i in range(len(rows)) if i not in hs], "heldout": sorted(hs)}


def decisions(rows: list[dict], emb: Any) -> dict[str, list[bool]]:
    """``{"default": [hit per pair], "verifier": [...]}``: ``a`` stored alone in its partition, ``b`` looked
    up, at the cache's defaults and with ``guards="verifier"``."""
    from ragcache.semantic import SemanticCache, partition_key

    out: dict[str, list[bool]] = {}
    for name, opts in (("default", {}), ("verifier", {"guards": "verifier"})):
        c = SemanticCache(embedder=emb, **opts)
        hits = []
        for i, r in enumerate(rows):
            pk = partition_key(namespace=f"pair-{i}", model=emb.fingerprint)
            c.store(r["a"], "A", partition=pk)
            hits.append(c.lookup(r["b"], partition=pk) is not None)
        out[name] = hits
    return out


GATES = (0.94, 0.90, 0.85, 0.82, 0.80, 0.78, 0.75, 0.70)
"""Cosine gates of the guard sweep (0.94: the guards' default)."""


def gate_sweep(rows: list[dict], emb: Any) -> dict[str, dict[str, Any]]:
    """The default guards at each cosine gate of :data:`GATES`, scored per part: what lowering the gate
    would buy (the hard pairs alone; the QQP price is measured separately)."""
    from ragcache.semantic import SemanticCache, partition_key

    c = SemanticCache(embedder=emb, threshold=min(GATES))
    best = []
    for i, r in enumerate(rows):
        pk = partition_key(namespace=f"sweep-{i}", model=emb.fingerprint)
        c.store(r["a"], "A", partition=pk)
        cand = c.candidates_for(r["b"], partition=pk)[0]
        best.append((cand.similarity, cand.verdict.ok))
    parts = split(rows)
    return {f"{g:.2f}": {p: part_scores(rows, [s >= g and ok for s, ok in best], idx) for p, idx in parts.items()}
            for g in GATES}


def part_scores(rows: list[dict], hits: list[bool], idx: list[int]) -> dict[str, Any]:
    """Precision, recall, true and wrong hits over the pairs ``idx``."""
    tp = sum(1 for i in idx if hits[i] and rows[i]["same"])
    fp = sum(1 for i in idx if hits[i] and not rows[i]["same"])
    pos = sum(1 for i in idx if rows[i]["same"])
    return {"pairs": len(idx), "same": pos, "true_hits": tp, "wrong_hits": fp,
            "precision": tp / (tp + fp) if tp + fp else None, "recall": tp / pos if pos else None}


def changes(rows: list[dict], before: list[bool], after: list[bool], idx: list[int]) -> dict[str, dict[str, int]]:
    """Per kind over the pairs ``idx``: ``hit_to_miss`` and ``miss_to_hit`` counts (and the pairs)."""
    out: dict[str, dict[str, int]] = {}
    for i in idx:
        k = out.setdefault(str(rows[i].get("kind", "pair")), {"pairs": 0, "hit_to_miss": 0, "miss_to_hit": 0})
        k["pairs"] += 1
        k["hit_to_miss"] += int(before[i] and not after[i])
        k["miss_to_hit"] += int(after[i] and not before[i])
    return dict(sorted(out.items()))


def report(rows: list[dict], now: dict[str, list[bool]], baseline: dict[str, Any] | None) -> dict[str, Any]:
    """Scores per decider and part, now and (with a baseline record) before, with the per-kind changes."""
    parts = split(rows)
    res: dict[str, Any] = {"split": {"seed": SEED, "heldout_share": HELDOUT_SHARE, "rule": __doc__.split("\n\n")[1],
                                     "tuning": len(parts["tuning"]), "heldout": len(parts["heldout"])}}
    for name, hits in now.items():
        d: dict[str, Any] = {"after": {p: part_scores(rows, hits, idx) for p, idx in parts.items()}}
        old = None if baseline is None else baseline.get("decisions", {}).get(name)
        if old is not None and len(old) == len(rows):
            d["before"] = {p: part_scores(rows, old, idx) for p, idx in parts.items()}
            d["changes"] = {p: changes(rows, old, hits, idx) for p, idx in parts.items()}
        res[name] = d
    return res


def load_baseline(path: str | Path = BASELINE, sha256: str | None = None) -> dict[str, Any] | None:
    """The baseline record, or ``None`` when absent or recorded on another pairs file (``sha256``)."""
    p = Path(path)
    if not p.is_file():
        return None
    d = json.loads(p.read_text())
    return d if sha256 is None or d.get("sha256") == sha256 else None


__all__ = ["BASELINE", "GATES", "HELDOUT_SHARE", "SEED", "changes", "decisions", "gate_sweep", "load_baseline", "part_scores",
           "report", "split"]


def main(pairs: str = "../shared/data/semantic_pairs_dev.jsonl", json_path: str = "bench/results/semantic_split.json",
         *, record_baseline: bool = False) -> dict[str, Any]:
    """Decide every pair at the defaults and with the verifier; write the split's scores and the per-kind
    changes against :data:`BASELINE` to ``json_path`` (``record_baseline``: write :data:`BASELINE` instead)."""
    import hashlib
    import os

    import torch

    from benchmarks.semantic import OWN_KINDS, machine_info
    from benchmarks.semantic_pairs import memo_embedder
    from ragcache.semantic.embedding import resolve_embedder
    from ragcache.semantic.text import embed_form, normalize_question

    torch.set_num_threads(1)
    raw = Path(pairs).read_bytes()
    rows = [json.loads(line) for line in raw.decode().splitlines() if line.strip()]
    sha = hashlib.sha256(raw).hexdigest()
    emb = resolve_embedder(None)
    memo = memo_embedder(emb, [embed_form(normalize_question(t)) for r in rows for t in (r["a"], r["b"])])
    now = decisions(rows, memo)
    own_rows = [json.loads(x) for x in Path(OWN_KINDS).read_text().splitlines() if x.strip()] \
        if Path(OWN_KINDS).is_file() else []
    own = decisions(own_rows, resolve_embedder(None)) if own_rows else {}
    if record_baseline:
        out = {"sha256": sha, "pairs": len(rows), "split": split(rows), "decisions": now, "machine": machine_info()}
        path = Path(BASELINE)
    else:
        out = {"sha256": sha, "machine": machine_info(), **report(rows, now, load_baseline(BASELINE, sha))}
        out["own_kinds"] = {name: {"all": part_scores(own_rows, hits, list(range(len(own_rows)))),
                                   "by_kind": changes(own_rows, [False] * len(own_rows), hits,
                                                      list(range(len(own_rows))))}
                            for name, hits in own.items()}  # by_kind "miss_to_hit": the hits per kind
        out["guards_by_gate"] = gate_sweep(rows, memo)
        path = Path(json_path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(out, indent=1))
    os.replace(tmp, path)
    print(json.dumps({k: v for k, v in out.items() if k not in ("decisions", "split")}, indent=1)[:4000])
    print(f"wrote {path}")
    return out


if __name__ == "__main__":
    import sys

    main(*[a for a in sys.argv[1:] if not a.startswith("--")], record_baseline="--baseline" in sys.argv)
