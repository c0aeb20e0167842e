"""`fluxwarden serve`: wire config, GitHub, git mirrors, the run queue and the HTTP edge together."""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from pathlib import Path

from aiohttp import web

from bot.engine import CheckOptions
from bot.errors import FluxwardenError
from bot.github import GitHubAdapter
from bot.gitrepo import Mirrors
from bot.kustomize import locate_kustomize
from bot.metrics import new_metrics
from bot.runs import RunQueue
from bot.server import Readiness, WebhookApp
from bot.service_config import ServiceConfig
from handlers.context import BotContext
from handlers.precheck import PrecheckRunner
from handlers.restart import resume_pending

log = logging.getLogger(__name__)


@dataclass
class Service:
    """A configured service: its context, readiness and HTTP application."""

    bot: BotContext
    readiness: Readiness
    webhook: WebhookApp

    def app(self) -> web.Application:
        app = self.webhook.app()
        app.on_startup.append(self._startup)
        return app

    async def _startup(self, _: web.Application) -> None:
        await check_readiness(self.bot, self.readiness)
        if self.readiness.checks.get("github") is None:
            plans = await resume_pending(self.bot)
            if plans:
                log.info("re-running %d precheck(s) left pending by a previous process", len(plans))


def build_service(config: ServiceConfig, github: GitHubAdapter | None = None) -> Service:
    """Everything the service needs, from its config (the GitHub adapter can be injected for tests)."""
    metrics = new_metrics()
    adapter = github or GitHubAdapter(config.github)
    queue = RunQueue(config.limits.workers, config.limits.queue)
    runner = PrecheckRunner(
        github=adapter,
        git=Mirrors(config.cache_dir / "mirrors"),
        queue=queue,
        metrics=metrics,
        cache_dir=config.cache_dir / "builds",
        options=CheckOptions(timeout=config.limits.kustomize_timeout),
        run_timeout=config.limits.run_timeout,
        target_url=config.public_url,
        service_config=config,
    )
    bot = BotContext(config=config, github=adapter, runner=runner, metrics=metrics)
    readiness = Readiness()
    return Service(bot, readiness, WebhookApp(bot, readiness))


async def check_readiness(bot: BotContext, readiness: Readiness) -> None:
    """Config is loaded (we are here), GitHub auth works, a kustomize binary is there."""
    readiness.checks["config"] = None
    try:
        await asyncio.to_thread(bot.github.installation_token)
        readiness.checks["github"] = None
    except FluxwardenError as exc:
        readiness.checks["github"] = str(exc)
    try:
        binary = await asyncio.to_thread(locate_kustomize, bot.runner.options.kustomize)
        readiness.checks["kustomize"] = None if binary.version != "unknown" else f"{binary.path} did not report a version"
    except FluxwardenError as exc:
        readiness.checks["kustomize"] = str(exc)


def serve(config: ServiceConfig) -> None:
    """Run the service until interrupted."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    config.cache_dir.mkdir(parents=True, exist_ok=True)
    service = build_service(config)
    web.run_app(service.app(), host=config.host, port=config.port, access_log=None, print=lambda *_: None)


__all__ = ["Service", "build_service", "serve", "Path"]
