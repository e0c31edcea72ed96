"""The turns of chat messages for :meth:`ragcache.prompt.layout.PromptLayout.from_messages`: system texts,
history, and the final user turn's blocks with their kinds (document, volatile, question).

The one rule for unmarked chat text lives here and in ``from_messages``; adapters map their
message types to these dicts / :class:`~ragcache.prompt.segments.Segment` blocks and never infer kinds.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ragcache.prompt.segments import Segment, history_text
from ragcache.text_checks import check_encodable


class CachePoint:
    """A marker in a final user turn's content for :meth:`PromptLayout.from_messages`: the blocks
    before the last marker are the cacheable part (documents), those after it volatile text and the
    question (LlamaIndex's ``CachePoint`` maps to it). Use the instance :data:`CACHE_POINT`."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "CACHE_POINT"


CACHE_POINT = CachePoint()
_ROLES = ("system", "user", "assistant")
_FINAL_KINDS = ("document", "volatile", "question")


def _has_text(content: Any) -> bool:
    """Whether message content holds any non-blank text (non-text blocks count as content)."""
    if isinstance(content, str):
        return bool(content.strip())
    if isinstance(content, Segment):
        return bool(content.text.strip())
    if isinstance(content, Mapping) and content.get("type", "text") == "text":
        return _has_text(content.get("text"))
    if isinstance(content, Sequence):
        return any(_has_text(b) for b in content if not isinstance(b, CachePoint))
    return content is not None


def split_messages(messages: Any) -> tuple[list[str], list[dict], Any]:
    """``(system texts, history dicts, final user content)`` of chat messages (see from_messages)."""
    if isinstance(messages, str | bytes | Mapping) or not isinstance(messages, Sequence) or not messages:
        raise ValueError("messages must be a non-empty list of {'role', 'content'} dicts")
    msgs = []
    for i, m in enumerate(messages):
        if not isinstance(m, Mapping) or m.get("role") not in _ROLES:
            role = m.get("role") if isinstance(m, Mapping) else type(m).__name__
            raise ValueError(f"messages[{i}] has role {role!r}: use 'system', 'user' or 'assistant' dicts")
        content = m.get("content")
        if not (content is None or isinstance(content, str | Segment | Mapping | CachePoint)
                or isinstance(content, Sequence) and not isinstance(content, bytes)):
            raise TypeError(f"messages[{i}]['content'] has type {type(content).__name__}: give a str or a list of "
                             "text blocks ({'type': 'text', 'text': ...})")
        check_encodable(content, f"messages[{i}]['content']")
        if _has_text(m.get("content")) or set(m) - {"role", "content"}:  # e.g. a tool call with no text
            msgs.append(m)
    last = max((i for i, m in enumerate(msgs) if m["role"] == "user"), default=None)
    if last is None:
        raise ValueError("messages hold no user message with text: the last user message is the question turn")
    if last + 1 < len(msgs):
        raise ValueError(f"a {msgs[last + 1]['role']!r} message follows the last user message: the final user "
                         "turn (documents, volatile text, question) must be the last message")
    if last > 0 and msgs[last - 1]["role"] == "user" and all(kind is not None for kind, _ in _marks(msgs[last]["content"])):
        # a final message of marked blocks only (the volatile text a layout middleware appends after
        # the question) belongs to the user turn before it: one final turn
        merged = [*_as_blocks(msgs[last - 1]["content"]), *_as_blocks(msgs[last]["content"])]
        msgs = [*msgs[:last - 1], {"role": "user", "content": merged}]
        last -= 1
    lead = 0
    while lead < last and msgs[lead]["role"] == "system":
        lead += 1
    systems = [history_text(m["content"]) if not isinstance(m["content"], str) else m["content"] for m in msgs[:lead]]
    history = [dict(m) if m["role"] != "system" else {**m, "role": "user", "type": "system"} for m in msgs[lead:last]]
    return systems, history, msgs[last]["content"]


def _as_blocks(content: Any) -> list[Any]:
    return [content] if isinstance(content, str) else list(content)


def _marks(content: Any) -> list[tuple[str | None, Any]]:
    """``(mark, block)`` of each block: a Segment's kind, a dict's ``ragcache_kind``, else ``None``."""
    return [(b.kind if isinstance(b, Segment) else b.get("ragcache_kind") if isinstance(b, Mapping) else None, b)
            for b in _as_blocks(content) if not isinstance(b, CachePoint)]


def final_turn_blocks(content: Any) -> list[tuple[str, Any]]:
    """``(kind, block)`` of each non-empty block of the final user turn in order; ``block`` is a
    Segment or ``(text, id)``. The kind rule of :meth:`PromptLayout.from_messages`."""
    items: list[tuple[str | None, Any]] = []
    cut = None
    for b in [content] if isinstance(content, str) else content:
        if isinstance(b, CachePoint):
            cut = len(items)
        elif isinstance(b, Segment):
            if b.kind not in _FINAL_KINDS:
                raise ValueError(f"a final-turn block of kind {b.kind!r}: use document, volatile or question")
            if b.text.strip():
                items.append((b.kind, b))
        elif isinstance(b, str | Mapping):
            text = b if isinstance(b, str) else b.get("text")
            if isinstance(b, Mapping) and b.get("type", "text") != "text" or not isinstance(text, str):
                kind = b.get("type") if isinstance(b, Mapping) else type(b).__name__
                raise ValueError(f"the final user turn holds a {kind!r} block: prompts take text blocks only")
            kind = b.get("ragcache_kind") if isinstance(b, Mapping) else None
            if kind is not None and kind not in _FINAL_KINDS:
                raise ValueError(f"a final-turn block marked {kind!r}: use document, volatile or question")
            doc_id = b.get("id") if isinstance(b, Mapping) else None
            if text.strip():
                items.append((kind, (text, None if doc_id is None else str(doc_id))))
        else:
            raise ValueError(f"content blocks must be text, a Segment or CACHE_POINT; got {type(b).__name__}")
    unmarked = [i for i, (kind, _) in enumerate(items) if kind is None]
    q = unmarked[-1] if unmarked and all(kind != "question" for kind, _ in items) else None
    return [(kind or ("question" if i == q else "document" if cut is None or i < cut else "volatile"), b)
            for i, (kind, b) in enumerate(items)]


__all__ = ["CACHE_POINT", "CachePoint"]
