"""What every handler gets: the service config, the GitHub adapter, the precheck runner."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from bot.service.metrics import Metrics
from bot.service.settings import ServiceConfig
from handlers.precheck import PrecheckGitHub, PrecheckRunner


class HandlerGitHub(PrecheckGitHub, Protocol):
    """The GitHub calls handlers make besides prechecking."""

    def permission(self, repo: str, login: str) -> str: ...

    def pull_request(self, repo: str, number: int): ...

    def open_pull_requests(self, repo: str) -> list: ...

    def latest_status(self, repo: str, sha: str, context: str) -> str | None: ...

    def add_reaction(self, repo: str, comment_id: int, content: str = "eyes") -> None: ...


@dataclass
class BotContext:
    """Shared by every handler of one running service."""

    config: ServiceConfig
    github: HandlerGitHub
    runner: PrecheckRunner
    metrics: Metrics
