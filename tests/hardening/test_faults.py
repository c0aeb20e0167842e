"""Faults during a run: GitHub 5xx, rate limits and timeouts, git fetch failure, kustomize killed or timed out.

Each ends with a correct final status (never `success` by accident, never left `pending`) and exactly one
comment per cluster marker.
"""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path

import pytest

from tests.fluxrepo import dump, obj
from tests.hardening.harness import (
    BOT,
    BOT_TOKEN,
    REPO,
    Origin,
    comment_payload,
    fake_traffic,
    kustomize_wrapper,
    open_pull,
    pr_payload,
    record_figure,
    wait_for,
)


def change(origin: Origin, number: int = 1, greeting: str = "bye") -> str:
    """A harmless PR: the ConfigMap's data changes."""
    return origin.pull(number, {"apps/app.yaml": dump(obj("v1", "ConfigMap", "app", "default", data={"greeting": greeting}))})


@pytest.fixture
def pr(origin: Origin, fake) -> str:
    head = change(origin)
    open_pull(fake, origin, 1, head)
    return head


def one_comment(h, number: int = 1) -> str:
    comments = h.comments(number)
    assert len(comments) == 1, [c.body[:80] for c in comments]
    return comments[0].body


async def test_github_5xx_bursts_are_retried(start, origin: Origin, fake, pr: str) -> None:
    fake.inject("GET", r"/issues/1/comments$", status=500, times=2)
    fake.inject("POST", r"/issues/1/comments$", status=502, times=3)
    fake.inject("POST", r"/statuses/", status=503, times=3)
    fake.inject("PATCH", r"/issues/comments/", status=504, times=3)
    async with start() as h:
        await h.deliver("pull_request", pr_payload(1, pr, origin.main))
        await h.settle()
        assert h.states(pr) == ["pending", "success"]
        assert "new warning" in one_comment(h) or "no new" in one_comment(h) or "✅" in one_comment(h)
        failed = [r.status for r in fake.requests if r.status >= 500]
        assert sorted(failed) == [500, 500, 502, 502, 502, 503, 503, 503, 504, 504, 504]
        assert await h.metric("fluxwarden_github_api_errors_total") == 0  # every call got through in the end
        assert await h.healthy()


async def test_github_rate_limits_are_waited_out(start, origin: Origin, fake, pr: str) -> None:
    fake.inject("POST", r"/statuses/", rate_limit="primary", reset_in=1.0)
    fake.inject("PATCH", r"/issues/comments/", rate_limit="secondary", retry_after=1.0)
    started = time.monotonic()
    async with start() as h:
        await h.deliver("pull_request", pr_payload(1, pr, origin.main))
        await h.settle()
        assert h.states(pr) == ["pending", "success"]
        one_comment(h)
        assert time.monotonic() - started >= 1.0
        assert {r.status for r in fake.requests if r.fault in ("rate_limit", "secondary_rate_limit", "quota")} == {403}


async def test_github_timeouts_leave_no_duplicate_comment(start, origin: Origin, fake, pr: str) -> None:
    """A create that times out still happens on GitHub, after the retry made a second comment.

    When it lands before the run's final reconcile, that reconcile deletes it; when it lands later (here: 3 s
    late, the run takes ~1 s), the stale "running" copy stays until the PR's next reconcile (any delivery for
    it, `/precheck`, or a restart) deletes it. Statuses are unaffected: a retried status is idempotent.
    """
    fake.inject("POST", r"/issues/1/comments$", delay=3.0)
    async with start(adapter={"timeout": 1}) as h:
        await h.deliver("pull_request", pr_payload(1, pr, origin.main))
        await h.settle()
        assert h.states(pr) == ["pending", "success"]
        await wait_for(lambda: len(fake.find_effects("POST", r"/issues/1/comments$")) == 2, timeout=10)
        assert len(h.comments(1)) in (1, 2)
        made = fake.add_comment(REPO, 1, "/precheck prod", user="bob")
        await h.deliver("issue_comment", comment_payload(1, made.id, "/precheck prod"))
        await h.settle()
        one_comment(h)
        assert h.states(pr) == ["pending", "success", "pending", "success"]
        assert len(fake.find_effects("DELETE", r"/issues/comments/")) == 1, "the duplicate was deleted"


OUTAGE_SECONDS = float(os.environ.get("FLUXWARDEN_OUTAGE_SECONDS", "3"))  # the attack: 40


