"""What a LangChain request is keyed by in ragcache's semantic cache: the question and the partition.

One rule for every LangChain entry point (:class:`~langchain_ragcache.RagCacheSemanticCache`,
:class:`~langchain_ragcache.middleware.RagCacheMiddleware`): every byte that reaches the model
is either the embedded question or in the exact partition key, and the partition is ragcache's
one partition function, :func:`ragcache.semantic.partition.request_partition`, over the
request's :class:`~ragcache.prompt.layout.PromptLayout`. A request laid out by
:class:`~langchain_ragcache.RagPrompt` and answered by
:class:`~langchain_ragcache.ChatRagCache` therefore has the same partition as the same
request sent through :class:`ragcache.RagCache`.

Which text is the question (never the context):

1. the question block of a :class:`~langchain_ragcache.RagPrompt` message (its block kinds ride
   in ``additional_kwargs["ragcache"]``) or a block marked ``"ragcache_kind": "question"``;
2. a caller's ``question_extractor(text) -> str | None`` on the last human turn's text (the
   returned question must occur in the text);
3. a labelled question (``Question: ...`` / ``Query: ...``; the text after the last label, up to
   a ``Context:`` / ``Answer:`` label);
4. a last human turn that is question-sized: one paragraph, at most
   :data:`MAX_QUESTION_CHARS` characters, no ``<document>`` markup.

Otherwise the adapter cannot tell question from context and the whole prompt is matched exactly
(its sha256 is in the partition, the lookup threshold is 1.0): nothing is embedded. When a
question is cut out of a longer turn, the rest of that turn (the template with the context) is
in the partition.
"""

from __future__ import annotations

import ast
import hashlib
import json
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from langchain_core.messages import BaseMessage

from ragcache.backend import DEFAULT_TENANT
from ragcache.prompt.layout import PromptLayout, Segment, as_document, parse_document
from ragcache.semantic.partition import PartitionKey, request_partition

if TYPE_CHECKING:
    from ragcache.answering import Sampling

METADATA_KEY = "ragcache"
"""Key of RagPrompt's block-kind record in ``HumanMessage.additional_kwargs``."""

MAX_QUESTION_CHARS = 500
"""Longest unlabelled human turn taken as a question as a whole (characters)."""

EXACT_QUESTION = "(whole prompt, exact match)"
"""The stored question of whole-prompt entries (their partition holds the prompt's sha256)."""

QuestionExtractor = Callable[[str], "str | None"]

_PROVIDER_MARKERS = ("cache_control", "citations", "index", "id", "extras")
_Q_LABEL = re.compile(r"(?i)(?:^|(?<=[\s>*#]))(?:user[ \t]+question|question|query)[ \t]*[:：]")
_Q_LINE_LABEL = re.compile(r"(?im)^[ \t]*(?:#+[ \t]*)?q[ \t]*[:：]")
_END_LABEL = re.compile(r"(?i)(?:^|(?<=[\s>*#]))(?:context|documents?|sources?|passages?|answer|response|"
                        r"helpful[ \t]+answer)[ \t]*[:：]")
_DOC_MARKUP = re.compile(r"(?i)<document[\s>]")
_SENTINEL = "\x00question\x00"


# ------------------------------------------------------------------------------ the question
def labelled_question(text: str) -> str | None:
    """The question after the last ``Question:`` / ``Query:`` label (or a ``Q:`` line), up to
    the next ``Context:`` / ``Answer:`` label; ``None`` without a label or with an empty,
    multi-paragraph or over-long question."""
    labels = list(_Q_LABEL.finditer(text)) + list(_Q_LINE_LABEL.finditer(text))
    if not labels:
        return None
    start = max(m.end() for m in labels)
    end = _END_LABEL.search(text, start)
    q = text[start:end.start() if end else len(text)].strip().strip("*").strip()
    return q if _question_sized(q) else None


def _question_sized(text: str) -> bool:
    t = text.strip()
    return bool(t) and len(t) <= MAX_QUESTION_CHARS and "\n\n" not in t and not _DOC_MARKUP.search(t)


def split_turn(text: str, extractor: QuestionExtractor | None = None) -> tuple[str, str] | None:
    """``(question, template)`` of a human turn's text, or ``None`` when the question cannot be
    told from the rest. ``template`` is the text with the question replaced by a marker (it goes
    into the partition; the question is embedded).

    Raises:
        ValueError: ``extractor`` returned text that is not in the turn.
    """
    if extractor is not None:
        q = extractor(text)
        if q is None or not str(q).strip():
            return None
        q = str(q)
        if q not in text:
            raise ValueError("question_extractor must return a substring of the prompt text (the question as "
                             f"written), got {q[:80]!r}")
    else:
        q = labelled_question(text)
        if q is None:
            if not _question_sized(text):
                return None
            q = text.strip()
    i = text.rfind(q)
    return q.strip(), text[:i] + _SENTINEL + text[i + len(q):]


