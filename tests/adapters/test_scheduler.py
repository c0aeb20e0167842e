"""The drift scheduler (bot/adapters/scheduler.py) and its service wiring: triggers from the config, the leader gate,
jobs run now (run_now) or fired by APScheduler itself (modify next_run_time), start and stop with the app."""

from __future__ import annotations

import asyncio
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
from aiohttp.test_utils import TestClient, TestServer
from apscheduler.triggers.cron import CronTrigger
from apscheduler.triggers.interval import IntervalTrigger

from bot.engine.core.errors import ConfigError
from bot.adapters.github import GitHubAdapter, GitHubAuth
from bot.adapters.scheduler import DEFAULT_INTERVAL, DriftScheduler, Schedule, ScheduledJob, ScheduleError, build_trigger
from bot.service.app import build_service
from bot.service.settings import ServiceConfig, load_service_config
from bot.engine.chatops.settings import ClusterPolicy, DriftPolicy, RepoPolicy
from bot.service.app import build_drift_scheduler
from handlers.drift import LABEL
from tests.engine.test_drift import INCIDENT, ready
from tests.handlers.test_drift import REPO, World, example, world  # noqa: F401  (fixtures)

FUTURE = datetime(2030, 1, 1, tzinfo=timezone.utc)  # after the real clock: an interval's first run is exactly here


class Calls:
    def __init__(self) -> None:
        self.count = 0
        self.event = asyncio.Event()

    async def __call__(self) -> None:
        self.count += 1
        self.event.set()


# --------------------------------------------------------------------------------------------- triggers


def test_default_schedule_is_hourly_with_jitter() -> None:
    trigger = build_trigger(Schedule(), start=FUTURE)
    assert isinstance(trigger, IntervalTrigger)
    assert trigger.interval == timedelta(seconds=DEFAULT_INTERVAL) and trigger.jitter == 300
    first = trigger.get_next_fire_time(None, FUTURE - timedelta(minutes=5))
    assert FUTURE <= first <= FUTURE + timedelta(seconds=300)


def test_interval_schedule() -> None:
    trigger = build_trigger(Schedule(interval_seconds=900, jitter=0), start=FUTURE)
    assert trigger.interval == timedelta(minutes=15) and trigger.jitter is None
    assert trigger.get_next_fire_time(FUTURE, FUTURE) == FUTURE + timedelta(minutes=15)


def test_cron_schedule_in_utc() -> None:
    trigger = build_trigger(Schedule(cron="15 */6 * * *", jitter=0))
    assert isinstance(trigger, CronTrigger) and str(trigger.timezone) == "UTC"
    now = datetime(2026, 9, 6, 8, 36, tzinfo=timezone.utc)
    assert trigger.get_next_fire_time(None, now) == datetime(2026, 9, 6, 12, 15, tzinfo=timezone.utc)
    jittered = build_trigger(Schedule(cron="0 * * * *", jitter=120))
    assert jittered.jitter == 120


@pytest.mark.parametrize(
    "schedule,message",
    [
        (Schedule(cron="every hour"), "not a 5-field cron expression"),
        (Schedule(cron="0 * * *"), "not a 5-field cron expression"),
        (Schedule(cron="0 * * * *", interval_seconds=60), "not both"),
        (Schedule(interval_seconds=0), "must be positive"),
        (Schedule(jitter=-1), "must not be negative"),
    ],
)
def test_bad_schedules(schedule: Schedule, message: str) -> None:
    with pytest.raises(ScheduleError, match=message):
        schedule.validate()


# --------------------------------------------------------------------------------------------- the scheduler


