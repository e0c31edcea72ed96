"""Calibration of the hit decision on a deployment's own labelled pairs (``ragcache calibrate semantic``).

Given pairs ``{"a", "b", "same"}`` (``same``: the answer cached for ``a`` may be served for ``b``)
and a precision target, :func:`calibrate_pairs` scores every pair with the learned verifier as the
cache would decide it (0 below the cosine gate or on a hard veto) and picks the lowest score
threshold (so the most hits) whose precision is shown with confidence: the one-sided Wilson
score lower bound (Wilson, JASA 1927) on precision over the pairs served at that threshold must
reach the target. Too few pairs cannot show it: with ``n`` served pairs all correct the bound is
``n / (n + z^2)``, so precision 0.97 at confidence 0.95 needs at least 88 pairs labelled ``same``
that the cache serves; fewer are refused before anything is scored, with that count.

The record lives in ``$RAGCACHE_HOME/calibration/semantic-<embedder digest>.json`` (atomic write,
like the KV calibration of :mod:`ragcache.engine.blend.calibration`) and names the head it was fitted
for; every cache on that embedder with the default decider then uses its threshold. A record for
another head (the shipped head refitted) is ignored with a warning.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from statistics import NormalDist
from typing import TYPE_CHECKING, Any

import numpy as np

from ragcache.atomic import atomic_write_json
from ragcache.home import Home

if TYPE_CHECKING:
    from ragcache.semantic.embedding import QuestionEmbedder

log = logging.getLogger(__name__)


@dataclass(slots=True)
class SemanticCalibration:
    """A recorded decision threshold for one embedder and head.

    Attributes:
        embedder / fingerprint: the embedder's name and fingerprint; head: sha256 of the head's weights.
        threshold: verifier score threshold; precision / confidence: the target and its confidence;
        pairs / same: labelled pairs read and those labelled same; hits / correct: pairs served at the
        threshold and the right ones; observed / lower_bound: their precision and its Wilson bound;
        recall: correct / same; created: UTC time (ISO 8601).
    """

    embedder: str
    fingerprint: str
    head: str
    threshold: float
    precision: float
    confidence: float
    pairs: int
    same: int
    hits: int
    correct: int
    observed: float
    lower_bound: float
    recall: float
    created: str = field(default_factory=lambda: datetime.now(timezone.utc).isoformat(timespec="seconds"))


def z_of(confidence: float) -> float:
    """The one-sided normal quantile; ``confidence`` must lie in [0.5, 1)."""
    if isinstance(confidence, bool) or not isinstance(confidence, int | float) or not 0.5 <= confidence < 1.0:
        raise ValueError(f"confidence must be in [0.5, 1), got {confidence!r}")
    return NormalDist().inv_cdf(confidence)


def wilson_lower(correct: int, n: int, confidence: float = 0.95) -> float:
    """One-sided Wilson score lower bound on a proportion ``correct / n`` (0.0 when ``n == 0``)."""
    if n == 0:
        return 0.0
    z = z_of(confidence)
    p, z2n = correct / n, z * z / n
    spread = z * math.sqrt(p * (1 - p) / n + z2n / (4 * n))
    return max(0.0, (p + z2n / 2 - spread) / (1 + z2n))


def pairs_needed(precision: float, confidence: float = 0.95) -> int:
    """The fewest served pairs, all correct, whose Wilson lower bound reaches ``precision``."""
    if not 0.0 < precision < 1.0:
        raise ValueError(f"precision must be in (0, 1), got {precision!r}")
    z = z_of(confidence)
    n = max(1, math.ceil(z * z * precision / (1 - precision)))
    while wilson_lower(n, n, confidence) < precision:
        n += 1
    return n


def head_digest(head: Any) -> str:
    """sha256 of a head's weights, bias and gate (a refitted head gets another digest)."""
    d = head.to_json()
    payload = json.dumps([d["names"], d["mean"], d["scale"], d["weights"], d["bias"], d["floor"], d["vetoes"]])
    return hashlib.sha256(payload.encode()).hexdigest()


def record_path(fingerprint: str, home: Home | str | Path | None = None) -> Path:
    """``<home>/calibration/semantic-<sha256(fingerprint)[:32]>.json`` (:meth:`ragcache.home.Home.of`)."""
    digest = hashlib.sha256(fingerprint.encode()).hexdigest()[:32]
    return Home.of(home).calibration_file(f"semantic-{digest}.json")


