"""The per-model blend calibration record, and the teacher-forced measures a blend is judged by.

A small model's greedy continuation flips after almost any change, so answer F1 against full
prefill alone cannot see a blend's effect (ragcache issue 12). Teacher-forced measures can: the
full-prefill greedy answer ``a_0 .. a_{T-1}`` is fed to both the full-prefill cache and the blended
cache (:func:`teacher_forced_logits`), and at each answer position the two next-token distributions
are compared (:func:`fidelity`: top-1 agreement with ``a_i`` and ``KL(p_full || p_blend)`` in nats).

The decision is the license rule's (:mod:`ragcache.engine.blend.license`, ragcache issue 40): a
calibration (:func:`ragcache.engine.blend.setting.calibrate_settings`; ``ragcache calibrate`` or
:meth:`LocalEngine.calibrate <ragcache.engine.engine.LocalEngine.calibrate>`) measures candidate
settings and records a :class:`Calibration` that names the rule and the setting it licenses, if
any. A record of the retired pooled-agreement rule (a one-sided Wilson lower bound of the pooled
top-1 agreement, :func:`agreement_lower_bound`, which the decode-cache check still uses) loads and
licenses nothing; without a licensed setting :class:`~ragcache.engine.engine.LocalEngine` takes exact
prefill.
Records live in ``$RAGCACHE_HOME/calibration/<fingerprint digest>.json`` (atomic writes). A model
without one there falls back to the record packaged with ragcache for it (:data:`PACKAGED_DIR`), so
a default engine follows measured evidence; a record under ``$RAGCACHE_HOME`` always wins.
"""

from __future__ import annotations

import json
import logging
import math
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from statistics import NormalDist
from typing import TYPE_CHECKING, Any

from ragcache.atomic import atomic_write_json
from ragcache.home import Home

if TYPE_CHECKING:
    import torch

    from ragcache.engine.interface import EngineView
    from ragcache.identity import ModelFingerprint

log = logging.getLogger(__name__)

