"""Argument checks shared by the semantic caches (embedded :class:`~ragcache.semantic.SemanticCache`
and :class:`~ragcache.semantic.pg_cache.PgSemanticCache`): one rule and one message per argument,
applied before anything is read or written."""

from __future__ import annotations

import json
import math
import numbers
import os
from collections.abc import Mapping
from typing import Any

from ragcache.limits import THRESHOLD_FLOOR, low_threshold_message
from ragcache.semantic.partition import DEFAULT_PARTITION, PartitionKey

DEFAULT_THRESHOLD = 0.94
"""Cosine gate of a cache that decides with the guards alone (an embedder the learned verifier was
not fitted for, or a custom :class:`~ragcache.semantic.decision.guards.GuardSet`), calibrated on real user
questions: the lowest threshold at which the guarded decision reached precision >= 0.90 on the
QQP development sample (1,000 Quora pairs) while keeping precision 1.00 on the project's
development pairs. It is the default decision (``guards=True``); with the learned verifier
(``guards="verifier"``, or a ``ragcache calibrate semantic`` record) the gate is the verifier head's
``floor`` instead; see the README's semantic benchmark table."""



def checked_partition(partition: PartitionKey | None) -> PartitionKey:
    """``partition`` itself, or the default partition for ``None``.

    Raises:
        TypeError: not a :class:`PartitionKey` (build one with ``partition_key(...)``).
    """
    if partition is None:
        return DEFAULT_PARTITION
    if not isinstance(partition, PartitionKey):
        raise TypeError(f"partition must be a PartitionKey from ragcache.semantic.partition_key(...), "
                         f"got {type(partition).__name__} {partition!r:.60}")
    return partition


class LowThresholdWarning(UserWarning):
    """A semantic cache threshold below :data:`~ragcache.limits.THRESHOLD_FLOOR`: answers to other questions may be served."""


def warn_low_threshold(t: float) -> None:
    """Warn (:class:`LowThresholdWarning`, attributed to the caller's line) when ``t`` is below
    :data:`~ragcache.limits.THRESHOLD_FLOOR`: the library's rule (the CLI refuses such a threshold instead)."""
    msg = low_threshold_message(t)
    if msg is not None:
        from ragcache.prompt.volatile import warn_at_caller

        warn_at_caller(f"{msg}; use {THRESHOLD_FLOOR:g} or more", LowThresholdWarning)


def check_threshold(t: Any) -> float:
    """A cosine threshold in [-1, 1] (1.0 = exact only), as float.

    Raises:
        TypeError: not a real number (a bool, a str); ValueError: outside [-1, 1] or NaN.
    """
    if isinstance(t, bool) or not isinstance(t, numbers.Real):
        raise TypeError(f"threshold must be a cosine similarity in [-1, 1] (1.0 = exact only), a number; "
                        f"got {type(t).__name__} {t!r:.40}")
    if not -1.0 <= float(t) <= 1.0:
        raise ValueError(f"threshold must be a cosine similarity in [-1, 1] (1.0 = exact only); got {t!r}")
    return float(t)


def check_path(name: str, v: Any) -> Any:
    """``None`` or a non-empty ``str`` / ``os.PathLike`` (returned as given); anything else is refused
    before a file or folder is made from it (``path=123`` must not create ``./123``).

    Raises:
        TypeError: neither a str nor a path; ValueError: an empty or blank str.
    """
    if v is None or isinstance(v, os.PathLike) or (isinstance(v, str) and v.strip()):
        return v
    raise (ValueError if isinstance(v, str) else TypeError)(f"{name} must be a folder path (str or pathlib.Path) or None for memory only; got "
                     f"{type(v).__name__} {v!r:.60}")


def check_count(name: str, v: Any) -> int:
    """An integer >= 1 (int or NumPy int), as int.

    Raises:
        TypeError: not an integer (a bool, 1.5, NaN, a str); ValueError: < 1.
    """
    if isinstance(v, bool) or not hasattr(type(v), "__index__"):
        raise TypeError(f"{name} must be an integer >= 1, got {type(v).__name__} {v!r:.40}")
    if int(v) < 1:
        raise ValueError(f"{name} must be >= 1, got {v!r}")
    return int(v)


def check_flag(name: str, v: Any) -> bool:
    """A ``bool`` (``True`` / ``False``), returned as is; ``"yes"`` or ``1`` are refused rather than read
    as true.

    Raises:
        TypeError: not a bool.
    """
    if not isinstance(v, bool):
        raise TypeError(f"{name} must be True or False, got {type(v).__name__} {v!r:.40}")
    return v


def check_ttl(ttl_s: Any, *, name: str = "ttl_s") -> float | None:
    """``None`` (no expiry) or a number of seconds > 0.

    Raises:
        TypeError: not a real number; ValueError: <= 0, NaN or inf.
    """
    if ttl_s is None:
        return None
    if isinstance(ttl_s, bool) or not isinstance(ttl_s, numbers.Real):
        raise TypeError(f"{name} must be > 0 seconds or None (a number), got {type(ttl_s).__name__} {ttl_s!r:.40}")
    if not 0 < ttl_s < math.inf:
        raise ValueError(f"{name} must be > 0 seconds or None (finite), got {ttl_s!r}")
    return float(ttl_s)


def check_metadata(metadata: Any) -> dict[str, Any]:
    """A JSON-like dict (``None`` is ``{}``), copied; anything else is refused before a write."""
    if metadata is None:
        return {}
    if not isinstance(metadata, Mapping):
        raise TypeError(f"metadata must be a dict (JSON-like values) or None, got {type(metadata).__name__}")
    meta = dict(metadata)
    try:
        json.dumps(meta, ensure_ascii=False, allow_nan=False)
    except TypeError as e:
        raise TypeError(f"metadata must be JSON-like (str, finite numbers, bools, None, lists, dicts with str "
                        f"keys): {e}") from None
    except ValueError as e:
        raise ValueError(f"metadata must be JSON-like (str, finite numbers, bools, None, lists, dicts with str "
                         f"keys): {e}") from None
    return meta
