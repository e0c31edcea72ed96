"""A caller that hangs up stops its generation: the local servers' non-streamed routes.

A streamed response notices a client that went away (``sse-starlette`` cancels the event generator,
which closes the engine's stream within one decode step). A non-streamed route reads the engine's
stream to its end before it answers, and nothing told it the client had gone: the generation ran to
``max_tokens`` and held the engine while the next caller waited. :func:`while_connected` reads the
stream and the connection together: when the ASGI server reports ``http.disconnect`` the engine's
stream is closed (:func:`ragcache.aio.iterate_in_thread` stops at its next decode step) and
:class:`ClientGone` is raised, which the route turns into a response nobody reads.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator
from typing import Any, TypeVar

T = TypeVar("T")
log = logging.getLogger(__name__)


class ClientGone(Exception):
    """The client closed the connection before its answer was ready."""


async def _disconnected(receive: Any) -> None:
    """Return when the ASGI ``receive`` reports ``http.disconnect`` (the request body is already read)."""
    while True:
        message = await receive()
        if message.get("type") == "http.disconnect":
            return


async def while_connected(request: Any, events: AsyncIterator[T]) -> AsyncIterator[T]:
    """Yield ``events`` while the client of ``request`` (a Starlette request whose body was read) is connected.

    Raises:
        ClientGone: the client disconnected; ``events`` is closed first (the engine stops within a decode
            step: its worker thread checks between tokens).
    """
    gone = asyncio.ensure_future(_disconnected(request.receive))
    try:
        while True:
            step = asyncio.ensure_future(anext(events))  # type: ignore[arg-type]
            done, _ = await asyncio.wait({step, gone}, return_when=asyncio.FIRST_COMPLETED)
            if step in done:
                try:
                    item = step.result()
                except StopAsyncIteration:
                    return
                yield item
                continue
            step.cancel()
            with contextlib.suppress(asyncio.CancelledError, StopAsyncIteration, Exception):
                await step
            log.info("client disconnected before its answer was ready: generation stopped")
            raise ClientGone
    finally:
        gone.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await gone
        with contextlib.suppress(RuntimeError):
            await events.aclose()  # type: ignore[attr-defined]


__all__ = ["ClientGone", "while_connected"]
