"""Choose the pair model's decision threshold and cosine floor on development data, and write them to its card.

``python -m ragcache.app.choose_pair_threshold --data ../shared/data`` (after
``python -m ragcache.app.train_pair_model``) scores the *choose* pairs of
:func:`ragcache.app.pair_data.training_pairs` (never trained on: a hashed slice of QQP, 5% of the made
pairs, and the hard pairs' tuning part) through the whole decision
(:class:`~ragcache.semantic.decision.pair_decider.PairDecider`: hard vetoes, then the model), and picks

- the **floor** (the cosine gate): the highest multiple of 0.05 at or below which at most 2% of the
  choose positives' cosines lie (no lower than 0.5, :data:`~ragcache.limits.THRESHOLD_FLOOR`);
- the **threshold**: the lowest probability at which the made pairs and the hard tuning pairs (labels
  that are right) have no wrong hit among the pairs the model decides (a pair every guard accepts at cosine
  0.94 is served whatever the threshold: the rules' yes), and QQP's slice (noisy labels) a precision of at least
  ``--qqp-precision`` (0.85: QQP's labels cap measurable precision; the rules reach about 0.93 at a sixth of the
  recall), over a grid of 0.50-0.99.

The held-out sets are not read here.
"""

from __future__ import annotations

import argparse
import math
from pathlib import Path

import numpy as np


def vetoed_scores(pairs: list, decider, embedder) -> tuple[np.ndarray, np.ndarray]:
    """``(cosine [n], probability [n])`` of each pair as the cache decides it: the probability is 0 where a hard veto
    or an explicit question-type clash refuses, 1 where the rules accept at their gate, and -1 where the pair is
    longer than the model reads (the guards decide those; they are left out of the choice)."""
    from ragcache.semantic.decision.pair_decider import explicit_type_clash
    from ragcache.semantic.text import embed_form, request_core

    va = embedder.encode([embed_form(p.a) for p in pairs])
    vb = embedder.encode([embed_form(p.b) for p in pairs])
    cos = np.einsum("nd,nd->n", va, vb).astype(np.float64)
    prob = np.zeros(len(pairs))
    todo: list[int] = []
    for i, p in enumerate(pairs):
        q, c = request_core(p.a), request_core(p.b)
        if not decider._vetoes.check(p.a, p.b, cos[i]).ok or explicit_type_clash(q, c) is not None:
            prob[i] = 0.0
        elif cos[i] >= decider.rules_gate and decider._all.check(p.a, p.b, cos[i]).ok:
            prob[i] = 1.0  # the rules' own yes: served whatever the threshold
        elif not decider.model.fits(q, c):
            prob[i] = -1.0
        else:
            todo.append(i)
    if todo:
        prob[todo] = decider.model.score_many([(request_core(pairs[i].a), request_core(pairs[i].b)) for i in todo])
    return cos, prob


def choose(pairs: list, cos: np.ndarray, prob: np.ndarray, *, qqp_precision: float = 0.85) -> dict:
    """The floor and threshold (see the module) and the figures they were chosen by."""
    y = np.array([p.same for p in pairs])
    qqp = np.array([p.kind == "qqp" for p in pairs])
    clean = ~qqp
    pos_cos = np.sort(cos[y & (prob >= 0)])
    q2 = pos_cos[int(0.02 * len(pos_cos))] if len(pos_cos) else 0.5
    floor = max(0.5, math.floor(q2 / 0.05) * 0.05)
    gated = cos >= floor
    by_model = prob < 1.0  # the rules' own yes (1.0) is served whatever the threshold: not the threshold's to fix
    chosen, rows = None, []
    for t in np.round(np.arange(0.50, 0.995, 0.01), 2):
        hit = gated & (prob >= t)
        wrong_clean = int((hit & clean & ~y & by_model).sum())
        qh = hit & qqp
        qprec = float((qh & y).sum() / max(qh.sum(), 1))
        rec_clean = float((hit & clean & y).sum() / max((clean & y).sum(), 1))
        rec_qqp = float((qh & y).sum() / max((qqp & y).sum(), 1))
        rows.append({"threshold": float(t), "wrong_clean": wrong_clean, "recall_clean": round(rec_clean, 4),
                     "qqp_precision": round(qprec, 4), "qqp_recall": round(rec_qqp, 4)})
        if chosen is None and wrong_clean == 0 and qprec >= qqp_precision:
            chosen = float(t)
    if chosen is None:
        chosen = 0.99
    rules_wrong = int((gated & ~by_model & clean & ~y).sum())
    return {"floor": round(float(floor), 2), "threshold": chosen, "grid": rows, "rules_yes_wrong_clean": rules_wrong}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--data", type=Path, default=Path("../shared/data"))
    ap.add_argument("--card", type=Path, default=None, help="the card to update (default: the package's)")
    ap.add_argument("--adapter", type=Path, default=None, help="the adapter (default: the package's)")
    ap.add_argument("--qqp-precision", type=float, default=0.85)
    ap.add_argument("--scores", type=Path, default=None, help="also write each choose pair's cosine and score here")
    a = ap.parse_args(argv)

    import json

    from ragcache.app.pair_data import training_pairs
    from ragcache.atomic import atomic_write_json
    from ragcache.semantic.decision.pair_decider import PairDecider
    from ragcache.semantic.decision.pair_model import CARD_FILE, PairModel
    from ragcache.semantic.embedding import resolve_embedder

    card_path = a.card or Path(__file__).resolve().parents[1] / "semantic" / "data" / CARD_FILE
    card = json.loads(card_path.read_text(encoding="utf-8"))
    model = PairModel(a.adapter, max_len=int(card["max_len"]))
    pairs = training_pairs(a.data)["choose"]
    decider = PairDecider(model, threshold=0.5, floor=0.5) if "threshold" in card else None
    if decider is None:
        card.update({"threshold": 0.5, "floor": 0.5})
        atomic_write_json(card_path, card, indent=1)
        decider = PairDecider(model, threshold=0.5, floor=0.5)
    cos, prob = vetoed_scores(pairs, decider, resolve_embedder(None))
    out = choose(pairs, cos, prob, qqp_precision=a.qqp_precision)
    if a.scores:
        atomic_write_json(a.scores, [{"a": p.a, "b": p.b, "same": p.same, "kind": p.kind, "cos": round(float(x), 4),
                                      "p": round(float(y), 4)} for p, x, y in zip(pairs, cos, prob)], indent=None)
    card.update({"threshold": out["threshold"], "floor": out["floor"],
                 "choice": {"rule": f"lowest threshold with no wrong hit on the made and hard tuning pairs and QQP "
                                     f"precision >= {a.qqp_precision}; floor: 2nd percentile of positives' cosine",
                            "pairs": len(pairs), "rules_yes_wrong_clean": out["rules_yes_wrong_clean"],
                            "grid": out["grid"]}})
    atomic_write_json(card_path, card, indent=1)
    print(f"threshold {out['threshold']}, floor {out['floor']}")
    for r in out["grid"][::5]:
        print(r)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
