"""Local servers over the engine, on one Starlette app (:mod:`.app`): an Anthropic-compatible
``/v1/messages`` server with the provider's prompt-caching rules (:mod:`.anthropic`,
:mod:`.cache_rules`) and OpenAI-compatible ``/v1/chat/completions`` and ``/v1/models``
(:mod:`.openai`). Needs starlette and uvicorn (the ``anthropic`` or ``openai`` extra)."""
