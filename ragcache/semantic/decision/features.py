"""Pair features for the learned hit decision (:mod:`ragcache.semantic.decision.verifier`).

For a query and a cached candidate question the verifier reads one float vector
(:data:`FEATURE_NAMES`, all symmetric in the two questions):

- ``cos``, ``cos2``: the pooled cosine the store found, and its square (the head is linear);
- ``tok_f``, ``tok_min``, ``tok_low``: token-level alignment as in BERTScore (Zhang et al., ICLR
  2020, arXiv 1904.09675, section 3: greedy matching of contextual embeddings): every word piece's
  best cosine in the other question, from the embedder's own last layer
  (:meth:`~ragcache.semantic.embedding.QuestionEmbedder.token_states`). ``tok_f`` is the F1 of the
  two mean best matches, ``tok_min`` the worst-matched piece on either side (one replaced word
  shows here when the pooled cosine stays high), ``tok_low`` the share of pieces matched below 0.6;
- ``g_<guard>``: 1.0 when that guard of :class:`~ragcache.semantic.decision.guards.GuardSet` refuses the pair;
- ``len_ratio``, ``len_max``: |log| word-count ratio, longer length / 20;
- ``jac_words``, ``jac_content``, ``shared_min``: word-set Jaccard, content-stem Jaccard, shared
  content stems over the shorter side's.

Without token states (an embedder that exposes none) the three ``tok_*`` features are computed
from the pooled cosine alone (``tok_f = cos``, ``tok_min = cos``, ``tok_low = 0``): a head fitted
with token states must not be used then, and :func:`ragcache.semantic.decision.verifier.default_verifier`
only returns one for the embedder it was fitted on.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from ragcache.semantic.decision.guards import Guard, GuardSet
from ragcache.semantic.text import content_words, request_core, stem, words

GUARD_FEATURES: tuple[str, ...] = ("number", "negation", "question_type", "focus", "antonym", "scope", "entity",
                                   "direction", "substitution")
"""Guards whose findings are features (every default guard)."""

FEATURE_NAMES: tuple[str, ...] = ("cos", "cos2", "tok_f", "tok_min", "tok_low",
                                  *(f"g_{g}" for g in GUARD_FEATURES),
                                  "len_ratio", "len_max", "jac_words", "jac_content", "shared_min")
"""Order of the feature vector."""


def token_alignment(a: np.ndarray | None, b: np.ndarray | None, cos: float) -> tuple[float, float, float]:
    """BERTScore-style greedy alignment of unit word-piece vectors ``a [m, d]`` and ``b [n, d]``.

    Returns ``(F1 of the mean best matches, worst best match on either side, share of pieces
    whose best match is below 0.6)``; ``(cos, cos, 0.0)`` when either side is missing or empty.
    """
    if a is None or b is None or len(a) == 0 or len(b) == 0:
        return cos, cos, 0.0
    s = a @ b.T
    ra, rb = s.max(1), s.max(0)
    p, r = float(ra.mean()), float(rb.mean())
    f = 2 * p * r / (p + r) if p + r > 0 else 0.0
    low = (float((ra < 0.6).sum()) + float((rb < 0.6).sum())) / (len(ra) + len(rb))
    return f, float(min(ra.min(), rb.min())), low


def guard_findings(guards: Sequence[Guard], query: str, candidate: str) -> dict[str, bool]:
    """``{guard name: refused}`` for every guard (all run, not only up to the first refusal)."""
    return {g.name: g.check(query, candidate) is not None for g in guards}


def question_pair_features(query: str, candidate: str, cos: float, tok_q: np.ndarray | None,
                           tok_c: np.ndarray | None, guards: Sequence[Guard]) -> np.ndarray:
    """:func:`pair_features` of two normalised questions as the cache compares them: request wrappers
    dropped (:func:`~ragcache.semantic.text.request_core`) before the guards' findings and the text
    features; ``cos`` and the token states come from their :func:`~ragcache.semantic.text.embed_form`.
    The one place the lookup (:class:`~ragcache.semantic.decision.verifier.LearnedVerifier`) and the
    fitting and calibration data (:func:`ragcache.app.verifier_data.featurize`) build a pair's row."""
    q, c = request_core(query), request_core(candidate)
    return pair_features(q, c, cos, tok_q, tok_c, guard_findings(guards, q, c))


def _jaccard(a: set[str], b: set[str]) -> float:
    return len(a & b) / len(a | b) if a | b else 1.0


def pair_features(query: str, candidate: str, cos: float, tok_q: np.ndarray | None, tok_c: np.ndarray | None,
                  findings: dict[str, bool]) -> np.ndarray:
    """The feature vector ``[len(FEATURE_NAMES)]`` (float64) of one pair; ``findings`` from
    :func:`guard_findings` (a guard missing from it counts as passed)."""
    f, mn, low = token_alignment(tok_q, tok_c, cos)
    return np.concatenate([[cos, cos * cos, f, mn, low], text_features(query, candidate, findings)])


EMBEDDING_FEATURES = 5
"""The first features, read from the embeddings (the rest only from the two texts)."""


def text_features(query: str, candidate: str, findings: dict[str, bool]) -> np.ndarray:
    """The features after the first :data:`EMBEDDING_FEATURES`: guard findings, length, overlap."""
    wa, wb = words(query), words(candidate)
    ca, cb = {stem(w) for w in content_words(query)}, {stem(w) for w in content_words(candidate)}
    la, lb = max(len(wa), 1), max(len(wb), 1)
    shared = len(ca & cb) / min(len(ca), len(cb)) if ca and cb else 0.0
    g = [1.0 if findings.get(name, False) else 0.0 for name in GUARD_FEATURES]
    return np.array([*g, abs(math.log(la / lb)), max(la, lb) / 20.0, _jaccard(set(wa), set(wb)), _jaccard(ca, cb),
                     shared], dtype=np.float64)


def feature_guards() -> list[Guard]:
    """The guards whose findings :func:`pair_features` reads: the default :class:`GuardSet`'s named in
    :data:`GUARD_FEATURES`, in that order (the shipped head was fitted on these; guards added since
    refuse through the verifier's hard vetoes, :data:`ragcache.semantic.decision.guards.DIFFERENT_QUESTION`)."""
    by_name = {g.name: g for g in GuardSet.default().guards}
    missing = [n for n in GUARD_FEATURES if n not in by_name]
    if missing:
        raise RuntimeError(f"the verifier's feature guards {missing} are not among the default guards {list(by_name)}")
    return [by_name[n] for n in GUARD_FEATURES]


__all__ = ["EMBEDDING_FEATURES", "FEATURE_NAMES", "GUARD_FEATURES", "feature_guards", "guard_findings", "pair_features",
           "text_features", "token_alignment"]
