"""LangChain messages <-> ragcache's request parts.

Three conversions share this module so that every part of the package agrees on
which text is the question, which blocks are documents, and what is "everything
else":

* :func:`to_engine_messages` turns LangChain messages into the chat messages
  :meth:`ragcache.engine.engine.LocalEngine.build_prompt` takes, with document
  blocks marked ``"ragcache_kind": "document"`` (so the chunk cache reuses their KV);
* :func:`split_request` splits messages into (question, system, history,
  documents, volatile, tools) for the semantic cache's partition key;
* :func:`parse_cache_prompt` reads the ``prompt`` string that LangChain hands a
  ``BaseCache`` (``langchain_core.load.dumps`` of the message list).

Which block is what: :class:`~langchain_ragcache.prompts.RagPrompt` records the
kind and id of every block of its user message in
``HumanMessage.additional_kwargs["ragcache"]["blocks"]`` (provider adapters do not
send ``additional_kwargs``, so the content blocks stay plain). A block may also
carry ``"ragcache_kind"`` itself. Without either, the engine's convention holds:
in a final user message of several text blocks, every block but the last is a
document and the last is the question.
"""

from __future__ import annotations

import json
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage

METADATA_KEY = "ragcache"
"""Key of the block-kind record in ``HumanMessage.additional_kwargs``."""

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


def _kinds(message: BaseMessage, n: int) -> list[dict[str, Any]] | None:
    meta = (message.additional_kwargs or {}).get(METADATA_KEY)
    if not isinstance(meta, Mapping):
        return None
    blocks = meta.get("blocks")
    if not isinstance(blocks, Sequence) or len(blocks) != n:
        return None
    return [dict(b) for b in blocks]


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


def _marked_blocks(message: BaseMessage, blocks: list[dict[str, Any]]) -> list[dict[str, Any]]:
    kinds = _kinds(message, len(blocks))
    if kinds is None:
        return blocks
    out = []
    for b, k in zip(blocks, kinds, strict=True):
        b = dict(b)
        if k.get("kind"):
            b["ragcache_kind"] = k["kind"]
        if k.get("id") is not None:
            b["id"] = str(k["id"])
        out.append(b)
    return out


def to_engine_messages(messages: Sequence[BaseMessage]) -> list[dict[str, Any]]:
    """Chat messages for :meth:`LocalEngine.build_prompt`.

    Content becomes a string (one plain text block) or a list of text blocks with
    ``ragcache_kind`` / ``id`` where known. Consecutive system messages are joined.

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
            prev = out[-1]["content"]
            prev_text = prev if isinstance(prev, str) else "\n\n".join(b["text"] for b in prev)
            out[-1]["content"] = "\n\n".join([prev_text, *(b["text"] for b in blocks)])
            continue
        if len(blocks) == 1 and set(blocks[0]) == {"type", "text"}:
            out.append({"role": role, "content": blocks[0]["text"]})
        else:
            out.append({"role": role, "content": blocks or ""})
    return out


@dataclass(slots=True)
class RequestParts:
    """A chat request split the way ragcache's semantic cache keys it.

    ``question``: text of the last human turn's question block (what is embedded);
    everything else is matched exactly: ``system`` text, ``history`` (earlier turns as
    ``{"role", "content"}``, markers dropped), ``documents`` (``{"text", "id"}``),
    ``volatile`` text, and ``other`` (any blocks after the last human turn).
    """

    question: str
    system: str | None = None
    history: list[dict[str, Any]] = field(default_factory=list)
    documents: list[dict[str, Any]] = field(default_factory=list)
    volatile: list[str] = field(default_factory=list)
    other: list[dict[str, Any]] = field(default_factory=list)


def _plain(message: BaseMessage) -> dict[str, Any]:
    """A message as canonical JSON-like data without provider markers or ids."""
    content = message.content
    if isinstance(content, list):
        content = [
            {k: v for k, v in b.items() if k not in _PROVIDER_MARKERS and k != "id"} if isinstance(b, Mapping) else b
            for b in content
        ]
    d: dict[str, Any] = {"role": message.type, "content": content}
    calls = getattr(message, "tool_calls", None)
    if calls:
        d["tool_calls"] = [{"name": c.get("name"), "args": c.get("args")} for c in calls]
    tcid = getattr(message, "tool_call_id", None)
    if tcid:
        d["tool_call_id"] = tcid
    return d


def split_request(messages: Sequence[BaseMessage]) -> RequestParts:
    """Split messages into the question (last human turn) and the exact parts.

    The last human message's blocks are classified by their recorded kind (see the
    module docstring); without kinds, all but the last text block are documents.
    Non-text blocks in that message go to ``other`` (matched exactly).

    Raises:
        ValueError: there is no human message, or its question text is empty.
    """
    last = max((i for i, m in enumerate(messages) if m.type == "human"), default=None)
    if last is None:
        raise ValueError("the request has no human message, so there is no question to embed")
    system_parts = [m for m in messages[:last] if m.type == "system"]
    system = "\n\n".join(m.text for m in system_parts) or None
    history = [_plain(m) for m in messages[:last] if m.type != "system"]
    human = messages[last]
    content = human.content if isinstance(human.content, list) else [{"type": "text", "text": human.content}]
    texts: list[dict[str, Any]] = []
    other: list[dict[str, Any]] = []
    for b in content:
        if isinstance(b, str):
            texts.append({"type": "text", "text": b})
        elif isinstance(b, Mapping) and b.get("type", "text") == "text":
            texts.append(dict(b))
        else:
            other.append({k: v for k, v in dict(b).items() if k not in _PROVIDER_MARKERS})
    kinds = _kinds(human, len(content)) if len(texts) == len(content) else None
    parts = RequestParts(question="", system=system, history=history, other=other)
    parts.other += [_plain(m) for m in messages[last + 1:]]
    if kinds is None:
        kinds = [{"kind": b.get("ragcache_kind")} for b in texts]
        if all(k["kind"] is None for k in kinds):
            kinds = [{"kind": "document"}] * (len(texts) - 1) + [{"kind": "question"}] if texts else []
    question: list[str] = []
    for b, k in zip(texts, kinds, strict=True):
        kind = k.get("kind") or "question"
        text = str(b.get("text", ""))
        if kind == "document":
            parts.documents.append({"text": text, "id": k.get("id", b.get("id"))})
        elif kind == "volatile":
            parts.volatile.append(text)
        elif kind == "question":
            question.append(text)
        else:
            parts.other.append({"kind": kind, "text": text})
    parts.question = "\n\n".join(q for q in question if q.strip())
    if not parts.question.strip():
        raise ValueError("the last human message has no question text to embed")
    return parts


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
