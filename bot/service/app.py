"""`fluxwarden serve`: wire config, GitHub, git mirrors, the run queue and the HTTP edge together."""

from __future__ import annotations

import asyncio
import logging
import os
import shutil
import stat
import tempfile
import threading
import time
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any, Callable

from aiohttp import web

from bot.adapters.git import Mirrors
from bot.adapters.github import GitHubAdapter
from bot.adapters.kustomize import KustomizeProbes, allow_builds, locate_kustomize, stop_builds
from bot.adapters.memory import set_render_memory
from bot.adapters.scheduler import DriftScheduler, Schedule, ScheduledJob
from bot.engine.core.errors import FluxwardenError
from bot.pipeline.check import CheckOptions
from bot.pipeline.session import release_idle_memory, work_dirs
from bot.service.claims import CLAIM_GRACE, Claims, pod_of
from bot.service.live import KubeLive
from bot.service.leader import LeaderElector, build_elector, replica_identity
from bot.service.metrics import new_metrics
from bot.service.runs import RunQueue
from bot.service.server import Readiness, WebhookApp
from bot.service.settings import ServiceConfig
from handlers.context import BotContext
from handlers.drift import drift_jobs
from bot.pipeline.drift import utcnow
from handlers.precheck import Precheck
from handlers.precheck_runs import PrecheckRuns
from handlers.registry import check_registry
from handlers.restart import resume_pending, sweep_own, sweep_pending

log = logging.getLogger(__name__)
# deploy/deployment.yaml terminationGracePeriodSeconds: kubelet SIGKILLs the pod this long after SIGTERM.
GRACE_SECONDS = 30.0
EXIT_MARGIN = 5.0  # of the grace, kept for the interpreter's exit: threads still running then are abandoned
SHUTDOWN_TIMEOUT = 5.0  # seconds aiohttp waits for HTTP requests in progress on SIGTERM (webhooks answer at once)
STALE_WORK_DIR_MIN = 1800.0  # a /tmp/fluxwarden-* directory is stale after max(2 × run_timeout, this)


@dataclass
class Service:
    """A configured service: its context, its runs, readiness and HTTP application."""

    config: ServiceConfig
    bot: BotContext
    runs: PrecheckRuns
    readiness: Readiness
    webhook: WebhookApp
    drift: DriftScheduler | None = None  # scheduled drift reports (None: no cluster has them)
    leader: LeaderElector | None = None  # when leader_election.enabled (docs/high-availability.md)
    _sweeper: "asyncio.Task[None] | None" = None  # a single replica's own sweep of pending statuses
    stopping_since: float | None = None  # time.monotonic() when shutdown began (SIGTERM)
    _killed: int = 0  # renders killed at shutdown

    @property
    def queue(self) -> RunQueue:
        """The one run queue every kind of run goes on."""
        return self.webhook.queue

    @property
    def is_leader(self) -> bool:
        """Whether this replica runs scheduled jobs: always without leader election (a single replica)."""
        return self.leader.is_leader if self.leader is not None else True

    def app(self) -> web.Application:
        app = self.webhook.app()
        app.on_shutdown.append(self._begin_shutdown)  # first: nothing new starts once SIGTERM arrived
        app.on_startup.append(self._startup)
        app.on_startup.append(self._start_leader)
        app.on_shutdown.append(self._stop_leader)  # before on_cleanup cancels runs: jobs stop, the Lease is released
        app.on_startup.append(self._start_drift)
        app.on_startup.append(self._start_sweep)
        app.on_shutdown.append(self._stop_sweep)
        app.on_cleanup.append(self._stop_drift)
        app.on_cleanup.append(self._stop_builds)  # last: the runs are cancelled by now, their results unwanted
        return app

    @property
    def exit_deadline(self) -> float:
        """When the threads of cancelled runs are given up on (time.monotonic()): within the pod's grace period."""
        return (self.stopping_since if self.stopping_since is not None else time.monotonic()) + GRACE_SECONDS - EXIT_MARGIN

    async def _begin_shutdown(self, _: web.Application) -> None:
        """SIGTERM: no run, kustomize build or Helm render starts from now on; the runs are cancelled (each marks its
        status interrupted, for the next start to re-run) and their builds and Helm workers killed.

        All before any await: a run whose review ends now must not write a verdict computed with killed builds."""
        self.stopping_since = time.monotonic()
        self.webhook.stop_handlers()
        self.queue.stop()
        self._killed = stop_builds()  # the review threads see it too and stop between two steps (check_stop)

    async def _stop_builds(self, _: web.Application) -> None:
        """Wait (within the grace period) for the threads of the cancelled runs to stop."""
        killed = self._killed + stop_builds()
        while self.runs.precheck.reviewing and time.monotonic() < self.exit_deadline:
            await asyncio.sleep(0.05)
        log.info("shutdown: %d kustomize build(s) killed, %d review thread(s) still running", killed, self.runs.precheck.reviewing)
        if not self.runs.precheck.reviewing:
            allow_builds()  # this process is done; an in-process successor (tests) renders again

    async def _start_sweep(self, _: web.Application) -> None:
        """Without leader election this replica is alone: it sweeps its own stale pending statuses."""
        config = self.config
        if self.leader is None and config.leader_election.sweep_seconds > 0:
            stale_after = config.limits.run_timeout + CLAIM_GRACE
            self._sweeper = asyncio.get_running_loop().create_task(
                sweep_own(self.bot, config.leader_election.sweep_seconds, stale_after), name="sweep pending prechecks"
            )

    async def _stop_sweep(self, _: web.Application) -> None:
        if self._sweeper is not None:
            self._sweeper.cancel()
            await asyncio.gather(self._sweeper, return_exceptions=True)

    async def _start_drift(self, _: web.Application) -> None:
        if self.drift is not None:
            self.drift.start()

    async def _stop_drift(self, _: web.Application) -> None:
        if self.drift is not None:
            self.drift.shutdown()

    async def _start_leader(self, _: web.Application) -> None:
        if self.leader is not None:
            self.leader.start()

    async def _stop_leader(self, _: web.Application) -> None:
        if self.leader is not None:
            await self.leader.stop()

    async def _startup(self, _: web.Application) -> None:
        await check_readiness(self.bot, self.readiness)
        if self.readiness.checks.get("github") is None:
            plans = await resume_pending(self.bot)
            if plans:
                log.info("re-running %d precheck(s) left pending by a previous process", len(plans))


