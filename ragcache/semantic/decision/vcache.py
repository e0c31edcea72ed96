"""Per-entry hit decisions under a user-set error bound, after vCache.

Source: L. G. Schroeder et al., "vCache: Verified Semantic Prompt Caching", arXiv 2502.03771
(ICLR 2026), the method section (per-embedding threshold estimation, confidence in the threshold,
the exploration probability) and its Algorithm 1; the reference implementation is
``vcache/vcache_policy/strategies/verified.py`` in github.com/vcache-project/vCache (read, not copied).

Each cached entry keeps observations ``(s, c)``: the similarity ``s`` of a later question whose
nearest acceptable entry it was, and whether the entry's answer was correct for it (``c``), known
from an *exploration*: the question was answered fresh and the two answers compared. From them a
sigmoid ``P(correct | s) = sigmoid(gamma * (s - t))`` is fitted (logistic regression). The
threshold ``t`` is uncertain, so the decision uses a lower confidence bound on ``P(correct | s)``:
for each level ``eps`` of a grid, ``t'`` is the ``1 - eps`` upper quantile of ``t`` (normal, with
the delta-method variance of ``t_hat``), and ``(1 - eps) * sigmoid(gamma * (s - t'))`` is a lower
bound; the best over the grid is kept (:func:`correct_lower_bound`).

The exploration probability (:func:`explore_probability`):

- ``scope="lookups"`` is vCache's rule: explore with ``tau = 1 - delta / (1 - alpha)`` (``alpha``
  the lower bound), so that ``P(served and wrong)`` per lookup stays ``<= delta``.
- ``scope="hits"`` (ragcache's default) bounds the error *among served hits*, the figure a user
  reads (our adaptation, labelled): the same budget idea over hits instead of lookups. Serving a
  candidate costs its expected error ``1 - alpha`` (an upper bound, ``alpha`` being a lower
  bound); it is served when the costs of all hits served so far plus its own stay within
  ``delta`` times the hits (a hit with the same words costs 0), with a 95% margin for the
  randomness of the realised errors, else explored.

Changes from the paper, labelled:

- An entry's sigmoid is fitted on its own observations plus the pooled observations of every
  entry this process has seen, scaled to :data:`POOL_WEIGHT` pseudo-observations (a prior, as
  vCache's global-threshold variant pools them all; the entry's own evidence overrides it as it
  grows). vCache explores an entry until it has six observations of both outcomes; on questions
  that come in small clusters (QQP: mostly pairs) few entries ever get six.
- Separable observations (every correct ``s`` above every wrong one) make the logistic
  regression's maximum-likelihood slope infinite. vCache then reads the threshold's variance from
  a table it measured; here a weak Gaussian prior on the two coefficients keeps the fit finite and
  its Laplace (inverse Hessian) covariance gives the variance (:func:`fit_sigmoid`).
- A guard's rejection stays a hard veto in front: a rejected candidate is a miss, never explored.

All functions are pure over the entry's ``state`` (a JSON object: ``{"obs": [[s, c], ...]}``).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from statistics import NormalDist
from typing import Any, Literal

import numpy as np

MAX_OBSERVATIONS = 256
"""Observations kept per entry (the most recent), so a state stays a small JSON object."""

POOL_WEIGHT = 200.0
"""Pseudo-observations the pooled evidence of all entries counts for in one entry's fit. Chosen on
the first half of ``qqp_dev_20k.jsonl`` (stream benchmark, tuning half) among 20 / 200 / 2000:
20 kept the observed error at about half the bound, 2000 exceeded the bound at 0.02 (0.022)."""

BUDGET_Z = 1.645
"""One-sided 95% normal quantile: the margin of the hit error budget (:func:`explore_probability`)."""

PRIOR_PRECISION = 1e-4
"""Precision of the Gaussian prior on the logistic coefficients (intercept, slope over s - 0.5)."""

_EPS_GRID = np.unique(np.r_[np.geomspace(1e-4, 0.05, 24), np.linspace(0.05, 1 - 1e-6, 40)])
_Z = np.array([NormalDist().inv_cdf(1 - e) for e in _EPS_GRID])

Scope = Literal["hits", "lookups"]


@dataclass(frozen=True, slots=True)
class SigmoidFit:
    """``P(correct | s) = sigmoid(gamma * (s - t_hat))`` fitted on ``n`` observations; ``var_t`` is
    the variance of ``t_hat`` (similarity units squared)."""

    t_hat: float
    gamma: float
    var_t: float
    n: int


def check_max_error(max_error: Any) -> float | None:
    """``None`` (no bound: the static threshold decides) or an error rate in (0, 1), as float.

    Raises:
        ValueError: anything else (e.g. ``2`` for 2 %: pass ``0.02``).
    """
    if max_error is None:
        return None
    if isinstance(max_error, bool) or not isinstance(max_error, (int, float)) or not 0.0 < float(max_error) < 1.0:
        raise ValueError(f"max_error must be an error rate in (0, 1) (0.02 = at most 2% wrong hits) or None, "
                         f"got {max_error!r}")
    return float(max_error)


def check_scope(scope: Any) -> Scope:
    """``"hits"`` or ``"lookups"``. Raises ValueError otherwise."""
    if scope not in ("hits", "lookups"):
        raise ValueError(f"error_scope must be 'hits' (error among served hits) or 'lookups' (vCache's "
                         f"error per lookup), got {scope!r}")
    return scope


def observations(state: Mapping[str, Any] | None) -> list[tuple[float, int]]:
    """The ``(similarity, correct)`` observations in an entry's state (``[]`` for none or a foreign state)."""
    obs = (state or {}).get("obs") if isinstance(state, Mapping) else None
    if not isinstance(obs, list):
        return []
    out = []
    for o in obs:
        if isinstance(o, (list, tuple)) and len(o) == 2 and isinstance(o[0], (int, float)):
            out.append((float(o[0]), 1 if o[1] else 0))
    return out


