"""Where an answer came from: :class:`Provenance` (stored with every answer) and :class:`Answer`
(what every entry point returns). The answer path (:mod:`ragcache.answering`) writes and reads them;
nothing here imports the rest of ragcache but :mod:`ragcache.backend`."""

from __future__ import annotations

import json
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

from ragcache.backend import FINISH_REASONS, LAYERS, BackendResult, CacheUsage, FinishReason, Layer

PROVENANCE_KEY = "ragcache_provenance"
"""Key of :meth:`Provenance.to_json` in a stored entry's metadata."""

_LEGACY_LAYERS = {"upstream": "provider"}  # the proxy labelled forwarded answers so before 0.3
_LEGACY_GENERATIONS = "langchain_generations"  # RagCacheSemanticCache's serialised generations


@dataclass(frozen=True, slots=True)
class Provenance:
    """Where a stored answer came from: the one record every entry point writes and reads.

    Attributes:
        layer: the :data:`~ragcache.backend.Layer` that computed it (never ``semantic``, how it is served).
        finish_reason: why it ended (:data:`~ragcache.backend.FinishReason`).
        approximate / recompute_ratio: computed from blended chunk KV (CacheBlend) at this ratio.
        model: the model that wrote it (``backend:model id``), when known.
        stop_reason / stop_sequence: the provider's native end reason (Anthropic ``stop_reason``,
            OpenAI ``finish_reason``) and matched stop sequence, for replaying the native response.
        blend_setting: the blend setting a blended answer was made at, ``None`` for an answer made
            without a blend; an approximate answer with a ratio and no name gets ``"r=<ratio>"``
            (:func:`blend_of`). Such an answer is served only to requests at that setting (:func:`may_serve`).
        content: the native content blocks of the answer when its text alone would lose something
            (Anthropic text blocks with their citations, several text blocks), for replaying them
            as they were (``details["content_blocks"]`` of a fresh result); ``None``: the text is all.
        sampled: one draw of a request sampled without a seed, stored under the ``cache_sampled=True``
            opt-in (:func:`ragcache.sampling.fresh_draw`): a hit replays that one sample.
        snapshot: the model the response named (``details["model"]`` of the fresh result: the snapshot
            behind an alias such as ``gpt-4o``), when it named one; ``model`` is the one requested. An
            entry whose snapshot is no longer the alias's current one is a miss (:class:`SnapshotBook`).

    Raises:
        ValueError: a layer not in :data:`~ragcache.backend.Layer` or ``semantic``, an unknown finish
            reason, a ratio outside [0, 1]. TypeError: a non-str model / stop reason / sequence,
            ``content`` not a tuple of blocks (mappings with a str ``type``).
    """

    layer: Layer
    finish_reason: FinishReason = "stop"
    approximate: bool = False
    recompute_ratio: float | None = None
    model: str | None = None
    stop_reason: str | None = None
    stop_sequence: str | None = None
    blend_setting: str | None = None
    content: tuple[Mapping[str, Any], ...] | None = None
    sampled: bool = False
    snapshot: str | None = None

    VERSION: ClassVar[int] = 1

    def __post_init__(self) -> None:
        if self.layer not in LAYERS or self.layer == "semantic":
            raise ValueError(f"provenance layer must be the layer that computed the answer, one of "
                             f"{', '.join(x for x in LAYERS if x != 'semantic')}; got {self.layer!r}")
        if self.finish_reason not in FINISH_REASONS:
            raise ValueError(f"unknown finish_reason {self.finish_reason!r}; one of {', '.join(FINISH_REASONS)}")
        if self.recompute_ratio is not None and not _ratio(self.recompute_ratio):
            raise ValueError(f"recompute_ratio must be a number in [0, 1] or None, got {self.recompute_ratio!r}")
        for name in ("model", "stop_reason", "stop_sequence", "blend_setting", "snapshot"):
            if not isinstance(getattr(self, name), str | None):
                raise TypeError(f"provenance {name} must be a str or None, got {type(getattr(self, name)).__name__}")
        object.__setattr__(self, "blend_setting", blend_of(self.approximate, self.recompute_ratio, self.blend_setting))
        if self.content is not None and _blocks(self.content) is None:
            raise TypeError("provenance content must be a tuple of content blocks (mappings with a str 'type') or None")

    @classmethod
    def of(cls, result: BackendResult, *, model: str | None = None, sampled: bool = False) -> Provenance:
        """The provenance of a fresh backend result (``model``: else ``result.details["model"]``;
        the native stop reason from ``details["stop_reason"]`` / ``details["finish_reason"]``;
        ``sampled``: an unseeded sample stored under the opt-in)."""
        d = result.details or {}
        facts = (model if model is not None else d.get("model"), d.get("stop_reason", d.get("finish_reason")),
                 d.get("stop_sequence"))
        return cls(result.layer, result.finish_reason, bool(result.approximate), result.recompute_ratio,
                   *(v if isinstance(v, str) else None for v in facts),
                   blend_setting=blend_of(result.approximate, result.recompute_ratio, result.blend_setting),
                   content=_blocks(d.get("content_blocks")), sampled=bool(sampled),
                   snapshot=d.get("model") if isinstance(d.get("model"), str) and d.get("model") else None)

    def to_json(self) -> dict[str, Any]:
        """A JSON object with a version field ``v`` (what is stored under :data:`PROVENANCE_KEY`);
        ``content`` only when there are blocks to replay."""
        out = {"v": self.VERSION, "layer": self.layer, "finish_reason": self.finish_reason,
               "approximate": self.approximate, "recompute_ratio": self.recompute_ratio, "model": self.model,
               "stop_reason": self.stop_reason, "stop_sequence": self.stop_sequence,
               "blend_setting": self.blend_setting, "sampled": self.sampled, "snapshot": self.snapshot}
        if self.content is not None:
            out["content"] = [json.loads(json.dumps(b)) for b in self.content]
        return out

    @classmethod
    def from_metadata(cls, metadata: Mapping[str, Any] | None) -> Provenance:
        """Read an entry's metadata: :data:`PROVENANCE_KEY` (version 1), else the flat keys stored by
        earlier releases (the pipeline, the proxy, LangChain's generations). A value that cannot be
        read falls back to its default rather than failing the hit: an unknown layer is
        ``provider``, an unknown finish reason ``stop`` (only finished answers were stored). A
        blended answer stored without its setting (before version 2) reads as ``"r=<ratio>"``
        (:func:`blend_of`), a setting no request names, so it is never served as if exact.
        A newer version (``v``) is read by the same fields (versions only add fields)."""
        meta = dict(metadata or {})
        rec = meta.get(PROVENANCE_KEY)
        if isinstance(rec, Mapping):
            return cls._lenient(rec)
        flat = {k: meta[k] for k in ("layer", "finish_reason", "approximate", "recompute_ratio", "model",
                                      "stop_reason", "stop_sequence", "blend_setting") if k in meta}
        gens = meta.get(_LEGACY_GENERATIONS)
        if isinstance(gens, str):
            flat = {**_from_generations(gens), **flat}
        return cls._lenient(flat)

    @classmethod
    def _lenient(cls, rec: Mapping[str, Any]) -> Provenance:
        layer = rec.get("layer")
        layer = _LEGACY_LAYERS.get(layer, layer)
        if layer not in LAYERS or layer == "semantic":
            layer = "provider"
        finish = rec.get("finish_reason")
        finish = finish if finish in FINISH_REASONS else "stop"
        ratio = rec.get("recompute_ratio")
        text = [v if isinstance(v := rec.get(k), str) else None for k in ("model", "stop_reason", "stop_sequence")]
        approximate, ratio = bool(rec.get("approximate", False)), float(ratio) if _ratio(ratio) else None
        name = rec.get("blend_setting")
        return cls(layer, finish, approximate, ratio, *text,
                   blend_setting=blend_of(approximate, ratio, name if isinstance(name, str) else None),
                   content=_blocks(rec.get("content")), sampled=rec.get("sampled") is True,
                   snapshot=rec.get("snapshot") if isinstance(rec.get("snapshot"), str) else None)


