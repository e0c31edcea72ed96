"""The one sync-to-async bridge: a blocking iterator (the engine's token stream) consumed from asyncio.

Forward passes are blocking CPU/GPU work, so an async caller (a Starlette server, LangChain's
``astream``, LlamaIndex's ``astream_chat``) must run them off the event loop. This module runs the
iterator in a worker thread and hands its items to the loop; when the consumer stops early (it
breaks out, or its task is cancelled) the worker closes the iterator at its next item, which
releases whatever the iterator holds (the engine's lock) within one decode step.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator, Callable, Iterator
from typing import TypeVar

T = TypeVar("T")
_DONE = object()


async def iterate_in_thread(make: Callable[[], Iterator[T]], *, name: str = "ragcache-stream") -> AsyncIterator[T]:
    """Yield the items of ``make()`` (called in a worker thread) without blocking the event loop.

    Args:
        make: builds the blocking iterator; called once, in the worker thread.
        name: the worker thread's name (shows in debuggers and ``threading.enumerate()``).

    Raises:
        Whatever ``make()`` or the iterator raises, re-raised in the consumer at that point.

    Cancellation: when the consumer leaves early (``break``, ``aclose()``, task cancelled), the
    worker stops before producing another item and closes the iterator (``GeneratorExit`` at
    its current ``yield``). Items already produced are dropped.
    """
    loop = asyncio.get_running_loop()
    queue: asyncio.Queue[tuple[object, BaseException | None]] = asyncio.Queue()
    cancel = threading.Event()

    def put(item: object, exc: BaseException | None = None) -> None:
        try:
            loop.call_soon_threadsafe(queue.put_nowait, (item, exc))
        except RuntimeError:  # the loop closed while the worker ran: nobody is listening
            cancel.set()

    def work() -> None:
        it = None
        try:
            it = make()
            for item in it:
                if cancel.is_set():
                    break
                put(item)
        except BaseException as e:  # noqa: BLE001 - handed to the consumer
            put(_DONE, e)
            return
        finally:
            close = getattr(it, "close", None)
            if close is not None:
                close()
        put(_DONE)

    worker = threading.Thread(target=work, daemon=True, name=name)
    worker.start()
    try:
        while True:
            item, exc = await queue.get()
            if exc is not None:
                raise exc
            if item is _DONE:
                return
            yield item  # type: ignore[misc]
    finally:
        cancel.set()


__all__ = ["iterate_in_thread"]