async def test_github_outage_at_the_final_write_leaves_nothing_pending(start, origin: Origin, fake, pr: str, tmp_path: Path, monkeypatch) -> None:
    """GitHub answers 500 to everything for OUTAGE_SECONDS from the run's final write on, far past the adapter's retries.

    Before: the final status stayed `pending` (for 9 minutes and more in the attack) until some process
    restarted. Now the replica that has the result writes it again, with backoff, until GitHub takes it.
    """
    started = tmp_path / "kustomize-started"
    wrapper = kustomize_wrapper(tmp_path, "mark", f'/bin/touch {started}\nreal "$@"\n')
    monkeypatch.setenv("FLUXWARDEN_KUSTOMIZE", str(wrapper))
    async with start(final_retry_seconds=0.5) as h:
        await h.deliver("pull_request", pr_payload(1, pr, origin.main))
        assert await wait_for(started.exists, timeout=30)
        outage = fake.inject("*", r"^/(api/v3/)?repos/", status=500, for_seconds=OUTAGE_SECONDS)  # from the final write on
        await h.settle()
        assert h.states(pr) == ["pending"], "the final status could not be set during the outage"
        assert await h.metric("fluxwarden_github_api_errors_total", operation="status") >= 1
        assert await wait_for(lambda: h.states(pr)[-1:] == ["success"], timeout=OUTAGE_SECONDS * 2 + 30)
        back = outage.started + OUTAGE_SECONDS
        written = time.monotonic()
        assert h.states(pr) == ["pending", "success"]
        # The comment too (written again on its own schedule when the status got through first).
        assert await wait_for(lambda: "is running" not in one_comment(h), timeout=OUTAGE_SECONDS * 2 + 30)
        assert outage.hits > 0 and written >= back
        record_figure("github_outage_seconds", OUTAGE_SECONDS, "s")
        record_figure("final_status_after_github_back_seconds", written - back, "s")
        record_figure("pending_statuses_left_after_outage", sum(s == "pending" for s in h.states(pr)[-1:]), "")
        assert await h.healthy()


async def test_a_single_replica_sweeps_its_own_stale_pending_status(start, origin: Origin, fake, pr: str) -> None:
    """No leader election, no restart: a status left pending (older than run_timeout + grace) with no run behind it is re-run."""
    async with start(sweep_seconds=0.3) as h:
        assert h.states(pr) == []  # the start-up scan found nothing
        fake.add_status(REPO, pr, state="pending", context="fluxwarden/prod", description="precheck of prod running", creator=BOT, created_at=time.time() - 3600)
        assert await wait_for(lambda: h.states(pr)[-1:] == ["success"], timeout=60)
        assert h.states(pr) == ["pending", "pending", "success"]
        one_comment(h)
        # A fresh pending status (a run another process may still be doing) is left alone.
        fresh = change(origin, 2, "fresh")
        open_pull(fake, origin, 2, fresh)
        fake.add_status(REPO, fresh, state="pending", context="fluxwarden/prod", description="precheck of prod running", creator=BOT)
        await asyncio.sleep(1.5)
        assert h.states(fresh) == ["pending"]


async def test_git_fetch_failure_is_an_error_then_recovers(start, origin: Origin, fake, pr: str) -> None:
    hidden = origin.bare.with_name("origin-away.git")
    origin.bare.rename(hidden)
    async with start() as h:
        await h.deliver("pull_request", pr_payload(1, pr, origin.main))
        await h.settle()
        assert h.states(pr) == ["pending", "error"]
        body = one_comment(h)
        assert "could not run" in body and "infrastructure error" in body
        assert BOT_TOKEN not in fake_traffic(fake)
        hidden.rename(origin.bare)
        await h.deliver("pull_request", pr_payload(1, pr, origin.main, "synchronize"))
        await h.settle()
        assert h.states(pr) == ["pending", "error", "pending", "success"]
        one_comment(h)


@pytest.mark.parametrize(
    "script,limits,words",
    [
        pytest.param("kill -9 $$\n", {}, "kustomize was killed by signal 9", id="killed"),
        pytest.param("exec /bin/sleep 20\n", {"kustomize_timeout": 0.5}, "timed out after 0.5s", id="timed-out"),
    ],
)
async def test_kustomize_stopped_is_an_error_never_success(start, origin: Origin, fake, pr: str, tmp_path: Path, monkeypatch, script: str, limits: dict, words: str) -> None:
    """Killed (OOM killer, a signal) or timed out on both sides pairs up as "pre-existing": still not a verdict."""
    monkeypatch.setenv("FLUXWARDEN_KUSTOMIZE", str(kustomize_wrapper(tmp_path, "stopped", script)))
    async with start(**limits) as h:
        await h.deliver("pull_request", pr_payload(1, pr, origin.main))
        await h.settle()
        assert h.states(pr) == ["pending", "error"]
        body = one_comment(h)
        assert words in body and "Not a verdict" in body
        assert await h.healthy()
        # kustomize is fine again: a /precheck gives the verdict, in the same comment.
        monkeypatch.delenv("FLUXWARDEN_KUSTOMIZE")
        await h.deliver("issue_comment", comment_payload(1, fake.add_comment(REPO, 1, "/precheck prod", user="bob").id, "/precheck prod"))
        await h.settle()
        assert h.states(pr) == ["pending", "error", "pending", "success"]
        assert "Not a verdict" not in one_comment(h)