class SnapshotBook:
    """The snapshot each model alias was last seen answering with: a backend's response names the
    model that wrote it (``gpt-4o`` answers as ``gpt-4o-2024-08-06``); once a response names a new
    snapshot for an alias, the answers stored under the old one are misses (:meth:`stale`), so a
    model that moved behind its name is asked again, and its answers replace the old ones.

    Keyed by the alias as the partition names it (``CacheRequest.alias``). In memory, per answer path:
    a process learns of a new snapshot from its own next fresh call under that alias. Thread-safe."""

    def __init__(self) -> None:
        self._current: dict[str, str] = {}
        self._lock = threading.Lock()

    def observe(self, alias: str, snapshot: str | None) -> None:
        """A fresh response under ``alias`` named ``snapshot`` (ignored when ``None`` or empty)."""
        if snapshot:
            with self._lock:
                self._current[alias] = snapshot

    def current(self, alias: str) -> str | None:
        """The snapshot last seen for ``alias``, or ``None`` before any response named one."""
        with self._lock:
            return self._current.get(alias)

    def stale(self, stored: Provenance | None, alias: str) -> bool:
        """Whether a stored answer was written by another snapshot than ``alias``'s current one. An
        answer that recorded no snapshot, or an alias no response has named yet, is not stale."""
        now = self.current(alias)
        return stored is not None and stored.snapshot is not None and now is not None and stored.snapshot != now