def build_service(config: ServiceConfig, github: GitHubAdapter | None = None, *, should_run: Callable[[], bool] | None = None) -> Service:
    """Everything the service needs, from its config (the GitHub adapter can be injected for tests).

    `should_run` gates scheduled jobs (drift reports): leader election passes `elector.is_leader`."""
    check_registry()  # a command the parser knows without a handler fails here, not in a comment
    set_render_memory(config.limits.render_memory)
    metrics = new_metrics()
    adapter = github or GitHubAdapter(config.github, bot_login=config.github_login)
    git = Mirrors(config.cache_dir / "mirrors", credentials=adapter.installation_token)
    # One record of the kustomize binaries for the process: each one's version is read once, not once per run.
    options = CheckOptions(timeout=config.limits.kustomize_timeout, charts=config.charts, probes=KustomizeProbes())
    cache_dir = config.cache_dir / "builds"
    queue = RunQueue(config.limits.workers, config.limits.queue, idle=release_idle_memory)  # a replica returns near its idle RSS
    identity = (config.leader_election.identity or replica_identity()) if config.leader_election.enabled else None
    claims = _claims(adapter, config, identity) if identity is not None else None
    live = KubeLive(config)
    precheck = Precheck(
        github=adapter, git=git, live=live, metrics=metrics, cache_dir=cache_dir, options=options,
        run_timeout=config.limits.run_timeout, target_url=config.public_url,
    )
    runs = PrecheckRuns(precheck, queue, metrics, claims=claims, final_retry=config.limits.final_retry_seconds)
    bot = BotContext(
        config=config, github=adapter, git=git, prechecks=runs, jobs=queue, metrics=metrics, options=options, cache_dir=cache_dir, claims=claims,
        live=live,
    )
    readiness = Readiness()
    leader = None
    if identity is not None:
        leader = _elector(bot, config, identity)
        if should_run is None:
            should_run = lambda: leader.is_leader  # noqa: E731
    drift = build_drift_scheduler(bot, should_run=should_run)
    return Service(config, bot, runs, readiness, WebhookApp(bot, config, queue, runs, metrics, readiness), drift=drift, leader=leader)


def build_drift_scheduler(
    bot: BotContext, *, should_run: Callable[[], bool] | None = None, clock: Callable[[], datetime] = utcnow
) -> DriftScheduler | None:
    """The service's drift scheduler (None when no cluster has drift on): handlers/drift.py's jobs behind
    `should_run` (leader election); its `runner` is the handler's DriftRunner (tests and the service reach it)."""
    made = drift_jobs(bot, clock=clock)
    if made is None:
        return None
    runner, jobs = made
    scheduled = [ScheduledJob(job.id, Schedule(job.cron, job.interval_seconds, job.jitter), job.run) for job in jobs]
    scheduler = DriftScheduler(scheduled, should_run=should_run, clock=clock)
    scheduler.runner = runner  # type: ignore[attr-defined]
    return scheduler


