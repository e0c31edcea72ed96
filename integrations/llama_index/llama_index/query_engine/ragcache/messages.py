"""A ragcache :class:`~ragcache.prompt.layout.PromptLayout` as LlamaIndex chat messages, shaped by the
LLM's prompt caching (its provider row, :func:`ragcache.providers.table.for_llama_index`).

- local KV (:class:`~llama_index.llms.ragcache.RagCacheLLM`): system message, then one user message
  with one ``TextBlock`` per document, a ``CachePoint`` after the last document (it tells
  the engine where the cacheable documents end), the volatile text and the question.
- ``cache_control`` breakpoints (``llama_index.llms.anthropic.Anthropic``): the same shape with ``CachePoint`` blocks
  where :func:`ragcache.providers.anthropic.breakpoints.layout_request` places Anthropic
  breakpoints (at most 4; a prefix below the model's minimum cacheable length gets
  none). ``llama-index-llms-anthropic`` sends the system message as a plain string,
  which cannot carry ``cache_control``, so a system breakpoint is dropped: the system
  text is still cached as part of every document breakpoint's prefix.
- any other prompt caching, or an LLM the table does not know: the same blocks without ``CachePoint`` s.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from llama_index.core.base.llms.types import (
    CacheControl,
    CachePoint,
    ChatMessage,
    MessageRole,
    TextBlock,
)

from ragcache.prompt.layout import PromptLayout, render_document
from ragcache.providers.spec import PromptCaching
from ragcache.providers.table import for_llama_index

LLMKind = Literal["ragcache", "anthropic", "generic"]
"""The words of :func:`llm_kind` (before the provider table): one per prompt-caching style."""
MAX_MARKERS = 4
_KIND_OF: dict[str, LLMKind] = {"local-kv": "ragcache", "breakpoints": "anthropic", "automatic-prefix": "generic",
                                "none": "generic"}
"""The :data:`LLMKind` word of each :data:`~ragcache.providers.spec.PromptCaching` style (and back)."""


def llm_kind(llm: Any) -> LLMKind:
    """The LLM's kind, kept for code written before the provider table: its row's prompt caching
    (:func:`ragcache.providers.table.for_llama_index`) in the old words: ``"ragcache"`` (local KV:
    :class:`~llama_index.llms.ragcache.RagCacheLLM`), ``"anthropic"`` (``cache_control`` breakpoints:
    ``llama_index.llms.anthropic.Anthropic`` and subclasses), else ``"generic"``."""
    return _KIND_OF[for_llama_index(llm).prompt_caching]


@dataclass(slots=True)
class LaidOutMessages:
    """Messages for one request and what was decided: ``markers`` (CachePoints placed,
    never more than 4), ``breakpoints`` (where, for Anthropic), ``notes`` (why a
    breakpoint was skipped or dropped)."""

    messages: list[ChatMessage]
    markers: int = 0
    breakpoints: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def _point(ttl: str = "5m") -> CachePoint:
    return CachePoint(cache_control=CacheControl(type="ephemeral", ttl=ttl))


def _user_blocks(layout: PromptLayout) -> list[str]:
    texts = [render_document(d) for d in layout.documents]
    if layout.volatile:
        texts.append(layout.volatile)
    texts.append(layout.question)
    return texts


def layout_messages(layout: PromptLayout, kind: PromptCaching | LLMKind, *, model: str = "", max_tokens: int = 256,
                    min_tokens: Mapping[str, int] | int | None = None,
                    token_counter: Callable[[str], int] | None = None) -> LaidOutMessages:
    """Chat messages for ``layout`` shaped for an LLM kind (see the module docstring).

    Args:
        layout: the request's layout (documents already in their final order).
        kind: the LLM's prompt caching (its provider row's
            :attr:`~ragcache.providers.spec.Provider.prompt_caching`: ``breakpoints``, ``local-kv``,
            ``automatic-prefix``, ``none``), or a :func:`llm_kind` word.
        model / max_tokens / min_tokens / token_counter: Anthropic breakpoint placement
            (model id, decode budget, minimum cacheable length overrides, exact token
            counter such as a local server engine's ``count_tokens``).
    """
    system = [ChatMessage(role=MessageRole.SYSTEM, content=layout.system_text)] if layout.system_text else []
    history = [ChatMessage(role=MessageRole(m["role"]), content=m["content"]) for m in layout.history]
    texts = _user_blocks(layout)
    caching = {k: c for c, k in _KIND_OF.items() if c != "none"}.get(kind, kind)
    if caching != "breakpoints":
        blocks: list[Any] = [TextBlock(text=t) for t in texts]
        markers = 0
        if caching == "local-kv" and layout.documents:
            blocks.insert(len(layout.documents), _point())
            markers = 1
        return LaidOutMessages([*system, *history, ChatMessage(role=MessageRole.USER, blocks=blocks)], markers)

    from ragcache.providers.anthropic.breakpoints import layout_request

    req = layout_request(layout, model=model, max_tokens=max_tokens, min_tokens=min_tokens,
                         token_counter=token_counter)
    notes = list(req.notes)
    marked = {b.path: b.cache_control for b in req.blocks if b.cache_control is not None}
    messages = list(system)
    placed: list[str] = []
    for path, cc in marked.items():
        if path[0] != "messages":
            notes.append(f"breakpoint on {'.'.join(map(str, path))} dropped: llama-index-llms-anthropic sends the "
                         "system prompt as a string; the document breakpoints still cache it as prefix")
    for mi, msg in enumerate(req.kwargs["messages"]):
        content = msg["content"]
        parts = [{"type": "text", "text": content}] if isinstance(content, str) else content
        blocks = []
        for bi, b in enumerate(parts):
            blocks.append(TextBlock(text=b["text"]))
            cc = marked.get(("messages", mi, bi))
            if cc is not None:
                blocks.append(_point(cc.get("ttl", "5m")))
                placed.append(f"messages.{mi}.content.{bi}")
        messages.append(ChatMessage(role=MessageRole(msg["role"]), blocks=blocks))
    if len(placed) > MAX_MARKERS:  # add_breakpoints never places more; keep the invariant explicit
        raise RuntimeError(f"{len(placed)} cache markers placed; Anthropic accepts at most {MAX_MARKERS}")
    return LaidOutMessages(messages, len(placed), placed, notes)