def blend_of(approximate: bool, recompute_ratio: float | None, name: str | None) -> str | None:
    """The blend setting an answer was made at: ``name`` (the engine's
    :attr:`BlendSetting.name <ragcache.engine.blend.setting.BlendSetting.name>`, e.g. ``"infoflow r=0.15"``);
    for an approximate answer with a recompute ratio but no name (a backend that reports only its ratio,
    an entry stored before settings were) ``"r=<ratio>"``; ``None`` for an answer made without a blend
    (exact, or approximate only by a quantized KV decode, whose format is in the partition already)."""
    if name:
        return name
    if approximate and recompute_ratio is not None:
        return f"r={recompute_ratio:g}"
    return None


def may_serve(stored: Provenance, blend_setting: str | None) -> bool:
    """Whether a stored answer may be served to a request whose backend blends at ``blend_setting``
    (its name; ``None``: exact prefill). An answer made without a blend is served to any request; one
    made by a blend only to a request at that very setting, so an exact run never gets a blended
    answer and a run at one setting never gets another's. The one rule of the answer path
    (:meth:`ragcache.answering.AnswerPath.lookup`)."""
    return stored.blend_setting is None or stored.blend_setting == blend_setting


def approximation(approximate: bool, blend_setting: str | None) -> str | None:
    """The words every surface labels an approximate answer with (the CLI line, the demo): ``"approximate
    (blended at infoflow r=0.15)"``, ``"approximate"`` when the blend setting is unknown (a quantized KV
    decode), ``None`` for an exact answer."""
    if blend_setting:
        return f"approximate (blended at {blend_setting})"
    return "approximate" if approximate else None


def _blocks(blocks: Any) -> tuple[Mapping[str, Any], ...] | None:
    """Content blocks as a tuple of JSON-like copies, or ``None`` for anything else (read leniently)."""
    if not isinstance(blocks, list | tuple) or not blocks or not all(
            isinstance(b, Mapping) and isinstance(b.get("type"), str) for b in blocks):
        return None
    try:
        return tuple(json.loads(json.dumps(dict(b))) for b in blocks)
    except (TypeError, ValueError):
        return None


def _ratio(r: Any) -> bool:
    return isinstance(r, int | float) and not isinstance(r, bool) and 0.0 <= r <= 1.0


def _from_generations(raw: str) -> dict[str, Any]:
    """The provenance facts inside LangChain generations serialised by ``RagCacheSemanticCache``
    (JSON from ``langchain_core.load.dumps``; read as plain JSON, never loaded as objects)."""
    try:
        gens = json.loads(raw)
        msg = gens[0]["kwargs"]["message"]["kwargs"]
        meta = msg.get("response_metadata") or {}
    except (ValueError, KeyError, IndexError, TypeError):
        return {}
    own = meta.get("ragcache") if isinstance(meta.get("ragcache"), Mapping) else {}
    out = {k: own[k] for k in ("layer", "approximate", "recompute_ratio", "blend_setting") if k in own}
    return {**out, "model": meta.get("model_name") or meta.get("model"),
            **{k: meta[k] for k in ("stop_reason", "stop_sequence") if k in meta}}


