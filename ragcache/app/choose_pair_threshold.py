"""Choose the pair model's decision threshold and cosine floor on development data, and write them to its card.

``python -m ragcache.app.choose_pair_threshold --data ../shared/data`` (after
``python -m ragcache.app.train_pair_model``) scores the *choose* pairs of
:func:`ragcache.app.pair_data.training_pairs` (never trained on: a hashed slice of QQP, 5% of the made
pairs, and the hard pairs' tuning part) through the whole decision
(:class:`~ragcache.semantic.decision.pair_decider.PairDecider`: hard vetoes, then the model), and picks

- the **floor** (the cosine gate): the highest multiple of 0.05 at or below which at most 2% of the
  choose positives' cosines lie (no lower than 0.5, :data:`~ragcache.limits.THRESHOLD_FLOOR`);
- the **threshold**: the lowest multiple of 0.05 from 0.50 at which the clean development pairs (the made
  pairs, the hard tuning pairs and the ``--extra`` sets: labels that are right) have no wrong hit among those the
  model decides (a pair decided without it, such as one longer than its window, is no threshold's to fix: those
  are listed on the card as ``decided_wrong_clean``), and QQP's slice (noisy labels) a precision of at least ``--qqp-precision`` (0.80: of the
  slice's "wrong" hits at 0.60, read by hand, about a third are same-answer pairs labelled different, so QQP's
  labels cap the precision that can be measured; the guards alone reach about 0.89 at a sixth of the recall).

The slot-edit threshold (0.93: above the highest slot edit among the development near misses, 0.90) and the
agreement level (0.5: the model's own yes) are written on the card by hand. The held-out sets are not read here.
"""

from __future__ import annotations

import argparse
import math
from pathlib import Path

import numpy as np

DEV_SETS = ("bench/data/paraphrase_kb.jsonl", "bench/data/near_miss_kb.jsonl")
"""The knowledge-base sets written for the first pair-model report (held out then), development data since."""


def vetoed_scores(pairs: list, decider, embedder) -> tuple[np.ndarray, np.ndarray, list[str]]:
    """``(cosine [n], probability [n], route [n])`` of each pair as the cache decides it
    (:meth:`~ragcache.semantic.decision.pair_decider.PairDecider.stage`): where the decision is made without the
    model the probability is 1 (served) or 0 (refused) and the route ``"decided"``; else the model's probability
    and the route whose threshold it must reach (:meth:`~ragcache.semantic.decision.pair_decider.PairDecider.needed`)."""
    from ragcache.semantic.text import embed_form, request_core

    va = embedder.encode([embed_form(p.a) for p in pairs])
    vb = embedder.encode([embed_form(p.b) for p in pairs])
    cos = np.einsum("nd,nd->n", va, vb).astype(np.float64)
    prob = np.zeros(len(pairs))
    route = ["decided"] * len(pairs)
    todo: list[int] = []
    for i, p in enumerate(pairs):
        st = decider.stage(p.a, p.b, float(cos[i]))
        if st.verdict is not None:
            prob[i] = 1.0 if st.verdict.ok else 0.0
        else:
            route[i] = st.route
            todo.append(i)
    if todo:
        prob[todo] = decider.model.score_many([(request_core(pairs[i].a), request_core(pairs[i].b)) for i in todo])
    return cos, prob, route


def served(decider, cos: np.ndarray, prob: np.ndarray, route: list[str], threshold: float, floor: float) -> np.ndarray:
    """Which pairs the decision serves at ``threshold`` and cosine ``floor`` (bool ``[n]``)."""
    need = np.array([1.0 if r == "decided" else decider.needed(r, threshold) for r in route])
    return (cos >= floor) & (prob >= need) & ((prob > 0) | (need > 0))


