"""Exact partition keys for the semantic cache.

The semantic cache embeds the question alone; everything else that decides
the answer forms an exact key: namespace (tenant), model fingerprint and
generation parameters, system text, tools, earlier chat turns and the
retrieved documents' content hashes. An answer is only ever served inside its
own partition, so another tenant, model, temperature, ``max_tokens``, document
set (an edited document has a new content hash) or conversation never sees it.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ragcache.hashing import content_hash, hash_value

_HEX64 = re.compile(r"^[0-9a-f]{64}$")


@dataclass(frozen=True, slots=True)
class PartitionKey:
    """The exact part of a semantic-cache key.

    Attributes:
        digest: hex sha256 over the canonical encoding of every field (the key proper).
        namespace: tenant or cache salt; ``SemanticCache.clear(namespace)`` drops it.
        documents: sorted content hashes of the retrieved documents.
        document_ids: caller-given document ids (for ``invalidate(document_id)``); not part of the digest.
    """

    digest: str
    namespace: str
    documents: tuple[str, ...] = ()
    document_ids: tuple[str, ...] = ()

    @property
    def invalidation_keys(self) -> tuple[str, ...]:
        """Every value ``invalidate()`` accepts for this partition: content hashes and ids."""
        return tuple(dict.fromkeys(self.documents + self.document_ids))


def _doc_hash_and_id(doc: Any) -> tuple[str, str | None]:
    """A document given as a content hash, a text, a mapping or a layout Segment."""
    if isinstance(doc, str):
        return (doc, None) if _HEX64.match(doc) else (content_hash(doc), None)
    if isinstance(doc, Mapping):
        doc_id = doc.get("id")
        if doc.get("content_hash"):
            return str(doc["content_hash"]), None if doc_id is None else str(doc_id)
        text = doc.get("text", doc.get("page_content", doc.get("content")))
        if not isinstance(text, str):
            raise ValueError("a document mapping needs 'text' (or 'content_hash'); got keys " + str(sorted(doc)))
        return content_hash(text), None if doc_id is None else str(doc_id)
    ch = getattr(doc, "content_hash", None)
    if isinstance(ch, str):
        doc_id = getattr(doc, "id", None)
        return ch, None if doc_id is None else str(doc_id)
    text = getattr(doc, "text", getattr(doc, "page_content", None))
    if isinstance(text, str):
        doc_id = getattr(doc, "id", None)
        return content_hash(text), None if doc_id is None else str(doc_id)
    raise ValueError(
        f"cannot key a document of type {type(doc).__name__}: pass its text, its content hash "
        "(64 hex chars), a mapping with 'text' and optional 'id', or a layout Segment"
    )


def partition_key(
    *,
    namespace: str = "default",
    model: str,
    params: Mapping[str, Any] | None = None,
    system: str | None = None,
    tools: Sequence[Mapping[str, Any]] = (),
    history: Sequence[Mapping[str, Any]] = (),
    documents: Iterable[Any] = (),
    extra: Mapping[str, Any] | None = None,
) -> PartitionKey:
    """Build the exact partition key of a request.

    Args:
        namespace: tenant / cache salt.
        model: model fingerprint (``ModelFingerprint.digest``) or a provider model name.
        params: generation parameters that change the answer (temperature, top_p,
            max_tokens, stop ...); JSON-like values.
        system: system text.
        tools: tool definitions (JSON-like mappings).
        history: earlier chat turns (everything before the last user turn).
        documents: retrieved documents as texts, content hashes (64 hex), mappings
            with ``text``/``id`` or layout ``Segment`` objects. Order does not matter.
        extra: any other JSON-like value that must match exactly.

    Raises:
        ValueError: a field is not JSON-like, or ``model``/``namespace`` is empty.
    """
    if not isinstance(namespace, str) or not namespace:
        raise ValueError("namespace must be a non-empty str (use 'default' for a single tenant)")
    if not isinstance(model, str) or not model:
        raise ValueError("model must be the model fingerprint or name, a non-empty str")
    pairs = [_doc_hash_and_id(d) for d in documents]
    hashes = tuple(sorted({h for h, _ in pairs}))
    ids = tuple(sorted({i for _, i in pairs if i is not None}))
    spec = {
        "v": 1,
        "namespace": namespace,
        "model": model,
        "params": dict(params or {}),
        "system": system,
        "tools": [dict(t) for t in tools],
        "history": [dict(h) for h in history],
        "documents": list(hashes),
        "extra": dict(extra or {}),
    }
    try:
        digest = hash_value(spec)
    except TypeError as e:
        raise ValueError(f"partition fields must be JSON-like (str, int, float, bool, None, list, dict): {e}") from None
    return PartitionKey(digest=digest, namespace=namespace, documents=hashes, document_ids=ids)