@dataclass(slots=True)
class Calibration:
    """A recorded fidelity check for one model.

    Attributes:
        fingerprint: the model fingerprint digest (hex sha256) the record belongs to.
        model: readable model identity.
        recompute_ratio: the smallest r meeting the bound, or ``None`` when none does.
        blend_allowed: whether the engine may blend at all for this model.
        min_agreement: the bound on teacher-forced top-1 agreement.
        confidence: one-sided confidence of the Wilson lower bound that must reach
            ``min_agreement`` (0: the pooled agreement itself; records written before this field
            existed read as 0, and were decided on the mean over prompts).
        max_ratio: the largest r considered worth blending at.
        ratios: per r: ``{"r", "top1_agreement" (mean over prompts), "pooled_top1_agreement" (over
            all answer tokens), "agreement_lower_bound", "min_top1_agreement", "mean_kl", "per_prompt"}``.
        prefill_tokens_per_s: exact prefill rate measured on the calibration prompts (wall time;
            for information: the engine's cost rule uses the rate it measures itself).
        prompts / answer_tokens: how many prompts, and the teacher-forced answer length (tokens).
        chunk_dtype / sink_ids: how the chunk KV was stored and computed.
        check_layer: CacheBlend's check layer used.
        rank_by: the selection rule measured (``blend_prefill``'s ``rank_by``; records written before
            this field existed read as ``"deviation"``, CacheBlend's rule); the engine blends with it.
        created: UTC time of the run (ISO 8601).
        setting: the licensed :class:`~ragcache.engine.blend.setting.BlendSetting` as a dict (records of
            :func:`~ragcache.engine.blend.setting.calibrate_settings`; ``None`` otherwise; read it with
            :func:`~ragcache.engine.blend.setting.licensed_setting`).
        settings: every candidate setting measured, with its pooled agreement, lower bound, mean
            recomputed share and CPU speed-up (:func:`~ragcache.engine.blend.setting.setting_row`).
        max_mean_share: the cap on the mean recomputed share a licensed setting must meet.
        note: how the record was made (command, items, machine).
        rule: the license rule the record was decided by (:meth:`LicenseRule.to_dict
            <ragcache.engine.blend.license.LicenseRule.to_dict>`, with its ``name``). A record without
            one, or under another rule's name (the retired pooled-agreement rule), loads and licenses
            nothing (:meth:`from_dict`).
        yardstick: the same model's bfloat16-vs-float32 full-prefill flip rates on the calibration
            prompts (:func:`~ragcache.engine.blend.setting.precision_yardstick`), reported, never gating.
    """

    fingerprint: str
    model: str
    recompute_ratio: float | None
    blend_allowed: bool
    min_agreement: float
    max_ratio: float
    ratios: list[dict] = field(default_factory=list)
    prefill_tokens_per_s: float | None = None
    prompts: int = 0
    answer_tokens: int = 0
    chunk_dtype: str = "float16"
    sink_ids: list[int] = field(default_factory=list)
    check_layer: int = 1
    created: str = ""
    confidence: float = 0.0
    rank_by: str = "deviation"
    setting: dict | None = None
    settings: list[dict] = field(default_factory=list)
    max_mean_share: float | None = None
    note: str = ""
    rule: dict | None = None
    yardstick: dict | None = None

    def verdict(self) -> str:
        """One line naming what this record measured, the rule it was decided by and what it licenses.

        Under the license rule (:mod:`ragcache.engine.blend.license`): the licensed setting with the
        rule's four figures (decisive flips and their upper bound, large-margin flips, free-running F1
        against full prefill's, median CPU speed-up), or the closest candidate and the conditions it
        fails. A record of the retired pooled-agreement rule says so and licenses nothing, e.g.
        ``"calibration record (50 prompts, 991 answer tokens, 2026-12-02, retired pooled-agreement rule):
        no setting licensed; best infoflow r=0.3 prefix-conditioned, pooled top-1 agreement 0.949, lower
        bound 0.936 < 0.95"``."""
        rows = self.settings or self.ratios
        tokens = rows[0].get("answer_tokens", 0) if rows else 0  # every row pools the same answer tokens
        head = f"calibration record ({self.prompts} prompts, {tokens} answer tokens, {self.created[:10] or 'undated'})"
        if self.rule is not None and any("license" in r for r in rows):
            return self._license_verdict(head, rows)
        if self.rule is None and rows:
            head = head[:-1] + ", retired pooled-agreement rule)"
        if self.blend_allowed:
            what = (self.setting or {}).get("name") or f"r={self.recompute_ratio:g} ({self.rank_by})"
            row = next((r for r in self.settings if r.get("name") == what), None)
            if row is None:
                return f"{head}: licenses {what}"
            return (f"{head}: licenses {what} (pooled top-1 agreement {row['pooled_top1_agreement']:.3f}, lower "
                    f"bound {row['agreement_lower_bound']:.3f} >= {self.min_agreement:g})")
        if not rows:
            return f"{head}: licenses no blend"
        best = max(rows, key=lambda r: r.get("agreement_lower_bound", 0.0))
        name = best.get("name") or f"r={best.get('r', 0):g} ({self.rank_by})"
        bound = best.get("agreement_lower_bound", 0.0)
        agreement = f"pooled top-1 agreement {best.get('pooled_top1_agreement', 0.0):.3f}"
        cap = self.max_mean_share if self.settings else None
        share = best.get("mean_share")
        if bound >= self.min_agreement and cap is not None and share is not None and share > cap:
            # the bound passed: the cost cap refused it (say so, with enough digits to show why)
            return (f"{head}: no setting licensed; best {name}, {agreement}, lower bound {bound:.4f} >= "
                    f"{self.min_agreement:g} but mean recomputed share {share:.5f} > {cap:g}")
        digits = 3 if round(bound, 3) < self.min_agreement else 4  # never "0.950 < 0.95"
        return (f"{head}: no {'setting' if self.settings else 'ratio'} licensed; best {name}, {agreement}, "
                f"lower bound {bound:.{digits}f} < {self.min_agreement:g}")

    def _license_verdict(self, head: str, rows: list[dict]) -> str:
        from ragcache.engine.blend.license import LicenseRule, describe

        rule = LicenseRule.from_dict(self.rule)
        head = f"{head}, rule {self.rule.get('name')}"
        if self.blend_allowed and self.setting:
            row = next(r for r in rows if r.get("name") == self.setting.get("name"))
            return f"{head}: licenses {row['name']} ({describe(row['license'], rule)})"
        best = min(rows, key=lambda r: (len(r["license"]["failed"]), -r["license"]["median_cpu_speedup"]))
        return (f"{head}: no setting licensed; closest {best['name']} fails {', '.join(best['license']['failed'])} "
                f"({describe(best['license'], rule)})")

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> Calibration:
        """From :meth:`to_dict` output; a record not decided by the current license rule
        (:data:`~ragcache.engine.blend.license.RULE_NAME`) is read as licensing nothing."""
        from ragcache.engine.blend.license import RULE_NAME

        known = {k: d[k] for k in cls.__dataclass_fields__ if k in d}
        cal = cls(**known)
        if (cal.rule or {}).get("name") != RULE_NAME and cal.blend_allowed:
            cal.blend_allowed, cal.recompute_ratio, cal.setting = False, None, None
            cal.note = (f"{cal.note}; " if cal.note else "") + "decided by a retired rule: licenses nothing"
        return cal


