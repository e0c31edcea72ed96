"""One request to the local engine: :class:`EngineRequest`, what :meth:`LocalEngine.generate
<ragcache.engine.engine.LocalEngine.generate>`, ``stream`` and ``astream`` run (as vLLM's ``Request``).

The engine's keyword form (``engine.generate(prompt, max_new_tokens=64, tenant="acme")``) builds this
record (:func:`engine_request`); the library's own callers (the local backend, the local servers) build
it themselves.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ragcache.engine.prompt import Prompt
    from ragcache.prompt.layout import PromptLayout

    PromptSource = PromptLayout | Prompt | str | Sequence[Mapping[str, Any]] | Sequence[int]


@dataclass(frozen=True, slots=True)
class EngineRequest:
    """One request to a :class:`~ragcache.engine.engine.LocalEngine`. Its values are checked when the
    engine runs it (the errors below), as the keyword form always did.

    Attributes:
        prompt: what to answer: a :class:`~ragcache.prompt.layout.PromptLayout`, a built
            :class:`~ragcache.engine.prompt.Prompt`, one user turn (str), chat messages or token ids
            (:meth:`~ragcache.engine.engine.LocalEngine.build_prompt`).
        max_new_tokens: decode budget in tokens (an integer >= 1; default 128).
        temperature: 0 for greedy decoding (default); > 0 samples.
        top_p: nucleus sampling mass in (0, 1] (with temperature > 0).
        stop: stop strings (a str or a sequence of str); generation ends before the first one.
        seed: sampling RNG seed (``None``: the global RNG).
        use_prefix_cache: reuse and fill the exact prefix KV cache (default True).
        use_chunk_cache: reuse document KV from the chunk cache (``None``: when the engine has one).
        recompute_ratio: the blend's r, share of reused document tokens recomputed (``None``: the engine's).
        tenant: who the request is for; hashed into its prefix and chunk KV keys (the KV salt,
            :func:`ragcache.engine.keys.kv_salt`), so tenants reuse none of each other's KV unless the
            engine shares it (:func:`ragcache.engine.keys.kv_tenant`). ``None`` / ``"default"``: the
            engine's own KV.
        prefix_limit: reuse at most this many prompt tokens from the prefix cache (``None``: no limit).

    Raises (when run):
        ValueError: ``max_new_tokens`` not an integer >= 1, ``temperature`` < 0, ``top_p`` outside
            (0, 1], ``recompute_ratio`` outside [0, 1], an empty prompt or one longer than the context window.
        TypeError: ``stop`` not a str or a sequence of str; ``tenant`` not a str or ``None``.
    """

    prompt: PromptSource
    max_new_tokens: int = 128
    temperature: float = 0.0
    top_p: float = 1.0
    stop: str | Sequence[str] | None = None
    seed: int | None = None
    use_prefix_cache: bool = True
    use_chunk_cache: bool | None = None
    recompute_ratio: float | None = None
    tenant: str | None = None
    prefix_limit: int | None = None


OPTIONS = tuple(f.name for f in fields(EngineRequest) if f.name != "prompt")
"""The keyword arguments of the engine's keyword form: every :class:`EngineRequest` field but the prompt."""


def renamed_tenant(tenant: str | None, namespace: str | None, where: str, *, stacklevel: int = 3) -> str | None:
    """The request's tenant from ``tenant=`` or the deprecated ``namespace=`` keyword of ``where``
    (``stacklevel``: of the warning, as :func:`warnings.warn`'s, counted from this function).

    Raises:
        TypeError: both given.
    """
    if namespace is None:
        return tenant
    if tenant is not None:
        raise TypeError(f"{where} got both tenant= and namespace=: pass tenant= only (namespace= is its old name)")
    warnings.warn(f"{where}(namespace=...) is deprecated: the request's tenant is tenant=...", DeprecationWarning,
                  stacklevel=stacklevel)
    return namespace


def renamed_salt(salt: str | None, namespace: str | None, where: str, *, stacklevel: int = 3) -> str | None:
    """The KV salt from ``salt=`` or the deprecated ``namespace=`` keyword of ``where`` (the prefix cache's and
    the chunk cache's per-document methods took the salt under that older name; ``stacklevel``: of the warning,
    as :func:`warnings.warn`'s, counted from this function).

    Raises:
        TypeError: both given, or a salt that is not a str or ``None`` (``3`` and ``"3"`` would be two keys).
    """
    if namespace is not None:
        if salt is not None:
            raise TypeError(f"{where} got both salt= and namespace=: pass salt= only (namespace= is its old name)")
        warnings.warn(f"{where}(namespace=...) is deprecated and will be removed in the next release: the KV salt "
                      "is salt=... (the glossary of ragcache's keys: docs/design/keys.md in the repository)",
                      DeprecationWarning, stacklevel=stacklevel)
        salt = namespace
    if salt is not None and not isinstance(salt, str):
        raise TypeError(f"{where}: salt must be a str or None, got {type(salt).__name__} (an engine's salt is "
                        "engine.kv_salt(tenant))")
    return salt


def engine_request(prompt: EngineRequest | PromptSource, options: Mapping[str, Any], where: str, *,
                   stacklevel: int = 4) -> EngineRequest:
    """The :class:`EngineRequest` of the engine's keyword form: ``prompt`` with ``options`` (the
    :data:`OPTIONS`; ``namespace=``, the old name of ``tenant=``, still taken with a
    ``DeprecationWarning``; ``stacklevel`` as in :func:`renamed_tenant`), or ``prompt`` itself when it
    is a request already.

    Raises:
        TypeError: an unknown option, or options given with an :class:`EngineRequest`.
    """
    if isinstance(prompt, EngineRequest):
        if options:
            raise TypeError(f"{where} got an EngineRequest and keyword arguments {sorted(options)}: put them in the "
                            "request (dataclasses.replace(request, ...) makes a changed copy)")
        return prompt
    opts = dict(options)
    if "namespace" in opts:
        opts["tenant"] = renamed_tenant(opts.get("tenant"), opts.pop("namespace"), where,
                                        stacklevel=stacklevel)
    unknown = sorted(set(opts) - set(OPTIONS))
    if unknown:
        raise TypeError(f"{where} got unknown keyword argument(s) {unknown}; its options are {', '.join(OPTIONS)}")
    return EngineRequest(prompt, **opts)


__all__ = ["OPTIONS", "EngineRequest", "engine_request", "renamed_salt", "renamed_tenant"]
