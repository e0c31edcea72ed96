"""LangChain messages -> the dicts :func:`ragcache.request.key_messages` keys, and what a LangChain
``llm_string`` says about the model (identity, budget, sampling, blend setting).

The rule of which text is the question and what goes into the partition is ragcache's one keyer
(:mod:`ragcache.request`), the same for every entry point (:class:`ragcache.RagCache`, the proxy, the
LlamaIndex query engine): a request laid out by :class:`~langchain_ragcache.RagPrompt` and answered by
:class:`~langchain_ragcache.ChatRagCache` has the same partition as the same request sent through
:class:`ragcache.RagCache`. This module only maps messages: a RagPrompt message's block kinds (in
``additional_kwargs["ragcache"]``) become ``ragcache_kind`` marks on its text blocks, and documents a
retriever tool returned as artifacts are passed as documents.
"""

from __future__ import annotations

import ast
import json
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from langchain_core.messages import BaseMessage

from ragcache.backend import DEFAULT_TENANT
from ragcache.providers.table import for_langchain, rows
from ragcache.request import (
    EXACT_QUESTION,
    MAX_QUESTION_CHARS,
    KeyedPrompt,
    QuestionExtractor,
    key_text,
    labelled_question,
)
from ragcache.request import history_entry as plain_entry
from ragcache.request import key_messages as key_dicts

if TYPE_CHECKING:
    from ragcache.answering import Sampling

METADATA_KEY = "ragcache"
"""Key of RagPrompt's block-kind record in ``HumanMessage.additional_kwargs``."""


_CHUNK = "MessageChunk"


def message_type(m: BaseMessage) -> str:
    """A message's type with LangChain's chunk classes read as their messages (``AIMessageChunk`` is ``ai``,
    ``HumanMessageChunk`` is ``human``...): a chunk sent back as history reads as the message it adds up to."""
    t = m.type
    return t[: -len(_CHUNK)].lower() if t.endswith(_CHUNK) else t


def history_entry(m: BaseMessage) -> dict[str, Any]:
    """A message as a history entry of the layout (:func:`ragcache.request.history_entry`: text content as one
    string, provider markers dropped) with ``type``, ``name``, ``tool_calls`` (name and args) or ``status``
    where the message has them; a ``ChatMessage`` keeps its own ``role`` (a ``system`` one becomes a
    ``"type": "system"`` user entry, as a late system message does); message and tool-call ids are left out."""
    t = message_type(m)
    d: dict[str, Any] = {"role": "assistant" if t == "ai" else "user", "content": m.content}
    if t == "chat":
        d["role"] = m.role
    if t not in ("human", "ai"):
        d["type"] = t
    if getattr(m, "name", None) and t != "human":
        d["name"] = m.name
    calls = getattr(m, "tool_calls", None)
    if calls:
        d["tool_calls"] = [{"name": c.get("name"), "args": c.get("args")} for c in calls]
    if t == "tool" and getattr(m, "status", "success") != "success":
        d["status"] = m.status
    return plain_entry(d)


def block_kinds(message: BaseMessage, n: int) -> list[dict[str, Any]] | None:
    """RagPrompt's record of a message's ``n`` blocks (each ``{"kind", "id" | "document"}``), or ``None``
    when the message has none or it counts other blocks: what both the key and the prompt read."""
    meta = (message.additional_kwargs or {}).get(METADATA_KEY)
    blocks = meta.get("blocks") if isinstance(meta, Mapping) else None
    if isinstance(blocks, Sequence) and len(blocks) == n:
        return [dict(b) for b in blocks]
    return None