async def test_a_build_timeout_on_the_head_only_is_an_error_not_a_failure(start, origin: Origin, fake, tmp_path: Path, monkeypatch) -> None:
    """The base builds; the PR's tier times out. A timeout says nothing about the PR: `error` "Not a verdict".

    Before: the head's timeout was a *new* `render-failed` error, so the PR got `failure` "1 new error(s)",
    while docs/reliability.md promised `error` for a build stopped by a limit.
    """
    head = origin.pull(1, {
        "apps/slow.yaml": dump(obj("v1", "ConfigMap", "slow", "default", data={"marker": "SLOW-BUILD"})),
        "apps/kustomization.yaml": "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources: [app.yaml, slow.yaml]\n",
    })
    open_pull(fake, origin, 1, head)
    # DIR ($2) mirrors the tier's path with links to what its kustomization names: sleep past the timeout
    # when they reach the marker.
    wrapper = kustomize_wrapper(tmp_path, "slow-head", 'if /bin/grep -Rqs SLOW-BUILD "$2"; then exec /bin/sleep 20; fi\nreal "$@"\n')
    monkeypatch.setenv("FLUXWARDEN_KUSTOMIZE", str(wrapper))
    async with start(kustomize_timeout=1.0) as h:
        await h.deliver("pull_request", pr_payload(1, head, origin.main))
        await h.settle()
        assert h.states(head) == ["pending", "error"]
        (status,) = [s for s in fake.statuses_for(REPO, head) if s.state == "error"]
        assert "could not render" in status.description and "timed out after 1s" in status.description
        body = one_comment(h)
        assert "Not a verdict" in body and "timed out after 1s" in body


# -- the reads a command waits on (issue 23) ------------------------------------------------------

PERMISSION = r"/collaborators/bob/permission$"  # (not the bot's own read at start-up)


async def comment_precheck(h, fake) -> tuple[float, list[str]]:
    """Deliver `/precheck prod` by bob; the seconds until its handler is done, and the replies to it."""
    made = fake.add_comment(REPO, 1, "/precheck prod", user="bob")
    started = time.monotonic()
    await h.deliver("issue_comment", comment_payload(1, made.id, "/precheck prod"))
    await h.settle()
    return time.monotonic() - started, [c.body for c in h.comments(1, marker=f"fluxwarden:reply:{made.id}")]


async def test_a_burst_of_5xx_on_the_permission_read_is_retried_and_the_precheck_runs(start, origin: Origin, fake, pr: str) -> None:
    """10 × 500 on the permission read: more than the adapter's own retries (5 requests), so the read is tried again with the final writes' backoff."""
    fake.inject("GET", PERMISSION, status=500, times=10)
    async with start(final_retry_seconds=0.2) as h:
        _, replies = await comment_precheck(h, fake)
        assert h.states(pr) == ["pending", "success"] and not replies
        reads = fake.find_requests("GET", PERMISSION)
        assert [r.status for r in reads] == [500] * 10 + [200]


async def test_a_permission_read_that_keeps_failing_says_try_again_after_the_bound(start, origin: Origin, fake, pr: str) -> None:
    fake.inject("GET", PERMISSION, status=500, for_seconds=120)
    async with start(final_retry_seconds=0.2, read_retry_seconds=3.0) as h:
        seconds, [reply] = await comment_precheck(h, fake)
        assert h.states(pr) == [], "nothing was run"
        assert "GitHub did not answer while checking your permission" in reply
        assert 3.0 <= seconds < 3.0 + 8.0, seconds  # the bound, plus at most one last read (the adapter's own retries)
        assert len(fake.find_requests("GET", PERMISSION)) >= 3 * 5  # several reads, each with the adapter's retries
        record_figure("permission_read_given_up_after_seconds", seconds, "s")


@pytest.mark.parametrize("status", [403, 404])
async def test_an_answer_on_the_permission_read_is_not_retried(start, origin: Origin, fake, pr: str, status: int) -> None:
    fake.inject("GET", PERMISSION, status=status, times=1)
    async with start(final_retry_seconds=5.0) as h:
        seconds, replies = await comment_precheck(h, fake)
        assert len(fake.find_requests("GET", PERMISSION)) == 1
        assert seconds < 5.0 and h.states(pr) == []
        assert replies == [reply for reply in replies if ("please try again" if status == 403 else "needs write") in reply] != []


async def test_a_burst_of_5xx_on_the_pull_request_read_is_retried(start, origin: Origin, fake, pr: str) -> None:
    fake.inject("GET", r"/pulls/1$", status=502, times=10)
    async with start(final_retry_seconds=0.2) as h:
        await comment_precheck(h, fake)
        assert h.states(pr) == ["pending", "success"]
        assert sum(r.status == 502 for r in fake.find_requests("GET", r"/pulls/1$")) == 10
