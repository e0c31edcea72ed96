"""Chat messages -> :class:`~ragcache.request.CacheRequest`: the one keyer of every chat entry point.

An adapter maps its framework's messages to plain dicts and calls :func:`key_messages` (a completion
prompt: :func:`key_text`); the rule lives here only:

* messages are ``{"role": "system" | "user" | "assistant", "content": str | list}`` dicts; other keys
  (``type``, ``name``, ``tool_calls``, ``status``) are part of a history entry; a text block of the
  final user turn may say its kind (``"ragcache_kind": "document" | "volatile" | "question"``, with
  ``"id"`` for a document's own id; another kind is matched exactly);
* leading system messages are the system text, the last user message (without a ``type``: a tool
  result mapped to a user entry is history) the final turn, the messages
  before it history, those after it matched exactly; a trailing user message of volatile blocks only
  (a date moved out of the stable prefix) is volatile text of the final turn;
* the final turn's kinds are :meth:`ragcache.prompt.layout.PromptLayout.from_messages`'s rule; the
  question inside it is :mod:`ragcache.request.question`'s (a label, or a question-sized turn), and a
  turn whose question cannot be told from its context is matched whole, exactly;
* non-text blocks of the final turn (images, tool results) are matched exactly, and so are a leading
  system message's non-text blocks (with their places among its text blocks, which are all its system
  text) and its ``name``;
* the ``name`` of the final user turn (and of a trailing volatile-only user message) is matched exactly:
  who asks is part of what the model reads (``"What is my name?"``).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ragcache.backend import DEFAULT_TENANT
from ragcache.prompt.layout import PromptLayout, Segment, as_document, parse_document
from ragcache.request.question import (
    EXACT_QUESTION,
    TEMPLATE_MARK,
    QuestionExtractor,
    split_turn,
)
from ragcache.request.record import CacheRequest, cache_request
from ragcache.sampling import Sampling

PROVIDER_MARKERS = ("cache_control", "index", "id", "extras")
"""Block keys that do not change what the model reads (dropped from exactly matched blocks). A block's
``citations`` is kept: on a document or search result it decides whether the answer cites, on an
earlier assistant text block the model reads the cited passages."""

_FINAL_KINDS = ("document", "volatile", "question")
_THOUGHTS = ("reasoning", "thinking")


def _json(value: Any) -> Any:
    return json.loads(json.dumps(value, default=repr, sort_keys=True))


def _blocks(content: Any) -> list[dict[str, Any]]:
    items = [content] if isinstance(content, str) else list(content or [])
    return [{"type": "text", "text": b} if isinstance(b, str) else dict(b) for b in items]


def _keyed_block(block: Any) -> Any:
    """A block as it is matched exactly: less :data:`PROVIDER_MARKERS` (and a ``"citations": None``)."""
    if not isinstance(block, Mapping):
        return block
    return {k: v for k, v in block.items() if k not in PROVIDER_MARKERS and not (k == "citations" and v is None)}


def _cited(content: Any) -> bool:
    return not isinstance(content, str) and any(
        isinstance(b, Mapping) and b.get("citations") is not None for b in content or [])


def _text_of(content: Any) -> str | None:
    """A content's text when it is all text (blocks joined by a blank line, thoughts skipped), else ``None``."""
    if isinstance(content, str):
        return content
    texts = []
    for b in content or []:
        if isinstance(b, str):
            texts.append(b)
        elif isinstance(b, Mapping) and b.get("type", "text") == "text":
            texts.append(str(b.get("text", "")))
        elif not (isinstance(b, Mapping) and b.get("type") in _THOUGHTS):
            return None
    return "\n\n".join(texts)


def history_entry(message: Mapping[str, Any]) -> dict[str, Any]:
    """A message as a history entry of the layout: its dict with text content as one string (else its
    blocks less provider markers), a system message after the first turn as a ``"type": "system"`` user
    turn, JSON-normalised."""
    d = dict(message)
    content = d.get("content")
    text = None if _cited(content) else _text_of(content)  # cited text blocks keep their citations
    d["content"] = text if text is not None else [_keyed_block(b) for b in content or []]
    if d.get("role") == "system":
        d = {**d, "role": "user", "type": "system"}
    return _json(d)