def choose(pairs: list, cos: np.ndarray, prob: np.ndarray, route: list[str], decider, *,
           qqp_precision: float = 0.80) -> dict:
    """The floor and threshold (see the module) and the figures they were chosen by."""
    y = np.array([p.same for p in pairs])
    qqp = np.array([p.kind == "qqp" for p in pairs])
    clean = ~qqp
    pos_cos = np.sort(cos[y])
    q2 = pos_cos[int(0.02 * len(pos_cos))] if len(pos_cos) else 0.5
    floor = max(0.5, math.floor(q2 / 0.05) * 0.05)
    by_model = np.array([r != "decided" for r in route])  # a decision without the model is no threshold's to fix
    chosen, rows = None, []
    for t in np.round(np.arange(0.50, 0.996, 0.05), 2):
        hit = served(decider, cos, prob, route, float(t), floor)
        wrong_clean = int((hit & clean & ~y & by_model).sum())
        qh = hit & qqp
        qprec = float((qh & y).sum() / max(qh.sum(), 1))
        rec_clean = float((hit & clean & y).sum() / max((clean & y).sum(), 1))
        rec_qqp = float((qh & y).sum() / max((qqp & y).sum(), 1))
        rows.append({"threshold": float(t), "wrong_clean": wrong_clean, "recall_clean": round(rec_clean, 4),
                     "qqp_precision": round(qprec, 4), "qqp_recall": round(rec_qqp, 4)})
        if chosen is None and wrong_clean == 0 and qprec >= qqp_precision:
            chosen = float(t)
    decided_wrong = [[pairs[i].a, pairs[i].b] for i in np.flatnonzero((cos >= floor) & ~by_model & (prob > 0) & clean & ~y)]
    return {"floor": round(float(floor), 2), "threshold": 0.99 if chosen is None else chosen, "grid": rows,
            "decided_wrong_clean": decided_wrong}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--data", type=Path, default=Path("../shared/data"))
    ap.add_argument("--card", type=Path, default=None, help="the card to update (default: the package's)")
    ap.add_argument("--adapter", type=Path, default=None, help="the adapter (default: the package's)")
    ap.add_argument("--qqp-precision", type=float, default=0.80)
    ap.add_argument("--extra", type=Path, nargs="*", default=[Path(x) for x in DEV_SETS],
                    help="more development pairs (JSON lines with a, b, same, kind); default: the knowledge-base "
                         "sets of the first pair-model report, development data since")
    ap.add_argument("--scores", type=Path, default=None, help="also write each choose pair's cosine and score here")
    a = ap.parse_args(argv)

    import json

    from ragcache.app.pair_data import Pair, read_jsonl, training_pairs
    from ragcache.atomic import atomic_write_json
    from ragcache.semantic.decision.pair_decider import PairDecider
    from ragcache.semantic.decision.pair_model import CARD_FILE, PairModel
    from ragcache.semantic.embedding import resolve_embedder

    card_path = a.card or Path(__file__).resolve().parents[1] / "semantic" / "data" / CARD_FILE
    card = json.loads(card_path.read_text(encoding="utf-8"))
    model = PairModel(a.adapter, max_len=int(card["max_len"]))
    embedder = resolve_embedder(None)
    pairs = training_pairs(a.data, embed=embedder.encode)["choose"]
    pairs += [Pair(r["a"], r["b"], bool(r["same"]), r.get("kind", "dev"), x.name) for x in a.extra if x.is_file()
              for r in read_jsonl(x)]
    decider = PairDecider(model, threshold=0.5, floor=0.5) if "threshold" in card else None
    if decider is None:
        card.update({"threshold": 0.5, "floor": 0.5})
        atomic_write_json(card_path, card, indent=1)
        decider = PairDecider(model, threshold=0.5, floor=0.5)
    card.setdefault("slot_threshold", 0.93)
    card.setdefault("agree", 0.5)
    cos, prob, route = vetoed_scores(pairs, decider, embedder)
    out = choose(pairs, cos, prob, route, decider, qqp_precision=a.qqp_precision)
    if a.scores:
        atomic_write_json(a.scores, [{"a": p.a, "b": p.b, "same": p.same, "kind": p.kind, "cos": round(float(x), 4),
                                      "p": round(float(y), 4)} for p, x, y in zip(pairs, cos, prob)], indent=None)
    card.update({"threshold": out["threshold"], "floor": out["floor"],
                 "choice": {"rule": f"lowest threshold (0.05 grid) with no wrong hit on the clean development pairs "
                                     f"(made, hard tuning, extra) and QQP precision >= {a.qqp_precision}; floor: "
                                     f"2nd percentile of positives' cosine",
                            "pairs": len(pairs), "extra": [str(x) for x in a.extra if x.is_file()],
                            "decided_wrong_clean": out["decided_wrong_clean"],
                            "grid": out["grid"]}})
    atomic_write_json(card_path, card, indent=1)
    print(f"threshold {out['threshold']}, floor {out['floor']}")
    for r in out["grid"]:
        print(r)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
