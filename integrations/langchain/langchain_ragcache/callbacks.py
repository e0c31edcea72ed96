"""RagCacheCallbackHandler: a record of which cache layer served each chat model call.

Attach it to a chain (``chain.invoke(x, config={"callbacks": [handler]})``) to see,
per call, the layer (``semantic`` for an LLM-cache hit, ``chunk`` / ``prefix`` /
``model`` for ChatRagCache's KV caches, ``provider-cache`` when a provider such as
Anthropic read part of the prompt from its cache, else ``provider``: the one rule
:func:`ragcache.backend.provider_layer`), the wall time, TTFT and the
token accounting. Works with any chat model; fields a model does not report are None.
"""

from __future__ import annotations

import threading
import time
from dataclasses import asdict, dataclass
from typing import Any
from uuid import UUID

from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.outputs import LLMResult

from langchain_ragcache.usage import cache_usage, own_record
from ragcache.backend import provider_layer


@dataclass(slots=True)
class CallRecord:
    """One chat model call. Times in seconds, counts in tokens."""

    layer: str
    wall_s: float
    model: str | None = None
    similarity: float | None = None
    ttft_s: float | None = None
    input_tokens: int | None = None
    cache_read: int | None = None
    cache_creation: int | None = None
    tokens_recomputed: int | None = None
    recompute_ratio: float | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


class RagCacheCallbackHandler(BaseCallbackHandler):
    """Collects a :class:`CallRecord` per chat model call in :attr:`records` (thread-safe)."""

    def __init__(self) -> None:
        self.records: list[CallRecord] = []
        self._start: dict[UUID, float] = {}
        self._lock = threading.Lock()

    def on_chat_model_start(self, serialized: Any, messages: Any, *, run_id: UUID, **kwargs: Any) -> None:
        self._start[run_id] = time.perf_counter()

    def on_llm_end(self, response: LLMResult, *, run_id: UUID, **kwargs: Any) -> None:
        wall = time.perf_counter() - self._start.pop(run_id, time.perf_counter())
        for gens in response.generations:
            for g in gens:
                msg = getattr(g, "message", None)
                meta = dict(getattr(msg, "response_metadata", None) or {})
                rc = dict(own_record(msg) or {})  # ragcache's own record, not a local server's body
                usage = cache_usage(msg)  # the one LangChain -> CacheUsage mapping
                layer = rc.get("layer") or provider_layer(usage.cache_read if usage else 0)
                rec = CallRecord(layer=layer, wall_s=wall, model=meta.get("model_name") or meta.get("model"),
                                 similarity=rc.get("similarity"))
                if layer != "semantic":  # a semantic hit made no model call: no tokens, no TTFT to report
                    rec.ttft_s = rc.get("ttft_s")
                    if usage is not None:
                        rec.input_tokens, rec.cache_read = usage.prompt_tokens, usage.cache_read
                        rec.cache_creation = usage.cache_write
                    rec.tokens_recomputed = rc.get("tokens_recomputed")
                    rec.recompute_ratio = rc.get("recompute_ratio")
                with self._lock:
                    self.records.append(rec)

    @property
    def last(self) -> CallRecord | None:
        """The most recent record."""
        return self.records[-1] if self.records else None
