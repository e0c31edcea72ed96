"""Exact partition keys for the semantic cache: the key, and its constructor from explicit fields.

The semantic cache embeds the question alone; everything else that decides
the answer forms an exact key: namespace (tenant), model fingerprint and
generation parameters, system text, tools, earlier chat turns and the
retrieved documents' content hashes. An answer is only ever served inside its
own partition, so another tenant, model, temperature, ``max_tokens``, document
set (an edited document has a new content hash) or conversation never sees it.

The semantic cache receives keys; it does not derive them from a request. Which parts of a
request go into its key is :func:`ragcache.request.request_partition` (called by
:func:`ragcache.request.cache_request`); the proxy's rule for a raw API body is
:mod:`ragcache.server.body_fields`.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ragcache.hashing import hash_value
from ragcache.prompt.layout import as_document

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
    """A document given as a content hash (64 hex) or anything :func:`ragcache.prompt.layout.as_document` takes."""
    if isinstance(doc, str) and _HEX64.match(doc):
        return doc, None
    if isinstance(doc, Mapping) and doc.get("content_hash"):
        doc_id = doc.get("id")
        return str(doc["content_hash"]), None if doc_id is None else str(doc_id)
    seg = as_document(doc)
    return seg.content_hash, seg.id


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
    """Build the exact partition key from its explicit fields.

    Args:
        namespace: tenant / cache salt.
        model: model fingerprint (``ModelFingerprint.digest``) or a provider model name.
        params: generation parameters that change the answer (temperature, top_p,
            max_tokens, stop ...); JSON-like values.
        system: system text.
        tools: tool definitions (JSON-like mappings).
        history: earlier chat turns (everything before the last user turn).
        documents: retrieved documents as texts, content hashes (64 hex), mappings
            with ``text``/``id`` or layout ``Segment`` objects. Order does not matter here (a
            caller whose model reads them in a given order keys that order in ``extra``, as
            :func:`ragcache.request.request_partition` does).
        extra: any other JSON-like value that must match exactly.

    Raises:
        ValueError: a field is not JSON-like, or ``model``/``namespace`` is empty.
    """
    for name, v in (("namespace", namespace), ("model", model)):
        if not isinstance(v, str):
            raise TypeError(f"{name} must be a non-empty str, got {type(v).__name__}")
    if not namespace:
        raise ValueError("namespace must be a non-empty str (use 'default' for a single tenant)")
    if not model:
        raise ValueError("model must be the model fingerprint or name, a non-empty str")
    if isinstance(documents, str | bytes) or isinstance(documents, Mapping):
        raise TypeError("documents must be a list of documents, got a single "
                         f"{type(documents).__name__}: wrap a single document as [text]")
    if system is not None and not isinstance(system, str):
        raise TypeError(f"system must be a str or None, got {type(system).__name__}")
    if params is not None and not isinstance(params, Mapping):
        raise TypeError(f"params must be a mapping of generation parameters, got {type(params).__name__}")
    pairs = [_doc_hash_and_id(d) for d in documents]
    hashes = tuple(sorted({h for h, _ in pairs}))
    ids = tuple(sorted({i for _, i in pairs if i is not None}))
    spec = {
        "v": 2,
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


DEFAULT_PARTITION = partition_key(namespace="default", model="unspecified")
"""Partition used when a call gives none. Real callers key their requests (:mod:`ragcache.request`)."""
