"""RagCache: the facade that runs the layers in order and returns an Answer record.

    question + documents
      1. semantic response cache  (hit -> stored answer, no model call)
      2. prompt layout            (stable first: system, tools, documents, history, volatile, question)
      3. backend                  (local engine: prefix + chunk KV cache; or Anthropic with breakpoints)
      4. store the answer in the semantic cache
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Protocol

from ragcache.layout import PromptLayout

DEFAULT_SYSTEM = (
    "You are a concise technical assistant. Answer the question using only the documents provided. "
    "If the documents do not contain the answer, say so. Answer in two or three sentences."
)


@dataclass(slots=True)
class BackendResult:
    """What a backend returns for one prompt.

    Attributes:
        text: the answer. layer: which cache layer served the prefill (``prefix``, ``chunk``,
        ``prefix+chunk``, ``model``, ``provider-cache``, ``provider``). stats: backend-specific
        accounting (tokens reused/computed, cache write/read tokens, cost). ttft_s: seconds.
    """

    text: str
    layer: str
    stats: dict = field(default_factory=dict)
    ttft_s: float = 0.0


class Backend(Protocol):
    """An LLM backend that answers a laid-out prompt."""

    name: str
    model_id: str

    def generate(self, layout: PromptLayout, *, max_new_tokens: int, temperature: float) -> BackendResult: ...


class LocalBackend:
    """The local transformers engine as a backend.

    Args:
        engine: a :class:`ragcache.engine.engine.LocalEngine`.
    """

    name = "local"

    def __init__(self, engine: Any) -> None:
        self.engine = engine
        self.model_id = engine.fingerprint.digest

    def generate(self, layout: PromptLayout, *, max_new_tokens: int, temperature: float) -> BackendResult:
        g = self.engine.generate(layout, max_new_tokens=max_new_tokens, temperature=temperature)
        s = g.stats
        parts = [name for name, n in (("prefix", s.prefix_tokens_reused), ("chunk", s.chunk_tokens_reused)) if n]
        return BackendResult(g.text, "+".join(parts) or "model", s.to_dict(), s.ttft_s)


@dataclass(slots=True)
class Answer:
    """One answered question and what each layer did.

    Attributes:
        question / text: the question and the answer.
        layer: ``semantic`` for a semantic-cache hit, else the backend's layer.
        similarity: cosine similarity of the semantic hit (``None`` on a miss).
        ttft_s: time to the first token (a semantic hit: the lookup time), seconds.
        total_s: wall time of :meth:`RagCache.answer`, seconds.
        prompt_tokens / tokens_reused / tokens_computed: prefill accounting (0 on a semantic hit).
        stats: the backend's full accounting; rejected: guard rejections seen in the lookup.
    """

    question: str
    text: str
    layer: str
    similarity: float | None = None
    ttft_s: float = 0.0
    total_s: float = 0.0
    prompt_tokens: int = 0
    tokens_reused: int = 0
    tokens_computed: int = 0
    stats: dict = field(default_factory=dict)

    def to_dict(self) -> dict:
        return asdict(self)


class RagCache:
    """Runs the caching layers for each question.

    Args:
        backend: a :class:`LocalBackend` or :class:`ragcache.anthropic.backend.AnthropicBackend`.
        semantic: a :class:`ragcache.semantic.SemanticCache`, or ``None`` to skip that layer.
        system: default system text (stable: it goes first and is cached).
        namespace: tenant; answers never cross namespaces.
        doc_order: ``canonical`` (by content, stable bytes) or ``given``.
        lint: what to do with volatile text (dates, ids) found in stable segments: ``warn``,
            ``move`` (into the volatile segment), ``raise`` or ``off``.
        max_new_tokens / temperature: generation parameters (part of the semantic partition).
    """

    def __init__(self, backend: Backend, *, semantic: Any = None, system: str = DEFAULT_SYSTEM,
                 namespace: str = "default", doc_order: str = "canonical", lint: str = "move",
                 max_new_tokens: int = 96, temperature: float = 0.0) -> None:
        self.backend = backend
        self.semantic = semantic
        self.system = system
        self.namespace = namespace
        self.doc_order = doc_order
        self.lint = lint
        self.max_new_tokens = max_new_tokens
        self.temperature = temperature

    def layout(self, question: str, documents: Sequence[Any], *, system: str | None = None,
               history: Sequence[dict] = (), volatile: str | None = None) -> PromptLayout:
        """The stable-first layout of one request (see :class:`ragcache.layout.PromptLayout`)."""
        return PromptLayout.build(question=question, system=self.system if system is None else system,
                                  documents=documents, history=history, volatile=volatile,
                                  doc_order=self.doc_order, lint=self.lint)

    def partition(self, layout: PromptLayout, *, namespace: str, max_new_tokens: int, temperature: float) -> Any:
        """The semantic cache's exact partition key for this request."""
        from ragcache.semantic import partition_key

        return partition_key(
            namespace=namespace, model=f"{self.backend.name}:{self.backend.model_id}",
            params={"temperature": temperature, "max_tokens": max_new_tokens},
            system=layout.system_text or "", tools=layout.tools, history=layout.history,
            documents=list(layout.documents),
        )

    def answer(self, question: str, documents: Sequence[Any] = (), *, system: str | None = None,
               history: Sequence[dict] = (), volatile: str | None = None, namespace: str | None = None,
               max_new_tokens: int | None = None, temperature: float | None = None,
               use_semantic: bool = True) -> Answer:
        """Answer ``question`` over ``documents`` (strings, dicts with id/text/metadata, or Segments).

        Raises:
            ValueError: empty question, or a prompt longer than the model's context window
                (the message states both token counts).
        """
        if not isinstance(question, str) or not question.strip():
            raise ValueError("question is empty: ask something")
        t0 = time.perf_counter()
        ns = self.namespace if namespace is None else namespace
        mnt = self.max_new_tokens if max_new_tokens is None else max_new_tokens
        temp = self.temperature if temperature is None else temperature
        layout = self.layout(question, documents, system=system, history=history, volatile=volatile)
        pk = None
        if self.semantic is not None and use_semantic:
            pk = self.partition(layout, namespace=ns, max_new_tokens=mnt, temperature=temp)
            hit = self.semantic.lookup(question, partition=pk)
            if hit is not None:
                dt = time.perf_counter() - t0
                return Answer(question, hit.answer, "semantic", similarity=hit.similarity, ttft_s=dt, total_s=dt,
                              stats={"matched_question": hit.question})
        res = self.backend.generate(layout, max_new_tokens=mnt, temperature=temp)
        if pk is not None and res.text.strip():
            self.semantic.store(question, res.text, partition=pk)
        s = res.stats
        reused = int(s.get("prefill_tokens_reused", s.get("cache_read_input_tokens", 0)) or 0)
        computed = int(s.get("prefill_tokens_computed", s.get("input_tokens", 0)) or 0)
        return Answer(question, res.text, res.layer, None, res.ttft_s, time.perf_counter() - t0,
                      int(s.get("prompt_tokens", reused + computed)), reused, computed, dict(s))
