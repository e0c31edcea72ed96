"""The blend license rule: when may a blend setting serve answers at the defaults (ragcache issue 40).

A setting is judged against full prefill on calibration prompts, along the full prefill's greedy
answer (teacher-forced, :func:`ragcache.engine.blend.setting.measure_settings`). At each answer
position the *margin* m is the full prefill's top-1 logit minus its top-2 logit; a token is
**decisive** when ``m >= decisive_margin`` (1.0 logit). Tokens with a smaller margin are near ties:
any change to the KV (a blend, a batch size, a precision) can flip them, so they are reported,
never counted against a blend (the MarginGate observation, arXiv 2605.30218: exact serving stacks
flip 0.3-1.3% of decode steps, almost all at low top-1 / top-2 margins).

A candidate is **licensed** when all four hold (:class:`LicenseRule`):

1. *decisive flips*: the one-sided upper confidence bound of its flip rate on decisive tokens is
   ``<= max_decisive_flip_rate`` (1%). The bound is a percentile bootstrap over **prompts** (whole
   prompts resampled with replacement, ``resamples`` times, fixed ``seed``; Efron & Tibshirani,
   "An Introduction to the Bootstrap", 1993, ch. 13), at confidence ``1 - alpha / k`` for the
   ``k`` candidates of the plan (Bonferroni): tokens of one answer are not independent, prompts are.
2. *no large flip*: no flip on a token with ``m >= large_margin`` (3.0), over at least
   ``min_large_tokens`` (300) such tokens.
3. *answers keep their quality*: the mean gold F1 of its free-running greedy answers is >= the
   mean gold F1 of full prefill's answers minus ``max_f1_drop`` (0.02), on the same prompts
   (CacheBlend's own acceptance, Yao et al., EuroSys 2025, arXiv 2405.16444, §7; scoring as
   SQuAD: first line, normalised, multiset word F1, best gold kept).
4. *it pays*: the median CPU speed-up over full prefill is >= ``min_speedup`` (1.5x).

Among licensed candidates the fastest (largest median CPU speed-up) ships. Reported beside the
verdict and never gating it: all-token agreement, mean KL, the exact-match rate of the free-running
answers, and the same model's bfloat16-vs-float32 full-prefill flip rates (the yardstick).
"""

from __future__ import annotations

import re
import statistics
import string
from collections import Counter
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

RULE_NAME = "decisive-flips-v1"
"""The name records carry for this rule; a record under any other rule licenses nothing."""


@dataclass(frozen=True, slots=True)
class LicenseRule:
    """The four conditions of the license (module doc), with their thresholds.

    Attributes:
        decisive_margin: logits; a token is decisive when the full prefill's top-1 leads its top-2
            by at least this.
        max_decisive_flip_rate: bound on the upper confidence bound of the decisive flip rate (share).
        alpha: family-wise one-sided error; each of ``k`` candidates is bounded at ``1 - alpha / k``.
        resamples / seed: the prompt-level bootstrap.
        large_margin / min_large_tokens: no flip allowed at or above this margin, over at least this
            many such tokens.
        max_f1_drop: mean gold F1 (free-running) may fall at most this far below full prefill's.
        min_speedup: median CPU speed-up over full prefill (x).

    Raises:
        ValueError: a threshold out of range, naming it.
    """

    decisive_margin: float = 1.0
    max_decisive_flip_rate: float = 0.01
    alpha: float = 0.05
    resamples: int = 10_000
    seed: int = 0
    large_margin: float = 3.0
    min_large_tokens: int = 300
    max_f1_drop: float = 0.02
    min_speedup: float = 1.5

    def __post_init__(self) -> None:
        checks = {"decisive_margin": self.decisive_margin >= 0, "large_margin": self.large_margin >= self.decisive_margin,
                  "max_decisive_flip_rate": 0 <= self.max_decisive_flip_rate < 1, "alpha": 0 < self.alpha < 1,
                  "resamples": int(self.resamples) >= 100, "min_large_tokens": int(self.min_large_tokens) >= 0,
                  "max_f1_drop": 0 <= self.max_f1_drop <= 1, "min_speedup": self.min_speedup > 0}
        bad = [k for k, ok in checks.items() if not ok]
        if bad:
            raise ValueError(f"license rule: {bad[0]}={getattr(self, bad[0])!r} is out of range "
                             "(margins >= 0 with large >= decisive, rates and alpha in (0, 1), resamples >= 100)")

    def to_dict(self) -> dict[str, Any]:
        return {"name": RULE_NAME, **asdict(self)}

    @classmethod
    def from_dict(cls, d: dict[str, Any] | None) -> LicenseRule:
        """From :meth:`to_dict` output (``name`` and unknown keys ignored; missing keys take the defaults)."""
        d = d or {}
        return cls(**{k: d[k] for k in cls.__dataclass_fields__ if k in d})


