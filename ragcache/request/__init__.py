"""One request shape for every entry point: :class:`CacheRequest`, and the keyer that builds it.

Every door (``RagCache``, ``ragcache ask``, the LangChain cache, middleware and chat model, the
LlamaIndex query engine, the Anthropic proxy) builds a :class:`CacheRequest` here and answers it with
:class:`ragcache.answering.AnswerPath`; an adapter only maps its native messages to dicts
(:func:`key_messages`). This package is the one place that computes a request's partition
(:func:`cache_request`, over :func:`request_partition`); the question rule is
:mod:`ragcache.request.question`::

    from ragcache.request import key_messages

    keyed = key_messages([{"role": "system", "content": "Be brief."},
                          {"role": "user", "content": ["<document>...</document>", "How do refunds work?"]}])
    req = keyed.request(model="local:ab12...", tenant="acme", params={"temperature": 0.0, "max_tokens": 64},
                        max_tokens=64)
    answer = path.run(req, lambda: backend.generate(req.layout, max_new_tokens=64, temperature=0.0,
                                                    tenant=req.tenant))
"""

from ragcache.request.messages import (
    PROVIDER_MARKERS,
    KeyedPrompt,
    exact_prompt,
    history_entry,
    key_messages,
    key_text,
    marked_block,
)
from ragcache.request.partition import request_partition
from ragcache.request.question import (
    EXACT_QUESTION,
    MAX_QUESTION_CHARS,
    QuestionExtractor,
    labelled_question,
    question_sized,
    split_turn,
)
from ragcache.request.record import CacheRequest, cache_request

__all__ = ["EXACT_QUESTION", "MAX_QUESTION_CHARS", "PROVIDER_MARKERS", "CacheRequest", "KeyedPrompt",
           "QuestionExtractor", "cache_request", "exact_prompt", "history_entry", "key_messages", "key_text",
           "labelled_question", "marked_block", "question_sized", "request_partition", "split_turn"]