def record_digest(fingerprint: str | ModelFingerprint) -> str:
    """The key of a calibration record: a :class:`~ragcache.identity.ModelFingerprint`'s ``weights_digest`` (the
    chat template left out: a record measures the weights), or a digest given as a str (a record's own
    ``fingerprint`` field)."""
    return fingerprint if isinstance(fingerprint, str) else fingerprint.weights_digest


def calibration_path(fingerprint: str | ModelFingerprint, home: Home | str | Path | None = None) -> Path:
    """``<home>/calibration/<digest>.json`` (:meth:`ragcache.home.Home.of`: ``None`` is ``~/.cache/ragcache``)."""
    return Home.of(home).calibration_file(f"{record_digest(fingerprint)}.json")


PACKAGED_DIR = Path(__file__).resolve().parents[1] / "data" / "calibration"
"""Records that ship with ragcache, ``<fingerprint digest>.json`` (read when the home has none)."""


def load_calibration(fingerprint: str | ModelFingerprint, home: Home | str | Path | None = None, *,
                     packaged: bool = True, also: Sequence[ModelFingerprint] = ()) -> Calibration | None:
    """The recorded calibration of this model, or ``None`` (absent, unreadable, or another model's).

    The record under ``home`` (default ``~/.cache/ragcache``; the CLI passes ``$RAGCACHE_HOME``) wins;
    without one, the record packaged for this fingerprint (:data:`PACKAGED_DIR`) when ``packaged``.
    ``also``: other identities of the very same weights, tried in order after ``fingerprint``
    (:func:`ragcache.models.calibration_identities`: the embedded model named by its weights' digest)."""
    for fp in (fingerprint, *also):
        path = calibration_path(fp, home)
        cal = _read_record(path, fp)
        if cal is None and packaged and not path.exists():
            cal = _read_record(PACKAGED_DIR / f"{record_digest(fp)}.json", fp)
        if cal is not None or path.exists():
            return cal
    return None


def model_calibration(fingerprint: ModelFingerprint, home: Home | str | Path | None = None) -> Calibration | None:
    """The calibration record an engine on this model reads: :func:`load_calibration` by ``fingerprint``,
    then by the other identities of the same weights (:func:`ragcache.models.calibration_identities`).
    The one lookup of a loaded engine and of its prediction
    (:class:`~ragcache.engine.predicted.PredictedEngine`), so both name the same blend setting."""
    from ragcache.models import calibration_identities

    return load_calibration(fingerprint, home, also=calibration_identities(fingerprint, home)[1:])


def _read_record(path: Path, fingerprint: str | ModelFingerprint) -> Calibration | None:
    try:
        cal = Calibration.from_dict(json.loads(path.read_text()))
    except FileNotFoundError:
        return None
    except (OSError, ValueError, TypeError) as e:
        log.warning("ignoring unreadable calibration %s (%s); run `ragcache calibrate` again", path, e)
        return None
    if cal.fingerprint != record_digest(fingerprint):
        log.warning("calibration %s belongs to another model; ignoring it", path)
        return None
    return cal


def save_calibration(cal: Calibration, home: Home | str | Path | None = None) -> Path:
    """Write ``cal`` atomically; returns the path."""
    path = calibration_path(cal.fingerprint, home)
    atomic_write_json(path, cal.to_dict())
    return path


def teacher_forced_logits(model: Any, cache: Any, first_logits: torch.Tensor, answer: Sequence[int],
                          start: int) -> torch.Tensor:
    """Next-token logits at each answer position, float32 ``[len(answer), vocab]``.

    Row 0 is ``first_logits`` (the prompt's last position); rows ``1..`` come from one forward
    of ``answer[:-1]`` at positions ``start..`` appended to ``cache`` (which is modified).
    """
    import torch

    from ragcache.engine import kv

    rows = [first_logits.float()[None]]
    if len(answer) > 1:
        rows.append(kv.forward(model, list(answer[:-1]), cache, start, logits_to_keep=len(answer) - 1))
    return torch.cat(rows)


def fidelity(reference: torch.Tensor, other: torch.Tensor, answer: Sequence[int]) -> tuple[float, float]:
    """(top-1 agreement, mean KL(reference || other) in nats) over the answer positions.

    Args:
        reference / other: float ``[T, vocab]`` logits at the same positions.
        answer: the ``T`` reference tokens (the reference's argmax at each position).
    """
    import torch

    target = torch.as_tensor(list(answer))
    agree = (other.argmax(-1) == target).float().mean().item()
    lp, lq = torch.log_softmax(reference.float(), -1), torch.log_softmax(other.float(), -1)
    kl = (lp.exp() * (lp - lq)).sum(-1).mean().item()
    return agree, max(kl, 0.0)


