"""Per-model blend fidelity check: which recompute ratio r (if any) keeps CacheBlend close to full prefill.

A small model's greedy continuation flips after almost any change, so answer F1 against full
prefill cannot see r (ragcache issue 12). Teacher-forced metrics can: the full-prefill greedy
answer ``a_0 .. a_{T-1}`` is fed to both the full-prefill cache and the blended cache, and at each
answer position the two next-token distributions are compared:

* top-1 agreement: the share of positions where the blended argmax equals ``a_i``
  (the full prefill's argmax, by construction);
* mean KL: ``KL(p_full || p_blend)`` averaged over the positions (nats).

:func:`calibrate` runs CacheBlend (every document taken from its independently computed chunk
KV, CacheBlend §5; :func:`ragcache.engine.blend.blend_prefill`) at a few r values on a few
prompts and records, keyed by the model fingerprint, the smallest r whose agreement meets the
bound (default 0.95) *with confidence*: the one-sided Wilson score lower bound (Wilson, JASA
1927; default confidence 0.95) of the agreement pooled over every teacher-forced answer token
must reach it, so a handful of prompts cannot license blending by luck (on SmolLM2-135M, 4
development prompts gave a mean of 0.978 at r = 0.5 where the evaluation split measured 0.93).
When no r <= ``max_ratio`` (default 0.5) meets it, the record says blending is not allowed and
:class:`~ragcache.engine.engine.LocalEngine` takes exact prefill.
Records live in ``$RAGCACHE_HOME/calibration/<fingerprint digest>.json`` (atomic writes). A model
without one there falls back to the record packaged with ragcache for it (:data:`PACKAGED_DIR`; the
embedded SmolLM2-135M ships one, measured as the README's CacheBlend section says), so a default
engine follows measured evidence; a record under ``$RAGCACHE_HOME`` always wins.
"""

from __future__ import annotations

import json
import logging
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from statistics import NormalDist
from typing import Any

import torch

from ragcache.atomic import atomic_write_json
from ragcache.engine import kv
from ragcache.home import Home

log = logging.getLogger(__name__)

DEFAULT_RATIOS = (0.05, 0.10, 0.15, 0.30, 0.50)


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


def record_digest(fingerprint: Any) -> str:
    """The key of a calibration record: a fingerprint's ``weights_digest`` (the chat template left out:
    a record measures the weights), or a digest given as a str."""
    return fingerprint if isinstance(fingerprint, str) else str(getattr(fingerprint, "weights_digest", fingerprint.digest))


def calibration_path(fingerprint: Any, home: Home | str | Path | None = None) -> Path:
    """``<home>/calibration/<digest>.json`` (:meth:`ragcache.home.Home.of`: ``None`` is ``~/.cache/ragcache``)."""
    return Home.of(home).calibration_file(f"{record_digest(fingerprint)}.json")


PACKAGED_DIR = Path(__file__).resolve().parents[1] / "data" / "calibration"
"""Records that ship with ragcache, ``<fingerprint digest>.json`` (read when the home has none)."""


def load_calibration(fingerprint: Any, home: Home | str | Path | None = None, *,
                     packaged: bool = True) -> Calibration | None:
    """The recorded calibration of this model, or ``None`` (absent, unreadable, or another model's).

    The record under ``home`` (default ``~/.cache/ragcache``; the CLI passes ``$RAGCACHE_HOME``) wins;
    without one, the record packaged for this fingerprint (:data:`PACKAGED_DIR`) when ``packaged``."""
    path = calibration_path(fingerprint, home)
    cal = _read_record(path, fingerprint)
    if cal is None and packaged and not path.exists():
        cal = _read_record(PACKAGED_DIR / f"{record_digest(fingerprint)}.json", fingerprint)
    return cal


def _read_record(path: Path, fingerprint: Any) -> Calibration | None:
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


