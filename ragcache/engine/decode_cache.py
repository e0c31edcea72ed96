"""The decode KV cache format: exact (``DynamicCache``) or quantized, its identity, and its per-model check.

A quantized decode cache (transformers ``QuantizedCache``, KIVI-style, Liu et al., ICML 2024,
arXiv 2402.02750, §3) changes the answer after a few tokens, so an answer decoded with one is
*approximate*: :class:`DecodeCacheSpec` gives its :attr:`~DecodeCacheSpec.tag`, which is part of
the engine's answer identity (:attr:`ragcache.engine.engine.LocalEngine.answer_identity`, hence
of the semantic partition), so such answers are never served to an engine that decodes exactly.

Attention sinks (Xiao et al., "Efficient Streaming Language Models with Attention Sinks", ICLR
2024, arXiv 2309.17453, §3): the first tokens draw a large share of every head's attention, so
their quantization error weighs on every step. ``sink_tokens`` keeps that many first positions in
full precision (the rest is quantized as before).

:func:`check_decode` measures, per model, how often quantized decoding picks the exact decode's
token (teacher-forced top-1 agreement along the exact greedy answer, and its one-sided Wilson
lower bound: :mod:`ragcache.engine.blend.calibration`'s machinery) and records whether the bound is
met. :class:`~ragcache.engine.engine.LocalEngine` reads the record: a model whose record fails
the bound decodes exactly (and says so in ``reuse_decision``); without a record the quantized
cache is used as configured, and its answers are labelled approximate either way.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from ragcache.atomic import atomic_write_json
from ragcache.home import Home
from ragcache.engine import kv
from ragcache.engine.blend.calibration import agreement_lower_bound, check_confidence, fidelity
from ragcache.engine.quant import DECODE_BACKENDS
from ragcache.hashing import hash_value

if TYPE_CHECKING:
    from ragcache.engine.interface import EngineView

log = logging.getLogger(__name__)

__all__ = ["DecodeCacheSpec", "DecodeCheck", "check_decode", "decode_check_path", "load_decode_check"]


@dataclass(frozen=True, slots=True)
class DecodeCacheSpec:
    """How decode KV is held: ``kind`` ``"dynamic"`` (exact) or ``"quantized"`` with ``backend``
    (``"quanto"``, ``"hqq"``, ``"fp8"``), ``nbits``, ``residual_length`` (recent tokens kept in
    full precision) and ``sink_tokens`` (first positions kept in full precision).

    Raises:
        ValueError: an unknown kind or backend, or a negative residual / sink length.
    """

    kind: str = "dynamic"
    backend: str = "quanto"
    nbits: int = 4
    residual_length: int = 128
    sink_tokens: int = 0

    def __post_init__(self) -> None:
        if self.kind not in ("dynamic", "quantized"):
            raise ValueError(f"decode_cache must be 'dynamic' or 'quantized'; got {self.kind!r}")
        if self.backend not in DECODE_BACKENDS:
            raise ValueError(f"decode_backend must be one of {DECODE_BACKENDS}; got {self.backend!r}")
        if self.residual_length < 0 or self.sink_tokens < 0:
            raise ValueError("residual_length and decode_sink_tokens must be >= 0 tokens")

    @property
    def quantized(self) -> bool:
        return self.kind == "quantized"

    @property
    def approximate(self) -> bool:
        """Whether answers decoded this way may differ from exact decoding."""
        return self.quantized

    @property
    def tag(self) -> str:
        """``"dynamic"``, or every setting of the quantized cache (e.g. ``"quantized-quanto-4bit-r128-sink0"``;
        fp8 ignores bits and residual)."""
        if not self.quantized:
            return "dynamic"
        if self.backend == "fp8":
            return f"quantized-fp8-sink{self.sink_tokens}"
        return f"quantized-{self.backend}-{self.nbits}bit-r{self.residual_length}-sink{self.sink_tokens}"

    def hand_over(self, model: Any, cache: Any) -> Any:
        """The cache to decode from: ``cache`` itself (dynamic) or a ``QuantizedCache`` of it."""
        if not self.quantized:
            return cache
        from ragcache.engine import quant  # looked up at call time (tests spy on it)

        return quant.quantized_decode_cache(model, cache, backend=self.backend, nbits=self.nbits,
                                            residual_length=self.residual_length, sink_tokens=self.sink_tokens)


@dataclass(slots=True)
class DecodeCheck:
    """A recorded quantized-decode fidelity check for one model and one :attr:`DecodeCacheSpec.tag`.

    Attributes:
        fingerprint / model: the model (digest, readable identity).
        decode: the spec's tag; allowed: whether ``agreement_lower_bound >= min_agreement``.
        top1_agreement: pooled teacher-forced top-1 agreement with exact decoding; mean_kl: nats.
        agreement_lower_bound: its one-sided Wilson lower bound at ``confidence``.
        prompts / answer_tokens: how many prompts and the pooled answer tokens; per_prompt rows.
    """

    fingerprint: str
    model: str
    decode: str
    allowed: bool
    min_agreement: float
    confidence: float
    top1_agreement: float
    agreement_lower_bound: float
    mean_kl: float
    prompts: int
    answer_tokens: int
    per_prompt: list[dict] = field(default_factory=list)
    created: str = ""


def decode_check_path(fingerprint: str, tag: str, home: Home | str | Path | None = None) -> Path:
    """``<home>/calibration/<digest>.decode-<hash of tag>.json`` (:meth:`ragcache.home.Home.of`)."""
    return Home.of(home).calibration_file(f"{fingerprint}.decode-{hash_value(tag)[:16]}.json")


def load_decode_check(fingerprint: str, tag: str, home: Home | str | Path | None = None) -> DecodeCheck | None:
    """The recorded check of this model and decode format, or ``None`` (absent, unreadable or another's)."""
    path = decode_check_path(fingerprint, tag, home)
    try:
        data = json.loads(path.read_text())
        rec = DecodeCheck(**{k: data[k] for k in DecodeCheck.__dataclass_fields__ if k in data})
    except FileNotFoundError:
        return None
    except (OSError, ValueError, TypeError) as e:
        log.warning("ignoring unreadable decode check %s (%s); run LocalEngine.check_decode again", path, e)
        return None
    return rec if (rec.fingerprint, rec.decode) == (fingerprint, tag) else None


def _teacher_forced_steps(model: Any, cache: Any, first: torch.Tensor, answer: Sequence[int], start: int) -> torch.Tensor:
    """Logits at each answer position, one decode step at a time (as decoding runs), float32 ``[T, vocab]``."""
    rows = [first.float()[None]]
    for i, tok in enumerate(answer[:-1]):
        rows.append(kv.forward(model, [int(tok)], cache, start + i)[-1].float()[None])
    return torch.cat(rows)


@torch.inference_mode()
def check_decode(engine: EngineView, prompts: Sequence[Any], *, spec: DecodeCacheSpec | None = None,
                 min_agreement: float = 0.95, confidence: float = 0.95, answer_tokens: int = 32,
                 save: bool = True, home: Home | str | Path | None = None,
                 progress: Callable[[str], None] | None = None) -> DecodeCheck:
    """Teacher-forced agreement of quantized decoding with exact decoding on ``prompts``; record it.

    For each prompt the exact greedy answer (``answer_tokens`` long, or to EOS) is decoded with a
    ``DynamicCache``; the same prompt's exact prefill is then handed to the quantized cache
    (:meth:`DecodeCacheSpec.hand_over`) and the answer is fed one token per step, as decoding
    does, comparing each step's argmax and distribution with the exact ones
    (:func:`ragcache.engine.blend.calibration.fidelity`).

    Args:
        engine: a :class:`~ragcache.engine.engine.LocalEngine` (nothing is stored in its caches).
        prompts: a few prompts (anything :meth:`LocalEngine.build_prompt` takes).
        spec: the quantized format to check (default: the engine's, which must be quantized).
        min_agreement / confidence: the bound on the Wilson lower bound of the pooled agreement.

    Raises:
        ValueError: no prompts, a dynamic spec, ``answer_tokens < 1``, or a bad bound / confidence.
    """
    spec = spec or engine.decode
    if not prompts:
        raise ValueError("check_decode needs at least one prompt")
    if not spec.quantized:
        raise ValueError("check_decode checks a quantized decode cache: give spec=DecodeCacheSpec('quantized', ...)")
    if isinstance(answer_tokens, bool) or not isinstance(answer_tokens, int) or answer_tokens < 1:
        raise ValueError(f"answer_tokens must be an integer >= 1, got {answer_tokens!r}")
    if isinstance(min_agreement, bool) or not 0.0 < float(min_agreement) <= 1.0:
        raise ValueError(f"min_agreement must be in (0, 1], got {min_agreement!r}")
    check_confidence(confidence)
    model, say, rows = engine.model, progress or (lambda _m: None), []
    with engine.lock:
        for i, p in enumerate(engine.build_prompt(p) for p in prompts):
            ids = p.input_ids
            n, cache = len(ids), kv.new_cache(model)
            first = kv.forward(model, ids, cache, 0)[-1]
            handed = spec.hand_over(model, kv.cache_from_tensors(model, *kv.cache_tensors(cache)))
            answer, ref, logits = [], [], first
            for step in range(answer_tokens):
                tok = int(logits.argmax())
                answer.append(tok)
                ref.append(logits.float()[None])
                if tok in engine.eos_token_ids or step == answer_tokens - 1:
                    break
                logits = kv.forward(model, [tok], cache, n + step)[-1]
            got = _teacher_forced_steps(model, handed, first, answer, n)
            agree, kl = fidelity(torch.cat(ref), got, answer)
            rows.append({"prompt": i, "prompt_tokens": n, "answer_tokens": len(answer), "top1_agreement": agree,
                         "mean_kl": kl})
            say(f"prompt {i} ({n} tokens, {len(answer)} answer tokens): top-1 agreement {agree:.3f}, KL {kl:.4f}")
    total = sum(r["answer_tokens"] for r in rows)
    pooled = sum(r["top1_agreement"] * r["answer_tokens"] for r in rows) / total
    bound = agreement_lower_bound(pooled, total, confidence)
    fp = engine.fingerprint.digest
    rec = DecodeCheck(fingerprint=fp, model=str(engine.fingerprint), decode=spec.tag, allowed=bound >= min_agreement,
                      min_agreement=float(min_agreement), confidence=float(confidence), top1_agreement=pooled,
                      agreement_lower_bound=bound, mean_kl=sum(r["mean_kl"] for r in rows) / len(rows),
                      prompts=len(rows), answer_tokens=total, per_prompt=rows,
                      created=datetime.now(timezone.utc).isoformat(timespec="seconds"))
    if save:
        atomic_write_json(decode_check_path(fp, spec.tag, home), asdict(rec))
    return rec
