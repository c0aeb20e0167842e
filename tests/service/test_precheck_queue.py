"""A run waiting for a worker already shows its pending status and "running" comment (so a crash cannot lose it).

The GitHub and git sides are in-memory implementations of the small interfaces the handler owns
(handlers/context.py PrecheckGitHub, handlers/precheck.py PrecheckGit), in the style of Prow's plugin clients;
the runs are handlers/precheck_runs.py's PrecheckRuns on bot/service/runs.py's RunQueue.
"""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path

from bot.engine.chatops.jobs import PrecheckKey
from bot.service.metrics import new_metrics
from bot.service.runs import RunQueue, Submitted
from handlers.precheck_runs import PrecheckRuns
from handlers.precheck import Precheck, PrecheckPlan, running_state
from tests.fakes.context import MemoryGit, MemoryGitHub


def precheck_runs(github: MemoryGitHub, git: MemoryGit, tmp_path: Path, final_retry: float = 5.0) -> PrecheckRuns:
    metrics = new_metrics()
    precheck = Precheck(github=github, git=git, live=None, metrics=metrics, cache_dir=tmp_path)
    return PrecheckRuns(precheck, RunQueue(workers=1, max_queued=10), metrics, final_retry=final_retry)


def plan(number: int) -> PrecheckPlan:
    return PrecheckPlan("o/r", number, f"{number:040x}", "main", "https://example.invalid/o/r.git", ("prod",), "test")


async def test_queued_run_is_already_pending(tmp_path: Path) -> None:
    github, git = MemoryGitHub(), MemoryGit(gate=threading.Event())  # every fetch waits, then fails (an `error` status)
    runner = precheck_runs(github, git, tmp_path)
    first, second = plan(1), plan(2)
    assert runner.schedule(first) == {"prod": Submitted.STARTED}
    assert runner.schedule(second) == {"prod": Submitted.STARTED}
    await asyncio.sleep(0.2)
    assert runner.queue.depth == 1  # PR 2 waits for the only worker...
    assert github.states(second.head_sha) == ["pending"]  # ...yet GitHub already shows it pending
    assert github.reply(2, "fluxwarden:precheck:prod") == running_state(second, "prod").comment[0]
    git.gate.set()
    await runner.queue.drain(timeout=10)
    assert github.states(second.head_sha) == ["pending", "error"]


def test_links_point_at_the_repository_host() -> None:
    from handlers.precheck import blob_base

    ghe = PrecheckPlan("o/r", 1, "a" * 40, "main", "https://ghe.example.com/o/r.git", ("prod",), "t")
    assert blob_base(ghe) == f"https://ghe.example.com/o/r/blob/{'a' * 40}"
    local = PrecheckPlan("o/r", 1, "a" * 40, "main", "/srv/git/r.git", ("prod",), "t")
    assert blob_base(local) == f"https://github.com/o/r/blob/{'a' * 40}"


async def test_a_refused_final_state_is_written_again_and_the_run_counts_as_busy_meanwhile(tmp_path: Path) -> None:
    github = MemoryGitHub(down={"comment", "status"})  # refused as the adapter refuses once its retries are spent
    runner = precheck_runs(github, MemoryGit(), tmp_path, final_retry=0.05)  # the run ends at once: the fetch fails (`error`)
    p = plan(1)
    key = PrecheckKey("o/r", 1, "prod")
    runner.schedule(p)
    await runner.queue.drain(timeout=10)
    assert github.status_list == {} and not runner.queue.running(key, p.version)
    assert runner.busy(key, p.version), "still writing its final state: a sweep must not re-run it"
    await asyncio.sleep(0.3)  # a few attempts while GitHub is down
    github.down.clear()
    for _ in range(100):
        if github.status_list:
            break
        await asyncio.sleep(0.05)
    assert github.states(p.head_sha) == ["error"]
    await asyncio.sleep(0.05)
    assert not runner.busy(key, p.version)
    # A newer run of the same PR and cluster cancels a pending rewrite (it writes its own state).
    github.down.update({"comment", "status"})
    runner.schedule(p)
    await runner.queue.drain(timeout=10)
    assert runner.busy(key, p.version)
    newer = PrecheckPlan("o/r", 1, "f" * 40, "main", "https://example.invalid/o/r.git", ("prod",), "test")
    runner.schedule(newer)
    await asyncio.sleep(0)
    assert not runner.busy(key, p.version)
    await runner.queue.close()
    await runner.close()