def check_options(*, ratios: Sequence[float], min_agreement: float, max_ratio: float, answer_tokens: int,
                  confidence: float) -> list[float]:
    """Check :func:`calibrate`'s options before any work; returns the sorted ratios.

    Raises:
        ValueError: a ratio outside (0, 1] (or none), ``min_agreement`` outside (0, 1], ``max_ratio``
            outside [0, 1], ``answer_tokens`` not an integer >= 1, or a bad ``confidence``.
    """
    try:
        rs = sorted(float(r) for r in ratios)
    except (TypeError, ValueError):
        raise ValueError(f"ratios must be numbers in (0, 1], got {ratios!r}") from None
    if not rs or any(not 0.0 < r <= 1.0 for r in rs):
        raise ValueError(f"ratios must be in (0, 1], got {rs}")
    if isinstance(answer_tokens, bool) or not hasattr(type(answer_tokens), "__index__") or answer_tokens < 1:
        raise ValueError(f"answer_tokens must be an integer >= 1, got {answer_tokens!r}")
    for name, v, lo_open in (("min_agreement", min_agreement, True), ("max_ratio", max_ratio, False)):
        if isinstance(v, bool) or not isinstance(v, int | float) or not (0.0 < v <= 1.0 if lo_open else 0.0 <= v <= 1.0):
            raise ValueError(f"{name} must be in {'(0, 1]' if lo_open else '[0, 1]'}, got {v!r}")
    check_confidence(confidence)
    return rs


@torch.inference_mode()
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


def reference_answer(engine: Any, ids: Sequence[int],
                     answer_tokens: int) -> tuple[list[int], torch.Tensor, float, float]:
    """Full prefill of ``ids`` and its greedy answer: the reference a blend is judged against.

    Returns:
        ``(answer, reference, cpu_s, wall_s)``: the answer's token ids (up to ``answer_tokens``,
        stopping at EOS), the logits that chose each of them (float32 ``[len(answer), vocab]``), and
        the CPU and wall seconds of the prefill alone.
    """
    from ragcache.engine.decode import eos_ids

    model, n = engine.model, len(ids)
    c0, w0 = time.process_time(), time.perf_counter()
    ref_cache = kv.new_cache(model)
    logits = kv.forward(model, list(ids), ref_cache, 0)[-1]
    cpu_s, wall_s = time.process_time() - c0, time.perf_counter() - w0
    answer, rows = greedy_answer(model, ref_cache, logits, n, answer_tokens, eos_ids(model, engine.tokenizer))
    return answer, rows, cpu_s, wall_s


