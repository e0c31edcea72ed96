"""The prompt: how ragcache lays out a RAG prompt so that its stable part caches.

:mod:`~ragcache.prompt.layout` (:class:`~ragcache.prompt.layout.PromptLayout`: stable-first order,
cache breakpoints, the volatile-text lint); :mod:`~ragcache.prompt.segments` (the :class:`Segment`
record and the one document normaliser and rendering); :mod:`~ragcache.prompt.volatile` (text that
changes per request: dates, times, ids, counters); :mod:`~ragcache.prompt.chat_turns` (the turns of
chat messages for ``PromptLayout.from_messages``). The public names are exported by :mod:`ragcache`
(``from ragcache import PromptLayout``).
"""
