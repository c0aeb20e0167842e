"""RunQueue, the dispatcher: supersede, coalesce, bounded workers and queue, typed keys, waiting for a run."""

from __future__ import annotations

import asyncio
import threading

from bot.engine.chatops.jobs import DriftKey, FixTierOrderKey, PrecheckKey, TierOrderKey
from bot.service.runs import RunQueue, Submitted


def gated(gate: asyncio.Event, ran: list[str]):
    """A job factory: each job waits for `gate`, then records its name in `ran`."""

    def job(name: str):
        async def run() -> None:
            await gate.wait()
            ran.append(name)
        return run

    return job


async def test_newer_sha_cancels_older_run() -> None:
    queue = RunQueue(workers=2, max_queued=10)
    started, finished = [], []

    def job(name: str, seconds: float):
        async def run() -> None:
            started.append(name)
            await asyncio.sleep(seconds)
            finished.append(name)
        return run

    key = PrecheckKey("o/r", 1, "prod")
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

    job = gated(gate, ran)

    assert queue.submit(PrecheckKey("o/r", 1, "prod"), "a" * 40, job("p1")) == Submitted.STARTED
    assert queue.submit(PrecheckKey("o/r", 1, "prod"), "a" * 40, job("p1-dup")) == Submitted.COALESCED
    assert queue.submit(PrecheckKey("o/r", 1, "dev"), "a" * 40, job("d1")) == Submitted.STARTED
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

    results = [queue.submit(PrecheckKey("o/r", n, "prod"), "a" * 40, run) for n in range(4)]
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

    queue.submit(PrecheckKey("o/r", 1, "prod"), "a" * 40, run)
    queue.submit(PrecheckKey("o/r", 2, "prod"), "a" * 40, run)
    await asyncio.sleep(0.01)
    assert queue.depth == 1
    queue.submit(PrecheckKey("o/r", 2, "prod"), "b" * 40, run)  # supersedes the waiting one
    await asyncio.sleep(0.01)
    assert queue.depth == 1
    block.set()
    await queue.drain(timeout=2)
    assert queue.depth == 0


async def test_keys_of_different_jobs_never_meet() -> None:
    """A tier order run no longer borrows a precheck key (PR 0, or a comment id in the PR slot)."""
    queue = RunQueue(workers=4, max_queued=10)
    gate = asyncio.Event()

    async def run() -> None:
        await gate.wait()

    keys = [PrecheckKey("o/r", 0, "tier-order"), TierOrderKey("o/r"), FixTierOrderKey("o/r", 0), DriftKey("o/r", "tier-order")]
    assert [queue.submit(key, "a" * 40, run) for key in keys] == [Submitted.STARTED] * 4
    assert [str(key) for key in keys] == ["precheck o/r#0 tier-order", "tier-order o/r", "fix-tier-order o/r comment 0", "drift:o/r:tier-order"]
    gate.set()
    await queue.drain(timeout=2)


async def test_run_waits_for_the_run_and_joins_one_still_going() -> None:
    queue = RunQueue(workers=1, max_queued=1)
    gate = asyncio.Event()
    ran: list[str] = []

    job = gated(gate, ran)

    first = asyncio.ensure_future(queue.run(DriftKey("o/r", "prod"), "scheduled", job("first")))
    await asyncio.sleep(0.01)
    second = asyncio.ensure_future(queue.run(DriftKey("o/r", "prod"), "scheduled", job("second")))  # a firing while it runs
    await asyncio.sleep(0.01)
    assert not first.done() and not second.done()
    gate.set()
    assert await first == Submitted.STARTED and await second == Submitted.COALESCED
    assert ran == ["first"]


async def test_run_with_a_full_queue_returns_at_once() -> None:
    queue = RunQueue(workers=1, max_queued=1)
    gate = asyncio.Event()

    async def run() -> None:
        await gate.wait()

    assert queue.submit(PrecheckKey("o/r", 1, "prod"), "a" * 40, run) == Submitted.STARTED
    await asyncio.sleep(0.01)  # it has the worker
    assert queue.submit(PrecheckKey("o/r", 2, "prod"), "a" * 40, run) == Submitted.STARTED  # it waits: the queue is full now
    assert await asyncio.wait_for(queue.run(DriftKey("o/r", "prod"), "scheduled", run), 2) == Submitted.QUEUE_FULL
    gate.set()
    await queue.drain(timeout=2)


async def test_the_idle_hook_runs_once_the_last_run_is_over() -> None:
    """The heap's release (bot/service/app.py passes session.release_idle_memory): after the last of overlapping runs
    only, in a thread, and each run is over (its job returned) before it."""
    calls: list[tuple[str, list[str]]] = []
    gate = asyncio.Event()
    ran: list[str] = []
    queue = RunQueue(workers=2, max_queued=10, idle=lambda: calls.append((threading.current_thread().name, list(ran))))
    job = gated(gate, ran)
    queue.submit(PrecheckKey("o/r", 1, "prod"), "a" * 40, job("one"))
    queue.submit(PrecheckKey("o/r", 2, "prod"), "a" * 40, job("two"))
    gate.set()
    await queue.drain(timeout=2)
    assert len(calls) == 1 and calls[0][0] != threading.main_thread().name and sorted(calls[0][1]) == ["one", "two"]
    queue.submit(PrecheckKey("o/r", 3, "prod"), "a" * 40, job("three"))
    await queue.drain(timeout=2)
    assert len(calls) == 2
