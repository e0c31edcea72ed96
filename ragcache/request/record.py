"""One request as the answer cache sees it: :class:`CacheRequest`, and :func:`cache_request`, the one
place a request's partition is computed."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ragcache.backend import DEFAULT_TENANT
from ragcache.request.partition import request_partition
from ragcache.sampling import Sampling

if TYPE_CHECKING:
    from ragcache.prompt.layout import PromptLayout
    from ragcache.semantic.partition import PartitionKey


@dataclass(frozen=True, slots=True)
class CacheRequest:
    """One request, built the same way by every entry point (:mod:`ragcache.request`) and answered by
    :class:`ragcache.answering.AnswerPath`.

    Attributes:
        question: the embedded part of the semantic key (:data:`~ragcache.request.EXACT_QUESTION` for a
            prompt matched exactly).
        layout: the stable-first prompt (:class:`~ragcache.prompt.layout.PromptLayout`); ``None`` for a
            request ragcache forwards without laying it out (a proxy body it does not cache).
        partition: the exact part of the key (:class:`~ragcache.semantic.partition.PartitionKey`);
            ``None``: no answer cache for this request (nothing looked up or stored).
        tenant: who asks (the partition's namespace; the backend's ``tenant``, the KV salt).
        max_tokens: the answer budget in new tokens (``None``: unknown; an answer cut at its budget is
            then never stored); in the partition too.
        sampling: temperature, seed and choices (:class:`~ragcache.sampling.Sampling`; ``None``: a
            deterministic request); one that must be a fresh draw is neither looked up nor stored.
        threshold: cosine similarity a hit needs (``None``: the cache's own; 1.0 for an exact match).
        model: the model recorded in a stored answer's provenance (``backend:model id``; ``None``: the
            result's ``details["model"]``).
        alias: the model identity in the partition, as requested (``anthropic:claude-sonnet-4-6``): the
            name whose current snapshot decides whether a stored answer is stale
            (:class:`ragcache.provenance.SnapshotBook`); ``None``: not tracked.
    """

    question: str
    layout: PromptLayout | None
    partition: PartitionKey | None
    tenant: str = DEFAULT_TENANT
    max_tokens: int | None = None
    sampling: Sampling | None = None
    threshold: float | None = None
    model: str | None = None
    alias: str | None = None

    @property
    def temperature(self) -> float | None:
        """The request's temperature (``sampling.temperature``; ``None``: unset or no sampling record)."""
        return None if self.sampling is None else self.sampling.temperature


def cache_request(question: str, layout: PromptLayout | None, *, tenant: str = DEFAULT_TENANT,
                  model: str | None = None, partition_model: str | None = None,
                  params: Mapping[str, Any] | None = None, extra: Mapping[str, Any] | None = None,
                  document_ids: Iterable[str] = (), max_tokens: int | None = None,
                  sampling: Sampling | None = None, threshold: float | None = None,
                  cached: bool = True) -> CacheRequest:
    """A :class:`CacheRequest` with its partition: :func:`ragcache.request.partition.request_partition`
    over ``layout`` (every byte that reaches the model is either the question or in the partition).

    Args:
        question / layout / tenant / max_tokens / sampling / threshold / model: as in :class:`CacheRequest`
            (``tenant`` is the partition's namespace).
        partition_model: the model identity in the partition (default ``model``).
        params: generation parameters that change the answer (temperature, max_tokens, stop...).
        extra: anything else that reaches the model and must match exactly (JSON-like).
        document_ids: more ids ``invalidate()`` accepts for this answer (not in the digest).
        cached: ``False``: no partition (the request is neither looked up nor stored).

    Raises:
        ValueError: a field that is not JSON-like, an empty tenant or model (``cached`` only).
    """
    pk, ident = None, None
    if cached and layout is not None:
        ident = partition_model if partition_model is not None else model
        if not ident:
            raise ValueError("a cached request needs its model identity (partition_model or model)")
        pk = request_partition(layout, namespace=tenant, model=ident, params=dict(params or {}), extra=extra,
                               document_ids=document_ids)
    return CacheRequest(question, layout, pk, tenant, max_tokens, sampling, threshold, model, ident)


__all__ = ["CacheRequest", "cache_request"]