@dataclass(frozen=True, slots=True)
class Answer:
    """One answered question and what each layer did: the one record per answer (how it ended and how it
    was made are its :class:`Provenance`'s, read through properties, never copied).

    Attributes:
        question / text: the question and the answer.
        layer: ``semantic`` for a semantic-cache hit, else the backend's layer (:data:`ragcache.backend.Layer`).
        usage: token accounting (:class:`~ragcache.backend.CacheUsage`; all zero on a semantic hit).
        ttft_s: seconds to the first token (a semantic hit: the lookup time).
        total_s: wall time of the request, seconds.
        similarity / matched_question: cosine similarity and stored question of a semantic hit.
        details: the backend's extras (engine timings, provider breakpoints); display only.
        provenance: where the answer came from (:class:`Provenance`: on a hit, the stored record; ``None``:
            unknown, read as a finished exact answer).

    Properties (from :attr:`provenance`): ``finish_reason`` (:data:`~ragcache.backend.FinishReason`; on a hit,
    the stored answer's), ``approximate`` / ``recompute_ratio`` (the prefill blended cached document KV,
    CacheBlend, at this ratio, so the answer may differ from a full prefill's), ``blend_setting``
    (:func:`blend_of`), ``approximation`` (the label).
    """

    question: str
    text: str
    layer: Layer
    usage: CacheUsage = field(default_factory=CacheUsage)
    ttft_s: float = 0.0
    total_s: float = 0.0
    similarity: float | None = None
    matched_question: str | None = None
    details: Mapping[str, Any] = field(default_factory=dict)
    provenance: Provenance | None = None

    @property
    def hit(self) -> bool:
        """Served by the semantic cache (no model call)."""
        return self.layer == "semantic"

    @property
    def finish_reason(self) -> FinishReason:
        """Why the answer ended (its provenance's; ``stop`` when unknown)."""
        return "stop" if self.provenance is None else self.provenance.finish_reason

    @property
    def approximate(self) -> bool:
        """Made from blended (or quantized) KV, so it may differ from a full prefill's answer."""
        return self.provenance is not None and self.provenance.approximate

    @property
    def recompute_ratio(self) -> float | None:
        """The blend's recompute ratio (``None``: no blend)."""
        return None if self.provenance is None else self.provenance.recompute_ratio

    @property
    def blend_setting(self) -> str | None:
        """The blend setting of a blended answer (:func:`blend_of`; on a hit, the stored one's)."""
        return None if self.provenance is None else self.provenance.blend_setting

    @property
    def approximation(self) -> str | None:
        """The approximate label (:func:`approximation`), ``None`` for an exact answer."""
        return approximation(self.approximate, self.blend_setting)

    @property
    def prompt_tokens(self) -> int:
        return self.usage.prompt_tokens

    @property
    def tokens_reused(self) -> int:
        return self.usage.reused

    @property
    def tokens_computed(self) -> int:
        return self.usage.computed

    @property
    def tokens_recomputed(self) -> int:
        return self.usage.recomputed

    def to_dict(self) -> dict[str, Any]:
        """A JSON object: the fields, the provenance's finish reason / approximate / recompute ratio / blend
        setting at the top level too (as before they lived in the provenance alone)."""
        out = {f: getattr(self, f) for f in self.__dataclass_fields__}
        out.update(finish_reason=self.finish_reason, approximate=self.approximate,
                   recompute_ratio=self.recompute_ratio, blend_setting=self.blend_setting)
        out["usage"] = self.usage.to_dict()
        out["details"] = dict(self.details)
        out["provenance"] = None if self.provenance is None else self.provenance.to_json()
        return out

    @classmethod
    def of(cls, question: str, result: BackendResult, *, total_s: float | None = None,
           model: str | None = None) -> Answer:
        """The :class:`Answer` of a fresh backend result (``total_s``: else ``result.ttft_s``)."""
        return cls(question, result.text, result.layer, result.usage, result.ttft_s,
                   result.ttft_s if total_s is None else total_s, details=result.details,
                   provenance=Provenance.of(result, model=model))


def hit_answer(question: str, hit: Any, elapsed_s: float) -> Answer:
    """A semantic hit as an :class:`Answer`: layer ``semantic``, zero usage, TTFT = ``elapsed_s``
    (the lookup), the stored answer's provenance."""
    return Answer(question, hit.answer, "semantic", CacheUsage(), elapsed_s, elapsed_s, float(hit.similarity),
                  hit.question, {"entry_id": hit.entry_id}, Provenance.from_metadata(hit.metadata))


__all__ = ["PROVENANCE_KEY", "Answer", "Provenance", "approximation", "blend_of", "hit_answer", "may_serve"]
