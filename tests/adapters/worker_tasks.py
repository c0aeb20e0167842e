"""Module-level tasks for tests/adapters/test_workers.py: a worker imports them by reference (light imports only)."""

from __future__ import annotations

import os
import time
from typing import Any

_KEPT: list[bytes] = []  # memory a task leaves behind in its worker (idle-RSS recycling)


class NeedsTwoArguments(Exception):
    """An exception whose __init__ cannot be rebuilt from its args (it does not survive pickling)."""

    def __init__(self, first: str, second: str) -> None:
        super().__init__(f"{first}/{second}")


def echo(value: Any) -> Any:
    """The value back, and this worker's pid."""
    return value, os.getpid()


def raise_lookup(key: str) -> None:
    raise KeyError(key)


def raise_unrebuildable() -> None:
    raise NeedsTwoArguments("a", "b")


def return_unpicklable() -> Any:
    return lambda: None


def sleep_then_pid(seconds: float) -> int:
    time.sleep(seconds)
    return os.getpid()


def allocate(total: int, hold: float) -> int:
    """Touch `total` bytes in 32 MiB chunks, then hold them for `hold` seconds."""
    chunks = [b"\x01" * (32 * 2**20) for _ in range(total // (32 * 2**20))]
    time.sleep(hold)
    return len(chunks)


def keep(size: int) -> int:
    """Leave `size` touched bytes in the worker after the task returns."""
    _KEPT.append(b"\x01" * size)
    return os.getpid()