# -- answer scoring (CacheBlend / SQuAD style) -------------------------------------------------
def normalize_answer(text: str) -> str:
    """First line, lower-cased, punctuation and articles (a/an/the) removed, spaces collapsed."""
    text = text.strip().split("\n")[0].lower()
    text = "".join(ch for ch in text if ch not in set(string.punctuation))
    text = re.sub(r"\b(a|an|the)\b", " ", text)
    return " ".join(text.split())


def token_f1(prediction: str, reference: str) -> float:
    """Multiset word-overlap F1 of two normalised answers (1.0 when both are empty)."""
    p, r = normalize_answer(prediction).split(), normalize_answer(reference).split()
    if not p or not r:
        return float(p == r)
    common = sum((Counter(p) & Counter(r)).values())
    if common == 0:
        return 0.0
    precision, recall = common / len(p), common / len(r)
    return 2 * precision * recall / (precision + recall)


def best_f1(prediction: str, golds: Sequence[str]) -> float:
    """F1 against each gold answer, best one kept (0.0 with no gold)."""
    return max((token_f1(prediction, g) for g in golds), default=0.0)


# -- the four figures --------------------------------------------------------------------------
def decisive_counts(per_prompt: Sequence[dict], margin: float) -> tuple[np.ndarray, np.ndarray]:
    """Per prompt: (decisive tokens, flips among them), int arrays ``[P]``.

    Each prompt dict needs ``ref_margin`` (the full prefill's top-1 minus top-2 logit at each answer
    position) and ``mismatch`` (the positions where the setting's top-1 differs from the reference).

    Raises:
        ValueError: a prompt without ``ref_margin`` (measured without token detail).
    """
    dec, flips = [], []
    for p in per_prompt:
        if "ref_margin" not in p:
            raise ValueError(f"prompt {p.get('prompt')} has no ref_margin: measure with token_detail=True")
        m = p["ref_margin"]
        dec.append(sum(1 for x in m if x >= margin))
        flips.append(sum(1 for t in p.get("mismatch", []) if m[t] >= margin))
    return np.asarray(dec, dtype=np.int64), np.asarray(flips, dtype=np.int64)


def bootstrap_upper(events: Sequence[int], trials: Sequence[int], confidence: float, *, resamples: int = 10_000,
                    seed: int = 0) -> float:
    """One-sided percentile-bootstrap upper bound of a pooled rate ``sum(events) / sum(trials)``.

    Whole units (prompts) are resampled with replacement: ``events[i]`` of ``trials[i]`` belong to
    prompt i, so tokens of one answer move together. Deterministic for a ``seed``.

    Args:
        events / trials: per-prompt counts (same length P >= 1).
        confidence: one-sided, in (0.5, 1).
        resamples: bootstrap resamples.

    Returns:
        The ``confidence`` quantile of the resampled pooled rate (a resample without trials counts 0).

    Raises:
        ValueError: empty or mismatched counts, or a confidence outside (0.5, 1).
    """
    e, t = np.asarray(events, dtype=np.float64), np.asarray(trials, dtype=np.float64)
    if e.shape != t.shape or e.ndim != 1 or len(e) == 0:
        raise ValueError(f"events and trials must be equal-length 1-D counts; got {e.shape} and {t.shape}")
    if not 0.5 < confidence < 1.0:
        raise ValueError(f"confidence must be in (0.5, 1); got {confidence!r}")
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, len(e), size=(int(resamples), len(e)))
    te = e[idx].sum(1)
    tt = t[idx].sum(1)
    rates = np.divide(te, tt, out=np.zeros_like(te), where=tt > 0)
    return float(np.quantile(rates, confidence, method="higher"))


