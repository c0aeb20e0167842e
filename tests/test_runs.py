"""RunQueue: supersede, coalesce, bounded workers and queue."""

from __future__ import annotations

import asyncio

from bot.service.runs import RunQueue, Submitted


async def test_newer_sha_cancels_older_run() -> None:
    queue = RunQueue(workers=2, max_queued=10)
    started, finished = [], []

    def job(name: str, seconds: float):
        async def run() -> None:
            started.append(name)
            await asyncio.sleep(seconds)
            finished.append(name)
        return run

    key = ("o/r", 1, "prod")
    assert queue.submit(key, "a" * 40, job("old", 5)) == Submitted.STARTED
    await asyncio.sleep(0.01)
    assert queue.submit(key, "b" * 40, job("new", 0.01)) == Submitted.SUPERSEDED
    assert queue.is_current(key, "b" * 40) and not queue.is_current(key, "a" * 40)
    await queue.drain(timeout=2)
    assert started == ["old", "new"] and finished == ["new"]


async def test_same_sha_coalesces_and_other_keys_run() -> None:
    queue = RunQueue(workers=1, max_queued=10)
    gate = asyncio.Event()
    ran: list[str] = []

    def job(name: str):
        async def run() -> None:
            await gate.wait()
            ran.append(name)
        return run

    assert queue.submit(("o/r", 1, "prod"), "a" * 40, job("p1")) == Submitted.STARTED
    assert queue.submit(("o/r", 1, "prod"), "a" * 40, job("p1-dup")) == Submitted.COALESCED
    assert queue.submit(("o/r", 1, "dev"), "a" * 40, job("d1")) == Submitted.STARTED
    await asyncio.sleep(0.01)
    assert queue.depth == 1 and queue.active == 2  # one worker: dev waits
    gate.set()
    await queue.drain(timeout=2)
    assert sorted(ran) == ["d1", "p1"]
    assert queue.depth == 0


async def test_queue_bound() -> None:
    queue = RunQueue(workers=1, max_queued=2)
    block = asyncio.Event()

    async def run() -> None:
        await block.wait()

    results = [queue.submit(("o/r", n, "prod"), "a" * 40, run) for n in range(4)]
    await asyncio.sleep(0.01)
    assert results[:2] == [Submitted.STARTED, Submitted.STARTED]
    assert Submitted.QUEUE_FULL in results[2:]
    block.set()
    await queue.drain(timeout=2)


async def test_cancel_while_waiting_keeps_depth_right() -> None:
    queue = RunQueue(workers=1, max_queued=10)
    block = asyncio.Event()

    async def run() -> None:
        await block.wait()

    queue.submit(("o/r", 1, "prod"), "a" * 40, run)
    queue.submit(("o/r", 2, "prod"), "a" * 40, run)
    await asyncio.sleep(0.01)
    assert queue.depth == 1
    queue.submit(("o/r", 2, "prod"), "b" * 40, run)  # supersedes the waiting one
    await asyncio.sleep(0.01)
    assert queue.depth == 1
    block.set()
    await queue.drain(timeout=2)
    assert queue.depth == 0
