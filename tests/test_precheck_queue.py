"""A run waiting for a worker already shows its pending status and "running" comment (so a crash cannot lose it).

The GitHub and git sides are in-memory implementations of the small interfaces the handler owns
(handlers/context.py PrecheckGitHub, handlers/precheck.py PrecheckGit), in the style of Prow's plugin clients;
the runs are bot/service/runs.py's PrecheckRuns.
"""

from __future__ import annotations

import asyncio
import threading
from dataclasses import dataclass, field
from pathlib import Path

from bot.engine.jobs import PrecheckKey
from bot.service.metrics import new_metrics
from bot.service.runs import PrecheckRuns, RunQueue, Submitted
from handlers.precheck import Precheck, PrecheckPlan


@dataclass
class RecordingGitHub:
    is_app: bool = False
    statuses: list[tuple[str, str, str]] = field(default_factory=list)  # (sha, context, state)
    comments: dict[str, str] = field(default_factory=dict)

    def upsert_comments(self, repo: str, number: int, marker: str, bodies: list[str]) -> list[int]:
        self.comments[marker] = bodies[0]
        return [1]

    def set_status(self, repo: str, sha: str, context: str, state: str, description: str, target_url: str | None = None) -> None:
        self.statuses.append((sha, context, state))

    def upsert_check_run(self, *args: object, **kwargs: object) -> int:
        raise AssertionError("not an App")


class BlockedGit:
    """Every fetch waits until released, then fails (the run ends in an `error` status)."""

    def __init__(self) -> None:
        self.release = threading.Event()

    def revisions(self, clone_url: str, base_ref: str, head_ref: str):
        self.release.wait(10)
        from bot.engine.errors import InfraError

        raise InfraError("origin unreachable")


def precheck_runs(github: RecordingGitHub, git: BlockedGit, tmp_path: Path, final_retry: float = 5.0) -> PrecheckRuns:
    metrics = new_metrics()
    precheck = Precheck(github=github, git=git, settings=None, metrics=metrics, cache_dir=tmp_path)
    return PrecheckRuns(precheck, RunQueue(workers=1, max_queued=10), metrics, final_retry=final_retry)


def plan(number: int) -> PrecheckPlan:
    return PrecheckPlan("o/r", number, f"{number:040x}", "main", "https://example.invalid/o/r.git", ("prod",), "test")


async def test_queued_run_is_already_pending(tmp_path: Path) -> None:
    github, git = RecordingGitHub(), BlockedGit()
    runner = precheck_runs(github, git, tmp_path)
    first, second = plan(1), plan(2)
    assert runner.schedule(first) == {"prod": Submitted.STARTED}
    assert runner.schedule(second) == {"prod": Submitted.STARTED}
    await asyncio.sleep(0.2)
    assert runner.queue.depth == 1  # PR 2 waits for the only worker...
    assert (second.head_sha, "fluxwarden/prod", "pending") in github.statuses  # ...yet GitHub already shows it pending
    assert "fluxwarden:precheck:prod" in github.comments
    git.release.set()
    await runner.queue.drain(timeout=10)
    assert [s for s in github.statuses if s[0] == second.head_sha] == [(second.head_sha, "fluxwarden/prod", "pending"), (second.head_sha, "fluxwarden/prod", "error")]


def test_links_point_at_the_repository_host() -> None:
    from handlers.precheck import blob_base

    ghe = PrecheckPlan("o/r", 1, "a" * 40, "main", "https://ghe.example.com/o/r.git", ("prod",), "t")
    assert blob_base(ghe) == f"https://ghe.example.com/o/r/blob/{'a' * 40}"
    local = PrecheckPlan("o/r", 1, "a" * 40, "main", "/srv/git/r.git", ("prod",), "t")
    assert blob_base(local) == f"https://github.com/o/r/blob/{'a' * 40}"


class FlakyGitHub(RecordingGitHub):
    """Refuses statuses and comments while `down` (as the adapter does once its retries are spent)."""

    down: bool = True

    def upsert_comments(self, repo: str, number: int, marker: str, bodies: list[str]) -> list[int]:
        from bot.engine.errors import InfraError

        if self.down:
            raise InfraError("GitHub 500")
        return super().upsert_comments(repo, number, marker, bodies)

    def set_status(self, repo: str, sha: str, context: str, state: str, description: str, target_url: str | None = None) -> None:
        from bot.engine.errors import InfraError

        if self.down:
            raise InfraError("GitHub 500")
        super().set_status(repo, sha, context, state, description, target_url)


async def test_a_refused_final_state_is_written_again_and_the_run_counts_as_busy_meanwhile(tmp_path: Path) -> None:
    github, git = FlakyGitHub(), BlockedGit()
    git.release.set()  # the run ends at once (an `error` status: the fetch fails)
    runner = precheck_runs(github, git, tmp_path, final_retry=0.05)
    p = plan(1)
    key = PrecheckKey("o/r", 1, "prod")
    runner.schedule(p)
    await runner.queue.drain(timeout=10)
    assert github.statuses == [] and not runner.queue.running(key, p.head_sha)
    assert runner.busy(key, p.head_sha), "still writing its final state: a sweep must not re-run it"
    await asyncio.sleep(0.3)  # a few attempts while GitHub is down
    github.down = False
    for _ in range(100):
        if github.statuses:
            break
        await asyncio.sleep(0.05)
    assert github.statuses == [(p.head_sha, "fluxwarden/prod", "error")]
    await asyncio.sleep(0.05)
    assert not runner.busy(key, p.head_sha)
    # A newer run of the same PR and cluster cancels a pending rewrite (it writes its own state).
    github.down = True
    runner.schedule(p)
    await runner.queue.drain(timeout=10)
    assert runner.busy(key, p.head_sha)
    newer = PrecheckPlan("o/r", 1, "f" * 40, "main", "https://example.invalid/o/r.git", ("prod",), "test")
    runner.schedule(newer)
    await asyncio.sleep(0)
    assert not runner.busy(key, p.head_sha)
    await runner.queue.close()
    await runner.close()
