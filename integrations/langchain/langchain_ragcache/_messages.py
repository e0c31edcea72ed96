"""LangChain messages <-> ragcache's request parts.

Three conversions share this module so that every part of the package agrees on
which text is the question, which blocks are documents, and what is "everything
else":

* :func:`langchain_ragcache._keys.to_dicts` is the one mapping of LangChain messages to chat dicts,
  read both by the keyer (:mod:`langchain_ragcache._keys` splits them into the question and the
  partition: the semantic cache and the middleware) and by the local engine;
* :func:`to_layout` gives the engine's :class:`~ragcache.prompt.layout.PromptLayout` of those dicts
  (through :func:`engine_messages`, the chat messages
  :meth:`ragcache.prompt.layout.PromptLayout.from_messages` reads), which
  :meth:`ragcache.engine.engine.LocalEngine.build_prompt` renders (documents as documents, so the
  chunk cache reuses their KV);
* :func:`parse_cache_prompt` reads the ``prompt`` string that LangChain hands a
  ``BaseCache`` (``langchain_core.load.dumps`` of the message list).

Which block is what: :class:`~langchain_ragcache.prompts.RagPrompt` records the
kind and id of every block of its user message in
``HumanMessage.additional_kwargs["ragcache"]["blocks"]`` (provider adapters do not
send ``additional_kwargs``, so the content blocks stay plain); this module maps those records to
typed :class:`~ragcache.prompt.layout.Segment` blocks. A block may also carry ``"ragcache_kind"`` itself.
The kind of unmarked text is decided by :meth:`~ragcache.prompt.layout.PromptLayout.from_messages` alone
(in a final user message of several text blocks, every block but the last is a document).
"""

from __future__ import annotations

import json
import warnings
from collections.abc import Mapping, Sequence
from typing import Any

from langchain_core.messages import BaseMessage

from ragcache.prompt.layout import PromptLayout, Segment
from ragcache.request import marked_block

from langchain_ragcache._keys import to_dicts

_PROVIDER_MARKERS = ("cache_control", "citations", "index")


def _text_blocks(content: Any, *, where: str) -> list[dict[str, Any]]:
    """Content as a list of text-block dicts; markers such as ``cache_control`` dropped.

    Raises:
        ValueError: a non-text block (image, audio, tool use...), which the local engine cannot read.
    """
    if isinstance(content, str):
        return [{"type": "text", "text": content}] if content else []
    out: list[dict[str, Any]] = []
    for i, b in enumerate(content or []):
        if isinstance(b, str):
            out.append({"type": "text", "text": b})
        elif isinstance(b, Mapping) and b.get("type", "text") == "text":
            blk = {k: v for k, v in b.items() if k not in _PROVIDER_MARKERS and k != "extras"}
            blk["type"] = "text"
            blk["text"] = str(b.get("text", ""))
            out.append(blk)
        elif isinstance(b, Mapping) and b.get("type") in ("reasoning", "thinking"):
            continue  # a model's reasoning trace is not part of the prompt we send back
        else:
            kind = b.get("type") if isinstance(b, Mapping) else type(b).__name__
            raise ValueError(
                f"{where}.content[{i}] is a {kind!r} block: ragcache's local model reads text only; "
                "pass text content (describe images or files in text) or use a multimodal model"
            )
    return out


def _role(entry: Mapping[str, Any]) -> str:
    """The chat-template role of a :func:`~langchain_ragcache._keys.to_dicts` entry: its own for a human,
    system or ai message (``user`` / ``system`` / ``assistant``), ``user`` for a tool result, the message's
    for a ``ChatMessage`` of one of those roles (a ``system`` one and a late system message are marked
    ``"type": "system"``).

    Raises:
        ValueError: a function message, or a ``ChatMessage`` of another role."""
    t = entry.get("type")
    if t is None:
        return str(entry["role"])
    if t == "system":
        return "system"
    if t == "tool":
        return "user"  # the chat template has no tool role: results go back as a user turn
    if t == "chat" and entry.get("role") in ("user", "assistant"):
        return str(entry["role"])
    raise ValueError(
        f"ChatRagCache cannot send a {t!r} message to a local model: use system, human, ai and tool messages"
    )


def _text(block: str | Segment) -> str:
    return block.text if isinstance(block, Segment) else block