def _human_dict(m: BaseMessage) -> dict[str, Any]:
    """A human message as a user dict whose text blocks carry RagPrompt's kinds (``ragcache_kind``, ``id``),
    with its ``name`` (:func:`_name`) when it has one."""
    content = m.content if isinstance(m.content, list) else [m.content]
    blocks = [{"type": "text", "text": b} if isinstance(b, str) else dict(b) for b in content]
    kinds = block_kinds(m, len(blocks)) if all(b.get("type", "text") == "text" for b in blocks) else None
    if kinds is not None:
        for b, k in zip(blocks, kinds, strict=True):
            doc = k.get("document")
            b["ragcache_kind"] = k.get("kind") or "question"
            doc_id = doc.get("id") if isinstance(doc, Mapping) else k.get("id")
            b.pop("id", None)
            if doc_id is not None:
                b["id"] = doc_id
    d: dict[str, Any] = {"role": "user", "content": blocks}
    name = _name(m)
    if name is not None:
        d["name"] = name
    return d


def _name(m: BaseMessage) -> Any:
    """The ``name`` a chat model sends with ``m`` (ChatOpenAI: ``m.name``, else ``additional_kwargs["name"]``),
    or ``None``."""
    return getattr(m, "name", None) or (m.additional_kwargs or {}).get("name")


def _system_dict(m: BaseMessage) -> dict[str, Any]:
    """A system message as a system dict: its text (``m.text``: text blocks joined as LangChain joins them, the
    text the local engine reads too) when all its content is text, else its blocks, so non-text blocks (an
    image) reach the key; its ``name`` when it has one."""
    content = m.content
    if not isinstance(content, str) and any(
            not isinstance(b, str) and b.get("type", "text") not in ("text", "reasoning", "thinking") for b in content):
        d: dict[str, Any] = {"role": "system", "content": [b if isinstance(b, str) else dict(b) for b in content]}
    else:
        d = {"role": "system", "content": m.text}
    name = _name(m)
    if name is not None:
        d["name"] = name
    return d


def to_dicts(messages: Sequence[BaseMessage]) -> list[dict[str, Any]]:
    """LangChain messages as chat dicts: the one mapping of LangChain's messages, read by the keyer
    (:func:`ragcache.request.key_messages`) and by the local engine
    (:func:`langchain_ragcache._messages.engine_messages`), so the key and the prompt are made from one reading.

    Human messages are user dicts whose text blocks carry RagPrompt's kinds (``ragcache_kind``, ``id``) and
    their ``name``; system messages are system dicts (content as given, ``name``); the others are history
    entries (:func:`history_entry`: role, text, ``type``, ``name``, ``tool_calls``, ``status``). Chunks read as
    their messages (:func:`message_type`)."""
    out = []
    for m in messages:
        t = message_type(m)
        if t == "human":
            out.append(_human_dict(m))
        elif t == "system":
            out.append(_system_dict(m))
        else:
            out.append(history_entry(m))
    return out


def _document_artifact(message: BaseMessage) -> list[Any]:
    art = getattr(message, "artifact", None)
    if isinstance(art, Sequence) and not isinstance(art, str) and art and all(
            isinstance(getattr(d, "page_content", None), str) for d in art):
        return list(art)
    return []


def key_messages(messages: Sequence[BaseMessage], *, system: str | None = None,
                 extractor: QuestionExtractor | None = None,
                 tools: Sequence[Mapping[str, Any]] = ()) -> KeyedPrompt:
    """Key a LangChain chat request: :func:`ragcache.request.key_messages` over :func:`to_dicts`, with the
    documents a retriever tool returned as artifacts. ``system``: system text sent apart from ``messages``
    (an agent's system message)."""
    docs = [d for m in messages if m.type == "tool" for d in _document_artifact(m)]
    return key_dicts(to_dicts(messages), system=system, tools=tools, documents=docs, extractor=extractor)


# ------------------------------------------------------------------------------ the model
_CHAT_DEFAULTS: dict[str, Any] = {"top_p": 1.0, "seed": None, "stop": None, "default_stop": None,
                                  "tool_choice": None, "tenant": None}
