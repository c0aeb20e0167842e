"""Periodic jobs on the service's event loop (APScheduler 3, `AsyncIOScheduler`) — the only module importing APScheduler.

One job per configured cluster (handlers/drift.py supplies what it runs), on a cron expression or an
interval (default hourly), with jitter so clusters and replicas do not all fire at once. Each firing
first asks `should_run()` — leader election passes `elector.is_leader`, so only one replica reports —
and skips quietly when it says no. A job never overlaps itself (`max_instances=1`); missed firings
are coalesced into one.

Tests drive it without waiting: the clock that places the first run is injectable, `run_now(job_id)`
runs a job through the same gate as a firing, and `job(job_id)` exposes APScheduler's job (its trigger,
`next_run_time`, and `modify(next_run_time=…)` to make APScheduler fire it at once).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Any, Awaitable, Callable, Sequence

from apscheduler.job import Job
from apscheduler.schedulers.asyncio import AsyncIOScheduler
from apscheduler.triggers.base import BaseTrigger
from apscheduler.triggers.cron import CronTrigger
from apscheduler.triggers.interval import IntervalTrigger

log = logging.getLogger(__name__)

DEFAULT_INTERVAL = 3600  # seconds: hourly
DEFAULT_JITTER = 300  # seconds added at random to each firing
FIRST_RUN_DELAY = 60.0  # an interval job's first run, after start (a restart should not wait a whole interval)
MISFIRE_GRACE = 600  # seconds a late firing (a busy loop, a suspended process) still runs


def utcnow() -> datetime:
    return datetime.now(timezone.utc)


class ScheduleError(ValueError):
    """A schedule that cannot be used (bad cron expression, non-positive interval)."""


@dataclass(frozen=True)
class Schedule:
    """When a job fires: `cron` (5 fields, UTC) or every `interval_seconds`; plus up to `jitter` seconds."""

    cron: str | None = None
    interval_seconds: int | None = None
    jitter: int = DEFAULT_JITTER

    def validate(self) -> "Schedule":
        if self.cron is not None and self.interval_seconds is not None:
            raise ScheduleError("give either a cron `schedule` or `interval_seconds`, not both")
        if self.interval_seconds is not None and self.interval_seconds <= 0:
            raise ScheduleError("`interval_seconds` must be positive")
        if self.jitter < 0:
            raise ScheduleError("`jitter` must not be negative")
        if self.cron is not None:
            try:
                CronTrigger.from_crontab(self.cron, timezone=timezone.utc)
            except ValueError as exc:
                raise ScheduleError(f"`schedule` {self.cron!r} is not a 5-field cron expression: {exc}") from None
        return self

    def describe(self) -> str:
        base = f"cron {self.cron!r} (UTC)" if self.cron is not None else f"every {self.interval_seconds or DEFAULT_INTERVAL}s"
        return base + (f", jitter {self.jitter}s" if self.jitter else "")


def build_trigger(schedule: Schedule, *, start: datetime | None = None) -> BaseTrigger:
    """The APScheduler trigger of a schedule; an interval's first firing is at `start` (default: one interval from now)."""
    schedule.validate()
    jitter = schedule.jitter or None
    if schedule.cron is not None:
        fields = schedule.cron.split()
        return CronTrigger(
            minute=fields[0], hour=fields[1], day=fields[2], month=fields[3], day_of_week=fields[4],
            timezone=timezone.utc, jitter=jitter,
        )
    return IntervalTrigger(seconds=schedule.interval_seconds or DEFAULT_INTERVAL, start_date=start, timezone=timezone.utc, jitter=jitter)


@dataclass(frozen=True)
class ScheduledJob:
    """A coroutine to run on a schedule."""

    id: str
    schedule: Schedule
    run: Callable[[], Awaitable[Any]]


class DriftScheduler:
    """The service's periodic jobs; `start()` on the running loop (app startup), `shutdown()` on cleanup."""

    def __init__(
        self,
        jobs: Sequence[ScheduledJob],
        *,
        should_run: Callable[[], bool] | None = None,
        clock: Callable[[], datetime] = utcnow,
        first_run_delay: float = FIRST_RUN_DELAY,
    ) -> None:
        self.jobs = {job.id: job for job in jobs}
        self.should_run: Callable[[], bool] = should_run or (lambda: True)
        self.clock = clock
        self.first_run_delay = first_run_delay
        self.runs: dict[str, int] = dict.fromkeys(self.jobs, 0)  # completed runs per job
        self.skipped: dict[str, int] = dict.fromkeys(self.jobs, 0)  # firings should_run() declined
        self._scheduler: AsyncIOScheduler | None = None

    @property
    def running(self) -> bool:
        return self._scheduler is not None and self._scheduler.running

    def start(self) -> None:
        """Add every job and start (must be called with the service's loop running)."""
        if self.running or not self.jobs:
            return
        scheduler = AsyncIOScheduler(timezone=timezone.utc)
        first = self.clock() + timedelta(seconds=self.first_run_delay)
        for job in self.jobs.values():
            scheduler.add_job(
                self._fire,
                trigger=build_trigger(job.schedule, start=first),
                args=[job.id],
                id=job.id,
                name=job.id,
                max_instances=1,
                coalesce=True,
                misfire_grace_time=MISFIRE_GRACE,
            )
        scheduler.start()
        self._scheduler = scheduler
        for job in self.jobs.values():
            log.info("scheduled %s: %s, next at %s", job.id, job.schedule.describe(), self.job(job.id).next_run_time)

    def shutdown(self) -> None:
        """Stop firing (a running job is left to finish on the loop)."""
        if self._scheduler is not None and self._scheduler.running:
            self._scheduler.shutdown(wait=False)
        self._scheduler = None

    def job(self, job_id: str) -> Job:
        """APScheduler's job (trigger, next_run_time, modify) — only while started."""
        if self._scheduler is None:
            raise RuntimeError("the scheduler is not started")
        found = self._scheduler.get_job(job_id)
        if found is None:
            raise KeyError(job_id)
        return found

    async def run_now(self, job_id: str) -> bool:
        """Run a job now, through the same `should_run` gate as a scheduled firing; False when skipped."""
        if job_id not in self.jobs:
            raise KeyError(job_id)
        return await self._fire(job_id)

    async def _fire(self, job_id: str) -> bool:
        try:
            allowed = bool(self.should_run())
        except Exception:  # an elector that cannot tell: do not run (another replica may be the leader)
            log.exception("should_run() failed; skipping %s", job_id)
            allowed = False
        if not allowed:
            self.skipped[job_id] += 1
            log.debug("skipping %s: should_run() is False (not the leader)", job_id)
            return False
        try:
            await self.jobs[job_id].run()
        except Exception:  # logged, never propagated into APScheduler's executor
            log.exception("scheduled job %s failed", job_id)
        finally:
            self.runs[job_id] += 1
        return True