def _system_parts(message: Mapping[str, Any]) -> tuple[str, dict[str, Any]]:
    """A leading system message's text (its text blocks joined by a blank line, thoughts skipped) and what
    else of it the model reads, for the partition: its ``name`` and its non-text blocks (as matched
    exactly, :func:`_keyed_block`) with their positions among its blocks. Both parts are empty for a text-only, unnamed message."""
    blocks = _blocks(message.get("content"))
    text = "\n\n".join(str(b.get("text", "")) for b in blocks if b.get("type", "text") == "text")
    parts: dict[str, Any] = {}
    other = [{"index": i, "block": _keyed_block(b)}
             for i, b in enumerate(blocks) if b.get("type", "text") != "text" and b.get("type") not in _THOUGHTS]
    if other:
        parts["blocks"] = _json(other)
    if message.get("name") is not None:
        parts["name"] = _json(message["name"])
    return text, parts


def _turn(message: Mapping[str, Any]) -> bool:
    """A user's own turn: role ``user`` and no ``type`` (a tool result or a late system message mapped to a
    user entry has one)."""
    return message.get("role") == "user" and "type" not in message


def _volatile_only(message: Mapping[str, Any]) -> bool:
    blocks = _blocks(message.get("content"))
    return bool(blocks) and all(b.get("ragcache_kind") == "volatile" for b in blocks)


@dataclass(frozen=True, slots=True)
class KeyedPrompt:
    """What a prompt is keyed by, before the model and tenant are known.

    Attributes:
        question: the embedded text (:data:`EXACT_QUESTION` for a whole-prompt match).
        layout: the request's layout (system, tools, history, documents, volatile text, question).
        extra: the rest of the prompt, matched exactly (template around the question, non-text blocks,
            messages after the last user turn, the whole prompt's sha256 when exact).
        exact: the question could not be told from its context: the whole prompt is matched exactly.
    """

    question: str
    layout: PromptLayout
    extra: Mapping[str, Any] = field(default_factory=dict)
    exact: bool = False

    def request(self, *, model: str, tenant: str = DEFAULT_TENANT, params: Mapping[str, Any] | None = None,
                extra: Mapping[str, Any] | None = None, max_tokens: int | None = None,
                sampling: Sampling | None = None, threshold: float | None = None,
                provenance_model: str | None = None, cached: bool = True) -> CacheRequest:
        """The :class:`CacheRequest` (:func:`ragcache.request.cache_request`): ``model`` is the partition's
        model identity, ``provenance_model`` the one recorded with a stored answer (default ``model``);
        the threshold is 1.0 for an exact match, else ``threshold``."""
        return cache_request(self.question, self.layout, tenant=tenant, partition_model=model,
                             model=model if provenance_model is None else provenance_model,
                             params=params, extra={**dict(extra or {}), **dict(self.extra)},
                             max_tokens=max_tokens, sampling=sampling,
                             threshold=1.0 if self.exact else threshold, cached=cached)


def exact_prompt(prompt: str, *, tools: Sequence[Mapping[str, Any]] = (),
                 extra: Mapping[str, Any] | None = None) -> KeyedPrompt:
    """A whole-prompt key: nothing is embedded; the partition holds the prompt's sha256 (and the tools)."""
    digest = hashlib.sha256(prompt.encode("utf-8")).hexdigest()
    layout = PromptLayout.build(question=EXACT_QUESTION, tools=[dict(t) for t in tools], lint="off")
    return KeyedPrompt(EXACT_QUESTION, layout, {**dict(extra or {}), "whole_prompt": digest}, exact=True)


def marked_block(text: str, kind: str | None, doc_id: Any = None) -> str | Segment:
    """One final-turn block for :meth:`PromptLayout.from_messages`: a typed Segment when its kind is known
    (``document``, with its own id unless that is the content-hash fallback mark; ``volatile``;
    ``question``), else the plain text (its kind left to the layout rule)."""
    if kind == "document":
        seg = parse_document(text) or Segment("document", text)
        if doc_id is None or str(doc_id) == seg.content_hash[:16]:  # no id: the content-hash fallback mark
            return seg
        return Segment("document", seg.text, str(doc_id), seg.metadata)
    if kind in ("volatile", "question"):
        return Segment(kind, text)
    return text


