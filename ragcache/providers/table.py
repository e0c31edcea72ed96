"""The provider table: one row (:class:`~ragcache.providers.spec.Provider`) per provider, and the lookups
every reader uses instead of branching on a provider's name.

A provider's usage becomes ragcache's record through its row (:func:`usage_of`,
:meth:`~ragcache.providers.spec.Provider.usage_of`); the backends and servers read their own rows; LangChain looks a model up by its ``_llm_type`` or class
(:func:`for_langchain`) and reads a native end reason with :func:`finish_spellings`; LlamaIndex looks an
LLM up by its class (:func:`for_llama_index`). A provider the table does not know gets :data:`UNKNOWN`:
no usage dialect (usage unknown), no finish reasons (every native value ``incomplete``: not stored),
greedy when no temperature is given (as a fake or custom model that reports none), no prompt cache
addressed.

Adding a provider (docs/design/architecture.md, "Adding a provider"): a module under
:mod:`ragcache.providers` that declares its row, and the row in :data:`PROVIDERS`; a provider from
outside the package calls :func:`register`.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

from ragcache.backend import CacheUsage, FinishReason
from ragcache.providers.anthropic.provider import ANTHROPIC
from ragcache.providers.hosted import HOSTED
from ragcache.providers.local import LOCAL
from ragcache.providers.openai.provider import OPENAI
from ragcache.providers.spec import Provider

PROVIDERS: tuple[Provider, ...] = (ANTHROPIC, OPENAI, LOCAL, *HOSTED)
"""The rows ragcache ships, in lookup order (the first row naming a LangChain type or LlamaIndex class wins)."""

UNKNOWN = Provider(name="unknown", usage=None, finish_reasons={}, finish_field=None, unset_temperature=0.0,
                   prompt_caching="none")
"""The row of a provider the table does not know: usage unknown (zeros), every end reason ``incomplete``
(never stored unless the entry point allows it), an unset temperature greedy (0.0: fakes and custom models
that report no temperature, as before the table), plain text blocks."""

BEST_EFFORT = OPENAI
"""The reading of a response from a provider the table does not know, where an integration reads one at
best effort (the LlamaIndex backend over any other LLM): the OpenAI-compatible dialects, which most
servers speak."""

_rows: dict[str, Provider] = {p.name: p for p in PROVIDERS}
_spellings: Mapping[str, FinishReason] | None = None


def provider(name: str | None) -> Provider:
    """The row named ``name`` (a backend's :attr:`~ragcache.backend.Backend.name`), else :data:`UNKNOWN`."""
    return _rows.get(name, UNKNOWN) if isinstance(name, str) else UNKNOWN


def usage_of(name: str | None, usage: Any, *, cost_usd: float | None = None,
             uncached_cost_usd: float | None = None) -> CacheUsage:
    """A provider's native usage (SDK object, its dict, or ``None``) as :class:`~ragcache.backend.CacheUsage`,
    by the usage dialect of the row named ``name`` (:meth:`~ragcache.providers.spec.Provider.usage_of`). A
    provider the table does not know, or one without a dialect: unknown usage, all zeros."""
    return provider(name).usage_of(usage, cost_usd=cost_usd, uncached_cost_usd=uncached_cost_usd)


def rows() -> tuple[Provider, ...]:
    """Every registered row, shipped ones first, then :func:`register`'s in order."""
    return tuple(_rows.values())


def register(row: Provider) -> Provider:
    """Add a provider's row to the table (a provider that lives outside :mod:`ragcache.providers`).

    Raises:
        TypeError: ``row`` is not a :class:`~ragcache.providers.spec.Provider`.
        ValueError: the name is taken (pick another, or :func:`unregister` the old row first), or one of
            its end-reason spellings means something else in another row (LangChain reads a native end
            reason without knowing the provider, so one spelling has one meaning).
    """
    global _spellings
    if not isinstance(row, Provider):
        raise TypeError(f"register takes a ragcache.providers.spec.Provider, got {type(row).__name__}")
    if row.name in _rows:
        raise ValueError(f"a provider named {row.name!r} is already in the table; pick another name "
                         "or unregister it first")
    _union([*_rows.values(), row])  # raises on a spelling with two meanings
    _rows[row.name] = row
    _spellings = None
    return row


def unregister(name: str) -> None:
    """Remove a registered row (a shipped row cannot be removed).

    Raises:
        ValueError: ``name`` is a shipped row or not in the table."""
    global _spellings
    if name in {p.name for p in PROVIDERS} or name not in _rows:
        raise ValueError(f"{name!r} is not a registered provider (the shipped rows stay)")
    del _rows[name]
    _spellings = None


def finish_spellings() -> Mapping[str, FinishReason]:
    """Every row's native end reasons, lower-cased, in ragcache's words (read-only): how a reader that
    does not know the provider (LangChain's ``finish_reason_of``) reads a native value. Not listed:
    ``incomplete``."""
    global _spellings
    if _spellings is None:
        _spellings = MappingProxyType(_union(_rows.values()))
    return _spellings


def for_langchain(model: Any = None, *, llm_type: str | None = None) -> Provider:
    """The row of a LangChain model: by its ``_llm_type`` (``model._llm_type``, or ``llm_type`` when
    only the type is known, as in a cache's ``llm_string``), else by its class name; else :data:`UNKNOWN`."""
    t = llm_type if llm_type is not None else getattr(model, "_llm_type", None) if model is not None else None
    cls = type(model).__name__ if model is not None else None
    for p in _rows.values():
        if (isinstance(t, str) and t in p.langchain_types) or (cls is not None and cls in p.langchain_classes):
            return p
    return UNKNOWN


def for_llama_index(llm: Any) -> Provider:
    """The row of a LlamaIndex LLM: the first whose :attr:`~ragcache.providers.spec.Provider.llama_index_classes`
    the LLM is an instance of (a class whose package is not installed matches nothing), else :data:`UNKNOWN`."""
    for p in _rows.values():
        if any(isinstance(llm, c) for c in _classes(p.llama_index_classes)):
            return p
    return UNKNOWN


def _classes(paths: tuple[str, ...]) -> list[type]:
    import importlib

    out = []
    for path in paths:
        module, _, name = path.partition(":")
        try:
            cls = getattr(importlib.import_module(module), name, None)
        except ImportError:  # the framework's optional package is not installed
            continue
        if isinstance(cls, type):
            out.append(cls)
    return out


def _union(rows: Any) -> dict[str, FinishReason]:
    out: dict[str, FinishReason] = {}
    owner: dict[str, str] = {}
    for p in rows:
        for native, word in p.finish_reasons.items():
            k = native.lower()
            if out.get(k, word) != word:
                raise ValueError(f"end reason {native!r} means {word!r} for provider {p.name!r} but {out[k]!r} for "
                                 f"{owner[k]!r}: one spelling has one meaning across the table")
            out.setdefault(k, word)
            owner.setdefault(k, p.name)
    return out


__all__ = ["BEST_EFFORT", "PROVIDERS", "UNKNOWN", "finish_spellings", "for_langchain", "for_llama_index", "provider",
           "register", "rows", "unregister", "usage_of"]