def check_enough(pairs: Sequence[dict[str, Any]], *, precision: float, confidence: float = 0.95) -> int:
    """:func:`pairs_needed`, after checking that ``pairs`` hold that many labelled ``same``.

    Raises:
        ValueError: fewer; the message says how many are needed and how many more to label.
    """
    need = pairs_needed(precision, confidence)
    same = sum(bool(r["same"]) for r in pairs)
    if same < need:
        raise ValueError(f"precision {precision:g} at confidence {confidence:g} needs at least {need} pairs labelled "
                         f"same that the cache would serve (all correct); the file has {same} labelled same "
                         f"({len(pairs)} pairs). Label at least {need - same} more duplicate pairs, or lower --precision.")
    return need


def calibrate_pairs(verifier: Any, pairs: Sequence[dict[str, Any]], *, precision: float,
                    confidence: float = 0.95) -> SemanticCalibration:
    """Choose the verifier threshold for ``pairs`` (module docstring).

    Args:
        verifier: a :class:`~ragcache.semantic.decision.verifier.LearnedVerifier` (its embedder and head).
        pairs: rows with ``a``, ``b`` (str) and ``same`` (bool).
        precision: target in (0, 1); confidence: in [0.5, 1).

    Raises:
        ValueError: fewer pairs labelled ``same`` than :func:`pairs_needed`, or no threshold whose
            lower bound reaches the target (the message says how many more pairs would be needed).
    """
    need = check_enough(pairs, precision=precision, confidence=confidence)
    same = sum(bool(r["same"]) for r in pairs)
    from ragcache.semantic.text import normalize_question

    scores = np.array([verifier.decision_score(normalize_question(r["a"]), normalize_question(r["b"]))
                       for r in pairs])
    y = np.array([bool(r["same"]) for r in pairs])
    order = np.argsort(-scores, kind="stable")
    best: tuple[float, int, int] | None = None
    tp = 0
    for k, i in enumerate(order, 1):
        tp += int(y[i])
        if scores[i] <= 0 or (k < len(order) and scores[order[k]] == scores[i]):
            continue  # thresholds only between distinct scores
        if wilson_lower(tp, k, confidence) >= precision:
            best = (float(scores[i]), k, tp)
    if best is None:
        raise ValueError(_shortfall(scores, y, precision, confidence, need))
    t, hits, correct = best
    return SemanticCalibration(str(verifier.embedder.name), str(verifier.embedder.fingerprint), head_digest(verifier.head),
                               t, precision, confidence, len(pairs), same, hits, correct, correct / hits,
                               wilson_lower(correct, hits, confidence), correct / max(same, 1))


def _shortfall(scores: np.ndarray, y: np.ndarray, precision: float, confidence: float, need: int) -> str:
    served = scores > 0
    p = float(y[served].mean()) if served.any() else 0.0
    msg = (f"no threshold shows precision {precision:g} at confidence {confidence:g} on these pairs: the cache "
           f"would serve {int(served.sum())} of them at precision {p:.3f}")
    if p > precision:
        n = need
        while wilson_lower(round(p * n), n, confidence) < precision and n < 10**7:
            n = math.ceil(n * 1.2)
        msg += f"; at that precision about {n} served pairs would show it"
    return msg + ". Add labelled pairs, or lower --precision."


def save_record(cal: SemanticCalibration, home: Home | str | Path | None = None) -> Path:
    """Write ``cal`` atomically under ``home``; returns the path."""
    path = record_path(cal.fingerprint, home)
    atomic_write_json(path, asdict(cal))
    return path


def load_record(fingerprint: str, home: Home | str | Path | None = None) -> SemanticCalibration | None:
    """The record for this embedder, or ``None`` (absent, unreadable, another embedder's)."""
    path = record_path(fingerprint, home)
    try:
        cal = SemanticCalibration(**json.loads(path.read_text(encoding="utf-8")))
    except FileNotFoundError:
        return None
    except (OSError, ValueError, TypeError) as e:
        log.warning("ignoring unreadable semantic calibration %s (%s); run `ragcache calibrate semantic` again", path, e)
        return None
    return cal if cal.fingerprint == fingerprint else None


def recorded_threshold(embedder: QuestionEmbedder, head: Any, home: Home | str | Path | None = None) -> float | None:
    """The recorded threshold for ``embedder`` and ``head``, or ``None`` (no record, or one fitted
    for another head: then a warning says to calibrate again)."""
    cal = load_record(embedder.fingerprint, home)
    if cal is None:
        return None
    if cal.head != head_digest(head):
        log.warning("semantic calibration %s was fitted for another verifier head; ignoring it (run `ragcache "
                    "calibrate semantic` again)", record_path(cal.fingerprint, home))
        return None
    return cal.threshold


__all__ = ["SemanticCalibration", "calibrate_pairs", "check_enough", "head_digest", "load_record", "pairs_needed", "record_path",
           "recorded_threshold", "save_record", "wilson_lower"]