def add_observation(state: Mapping[str, Any] | None, similarity: float, correct: bool) -> dict[str, Any]:
    """A new state with ``(similarity, correct)`` appended (similarity rounded to 1e-4; the last
    :data:`MAX_OBSERVATIONS` kept); other keys of ``state`` are kept as they are."""
    out = dict(state or {})
    obs = [[s, c] for s, c in observations(state)]
    obs.append([round(float(similarity), 4), 1 if correct else 0])
    out["obs"] = obs[-MAX_OBSERVATIONS:]
    return out


def fit_sigmoid(sims: Sequence[float] | np.ndarray, labels: Sequence[int] | np.ndarray,
                weights: Sequence[float] | np.ndarray | None = None) -> SigmoidFit | None:
    """Weighted logistic regression ``logit P(correct) = a + b * (s - 0.5)`` by Newton's method,
    with a weak Gaussian prior of precision :data:`PRIOR_PRECISION` on ``(a, b)`` (finite under
    separation); ``weights`` (default 1 each) count each observation as that many.

    ``t_hat = 0.5 - a / b``, ``gamma = b``; ``var_t`` by the delta method over the Laplace
    covariance ``(X^T W X + prior)^-1`` (vCache, method section: variance of the threshold).
    Returns ``None`` unless both outcomes were observed, or when the slope is not positive
    (similarity does not predict correctness: never trust it).
    """
    s = np.asarray(sims, dtype=np.float64)
    y = np.asarray(labels, dtype=np.float64)
    w = np.ones_like(s) if weights is None else np.asarray(weights, dtype=np.float64)
    if s.size < 2 or not (np.any((y > 0) & (w > 0)) and np.any((y < 1) & (w > 0))):
        return None
    x = np.stack([np.ones_like(s), s - 0.5], axis=1)
    beta = np.zeros(2)
    prior = PRIOR_PRECISION * np.eye(2)
    for _ in range(100):
        p = 1.0 / (1.0 + np.exp(-np.clip(x @ beta, -60, 60)))
        grad = x.T @ (w * (y - p)) - prior @ beta
        hess = x.T @ (x * (w * p * (1 - p))[:, None]) + prior
        step = np.linalg.solve(hess, grad)
        beta += step
        if np.max(np.abs(step)) < 1e-7:
            break
    a, b = float(beta[0]), float(beta[1])
    if not b > 1e-6:
        return None
    p = 1.0 / (1.0 + np.exp(-np.clip(x @ beta, -60, 60)))
    cov = np.linalg.inv(x.T @ (x * (w * p * (1 - p))[:, None]) + prior)
    g = np.array([-1.0 / b, a / b**2])  # d t_hat / d (a, b)
    var_t = max(0.0, float(g @ cov @ g))
    return SigmoidFit(0.5 - a / b, b, var_t, int(round(float(w.sum()))))