# ------------------------------------------------------------------------------ messages -> layout
def _text_of(content: Any) -> str | None:
    """A message content's text when it is all text (blocks joined by a blank line), else ``None``."""
    if isinstance(content, str):
        return content
    texts = []
    for b in content or []:
        if isinstance(b, str):
            texts.append(b)
        elif isinstance(b, Mapping) and b.get("type", "text") == "text":
            texts.append(str(b.get("text", "")))
        elif isinstance(b, Mapping) and b.get("type") in ("reasoning", "thinking"):
            continue
        else:
            return None
    return "\n\n".join(texts)


def _plain_blocks(content: Any) -> Any:
    if isinstance(content, str):
        return content
    return [{k: v for k, v in b.items() if k not in _PROVIDER_MARKERS} if isinstance(b, Mapping) else b
            for b in content or []]


def history_entry(m: BaseMessage) -> dict[str, Any]:
    """A message as a history entry of the layout: ``{"role", "content"}`` (text content as one
    string, provider markers and message / tool-call ids dropped) plus ``type``, ``name``,
    ``tool_calls`` (name and args) or ``status`` where the message has them."""
    text = _text_of(m.content)
    role = "assistant" if m.type == "ai" else "user"
    d: dict[str, Any] = {"role": role, "content": text if text is not None else _plain_blocks(m.content)}
    if m.type not in ("human", "ai"):
        d["type"] = m.type
    if getattr(m, "name", None) and m.type != "human":
        d["name"] = m.name
    calls = getattr(m, "tool_calls", None)
    if calls:
        d["tool_calls"] = [{"name": c.get("name"), "args": c.get("args")} for c in calls]
    if m.type == "tool" and getattr(m, "status", "success") != "success":
        d["status"] = m.status
    return json.loads(json.dumps(d, default=repr, sort_keys=True))


def marked_block(text: str, kind: str | None, doc_id: Any = None) -> str | Segment:
    """One final-turn block for :meth:`PromptLayout.from_messages`: a typed Segment when its kind is
    known (a RagPrompt record or a ``ragcache_kind`` key), else the plain text (kind left to the rule)."""
    if kind == "document":
        seg = parse_document(text) or Segment("document", text)
        if doc_id is None or str(doc_id) == seg.content_hash[:16]:  # no id: blocks()' content-hash fallback mark
            return seg
        return Segment("document", seg.text, str(doc_id), seg.metadata)
    if kind in ("volatile", "question"):
        return Segment(kind, text)
    return text


def _volatile_only(message: BaseMessage) -> bool:
    n = len(message.content) if isinstance(message.content, list) else 1
    kinds = _block_kinds(message, n)
    return bool(kinds) and all(k.get("kind") == "volatile" for k in kinds)


def _document_artifact(message: BaseMessage) -> list[Any]:
    art = getattr(message, "artifact", None)
    if isinstance(art, Sequence) and not isinstance(art, str) and art and all(
            isinstance(getattr(d, "page_content", None), str) for d in art):
        return list(art)
    return []


def _block_kinds(message: BaseMessage, n: int) -> list[dict[str, Any]] | None:
    meta = (message.additional_kwargs or {}).get(METADATA_KEY)
    blocks = meta.get("blocks") if isinstance(meta, Mapping) else None
    if isinstance(blocks, Sequence) and len(blocks) == n:
        return [dict(b) for b in blocks]
    return None


@dataclass(frozen=True, slots=True)
class KeyedRequest:
    """A request as the semantic cache keys it.

    Attributes:
        question: the embedded text (:data:`EXACT_QUESTION` for a whole-prompt match).
        layout: the request's :class:`PromptLayout` (system, history, documents, volatile text).
        extra: the rest of the prompt, matched exactly (template around the question, non-text
            blocks, messages after the last human turn, the whole prompt's hash when exact).
        exact: the question could not be told from its context: match the whole prompt exactly.
    """

    question: str
    layout: PromptLayout
    extra: Mapping[str, Any]
    exact: bool = False

    def partition(self, *, namespace: str, model: str, params: Mapping[str, Any],
                  tools: Sequence[Mapping[str, Any]] = ()) -> PartitionKey:
        """The partition key (:func:`request_partition`, the one partition function)."""
        layout = self.layout
        if tools:
            layout = PromptLayout.build(question=layout.question, system=layout.system_text, tools=tools,
                                        documents=layout.documents, history=layout.history,
                                        volatile=layout.volatile, lint="off")
        return request_partition(layout, namespace=namespace, model=model, params=params, extra=self.extra)