_IDENTITY_KEYS = ("_type", "model_name", "model_fingerprint", "tools", "blend_setting", "tenant")


def blend_setting_of(llm_string: str) -> str | None:
    """The blend setting a :class:`~langchain_ragcache.ChatRagCache` ``llm_string`` names (its identifying
    params' ``blend_setting``; ``None``: exact prefill, or another model). Not in the partition, as in
    :class:`ragcache.RagCache`: it decides which stored answers may be served
    (:func:`ragcache.provenance.may_serve`)."""
    try:
        pairs = ast.literal_eval(llm_string) if llm_string.startswith("[") else None
        v = dict(pairs).get("blend_setting") if isinstance(pairs, list) else None
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        return None
    return v if isinstance(v, str) else None


def _pairs(llm_string: str) -> dict[str, Any] | None:
    """The parameters of a non-serialisable model's ``llm_string`` (LangChain's ``str(sorted(params.items()))``,
    ChatRagCache's form), or ``None`` when it is not one."""
    try:
        pairs = ast.literal_eval(llm_string) if llm_string.startswith("[") else None
        return dict(pairs) if isinstance(pairs, list) else None
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        return None


def call_identity(llm_string: str) -> tuple[str, dict[str, Any], list[dict[str, Any]], str | None]:
    """``(model, params, tools, tenant)`` of LangChain's ``llm_string`` for the partition.

    For :class:`~langchain_ragcache.ChatRagCache`: :func:`local_identity` and the call's tenant
    (:func:`call_tenant`: ``None`` for the default one), which the cache keys as the request's tenant.
    For other models: ``("langchain", {"llm_string": llm_string}, [], None)`` (every parameter exact).
    """
    d = _pairs(llm_string)
    local = local_identity(d) if d else None
    if local is None:
        return "langchain", {"llm_string": llm_string}, [], None
    return (*local, call_tenant(d))


def checked_tenant(tenant: Any) -> str | None:
    """``tenant`` when it is ``None`` or a non-empty string: what a ChatRagCache call or
    :meth:`~langchain_ragcache.RagCacheSemanticCache.tenant_for` takes as a tenant.

    Raises:
        TypeError / ValueError: another type, or an empty string.
    """
    if tenant is not None and not isinstance(tenant, str):
        raise TypeError(f"tenant must be a non-empty str or None (the default tenant), got {type(tenant).__name__}")
    if tenant == "":
        raise ValueError("tenant must be a non-empty str or None (the default tenant)")
    return tenant


def call_tenant(d: Mapping[str, Any]) -> str | None:
    """The tenant a :class:`~langchain_ragcache.ChatRagCache` call's parameters name (``tenant``: the model's or
    the call's); ``None`` for the default tenant (none, ``None`` or ``"default"``, however it is named)."""
    t = d.get("tenant")
    if t is None or t == DEFAULT_TENANT:
        return None
    return t if isinstance(t, str) and t else json.dumps(t, default=repr, sort_keys=True)


def local_identity(d: Mapping[str, Any]) -> tuple[str, dict[str, Any], list[dict[str, Any]]] | None:
    """The model identity of a :class:`~langchain_ragcache.ChatRagCache` call from its parameters themselves
    (the mapping its ``llm_string`` is ``str(sorted(...))`` of: the identifying params, ``_type``, ``stop`` and
    the call's options): ``model = "local:<weights fingerprint>"``, ``params = {"temperature", "max_tokens"}``
    plus any other option not at its default, and the bound tools (what :class:`ragcache.RagCache` puts in its
    partition for a ``LocalBackend``). The tenant is not among the params: it is the request's tenant
    (:func:`call_tenant`). ``None`` for another model's (its provider row, read by ``_type``, caches no local
    KV, or no weights fingerprint)."""
    t_type = d.get("_type")
    row = for_langchain(llm_type=t_type if isinstance(t_type, str) else None)
    if row.prompt_caching != "local-kv" or not d.get("model_fingerprint"):
        return None
    params: dict[str, Any] = {"temperature": float(d.get("temperature", row.unset_temperature)),
                              "max_tokens": int(d["max_tokens"])}
    for k in sorted(d):
        v = d[k]
        if k in _IDENTITY_KEYS or k in params or v in ([], ()) or (k in _CHAT_DEFAULTS and _CHAT_DEFAULTS[k] == v):
            continue
        params[k] = json.loads(json.dumps(v, default=repr, sort_keys=True))
    tools = [json.loads(json.dumps(t, default=repr, sort_keys=True)) for t in d.get("tools") or []]
    return f"local:{d['model_fingerprint']}", params, tools