def calibrate(engine: Any, prompts: Sequence[Any], *, ratios: Sequence[float] = DEFAULT_RATIOS,
              min_agreement: float = 0.95, max_ratio: float = 0.5, answer_tokens: int = 32,
              confidence: float = 0.95, save: bool = True, rank_by: str | None = None,
              home: Home | str | Path | None = None, progress: Callable[[str], None] | None = None) -> Calibration:
    """Measure CacheBlend's teacher-forced fidelity against full prefill and record the r to use.

    Args:
        engine: a :class:`~ragcache.engine.engine.LocalEngine`; its chunk cache's storage dtype
            and sink are used (a default :class:`ChunkCache` when it has none). Nothing is stored
            in its caches.
        prompts: prompts with documents (PromptLayouts, messages lists with ``ragcache_kind``
            document blocks, or :class:`Prompt`), a few are enough (the CLI uses 4).
        ratios: the r values to try, each in (0, 1] (r = 1 must give agreement 1 and KL 0: a check
            of the measurement itself).
        min_agreement: bound on teacher-forced top-1 agreement.
        confidence: the bound must hold for the Wilson lower bound at this one-sided confidence
            (:func:`agreement_lower_bound`) of the agreement pooled over all answer tokens; 0
            compares the pooled agreement itself. More prompts tighten the bound.
        max_ratio: the largest r worth blending at; above it exact prefill is chosen.
        answer_tokens: length of the full-prefill greedy answer that is teacher-forced (stops at EOS).
        save: write the record under the ragcache home.
        rank_by: the selection rule to measure (default: the engine's, :attr:`LocalEngine.selection`).
        progress: called with one line per prompt and ratio.

    Returns:
        The :class:`Calibration` (also written to :func:`calibration_path` when ``save``).

    Raises:
        ValueError: no prompts, a prompt without a document, or a bad option (:func:`check_options`:
            a ratio outside (0, 1], ``answer_tokens < 1``, a bound outside (0, 1], ``max_ratio``
            outside [0, 1], ``confidence`` not 0 or in [0.5, 1)).

    Why one function: one measurement loop (prompts x ratios) whose running totals decide the
    recorded r; the steps it calls (:func:`check_options`, the fidelity measure) are already apart.
    """
    from ragcache.engine.blend.prefill import blend_prefill
    from ragcache.engine.chunk.cache import ChunkCache

    if not prompts:
        raise ValueError("calibrate needs at least one prompt with documents")
    ratios = check_options(ratios=ratios, min_agreement=min_agreement, max_ratio=max_ratio,
                           answer_tokens=answer_tokens, confidence=confidence)  # before any work
    model, say = engine.model, progress or (lambda _msg: None)
    cc = engine.chunk_cache if engine.chunk_cache is not None else ChunkCache()
    check_layer = engine.reuse_policy.check_layer
    rank_by = engine.selection if rank_by is None else rank_by
    built = [engine.build_prompt(p) for p in prompts]
    for i, p in enumerate(built):
        if not p.document_spans():
            raise ValueError(f"prompt {i} has no document piece: calibrate needs RAG prompts with documents")
    per_r: dict[float, list[dict]] = {r: [] for r in ratios}
    tokens, seconds = 0, 0.0
    with engine._lock:
        for i, prompt in enumerate(built):
            ids = prompt.input_ids
            n = len(ids)
            answer, reference, _, wall_s = reference_answer(engine, ids, answer_tokens)
            seconds += wall_s
            tokens += n
            spans = [(s, e) for s, e, _ in prompt.document_spans()]
            bound = cc.bind(model, engine.fingerprint, engine.namespace)  # never another namespace's KV
            chunks = [bound.lookup(piece.ids) or bound.compute(piece.ids) for _, _, piece in prompt.document_spans()]
            for r in ratios:
                res = blend_prefill(model, ids, prefix_len=0, prefix_cache=None, doc_spans=spans, chunk_kvs=chunks,
                                    recompute_ratio=r, check_layer=check_layer, rank_by=rank_by)
                blended = teacher_forced_logits(model, res.cache, res.last_logits, answer, n)
                agree, kl = fidelity(reference, blended, answer)
                per_r[r].append({"prompt": i, "prompt_tokens": n, "answer_tokens": len(answer),
                                 "top1_agreement": agree, "mean_kl": kl})
                say(f"prompt {i} ({n} tokens, {len(answer)} answer tokens) r={r:g}: "
                    f"top-1 agreement {agree:.3f}, mean KL {kl:.4f}")
    table = [ratio_row(r, per_r[r], confidence) for r in ratios]
    chosen = choose_ratio(table, min_agreement, max_ratio)
    cal = Calibration(
        fingerprint=record_digest(engine.fingerprint), model=str(engine.fingerprint), recompute_ratio=chosen,
        blend_allowed=chosen is not None, min_agreement=min_agreement, max_ratio=max_ratio, ratios=table,
        prefill_tokens_per_s=tokens / seconds if seconds > 0 else None, prompts=len(built),
        answer_tokens=answer_tokens, chunk_dtype=str(cc.dtype).replace("torch.", ""), sink_ids=cc.sink_for(model),
        check_layer=check_layer, created=datetime.now(timezone.utc).isoformat(timespec="seconds"),
        confidence=confidence, rank_by=rank_by)
    if save:
        save_calibration(cal, home)
    return cal


def ratio_row(r: float, per_prompt: list[dict], confidence: float) -> dict:
    """One row of the calibration table from per-prompt results (``top1_agreement``,
    ``answer_tokens``, ``mean_kl``): means, the pooled agreement and its lower bound."""
    n = sum(x["answer_tokens"] for x in per_prompt)
    pooled = sum(x["top1_agreement"] * x["answer_tokens"] for x in per_prompt) / n if n else 0.0
    return {"r": r,
            "top1_agreement": sum(x["top1_agreement"] for x in per_prompt) / len(per_prompt),
            "pooled_top1_agreement": pooled,
            "agreement_lower_bound": agreement_lower_bound(pooled, n, confidence),
            "min_top1_agreement": min(x["top1_agreement"] for x in per_prompt),
            "mean_kl": sum(x["mean_kl"] for x in per_prompt) / len(per_prompt),
            "answer_tokens": n,
            "per_prompt": per_prompt}


def choose_ratio(table: Sequence[dict], min_agreement: float, max_ratio: float) -> float | None:
    """The smallest r <= ``max_ratio`` whose ``agreement_lower_bound`` reaches ``min_agreement``."""
    ok = [row["r"] for row in table if row["r"] <= max_ratio and row["agreement_lower_bound"] >= min_agreement]
    return min(ok) if ok else None