def exact_request(prompt: str, extra: Mapping[str, Any] | None = None) -> KeyedRequest:
    """A whole-prompt key: nothing is embedded; the partition holds the prompt's sha256."""
    digest = hashlib.sha256(prompt.encode("utf-8")).hexdigest()
    return KeyedRequest(EXACT_QUESTION, PromptLayout.build(question=EXACT_QUESTION, lint="off"),
                        {**(extra or {}), "whole_prompt": digest}, exact=True)


def key_messages(messages: Sequence[BaseMessage], *, system: str | None = None,
                 extractor: QuestionExtractor | None = None) -> KeyedRequest:
    """Key a chat request: question (last human turn), layout and the exact rest.

    ``system``: system text sent apart from ``messages`` (an agent's system message). Leading
    system messages form the system text; later ones are history entries.
    """
    msgs = list(messages)
    # a trailing volatile-only turn (RagPromptLayoutMiddleware moves dates there) is volatile text
    trailing_volatile = []
    while msgs and msgs[-1].type == "human" and _volatile_only(msgs[-1]):
        trailing_volatile.insert(0, _text_of(msgs.pop().content) or "")
    last = max((i for i, m in enumerate(msgs) if m.type == "human"), default=None)
    whole = json.dumps([history_entry(m) for m in messages], sort_keys=True) + "\x00" + (system or "")
    if last is None:
        return exact_request(whole)
    systems = [system] if system else []
    lead = 0
    while lead < last and msgs[lead].type == "system":
        systems.append(msgs[lead].text)
        lead += 1
    history = [history_entry(m) for m in msgs[lead:last]]
    human = msgs[last]
    content = human.content if isinstance(human.content, list) else [{"type": "text", "text": human.content}]
    blocks = [{"type": "text", "text": b} if isinstance(b, str) else dict(b) for b in content]
    texts = [b for b in blocks if b.get("type", "text") == "text"]
    other = [{k: v for k, v in b.items() if k not in _PROVIDER_MARKERS} for b in blocks
             if b.get("type", "text") != "text" and b.get("type") not in ("reasoning", "thinking")]
    extra: dict[str, Any] = {}
    if other:
        extra["other_blocks"] = json.loads(json.dumps(other, default=repr, sort_keys=True))
    if last + 1 < len(msgs):
        extra["after"] = [history_entry(m) for m in msgs[last + 1:]]
    kinds = _block_kinds(human, len(blocks)) if len(texts) == len(blocks) else None
    if kinds is None and any(b.get("ragcache_kind") for b in texts):
        kinds = [{"kind": b.get("ragcache_kind"), "id": b.get("id")} for b in texts]
    # the final turn for PromptLayout.from_messages (the one rule for unmarked text): trailing volatile
    # turns first, then the blocks (typed where a record or a mark says their kind)
    final: list[Any] = [Segment("volatile", t) for t in trailing_volatile]
    if kinds is not None:
        for b, k in zip(texts, kinds, strict=True):
            kind, text = k.get("kind") or "question", str(b.get("text", ""))
            if kind in ("document", "volatile", "question"):  # a RagPrompt record names the document's own id
                doc_id = k["document"].get("id") if isinstance(k.get("document"), Mapping) else k.get("id")
                final.append(marked_block(text, kind, doc_id))
            else:
                extra.setdefault("other_text", []).append({"kind": kind, "text": text})
        if not any(isinstance(b, Segment) and b.kind == "question" and b.text.strip() for b in final):
            return exact_request(whole)
    elif not any(str(b.get("text", "")).strip() for b in texts):
        return exact_request(whole)
    else:
        final += [str(b.get("text", "")) for b in texts]
    # documents a retriever tool returned as artifacts: in the partition by identity too, so
    # invalidate(document) reaches answers built on tool results
    final += [as_document(d) for m in msgs if m.type == "tool" for d in _document_artifact(m)]
    layout = PromptLayout.from_messages([*({"role": "system", "content": s} for s in systems), *history,
                                         {"role": "user", "content": final}])
    if kinds is None:
        split = split_turn(layout.question, extractor)
        if split is None:
            return exact_request(whole)
        q, template = split
        if template != _SENTINEL:
            extra["template"] = template
        layout = layout.with_question(q)
    else:
        q = layout.question
    return KeyedRequest(q, layout, extra)


