"""LangChain messages <-> ragcache's answer records: the one mapping each way.

- :func:`message_result`: a chat model's ``AIMessage`` (or a completion ``Generation``) as a
  :class:`~ragcache.backend.BackendResult`: its text, the usage (:func:`langchain_ragcache.usage.cache_usage`),
  the layer, and its finish reason in ragcache's words (:func:`finish_reason_of`), so the one storage
  rule (:func:`ragcache.answering.cacheable`) decides for every LangChain entry point.
- :func:`answer_record` / :func:`answer_message`: a ragcache :class:`~ragcache.answering.Answer` (a
  semantic hit, or a fresh answer) as ``response_metadata["ragcache"]`` and as an ``AIMessage``;
  a hit reports zero tokens.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from typing import Any

from langchain_core.messages import AIMessage

from ragcache.answering import Answer, Provenance
from ragcache.backend import LAYERS, BackendResult, CacheUsage, FinishReason, provider_layer
from ragcache.providers.table import finish_spellings

from langchain_ragcache.usage import HIT_USAGE, cache_usage, own_record, usage_metadata

FINISH_REASONS: Mapping[str, FinishReason] = finish_spellings()
"""A LangChain provider's native end reason (lower-cased) -> :data:`ragcache.backend.FinishReason`: every
row of the provider table (:func:`ragcache.providers.table.finish_spellings`: OpenAI's, Anthropic's and the
hosted APIs' spellings LangChain chat models report), as it stood when this package was imported
(:func:`finish_reason_of` reads the live table). Anything not listed is ``incomplete`` (never stored)."""

NATIVE_KEYS = ("finish_reason", "stop_reason", "done_reason")
"""Where LangChain chat models report why an answer ended (``response_metadata`` or
``generation_info``): OpenAI-style ``finish_reason``, Anthropic / Bedrock ``stop_reason``, Ollama
``done_reason``."""


def native_finish(generation: Any) -> tuple[bool, str | None]:
    """``(reported, value)``: whether the generation or its message names an end reason at all, and
    the first non-null one among :data:`NATIVE_KEYS`."""
    msg = getattr(generation, "message", generation)
    sources = [getattr(msg, "response_metadata", None) or {}, getattr(generation, "generation_info", None) or {}]
    reported = False
    for src in sources:
        for k in NATIVE_KEYS:
            if k in src:
                reported = True
                if isinstance(src[k], str) and src[k]:
                    return True, src[k]
    return reported, None


def reports_no_finish(generation: Any) -> bool:
    """A chat answer (no tool calls) that names no end reason at all, in neither its message nor its
    ``generation_info`` (a fake or custom chat model; also a stream cut before its last chunk):
    :func:`finish_reason_of` reads it as ``incomplete``."""
    msg = getattr(generation, "message", generation)
    if not isinstance(msg, AIMessage) or msg.tool_calls or msg.invalid_tool_calls:
        return False
    return native_finish(generation) == (False, None)


def finish_reason_of(generation: Any, *, chat: bool | None = None) -> FinishReason:
    """Why a LangChain answer ended, in ragcache's words.

    - a message with tool calls (or unreadable ones) is ``tool_calls``, whatever it reports;
    - a reported end reason is mapped by the provider table's spellings (:data:`FINISH_REASONS`; unknown:
      ``incomplete``);
    - a reported null, and a chat message that reports none at all (a stream cut before its last
      chunk: LangChain providers report the reason on the last chunk) are ``incomplete``;
    - a plain completion ``Generation`` with no reason (LangChain's generic cache API: a completion
      LLM's text) is taken as finished, ``stop``.
    """
    msg = getattr(generation, "message", generation)
    if getattr(msg, "tool_calls", None) or getattr(msg, "invalid_tool_calls", None):
        return "tool_calls"
    reported, native = native_finish(generation)
    if native is not None:
        return finish_spellings().get(native.lower(), "incomplete")
    is_chat = isinstance(msg, AIMessage) if chat is None else chat
    return "incomplete" if reported or is_chat else "stop"


def message_result(generation: Any, *, ttft_s: float = 0.0) -> BackendResult:
    """A LangChain chat ``AIMessage`` / ``ChatGeneration`` / completion ``Generation`` as ragcache's
    :class:`BackendResult`: the text, its usage (zero when it reports none), the layer (ragcache's
    own record, else ``provider-cache`` / ``provider`` by the cache reads), the finish reason
    (:func:`finish_reason_of`), and what the provenance keeps (``model``, native ``stop_reason`` /
    ``stop_sequence``) in ``details``; ``approximate`` / ``recompute_ratio`` / ``blend_setting`` from ragcache's record."""
    msg = getattr(generation, "message", generation)
    text = msg.text if isinstance(msg, AIMessage) else str(getattr(generation, "text", ""))
    usage = cache_usage(msg) or CacheUsage()
    meta = getattr(msg, "response_metadata", None) or {}
    # the layer only from ragcache's own record; the blend labels also from a local server's body record
    own = meta.get("ragcache") if isinstance(meta.get("ragcache"), Mapping) else {}
    layer = (own_record(msg) or {}).get("layer")
    if layer == "semantic" or layer not in LAYERS:
        layer = provider_layer(usage.cache_read)
    _, native = native_finish(generation)
    model = meta.get("model_name") or meta.get("model")
    details = {k: v for k, v in (("model", model), ("stop_reason", native),
                                 ("stop_sequence", meta.get("stop_sequence"))) if isinstance(v, str)}
    ratio, blend = own.get("recompute_ratio"), own.get("blend_setting")
    return BackendResult(text, layer, usage, float(own.get("ttft_s") or ttft_s), finish_reason_of(generation),
                         bool(own.get("approximate", False)), ratio if isinstance(ratio, int | float) else None,
                         details, blend if isinstance(blend, str) else None)


def answer_record(answer: Answer) -> dict[str, Any]:
    """``response_metadata["ragcache"]`` of an :class:`Answer`: ``layer``, ``finish_reason``,
    ``approximate``, ``recompute_ratio``, ``blend_setting`` (the blend setting of a blended answer), ``ttft_s``,
    ``usage`` (zero on a hit) and, on a hit,
    ``similarity`` / ``matched_question`` / ``entry_id``, the stored answer's ``model`` and ``sampled``
    (one unseeded sample replayed under the ``cache_sampled=True`` opt-in)."""
    rec: dict[str, Any] = {"layer": answer.layer, "finish_reason": answer.finish_reason,
                           "approximate": answer.approximate, "recompute_ratio": answer.recompute_ratio,
                           "blend_setting": answer.blend_setting, "ttft_s": answer.ttft_s, "usage": answer.usage.to_dict()}
    if answer.layer == "semantic":
        prov = answer.provenance
        rec.update(similarity=None if answer.similarity is None else round(float(answer.similarity), 6),
                   matched_question=answer.matched_question, entry_id=answer.details.get("entry_id"),
                   model=prov.model if prov else None, sampled=bool(prov and prov.sampled))
    return rec


def answer_message(answer: Answer, *, model_name: str | None = None) -> AIMessage:
    """A semantic hit as a fresh ``AIMessage`` (new id; zero usage; ``finish_reason`` the stored answer's,
    ``response_metadata["ragcache"]`` from :func:`answer_record`)."""
    prov = answer.provenance or Provenance("provider", answer.finish_reason)
    meta: dict[str, Any] = {"finish_reason": answer.finish_reason, "ragcache": answer_record(answer)}
    if model_name or prov.model:
        meta["model_name"] = model_name or prov.model
    usage = HIT_USAGE if answer.layer == "semantic" else usage_metadata(answer.usage)
    return AIMessage(content=answer.text, response_metadata=meta, usage_metadata=dict(usage),
                     id=f"lc_ragcache-{uuid.uuid4()}")




__all__ = ["FINISH_REASONS", "NATIVE_KEYS", "answer_message", "answer_record", "finish_reason_of",
           "message_result", "native_finish", "reports_no_finish"]
