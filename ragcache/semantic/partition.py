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
from dataclasses import dataclass, replace
from typing import Any

from ragcache.hashing import hash_value
from ragcache.prompt.layout import PromptLayout, as_document

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
            with ``text``/``id`` or layout ``Segment`` objects. Order does not matter here (a
            caller whose model reads them in a given order keys that order in ``extra``, as
            :func:`request_partition` does).
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


ANTHROPIC_SHAPING = frozenset({
    "max_tokens", "temperature", "top_p", "top_k", "stop_sequences", "tool_choice", "tools", "thinking", "system",
    "output_config", "output_format", "container", "mcp_servers", "context_management", "metadata"})
"""Messages API body fields that change the answer (its content, shape, length or tool use): each is
part of the partition of a request that carries it (``metadata`` too: it names the end user)."""

ANTHROPIC_NEUTRAL = frozenset({"model", "messages", "stream", "service_tier", "cache_control", "inference_geo"})
"""Messages API body fields that do not go into the params (``model`` and ``messages`` are keyed on
their own; streaming, the service tier, the top-level caching marker and the region leave the
answer unchanged)."""


def shaping_fields(body: Mapping[str, Any], *, shaping: frozenset[str] = ANTHROPIC_SHAPING,
                   neutral: frozenset[str] = ANTHROPIC_NEUTRAL) -> tuple[dict[str, Any], tuple[str, ...]]:
    """Split a request body: ``(fields that shape the answer, names of unknown fields)``.

    The rule for every entry point that keys a raw API body (the caching proxy): a known shaping
    field goes into the partition's ``params``; a field in neither set is *unknown* (a new API
    feature such as a structured-output option), and the caller must then bypass the semantic cache
    (and log it) rather than ignore a field that may change the answer.
    """
    params = {k: body[k] for k in sorted(body) if k in shaping}
    unknown = tuple(sorted(k for k in body if k not in shaping and k not in neutral))
    return params, unknown


def request_partition(layout: PromptLayout, *, namespace: str, model: str, params: Mapping[str, Any],
                      extra: Mapping[str, Any] | None = None, document_ids: Iterable[str] = ()) -> PartitionKey:
    """The partition key of a laid-out request: the one function every entry point calls
    (``RagCache``, the LangChain prompt and middleware, the LlamaIndex query engine, the CLI).

    Rule: every byte that reaches the model is either the embedded question or in this key.
    The key covers the system text, tools, history, each document's content hash (for
    ``invalidate``) and rendered bytes (id and metadata included) in the layout's order (the order
    the model reads them: a canonical layout has already sorted them, so the same documents
    retrieved in another order still share the key; a ``"given"`` layout keeps the caller's order,
    and another order is another key), and the volatile text (a date
    line, a user name moved out of the stable prefix): an answer written for one user or one day
    is never served to another.

    Args:
        layout: the request's :class:`~ragcache.prompt.layout.PromptLayout`.
        namespace: tenant / cache salt.
        model: ``"<backend name>:<model id>"`` (model fingerprint or provider model name).
        params: generation parameters that change the answer (temperature, max_tokens, stop...).
        extra: anything else the caller's framework adds to the prompt (JSON-like).
        document_ids: more ids ``invalidate()`` should accept for this partition (a LlamaIndex
            node's source document id, when it is not rendered into the prompt); not in the digest.

    Raises:
        ValueError: as :func:`partition_key`.
    """
    extra_spec = dict(extra or {})
    extra_spec["volatile"] = layout.volatile
    extra_spec["rendered_documents"] = [d.render_hash for d in layout.documents]  # in the order the model reads
    pk = partition_key(namespace=namespace, model=model, params=params, system=layout.system_text,
                       tools=layout.tools, history=layout.history, documents=layout.documents, extra=extra_spec)
    more = tuple(str(i) for i in document_ids)
    return replace(pk, document_ids=tuple(sorted(set(pk.document_ids + more)))) if more else pk
