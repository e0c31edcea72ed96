"""Refit the shipped verifier head: ``python -m ragcache.app.fit_verifier --data ../shared/data``.

Development data only (the README's data card):

- ``qqp_dev_20k.jsonl`` and ``qqp_dev.jsonl`` (Quora Question Pairs, non-commercial research
  licence), split by duplicate cluster (:func:`ragcache.app.verifier_data.qqp_splits`) into
  ``fit`` / ``choose`` / ``heldout``;
- ``semantic_pairs_dev.jsonl`` (the project's hard pairs) and ``tests/data/verifier_fit_pairs.jsonl``
  (hard negatives of every guard kind and phrasal-verb paraphrases, written for ragcache), both
  fitted on with weight ``--hard-weight``.

For each cosine gate of ``--floors``, the head is fitted on the ``fit`` pairs at or above the gate;
its threshold is the lowest score at which the ``choose`` QQP pairs reach ``--precision`` and the
hard pairs 0.99; the gate with the highest ``choose`` recall wins. Hard vetoes are the guards that,
firing alone, are wrong on no more than ``--veto-error`` of the fit pairs they fire on. The
``heldout`` split is only measured, after the choice, and written with the head's card.
"""

from __future__ import annotations

import argparse
import json
import subprocess
from pathlib import Path
from typing import Any

import numpy as np

from ragcache.app.verifier_data import featurize, precision_recall, qqp_splits, read_pairs

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
            if str(z["digest"]) == digest:
                out[name] = (z["x"], z["y"])
                continue
        emb = emb or resolve_embedder(None)
        out[name] = featurize(rows, emb)
        print(f"features: {name} ({len(rows)} pairs)", flush=True)
        if path is not None:
            path.parent.mkdir(parents=True, exist_ok=True)
            np.savez(path, x=out[name][0], y=out[name][1], digest=digest)
    return out


def _digest(rows: list[dict[str, Any]]) -> str:
    import hashlib

    from ragcache.semantic.features import FEATURE_NAMES

    return hashlib.sha256(json.dumps([FEATURE_NAMES, [(r["a"], r["b"], r["same"]) for r in rows]]).encode()).hexdigest()


def choose_threshold(p_choose: np.ndarray, y_choose: np.ndarray, p_hard: np.ndarray, y_hard: np.ndarray,
                     precision: float) -> float | None:
    """Lowest score threshold with choose precision >= ``precision`` and hard precision >= 0.99."""
    for t in np.unique(np.round(np.concatenate([p_choose, p_hard]), 4)):
        pc, _, hc = precision_recall(p_choose >= t, y_choose)
        ph, _, _ = precision_recall(p_hard >= t, y_hard)
        if t > 0 and hc >= 20 and pc >= precision and ph >= 0.99:
            return float(t)
    return None


def vetoes(x: np.ndarray, y: np.ndarray, max_error: float) -> list[str]:
    """Guards whose refusals are right on at least ``1 - max_error`` of the fit pairs they fire on."""
    from ragcache.semantic.features import FEATURE_NAMES, GUARD_FEATURES

    out = []
    for g in GUARD_FEATURES:
        fired = x[:, FEATURE_NAMES.index(f"g_{g}")] > 0.5
        if fired.sum() >= 5 and y[fired].mean() <= max_error:
            out.append(g)
    return out


def fit(feats: dict[str, tuple[np.ndarray, np.ndarray]], *, floors: list[float], precision: float,
        hard_weight: float, veto_error: float, l2: float, drop: tuple[str, ...] = ()) -> dict[str, Any]:
    """Fit and choose (module docstring). Returns the head and every measured figure. ``drop``:
    feature names left out (their columns zeroed, a dropped guard is no veto either), for ablations."""
    from ragcache.semantic.features import FEATURE_NAMES, GUARD_FEATURES
    from ragcache.semantic.verifier import VerifierHead, fit_logistic

    if drop:
        cols = [FEATURE_NAMES.index(n) for n in drop]
        feats = {k: (_zeroed(x, cols), y) for k, (x, y) in feats.items()}
    fx, fy = feats["fit"]
    hx = np.vstack([feats["hard"][0], feats["own"][0]])
    hy = np.concatenate([feats["hard"][1], feats["own"][1]])
    veto = [g for g in vetoes(np.vstack([fx, hx]), np.concatenate([fy, hy]), veto_error) if f"g_{g}" not in drop]
    vcols = [FEATURE_NAMES.index(f"g_{g}") for g in veto]
    best: dict[str, Any] | None = None
    trials = []
    for floor in floors:
        keep = (fx[:, 0] >= floor) & ~(fx[:, vcols] > 0.5).any(1)
        hkeep = (hx[:, 0] >= floor) & ~(hx[:, vcols] > 0.5).any(1)
        x = np.vstack([fx[keep], hx[hkeep]])
        y = np.concatenate([fy[keep], hy[hkeep]])
        w = np.concatenate([np.ones(int(keep.sum())), np.full(int(hkeep.sum()), hard_weight)])
        mean, scale, weights, bias = fit_logistic(x, y, sample_weight=w, l2=l2)
        head = VerifierHead(FEATURE_NAMES, mean, scale, weights, bias, 0.5, floor, tuple(veto), "all-MiniLM-L6-v2")
        cx, cy = feats["choose"]
        t = choose_threshold(_scores(head, cx), cy, _scores(head, feats["hard"][0]), feats["hard"][1], precision)
        if t is None:
            trials.append({"floor": floor, "threshold": None})
            continue
        head = head.with_threshold(t)
        pc, rc, _ = precision_recall(_scores(head, cx) >= t, cy)
        trials.append({"floor": floor, "threshold": t, "choose_precision": pc, "choose_recall": rc})
        if best is None or rc > best["choose_recall"]:
            best = {"head": head, "choose_recall": rc}
    if best is None:
        raise SystemExit(f"no gate in {floors} reaches precision {precision} on the choose split")
    head = best["head"]
    report = {name: dict(zip(("precision", "recall", "hits"), precision_recall(_scores(head, x) >= head.threshold, y)))
              for name, (x, y) in feats.items()}
    return {"head": head, "trials": trials, "report": report, "vetoes": veto, "guards": list(GUARD_FEATURES)}


