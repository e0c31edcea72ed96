"""Provider clients: pipeline backends that call a hosted model through its SDK.

* :mod:`ragcache.providers.anthropic`: Anthropic prompt caching, client side (request blocks,
  breakpoints, pricing, usage, the SDK backend).
* :mod:`ragcache.providers.openai`: any OpenAI-compatible chat-completions server.

The servers ragcache runs itself (Anthropic- and OpenAI-compatible endpoints over the local
engine, the caching proxy) are :mod:`ragcache.server`.
"""
