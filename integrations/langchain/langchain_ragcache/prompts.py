"""RagPrompt: a cache-aware RAG prompt step for LCEL chains.

``{"question": str, "context": list[Document]}`` (plus optional ``history`` and
``volatile``) becomes a ``ChatPromptValue`` laid out stable-first by
:class:`ragcache.prompt.layout.PromptLayout`::

    SystemMessage(system text)
    ...history...
    HumanMessage([<document> block per document, canonical order], volatile text, question)

Documents are rendered canonically and sorted by content (their ids, random in a
vector store such as ``InMemoryVectorStore``, are kept for ``invalidate`` but never
rendered nor used to order), so the same retrieved set gives the same request bytes in
whatever order the retriever returned it and after a restart: a provider's prompt cache or the local prefix / chunk KV cache sees
the same prefix. For ``ChatAnthropic`` (``provider="anthropic"``, or
:meth:`RagPrompt.for_model`), ``cache_control`` breakpoints are placed by
ragcache's Anthropic adapter (:func:`ragcache.providers.anthropic.layout_request`: at most 4,
20-block lookback, the model's minimum cacheable length); otherwise blocks are
plain. Block kinds and ids go to ``HumanMessage.additional_kwargs["ragcache"]``
(not sent by provider adapters), which :class:`~langchain_ragcache.ChatRagCache`
and :class:`~langchain_ragcache.RagCacheSemanticCache` read.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, Literal

from langchain_core.documents import Document
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage, convert_to_messages
from langchain_core.prompt_values import ChatPromptValue
from langchain_core.runnables import RunnableConfig, RunnableSerializable
from pydantic import ConfigDict, Field

from langchain_ragcache._keys import METADATA_KEY
from langchain_ragcache.providers import takes_breakpoints
from ragcache.prompt.layout import PromptLayout, Segment, as_document
from ragcache.providers.anthropic.breakpoints import CachedRequest, layout_request
from ragcache.providers.table import for_langchain
from ragcache.providers.table import provider as provider_row

Provider = Literal["plain", "anthropic"]


def _documents(context: Any, metadata_keys: Sequence[str] | None) -> list[Segment]:
    """Documents as layout Segments (:func:`ragcache.prompt.layout.as_document`, the one normaliser),
    keeping only ``metadata_keys`` of their metadata (``None``: all)."""
    if context is None:
        return []
    if isinstance(context, str | Document | Mapping):
        context = [context]
    docs = []
    for i, d in enumerate(context):
        try:
            seg = as_document(d)
        except (ValueError, TypeError) as e:
            raise type(e)(f"context[{i}]: {e}") from None
        if metadata_keys is not None:
            seg = Segment("document", seg.text, seg.id, {k: seg.metadata[k] for k in metadata_keys if k in seg.metadata})
        docs.append(seg)
    return docs


def _history(history: Any) -> list[dict[str, Any]]:
    if not history:
        return []
    out = []
    for m in convert_to_messages(history):
        if m.type not in ("human", "ai"):
            raise ValueError(f"history holds a {m.type!r} message: RagPrompt history takes human and ai turns")
        out.append({"role": "user" if m.type == "human" else "assistant", "content": m.text})
    return out


def _block_kinds(layout: PromptLayout, final: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The kind of each block of the final user turn; documents also carry their own id and
    metadata, so the semantic cache rebuilds the exact Segment (content hash for ``invalidate``)."""
    docs = iter(layout.documents)
    out = []
    for b in final:
        rec: dict[str, Any] = {"kind": b["ragcache_kind"]}
        if b["ragcache_kind"] == "document":
            seg = next(docs)
            if seg.id is not None:  # the document's own id (never a content-hash stand-in): invalidate() takes it
                rec["id"] = seg.id
            rec["document"] = {"id": seg.id, "metadata": dict(seg.metadata)}
        out.append(rec)
    return out


def _to_lc(role: str, content: Any, **kwargs: Any) -> BaseMessage:
    if role == "system":
        return SystemMessage(content=content, **kwargs)
    if role == "user":
        return HumanMessage(content=content, **kwargs)
    return AIMessage(content=content, **kwargs)


