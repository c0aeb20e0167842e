"""A precheck's runs on the service's queue: one per PR and cluster, claimed first when there are several replicas,
its running state written at once, its final state written again until GitHub takes it.

The service's generic queue (bot/service/runs.py's RunQueue) calls `PrecheckRuns.run`; from there every call goes
down, to `Precheck` (handlers/precheck.py) and to the protocols this module and handlers/context.py own.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass, field
from functools import partial
from typing import Awaitable, Callable, Protocol

from bot.engine.core.errors import InfraError
from bot.engine.chatops.jobs import JobKey, PrecheckKey, PrecheckPlan, Submitted
from bot.engine.chatops.settings import Backoff
from handlers.context import Claims, LabelledCounter
from handlers.precheck import (
    OPERATIONS, STOPPED_THE_CHECKER, DesiredState, Precheck, error_state, interrupted_description, running_state, status_context,
)

log = logging.getLogger(__name__)

RELEASE_TIMEOUT = 5.0  # a shutting-down replica gives marking a run interrupted (or releasing its claim) this long


class RunSlots(Protocol):
    """The queue the runs go on (bot/service/runs.py's RunQueue): one current version per key."""

    @property
    def depth(self) -> int: ...

    def submit(self, key: JobKey, version: str, job: Callable[[], Awaitable[object]]) -> Submitted: ...

    def running(self, key: JobKey, version: str) -> bool: ...

    def is_current(self, key: JobKey, version: str) -> bool: ...


class Observed(Protocol):
    """One labelled child of a histogram."""

    def observe(self, amount: float) -> None: ...


class Histogram(Protocol):
    """A histogram with labels (prometheus_client's `Histogram`)."""

    def labels(self, *labels: str) -> Observed: ...


class Gauge(Protocol):
    """A gauge (prometheus_client's `Gauge`)."""

    def set(self, value: float) -> None: ...


class RunCounters(Protocol):
    """What the runs count: runs by cluster and verdict, their duration, the queue's depth."""

    @property
    def runs(self) -> LabelledCounter: ...

    @property
    def run_seconds(self) -> Histogram: ...

    @property
    def queue_depth(self) -> Gauge: ...


@dataclass
class PrecheckRuns:
    """Schedules prechecks on the queue (claimed first when there are several replicas) and writes their final states."""

    precheck: Precheck
    queue: RunSlots
    metrics: RunCounters
    claims: Claims | None = None  # several replicas: claim each run on GitHub first (bot/service/claims.py)
    final_retry: float = 5.0  # first wait before writing again a final state GitHub refused (see engine.chatops.settings.Backoff)
    _claimed: dict[tuple[PrecheckKey, str], asyncio.Task[bool]] = field(default_factory=dict, repr=False)  # the task writing a run's running state
    _finalising: dict[PrecheckKey, asyncio.Task[None]] = field(default_factory=dict, repr=False)  # the task writing a refused final state again

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
