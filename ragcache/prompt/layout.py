"""Stable-first prompt layout and the volatile-text lint.

A prompt cache (a provider's, or the local exact prefix KV cache) only pays when
the bytes before a breakpoint are identical from one request to the next. This
module turns the parts of a RAG request into a :class:`PromptLayout` whose order
and bytes are stable:

``system text -> tools -> history -> documents -> volatile text -> question``

* documents are rendered canonically (NFC, ``\\n`` newlines, metadata attributes
  in sorted key order; ids are not rendered) and, by default, sorted by content
  (:func:`~ragcache.prompt.segments.canonical_documents`), so the same retrieved set
  gives the same bytes whatever order the retriever returned it in and whatever ids
  a vector store gave it;
* tool definitions are copied with their keys sorted at every level;
* the lint finds text that changes per request (dates, times, weekdays, UUIDs,
  request ids, counters, epoch timestamps, retrieval scores in document metadata)
  inside the stable segments, and warns, raises, or moves into the volatile segment
  only what is certainly volatile, saying what it moved (:mod:`ragcache.prompt.volatile`).

History sits before the documents: a chat history is append-only, so turn n's
history is a prefix of turn n+1's, while retrieved documents change per turn.
This matches :meth:`PromptLayout.to_messages`, where the documents belong to the
final user turn. ``ragcache lint FILE [--against FILE2]`` runs the lint on a JSON
request and shows the token index where two renders first diverge.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from ragcache.prompt.chat_turns import CACHE_POINT, CachePoint, final_turn_blocks, split_messages
from ragcache.prompt.segments import (
    Segment,
    SegmentKind,
    canonical_documents,
    check_unique_ids,
    history_text,
    as_document,
    canonicalize,
    parse_document,
    render_document,
)
from ragcache.prompt.volatile import (
    VOLATILE_METADATA_KEYS,
    VolatileFinding,
    VolatileTextMoved,
    find_volatile,
    first_divergence,
    move_volatile,
    normalize_text,
    warn_at_caller,
    warn_kept_dates,
    word_tokens,
)

LintMode = Literal["off", "warn", "move", "raise"]


def _check_parts(question: Any, documents: Any, tools: Any, doc_order: str, lint: str, **texts: Any) -> None:
    """The argument checks of :meth:`PromptLayout.build`: TypeError for a wrong type, ValueError for a
    wrong value, each naming the fix."""
    if not isinstance(question, str):
        raise TypeError(f"question must be a str, got {type(question).__name__}")
    if not question.strip():
        raise ValueError("question must be a non-empty string")
    if isinstance(documents, str | bytes) or not isinstance(documents, Sequence):
        raise TypeError(f"documents must be a list of documents, got {type(documents).__name__}: "
                         "wrap a single document as [text] (or pass () for none)")
    if doc_order not in ("canonical", "given"):
        raise ValueError(f"doc_order must be 'canonical' or 'given', got {doc_order!r}")
    if lint not in ("off", "warn", "move", "raise"):
        raise ValueError(f"lint must be one of off, warn, move, raise; got {lint!r}")
    for name, value in texts.items():
        if value is not None and not isinstance(value, str):
            raise TypeError(f"{name} must be a str (or None), got {type(value).__name__}")
    if isinstance(tools, str | bytes | Mapping) or not hasattr(tools, "__iter__"):
        raise TypeError(f"tools must be a list of tool definitions (dicts), got {type(tools).__name__}")
    for i, t in enumerate(tools):
        if not isinstance(t, Mapping):
            raise TypeError(f"tools[{i}] must be a tool definition (a dict), got {type(t).__name__}")


def _lint_parts(system_text: str | None, tool_list: list[dict], docs: list[Segment],
                lint: str) -> tuple[str | None, list[str], list[VolatileFinding]]:
    """Lint the stable parts: ``(system text, moved volatile text, findings)``. ``lint="move"`` moves
    only certainly volatile sentences (:func:`~ragcache.prompt.volatile.move_volatile`, which warns per
    move) and drops volatile metadata keys from ``docs`` in place (warned); ``"raise"`` raises on
    certain findings; ``"warn"`` warns on certain ones and once on the possible ones."""
    moved: list[str] = []
    findings: list[VolatileFinding] = []
    if lint == "off":
        return system_text, moved, findings
    if system_text and lint == "move":
        system_text, moved_text, found = move_volatile(system_text)
        moved += [moved_text] if moved_text else []
        findings += found
    elif system_text:
        findings += find_volatile(system_text)
    for i, t in enumerate(tool_list):
        findings += find_volatile(json.dumps(t, sort_keys=True), segment="tools", index=i)
    for i, d in enumerate(docs):
        bad = sorted(k for k in d.metadata if str(k).lower() in VOLATILE_METADATA_KEYS)
        findings += [VolatileFinding("document", i, "metadata", f"{k}={d.metadata[k]!r}", 0, 0) for k in bad]
        if bad and lint == "move":
            warn_at_caller(f"ragcache layout: dropped per-request metadata {', '.join(bad)} from document {i}",
                           VolatileTextMoved)
            docs[i] = Segment("document", d.text, d.id, {k: v for k, v in d.metadata.items() if k not in bad})
    certain = [f for f in findings if f.certain]
    if system_text and lint == "raise" and not certain:
        warn_kept_dates(system_text, findings)  # a bare date is named with its line, not raised on
    if certain and lint == "raise":
        raise ValueError("volatile text in stable prompt segments breaks the cache prefix: "
                         + "; ".join(f.describe() for f in certain)
                         + ". Move it into volatile=..., or build with lint='move'.")
    if findings and lint == "warn":
        for f in certain:
            warn_at_caller(f"ragcache layout: {f.describe()} breaks the cache prefix; "
                           "pass it as volatile=... or use lint='move'", UserWarning)
        if len(certain) < len(findings):
            warn_at_caller("ragcache layout: " + "; ".join(f.describe() for f in findings if not f.certain)
                           + " may change per request (lint='move' leaves it in place); if it does, pass it "
                           "as volatile=...", UserWarning)
    return system_text, moved, findings


def _history_segments(history: Sequence[Any]) -> list[Segment]:
    out = []
    for m in history:
        if not isinstance(m, Mapping) or m.get("role") not in ("user", "assistant") or "content" not in m:
            raise ValueError("history entries must be {'role': 'user'|'assistant', 'content': ...} dicts")
        content = m["content"]
        text = content if isinstance(content, str) else history_text(content)
        out.append(Segment("history", text, role=m["role"], metadata={"message": copy.deepcopy(dict(m))}))
    return out


def _document_block(text: str, doc_id: Any) -> Segment:
    """A final-turn document block: its :func:`render_document` rendering parsed back (else the text
    itself), with the id the block was marked with (for ``invalidate``; never rendered)."""
    seg = parse_document(text) or Segment("document", text)
    if doc_id is None or str(doc_id) == seg.content_hash[:16]:  # no id: blocks()' content-hash fallback mark
        return seg
    return Segment("document", seg.text, str(doc_id), seg.metadata)


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

        ``doc_order="canonical"`` sorts documents by content (:func:`canonical_documents`: ids never
        decide the order) and drops exact duplicates; ``"given"`` keeps the caller's order (retrieval order).
        ``lint``: ``"warn"`` emits a ``UserWarning`` per certain finding and one for the
        possible ones; ``"move"`` moves each sentence of the system text holding *certainly*
        volatile text (a UUID, a request id, a timestamp, a date or time after "Current date:",
        "Today is"...; see :class:`ragcache.prompt.volatile.VolatileFinding`) into the volatile segment
        and drops volatile document metadata keys, saying so with a ``VolatileTextMoved``
        warning per sentence / document, and leaves possible findings (an ordinal, a date in a
        rule) in place; ``"raise"`` raises ``ValueError`` on certain findings. Every finding is
        kept in ``findings`` (``certain``, and ``moved`` for what was moved).

        Raises:
            ValueError: empty question, unknown option, malformed document or
                history message, a system / volatile text that is not a str, tools that
                are not a list of dicts, or volatile text found with ``lint="raise"``.
        """
        if hasattr(tools, "__iter__") and not isinstance(tools, str | bytes | Mapping):
            tools = list(tools)  # any iterable of dicts, read once
        _check_parts(question, documents, tools, doc_order, lint, system=system, volatile=volatile)
        docs = [as_document(d) for d in documents]
        check_unique_ids(docs)
        system_text = normalize_text(system) if system is not None else None
        tool_list = [canonicalize(t) for t in tools]
        system_text, moved, findings = _lint_parts(system_text, tool_list, docs, lint)
        if doc_order == "canonical":
            docs = canonical_documents(docs)
        if volatile is not None and volatile.strip():
            moved.append(normalize_text(volatile))
        segs: list[Segment] = []
        if system_text:
            segs.append(Segment("system", system_text))
        if tool_list:
            segs.append(Segment("tools", json.dumps(tool_list, sort_keys=True, ensure_ascii=False),
                                metadata={"tools": tool_list}))
        segs += _history_segments(history) + docs
        if moved:
            segs.append(Segment("volatile", "\n".join(moved)))
        segs.append(Segment("question", normalize_text(question)))
        return cls(tuple(segs), tuple(findings))

    @classmethod
    def from_messages(cls, messages: Sequence[Mapping[str, Any]], *, system: str | None = None,
                      tools: Sequence[dict] = (), lint: LintMode = "off") -> PromptLayout:
        """The layout of a chat request: the ONE place that decides the kind of unmarked message text.

        ``messages``: ``{"role": "system" | "user" | "assistant", "content": str | list}`` dicts;
        list content holds text (``str`` or ``{"type": "text", "text": ...}``), typed
        :class:`Segment` blocks of kind document / volatile / question (an adapter that knows a
        block's kind says so; a legacy ``"ragcache_kind"`` / ``"id"`` key on a text dict is read the
        same way) and :data:`CACHE_POINT` markers. Blank blocks, and messages with only blank text
        and no other keys, are skipped. The rule:

        * leading system messages (after ``system``) are the system text, joined by a blank line;
        * the last user message is the final turn; the messages before it are history (their dicts
          copied; a system message after a user or assistant turn becomes a user turn marked
          ``"type": "system"``, as the chat-history entries of the LangChain adapter are);
        * in the final turn, the last unmarked block is the question (unless a block is marked
          question); the other unmarked blocks before the last :data:`CACHE_POINT` are documents,
          those after it volatile text; without a cache point they are all documents;
        * a document text that is a :func:`render_document` rendering keeps its id and attributes
          (:func:`parse_document`; the block's ``id`` mark is its id); any other text is the document's text. Documents keep their
          given order; volatile pieces are joined by a newline, question pieces by a blank line.

        ``lint`` as in :meth:`build` (default ``"off"``: the caller chose these bytes).

        Raises:
            ValueError: no messages or no user message, an unknown role, a message after the final
                user turn, a final-turn block of another kind, no question text, or anything
                :meth:`build` rejects.
        """
        systems, history, final = split_messages(messages)
        if system:
            systems.insert(0, system)
        documents: list[Segment] = []
        volatile: list[str] = []
        question: list[str] = []
        for kind, block in final_turn_blocks(final):
            if kind == "document":
                documents.append(block if isinstance(block, Segment) else _document_block(*block))
            else:
                (volatile if kind == "volatile" else question).append(block.text if isinstance(block, Segment)
                                                                      else block[0])
        q = "\n\n".join(t for t in question if t.strip())
        if not q:
            raise ValueError("the final user turn has no question text: the last unmarked block (or a block marked "
                             "question) is the question")
        return cls.build(question=q, system="\n\n".join(systems) or None, tools=tools, documents=documents,
                         history=history, volatile="\n".join(v for v in volatile if v.strip()) or None,
                         doc_order="given", lint=lint)

    def with_question(self, question: str) -> PromptLayout:
        """The same layout with another question text (normalised); e.g. the question cut out of a
        templated turn, the rest of which the caller keys apart."""
        if not isinstance(question, str) or not question.strip():
            raise ValueError("question must be a non-empty string")
        segs = tuple(s for s in self.segments if s.kind != "question") + (Segment("question", normalize_text(question)),)
        return PromptLayout(segs, self.findings)

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
        id, else the first 16 hex digits of the content hash; not in the bytes) -> ``volatile`` -> ``question``
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


__all__ = ["CACHE_POINT", "Block", "CachePoint", "PromptLayout", "Segment", "SegmentKind", "as_document",
           "canonical_documents",
           "parse_document", "VolatileFinding", "VolatileTextMoved", "VOLATILE_METADATA_KEYS", "canonicalize",
           "find_volatile", "first_divergence", "move_volatile", "normalize_text", "render_document", "word_tokens"]
