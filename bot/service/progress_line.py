"""The CLI's progress line: on a terminal, once a run passes two seconds, its counts updated in place, cleared at the end."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TextIO

from bot.pipeline.progress import Progress

DELAY_SECONDS = 2.0  # a quick run prints nothing: a line that flashes by is noise
INTERVAL_SECONDS = 0.25
_CLEAR = "\r\x1b[K"


def _is_terminal(stream: TextIO) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False


@contextmanager
def progress_line(progress: Progress | None, stream: TextIO, *, delay: float = DELAY_SECONDS, interval: float = INTERVAL_SECONDS) -> Iterator[None]:
    """Show `progress` on `stream` while the block runs, if it is a terminal; nothing is left on it afterwards."""
    if progress is None or not _is_terminal(stream):
        yield
        return
    done = threading.Event()
    shown = threading.Event()
    lock = threading.Lock()

    def show() -> None:
        if done.wait(delay):
            return
        while True:
            with lock:
                if done.is_set():
                    return
                stream.write(_CLEAR + progress.view().line())
                stream.flush()
                shown.set()
            if done.wait(interval):
                return

    thread = threading.Thread(target=show, name="progress", daemon=True)
    thread.start()
    try:
        yield
    finally:
        with lock:
            done.set()
            if shown.is_set():
                stream.write(_CLEAR)
                stream.flush()
        thread.join(timeout=1)
