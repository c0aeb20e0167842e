"""The HTTP edge (aiohttp): /webhook, /healthz, /readyz, /metrics. It verifies, parses and hands off; no work inline."""

from __future__ import annotations

import asyncio
import logging
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Awaitable, Callable

from aiohttp import web

from bot.engine.chatops.webhook import CommentEvent, PayloadError, PingEvent, PullRequestEvent, PushEvent, parse_body, parse_event, verify_signature
from bot.service.metrics import CONTENT_TYPE, Metrics
from bot.service.runs import RunQueue
from bot.service.settings import ServiceConfig
from handlers.comment import on_comment
from handlers.context import BotContext
from handlers.precheck_runs import PrecheckRuns
from handlers.pull_request import on_pull_request
from handlers.push import on_push

log = logging.getLogger(__name__)
SEEN_DELIVERIES = 10_000  # GitHub redelivers with the same X-GitHub-Delivery; remember this many
# GitHub sends webhook bodies uncompressed; a compressed body is refused before a byte of it is read.
IDENTITY = frozenset({"", "identity"})


@dataclass
class Readiness:
    """What /readyz reports: each dependency checked at start-up."""

    checks: dict[str, str | None] = field(default_factory=dict)  # name -> None when fine, else the problem

    @property
    def ready(self) -> bool:
        return bool(self.checks) and all(v is None for v in self.checks.values())


class WebhookApp:
    """Builds the aiohttp application around a BotContext, its run queue and its precheck runs."""

    def __init__(self, bot: BotContext, config: ServiceConfig, queue: RunQueue, runs: PrecheckRuns, metrics: Metrics, readiness: Readiness) -> None:
        self.bot, self.config = bot, config
        self.queue, self.runs, self.service_metrics = queue, runs, metrics
        self.readiness = readiness
        self._seen: OrderedDict[str, None] = OrderedDict()
        self._tasks: set[asyncio.Task[object]] = set()

    def app(self) -> web.Application:
        # auto_decompress off: aiohttp would otherwise inflate a gzip/deflate/br/zstd body as it arrives, on
        # the event loop, before the handler can refuse it (a 1 MB bomb is 1 GiB inflated).
        app = web.Application(client_max_size=self.config.limits.max_body_bytes, handler_args={"auto_decompress": False})
        app.router.add_post("/webhook", self.webhook)
        app.router.add_get("/healthz", self.healthz)
        app.router.add_get("/readyz", self.readyz)
        app.router.add_get("/metrics", self.metrics)
        app.on_cleanup.append(self._cleanup)
        return app

    async def webhook(self, request: web.Request) -> web.Response:
        """Verify, parse, dedupe, answer 202 at once; the handler runs in the background."""
        event_name = request.headers.get("X-GitHub-Event", "")
        delivery = request.headers.get("X-GitHub-Delivery", "")
        deliveries = self.service_metrics.deliveries
        encoding = request.headers.get("Content-Encoding", "").strip().lower()
        if encoding not in IDENTITY:
            deliveries.labels(event_name or "unknown", "encoded").inc()
            response = web.json_response({"error": "Content-Encoding is not supported: GitHub sends webhook bodies uncompressed"}, status=415)
            response.force_close()  # do not linger reading the rest of the body
            return response
        if (request.content_length or 0) > self.config.limits.max_body_bytes:
            deliveries.labels(event_name or "unknown", "too-large").inc()
            response = web.json_response({"error": "payload too large"}, status=413)
            response.force_close()  # do not linger reading the rest of the body
            return response
        try:
            body = await request.read()
        except web.HTTPRequestEntityTooLarge:
            deliveries.labels(event_name or "unknown", "too-large").inc()
            return web.json_response({"error": "payload too large"}, status=413)
        if not verify_signature(self.config.webhook_secret, body, request.headers.get("X-Hub-Signature-256")):
            deliveries.labels(event_name or "unknown", "bad-signature").inc()
            return web.json_response({"error": "invalid signature"}, status=401)
        try:
            payload = parse_body(body, request.headers.get("Content-Type"))
            event = parse_event(event_name, delivery, payload)
        except PayloadError as exc:
            deliveries.labels(event_name or "unknown", "malformed").inc()
            return web.json_response({"error": str(exc)}, status=400)
        if event is None:
            deliveries.labels(event_name or "unknown", "ignored").inc()
            return web.Response(status=204)
        if isinstance(event, PingEvent):
            deliveries.labels(event_name, "ping").inc()
            return web.json_response({"pong": True})
        if delivery and delivery in self._seen:
            deliveries.labels(event_name, "duplicate").inc()
            return web.json_response({"duplicate": delivery}, status=200)
        self._remember(delivery)
        handler = self._handler(event)
        if handler is None:
            deliveries.labels(event_name, "ignored").inc()
            return web.Response(status=204)
        self._spawn(handler(), f"{event_name} {delivery}")
        deliveries.labels(event_name, "accepted").inc()
        return web.json_response({"accepted": delivery}, status=202)

    def _handler(self, event: object) -> Callable[[], Awaitable[object]] | None:
        if isinstance(event, CommentEvent):
            return lambda: on_comment(event, self.bot)
        if isinstance(event, PullRequestEvent):
            return lambda: on_pull_request(event, self.bot)
        if isinstance(event, PushEvent):
            return lambda: on_push(event, self.bot)
        return None

    def _remember(self, delivery: str) -> None:
        if not delivery:
            return
        self._seen[delivery] = None
        while len(self._seen) > SEEN_DELIVERIES:
            self._seen.popitem(last=False)

    def _spawn(self, coro: Awaitable[object], name: str) -> None:
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)

        def done(t: asyncio.Task[object]) -> None:
            self._tasks.discard(t)
            if not t.cancelled() and t.exception() is not None:
                log.error("handler for %s failed: %r", name, t.exception())

        task.add_done_callback(done)

    async def healthz(self, _: web.Request) -> web.Response:
        return web.json_response({"status": "ok"})

    async def readyz(self, _: web.Request) -> web.Response:
        status = 200 if self.readiness.ready else 503
        return web.json_response({"ready": self.readiness.ready, "checks": self.readiness.checks}, status=status)

    async def metrics(self, _: web.Request) -> web.Response:
        self.service_metrics.queue_depth.set(self.queue.depth)
        self.service_metrics.in_progress.set(len(self._tasks) + self.queue.active + self.runs.finalising)
        remaining = getattr(self.bot.github, "rate_limit_remaining", None)
        if remaining is not None:
            self.service_metrics.rate_limit_remaining.set(remaining)
        return web.Response(body=self.service_metrics.exposition(), headers={"Content-Type": CONTENT_TYPE})

    async def settle(self, timeout: float = 30.0) -> None:
        """Wait for background handlers and the runs they queued (tests, graceful shutdown)."""
        if self._tasks:
            await asyncio.wait(list(self._tasks), timeout=timeout)
        await self.queue.drain(timeout=timeout)

    def stop_handlers(self) -> None:
        """Shutting down: cancel the handlers still running (a delivery's work is re-done by the next start)."""
        for task in list(self._tasks):
            task.cancel()

    async def _cleanup(self, _: web.Application) -> None:
        for task in list(self._tasks):
            task.cancel()
        await self.queue.close()
        await self.runs.close()
