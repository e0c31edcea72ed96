"""Prompt segments and documents: the :class:`Segment` record, the one document normaliser
(:func:`as_document`), the canonical document rendering (:func:`render_document`) and its inverse
(:func:`parse_document`), and the canonical order of a document set (:func:`canonical_documents`).
:mod:`ragcache.prompt.layout` orders segments into a prompt.

A document's identity is its content: its text and the metadata rendered with it. Its id (a caller's
name, a vector store's random UUID, a LlamaIndex node id) is metadata *about* it: kept for
``invalidate(id)`` and to name its KV, never rendered, so it enters neither the prompt bytes, nor
the semantic partition, nor the order. The same documents after a re-index or a restart (new
random ids) are the same prompt and the same partition.
"""

from __future__ import annotations

import copy
import hashlib
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from ragcache.hashing import content_hash
from ragcache.prompt.volatile import normalize_text

SegmentKind = Literal["system", "tools", "document", "history", "volatile", "question"]

_STABILITY = {"system": "static", "tools": "static", "history": "append-only", "document": "per-retrieval",
              "volatile": "per-request", "question": "per-request"}


@dataclass(frozen=True, slots=True)
class Segment:
    """One part of a prompt.

    ``kind`` is one of system, tools, document, history, volatile, question;
    ``text`` is its text (for tools, the canonical JSON of the tool list);
    ``id`` a caller document id (for ``invalidate``; not rendered); ``metadata`` rendered as sorted attributes;
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
        """Hex sha256 of the rendered bytes (:func:`render_document`: metadata and text, not the id),
        which is what the model sees; orders and de-duplicates documents and enters partition keys."""
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


_WRAPPER_TAG = re.compile(r"(?i)<(?=\s*/?\s*document\b)")


def neutralise_wrapper(text: str) -> str:
    """``text`` with the ``<`` of every tag that spells ragcache's document wrapper (``<document``,
    ``</document``, any case, spaces allowed after ``<`` or ``/``) written as ``&lt;``, so a document
    can neither close its own wrapper nor open another one with a forged ``source``. Text without
    such a tag is returned unchanged (same bytes, same tokens)."""
    return _WRAPPER_TAG.sub("&lt;", text)


def render_document(seg: Segment) -> str:
    """Render a document segment as ``<document k="v">\\ntext\\n</document>``.

    Metadata attributes in sorted key order; values that are not strings are written as
    sorted-key JSON, with ``&``, ``"`` and newlines escaped. The text is content, never markup: a
    tag in it that spells the wrapper is neutralised (:func:`neutralise_wrapper`). The id is not
    rendered (a document's identity is its content; see the module docstring): to show the model a
    name, put it in the metadata (``source``, ``title``). The same content gives the same bytes
    every time.
    """
    attrs = [f'{k}="{_attr(seg.metadata[k])}"' for k in sorted(seg.metadata, key=str)]
    head = "<document" + "".join(" " + a for a in attrs) + ">"
    return f"{head}\n{neutralise_wrapper(normalize_text(seg.text))}\n</document>"


_DOC_HEAD = re.compile(r'<document((?: [^\s="<>]+="[^"]*")*)>\n')
_DOC_ATTR = re.compile(r' ([^\s="<>]+)="([^"]*)"')


def parse_document(text: str) -> Segment | None:
    """The document Segment whose :func:`render_document` bytes are ``text``, or ``None`` when
    ``text`` is not exactly such a rendering. Every attribute is metadata (an ``id=""`` attribute
    someone wrote is shown to the model, so it stays in the bytes); the Segment has no id. Attribute
    values come back as strings (a value rendered from JSON renders to the same bytes again).
    Untrusted text is only matched, never evaluated.
    """
    m = _DOC_HEAD.match(text)
    if m is None or not text.endswith("\n</document>"):
        return None
    import html  # here: html.entities is a large table, needed only for a rendered document block

    attrs = {k: html.unescape(v) for k, v in _DOC_ATTR.findall(m.group(1))}
    seg = Segment("document", text[m.end(): -len("\n</document>")], None, attrs)
    return seg if render_document(seg) == text else None


def canonical_documents(docs: Sequence[Segment]) -> list[Segment]:
    """The canonical order of a document set, the one rule of every entry point: by content (the
    normalised text's hash, then the rendered bytes' hash), exact duplicates of the rendered bytes
    dropped (the first kept). Ids never decide the order: a vector store's random ids would give
    the same documents another order, another prompt and another partition after every restart."""
    unique: dict[str, Segment] = {}
    for d in docs:
        unique.setdefault(d.render_hash, d)
    return sorted(unique.values(), key=lambda d: (d.content_hash, d.render_hash))


def check_unique_ids(docs: Sequence[Segment]) -> None:
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
    (:func:`node_document`: what LlamaIndex shows the LLM). Metadata is copied with keys sorted.

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
            raise (ValueError if text is None else TypeError)(
                "a document dict needs a string 'text' (or 'page_content'/'content') key; got keys "
                + str(sorted(map(str, doc))) + ("" if text is None else f" with text of type {type(text).__name__}"))
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
        return node_document(doc, doc_id=str(doc.node_id))
    raise TypeError(f"a document must be a str, a dict with 'text', a Segment, a LangChain Document or a "
                     f"LlamaIndex node; got {type(doc).__name__}")


def _json_like(value: Any) -> bool:
    try:
        json.dumps(value)
    except (TypeError, ValueError):
        return False
    return True


def node_document(node: Any, *, doc_id: str | None = None) -> Segment:
    """The one rendering of a LlamaIndex node (``BaseNode``: ``get_content``, ``metadata``,
    ``excluded_llm_metadata_keys``) as a document :class:`Segment`, at every entry point
    (``RagCache.answer(documents=nodes)``, ``ChunkCache.precompute(engine, nodes)``, the LlamaIndex
    query engine and node postprocessor): what LlamaIndex shows the LLM under ``MetadataMode.LLM``.
    The text is the node's content without metadata (``MetadataMode.NONE``); the metadata is every
    key LlamaIndex renders for the LLM (``excluded_llm_metadata_keys`` removed: an owner's e-mail or a
    file's modification date never reaches the model, nor the prompt bytes, chunk keys or partition),
    JSON-like values only, less an absolute path under :data:`LOCATION_KEYS`, rendered as sorted attributes by
    :func:`render_document`. ``doc_id`` is
    kept for ``invalidate`` and never rendered. Duck-typed: ragcache does not need LlamaIndex."""
    try:
        from llama_index.core.schema import MetadataMode

        text = node.get_content(metadata_mode=MetadataMode.NONE)
    except ImportError:  # a node-shaped object without LlamaIndex installed
        text = node.get_content()
    excluded = {str(k) for k in (getattr(node, "excluded_llm_metadata_keys", None) or ())}
    meta = {str(k): v for k, v in (getattr(node, "metadata", None) or {}).items()
            if str(k) not in excluded and _json_like(v) and not _machine_path(str(k), v)}
    return Segment("document", text, doc_id, canonicalize(meta))


LOCATION_KEYS = frozenset({"file_path", "file_dir", "directory"})
"""Metadata keys that name where a file lies on this machine (``SimpleDirectoryReader`` sets ``file_path``
and leaves it shown to the LLM): an absolute path under them is not rendered (:func:`node_document`), so the
same notes in another folder (a moved checkout, another user's home) give the same prompt and keep their
answers. A relative path is kept: it names the file within the collection."""


def _machine_path(key: str, value: Any) -> bool:
    return key in LOCATION_KEYS and isinstance(value, str) and (value.startswith(("/", "\\"))
                                                                 or value[1:3] in (":\\", ":/"))


def history_text(content: Any) -> str:
    """A history message's text: its text blocks joined by a blank line (how the engine joins the
    blocks of one message); content that is not all text is its canonical JSON."""
    if isinstance(content, Sequence) and all(
            isinstance(b, str) or (isinstance(b, Mapping) and b.get("type", "text") == "text"
                                   and isinstance(b.get("text"), str)) for b in content):
        return "\n\n".join(b if isinstance(b, str) else b["text"] for b in content)
    return json.dumps(canonicalize(content), ensure_ascii=False)
