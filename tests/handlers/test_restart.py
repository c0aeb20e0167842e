"""handlers/restart.py against in-memory fakes: which pending prechecks are re-run at start-up and by the sweeps."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import pytest

from bot.engine.chatops.github_models import StatusInfo
from bot.engine.chatops.jobs import PrecheckKey, precheck_version
from handlers.precheck import INTERRUPTED, RESUMED
from handlers.restart import resume_pending
from tests.fakes.context import HEAD, REPO, MemoryClaims, MemoryGitHub, RecordingPrechecks, bot_context, pull_info

OLD = 0.0  # created at the epoch: long stale
RUNNING = "precheck of {c} running"


def status(cluster: str, state: str = "pending", description: str = RUNNING, created_at: float = OLD) -> StatusInfo:
    return StatusInfo(state, f"fluxwarden/{cluster}", description.format(c=cluster), created_at, "fluxwarden-bot")


@dataclass(frozen=True)
class Case:
    name: str
    statuses: tuple[StatusInfo, ...]  # on PR 7's head, newest first
    rerun: tuple[tuple[str, bool], ...] = ()  # (cluster, resumed) scheduled again, in order
    given_up: tuple[str, ...] = ()
    pull: dict[str, Any] = field(default_factory=dict)
    down: tuple[str, ...] = ()
    claims: MemoryClaims | None = None
    stale_after: float | None = None
    busy: tuple[str, ...] = ()  # clusters this process still works on


CASES = [
    Case("crashed", (status("prod"), status("dev", "success", "dev: no new errors")), rerun=(("prod", True),)),
    Case("interrupted", (status("prod", description=f"precheck of {{c}} {INTERRUPTED}"),), rerun=(("prod", False),)),
    Case("released-by-an-older-replica", (status("prod", description="precheck of {c} interrupted (replica stopped)"),), rerun=(("prod", False),)),
    Case("stopped-the-checker-twice", (status("prod", description=f"precheck of {{c}} {RESUMED}"),), given_up=("prod",)),
    Case("both-pending", (status("prod"), status("dev")), rerun=(("dev", True), ("prod", True))),
    Case("finished", (status("prod", "failure", "1 new error in prod"), status("dev", "success", "dev: no new errors"))),
    Case("nothing-yet", ()),
    Case("fork-refused", (status("prod"),), pull={"fork": True}),
    Case("github-down", (status("prod"),), down=("open_pull_requests",)),
    Case("status-unreadable", (status("prod"),), down=("latest_status",)),
    Case("claims-abandoned", (status("prod"), status("dev")), rerun=(("prod", True),), claims=MemoryClaims({(HEAD, "fluxwarden/prod")})),
    Case("claims-live", (status("prod"),), claims=MemoryClaims()),
    Case("claimed-since-found", (status("prod"),), claims=MemoryClaims({(HEAD, "fluxwarden/prod")}, {"fluxwarden/prod"})),
    Case("sweep-stale", (status("prod"),), rerun=(("prod", True),), stale_after=60),
    Case("sweep-fresh", (status("prod", created_at=time.time() + 3600),), stale_after=60),
    Case("sweep-still-running-here", (status("prod"),), stale_after=60, busy=("prod",)),
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
async def test_resume_pending(case: Case) -> None:
    github = MemoryGitHub(pulls={7: pull_info(**case.pull)}, status_list={HEAD: list(case.statuses)}, down=set(case.down))
    prechecks = RecordingPrechecks(working={(PrecheckKey(REPO, 7, c), precheck_version(HEAD, "main")) for c in case.busy})
    bot = bot_context(github=github, prechecks=prechecks, claims=case.claims)
    plans = await resume_pending(bot, stale_after=case.stale_after)
    assert [(c, p.resumed) for p in plans for c in p.clusters] == list(case.rerun)
    assert plans == prechecks.plans
    assert tuple(c for _, c in prechecks.given_up) == case.given_up
    assert all((p.number, p.head_sha, p.base_ref) == (7, HEAD, "main") for p in plans)
