"""The learned hit decision: a logistic head over pair features, run on the top candidates.

A candidate at or above the cache's cosine gate is served when the head's probability that the
two questions want the same answer reaches the head's ``threshold``, and no hard-veto guard refuses
it: every guard whose finding marks a different question
(:data:`~ragcache.semantic.decision.guards.DIFFERENT_QUESTION`) is a hard veto, so the head only adds hits the
guards refuse for being too strict. The features (:mod:`ragcache.semantic.decision.features`) are the pooled cosine, BERTScore-style token
alignment from the embedder already loaded, each guard's finding, and length / overlap. The
shipped head (``verifier_minilm.json``, a few KB) was fitted for all-MiniLM-L6-v2 on development
data only, by ``python -m ragcache.app.fit_verifier --data ../shared/data`` (the README's data card
names the data and its licence); ``ragcache calibrate semantic`` refits the threshold to a
deployment's own labelled pairs (:mod:`ragcache.semantic.decision.calibration`).

Logistic regression fitted by Newton's method (iteratively reweighted least squares, with an L2
penalty on the weights), on standardised features; see Hastie, Tibshirani & Friedman, *The
Elements of Statistical Learning*, 2nd ed., section 4.4.1.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from ragcache.semantic.decision.features import (
    FEATURE_NAMES,
    feature_guards,
    question_pair_features,
)
from ragcache.semantic.decision.guards import DIFFERENT_QUESTION, GuardSet, GuardVerdict
from ragcache.semantic.text import embed_form, exact_form, request_core, words

if TYPE_CHECKING:
    from ragcache.semantic.embedding import QuestionEmbedder

HEAD_FILE = "verifier_minilm.json"
"""The shipped head, in ``ragcache/semantic/data``."""


@dataclass(frozen=True, slots=True)
class VerifierHead:
    """A fitted logistic head: ``p = sigmoid(bias + weights . (x - mean) / scale)``.

    Attributes:
        names: feature names (must equal :data:`FEATURE_NAMES`); mean, scale, weights: ``[features]``.
        threshold: hit when ``p >= threshold``; floor: the cosine gate below which no candidate is
            verified (the cache's default threshold); vetoes: guards that refuse outright, whatever
            the score; embedder: name of the embedder the head was fitted for; card: how and on what;
            max_words: the longest question (words) the head is used for (0: no limit); a longer
            one is outside what it was fitted on and every guard decides instead.
    """

    names: tuple[str, ...]
    mean: np.ndarray
    scale: np.ndarray
    weights: np.ndarray
    bias: float
    threshold: float
    floor: float
    vetoes: tuple[str, ...]
    embedder: str
    card: dict[str, Any] = field(default_factory=dict)
    max_words: int = 0

    def score(self, x: np.ndarray) -> np.ndarray:
        """Probabilities ``[n]`` for features ``x [n, features]`` (or ``[features]`` -> ``[1]``)."""
        x = np.atleast_2d(np.asarray(x, dtype=np.float64))
        z = self.bias + ((x - self.mean) / self.scale) @ self.weights
        return 1.0 / (1.0 + np.exp(-np.clip(z, -50, 50)))

    def with_threshold(self, threshold: float) -> VerifierHead:
        """The same head with another decision threshold (a calibration record's)."""
        return VerifierHead(self.names, self.mean, self.scale, self.weights, self.bias, float(threshold),
                            self.floor, self.vetoes, self.embedder, self.card, self.max_words)

    def to_json(self) -> dict[str, Any]:
        return {"names": list(self.names), "mean": self.mean.round(6).tolist(), "scale": self.scale.round(6).tolist(),
                "weights": self.weights.round(6).tolist(), "bias": round(self.bias, 6), "threshold": self.threshold,
                "floor": self.floor, "vetoes": list(self.vetoes), "embedder": self.embedder, "max_words": self.max_words,
                "card": self.card}

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> VerifierHead:
        """Raises ValueError when the record's features are not this version's :data:`FEATURE_NAMES`."""
        names = tuple(d["names"])
        if names != FEATURE_NAMES:
            raise ValueError(f"verifier head has features {names}, this ragcache computes {FEATURE_NAMES}; refit it "
                             f"(python -m ragcache.app.fit_verifier)")
        arr = [np.asarray(d[k], dtype=np.float64) for k in ("mean", "scale", "weights")]
        return cls(names, *arr, float(d["bias"]), float(d["threshold"]), float(d["floor"]), tuple(d["vetoes"]),
                   str(d["embedder"]), dict(d.get("card", {})), int(d.get("max_words", 0)))


def fit_logistic(x: np.ndarray, y: np.ndarray, *, sample_weight: np.ndarray | None = None, l2: float = 1.0,
                 iters: int = 50) -> tuple[np.ndarray, np.ndarray, np.ndarray, float]:
    """Fit ``P(y=1 | x)`` by Newton's method on standardised features.

    Args:
        x: ``[n, f]`` features; y: ``[n]`` labels in {0, 1}; sample_weight: ``[n]`` (default ones);
        l2: penalty on the weights (not the bias), in units of total sample weight.

    Returns:
        ``(mean [f], scale [f], weights [f], bias)`` for :class:`VerifierHead`.

    Raises:
        ValueError: shapes disagree, or only one class is present.
    """
    x, y = np.asarray(x, np.float64), np.asarray(y, np.float64)
    if x.ndim != 2 or y.shape != (len(x),):
        raise ValueError(f"x must be [n, f] and y [n]; got {x.shape} and {y.shape}")
    if y.min() == y.max():
        raise ValueError("fit_logistic needs both labels (same and not same) among the pairs")
    w = np.ones(len(y)) if sample_weight is None else np.asarray(sample_weight, np.float64)
    mean, scale = x.mean(0), x.std(0)
    scale[scale < 1e-9] = 1.0
    z = np.hstack([np.ones((len(x), 1)), (x - mean) / scale])
    beta = np.zeros(z.shape[1])
    pen = np.full(z.shape[1], l2)
    pen[0] = 0.0
    for _ in range(iters):
        p = 1.0 / (1.0 + np.exp(-np.clip(z @ beta, -50, 50)))
        grad = z.T @ (w * (p - y)) + pen * beta
        hess = (z * (w * p * (1 - p))[:, None]).T @ z + np.diag(pen + 1e-9)
        step = np.linalg.solve(hess, grad)
        beta -= step
        if np.abs(step).max() < 1e-8:
            break
    return mean, scale, beta[1:], float(beta[0])


def load_head(path: str | Path | None = None) -> VerifierHead:
    """The head in ``path``, or the shipped one (``ragcache/semantic/data/verifier_minilm.json``).

    Raises:
        ValueError: the file is not a head of this version (the message says how to refit).
    """
    if path is None:
        text = resources.files("ragcache.semantic").joinpath("data", HEAD_FILE).read_text(encoding="utf-8")
    else:
        text = Path(path).read_text(encoding="utf-8")
    return VerifierHead.from_json(json.loads(text))


class LearnedVerifier:
    """The decider ``check(query, candidate, similarity) -> GuardVerdict`` of the learned head.

    Args:
        embedder: the cache's :class:`~ragcache.semantic.embedding.QuestionEmbedder` (token states
            and, when ``similarity`` is not given, the pooled cosine come from it).
        head: the fitted :class:`VerifierHead`.

    A refusal names the first hard-veto guard that refused (``number``, ``negation`` ...), or
    ``verifier`` with the score. ``floor`` is the cosine gate the head was fitted above.

    At cosine ``>= SUBSTITUTION_VETO`` (0.94, the guards' own gate) a replaced word is a veto too: two
    questions that share every other word in order ("Can I return a bike after 30 days?" / "... within
    30 days?", "a header row" / "a header column") ask something else, and the head, which weighs the
    cosine, served them. Below it a replaced word stays a feature (a paraphrase's usual shape).
    """

    SUBSTITUTION_VETO = 0.94
    """Cosine at and above which the ``substitution`` guard refuses outright."""

    name = "verifier"

    def __init__(self, embedder: QuestionEmbedder, head: VerifierHead) -> None:
        self.embedder = embedder
        self.head = head
        self.floor = head.floor
        self.guards = feature_guards()
        self._all = GuardSet.default()
        self._vetoes = [g for g in self._all.guards if g.name in self.veto_names]
        self._substitution = [g for g in self._all.guards if g.name == "substitution"]

    def _veto(self, query: str, candidate: str, similarity: float | None = None) -> GuardVerdict | None:
        """The first hard veto that refuses; with ``similarity``, only the substitution guard, and only at
        cosine >= ``SUBSTITUTION_VETO``."""
        if similarity is None:
            gs = self._vetoes
        else:
            gs = self._substitution if similarity >= self.SUBSTITUTION_VETO else []
        for g in gs:
            detail = g.check(query, candidate)
            if detail is not None:
                return GuardVerdict(g.name, detail)
        return None

    @property
    def veto_names(self) -> tuple[str, ...]:
        """The guards that refuse outright: every guard whose finding marks a different question
        (:data:`~ragcache.semantic.decision.guards.DIFFERENT_QUESTION`, the one list) and any more the head names."""
        return (*DIFFERENT_QUESTION, *(v for v in self.head.vetoes if v not in DIFFERENT_QUESTION))

    @property
    def names(self) -> list[str]:
        """Guards run (the feature guards, and the hard vetoes :attr:`veto_names`), then the head."""
        return [*dict.fromkeys([*(g.name for g in self.guards), *self.veto_names]), "verifier"]

    def features(self, query: str, candidate: str, similarity: float | None = None) -> np.ndarray:
        """The pair's feature vector (:func:`~ragcache.semantic.decision.features.question_pair_features`:
        request wrappers dropped, as at fitting)."""
        qa, qb = embed_form(query), embed_form(candidate)
        if similarity is None:
            va, vb = self.embedder.encode([qa, qb])
            similarity = float(va @ vb)
        ta, tb = self.embedder.token_states(qa), self.embedder.token_states(qb)
        return question_pair_features(query, candidate, float(similarity), ta, tb, self.guards)

    def score(self, query: str, candidate: str, similarity: float | None = None) -> float:
        """Probability that ``candidate``'s answer may be served for ``query``."""
        return float(self.head.score(self.features(query, candidate, similarity))[0])

    def decision_score(self, query: str, candidate: str, similarity: float | None = None) -> float:
        """:meth:`score` as the cache decides: 0.0 below the cosine gate or when a hard veto refuses;
        for a question longer than ``head.max_words``, 1.0 or 0.0 as every guard decides."""
        x = self.features(query, candidate, similarity)
        if x[0] < self.floor:
            return 0.0
        q, c = request_core(query), request_core(candidate)  # wrappers dropped once (GuardSet.check does it itself)
        if self._too_long(q, c):
            return 1.0 if self._all.check(query, candidate).ok else 0.0
        if self._veto(q, c) is not None or self._veto(q, c, float(x[0])) is not None:
            return 0.0
        return float(self.head.score(x)[0])

    def _too_long(self, query: str, candidate: str) -> bool:
        return bool(self.head.max_words) and max(len(words(query)), len(words(candidate))) > self.head.max_words

    def check(self, query: str, candidate: str, similarity: float | None = None) -> GuardVerdict:
        if exact_form(query) == exact_form(candidate):
            return GuardVerdict()  # the same text (case and symbols included): an exact repeat is served
        q, c = request_core(query), request_core(candidate)  # wrappers dropped once (GuardSet.check does it itself)
        if self._too_long(q, c):
            return self._all.check(query, candidate)  # longer than any question the head was fitted on
        veto = self._veto(q, c)  # the different-question vetoes first: no model needed
        if veto is None:
            x = self.features(query, candidate, similarity)
            veto = self._veto(q, c, float(x[0]))  # and a replaced word at a high cosine
        if veto is not None:
            return veto
        p = float(self.head.score(x)[0])
        if p < self.head.threshold:
            return GuardVerdict("verifier", f"verifier score {p:.3f} < {self.head.threshold:.3f}")
        return GuardVerdict()


def default_verifier(embedder: QuestionEmbedder, head: VerifierHead | None = None, *,
                     home: Any = None) -> LearnedVerifier | None:
    """The learned decider for ``embedder``, or ``None`` when the shipped head does not fit it.

    The head is used only for the embedder it was fitted for (its name ends the embedder's name,
    e.g. ``all-MiniLM-L6-v2``, in any case) and one that exposes token states; the cache then falls back to the
    guards. A calibration record for this embedder under ``home`` (:meth:`ragcache.home.Home.of`)
    replaces the threshold.
    """
    if not embedder.has_tokens:
        return None
    head = load_head() if head is None else head
    if not embedder.name.lower().endswith(head.embedder.lower()):
        return None
    from ragcache.semantic.decision.calibration import recorded_threshold

    t = recorded_threshold(embedder, head, home)
    return LearnedVerifier(embedder, head if t is None else head.with_threshold(t))


def calibrated_verifier(embedder: QuestionEmbedder, *, home: Any = None) -> LearnedVerifier | None:
    """The learned decider with the threshold of this deployment's own calibration record
    (``ragcache calibrate semantic``), or ``None`` when there is no record for ``embedder``: a
    record says the verifier meets the user's precision on the user's pairs, so a default cache then
    decides with it."""
    from ragcache.semantic.decision.calibration import record_path, recorded_threshold

    if not record_path(embedder.fingerprint, home).is_file():
        return None  # the usual case: no record, so neither the head nor a lazy embedder's model is loaded
    if not embedder.has_tokens:
        return None
    head = load_head()
    if not embedder.name.lower().endswith(head.embedder.lower()):
        return None
    t = recorded_threshold(embedder, head, home)
    return None if t is None else LearnedVerifier(embedder, head.with_threshold(t))


__all__ = ["HEAD_FILE", "LearnedVerifier", "VerifierHead", "calibrated_verifier", "default_verifier", "fit_logistic", "load_head"]
