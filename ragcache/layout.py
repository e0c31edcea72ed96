"""Stable-first prompt layout and the volatile-text lint.

A prompt cache (a provider's, or the local exact prefix KV cache) only pays when
the bytes before a breakpoint are identical from one request to the next. This
module turns the parts of a RAG request into a :class:`PromptLayout` whose order
and bytes are stable:

``system text -> tools -> history -> documents -> volatile text -> question``

* documents are rendered canonically (NFC, ``\\n`` newlines, metadata attributes
  in sorted key order) and, by default, sorted by id, else by content hash, so
  the same retrieved set gives the same bytes whatever order the retriever
  returned it in;
* tool definitions are copied with their keys sorted at every level;
* the lint finds text that changes per request (dates, times, weekdays, UUIDs,
  request ids, counters, epoch timestamps, retrieval scores in document metadata)
  inside the stable segments, and warns, raises, or moves into the volatile segment
  only what is certainly volatile, saying what it moved (:mod:`ragcache.volatile`).

History sits before the documents: a chat history is append-only, so turn n's
history is a prefix of turn n+1's, while retrieved documents change per turn.
This matches :meth:`PromptLayout.to_messages`, where the documents belong to the
final user turn. ``ragcache lint FILE [--against FILE2]`` runs the lint on a JSON
request and shows the token index where two renders first diverge.
"""

from __future__ import annotations

import copy
import hashlib
import json
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from ragcache.hashing import content_hash

from ragcache.volatile import (
    VOLATILE_METADATA_KEYS,
    VolatileFinding,
    VolatileTextMoved,
    find_volatile,
    first_divergence,
    move_volatile,
    normalize_text,
    word_tokens,
)

SegmentKind = Literal["system", "tools", "document", "history", "volatile", "question"]
LintMode = Literal["off", "warn", "move", "raise"]

_STABILITY = {"system": "static", "tools": "static", "history": "append-only", "document": "per-retrieval",
              "volatile": "per-request", "question": "per-request"}


@dataclass(frozen=True, slots=True)
class Segment:
    """One part of a prompt.

    ``kind`` is one of system, tools, document, history, volatile, question;
    ``text`` is its text (for tools, the canonical JSON of the tool list);
    ``id`` a caller document id; ``metadata`` rendered as sorted attributes;
    ``role`` the chat role for history segments.
    """

    kind: SegmentKind
    text: str
    id: str | None = None
    metadata: Mapping[str, Any] = field(default_factory=dict)
    role: str | None = None

    @property
    def stability(self) -> str:
        """How often the segment's bytes change: ``static`` (system, tools), ``append-only``
        (history), ``per-retrieval`` (documents), ``per-request`` (volatile text, question)."""
        return _STABILITY[self.kind]

    @property
    def stable(self) -> bool:
        """Whether the segment belongs to the cacheable prefix (everything but volatile text and question)."""
        return self.kind not in ("volatile", "question")

    @property
    def content_hash(self) -> str:
        """The document's identity: :func:`ragcache.hashing.content_hash` of its text (hex sha256 of
        the normalised text). Partition keys and ``SemanticCache.invalidate`` use it."""
        return content_hash(self.text)

    @property
    def render_hash(self) -> str:
        """Hex sha256 of the rendered bytes (:func:`render_document`: id, metadata and text), which
        is what the model sees; orders and de-duplicates documents and enters partition keys."""
        return hashlib.sha256(render_document(self).encode("utf-8")).hexdigest()


def canonicalize(value: Any) -> Any:
    """A deep copy of a JSON-like value with dict keys sorted at every level."""
    if isinstance(value, Mapping):
        return {str(k): canonicalize(value[k]) for k in sorted(value, key=str)}
    if isinstance(value, list | tuple):
        return [canonicalize(v) for v in value]
    return copy.deepcopy(value)


def _attr(value: Any) -> str:
    s = value if isinstance(value, str) else json.dumps(value, sort_keys=True, ensure_ascii=False)
    return s.replace("&", "&amp;").replace('"', "&quot;").replace("\n", " ")


def render_document(seg: Segment) -> str:
    """Render a document segment as ``<document id=".." k="v">\\ntext\\n</document>``.

    Attributes follow the id in sorted key order; values that are not strings are
    written as sorted-key JSON. The same content gives the same bytes every time.
    """
    attrs = ([f'id="{_attr(seg.id)}"'] if seg.id is not None else []) + [
        f'{k}="{_attr(seg.metadata[k])}"' for k in sorted(seg.metadata, key=str)
    ]
    head = "<document" + "".join(" " + a for a in attrs) + ">"
    return f"{head}\n{normalize_text(seg.text)}\n</document>"


