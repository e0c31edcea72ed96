"""Does the verifier gain from the two questions' pooled vectors? A study, not a shipped head.

``python -m ragcache.app.verifier_interactions --data ../shared/data --json bench/results/verifier_interactions.json``

Siamese classifiers (InferSent, Conneau et al., EMNLP 2017, section 3.2) read a pair through
``u * v`` and ``|u - v|`` of the two sentence vectors. This refits the verifier's logistic head
(:func:`ragcache.semantic.decision.verifier.fit_logistic`, the same gate, hard vetoes and hard-pair weight as
:mod:`ragcache.app.fit_verifier`) on its 19 features alone, plus ``u * v`` (384 more), plus both
(768 more), at several L2 penalties, and for each picks the threshold of highest ``choose``-split
precision with ``choose`` recall >= 0.30 and hard-pair precision >= 0.99; only then is the
``heldout`` split measured. Development data only (the README's data card). Pooled vectors are
kept in ``--cache`` (``vectors.npy`` + ``texts.json``, never pickled) between runs.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import numpy as np

from ragcache.app.fit_verifier import DEFAULT_VETOES, blank_head, scores, features, load_sets
from ragcache.app.verifier_data import precision_recall

KINDS = {"19 features (shipped head's inputs)": (), "+ u*v": ("prod",), "+ u*v, |u-v|": ("prod", "diff")}


def pooled_vectors(sets: dict[str, list[dict[str, Any]]], cache: Path | None) -> dict[str, np.ndarray]:
    """``embed_form(normalize_question(q)) -> unit vector [dim]`` for every question of ``sets``."""
    from ragcache.semantic.embedding import resolve_embedder
    from ragcache.semantic.text import embed_form, normalize_question

    texts = sorted({embed_form(normalize_question(q)) for rows in sets.values() for r in rows for q in (r["a"], r["b"])})
    if cache is not None and (cache / "texts.json").is_file():
        kept = json.loads((cache / "texts.json").read_text())
        if set(texts) <= set(kept):
            v = np.load(cache / "vectors.npy", allow_pickle=False)
            return dict(zip(kept, v))
    emb = resolve_embedder(None)
    v = np.vstack([emb.encode(texts[s:s + 128]) for s in range(0, len(texts), 128)])
    if cache is not None:
        from ragcache.atomic import atomic_write_json

        cache.mkdir(parents=True, exist_ok=True)
        np.save(cache / "vectors.npy", v)
        atomic_write_json(cache / "texts.json", texts)
    return dict(zip(texts, v))


def _design(rows: list[dict[str, Any]], x: np.ndarray, vec: dict[str, np.ndarray], kind: tuple[str, ...]) -> np.ndarray:
    from ragcache.semantic.text import embed_form, normalize_question

    a = np.vstack([vec[embed_form(normalize_question(r["a"]))] for r in rows])
    b = np.vstack([vec[embed_form(normalize_question(r["b"]))] for r in rows])
    return np.hstack([x, *([a * b] if "prod" in kind else []), *([np.abs(a - b)] if "diff" in kind else [])])


def _gate(x: np.ndarray, floor: float) -> np.ndarray:
    """At or above the cosine gate and refused by no default hard veto, as :func:`fit_verifier.fit` gates."""
    return scores(blank_head(floor, DEFAULT_VETOES), x) > 0


def study(sets: dict[str, list[dict[str, Any]]], feats: dict[str, tuple[np.ndarray, np.ndarray]],
          vec: dict[str, np.ndarray], *, floor: float = 0.80, l2s: tuple[float, ...] = (0.3, 30.0, 300.0, 3000.0),
          hard_weight: float = 2.0, min_recall: float = 0.30) -> list[dict[str, Any]]:
    """One row per (inputs, L2): the chosen threshold's choose / hard / held-out precision and recall."""
    from ragcache.semantic.decision.verifier import fit_logistic

    rows = []
    for name, kind in KINDS.items():
        d = {k: (_design(sets[k], feats[k][0], vec, kind), feats[k][1], feats[k][0]) for k in feats}
        hx = np.vstack([d["hard"][0], d["own"][0]])
        hy = np.concatenate([d["hard"][1], d["own"][1]])
        hraw = np.vstack([d["hard"][2], d["own"][2]])
        fx, fy, fraw = d["fit"]
        k, hk = _gate(fraw, floor), _gate(hraw, floor)
        for l2 in l2s:
            mean, scale, w, b = fit_logistic(np.vstack([fx[k], hx[hk]]), np.concatenate([fy[k], hy[hk]]), l2=l2,
                                             sample_weight=np.concatenate([np.ones(k.sum()), np.full(hk.sum(), hard_weight)]))

            def score(split: str) -> tuple[np.ndarray, np.ndarray]:
                x, y, raw = d[split]
                p = 1.0 / (1.0 + np.exp(-np.clip(((x - mean) / scale) @ w + b, -50, 50)))
                return np.where(_gate(raw, floor), p, 0.0), y

            (pc, yc), (ph, yh), (po, yo) = score("choose"), score("hard"), score("heldout")
            best = None
            for t in np.unique(np.round(pc[pc > 0], 3)):
                P, R, _ = precision_recall(pc >= t, yc)
                if R >= min_recall and precision_recall(ph >= t, yh)[0] >= 0.99 and (best is None or P > best[1]):
                    best = (float(t), P, R)
            row: dict[str, Any] = {"inputs": name, "features": int(fx.shape[1]), "l2": l2, "gate": floor}
            if best is not None:
                t = best[0]
                held = precision_recall(po >= t, yo)
                row.update(threshold=t, choose_precision=best[1], choose_recall=best[2],
                           hard_recall=precision_recall(ph >= t, yh)[1],
                           heldout_precision=held[0], heldout_recall=held[1], heldout_hits=held[2])
            rows.append(row)
            print(json.dumps(row), flush=True)
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", type=Path, default=Path("../shared/data"))
    ap.add_argument("--json", type=Path, default=Path("bench/results/verifier_interactions.json"))
    ap.add_argument("--cache", type=Path, default=None, help="a folder to keep features and pooled vectors in")
    a = ap.parse_args(argv)
    sets = load_sets(a.data)
    feats = features(sets, a.cache)
    rows = study(sets, feats, pooled_vectors(sets, a.cache))
    from ragcache.atomic import atomic_write_json

    atomic_write_json(a.json, {"study": "verifier inputs: 19 features vs + pooled-vector interactions",
                               "command": "python -m ragcache.app.verifier_interactions --data ../shared/data",
                               "data": {k: len(v) for k, v in sets.items()}, "rows": rows})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
