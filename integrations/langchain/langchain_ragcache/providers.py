"""LangChain models in ragcache's provider table (:mod:`ragcache.providers.table`): the one place this
package asks what a model's provider does, so no module here branches on a provider's name.

A model's row is found by its ``_llm_type`` or class name (:func:`ragcache.providers.table.for_langchain`);
the rest of the package reads the row's columns: the unset temperature (:func:`langchain_ragcache._keys.sampling_of`),
the native end reasons (:data:`langchain_ragcache.results.FINISH_REASONS`) and, here, the prompt caching.
"""

from __future__ import annotations

from typing import Any

from langchain_core.language_models import BaseChatModel

from ragcache.providers.table import for_langchain


def takes_breakpoints(model: Any) -> bool:
    """Whether ``cache_control`` breakpoints should be placed for ``model``: a chat model (breakpoints ride
    on its messages' content blocks; a completion LLM takes one string) whose provider row caches by
    breakpoints (``ChatAnthropic``)."""
    return isinstance(model, BaseChatModel) and for_langchain(model).prompt_caching == "breakpoints"


__all__ = ["takes_breakpoints"]