def correct_lower_bound(fit: SigmoidFit, similarity: float) -> float:
    """Lower confidence bound on ``P(correct | similarity)``: the best over the grid of levels
    ``eps`` of ``(1 - eps) * sigmoid(gamma * (s - t'_eps))``, ``t'_eps`` the ``1 - eps`` upper
    quantile of the threshold (vCache, method section: the threshold is uncertain)."""
    t_prime = np.clip(fit.t_hat + _Z * math.sqrt(fit.var_t), 0.0, 1.0)
    like = 1.0 / (1.0 + np.exp(-np.clip(fit.gamma * (similarity - t_prime), -60, 60)))
    return float(np.max((1.0 - _EPS_GRID) * like))


def explore_probability(alpha: float, max_error: float, scope: Scope = "hits", *, spent: float = 0.0,
                        hits: int = 0, var: float = 0.0) -> float:
    """Probability of exploring (answer fresh, compare, learn) instead of serving, given the lower
    bound ``alpha`` on ``P(correct)``.

    ``scope="lookups"``: vCache's ``1 - delta / (1 - alpha)`` clipped to [0, 1].
    ``scope="hits"``: 0 when serving keeps the error budget, else 1. ``spent`` is the sum of
    ``1 - alpha`` and ``var`` the sum of ``alpha * (1 - alpha)`` over the ``hits`` hits served so
    far (a hit with the same words adds 0 to both); serving needs ``spent' + z * sqrt(var') <=
    delta * (hits + 1)`` with this candidate added and ``z`` = :data:`BUDGET_Z`, so the number of
    wrong hits exceeds ``delta`` times the hits with probability about 5% at most (normal
    approximation of a sum of Bernoulli errors), whenever the lower bounds hold.
    """
    if scope == "hits":
        cost, v = spent + (1.0 - alpha), var + alpha * (1.0 - alpha)
        return 0.0 if cost + BUDGET_Z * math.sqrt(v) <= max_error * (hits + 1) + 1e-12 else 1.0
    if alpha >= 1.0:
        return 0.0
    return float(min(1.0, max(0.0, 1.0 - max_error / (1.0 - alpha))))


@dataclass(frozen=True, slots=True)
class Pool:
    """Pooled observations of many entries, binned by similarity: ``sims`` bin centres (cosine),
    ``correct`` / ``wrong`` counts per bin (float arrays of one length)."""

    sims: np.ndarray
    correct: np.ndarray
    wrong: np.ndarray

    @property
    def n(self) -> float:
        return float(self.correct.sum() + self.wrong.sum())


def decision_fit(state: Mapping[str, Any] | None, pool: Pool | None,
                 pool_weight: float = POOL_WEIGHT) -> SigmoidFit | None:
    """The sigmoid that decides for an entry: fitted on its own observations (weight 1 each) plus
    the pooled observations scaled to ``pool_weight`` pseudo-observations in all (a prior that the
    entry's own evidence overrides as it grows; our change, see the module doc). ``None`` (the
    lookup is explored) until both outcomes have been seen."""
    obs = observations(state)
    s = [o[0] for o in obs]
    y = [o[1] for o in obs]
    w = [1.0] * len(obs)
    if pool is not None and pool.n > 0 and pool_weight > 0:
        scale = pool_weight / pool.n
        keep_c, keep_w = pool.correct > 0, pool.wrong > 0
        s += [*pool.sims[keep_c].tolist(), *pool.sims[keep_w].tolist()]
        y += [1] * int(keep_c.sum()) + [0] * int(keep_w.sum())
        w += [*(pool.correct[keep_c] * scale).tolist(), *(pool.wrong[keep_w] * scale).tolist()]
    return fit_sigmoid(s, y, w) if s else None


def should_explore(state: Mapping[str, Any] | None, similarity: float, max_error: float, u: float, *,
                   pool: Pool | None = None, scope: Scope = "hits", pool_weight: float = POOL_WEIGHT,
                   spent: float = 0.0, hits: int = 0, var: float = 0.0) -> tuple[bool, float]:
    """``(explore, alpha)`` for a lookup at ``similarity`` against an entry with ``state``: whether it
    explores (a miss that learns) rather than serves, and the lower bound ``alpha`` on
    ``P(correct)`` it was decided on (0 without a fit); ``u`` is a uniform draw in [0, 1) (explore
    when ``u < tau``); ``spent`` / ``hits``: the error budget so far (:func:`explore_probability`)."""
    fit = decision_fit(state, pool, pool_weight)
    if fit is None:
        return True, 0.0
    alpha = correct_lower_bound(fit, similarity)
    return u < explore_probability(alpha, max_error, scope, spent=spent, hits=hits, var=var), alpha