def _partition_extra(blocks: list[dict[str, Any]], system_parts: list[dict[str, Any]], names: list[Any],
                     after: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """What the partition holds of a chat besides its layout: a leading system message's non-text parts,
    the asker's names, the final turn's non-text blocks and where they sit, and messages after it."""
    extra: dict[str, Any] = {}
    if system_parts:
        extra["system_parts"] = system_parts
    if any(n is not None for n in names):  # who asks changes the answer ("What is my name?")
        extra["user_names"] = _json(names)
    other = [_keyed_block(b) for b in blocks if b.get("type", "text") != "text" and b.get("type") not in _THOUGHTS]
    if other:
        extra["other_blocks"] = _json(other)
        # where the non-text blocks sit among the text blocks (an image and its caption), as read
        extra["block_order"] = [b.get("type", "text") for b in blocks if b.get("type") not in _THOUGHTS]
    if after:
        extra["after"] = [history_entry(m) for m in after]
    return extra


def key_messages(messages: Sequence[Mapping[str, Any]], *, system: str | None = None,
                 tools: Sequence[Mapping[str, Any]] = (), documents: Iterable[Any] = (),
                 extractor: QuestionExtractor | None = None) -> KeyedPrompt:
    """Key a chat request (the module docstring's rule).

    Args:
        messages: the chat as dicts (module docstring).
        system: system text sent apart from ``messages``.
        tools: tool definitions (JSON-like), in the layout.
        documents: documents the model read outside the final turn (a retriever tool's artifacts):
            in the partition by identity, so ``invalidate(document)`` reaches the answer.
        extractor: a caller's question rule for the final turn's text (:func:`split_turn`).

    Raises:
        ValueError: ``extractor`` returned text that is not in the turn, or a message
        :meth:`PromptLayout.from_messages` rejects.
    """
    tools = [_json(dict(t)) for t in tools]
    msgs = [dict(m) for m in messages]
    whole = json.dumps(_json(msgs), sort_keys=True) + "\x00" + (system or "")
    trailing_volatile: list[str] = []
    trailing_names: list[Any] = []
    while msgs and _turn(msgs[-1]) and _volatile_only(msgs[-1]):
        tail = msgs.pop()
        trailing_volatile.insert(0, _text_of(tail.get("content")) or "")
        trailing_names.insert(0, tail.get("name"))
    last = max((i for i, m in enumerate(msgs) if _turn(m)), default=None)
    if last is None:
        return exact_prompt(whole, tools=tools)
    systems = [system] if system else []
    lead = 0
    system_parts: list[dict[str, Any]] = []  # what a leading system message holds besides its text
    while lead < last and msgs[lead].get("role") == "system":
        text, parts = _system_parts(msgs[lead])
        systems.append(text)
        if parts:
            system_parts.append({"message": lead, **parts})
        lead += 1
    blocks = _blocks(msgs[last].get("content"))
    texts = [b for b in blocks if b.get("type", "text") == "text"]
    extra = _partition_extra(blocks, system_parts, [msgs[last].get("name"), *trailing_names], msgs[last + 1:])
    marked = any(b.get("ragcache_kind") for b in texts)
    final: list[Any] = [Segment("volatile", t) for t in trailing_volatile]
    if marked:
        for b in texts:
            kind, text = b.get("ragcache_kind") or "question", str(b.get("text", ""))
            if kind in _FINAL_KINDS:
                final.append(marked_block(text, kind, b.get("id")))
            else:
                extra.setdefault("other_text", []).append({"kind": kind, "text": text})
        if not any(isinstance(b, Segment) and b.kind == "question" and b.text.strip() for b in final):
            return exact_prompt(whole, tools=tools)
    elif not any(str(b.get("text", "")).strip() for b in texts):
        return exact_prompt(whole, tools=tools)
    else:
        final += [str(b.get("text", "")) for b in texts]
    final += [as_document(d) for d in documents]
    layout = PromptLayout.from_messages([*({"role": "system", "content": s} for s in systems),
                                         *(history_entry(m) for m in msgs[lead:last]),
                                         {"role": "user", "content": final}], tools=tools)
    if marked:
        return KeyedPrompt(layout.question, layout, extra)
    split = split_turn(layout.question, extractor)
    if split is None:
        return exact_prompt(whole, tools=tools)
    q, template = split
    if template != TEMPLATE_MARK:
        extra["template"] = template
    return KeyedPrompt(q, layout.with_question(q), extra)


def key_text(prompt: str, *, extractor: QuestionExtractor | None = None,
             tools: Sequence[Mapping[str, Any]] = ()) -> KeyedPrompt:
    """Key a completion prompt: a labelled question (or ``extractor``'s) with the rest of the text in the
    partition; otherwise the whole prompt, exactly. A completion prompt is never embedded whole: it
    carries its instructions and context with the question."""
    from ragcache.request.question import labelled_question

    split = split_turn(prompt, extractor) if (extractor is not None or labelled_question(prompt)) else None
    tools = [_json(dict(t)) for t in tools]
    if split is None:
        return exact_prompt(prompt, tools=tools)
    q, template = split
    return KeyedPrompt(q, PromptLayout.build(question=q, tools=tools, lint="off"),
                       {"template": template, "completion": True})


__all__ = [
    "PROVIDER_MARKERS",
    "KeyedPrompt",
    "exact_prompt",
    "history_entry",
    "key_messages",
    "key_text",
    "marked_block",
]
