"""LangChain messages <-> ragcache's request parts.

Three conversions share this module so that every part of the package agrees on
which text is the question, which blocks are documents, and what is "everything
else":

* :func:`to_layout` maps LangChain messages to the request's
  :class:`~ragcache.prompt.layout.PromptLayout` (through :func:`to_engine_messages`, the chat messages
  :meth:`ragcache.prompt.layout.PromptLayout.from_messages` reads), which
  :meth:`ragcache.engine.engine.LocalEngine.build_prompt` renders (documents as documents, so the
  chunk cache reuses their KV);
* :mod:`langchain_ragcache._keys` splits messages into the question and the
  partition (the semantic cache and the middleware);
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

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage

from ragcache.prompt.layout import PromptLayout, Segment
from ragcache.request import marked_block

from langchain_ragcache._keys import block_kinds

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


def _role(message: BaseMessage) -> str:
    if isinstance(message, SystemMessage) or message.type == "system":
        return "system"
    if isinstance(message, HumanMessage) or message.type == "human":
        return "user"
    if isinstance(message, AIMessage) or message.type == "ai":
        return "assistant"
    if message.type == "chat" and getattr(message, "role", None) in ("system", "user", "assistant"):
        return str(message.role)
    if message.type == "tool":
        return "user"  # the chat template has no tool role: results go back as a user turn
    raise ValueError(
        f"ChatRagCache cannot send a {message.type!r} message to a local model: use system, human, ai "
        "and tool messages"
    )


def _text(block: str | Segment) -> str:
    return block.text if isinstance(block, Segment) else block


def _marked_blocks(message: BaseMessage, blocks: list[dict[str, Any]]) -> list[str | Segment]:
    kinds = block_kinds(message, len(blocks)) or [{"kind": b.get("ragcache_kind"), "id": b.get("id")} for b in blocks]
    return [marked_block(b["text"], k.get("kind"), k.get("id")) for b, k in zip(blocks, kinds, strict=True)]


def to_engine_messages(messages: Sequence[BaseMessage]) -> list[dict[str, Any]]:
    """The chat messages :meth:`PromptLayout.from_messages` reads: ``{"role", "content"}`` with
    content a string or a list of texts and typed :class:`~ragcache.prompt.layout.Segment` blocks (kinds
    from RagPrompt's record or a ``ragcache_kind`` key). Consecutive system messages are joined;
    tool calls and results become text turns (the local chat template has no tool role).

    Raises:
        ValueError: an empty message list, a tool/function message, or non-text content.
    """
    if not messages:
        raise ValueError("no messages: give at least one human message")
    out: list[dict[str, Any]] = []
    from langchain_ragcache.tools import tool_history_text

    for mi, m in enumerate(messages):
        role = _role(m)
        tool_text = tool_history_text(m)
        if tool_text is not None:
            out.append({"role": role, "content": tool_text})
            continue
        blocks = _marked_blocks(m, _text_blocks(m.content, where=f"messages[{mi}]"))
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
    renders): :func:`to_engine_messages` read by :meth:`PromptLayout.from_messages`.

    Raises:
        ValueError: as :func:`to_engine_messages` and :meth:`PromptLayout.from_messages` (no human
            turn with text, a message after the last human turn).
    """
    return PromptLayout.from_messages(to_engine_messages(messages))


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
