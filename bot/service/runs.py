"""The dispatcher: runs keyed by typed job keys (the newest version wins, older runs are cancelled, a bounded pool
runs them). What a precheck run does on it (claims, running state, final writes) is handlers/precheck_runs.py's."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Awaitable, Callable

from bot.engine.chatops.jobs import JobKey, Submitted

__all__ = ["RunQueue", "Submitted"]


@dataclass
class _Run:
    version: str
    task: asyncio.Task[None]


class RunQueue:
    """At most `workers` runs at once and `max_queued` waiting; one current run per key."""

    def __init__(self, workers: int, max_queued: int, *, idle: Callable[[], object] | None = None) -> None:
        self._slots = asyncio.Semaphore(workers)
        self._idle = idle  # called in a thread when a run ends and no other is queued or running (the heap's release)
        self._max_queued = max_queued
        self._runs: dict[JobKey, _Run] = {}
        self._waiting = 0
        self._stopped = False

    @property
    def depth(self) -> int:
        """Runs waiting for a worker."""
        return self._waiting

    @property
    def active(self) -> int:
        return sum(1 for r in self._runs.values() if not r.task.done())

    def running(self, key: JobKey, version: str) -> bool:
        """Whether a run for `key` at `version` is queued or running now."""
        run = self._runs.get(key)
        return run is not None and run.version == version and not run.task.done()

    def is_current(self, key: JobKey, version: str) -> bool:
        """Whether `version` is still the newest run for `key` (an old SHA must never overwrite a newer result)."""
        run = self._runs.get(key)
        return run is not None and run.version == version

    def submit(self, key: JobKey, version: str, job: Callable[[], Awaitable[object]]) -> Submitted:
        """Start `job` for `key` at `version` (a head SHA, a pushed commit), cancelling an older version's run for the same key."""
        current = self._runs.get(key)
        if current is not None and current.version == version and not current.task.done():
            return Submitted.COALESCED
        if self._waiting >= self._max_queued or self._stopped:
            return Submitted.QUEUE_FULL
        superseded = current is not None and not current.task.done()
        if current is not None and superseded:
            current.task.cancel()
        self._waiting += 1
        task = asyncio.get_running_loop().create_task(self._run(job), name=f"run {key} {version[:12]}")
        self._runs[key] = _Run(version, task)
        return Submitted.SUPERSEDED if superseded else Submitted.STARTED

    async def run(self, key: JobKey, version: str, job: Callable[[], Awaitable[object]]) -> Submitted:
        """Submit `job` and wait until the key's current run ends (a scheduled firing is done when its run is)."""
        submitted = self.submit(key, version, job)
        if submitted != Submitted.QUEUE_FULL:
            await asyncio.wait([self._runs[key].task])  # waiting is cancelled with the caller, the run is not
        return submitted

    async def _run(self, job: Callable[[], Awaitable[object]]) -> None:
        try:
            await self._slots.acquire()
        finally:
            self._waiting -= 1  # also when cancelled while waiting
        try:
            await job()
        finally:
            self._slots.release()
            if self._idle is not None and not self._stopped and self.active <= 1:  # 1: this run's own task
                await asyncio.to_thread(self._idle)  # its result is dropped by now; the run's task ends after it

    async def drain(self, timeout: float | None = None) -> None:
        """Wait for every run to finish (tests and graceful shutdown)."""
        tasks = [r.task for r in self._runs.values() if not r.task.done()]
        if tasks:
            await asyncio.wait(tasks, timeout=timeout)

    def stop(self) -> None:
        """Shutting down: cancel every run now and refuse new ones (synchronously: no run resumes with a result after this)."""
        self._stopped = True
        for run in self._runs.values():
            run.task.cancel()

    async def close(self) -> None:
        """Cancel what is still running."""
        self.stop()
        await asyncio.gather(*(r.task for r in self._runs.values()), return_exceptions=True)
