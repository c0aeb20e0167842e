"""The dispatcher: runs keyed by typed job keys (the newest version wins, older runs are cancelled, a bounded pool
runs them), and the precheck runs on it (claims, running state, final state written until GitHub takes it)."""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass, field
from functools import partial
from typing import Awaitable, Callable

from bot.engine.errors import InfraError
from bot.engine.jobs import JobKey, PrecheckKey, PrecheckPlan, Submitted
from bot.engine.settings import Backoff
from bot.service.claims import RELEASE_TIMEOUT, Claims
from bot.service.metrics import Metrics
from handlers.precheck import (
    OPERATIONS, STOPPED_THE_CHECKER, DesiredState, Precheck, error_state, interrupted_description, running_state, status_context,
)

log = logging.getLogger(__name__)

__all__ = ["PrecheckRuns", "RunQueue", "Submitted"]


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


@dataclass
class PrecheckRuns:
    """Schedules prechecks on the queue (claimed first when there are several replicas) and writes their final states."""

    precheck: Precheck
    queue: RunQueue
    metrics: Metrics
    claims: Claims | None = None  # several replicas: claim each run on GitHub first (bot/service/claims.py)
    final_retry: float = 5.0  # first wait before writing again a final state GitHub refused (see engine.settings.Backoff)
    _claimed: dict = field(default_factory=dict, repr=False)  # (key, sha) -> the task writing its running state
    _finalising: dict = field(default_factory=dict, repr=False)  # key -> the task writing a refused final state again

    def schedule(self, plan: PrecheckPlan) -> dict[str, Submitted]:
        """Queue one run per cluster; a newer head SHA cancels an older run of the same PR and cluster.

        The pending status (our claim) and the "running" comment are written at once, not when a
        worker frees up: a run still waiting in the queue then survives this process dying (the
        restart/sweep re-runs pending statuses), and a second replica sees the claim.
        """
        outcome: dict[str, Submitted] = {}
        for cluster in plan.clusters:
            key = PrecheckKey(plan.repo, plan.number, cluster)
            outcome[cluster] = self.queue.submit(key, plan.version, partial(self.run, plan, cluster))
            if outcome[cluster] in (Submitted.STARTED, Submitted.SUPERSEDED):
                retrying = self._finalising.pop(key, None)
                if retrying is not None:
                    retrying.cancel()  # the new run writes its own final state
                for stale in [k for k in self._claimed if k[0] == key and k[1] != plan.version]:
                    self._claimed.pop(stale)  # its run was cancelled; the task itself still finishes
                self._claimed[(key, plan.version)] = asyncio.get_running_loop().create_task(self._claim(plan, cluster))
        self.metrics.queue_depth.set(self.queue.depth)
        return outcome

    async def _claim(self, plan: PrecheckPlan, cluster: str) -> bool:
        """Write the running state (the status is the claim); False when another replica owns this run."""
        running = running_state(plan, cluster)
        current = self.queue.is_current(PrecheckKey(plan.repo, plan.number, cluster), plan.version)
        if self.claims is None:
            # The status belongs to this SHA; the comment only while it is still the newest run.
            await self.precheck.reconcile(plan, cluster, running, skip=() if current else ("comment",))
            return True
        if await self.claims.acquire(plan.repo, plan.head_sha, status_context(cluster), running.status.description, self.precheck.target_url):
            if current:
                await self.precheck.reconcile(plan, cluster, running, skip=("status",))  # the claim is the pending status
            return True
        return False

    async def run(self, plan: PrecheckPlan, cluster: str) -> None:
        """One cluster's run: running state, review (in a worker thread), final state — unless superseded."""
        key = PrecheckKey(plan.repo, plan.number, cluster)
        started = time.monotonic()
        self.metrics.queue_depth.set(self.queue.depth)
        claim = self._claimed.pop((key, plan.version), None)
        if not await (claim if claim is not None else self._claim(plan, cluster)):
            return  # another replica runs this SHA and cluster
        try:
            desired, verdict = await self.precheck.desired(plan, cluster)
        except asyncio.CancelledError:
            if self.queue.is_current(key, plan.version):  # shutting down, not superseded: say it was not this PR's doing
                await self._interrupted(plan, cluster)
            raise
        if not self.queue.is_current(key, plan.version):
            return  # a newer push, or a retarget, owns the comment now
        if self.claims is not None and await self.claims.superseded(plan.repo, plan.number, plan.head_sha):
            return  # a newer push, run by another replica, owns the comment now
        if await self.precheck.retargeted(plan, cluster):
            return  # judged against a base the PR no longer targets: its status is pending now, never this verdict
        failed = await self.precheck.reconcile(plan, cluster, desired)
        if failed:
            self._finalise_later(key, plan, cluster, desired, failed)
        self.metrics.runs.labels(cluster, verdict).inc()
        self.metrics.run_seconds.labels(cluster).observe(time.monotonic() - started)

    @property
    def finalising(self) -> int:
        """Final states GitHub refused that this process is still writing again."""
        return len(self._finalising)

    def busy(self, key: PrecheckKey, version: str) -> bool:
        """Whether this process still works on `key` at `version` (PrecheckPlan.version): queued, running, or writing its final state."""
        return self.queue.running(key, version) or (key in self._finalising and self.queue.is_current(key, version))

    def _finalise_later(self, key: PrecheckKey, plan: PrecheckPlan, cluster: str, desired: DesiredState, failed: tuple[str, ...]) -> None:
        task = asyncio.get_running_loop().create_task(self._finalise(plan, cluster, desired, failed), name=f"finalise {plan.repo}#{plan.number} {cluster}")
        self._finalising[key] = task
        task.add_done_callback(lambda t: self._finalising.pop(key, None) if self._finalising.get(key) is t else None)

    async def _finalise(self, plan: PrecheckPlan, cluster: str, desired: DesiredState, failed: tuple[str, ...]) -> None:
        """Write what GitHub refused (the status, the comment, the check run) again, with backoff, until it is taken.

        A GitHub outage at the final write must not leave the PR pending until some process restarts: this
        replica has the result, so it keeps it until GitHub does. A newer run of the PR and cluster cancels
        this (it writes its own); so does shutdown (the status stays pending: the next start re-runs it).
        """
        backoff, attempt = Backoff(first=self.final_retry), 0
        while failed:
            delay = backoff.delay(attempt)
            log.info("GitHub refused the final %s of %s#%s %s; writing it again in %gs", "/".join(failed), plan.repo, plan.number, cluster, delay)
            await asyncio.sleep(delay)
            failed = await self.precheck.reconcile(plan, cluster, desired, skip=tuple(op for op in OPERATIONS if op not in failed))
            attempt += 1
        log.info("final state of %s#%s %s written", plan.repo, plan.number, cluster)

    async def close(self) -> None:
        """Shutting down: stop writing final states again (what is still pending is re-run by the next start)."""
        tasks = list(self._finalising.values())
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    async def _interrupted(self, plan: PrecheckPlan, cluster: str) -> None:
        """A graceful shutdown mid-run: mark the status, so the next start re-runs it as a plain run, not a crash's."""
        context, description, target_url = status_context(cluster), interrupted_description(cluster), self.precheck.target_url
        if self.claims is not None:
            await self.claims.release(plan.repo, plan.head_sha, context, description, target_url)
            return
        call = asyncio.to_thread(self.precheck.github.set_status, plan.repo, plan.head_sha, context, "pending", description, target_url)
        try:
            await asyncio.wait_for(call, timeout=RELEASE_TIMEOUT)
        except (InfraError, asyncio.TimeoutError) as exc:
            log.warning("could not mark %s#%s %s interrupted: %s", plan.repo, plan.number, cluster, exc or "timed out")

    async def give_up(self, plan: PrecheckPlan, cluster: str) -> None:
        """End a run that stopped the checker twice with `error`, instead of running it into a crash loop."""
        await self.precheck.reconcile(plan, cluster, error_state(cluster, STOPPED_THE_CHECKER.format(cluster=cluster), infrastructure=True))
        self.metrics.runs.labels(cluster, "error").inc()