def key_text(prompt: str, *, extractor: QuestionExtractor | None = None) -> KeyedRequest:
    """Key a completion LLM's prompt: a labelled question (or ``extractor``'s) with the rest of the
    text in the partition; otherwise the whole prompt, exactly. A completion prompt is never
    embedded whole: it carries its instructions and context with the question."""
    split = split_turn(prompt, extractor) if (extractor is not None or labelled_question(prompt)) else None
    if split is None:
        return exact_request(prompt)
    q, template = split
    return KeyedRequest(q, PromptLayout.build(question=q, lint="off"), {"template": template, "completion": True})


# ------------------------------------------------------------------------------ the model
_CHAT_DEFAULTS: dict[str, Any] = {"top_p": 1.0, "seed": None, "stop": None, "default_stop": None,
                                  "tool_choice": None, "tenant": None}
_IDENTITY_KEYS = ("_type", "model_name", "model_fingerprint", "tools", "blend_setting")


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


def model_identity(llm_string: str) -> tuple[str, dict[str, Any], list[dict[str, Any]]]:
    """``(model, params, tools)`` of LangChain's ``llm_string`` for the partition.

    For :class:`~langchain_ragcache.ChatRagCache`: ``model = "local:<weights fingerprint>"``,
    ``params = {"temperature", "max_tokens"}`` plus any other option not at its default (a ``tenant``
    other than the default one among them, so answers stay per tenant), and the bound tools: what
    :class:`ragcache.RagCache` puts in its partition for a ``LocalBackend``.
    For other models: ``("langchain", {"llm_string": llm_string}, [])`` (every parameter exact).
    """
    try:
        pairs = ast.literal_eval(llm_string) if llm_string.startswith("[") else None
        d = dict(pairs) if isinstance(pairs, list) else None
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        d = None
    if not d or d.get("_type") != "ragcache-local" or not d.get("model_fingerprint"):
        return "langchain", {"llm_string": llm_string}, []
    params: dict[str, Any] = {"temperature": float(d.get("temperature", 0.0)), "max_tokens": int(d["max_tokens"])}
    for k in sorted(d):
        v = d[k]
        if k in _IDENTITY_KEYS or k in params or v in ([], ()) or (k in _CHAT_DEFAULTS and _CHAT_DEFAULTS[k] == v):
            continue
        if k == "tenant" and v == DEFAULT_TENANT:  # the default tenant, however it is named
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


SAMPLING_BY_DEFAULT = frozenset({
    "openai-chat", "azure-openai-chat", "anthropic-chat", "chat-ollama", "ollama-chat", "mistralai-chat",
    "groq-chat", "chat-google-generative-ai", "fireworks-chat", "together-chat", "deepseek-chat", "xai-chat",
    "chat-bedrock-converse", "amazon_bedrock_converse_chat", "openai", "anthropic-llm"})
"""LangChain ``_type``s of models whose API samples when the temperature is unset (OpenAI and Anthropic at
1.0, Ollama at 0.8, ...): an unset temperature on them is a sampled request."""


def sampling_of(llm_string: str) -> Sampling:
    """The :class:`ragcache.answering.Sampling` of a LangChain call: its ``temperature``, ``seed`` and ``n``.

    An unset temperature means the model's default: greedy for :class:`~langchain_ragcache.ChatRagCache`
    (0) and for models ragcache does not know (fakes, custom models that report no temperature), and
    sampling (1.0) for the provider models in :data:`SAMPLING_BY_DEFAULT`. A temperature that cannot
    be read counts as sampling."""
    from ragcache.answering import UNSET_TEMPERATURE, Sampling

    p = llm_params(llm_string)
    local = p.get("_type") not in SAMPLING_BY_DEFAULT
    t, seed, n = p.get("temperature"), p.get("seed"), p.get("n", 1)
    if t is not None and (isinstance(t, bool) or not isinstance(t, int | float) or not t >= 0):
        t = 1.0
    n = n if isinstance(n, int) and not isinstance(n, bool) and n >= 1 else 1
    seed = seed if isinstance(seed, int) and not isinstance(seed, bool) else None
    return Sampling(None if t is None else float(t), seed, n,
                    unset_temperature=UNSET_TEMPERATURE["local" if local else "openai"])


__all__ = ["EXACT_QUESTION", "KeyedRequest", "blend_setting_of", "MAX_QUESTION_CHARS", "QuestionExtractor", "exact_request",
           "history_entry", "key_messages", "key_text", "labelled_question", "llm_params", "model_identity",
           "SAMPLING_BY_DEFAULT", "sampling_of", "split_turn"]
