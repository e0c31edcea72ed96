"""Argument checks shared by the semantic caches (embedded :class:`~ragcache.semantic.SemanticCache`
and :class:`~ragcache.semantic.pg_cache.PgSemanticCache`): one rule and one message per argument,
applied before anything is read or written."""

from __future__ import annotations

import json
import math
import numbers
from collections.abc import Mapping
from typing import Any


def check_threshold(t: Any) -> float:
    """A cosine threshold in [-1, 1] (1.0 = exact only), as float; NaN, non-numbers refused."""
    if isinstance(t, bool) or not isinstance(t, numbers.Real) or not -1.0 <= float(t) <= 1.0:
        raise ValueError(f"threshold must be a cosine similarity in [-1, 1] (1.0 = exact only); got {t!r}")
    return float(t)


def check_count(name: str, v: Any) -> int:
    """An integer >= 1 (int or NumPy int; not a bool, 1.5 or NaN), as int."""
    if isinstance(v, bool) or not hasattr(type(v), "__index__"):
        raise ValueError(f"{name} must be an integer >= 1, got {v!r}")
    if int(v) < 1:
        raise ValueError(f"{name} must be >= 1, got {v!r}")
    return int(v)


def check_ttl(ttl_s: Any, *, name: str = "ttl_s") -> float | None:
    """``None`` (no expiry) or a number of seconds > 0 (NaN and inf refused)."""
    if ttl_s is None:
        return None
    if isinstance(ttl_s, bool) or not isinstance(ttl_s, numbers.Real) or not 0 < ttl_s < math.inf:
        raise ValueError(f"{name} must be > 0 seconds or None (finite), got {ttl_s!r}")
    return float(ttl_s)


def check_metadata(metadata: Any) -> dict[str, Any]:
    """A JSON-like dict (``None`` is ``{}``), copied; anything else is refused before a write."""
    if metadata is None:
        return {}
    if not isinstance(metadata, Mapping):
        raise ValueError(f"metadata must be a dict (JSON-like values) or None, got {type(metadata).__name__}")
    meta = dict(metadata)
    try:
        json.dumps(meta, ensure_ascii=False, allow_nan=False)
    except (TypeError, ValueError) as e:
        raise ValueError(f"metadata must be JSON-like (str, finite numbers, bools, None, lists, dicts with str "
                         f"keys): {e}") from None
    return meta
