"""A request's partition: the derivation from a laid-out request to its exact key.

:mod:`ragcache.semantic.partition` holds the key (:class:`~ragcache.semantic.partition.PartitionKey`)
and its plain constructor from explicit fields (:func:`~ragcache.semantic.partition.partition_key`);
the semantic cache receives keys and its stores address them. Which parts of a *request* go into
the key (the layout's system text, tools, history, documents in reading order, volatile text) is
decided here, above the semantic cache, and called by :func:`ragcache.request.cache_request`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import replace
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ragcache.prompt.layout import PromptLayout
    from ragcache.semantic.partition import PartitionKey


def request_partition(layout: PromptLayout, *, namespace: str, model: str, params: Mapping[str, Any],
                      extra: Mapping[str, Any] | None = None, document_ids: Iterable[str] = ()) -> PartitionKey:
    """The partition key of a laid-out request: the one derivation every entry point reaches through
    :func:`ragcache.request.cache_request` (``RagCache``, the LangChain prompt and middleware, the
    LlamaIndex query engine, the proxy, the CLI).

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
        ValueError: as :func:`ragcache.semantic.partition.partition_key`.
    """
    # the semantic package is heavy (numpy, the guards): loaded on the first keyed request
    from ragcache.semantic.partition import partition_key

    extra_spec = dict(extra or {})
    extra_spec["volatile"] = layout.volatile
    extra_spec["rendered_documents"] = [d.render_hash for d in layout.documents]  # in the order the model reads
    pk = partition_key(namespace=namespace, model=model, params=params, system=layout.system_text,
                       tools=layout.tools, history=layout.history, documents=layout.documents, extra=extra_spec)
    more = tuple(str(i) for i in document_ids)
    return replace(pk, document_ids=tuple(sorted(set(pk.document_ids + more)))) if more else pk


__all__ = ["request_partition"]