def _zeroed(x: np.ndarray, cols: list[int]) -> np.ndarray:
    x = x.copy()
    x[:, cols] = 0.0
    return x


ABLATIONS: dict[str, tuple[str, ...]] = {
    "all features (shipped)": (),
    "no token alignment": ("tok_f", "tok_min", "tok_low"),
    "no guards": tuple(f"g_{g}" for g in ("number", "negation", "question_type", "focus", "antonym", "scope",
                                            "entity", "direction", "substitution")),
    "no length / overlap": ("len_ratio", "len_max", "jac_words", "jac_content", "shared_min"),
    **{f"without {g}": (f"g_{g}",) for g in ("number", "negation", "question_type", "focus", "antonym", "scope",
                                             "entity", "direction", "substitution")},
}
"""Feature sets left out in the ablation table (README): each refitted and re-chosen the same way."""


def ablation(feats: dict[str, tuple[np.ndarray, np.ndarray]], **options: Any) -> list[dict[str, Any]]:
    """For each of :data:`ABLATIONS`: the choose-split (development) and hard-pair precision / recall
    of the head refitted without those features; the held-out split is not read."""
    rows = []
    for name, drop in ABLATIONS.items():
        try:
            res = fit({k: v for k, v in feats.items() if k != "heldout"}, drop=drop, **options)
        except SystemExit as e:
            rows.append({"ablation": name, "error": str(e)})
            continue
        r = res["report"]
        rows.append({"ablation": name, "gate": res["head"].floor, "vetoes": res["vetoes"],
                     "choose_precision": r["choose"]["precision"], "choose_recall": r["choose"]["recall"],
                     "hard_precision": r["hard"]["precision"], "hard_recall": r["hard"]["recall"]})
    return rows


def _scores(head: Any, x: np.ndarray) -> np.ndarray:
    """The decider's outcome as a score: 0 below the gate or on a veto, else the head's probability."""
    from ragcache.semantic.features import FEATURE_NAMES

    p = head.score(x)
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
    ap.add_argument("--floors", type=float, nargs="+", default=[0.70, 0.75, 0.80, 0.85, 0.88])
    ap.add_argument("--precision", type=float, default=0.965, help="choose-split precision the threshold must reach")
    ap.add_argument("--hard-weight", type=float, default=5.0)
    ap.add_argument("--veto-error", type=float, default=0.05)
    ap.add_argument("--l2", type=float, default=1.0)
    ap.add_argument("--ablation", type=Path, default=None, help="also write the ablation table (JSON) here")
    a = ap.parse_args(argv)
    sets = load_sets(a.data, a.fit_pairs)
    feats = features(sets, a.cache)
    opts = {"floors": a.floors, "precision": a.precision, "hard_weight": a.hard_weight, "veto_error": a.veto_error,
            "l2": a.l2}
    res = fit(feats, **opts)
    if a.ablation is not None:
        from ragcache.atomic import atomic_write_json

        table = ablation(feats, **opts)
        atomic_write_json(a.ablation, {"options": opts, "rows": table})
        for row in table:
            print(json.dumps(row))
    head = res["head"]
    sizes = {k: {"pairs": len(v), "same": sum(r["same"] for r in v)} for k, v in sets.items()}
    try:
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                                cwd=Path(__file__).parent, check=False).stdout.strip()
    except OSError:
        commit = ""
    card = {"command": "python -m ragcache.app.fit_verifier --data ../shared/data",
            "options": {"fit_pairs": a.fit_pairs, **opts}, "data": sizes, "licence": "derived from Quora Question Pairs (non-commercial research use)",
        "trials": res["trials"], "measured": res["report"], "commit": commit}
    from ragcache.semantic.verifier import VerifierHead

    head = VerifierHead(head.names, head.mean, head.scale, head.weights, head.bias, head.threshold, head.floor,
                        head.vetoes, head.embedder, card)
    from ragcache.atomic import atomic_write_json

    atomic_write_json(a.out, head.to_json(), indent=1)
    print(json.dumps({"floor": head.floor, "threshold": head.threshold, "vetoes": list(head.vetoes),
                      "trials": res["trials"], "measured": res["report"]}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
