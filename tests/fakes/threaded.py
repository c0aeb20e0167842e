"""Serve an async fake from a daemon thread with its own event loop (for synchronous clients in tests)."""

from __future__ import annotations

import asyncio
import contextlib
import threading
from typing import Awaitable, Callable, Iterator


@contextlib.contextmanager
def serve_in_thread(start: Callable[[], Awaitable[object]], stop: Callable[[], Awaitable[object]], url: Callable[[], str], name: str) -> Iterator[str]:
    """Run `start()` on a new loop in a thread, yield `url()`, and `stop()` it on exit."""
    loop = asyncio.new_event_loop()
    ready = threading.Event()
    failure: list[BaseException] = []

    def run() -> None:
        asyncio.set_event_loop(loop)
        try:
            loop.run_until_complete(start())
        except BaseException as exc:  # pragma: no cover - surfaced below
            failure.append(exc)
            ready.set()
            loop.close()
            return
        ready.set()
        loop.run_forever()
        loop.run_until_complete(loop.shutdown_asyncgens())
        loop.close()

    thread = threading.Thread(target=run, name=name, daemon=True)
    thread.start()
    ready.wait(10)
    if failure:
        raise failure[0]
    try:
        yield url()
    finally:
        asyncio.run_coroutine_threadsafe(stop(), loop).result(10)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)