def check_confidence(confidence: Any) -> float:
    """``confidence`` as a float after checking it is 0 or in [0.5, 1) (see :func:`agreement_lower_bound`).

    Raises:
        ValueError: anything else, naming the accepted values.
    """
    ok = not isinstance(confidence, bool) and isinstance(confidence, int | float) and (
        confidence == 0.0 or 0.5 <= confidence < 1.0)
    if not ok:
        raise ValueError(f"confidence must be in [0.5, 1) (e.g. 0.95) or 0 (the pooled agreement itself), got "
                         f"{confidence!r}: below 0.5 the Wilson bound lies above the observed agreement")
    return float(confidence)


def agreement_lower_bound(agreement: float, n: int, confidence: float = 0.95) -> float:
    """One-sided Wilson score lower bound of a proportion (Wilson, "Probable inference, the law of
    succession, and statistical inference", JASA 22(158), 1927).

    Args:
        agreement: observed share in [0, 1] (here: teacher-forced top-1 agreement).
        n: number of trials (answer tokens), an integer >= 0; 0 gives 0.
        confidence: 0 (returns ``agreement`` itself) or in [0.5, 1). Below 0.5 the Wilson
            quantile lies *above* the observed share, so it would loosen the gate it is meant to
            tighten; such values are refused.

    Tokens of one answer are not independent, so the bound is if anything optimistic; it still
    keeps a few short answers from licensing blending.

    Raises:
        ValueError: ``agreement`` outside [0, 1] or NaN, ``n`` not an integer >= 0, or ``confidence``
            not 0 or in [0.5, 1) (NaN, a str, 1.0, 0.3).
    """
    check_confidence(confidence)
    if isinstance(agreement, bool) or not isinstance(agreement, int | float) or not 0.0 <= agreement <= 1.0:
        raise ValueError(f"agreement must be a share in [0, 1], got {agreement!r}")
    if isinstance(n, bool) or not hasattr(type(n), "__index__") or n < 0:
        raise ValueError(f"n must be a count of trials (an integer >= 0), got {n!r}")
    if n == 0:
        return 0.0
    if confidence == 0.0:
        return agreement
    z = NormalDist().inv_cdf(confidence)
    z2n = z * z / n
    centre = agreement + z2n / 2
    spread = z * math.sqrt(agreement * (1 - agreement) / n + z2n / (4 * n))
    return max(0.0, (centre - spread) / (1 + z2n))


def greedy_answer(model: Any, cache: Any, logits: torch.Tensor, start: int, answer_tokens: int,
                  eos: set[int] | frozenset[int]) -> tuple[list[int], torch.Tensor]:
    """Greedy decode from ``cache`` (which is extended): ``(answer ids, the logits that chose each)``.

    Args:
        logits: the next-token logits at the prompt's last position (``[vocab]``).
        start: the prompt's length (the first answer token's position).
        answer_tokens: the budget (tokens, >= 1); decoding stops after an EOS id or at the budget.

    Returns:
        ``(answer, rows)``: up to ``answer_tokens`` ids, and float32 ``[len(answer), vocab]``.
    """
    import torch

    from ragcache.engine import kv

    answer: list[int] = []
    rows = []
    for step in range(answer_tokens):
        tok = int(logits.argmax())
        answer.append(tok)
        rows.append(logits.float()[None])
        if tok in eos or step == answer_tokens - 1:
            break
        logits = kv.forward(model, [tok], cache, start + step)[-1]
    return answer, torch.cat(rows)


def reference_answer(engine: EngineView, ids: Sequence[int],
                     answer_tokens: int) -> tuple[list[int], torch.Tensor, float, float]:
    """Full prefill of ``ids`` and its greedy answer: the reference a blend is judged against.

    Returns:
        ``(answer, reference, cpu_s, wall_s)``: the answer's token ids (up to ``answer_tokens``,
        stopping at EOS), the logits that chose each of them (float32 ``[len(answer), vocab]``), and
        the CPU and wall seconds of the prefill alone.
    """
    from ragcache.engine import kv
    from ragcache.engine.decode import eos_ids

    model, n = engine.model, len(ids)
    c0, w0 = time.process_time(), time.perf_counter()
    ref_cache = kv.new_cache(model)
    logits = kv.forward(model, list(ids), ref_cache, 0)[-1]
    cpu_s, wall_s = time.process_time() - c0, time.perf_counter() - w0
    answer, rows = greedy_answer(model, ref_cache, logits, n, answer_tokens, eos_ids(model, engine.tokenizer))
    return answer, rows, cpu_s, wall_s