async def test_jobs_are_scheduled_with_their_triggers() -> None:
    hourly, cron = Calls(), Calls()
    scheduler = DriftScheduler(
        [ScheduledJob("drift:a:prod", Schedule(), hourly), ScheduledJob("drift:a:dev", Schedule(cron="0 3 * * *", jitter=0), cron)],
        clock=lambda: FUTURE,
    )
    scheduler.start()
    try:
        assert scheduler.running
        job = scheduler.job("drift:a:prod")
        assert isinstance(job.trigger, IntervalTrigger) and job.trigger.interval == timedelta(hours=1)
        assert FUTURE + timedelta(seconds=60) <= job.next_run_time <= FUTURE + timedelta(seconds=360)  # first run a minute after start
        assert job.max_instances == 1 and job.coalesce
        dev = scheduler.job("drift:a:dev")
        assert isinstance(dev.trigger, CronTrigger) and (dev.next_run_time.hour, dev.next_run_time.minute) == (3, 0)
    finally:
        scheduler.shutdown()
    await asyncio.sleep(0)
    assert not scheduler.running and hourly.count == cron.count == 0  # nothing fired on its own


async def test_run_now_obeys_should_run() -> None:
    calls = Calls()
    leader = {"value": False}
    scheduler = DriftScheduler([ScheduledJob("j", Schedule(), calls)], should_run=lambda: leader["value"])
    assert await scheduler.run_now("j") is False
    assert calls.count == 0 and scheduler.skipped["j"] == 1
    leader["value"] = True
    assert await scheduler.run_now("j") is True
    assert calls.count == 1 and scheduler.runs["j"] == 1
    with pytest.raises(KeyError):
        await scheduler.run_now("nope")


async def test_a_broken_elector_or_job_never_breaks_the_scheduler() -> None:
    def broken() -> bool:
        raise RuntimeError("lease API down")

    async def failing() -> None:
        raise RuntimeError("bug")

    scheduler = DriftScheduler([ScheduledJob("j", Schedule(), failing)], should_run=broken)
    assert await scheduler.run_now("j") is False  # cannot tell who leads: do not run
    scheduler.should_run = lambda: True
    assert await scheduler.run_now("j") is True and scheduler.runs["j"] == 1  # the failure is logged, not raised


async def test_apscheduler_fires_the_job_through_the_gate() -> None:
    calls = Calls()
    leader = {"value": False}
    scheduler = DriftScheduler([ScheduledJob("j", Schedule(), calls)], should_run=lambda: leader["value"], clock=lambda: FUTURE)
    scheduler.start()
    try:
        scheduler.job("j").modify(next_run_time=datetime.now(timezone.utc))  # due now: APScheduler wakes up and fires
        for _ in range(100):
            if scheduler.skipped["j"]:
                break
            await asyncio.sleep(0.02)
        assert scheduler.skipped["j"] == 1 and calls.count == 0  # not the leader: skipped
        leader["value"] = True
        scheduler.job("j").modify(next_run_time=datetime.now(timezone.utc))
        await asyncio.wait_for(calls.event.wait(), timeout=5)
        assert calls.count == 1
        job = scheduler.job("j")
        assert job.next_run_time > datetime.now(timezone.utc) + timedelta(minutes=50)  # back on its hourly schedule
    finally:
        scheduler.shutdown()


# --------------------------------------------------------------------------------------------- configuration and service


def write_config(tmp_path: Path, clusters: str) -> Path:
    path = tmp_path / "fluxwarden.yaml"
    path.write_text(f"repos:\n  - name: {REPO}\n    clusters:\n{clusters}", encoding="utf-8")
    return path


ENV = {"FLUXWARDEN_WEBHOOK_SECRET": "s", "FLUXWARDEN_GITHUB_TOKEN": "ghs_" + "e" * 36}


def test_drift_config(tmp_path: Path) -> None:
    config = load_service_config(write_config(tmp_path, (
        "      prod: {kubeconfig: /etc/k/prod, drift: {schedule: '0 */2 * * *', jitter: 60, stuck_after_seconds: 3600}}\n"
        "      dev: {in_cluster: true}\n"
        "      lab: {in_cluster: true, drift: {enabled: false}}\n"
        "      offline: {}\n"
    )), env=ENV)
    policy = config.repos[0]
    prod, dev, lab, offline = (policy.cluster(n) for n in ("prod", "dev", "lab", "offline"))
    assert prod.drift == DriftPolicy(schedule="0 */2 * * *", jitter=60, stuck_after_seconds=3600) and prod.drift_enabled
    assert prod.drift.options().stuck_after == timedelta(hours=1)
    assert dev.drift == DriftPolicy() and dev.drift_enabled  # live clusters get hourly reports by default
    assert not lab.drift_enabled and not offline.drift_enabled


