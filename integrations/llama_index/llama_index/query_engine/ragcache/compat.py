"""Compatibility of ``llama-index-llms-anthropic`` with the ``anthropic`` SDK 2.x.

Two breaks, each fixed only when detected (nothing changes with an SDK that works):

1. ``llama-index-llms-anthropic`` (0.12.3 and earlier) builds each message with
   ``MessageParam(role=..., content=...)``. In ``anthropic`` 2.x ``MessageParam`` (and
   ``BetaMessageParam``) is a ``typing.Union`` of TypedDicts; calling it raises
   ``TypeError: Cannot instantiate typing.Union`` before any request is sent. A TypedDict
   call only ever built a plain dict, so the names in ``llama_index.llms.anthropic.utils``
   are replaced with ``dict``: the same request bodies.
2. ``Anthropic`` always passes ``temperature=`` to ``messages.create``, which 2.x no
   longer declares (``TypeError: unexpected keyword argument``). ``Anthropic._get_all_kwargs``
   is wrapped so that arguments the installed SDK does not declare travel in
   ``extra_body`` (:func:`ragcache.anthropic.backend.sdk_kwargs`): the same JSON body.
"""

from __future__ import annotations

import inspect
import logging
import typing
from typing import Any

log = logging.getLogger(__name__)


def _fix_message_params(utils: Any) -> bool:
    patched = False
    for name in ("MessageParam", "BetaMessageParam"):
        if typing.get_origin(getattr(utils, name, None)) is typing.Union:
            setattr(utils, name, dict)
            patched = True
    return patched


def _fix_undeclared_kwargs(anthropic_llm_cls: Any) -> bool:
    if getattr(anthropic_llm_cls._get_all_kwargs, "_ragcache_compat", False):
        return False
    from anthropic.resources.messages import Messages

    if "temperature" in inspect.signature(Messages.create).parameters:
        return False
    from ragcache.anthropic.backend import sdk_kwargs

    original = anthropic_llm_cls._get_all_kwargs

    def _get_all_kwargs(self: Any, **kwargs: Any) -> dict[str, Any]:
        return sdk_kwargs(Messages.create, original(self, **kwargs))

    _get_all_kwargs._ragcache_compat = True  # type: ignore[attr-defined]
    anthropic_llm_cls._get_all_kwargs = _get_all_kwargs
    return True


def ensure_anthropic_sdk_compat() -> bool:
    """Apply the fixes above where needed; returns whether anything was changed.

    Idempotent; a no-op without ``llama-index-llms-anthropic``.
    """
    try:
        from llama_index.llms.anthropic import Anthropic, utils
    except ImportError:
        return False
    patched = _fix_message_params(utils)
    patched = _fix_undeclared_kwargs(Anthropic) or patched
    if patched:
        log.warning("ragcache: adapted llama-index-llms-anthropic to the installed anthropic SDK 2.x "
                    "(MessageParam is a Union; temperature moves to extra_body); request bodies are unchanged")
    return patched