def _marked_blocks(blocks: list[dict[str, Any]]) -> list[str | Segment]:
    """Text blocks as :meth:`PromptLayout.from_messages` reads them: typed by their ``ragcache_kind`` (which
    :func:`~langchain_ragcache._keys.to_dicts` set from RagPrompt's record) and ``id``, else plain text."""
    return [marked_block(b["text"], b.get("ragcache_kind"), b.get("id")) for b in blocks]


def engine_messages(entries: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The chat messages :meth:`PromptLayout.from_messages` reads, from LangChain messages as
    :func:`~langchain_ragcache._keys.to_dicts` maps them (the mapping the cache key reads too):
    ``{"role", "content"}`` with content a string or a list of texts and typed
    :class:`~ragcache.prompt.layout.Segment` blocks. Consecutive system messages are joined by a blank line;
    tool calls and results become text turns (:func:`~langchain_ragcache.tools.tool_history_text`: the local
    chat template has no tool role).

    Raises:
        ValueError: an empty message list, a function message, or non-text content.
    """
    if not entries:
        raise ValueError("no messages: give at least one human message")
    out: list[dict[str, Any]] = []
    from langchain_ragcache.tools import tool_history_text

    for mi, entry in enumerate(entries):
        role = _role(entry)
        tool_text = tool_history_text(entry)
        if tool_text is not None:
            out.append({"role": role, "content": tool_text})
            continue
        blocks = _marked_blocks(_text_blocks(entry.get("content"), where=f"messages[{mi}]"))
        if role == "system" and out and out[-1]["role"] == "system":
            out[-1]["content"] = "\n\n".join([out[-1]["content"], *(_text(b) for b in blocks)])
            continue
        if role == "system" or (len(blocks) == 1 and isinstance(blocks[0], str)):
            out.append({"role": role, "content": "\n\n".join(_text(b) for b in blocks)})
        else:
            out.append({"role": role, "content": blocks or ""})
    return out


def to_layout(messages: Sequence[BaseMessage]) -> PromptLayout:
    """The :class:`~ragcache.prompt.layout.PromptLayout` of LangChain chat messages (what the local engine
    renders): the messages mapped once (:func:`~langchain_ragcache._keys.to_dicts`, the cache key's mapping),
    as :func:`engine_messages`, read by :meth:`PromptLayout.from_messages`.

    Raises:
        ValueError: as :func:`engine_messages` and :meth:`PromptLayout.from_messages` (no human
            turn with text, a message after the last human turn).
    """
    return PromptLayout.from_messages(engine_messages(to_dicts(messages)))


def without_ids(messages: Sequence[BaseMessage]) -> list[BaseMessage]:
    """``messages`` with no message ids (copies where one was set): an id plays no part in a cache key."""
    return [m.model_copy(update={"id": None}) if getattr(m, "id", None) is not None else m for m in messages]


def _plain(value: Any) -> bool:
    if value is None or isinstance(value, bool | int | float | str):
        return True
    if isinstance(value, list | tuple):
        return all(_plain(v) for v in value)
    if isinstance(value, dict):
        return all(isinstance(k, str) and _plain(v) for k, v in value.items())
    return False


def plain_messages(messages: Sequence[BaseMessage]) -> bool:
    """Whether every field of every message is plain data (``None``, numbers, strings, and lists, tuples
    and dicts of them): what LangChain's ``dumps`` gives back through :func:`parse_cache_prompt` as it was.
    A message holding another object (a retriever tool's ``Document`` artifacts) does not come back, so
    LangChain's cache prompt of it is keyed as text."""
    return all(_plain(getattr(m, name, None)) for m in messages for name in type(m).model_fields)


def parse_cache_prompt(prompt: str) -> list[BaseMessage] | None:
    """Messages from the ``prompt`` string a chat model hands its ``BaseCache``, or ``None``.

    Chat models pass ``langchain_core.load.dumps(messages)``; completion LLMs pass the
    raw prompt text (then ``None`` is returned and the caller embeds the text as is).
    Only message classes are deserialised (``allowed_objects="messages"``).
    """
    text = prompt.lstrip()
    if not text.startswith("[") or '"lc"' not in text:
        return None
    try:
        raw = json.loads(prompt)
    except ValueError:
        return None
    if not isinstance(raw, list) or not all(isinstance(x, dict) and x.get("lc") == 1 for x in raw):
        return None
    from langchain_core.load import loads

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            msgs = loads(prompt, allowed_objects="messages")
        except Exception:  # noqa: BLE001 - a prompt we cannot parse is treated as plain text
            return None
    if not isinstance(msgs, list) or not all(isinstance(m, BaseMessage) for m in msgs):
        return None
    return msgs
