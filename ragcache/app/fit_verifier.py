"""Refit the shipped verifier head: ``python -m ragcache.app.fit_verifier --data ../shared/data``.

Development data only (the README's data card):

- ``qqp_dev_20k.jsonl`` and ``qqp_dev.jsonl`` (Quora Question Pairs, non-commercial research
  licence), split by cluster (:func:`ragcache.app.verifier_data.qqp_splits`) into ``fit`` (the
  first ``--fit-pairs``) / ``choose`` / ``heldout``;
- ``semantic_pairs_dev.jsonl`` (the project's hard pairs) and ``tests/data/verifier_fit_pairs.jsonl``
  (hard negatives of every guard kind and phrasal-verb paraphrases, written for ragcache), fitted
  on with weight ``--hard-weights``.

For each cosine gate of ``--floors`` and each hard-pair weight, the head is fitted on the pairs at
or above the gate that no hard veto (``--vetoes``) refuses. The threshold is chosen for precision:
the one of highest ``choose``-split precision among those keeping ``choose`` recall >=
``--min-recall`` and hard-pair precision >= 0.99; the (gate, weight) of highest ``choose`` precision
wins (within :data:`TIE` of it, the one of highest hard-pair recall). The ``heldout`` split is only measured, after the choice, and written with the head's card.
``--ablation FILE`` refits without each feature group, and with each guard as a veto or a feature,
on the development splits only."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import numpy as np

from ragcache.app.verifier_data import featurize, precision_recall, qqp_splits, read_pairs
from ragcache.semantic.decision.features import FEATURE_NAMES, GUARD_FEATURES

HEAD_PATH = Path(__file__).resolve().parents[1] / "semantic" / "data" / "verifier_minilm.json"
FIT_PAIRS = Path(__file__).resolve().parents[2] / "tests" / "data" / "verifier_fit_pairs.jsonl"


def load_sets(data: Path, fit_pairs: int = 6000) -> dict[str, list[dict[str, Any]]]:
    """The QQP splits (the first ``fit_pairs`` of ``fit``, in file order) plus ``hard``
    (semantic_pairs_dev) and ``own`` (ragcache's fit pairs)."""
    qqp = read_pairs(data / "qqp_dev_20k.jsonl") + read_pairs(data / "qqp_dev.jsonl")
    sets = qqp_splits(qqp)
    sets["fit"] = sets["fit"][:fit_pairs]
    sets["hard"] = read_pairs(data / "semantic_pairs_dev.jsonl")
    sets["own"] = read_pairs(FIT_PAIRS)
    return {k: sets[k] for k in ("own", "hard", "heldout", "choose", "fit")}


def features(sets: dict[str, list[dict[str, Any]]], cache: Path | None) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Features of every set; with ``cache`` (a folder) each set's are kept in ``<cache>/<set>.npz``
    and reused while the set has the same pairs."""
    from ragcache.semantic.embedding import resolve_embedder

    emb = None
    out = {}
    for name, rows in sets.items():
        path = None if cache is None else cache / f"{name}.npz"
        digest = _digest(rows)
        if path is not None and path.is_file():
            z = np.load(path)
            if str(z["digest"]) == digest:  # embeddings kept; guards and text features as the code is now
                out[name] = (refresh_text_features(rows, z["x"]), z["y"])
                continue
        emb = emb or resolve_embedder(None)
        out[name] = featurize(rows, emb)
        print(f"features: {name} ({len(rows)} pairs)", flush=True)
        if path is not None:
            path.parent.mkdir(parents=True, exist_ok=True)
            np.savez(path, x=out[name][0], y=out[name][1], digest=digest)
    return out


def refresh_text_features(rows: list[dict[str, Any]], x: np.ndarray) -> np.ndarray:
    """``x`` with every feature after the embedding ones recomputed from the texts (cheap)."""
    from ragcache.semantic.decision.features import EMBEDDING_FEATURES, feature_guards, guard_findings, text_features
    from ragcache.semantic.text import normalize_question

    guards = feature_guards()
    x = x.copy()
    for i, r in enumerate(rows):
        a, b = normalize_question(r["a"]), normalize_question(r["b"])
        x[i, EMBEDDING_FEATURES:] = text_features(a, b, guard_findings(guards, a, b))
    return x


def _digest(rows: list[dict[str, Any]]) -> str:
    import hashlib

    from ragcache.semantic.decision.features import FEATURE_NAMES

    return hashlib.sha256(json.dumps([FEATURE_NAMES, [(r["a"], r["b"], r["same"]) for r in rows]]).encode()).hexdigest()


def _default_vetoes() -> tuple[str, ...]:
    from ragcache.semantic.decision.features import GUARD_FEATURES
    from ragcache.semantic.decision.guards import DIFFERENT_QUESTION

    return tuple(g for g in DIFFERENT_QUESTION if g in GUARD_FEATURES)


DEFAULT_VETOES: tuple[str, ...] = _default_vetoes()
"""Guards that refuse outright by default while fitting: the "different question" guards
(:data:`ragcache.semantic.decision.guards.DIFFERENT_QUESTION`, the one list) that are features too (the
substitution guard is a feature only). At run time the verifier vetoes on every guard of that list
(:attr:`~ragcache.semantic.decision.verifier.LearnedVerifier.veto_names`), feature or not."""

TIE = 0.005
"""Choose-split precisions closer than this (3 hits in 600) count as equal; the hard-pair recall decides."""


def choose_threshold(p_choose: np.ndarray, y_choose: np.ndarray, p_hard: np.ndarray, y_hard: np.ndarray,
                     min_recall: float) -> tuple[float, float] | None:
    """``(threshold, choose precision)``: the score threshold of highest choose-split precision among
    those with choose recall >= ``min_recall`` and hard-pair precision >= 0.99, or None."""
    best: tuple[float, float] | None = None
    for t in np.unique(np.round(p_choose[p_choose > 0], 4)):
        pc, rc, hc = precision_recall(p_choose >= t, y_choose)
        ph, _, _ = precision_recall(p_hard >= t, y_hard)
        if hc >= 20 and rc >= min_recall and ph >= 0.99 and (best is None or pc > best[1]):
            best = (float(t), pc)
    return best


def blank_head(floor: float, vetoes: tuple[str, ...]) -> Any:
    from ragcache.semantic.decision.verifier import VerifierHead

    n = len(FEATURE_NAMES)
    return VerifierHead(FEATURE_NAMES, np.zeros(n), np.ones(n), np.zeros(n), 0.0, 0.5, floor, vetoes, "all-MiniLM-L6-v2")


def fit(feats: dict[str, tuple[np.ndarray, np.ndarray]], *, floors: list[float], hard_weights: list[float],
        min_recall: float, vetoes: tuple[str, ...], l2: float, drop: tuple[str, ...] = ()) -> dict[str, Any]:
    """Fit and choose (module docstring). Returns the head and every measured figure. ``drop``:
    feature names left out (their columns zeroed; a dropped guard is no veto either), for ablations."""
    from ragcache.semantic.decision.verifier import VerifierHead, fit_logistic

    if drop:
        cols = [FEATURE_NAMES.index(n) for n in drop]
        feats = {k: (_zeroed(x, cols), y) for k, (x, y) in feats.items()}
    veto = tuple(g for g in vetoes if f"g_{g}" not in drop)
    fx, fy = feats["fit"]
    hx = np.vstack([feats["hard"][0], feats["own"][0]])
    hy = np.concatenate([feats["hard"][1], feats["own"][1]])
    cx, cy = feats["choose"]
    found: list[tuple[float, float, Any, float]] = []
    trials = []
    for floor in floors:
        keep, hkeep = scores(blank_head(floor, veto), fx) > 0, scores(blank_head(floor, veto), hx) > 0
        for hw in hard_weights:
            w = np.concatenate([np.ones(int(keep.sum())), np.full(int(hkeep.sum()), hw)])
            mean, scale, weights, bias = fit_logistic(np.vstack([fx[keep], hx[hkeep]]),
                                                      np.concatenate([fy[keep], hy[hkeep]]), sample_weight=w, l2=l2)
            head = VerifierHead(FEATURE_NAMES, mean, scale, weights, bias, 0.5, floor, veto, "all-MiniLM-L6-v2")
            got = choose_threshold(scores(head, cx), cy, scores(head, feats["hard"][0]), feats["hard"][1],
                                   min_recall)
            hr = None if got is None else precision_recall(scores(head, feats["hard"][0]) >= got[0], feats["hard"][1])[1]
            trials.append({"floor": floor, "hard_weight": hw, "threshold": got and got[0],
                           "choose_precision": got and got[1], "hard_recall": hr})
            if got is not None:
                found.append((got[1], hr, head.with_threshold(got[0]), hw))
    if not found:
        raise SystemExit(f"no gate in {floors} keeps recall {min_recall} with hard-pair precision 0.99")
    top = max(f[0] for f in found)  # within TIE of the best choose precision, the best hard-pair recall wins
    _, _, head, hw = max((f for f in found if f[0] >= top - TIE), key=lambda f: (f[1], f[0]))
    best = {"hard_weight": hw}
    report = {name: dict(zip(("precision", "recall", "hits"), precision_recall(scores(head, x) >= head.threshold, y)))
              for name, (x, y) in feats.items()}
    return {"head": head, "hard_weight": best["hard_weight"], "trials": trials, "report": report,
            "vetoes": list(veto)}


def _zeroed(x: np.ndarray, cols: list[int]) -> np.ndarray:
    x = x.copy()
    x[:, cols] = 0.0
    return x


ABLATIONS: dict[str, tuple[str, ...]] = {
    "all features (shipped)": (),
    "pooled cosine only (no guards at all)": tuple(n for n in FEATURE_NAMES if n not in ("cos", "cos2")),
    "no token alignment": ("tok_f", "tok_min", "tok_low"),
    "no guards (neither feature nor veto)": tuple(f"g_{g}" for g in GUARD_FEATURES),
    "no length / overlap": ("len_ratio", "len_max", "jac_words", "jac_content", "shared_min"),
}
"""Feature groups left out in the ablation table (README): each refitted and re-chosen the same way."""


def ablation(feats: dict[str, tuple[np.ndarray, np.ndarray]], **options: Any) -> list[dict[str, Any]]:
    """For each of :data:`ABLATIONS`, and each guard as a hard veto or as a feature only: the
    choose-split (development) and hard-pair precision / recall of the head refitted and re-chosen
    the same way; the held-out split is not read."""
    vetoes = tuple(options["vetoes"])
    runs = [(name, drop, options) for name, drop in ABLATIONS.items()]
    runs += [(f"{g}: feature only" if g in vetoes else f"{g}: hard veto too", (),
              {**options, "vetoes": tuple(v for v in vetoes if v != g) if g in vetoes else (*vetoes, g)})
             for g in GUARD_FEATURES]
    runs += [(f"{g}: removed", (f"g_{g}",), options) for g in GUARD_FEATURES]
    dev = {k: v for k, v in feats.items() if k != "heldout"}
    rows = []
    for name, drop, opts in runs:
        try:
            res = fit(dev, drop=drop, **opts)
        except SystemExit as e:
            rows.append({"ablation": name, "error": str(e)})
            continue
        r = res["report"]
        rows.append({"ablation": name, "gate": res["head"].floor, "vetoes": res["vetoes"],
                     "choose_precision": r["choose"]["precision"], "choose_recall": r["choose"]["recall"],
                     "hard_precision": r["hard"]["precision"], "hard_recall": r["hard"]["recall"]})
    return rows


def baselines(feats: dict[str, tuple[np.ndarray, np.ndarray]]) -> dict[str, dict[str, float]]:
    """Plain cosine and the guards alone (every guard passes) at fixed thresholds on the held-out
    split, from the same features: ``{"cosine >= t" | "guards, cosine >= t": {precision, recall, hits}}``."""
    x, y = feats["heldout"]
    ok = ~(x[:, [FEATURE_NAMES.index(f"g_{g}") for g in GUARD_FEATURES]] > 0.5).any(1)
    out = {f"cosine >= {t:.2f}": x[:, 0] >= t for t in (0.80, 0.85, 0.90, 0.95)}
    out |= {f"guards, cosine >= {t:.2f}": (x[:, 0] >= t) & ok for t in (0.70, 0.80, 0.90, 0.94)}
    return {k: dict(zip(("precision", "recall", "hits"), precision_recall(v, y))) for k, v in out.items()}


def scores(head: Any, x: np.ndarray) -> np.ndarray:
    """The decider's outcome as a score: 0 below the gate or on a veto, else the head's probability."""
    p = head.score(x) if np.any(head.weights) else np.ones(len(x))
    vcols = [FEATURE_NAMES.index(f"g_{g}") for g in head.vetoes]
    out = np.where(x[:, 0] >= head.floor, p, 0.0)
    if vcols:
        out = np.where((x[:, vcols] > 0.5).any(1), 0.0, out)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", type=Path, default=Path("../shared/data"))
    ap.add_argument("--out", type=Path, default=HEAD_PATH)
    ap.add_argument("--cache", type=Path, default=None, help="a folder to keep the features in between runs")
    ap.add_argument("--fit-pairs", type=int, default=6000, help="QQP fit-split pairs used (file order)")
    ap.add_argument("--floors", type=float, nargs="+", default=[0.70, 0.75, 0.80, 0.85])
    ap.add_argument("--hard-weights", type=float, nargs="+", default=[1.0, 2.0, 5.0])
    ap.add_argument("--min-recall", type=float, default=0.32, help="choose-split recall the threshold must keep")
    ap.add_argument("--vetoes", default=",".join(DEFAULT_VETOES), help="guards that refuse outright")
    ap.add_argument("--l2", type=float, default=0.3)
    ap.add_argument("--ablation", type=Path, default=None, help="also write the ablation table (JSON) here")
    a = ap.parse_args(argv)
    sets = load_sets(a.data, a.fit_pairs)
    feats = features(sets, a.cache)
    opts = {"floors": a.floors, "hard_weights": a.hard_weights, "min_recall": a.min_recall,
            "vetoes": tuple(v for v in a.vetoes.split(",") if v), "l2": a.l2}
    res = fit(feats, **opts)
    from ragcache.atomic import atomic_write_json
    from ragcache.semantic.decision.verifier import VerifierHead

    if a.ablation is not None:
        table = ablation(feats, **opts)
        atomic_write_json(a.ablation, {"options": opts, "rows": table})
        for row in table:
            print(json.dumps(row))
    h = res["head"]
    card = {"command": "python -m ragcache.app.fit_verifier --data ../shared/data",
            "options": {"fit_pairs": a.fit_pairs, **opts}, "hard_weight": res["hard_weight"],
            "data": {k: {"pairs": len(v), "same": sum(r["same"] for r in v)} for k, v in sets.items()},
            "licence": "derived from Quora Question Pairs (non-commercial research use only) and ragcache's own pairs",
            "trials": res["trials"], "measured": res["report"], "heldout_baselines": baselines(feats)}
    max_words = int(np.ceil(np.percentile(feats["fit"][0][:, FEATURE_NAMES.index("len_max")] * 20, 99)))
    card["max_words"] = "99th percentile of the longer question's words over the fit pairs"
    head = VerifierHead(h.names, h.mean, h.scale, h.weights, h.bias, h.threshold, h.floor, h.vetoes, h.embedder, card,
                        max_words)
    atomic_write_json(a.out, head.to_json(), indent=1)
    print(json.dumps({"floor": head.floor, "threshold": head.threshold, "vetoes": list(head.vetoes),
                      "hard_weight": res["hard_weight"], "measured": res["report"]}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
