"""Fixtures of the hardening suite: a fresh origin and fake GitHub per test, and a service starter."""

from __future__ import annotations

from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, AsyncIterator, Callable

import pytest
from aiohttp.test_utils import TestClient

from tests.fakes.github import FakeGitHub
from tests.hardening.harness import Harness, Origin, make_fake, running


@pytest.fixture
def origin(tmp_path: Path) -> Origin:
    return Origin(tmp_path)


@pytest.fixture
async def fake(origin: Origin) -> AsyncIterator[FakeGitHub]:
    async with make_fake(origin) as github:
        yield github


@pytest.fixture
def start(tmp_path: Path, origin: Origin, fake: FakeGitHub) -> Callable[..., Any]:
    """`async with start(workers=..., adapter={...}) as h:` runs the service on 127.0.0.1 for one test."""

    @asynccontextmanager
    async def _start(**kwargs: Any) -> AsyncIterator[Harness]:
        service, server = await running(tmp_path, origin, fake, **kwargs)
        async with TestClient(server) as client:
            yield Harness(client, fake, service, origin)

    return _start