def _check_unique_ids(docs: Sequence[Segment]) -> None:
    """Raise ValueError when two documents share an id but not their (normalised) text.

    An id names one document: invalidation by id and the answer's ``document_ids`` would
    otherwise point at two texts, and the one dropped later would not be the one served. The
    same document passed twice (same id, same text) is accepted.
    """
    seen: dict[str, tuple[int, str]] = {}
    for i, d in enumerate(docs):
        if d.id is None:
            continue
        first = seen.setdefault(d.id, (i, d.content_hash))
        if first[1] != d.content_hash:
            raise ValueError(f"documents[{first[0]}] and documents[{i}] both have id {d.id!r} but different text: "
                             "give each document its own id (e.g. source#chunk) or drop the stale copy")


def as_document(doc: Any) -> Segment:
    """The one document normaliser: anything a caller or framework passes as a document, as a
    ``document`` :class:`Segment`.

    Accepts a str; a mapping with ``text`` (or ``page_content`` / ``content``), optional ``id`` (or
    ``doc_id``) and ``metadata`` (other keys are metadata too); a document Segment; a LangChain
    ``Document`` (``page_content``, ``metadata``, ``id``); a LlamaIndex node or ``NodeWithScore``
    (``get_content()``, ``node_id``, ``metadata``). Metadata is copied with keys sorted.

    Raises:
        ValueError: any other type, a mapping without a string text, or a non-document Segment.
    """
    if isinstance(doc, Segment):
        if doc.kind != "document":
            raise ValueError(f"documents must be document segments, got kind={doc.kind!r}")
        return Segment("document", doc.text, doc.id, canonicalize(dict(doc.metadata)))
    if isinstance(doc, str):
        return Segment("document", doc)
    if isinstance(doc, Mapping):
        text = next((doc[k] for k in ("text", "page_content", "content") if k in doc), None)
        if not isinstance(text, str):
            raise ValueError("a document dict needs a string 'text' (or 'page_content'/'content') key; got keys "
                             + str(sorted(map(str, doc))))
        meta = dict(doc.get("metadata") or {})
        reserved = ("text", "page_content", "content", "metadata", "id", "doc_id")
        meta.update({k: v for k, v in doc.items() if k not in reserved})
        doc_id = doc.get("id", doc.get("doc_id"))
        return Segment("document", text, None if doc_id is None else str(doc_id), canonicalize(meta))
    node = getattr(doc, "node", None)  # LlamaIndex NodeWithScore
    if node is not None and hasattr(node, "get_content"):
        doc = node
    if isinstance(getattr(doc, "page_content", None), str):  # LangChain Document
        doc_id = getattr(doc, "id", None)
        return Segment("document", doc.page_content, None if doc_id is None else str(doc_id),
                       canonicalize(dict(getattr(doc, "metadata", None) or {})))
    if hasattr(doc, "get_content") and hasattr(doc, "node_id"):  # LlamaIndex BaseNode
        return Segment("document", doc.get_content(), str(doc.node_id),
                       canonicalize(dict(getattr(doc, "metadata", None) or {})))
    raise ValueError(f"a document must be a str, a dict with 'text', a Segment, a LangChain Document or a "
                     f"LlamaIndex node; got {type(doc).__name__}")


def _history_text(content: Any) -> str:
    """A history message's text: its text blocks joined by a blank line (how the engine joins the
    blocks of one message); content that is not all text is its canonical JSON."""
    if isinstance(content, Sequence) and all(
            isinstance(b, str) or (isinstance(b, Mapping) and b.get("type", "text") == "text"
                                   and isinstance(b.get("text"), str)) for b in content):
        return "\n\n".join(b if isinstance(b, str) else b["text"] for b in content)
    return json.dumps(canonicalize(content), ensure_ascii=False)


@dataclass(frozen=True, slots=True)
class Block:
    """One block of a laid-out prompt, as a backend renders it.

    Attributes:
        kind: the segment kind (system, tools, history, document, volatile, question).
        role: the chat role it is sent under (``system``, ``user`` or ``assistant``).
        text: the exact text the model sees (documents: :func:`render_document` bytes).
        doc_id: for documents, the caller's id (else a content-hash prefix); otherwise ``None``.
    """

    kind: SegmentKind
    role: Literal["system", "user", "assistant"]
    text: str
    doc_id: str | None = None


