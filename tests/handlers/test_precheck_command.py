"""handlers/precheck_command.py on the in-memory fakes: each cluster's own permission, and the PR's state, decide
what `/precheck` schedules."""

from __future__ import annotations

import pytest

from bot.engine.chatops.commands import PrecheckCommand
from handlers.context import Invocation
from handlers.precheck_command import on_precheck
from tests.fakes.context import HEAD, MemoryGitHub, MemorySettings, RecordingPrechecks, bot_context, comment_event, pull_info

POLICY = MemorySettings().repos[0]  # dev: write, prod: maintain


@pytest.mark.parametrize("have, clusters, pull, scheduled, said", [
    ("write", (), pull_info(), ("dev",), "you have write permission on this repository; `prod` needs maintain."),
    ("write", ("prod",), pull_info(), (), "you have write permission on this repository; `prod` needs maintain."),
    ("maintain", (), pull_info(), ("dev", "prod"), None),
    ("maintain", ("prod",), pull_info(fork=True), (), "PRs from forks are not rendered on this repository (`allow_forks: false`)."),
    ("maintain", ("prod",), pull_info(state="closed"), (), "this PR is not open."),
], ids=["write-runs-dev-only", "write-refused-prod", "maintain-runs-both", "fork-refused", "closed-pr"])
async def test_each_cluster_asks_for_its_own_permission(have: str, clusters: tuple[str, ...], pull: object, scheduled: tuple[str, ...], said: str | None) -> None:
    prechecks = RecordingPrechecks()
    bot = bot_context(github=MemoryGitHub(pulls={7: pull}), prechecks=prechecks)  # type: ignore[dict-item]
    result = await on_precheck(comment_event("/precheck"), PrecheckCommand(clusters), bot, Invocation(POLICY, have))
    assert (result.scheduled, result.accepted) == (scheduled, bool(scheduled))
    assert result.reply is None if said is None else said in (result.reply or "")
    assert prechecks.scheduled == ([(7, HEAD, scheduled)] if scheduled else [])