@pytest.mark.parametrize(
    "clusters,message",
    [
        ("      prod: {kubeconfig: k, drift: {schedule: 'hourly'}}\n", "not a 5-field cron expression"),
        ("      prod: {kubeconfig: k, drift: {interval_seconds: 60, schedule: '* * * * *'}}\n", "not both"),
        ("      prod: {kubeconfig: k, drift: {interval_seconds: '1h'}}\n", "whole number of seconds"),
        ("      prod: {kubeconfig: k, drift: {every: 5}}\n", "unknown key"),
        ("      prod: {drift: {enabled: true}}\n", "needs live access"),
        ("      prod: {kubeconfig: k, drift: yes}\n", "must be a mapping"),
    ],
)
def test_bad_drift_config(tmp_path: Path, clusters: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        load_service_config(write_config(tmp_path, clusters), env=ENV)


def service_config(tmp_path: Path, *clusters: ClusterPolicy) -> ServiceConfig:
    return ServiceConfig(webhook_secret=b"s", github=GitHubAuth(token="ghs_" + "f" * 36, api_url="http://127.0.0.1:9"), repos=(RepoPolicy(REPO, clusters=clusters),), cache_dir=tmp_path / "cache")


def test_service_schedules_only_enabled_live_clusters(tmp_path: Path) -> None:
    service = build_service(service_config(
        tmp_path,
        ClusterPolicy("prod", kubeconfig="/k", drift=DriftPolicy(interval_seconds=1800, jitter=30)),
        ClusterPolicy("dev"),
        ClusterPolicy("lab", in_cluster=True, drift=DriftPolicy(enabled=False)),
    ))
    assert sorted(service.drift.jobs) == [f"drift:{REPO}:prod"]
    assert service.drift.jobs[f"drift:{REPO}:prod"].schedule == Schedule(interval_seconds=1800, jitter=30)
    assert build_service(service_config(tmp_path, ClusterPolicy("dev"))).drift is None


async def test_service_starts_and_stops_the_scheduler_and_passes_should_run(tmp_path: Path) -> None:
    gate = lambda: False  # noqa: E731
    config = service_config(tmp_path, ClusterPolicy("prod", kubeconfig="/k"))
    adapter = GitHubAdapter(config.github, retries=0, timeout=1, bot_login="fluxwarden-bot")  # GitHub is not there: fail fast
    service = build_service(config, github=adapter, should_run=gate)
    assert service.drift.should_run is gate
    async with TestClient(TestServer(service.app())):
        assert service.drift.running
        assert service.drift.job(f"drift:{REPO}:prod").next_run_time is not None
    assert not service.drift.running


async def test_a_scheduled_firing_reports_drift_on_the_issue(world: World) -> None:
    w = world
    ready(w.kube, "apps", "False", "DependencyNotReady", "dependency 'flux-system/platform-config' is not ready", INCIDENT)
    leader = {"value": True}
    scheduler = build_drift_scheduler(w.runner.bot, should_run=lambda: leader["value"], clock=w.clock)
    job_id = f"drift:{REPO}:prod"
    assert list(scheduler.jobs) == [job_id]
    scheduler.start()
    try:
        assert scheduler.job(job_id).trigger.interval == timedelta(hours=1)
        scheduler.job(job_id).modify(next_run_time=datetime.now(timezone.utc))
        for _ in range(600):
            if scheduler.runs[job_id]:
                break
            await asyncio.sleep(0.05)
        assert scheduler.runs[job_id] == 1
        [issue] = w.issues()
        assert issue.labels == [LABEL] and "stuck waiting on a dependency" in issue.body
        leader["value"] = False  # another replica leads now: run_now is skipped, nothing changes
        assert await scheduler.run_now(job_id) is False
        assert len(w.issues()) == 1 and scheduler.runs[job_id] == 1
    finally:
        scheduler.shutdown()
