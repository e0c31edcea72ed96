"""Local servers over the engine: an Anthropic-compatible ``/v1/messages`` server with the
provider's prompt-caching rules (:mod:`.anthropic`, :mod:`.cache_rules`). Needs the
``anthropic`` extra (starlette, uvicorn)."""