@dataclass(frozen=True, slots=True)
class PromptLayout:
    """A RAG prompt in stable-first order; build it with :meth:`PromptLayout.build`."""

    segments: tuple[Segment, ...]
    findings: tuple[VolatileFinding, ...] = ()

    @classmethod
    def build(
        cls,
        *,
        question: str,
        system: str | None = None,
        tools: Sequence[dict] = (),
        documents: Sequence[str | dict | Segment] = (),
        history: Sequence[dict] = (),
        volatile: str | None = None,
        doc_order: Literal["canonical", "given"] = "canonical",
        lint: LintMode = "warn",
    ) -> PromptLayout:
        """Order, normalise and lint the parts of a request. Copies every input.

        ``doc_order="canonical"`` sorts documents by id (documents with ids first),
        then by content hash, and drops exact duplicates; ``"given"`` keeps the
        caller's order (for models that need retrieval order).
        ``lint``: ``"warn"`` emits a ``UserWarning`` per certain finding and one for the
        possible ones; ``"move"`` moves each sentence of the system text holding *certainly*
        volatile text (a UUID, a request id, a timestamp, a date or time after "Current date:",
        "Today is"...; see :class:`ragcache.volatile.VolatileFinding`) into the volatile segment
        and drops volatile document metadata keys, saying so with a ``VolatileTextMoved``
        warning per sentence / document, and leaves possible findings (an ordinal, a date in a
        rule) in place; ``"raise"`` raises ``ValueError`` on certain findings. Every finding is
        kept in ``findings`` (``certain``, and ``moved`` for what was moved).

        Raises:
            ValueError: empty question, unknown option, malformed document or
                history message, a system / volatile text that is not a str, tools that
                are not a list of dicts, or volatile text found with ``lint="raise"``.
        """
        if not isinstance(question, str):
            raise ValueError(f"question must be a str, got {type(question).__name__}")
        if not question.strip():
            raise ValueError("question must be a non-empty string")
        if isinstance(documents, str | bytes) or not isinstance(documents, Sequence):
            raise ValueError(f"documents must be a list of documents, got {type(documents).__name__}: "
                             "wrap a single document as [text] (or pass () for none)")
        if doc_order not in ("canonical", "given"):
            raise ValueError(f"doc_order must be 'canonical' or 'given', got {doc_order!r}")
        if lint not in ("off", "warn", "move", "raise"):
            raise ValueError(f"lint must be one of off, warn, move, raise; got {lint!r}")
        for name, value in (("system", system), ("volatile", volatile)):
            if value is not None and not isinstance(value, str):
                raise ValueError(f"{name} must be a str (or None), got {type(value).__name__}")
        if isinstance(tools, str | bytes | Mapping) or not hasattr(tools, "__iter__"):
            raise ValueError(f"tools must be a list of tool definitions (dicts), got {type(tools).__name__}")
        tools = list(tools)
        for i, t in enumerate(tools):
            if not isinstance(t, Mapping):
                raise ValueError(f"tools[{i}] must be a tool definition (a dict), got {type(t).__name__}")
        docs = [as_document(d) for d in documents]
        _check_unique_ids(docs)
        system_text = normalize_text(system) if system is not None else None
        moved: list[str] = []
        findings: list[VolatileFinding] = []
        if system_text and lint != "off":
            if lint == "move":
                system_text, moved_text, found = move_volatile(system_text)
                if moved_text:
                    moved.append(moved_text)
            else:
                found = find_volatile(system_text)
            findings += found
        tool_list = [canonicalize(t) for t in tools]
        if lint != "off":
            for i, t in enumerate(tool_list):
                findings += find_volatile(json.dumps(t, sort_keys=True), segment="tools", index=i)
            for i, d in enumerate(docs):
                bad = sorted(k for k in d.metadata if str(k).lower() in VOLATILE_METADATA_KEYS)
                findings += [VolatileFinding("document", i, "metadata", f"{k}={d.metadata[k]!r}", 0, 0) for k in bad]
                if bad and lint == "move":
                    warnings.warn(f"ragcache layout: dropped per-request metadata {', '.join(bad)} from document {i}",
                                  VolatileTextMoved, stacklevel=2)
                    docs[i] = Segment("document", d.text, d.id, {k: v for k, v in d.metadata.items() if k not in bad})
        certain = [f for f in findings if f.certain]
        if certain and lint == "raise":
            raise ValueError(
                "volatile text in stable prompt segments breaks the cache prefix: "
                + "; ".join(f.describe() for f in certain)
                + ". Move it into volatile=..., or build with lint='move'."
            )
        if findings and lint == "warn":
            for f in certain:
                warnings.warn(f"ragcache layout: {f.describe()} breaks the cache prefix; "
                              "pass it as volatile=... or use lint='move'", UserWarning, stacklevel=2)
            if len(certain) < len(findings):
                warnings.warn("ragcache layout: " + "; ".join(f.describe() for f in findings if not f.certain)
                              + " may change per request (lint='move' leaves it in place); if it does, pass it "
                              "as volatile=...", UserWarning, stacklevel=2)
        if doc_order == "canonical":
            unique = {d.render_hash: d for d in docs}
            docs = sorted(unique.values(), key=lambda d: (d.id is None, d.id or "", d.render_hash))
        hist = []
        for m in history:
            if not isinstance(m, Mapping) or m.get("role") not in ("user", "assistant") or "content" not in m:
                raise ValueError("history entries must be {'role': 'user'|'assistant', 'content': ...} dicts")
            content = m["content"]
            text = content if isinstance(content, str) else _history_text(content)
            hist.append(Segment("history", text, role=m["role"], metadata={"message": copy.deepcopy(dict(m))}))
        if volatile is not None and volatile.strip():
            moved.append(normalize_text(volatile))
        segs: list[Segment] = []
        if system_text:
            segs.append(Segment("system", system_text))
        if tool_list:
            segs.append(Segment("tools", json.dumps(tool_list, sort_keys=True, ensure_ascii=False),
                                metadata={"tools": tool_list}))
        segs += hist + docs
        if moved:
            segs.append(Segment("volatile", "\n".join(moved)))
        segs.append(Segment("question", normalize_text(question)))
        return cls(tuple(segs), tuple(findings))

    def _of(self, kind: str) -> list[Segment]:
        return [s for s in self.segments if s.kind == kind]

    @property
    def system_text(self) -> str | None:
        s = self._of("system")
        return s[0].text if s else None

    @property
    def tools(self) -> list[dict]:
        s = self._of("tools")
        return copy.deepcopy(list(s[0].metadata["tools"])) if s else []

    @property
    def documents(self) -> list[Segment]:
        return self._of("document")

    @property
    def history(self) -> list[dict]:
        return [copy.deepcopy(dict(s.metadata["message"])) for s in self._of("history")]

    @property
    def volatile(self) -> str | None:
        s = self._of("volatile")
        return s[0].text if s else None

    @property
    def question(self) -> str:
        return self._of("question")[0].text

    def render_document(self, seg: Segment) -> str:
        """The document's bytes in every request (see :func:`render_document`)."""
        return render_document(seg)

    def blocks(self) -> tuple[Block, ...]:
        """The prompt as typed blocks in prompt order: what every backend renders.

        ``system`` (role system) -> ``tools`` (role system, canonical JSON) -> ``history`` (their
        roles) -> ``document`` (role user, :func:`render_document` bytes, ``doc_id`` = the caller's
        id, else the first 16 hex digits of the content hash) -> ``volatile`` -> ``question``
        (role user). The final user turn is the document, volatile and question blocks.
        """
        out: list[Block] = []
        for seg in self.segments:
            if seg.kind == "document":
                out.append(Block("document", "user", render_document(seg),
                                 seg.id if seg.id is not None else seg.content_hash[:16]))
            elif seg.kind == "history":
                out.append(Block("history", seg.role or "user", seg.text))
            elif seg.kind in ("system", "tools"):
                out.append(Block(seg.kind, "system", seg.text))
            else:
                out.append(Block(seg.kind, "user", seg.text))
        return tuple(out)

    def to_messages(self) -> list[dict]:
        """Chat messages from :meth:`blocks`: ``[system] + history + [user: document blocks,
        volatile, question]``. Tools are not a message (providers take them apart). History
        messages are the caller's own (copied); final-turn blocks carry ``"ragcache_kind"``
        and, for documents, ``"id"``, which the local engine uses to cache each one's KV.
        """
        msgs: list[dict] = []
        history = iter(self.history)
        final: list[dict] = []
        for b in self.blocks():
            if b.kind == "system":
                msgs.append({"role": "system", "content": b.text})
            elif b.kind == "history":
                msgs.append(next(history))
            elif b.kind in ("document", "volatile", "question"):
                block = {"type": "text", "text": b.text, "ragcache_kind": b.kind}
                if b.doc_id is not None:
                    block["id"] = b.doc_id
                final.append(block)
        msgs.append({"role": "user", "content": final})
        return msgs

    def stable_text(self) -> str:
        """Everything before the volatile text and question, as one string (what a
        prefix cache can reuse across requests)."""
        return "\n\n".join(render_document(s) if s.kind == "document" else s.text
                           for s in self.segments if s.kind not in ("volatile", "question"))

    def render(self) -> str:
        """The whole layout as one string (stable text, then volatile text and question)."""
        tail = [t for t in (self.volatile, self.question) if t]
        return "\n\n".join([self.stable_text(), *tail]) if self.stable_text() else "\n\n".join(tail)


__all__ = [
    "Block", "PromptLayout", "Segment", "as_document", "VolatileFinding", "VolatileTextMoved",
    "VOLATILE_METADATA_KEYS", "canonicalize", "find_volatile",
    "first_divergence", "move_volatile", "normalize_text", "render_document", "word_tokens",
]
