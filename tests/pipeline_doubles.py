"""Pipeline test doubles shared by the RagCache tests: four documents with ids, a deterministic backend and
a RagCache over it with an in-memory answer cache."""

from __future__ import annotations

from ragcache import BackendResult, CacheUsage, RagCache, SemanticCache
from ragcache.testing import HashingEmbedder

DOCS = [
    {"id": "refund-policy", "text": "Refunds are issued within 30 days of purchase when the receipt is shown. " * 3},
    {"id": "shipping", "text": "Orders ship from the Leeds warehouse on weekdays before noon, by courier. " * 3},
    {"id": "warranty", "text": "Bikes carry a two-year warranty on the frame and six months on parts. " * 3},
    {"id": "returns", "text": "Return a bike in its original box; the buyer pays return shipping costs. " * 3},
]


class EchoBackend:
    """A deterministic backend for pipeline bookkeeping: answers with a counter, reports a budget hit
    when told to."""

    name = "echo"
    model_id = "echo-1"

    def __init__(self, finish: str = "stop") -> None:
        self.calls = 0
        self.finish = finish

    def generate(self, layout, *, max_new_tokens, temperature, tenant=None):
        self.calls += 1
        n = len(layout.render().split())
        return BackendResult(f"answer #{self.calls}", "model", CacheUsage.local(prompt_tokens=n),
                             0.001, self.finish)  # type: ignore[arg-type]


def echo_rag(backend=None, **kw) -> RagCache:
    """A :class:`RagCache` over ``backend`` (default: a new :class:`EchoBackend`) with an in-memory answer cache
    (:class:`HashingEmbedder`); ``kw`` go to ``RagCache``."""
    return RagCache(backend or EchoBackend(), semantic=SemanticCache(None, embedder=HashingEmbedder()), **kw)
