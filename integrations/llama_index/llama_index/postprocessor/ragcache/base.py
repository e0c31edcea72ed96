"""Stable node order for LlamaIndex: canonical order and de-duplication of retrieved nodes.

A retriever returns nodes in score order, and scores move with every query, so the
same retrieved set reaches the LLM in a different order each time: the prompt bytes
differ, and neither a provider prompt cache nor the local exact prefix KV cache can
reuse anything past the first moved node. :class:`StableOrderPostprocessor` sorts the
nodes into a canonical order (by content hash by default, or by node id / source
document id) and drops duplicates, so the same set always gives the same bytes.

:func:`node_segment` is the one place a node becomes prompt text: a ragcache layout
:class:`~ragcache.prompt.layout.Segment` whose :attr:`~ragcache.prompt.layout.Segment.content_hash`
is the sha256 of the exact document bytes the LLM sees. The ordering, the
de-duplication and the semantic-cache partition key all use that hash.
"""

from __future__ import annotations

import json
from typing import Any, Literal

from llama_index.core.bridge.pydantic import Field
from llama_index.core.postprocessor.types import BaseNodePostprocessor
from llama_index.core.schema import BaseNode, MetadataMode, NodeWithScore, QueryBundle

from ragcache.prompt.layout import Segment

OrderBy = Literal["content_hash", "node_id", "ref_doc_id"]
IdSource = Literal["none", "node_id", "ref_doc_id"]


def _json_like(value: Any) -> bool:
    try:
        json.dumps(value)
    except (TypeError, ValueError):
        return False
    return True


LOCATION_KEYS = frozenset({"file_path", "file_dir", "directory"})
"""Metadata keys that name where a file lies on this machine (``SimpleDirectoryReader`` sets ``file_path``
and leaves it shown to the LLM): an absolute path under them is not rendered, so the same notes in another
folder (a moved checkout, another user's home) give the same prompt and keep their answers. A relative
path is kept: it names the file within the collection."""


def _machine_path(key: Any, value: Any) -> bool:
    return key in LOCATION_KEYS and isinstance(value, str) and (value.startswith(("/", "\\")) or value[1:3] in (":\\", ":/"))


def node_segment(node: BaseNode, *, id_source: IdSource = "none") -> Segment:
    """A node as a layout document :class:`~ragcache.prompt.layout.Segment`.

    The text is the node content without metadata; the metadata kept is what
    LlamaIndex shows the LLM (``excluded_llm_metadata_keys`` removed), JSON-like
    values only, less an absolute path under :data:`LOCATION_KEYS`, rendered as sorted
    attributes by the layout.

    Args:
        node: any LlamaIndex node.
        id_source: the segment's id (kept for ``invalidate``, never rendered: the bytes, the
            order and the partition depend on content and metadata only, so they survive
            re-indexing, which gives nodes new random ids): ``"none"`` (the default),
            ``"node_id"`` or ``"ref_doc_id"``.

    Raises:
        ValueError: unknown ``id_source``.
    """
    if id_source not in ("none", "node_id", "ref_doc_id"):
        raise ValueError(f"id_source must be 'none', 'node_id' or 'ref_doc_id', got {id_source!r}")
    excluded = set(node.excluded_llm_metadata_keys or ())
    meta = {str(k): v for k, v in (node.metadata or {}).items()
            if k not in excluded and _json_like(v) and not _machine_path(k, v)}
    doc_id = None  # the segment's id: metadata kept for invalidate, never rendered (ragcache.prompt.segments)
    if id_source == "node_id":
        doc_id = node.node_id
    elif id_source == "ref_doc_id":
        doc_id = node.ref_doc_id or node.node_id
    return Segment("document", node.get_content(metadata_mode=MetadataMode.NONE), doc_id, meta)


def node_key(node: BaseNode, segment: Segment) -> dict[str, str]:
    """``{"content_hash", "id"}`` of a node for the semantic partition key: the hash of its
    rendered bytes, and its source document id (``ref_doc_id``, else the node id) so that
    ``SemanticCache.invalidate(doc_id)`` drops every answer built on that document."""
    return {"content_hash": segment.content_hash, "id": str(node.ref_doc_id or node.node_id)}


class StableOrderPostprocessor(BaseNodePostprocessor):
    """Put retrieved nodes into a canonical order and drop duplicates.

    Args:
        order_by: ``"content_hash"`` (default; sha256 of the node's rendered bytes, so
            the order survives re-indexing), ``"node_id"`` or ``"ref_doc_id"`` (source
            document, then content hash). Ties break on the content hash.
        dedup: drop nodes whose rendered bytes or node id repeat an earlier node's;
            the copy with the higher score is kept.
        id_source: passed to :func:`node_segment`.

    Scores are kept on the nodes (``source_nodes`` still report them) but never decide
    the order: they change from query to query.
    """

    order_by: OrderBy = Field(default="content_hash", description="canonical order key")
    dedup: bool = Field(default=True, description="drop nodes with repeated content or id")
    id_source: IdSource = Field(default="none", description="id kept with each document (not rendered)")

    @classmethod
    def class_name(cls) -> str:
        return "StableOrderPostprocessor"

    def _postprocess_nodes(self, nodes: list[NodeWithScore],
                           query_bundle: QueryBundle | None = None) -> list[NodeWithScore]:
        if self.order_by not in ("content_hash", "node_id", "ref_doc_id"):
            raise ValueError(f"order_by must be 'content_hash', 'node_id' or 'ref_doc_id', got {self.order_by!r}")
        keyed = [(n, node_segment(n.node, id_source=self.id_source).render_hash) for n in nodes]
        if self.dedup:
            best: dict[str, int] = {}
            by_id: dict[str, int] = {}
            kept: list[tuple[NodeWithScore, str] | None] = []
            for n, h in keyed:
                j = best.get(h, by_id.get(n.node.node_id))
                if j is None:
                    best[h] = by_id[n.node.node_id] = len(kept)
                    kept.append((n, h))
                elif (n.score or float("-inf")) > (kept[j][0].score or float("-inf")):
                    kept[j] = (n, h)
            keyed = [k for k in kept if k is not None]

        def key(item: tuple[NodeWithScore, str]) -> tuple[str, str]:
            n, h = item
            if self.order_by == "node_id":
                return (n.node.node_id, h)
            if self.order_by == "ref_doc_id":
                return (n.node.ref_doc_id or n.node.node_id, h)
            return (h, n.node.node_id)

        return [n for n, _ in sorted(keyed, key=key)]
