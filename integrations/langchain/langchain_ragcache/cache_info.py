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


def cache_info(message: Any) -> dict[str, Any] | None:
    """A copy of ``message.response_metadata["ragcache"]``: which layer answered and its numbers;
    ``None`` when no ragcache layer recorded anything (a plain model call without ragcache's cache,
    chat model or layout middleware).

    Raises:
        TypeError: ``message`` is not a chat message (put this step right after the chat model).
    """
    if not isinstance(message, BaseMessage):
        raise TypeError(f"cache_info reads a chat model's message, got {type(message).__name__}: put "
                        "with_cache_info() right after the chat model, in place of the output parser")
    record = message.response_metadata.get("ragcache")
    return dict(record) if isinstance(record, Mapping) else None


def with_cache_info(parser: Runnable | None = None) -> Runnable:
    """The step after a chat model that keeps the cache record: ``{"answer": parser(message),
    "cache": cache_info(message)}`` (``parser`` default: ``StrOutputParser()``)."""
    return RunnableParallel(answer=parser or StrOutputParser(), cache=RunnableLambda(cache_info))


__all__ = ["cache_info", "with_cache_info"]
