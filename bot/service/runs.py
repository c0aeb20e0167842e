"""Runs keyed by (repo, PR, cluster): the newest head SHA wins, older runs are cancelled, a bounded pool runs them."""

from __future__ import annotations

import asyncio
import enum
from dataclasses import dataclass
from typing import Awaitable, Callable

RunKey = tuple[str, int, str]  # (owner/repo, PR number, cluster)


class Submitted(str, enum.Enum):
    """What became of a submitted run."""

    STARTED = "started"
    SUPERSEDED = "superseded"  # started, and an older run for the key was cancelled
    COALESCED = "coalesced"  # the same SHA is already queued or running
    QUEUE_FULL = "queue-full"


@dataclass
class _Run:
    sha: str
    task: asyncio.Task[None]


class RunQueue:
    """At most `workers` runs at once and `max_queued` waiting; one current run per key."""

    def __init__(self, workers: int, max_queued: int) -> None:
        self._slots = asyncio.Semaphore(workers)
        self._max_queued = max_queued
        self._runs: dict[RunKey, _Run] = {}
        self._waiting = 0

    @property
    def depth(self) -> int:
        """Runs waiting for a worker."""
        return self._waiting

    @property
    def active(self) -> int:
        return sum(1 for r in self._runs.values() if not r.task.done())

    def running(self, key: RunKey, sha: str) -> bool:
        """Whether a run for `key` at `sha` is queued or running now."""
        run = self._runs.get(key)
        return run is not None and run.sha == sha and not run.task.done()

    def is_current(self, key: RunKey, sha: str) -> bool:
        """Whether `sha` is still the newest run for `key` (an old SHA must never overwrite a newer result)."""
        run = self._runs.get(key)
        return run is not None and run.sha == sha

    def submit(self, key: RunKey, sha: str, job: Callable[[], Awaitable[None]]) -> Submitted:
        """Start `job` for `key` at `sha`, cancelling an older SHA's run for the same key."""
        current = self._runs.get(key)
        if current is not None and current.sha == sha and not current.task.done():
            return Submitted.COALESCED
        if self._waiting >= self._max_queued:
            return Submitted.QUEUE_FULL
        superseded = current is not None and not current.task.done()
        if superseded:
            current.task.cancel()
        self._waiting += 1
        task = asyncio.get_running_loop().create_task(self._run(job), name=f"run {key[0]}#{key[1]} {key[2]} {sha[:12]}")
        self._runs[key] = _Run(sha, task)
        return Submitted.SUPERSEDED if superseded else Submitted.STARTED

    async def _run(self, job: Callable[[], Awaitable[None]]) -> None:
        try:
            await self._slots.acquire()
        finally:
            self._waiting -= 1  # also when cancelled while waiting
        try:
            await job()
        finally:
            self._slots.release()

    async def drain(self, timeout: float | None = None) -> None:
        """Wait for every run to finish (tests and graceful shutdown)."""
        tasks = [r.task for r in self._runs.values() if not r.task.done()]
        if tasks:
            await asyncio.wait(tasks, timeout=timeout)

    async def close(self) -> None:
        """Cancel what is still running."""
        for run in self._runs.values():
            run.task.cancel()
        await asyncio.gather(*(r.task for r in self._runs.values()), return_exceptions=True)