def llm_params(llm_string: str) -> dict[str, Any]:
    """The parameters an ``llm_string`` names: LangChain's ``str(sorted(params.items()))`` (after the serialised
    model and ``---`` for a serialisable one, whose constructor kwargs fill what the pairs leave out); ``{}``
    when it cannot be read."""
    head, _, tail = llm_string.rpartition("---")
    try:
        pairs = ast.literal_eval(tail) if tail.startswith("[") else None
        params = dict(pairs) if isinstance(pairs, list) else {}
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        params = {}
    try:  # a serialisable model (ChatAnthropic, ChatOpenAI): its constructor kwargs
        model = json.loads(head) if head.startswith("{") else {}
        kwargs = model.get("kwargs") if isinstance(model, dict) else None
    except (ValueError, RecursionError):
        kwargs = None
    return {**(kwargs if isinstance(kwargs, dict) else {}), **{k: v for k, v in params.items() if v is not None}}


SAMPLING_BY_DEFAULT = frozenset(t for p in rows() for t in p.langchain_types if p.unset_temperature > 0)
"""LangChain ``_type``s of models whose API samples when the temperature is unset, kept for code written
before the provider table: read from its rows (:attr:`ragcache.providers.spec.Provider.langchain_types`
of the rows whose ``unset_temperature`` is above 0) when this module was imported."""


def sampling_of(llm_string: str) -> Sampling:
    """The :class:`ragcache.answering.Sampling` of a LangChain call: its ``temperature``, ``seed`` and ``n``.

    An unset temperature means the model's default: greedy for :class:`~langchain_ragcache.ChatRagCache`
    (0) and for models ragcache does not know (fakes, custom models that report no temperature), and
    sampling for the provider models the provider table names (the row of the ``_type``,
    :func:`ragcache.providers.table.for_langchain`: its ``unset_temperature``). A temperature that cannot
    be read counts as sampling."""
    return sampling_in(llm_params(llm_string))


def sampling_in(p: Mapping[str, Any]) -> Sampling:
    """:func:`sampling_of` of the parameters an ``llm_string`` names (:func:`llm_params`: ``None`` values
    left out)."""
    from ragcache.answering import Sampling

    t_type = p.get("_type")
    unset = for_langchain(llm_type=t_type if isinstance(t_type, str) else None).unset_temperature
    t, seed, n = p.get("temperature"), p.get("seed"), p.get("n", 1)
    if t is not None and (isinstance(t, bool) or not isinstance(t, int | float) or not t >= 0):
        t = 1.0
    n = n if isinstance(n, int) and not isinstance(n, bool) and n >= 1 else 1
    seed = seed if isinstance(seed, int) and not isinstance(seed, bool) else None
    return Sampling(None if t is None else float(t), seed, n, unset_temperature=unset)


__all__ = ["EXACT_QUESTION", "MAX_QUESTION_CHARS", "QuestionExtractor", "SAMPLING_BY_DEFAULT", "block_kinds", "blend_setting_of",
           "call_identity", "call_tenant", "checked_tenant", "history_entry", "key_messages", "key_text",
           "labelled_question", "llm_params", "local_identity", "message_type", "sampling_in", "sampling_of", "to_dicts"]