class RagPrompt(RunnableSerializable[dict, ChatPromptValue]):
    """Stable-first RAG prompt: system -> history -> documents (canonical) -> volatile -> question.

    Args:
        system: system text (kept byte-stable; volatile text in it is linted).
        provider: ``"plain"`` (text blocks, any chat model, ChatRagCache included) or
            ``"anthropic"`` (adds ``cache_control`` breakpoints for ``ChatAnthropic``).
        anthropic_model: Claude model id the breakpoints are placed for (its minimum
            cacheable length); :meth:`for_model` fills it from a ``ChatAnthropic``.
        ttl / prefix_ttl: breakpoint TTLs ("5m" or "1h").
        min_tokens: override of the minimum cacheable length (one int, or per family).
        token_counter: tokens of a text, for exact breakpoint placement (default: estimate).
        doc_order: ``"canonical"`` (sorted, de-duplicated; byte-stable) or ``"given"``.
        lint: volatile-text lint of the stable parts: off, warn, ``move`` (default, as
            :class:`ragcache.RagCache`: dates and ids leave the system text for the volatile
            block, which stays in the semantic partition), raise.
        metadata_keys: Document metadata rendered as attributes (``None``: all of them;
            retrieval scores are volatile, so the default keeps source and title only).
        question_key / context_key / history_key / volatile_key: input dict keys.

    Input: ``{"question": str, "context": list[Document | str], "history": messages
    (optional), "volatile": str (optional)}``. Output: a ``ChatPromptValue``.

    Raises (on invoke):
        ValueError: missing question, bad documents or history, volatile text with ``lint="raise"``.
    """

    model_config = ConfigDict(arbitrary_types_allowed=True)

    system: str | None = None
    provider: Provider = "plain"
    anthropic_model: str = "claude-sonnet-4-6"
    ttl: Literal["5m", "1h"] = "5m"
    prefix_ttl: Literal["5m", "1h"] | None = None
    min_tokens: int | dict[str, int] | None = None
    token_counter: Callable[[str], int] | None = Field(default=None, exclude=True)
    doc_order: Literal["canonical", "given"] = "canonical"
    lint: Literal["off", "warn", "move", "raise"] = "move"
    metadata_keys: tuple[str, ...] | None = ("source", "title")
    question_key: str = "question"
    context_key: str = "context"
    history_key: str = "history"
    volatile_key: str = "volatile"

    @classmethod
    def for_model(cls, model: Any, **kwargs: Any) -> RagPrompt:
        """A RagPrompt for ``model``: Anthropic breakpoints for ``ChatAnthropic``, plain blocks otherwise."""
        if takes_breakpoints(model):
            kwargs.setdefault("provider", for_langchain(model).name)
            kwargs.setdefault("anthropic_model", getattr(model, "model", None) or "claude-sonnet-4-6")
        return cls(**kwargs)

    @property
    def InputType(self) -> type:  # noqa: N802 - LangChain's name
        return dict

    @property
    def OutputType(self) -> type:  # noqa: N802
        return ChatPromptValue

    # ------------------------------------------------------------------ building
    def layout(self, inputs: Mapping[str, Any]) -> PromptLayout:
        """The :class:`PromptLayout` for one input dict."""
        if not isinstance(inputs, Mapping):
            raise TypeError(f"RagPrompt takes a dict with {self.question_key!r} and {self.context_key!r}, "
                            f"got {type(inputs).__name__}")
        question = inputs.get(self.question_key)
        if question is not None and not isinstance(question, str):
            raise TypeError(f"RagPrompt input needs a non-empty string under {self.question_key!r}, "
                            f"got {type(question).__name__}")
        if not isinstance(question, str) or not question.strip():
            raise ValueError(f"RagPrompt input needs a non-empty string under {self.question_key!r}")
        return PromptLayout.build(
            question=question,
            system=self.system,
            documents=_documents(inputs.get(self.context_key), self.metadata_keys),
            history=_history(inputs.get(self.history_key)),
            volatile=inputs.get(self.volatile_key),
            doc_order=self.doc_order,
            lint=self.lint,
        )

    def anthropic_request(self, layout: PromptLayout, *, max_tokens: int = 1024) -> CachedRequest:
        """The ``messages.create`` request with breakpoints that this prompt stands for (Anthropic)."""
        return layout_request(layout, model=self.anthropic_model, max_tokens=max_tokens, ttl=self.ttl,
                              prefix_ttl=self.prefix_ttl, min_tokens=self.min_tokens,
                              token_counter=self.token_counter)

    def format_layout(self, layout: PromptLayout) -> ChatPromptValue:
        """Messages for a layout (see the class docstring for the shape)."""
        msgs = layout.to_messages()
        final = msgs[-1]["content"]
        kinds = _block_kinds(layout, final)
        if provider_row(self.provider).prompt_caching == "breakpoints":
            req = self.anthropic_request(layout)
            out: list[BaseMessage] = []
            if "system" in req.kwargs:
                out.append(SystemMessage(content=req.kwargs["system"]))
            body = req.kwargs["messages"]
            for m in body[:-1]:
                out.append(_to_lc(m["role"], m["content"]))
            out.append(HumanMessage(content=body[-1]["content"], additional_kwargs={METADATA_KEY: {
                "blocks": kinds, "breakpoints": [p.where for p in req.placed],
                "skipped_breakpoints": [s.detail for s in req.skipped]}}))
            return ChatPromptValue(messages=out)
        out = [_to_lc(m["role"], m["content"]) for m in msgs[:-1]]
        blocks = [{"type": "text", "text": b["text"]} for b in final]
        out.append(HumanMessage(content=blocks, additional_kwargs={METADATA_KEY: {"blocks": kinds}}))
        return ChatPromptValue(messages=out)

    def invoke(self, input: dict, config: RunnableConfig | None = None, **kwargs: Any) -> ChatPromptValue:
        return self._call_with_config(lambda x: self.format_layout(self.layout(x)), input, config,
                                      run_type="prompt")

    async def ainvoke(self, input: dict, config: RunnableConfig | None = None, **kwargs: Any) -> ChatPromptValue:
        return self.invoke(input, config, **kwargs)  # pure CPU work in microseconds: no thread hop
