"""Cache metrics, off by default: Prometheus (``prometheus_client``) or OpenTelemetry (``opentelemetry-api``).

One recorder, :class:`CacheMetrics`, fed with the shared records (:class:`~ragcache.pipeline.Answer`,
:class:`~ragcache.backend.CacheUsage`), so every entry point counts the same way:

==================================== ========= ===================================================
name                                 type      labels / meaning
==================================== ========= ===================================================
``ragcache_requests_total``          counter   ``layer``: which layer served (semantic, prefix,
                                               chunk, prefix+chunk, model, provider-cache, provider)
``ragcache_semantic_lookups_total``  counter   ``outcome``: hit | miss
``ragcache_tokens_total``            counter   ``kind``: prompt, reused, computed, recomputed,
                                               cache_read, cache_write, completion
``ragcache_cost_usd_total``          counter   ``kind``: actual | uncached (provider requests)
``ragcache_ttft_seconds``            histogram ``layer``; seconds to the first token
``ragcache_semantic_lookup_seconds`` histogram seconds per semantic lookup
==================================== ========= ===================================================

``prometheus``: a private registry; :meth:`CacheMetrics.render` gives the text exposition format
(``ragcache serve`` serves it on ``GET /metrics``). ``otel``: instruments on the global
``MeterProvider`` (meter ``ragcache``); install and configure an OpenTelemetry SDK and exporter to
ship them, otherwise the API's no-op provider drops them. ``off``: every call is a no-op.
"""

from __future__ import annotations

from typing import Any

from ragcache.backend import CacheUsage

MODES = ("off", "prometheus", "otel")
_BUCKETS = (0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
_TOKEN_KINDS = ("prompt_tokens", "reused", "computed", "recomputed", "cache_read", "cache_write", "completion_tokens")


class CacheMetrics:
    """Records requests, lookups, tokens, cost and latency.

    Args:
        mode: ``off``, ``prometheus`` or ``otel``.

    Raises:
        ValueError: unknown mode.
        ImportError: the package for the mode is missing (the message names the extra).
    """

    def __init__(self, mode: str = "off") -> None:
        if mode not in MODES:
            raise ValueError(f"metrics mode must be one of {', '.join(MODES)}, got {mode!r}")
        self.mode = mode
        self.registry: Any = None
        if mode == "prometheus":
            try:
                from prometheus_client import CollectorRegistry, Counter, Histogram
            except ImportError as e:
                raise ImportError("Prometheus metrics need prometheus_client: pip install 'ragcache[metrics]'") from e
            r = self.registry = CollectorRegistry()
            self._requests = Counter("ragcache_requests", "Requests by the layer that served them", ["layer"], registry=r)
            self._lookups = Counter("ragcache_semantic_lookups", "Semantic cache lookups", ["outcome"], registry=r)
            self._tokens = Counter("ragcache_tokens", "Prompt and completion tokens by kind", ["kind"], registry=r)
            self._cost = Counter("ragcache_cost_usd", "Provider cost in USD (actual and without caching)", ["kind"],
                                 registry=r)
            self._ttft = Histogram("ragcache_ttft_seconds", "Seconds to the first token", ["layer"], buckets=_BUCKETS,
                                   registry=r)
            self._lookup_s = Histogram("ragcache_semantic_lookup_seconds", "Seconds per semantic lookup",
                                       buckets=_BUCKETS, registry=r)
        elif mode == "otel":
            try:
                from opentelemetry import metrics as otel
            except ImportError as e:
                raise ImportError("OpenTelemetry metrics need opentelemetry-api: pip install 'ragcache[metrics]'") from e
            m = otel.get_meter("ragcache")
            self._o_requests = m.create_counter("ragcache_requests_total", description="Requests by serving layer")
            self._o_lookups = m.create_counter("ragcache_semantic_lookups_total", description="Semantic lookups")
            self._o_tokens = m.create_counter("ragcache_tokens_total", unit="{token}", description="Tokens by kind")
            self._o_cost = m.create_counter("ragcache_cost_usd_total", unit="USD", description="Provider cost")
            self._o_ttft = m.create_histogram("ragcache_ttft_seconds", unit="s", description="Seconds to first token")
            self._o_lookup_s = m.create_histogram("ragcache_semantic_lookup_seconds", unit="s",
                                                  description="Seconds per semantic lookup")

    @property
    def enabled(self) -> bool:
        return self.mode != "off"

    def lookup(self, seconds: float, hit: bool) -> None:
        """One semantic lookup that took ``seconds``."""
        outcome = "hit" if hit else "miss"
        if self.mode == "prometheus":
            self._lookups.labels(outcome).inc()
            self._lookup_s.observe(seconds)
        elif self.mode == "otel":
            self._o_lookups.add(1, {"outcome": outcome})
            self._o_lookup_s.record(seconds)

    def request(self, layer: str, usage: CacheUsage | None = None, ttft_s: float | None = None) -> None:
        """One answered request: the layer that served it, its :class:`~ragcache.backend.CacheUsage`
        (``None`` for none) and its TTFT in seconds.

        Raises:
            TypeError: with metrics on, ``usage`` not a ``CacheUsage`` (map a provider's usage with its row's
                ``usage_of``, :mod:`ragcache.providers.table`).
        """
        if self.mode == "off":
            return
        counts: dict[str, int] = {}
        costs: dict[str, float | None] = {}
        if usage is not None:
            if not isinstance(usage, CacheUsage):
                raise TypeError(f"usage must be a ragcache CacheUsage or None, got {type(usage).__name__}: map a "
                                "provider's usage with ragcache.providers.table.usage_of(provider, usage)")
            fields = usage.to_dict()
            counts = {k: int(fields[k]) for k in _TOKEN_KINDS}
            costs = {"actual": usage.cost_usd, "uncached": usage.uncached_cost_usd}
        if self.mode == "prometheus":
            self._requests.labels(layer).inc()
            for k, n in counts.items():
                if n:
                    self._tokens.labels(k.removesuffix("_tokens")).inc(n)
            for k, c in costs.items():
                if c:
                    self._cost.labels(k).inc(c)
            if ttft_s is not None:
                self._ttft.labels(layer).observe(ttft_s)
        else:
            self._o_requests.add(1, {"layer": layer})
            for k, n in counts.items():
                if n:
                    self._o_tokens.add(n, {"kind": k.removesuffix("_tokens")})
            for k, c in costs.items():
                if c:
                    self._o_cost.add(c, {"kind": k})
            if ttft_s is not None:
                self._o_ttft.record(ttft_s, {"layer": layer})

    def answer(self, answer: Any) -> None:
        """Record a :class:`~ragcache.pipeline.Answer` (its layer, usage and TTFT)."""
        self.request(answer.layer, answer.usage, answer.ttft_s)

    def render(self) -> bytes:
        """Prometheus text exposition of the counters (empty unless ``mode == 'prometheus'``)."""
        if self.mode != "prometheus":
            return b""
        from prometheus_client import generate_latest

        return generate_latest(self.registry)


CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
"""Content type of :meth:`CacheMetrics.render`."""

__all__ = ["CONTENT_TYPE", "CacheMetrics", "MODES"]
