"""Counter records: one base for the running totals ragcache keeps (semantic lookups, prefix blocks,
chunk-store reads, provider tokens), so the hit rate and the JSON form are written once."""

from __future__ import annotations

from dataclasses import fields
from typing import Any, ClassVar


class Counters:
    """Mixin of the counter records (``@dataclass(slots=True)`` subclasses): :attr:`hit_rate` and
    :meth:`to_dict`.

    A record says what its rate divides and what its dict shows besides its fields:

    - ``RATE = (part, whole)``: attribute names; ``hit_rate = part / whole`` (0.0 while ``whole`` is 0);
      ``whole`` may name a property, or be a tuple of attributes that are summed.
    - ``SHOWN``: ``(name, after)`` pairs: derived values (properties) the dict shows, each after the field
      ``after`` (``None``: at the end), in this order; ``HIDDEN``: fields it leaves out.
    """

    __slots__ = ()
    RATE: ClassVar[tuple[str, str | tuple[str, ...]]] = ("hits", "lookups")
    SHOWN: ClassVar[tuple[tuple[str, str | None], ...]] = (("hit_rate", None),)
    HIDDEN: ClassVar[frozenset[str]] = frozenset()

    @property
    def hit_rate(self) -> float:
        """``part / whole`` of :attr:`RATE`, in [0, 1] (0.0 before the first count)."""
        part, whole = self.RATE
        total = sum(getattr(self, w) for w in whole) if isinstance(whole, tuple) else getattr(self, whole)
        return getattr(self, part) / total if total else 0.0

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready: every field but :attr:`HIDDEN` in declaration order (dicts copied), with the
        :attr:`SHOWN` derived values each after its field, then those shown at the end."""
        out: dict[str, Any] = {}
        for f in fields(self):  # type: ignore[arg-type]  # subclasses are dataclasses
            if f.name not in self.HIDDEN:
                v = getattr(self, f.name)
                out[f.name] = dict(v) if isinstance(v, dict) else v
            out.update({k: getattr(self, k) for k, after in self.SHOWN if after == f.name})
        out.update({k: getattr(self, k) for k, after in self.SHOWN if after is None})
        return out
