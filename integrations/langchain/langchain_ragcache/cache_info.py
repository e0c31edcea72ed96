"""Keep ragcache's record of which layer answered past an output parser.

``StrOutputParser`` turns the chat model's ``AIMessage`` into its text, and with it drops
``response_metadata["ragcache"]`` (layer, similarity, tokens reused, TTFT). :func:`with_cache_info`
is the step to end a chain with instead: a ``RunnableParallel`` that runs the parser on the
message and, beside it, reads the record::

    chain = RagPrompt() | ChatRagCache() | with_cache_info()
    out = chain.invoke({"question": q, "documents": docs})
    out["answer"]            # the parser's output (text)
    out["cache"]["layer"]    # "semantic", "prefix", "chunk", "model", "provider-cache", ...
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from langchain_core.messages import BaseMessage
from langchain_core.output_parsers import StrOutputParser
from langchain_core.runnables import Runnable, RunnableLambda, RunnableParallel

from langchain_ragcache.results import answer_record, message_result
from ragcache.provenance import Answer


def cache_info(message: Any) -> dict[str, Any]:
    """Which layer answered and its numbers, on every call: a copy of ``message.response_metadata["ragcache"]``
    when a ragcache layer recorded it, else the same keys read from the message itself
    (:func:`~langchain_ragcache.results.message_result`: a plain model's miss under
    ``RagCacheSemanticCache`` is layer ``provider``, or ``provider-cache`` when the provider read its
    prompt cache, with the model's own usage and finish reason; ``incomplete`` for a model that
    reports none, whose answers are not stored).

    Raises:
        TypeError: ``message`` is not a chat message (put this step right after the chat model).
    """
    if not isinstance(message, BaseMessage):
        raise TypeError(f"cache_info reads a chat model's message, got {type(message).__name__}: put "
                        "with_cache_info() right after the chat model, in place of the output parser")
    record = message.response_metadata.get("ragcache")
    if isinstance(record, Mapping):
        return dict(record)
    return answer_record(Answer.of("", message_result(message)))


def with_cache_info(parser: Runnable | None = None) -> Runnable:
    """The step after a chat model that keeps the cache record: ``{"answer": parser(message),
    "cache": cache_info(message)}`` (``parser`` default: ``StrOutputParser()``)."""
    return RunnableParallel(answer=parser or StrOutputParser(), cache=RunnableLambda(cache_info))


__all__ = ["cache_info", "with_cache_info"]
