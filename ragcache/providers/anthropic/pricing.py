"""Per-model prompt-caching facts: list prices and minimum cacheable prefix lengths.

Both tables are configurable (providers change them): pass ``overrides`` to the
lookups, or mutate a copy of :data:`PRICES` / :data:`MIN_CACHEABLE_TOKENS`.
Model ids are matched by their longest known family prefix, so dated ids such
as ``claude-sonnet-4-5-20250929`` resolve to ``claude-sonnet-4-5``.

Sources: Anthropic's prompt-caching and pricing documentation (minimums per
model family; cache writes cost 1.25x the base input price with the 5-minute
TTL and 2x with the 1-hour TTL; cache reads 0.1x). Families newer than the
table (or unknown ids) fall back to Claude Sonnet 4.6's values, and
:func:`price_for` says so (``exact=False``): add them with ``overrides``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

WRITE_5M_MULTIPLIER = 1.25
WRITE_1H_MULTIPLIER = 2.0
READ_MULTIPLIER = 0.1
DEFAULT_FAMILY = "claude-sonnet-4-6"


@dataclass(frozen=True, slots=True)
class ModelPrice:
    """List prices in USD per million tokens (input and output)."""

    input_per_mtok: float
    output_per_mtok: float


PRICES: dict[str, ModelPrice] = {
    "claude-opus-4-6": ModelPrice(5.0, 25.0),
    "claude-opus-4-5": ModelPrice(5.0, 25.0),
    "claude-opus-4-1": ModelPrice(15.0, 75.0),
    "claude-opus-4": ModelPrice(15.0, 75.0),
    "claude-sonnet-4-6": ModelPrice(3.0, 15.0),
    "claude-sonnet-4-5": ModelPrice(3.0, 15.0),
    "claude-sonnet-4": ModelPrice(3.0, 15.0),
    "claude-3-7-sonnet": ModelPrice(3.0, 15.0),
    "claude-3-5-sonnet": ModelPrice(3.0, 15.0),
    "claude-haiku-4-5": ModelPrice(1.0, 5.0),
    "claude-3-5-haiku": ModelPrice(0.8, 4.0),
    "claude-3-haiku": ModelPrice(0.25, 1.25),
    "claude-3-opus": ModelPrice(15.0, 75.0),
}
"""USD per million tokens by model family."""

MIN_CACHEABLE_TOKENS: dict[str, int] = {
    "claude-opus-4-6": 4096,
    "claude-opus-4-5": 4096,
    "claude-haiku-4-5": 4096,
    "claude-3-5-haiku": 2048,
    "claude-3-haiku": 2048,
    "claude-sonnet-4-6": 1024,
    "claude-opus-4-1": 1024,
    "claude-opus-4": 1024,
    "claude-sonnet-4-5": 1024,
    "claude-sonnet-4": 1024,
    "claude-3-7-sonnet": 1024,
    "claude-3-5-sonnet": 1024,
    "claude-3-opus": 1024,
}
"""Minimum prefix length (tokens) before a breakpoint for it to be cached, by model family."""


def model_family(model: str, table: Mapping[str, object]) -> str | None:
    """The longest key of ``table`` that ``model`` starts with (after ``anthropic/``
    or ``anthropic.`` routing prefixes are removed); None when none matches."""
    name = model.lower().removeprefix("anthropic/").removeprefix("anthropic.")
    hits = [k for k in table if name == k or name.startswith(k + "-") or name.startswith(k + "@")]
    return max(hits, key=len) if hits else None


def min_cacheable_tokens(model: str, overrides: Mapping[str, int] | int | None = None) -> int:
    """Minimum cacheable prefix length in tokens for ``model``.

    ``overrides`` is either one int for every model or a family -> tokens mapping
    consulted before :data:`MIN_CACHEABLE_TOKENS`. Unknown models get the
    ``claude-sonnet-4-6`` value (1024).
    """
    if isinstance(overrides, int):
        if overrides < 0:
            raise ValueError(f"minimum cacheable tokens must be >= 0, got {overrides}")
        return overrides
    table = {**MIN_CACHEABLE_TOKENS, **(overrides or {})}
    fam = model_family(model, table)
    return table[fam] if fam else table[DEFAULT_FAMILY]


def price_for(model: str, overrides: Mapping[str, ModelPrice] | None = None) -> tuple[ModelPrice, bool]:
    """(price, exact): the family's list price, or Claude Sonnet's with ``exact=False``."""
    table = {**PRICES, **(overrides or {})}
    fam = model_family(model, table)
    return (table[fam], True) if fam else (table[DEFAULT_FAMILY], False)


def request_cost(
    price: ModelPrice,
    *,
    input_tokens: int,
    write_5m: int,
    write_1h: int,
    read: int,
    output_tokens: int,
) -> tuple[float, float]:
    """(cost, uncached cost) of one request in USD.

    cost = (input + 1.25*write_5m + 2*write_1h + 0.1*read) * input price + output * output price;
    the uncached cost bills every input token (input + writes + reads) at the input price.
    """
    pin, pout = price.input_per_mtok / 1e6, price.output_per_mtok / 1e6
    cost = (input_tokens + WRITE_5M_MULTIPLIER * write_5m + WRITE_1H_MULTIPLIER * write_1h
            + READ_MULTIPLIER * read) * pin + output_tokens * pout
    uncached = (input_tokens + write_5m + write_1h + read) * pin + output_tokens * pout
    return cost, uncached
