"""Chat-template rendering into separately tokenised prompt pieces.

The engine renders messages with the tokenizer's own chat template, with every content
piece replaced by a sentinel; the rendered string is then split at the sentinels so that
each piece (template text, system text, each document, the question) is tokenised once on
its own, and the joined ids are what the forward pass sees. A document therefore has the
same token ids wherever it lands, which is what makes position-independent chunk keys work.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

DOC_SEPARATOR = "\n\n"


@dataclass(slots=True)
class PromptPiece:
    """A separately tokenised piece of a prompt.

    Attributes:
        kind: ``template`` (chat-template and separator text), ``system``, ``tools``,
            ``document``, ``history``, ``volatile``, ``question`` or ``raw``.
        text: the piece's text.
        ids: its token ids (tokenised on its own, no special tokens added).
        doc_id: document id for ``document`` pieces, when known.
    """

    kind: str
    text: str
    ids: list[int]
    doc_id: str | None = None


@dataclass(slots=True)
class Prompt:
    """A prompt as a list of pieces; :attr:`input_ids` is their concatenation."""

    pieces: list[PromptPiece] = field(default_factory=list)

    @property
    def input_ids(self) -> list[int]:
        out: list[int] = []
        for p in self.pieces:
            out.extend(p.ids)
        return out

    def __len__(self) -> int:
        return sum(len(p.ids) for p in self.pieces)

    def document_spans(self) -> list[tuple[int, int, PromptPiece]]:
        """``(start, end, piece)`` token spans of the document pieces, in prompt order."""
        spans, pos = [], 0
        for p in self.pieces:
            if p.kind == "document" and p.ids:
                spans.append((pos, pos + len(p.ids), p))
            pos += len(p.ids)
        return spans

    @property
    def text(self) -> str:
        return "".join(p.text for p in self.pieces)


def _blocks(content: Any) -> list[dict]:
    if content is None:
        return []
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    if isinstance(content, Sequence):
        out = []
        for b in content:
            if isinstance(b, str):
                out.append({"type": "text", "text": b})
            elif isinstance(b, dict) and b.get("type", "text") == "text":
                out.append(b)
            elif isinstance(b, dict):
                raise ValueError(f"unsupported content block type {b.get('type')!r}: the local engine takes text blocks only")
            else:
                raise ValueError(f"content blocks must be dicts or strings, got {type(b).__name__}")
        return out
    raise ValueError(f"message content must be a string or a list of blocks, got {type(content).__name__}")


def render_messages(tokenizer: Any, messages: Sequence[dict], *, add_generation_prompt: bool = True) -> Prompt:
    """Render chat ``messages`` with the tokenizer's chat template into tokenised pieces.

    Message content is a string or a list of text blocks. A block may carry
    ``"ragcache_kind"`` (``document``, ``volatile``, ``question``...) and ``"id"``; in a user
    message of several unmarked blocks every block but the last is a document. Blocks of one
    message are joined with a blank line.

    Raises:
        ValueError: empty message list, unknown role, or non-text content.
    """
    if not messages:
        raise ValueError("messages is empty: give at least one user message")
    tag = uuid.uuid4().hex[:8]
    sentinel = "\x00RC{}_{}\x00"
    pieces_meta: list[tuple[str, str, str | None]] = []  # (kind, text, doc_id) in sentinel order
    templ_msgs = []
    last_user = max((i for i, m in enumerate(messages) if m.get("role") == "user"), default=-1)
    for mi, m in enumerate(messages):
        role = m.get("role")
        if role not in ("system", "user", "assistant"):
            raise ValueError(f"unknown message role {role!r}: use 'system', 'user' or 'assistant'")
        blocks = _blocks(m.get("content"))
        parts = []
        for bi, b in enumerate(blocks):
            kind = b.get("ragcache_kind")
            if kind is None:
                if role == "system":
                    kind = "system"
                elif mi != last_user or role == "assistant":
                    kind = "history"
                elif len(blocks) > 1 and bi < len(blocks) - 1:
                    kind = "document"
                else:
                    kind = "question"
            parts.append(sentinel.format(tag, len(pieces_meta)))
            pieces_meta.append((kind, str(b.get("text", "")), b.get("id")))
        templ_msgs.append({"role": role, "content": DOC_SEPARATOR.join(parts)})
    if tokenizer.chat_template:
        rendered = tokenizer.apply_chat_template(templ_msgs, tokenize=False, add_generation_prompt=add_generation_prompt)
    else:  # plain fallback for base models without a chat template
        rendered = "".join(f"{m['role']}: {m['content']}\n" for m in templ_msgs) + ("assistant: " if add_generation_prompt else "")
    pattern = re.compile("\x00RC" + tag + r"_(\d+)\x00")
    pieces: list[PromptPiece] = []
    pos = 0
    for match in pattern.finditer(rendered):
        if match.start() > pos:
            _add(pieces, tokenizer, "template", rendered[pos:match.start()])
        kind, text, doc_id = pieces_meta[int(match.group(1))]
        _add(pieces, tokenizer, kind, text, doc_id)
        pos = match.end()
    if pos < len(rendered):
        _add(pieces, tokenizer, "template", rendered[pos:])
    return Prompt(pieces)


def render_blocks(tokenizer: Any, blocks: Sequence[Any], *, add_generation_prompt: bool = True) -> Prompt:
    """Render :meth:`ragcache.layout.PromptLayout.blocks` with the chat template: consecutive blocks
    of one role form one message, each block keeps its kind (so documents become ``document``
    pieces with their ``doc_id``), and ``tools`` blocks are dropped (the local engine has no tool
    channel; tools still enter the semantic partition). Same pieces as :func:`render_messages`.

    Raises:
        ValueError: no blocks, or an unknown role.
    """
    messages: list[dict] = []
    for b in blocks:
        if b.kind == "tools":
            continue
        block = {"type": "text", "text": b.text, "ragcache_kind": b.kind}
        if b.doc_id is not None:
            block["id"] = b.doc_id
        if messages and messages[-1]["role"] == b.role and b.kind != "history":
            messages[-1]["content"].append(block)
        else:
            messages.append({"role": b.role, "content": [block]})
    return render_messages(tokenizer, messages, add_generation_prompt=add_generation_prompt)


def document_token_ids(tokenizer: Any, document: Any) -> list[int]:
    """The token ids a document has in every prompt: its :func:`ragcache.layout.render_document`
    bytes (``<document id=...>`` wrapper included), tokenised on their own without special tokens,
    exactly as :func:`render_blocks` tokenises a document piece. ``document``: anything
    :func:`ragcache.layout.as_document` takes. Chunk-cache keys hash these ids.

    Raises:
        ValueError: a document :func:`~ragcache.layout.as_document` cannot read.
    """
    from ragcache.layout import as_document, render_document

    return list(tokenizer.encode(render_document(as_document(document)), add_special_tokens=False))


def _add(pieces: list[PromptPiece], tokenizer: Any, kind: str, text: str, doc_id: str | None = None) -> None:
    if not text:
        return
    ids = list(tokenizer.encode(text, add_special_tokens=False))
    pieces.append(PromptPiece(kind, text, ids, doc_id))


def raw_prompt(tokenizer: Any, text: str) -> Prompt:
    """A prompt of plain text, no chat template (special tokens such as BOS are not added)."""
    p: list[PromptPiece] = []
    _add(p, tokenizer, "raw", text)
    return Prompt(p)