def judge(row: dict, rule: LicenseRule, k: int) -> dict:
    """The four figures of one measured setting and whether each condition holds.

    Args:
        row: ``{"per_prompt": [...]}`` of :func:`~ragcache.engine.blend.setting.measure_settings` run with
            ``token_detail=True`` and gold answers (``ref_f1`` / ``f1`` per prompt).
        rule: the thresholds.
        k: candidates in the plan (the Bonferroni divisor), >= 1.

    Returns:
        ``{"licensed", "failed": [condition names], "decisive_tokens", "decisive_flips", "decisive_flip_rate",
        "decisive_flip_upper", "confidence", "large_tokens", "large_flips", "f1", "ref_f1", "f1_diff",
        "median_cpu_speedup", "near_tie_tokens", "near_tie_flips", "answer_exact_match"}``.

    Raises:
        ValueError: no prompts, ``k < 1``, or prompts measured without token detail / gold answers.
    """
    pp = row["per_prompt"]
    if not pp or k < 1:
        raise ValueError(f"judge needs measured prompts and k >= 1; got {len(pp)} prompts, k={k}")
    if any("f1" not in p or "ref_f1" not in p for p in pp):
        raise ValueError("prompts measured without gold answers: pass golds to measure_settings")
    confidence = 1.0 - rule.alpha / k
    dec, flips = decisive_counts(pp, rule.decisive_margin)
    large, large_flips = decisive_counts(pp, rule.large_margin)
    near = sum(sum(1 for x in p["ref_margin"] if x < rule.decisive_margin) for p in pp)
    near_flips = sum(sum(1 for t in p["mismatch"] if p["ref_margin"][t] < rule.decisive_margin) for p in pp)
    upper = bootstrap_upper(flips, dec, confidence, resamples=rule.resamples, seed=rule.seed) if dec.sum() else 1.0
    f1 = statistics.fmean(p["f1"] for p in pp)
    ref_f1 = statistics.fmean(p["ref_f1"] for p in pp)
    speedup = statistics.median(p["full_cpu_s"] / p["cpu_s"] for p in pp)
    failed = []
    if upper > rule.max_decisive_flip_rate:
        failed.append("decisive flips")
    if int(large_flips.sum()) > 0 or int(large.sum()) < rule.min_large_tokens:
        failed.append("large-margin flips")
    if f1 < ref_f1 - rule.max_f1_drop:
        failed.append("answer F1")
    if speedup < rule.min_speedup:
        failed.append("speed-up")
    return {"licensed": not failed, "failed": failed, "decisive_tokens": int(dec.sum()),
            "decisive_flips": int(flips.sum()), "decisive_flip_rate": float(flips.sum() / max(int(dec.sum()), 1)),
            "decisive_flip_upper": upper, "confidence": confidence, "large_tokens": int(large.sum()),
            "large_flips": int(large_flips.sum()), "f1": f1, "ref_f1": ref_f1, "f1_diff": f1 - ref_f1,
            "median_cpu_speedup": speedup, "near_tie_tokens": near, "near_tie_flips": near_flips,
            "answer_exact_match": statistics.fmean(float(p.get("answer_match", False)) for p in pp)}


def choose(rows: Sequence[dict]) -> dict | None:
    """The licensed row with the largest median CPU speed-up (``row["license"]["licensed"]``), or ``None``."""
    ok = [r for r in rows if r.get("license", {}).get("licensed")]
    return max(ok, key=lambda r: r["license"]["median_cpu_speedup"]) if ok else None


def describe(lic: dict, rule: LicenseRule) -> str:
    """The four figures in one line, e.g. ``"decisive flips 4/1530 (upper 0.62% <= 1%), m >= 3: 0 flips of
    812, F1 0.412 vs full 0.405 (-0.007 >= -0.02), 2.61x >= 1.5x"``, failures marked."""
    def mark(ok: bool) -> str:
        return "" if ok else " FAILS"

    return (f"decisive flips {lic['decisive_flips']}/{lic['decisive_tokens']} (upper {lic['decisive_flip_upper']:.2%} at "
            f"{lic['confidence']:.4g} vs <= {rule.max_decisive_flip_rate:.0%}{mark('decisive flips' not in lic['failed'])}), "
            f"m >= {rule.large_margin:g}: {lic['large_flips']} flips of {lic['large_tokens']} (need 0 of >= "
            f"{rule.min_large_tokens}{mark('large-margin flips' not in lic['failed'])}), "
            f"F1 {lic['f1']:.3f} vs full {lic['ref_f1']:.3f} ({lic['f1_diff']:+.3f} >= -{rule.max_f1_drop:g}"
            f"{mark('answer F1' not in lic['failed'])}), "
            f"median CPU speed-up {lic['median_cpu_speedup']:.2f}x (>= {rule.min_speedup:g}x"
            f"{mark('speed-up' not in lic['failed'])})")


__all__ = ["RULE_NAME", "LicenseRule", "best_f1", "bootstrap_upper", "choose", "decisive_counts", "describe", "judge",
           "normalize_answer", "token_f1"]
