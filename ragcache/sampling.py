"""Sampled answers: what a request's temperature, seed and choices let a cache do with it.

A request that samples without a seed asks for a fresh draw: "regenerate", best-of-n and repeated
evaluation samples are independent draws, so replaying one stored sample to all of them changes what
the caller asked for. :func:`fresh_draw` is the one rule every entry point applies (through
:class:`ragcache.answering.AnswerPath`), the rule the proxy always had: a fresh draw unless the caller
opts in (``cache_sampled=True``), never one stored sample for several choices, and seeded or
temperature-0 requests cached as usual.
"""

from __future__ import annotations

from dataclasses import dataclass
from types import MappingProxyType
from typing import Any


def __getattr__(name: str) -> Any:
    """``UNSET_TEMPERATURE``, kept for code written before the provider table: ``{backend name: what a
    request without a temperature means}`` read from the table's rows
    (:attr:`ragcache.providers.spec.Provider.unset_temperature`; read-only). The Anthropic Messages API and
    OpenAI-compatible APIs sample at 1.0 (their documented default); ragcache's local engine,
    ``ChatRagCache``, ``RagCacheLLM`` and ``RagCache`` decode greedily (0.0)."""
    if name == "UNSET_TEMPERATURE":
        from ragcache.providers.table import rows

        return MappingProxyType({p.name: p.unset_temperature for p in rows()})
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


@dataclass(frozen=True, slots=True)
class Sampling:
    """How a request draws its answer: what the replay rule (:func:`fresh_draw`) reads.

    Attributes:
        temperature: the request's temperature, ``None`` when unset (then ``unset_temperature``).
        seed: the sampling seed (``None``: none); a seeded draw repeats, so it may be replayed.
        n: how many choices the request asks for (OpenAI / LangChain ``n``); > 1 is never one stored sample.
        unset_temperature: what an unset temperature means for the backend (its provider row's
            :attr:`~ragcache.providers.spec.Provider.unset_temperature`).

    Raises:
        ValueError: a negative or NaN temperature, ``n`` < 1.
    """

    temperature: float | None = 0.0
    seed: int | None = None
    n: int = 1
    unset_temperature: float = 1.0

    def __post_init__(self) -> None:
        t = self.temperature
        if t is not None and (isinstance(t, bool) or not isinstance(t, int | float) or not t >= 0):
            raise ValueError(f"temperature must be a number >= 0 or None (unset), got {t!r}")
        if isinstance(self.n, bool) or not isinstance(self.n, int) or self.n < 1:
            raise ValueError(f"n (choices) must be an integer >= 1, got {self.n!r}")

    @property
    def samples(self) -> bool:
        """Whether the draw is random: temperature (or the backend's default for an unset one) above 0."""
        return (self.unset_temperature if self.temperature is None else self.temperature) > 0

    @property
    def unseeded(self) -> bool:
        """A random draw that does not repeat: it samples and has no seed."""
        return self.samples and self.seed is None


def fresh_draw(sampling: Sampling | None, *, cache_sampled: bool = False) -> str | None:
    """Why a request must be answered by a fresh call, neither looked up nor stored, or ``None`` (it may be
    served a stored answer and its answer stored). The one replay rule of every entry point:

    - several choices (``n > 1``): never one stored sample, opt-in or not;
    - a draw that samples without a seed (:attr:`Sampling.unseeded`): fresh, unless ``cache_sampled``;
    - anything else (``sampling=None``, temperature 0, seeded): may be served and stored.

    Raises:
        TypeError: ``sampling`` not a :class:`Sampling` or ``None``."""
    if sampling is None:
        return None
    if not isinstance(sampling, Sampling):
        raise TypeError(f"sampling must be a ragcache.sampling.Sampling or None, got {type(sampling).__name__}")
    if sampling.n > 1:
        return f"{sampling.n} choices asked: one stored sample never answers them"
    if sampling.unseeded and not cache_sampled:
        t = "unset (the backend samples)" if sampling.temperature is None else f"{sampling.temperature:g}"
        return f"sampled (temperature {t}) without a seed: a fresh draw (cache_sampled=True replays one)"
    return None


__all__ = ["Sampling", "fresh_draw"]