def _claims(github: GitHubAdapter, config: ServiceConfig, identity: str) -> Claims:
    """Several replicas: runs are claimed on GitHub (bot/service/claims.py)."""
    pod = pod_of(identity) if os.environ.get("POD_NAME") else None
    return Claims(github, identity, ttl=config.limits.run_timeout + CLAIM_GRACE, pod=pod)


def _elector(bot: BotContext, config: ServiceConfig, identity: str) -> LeaderElector:
    """Several replicas: the leader, elected on a Lease (bot/service/leader.py), sweeps what dead replicas left pending.

    Not part of /readyz: a replica that is not the leader (or cannot reach the Lease) still serves webhooks."""
    election = config.leader_election
    sweeper: list[asyncio.Task[None]] = []

    def started() -> None:
        if election.sweep_seconds > 0:
            sweeper.append(asyncio.get_running_loop().create_task(sweep_pending(bot, election.sweep_seconds), name="sweep pending prechecks"))

    async def stopped() -> None:
        while sweeper:
            task = sweeper.pop()
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)

    log.info("high availability: replica %s, lease %s", identity, election.name)
    return build_elector(election, identity, on_started=started, on_stopped=stopped)


async def check_readiness(bot: BotContext, readiness: Readiness) -> None:
    """Config is loaded (we are here), GitHub auth works, a kustomize binary is there."""
    github: Any = bot.github  # the adapter itself: its token and login are the composition root's business
    readiness.checks["config"] = None
    try:
        # A real call, not just a configured token: an App mints an installation token, a token user
        # reads its own permission on the first repository (a 401 or a dead API URL fails here).
        await asyncio.to_thread(github.installation_token)
        if bot.config.repos:
            first = bot.config.repos[0].name
            await asyncio.to_thread(lambda: github.permission(first, github.bot_login))  # bot_login may call GitHub
        readiness.checks["github"] = None
    except FluxwardenError as exc:
        readiness.checks["github"] = str(exc)
    try:
        binary = await asyncio.to_thread(locate_kustomize, bot.options.kustomize, bot.options.probes)
        readiness.checks["kustomize"] = None if binary.version != "unknown" else f"{binary.path} did not report a version"
    except FluxwardenError as exc:
        readiness.checks["kustomize"] = str(exc)


def serve(config: ServiceConfig) -> None:
    """Run the service until interrupted (SIGTERM: runs cancelled, renders killed, exit within GRACE_SECONDS - EXIT_MARGIN)."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    config.cache_dir.mkdir(parents=True, exist_ok=True)
    removed = clean_stale_work_dirs(Path(tempfile.gettempdir()), max(2 * config.limits.run_timeout, STALE_WORK_DIR_MIN))
    if removed:
        log.info("removed %d stale work directorie(s) a previous process left in %s", len(removed), tempfile.gettempdir())
    service = build_service(config)
    web.run_app(service.app(), host=config.host, port=config.port, access_log=None, print=lambda *_: None, shutdown_timeout=SHUTDOWN_TIMEOUT)
    leave(service.exit_deadline)


def leave(deadline: float) -> None:
    """Exit by `deadline` (time.monotonic()): the interpreter would wait for every worker thread, and a thread deep
    in a step of Python work that never checks the stop flag would hold the pod past its grace period. Such threads
    are abandoned: their scratch directories are removed here (the cache is written atomically: nothing partial is
    readable), and the process ends without waiting."""
    busy = [t for t in threading.enumerate() if t is not threading.current_thread() and not t.daemon]
    for thread in busy:
        thread.join(max(0.0, deadline - time.monotonic()))
    left = [t.name for t in busy if t.is_alive()]
    if not left:
        return
    for directory in work_dirs():
        shutil.rmtree(directory, ignore_errors=True)
    log.warning("shutdown: %d thread(s) still running at the end of the grace period (%s); exiting without them", len(left), ", ".join(left))
    logging.shutdown()
    os._exit(0)


def clean_stale_work_dirs(tmp: Path, older_than: float) -> list[str]:
    """Remove the `fluxwarden-*` work directories in `tmp` that a killed process left: ours (same uid), real
    directories (not symlinks), untouched for `older_than` seconds (longer than any run of ours lasts)."""
    removed: list[str] = []
    now = time.time()
    try:
        entries = list(os.scandir(tmp))
    except OSError:
        return removed
    for entry in entries:
        if not entry.name.startswith("fluxwarden-"):
            continue
        try:
            info = entry.stat(follow_symlinks=False)
        except OSError:
            continue
        if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.getuid() or now - info.st_mtime < older_than:
            continue
        try:
            shutil.rmtree(entry.path)
        except (OSError, RecursionError) as exc:  # a tree an older version left too deep, or a file in use
            log.warning("cannot remove stale work directory %s: %s", entry.path, type(exc).__name__)
            continue
        removed.append(entry.name)
    return removed


__all__ = ["Service", "build_service", "serve", "Path"]
