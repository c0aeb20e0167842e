"""A retargeted PR must not keep a verdict computed against its old base: statuses are bound to the base they judged."""

from __future__ import annotations

import asyncio

from tests.fluxrepo import dump
from tests.hardening.harness import REPO, Origin, evil_branch, pr_payload, wait_for


def _retarget_payload(number: int, head: str, old_base: str, old_sha: str, new_sha: str) -> dict:
    """The `edited` delivery GitHub sends when a PR's base branch changes (base now main, `changes.base` the old one)."""
    data = pr_payload(number, head, new_sha)
    data["action"] = "edited"
    data["changes"] = {"base": {"ref": {"from": old_base}, "sha": {"from": old_sha}}}
    return data


async def test_retargeting_a_green_pr_to_main_never_leaves_prod_green(start, origin: Origin, fake) -> None:
    # The attack. A branch `evil` (write access) repoints prod at a clean directory and puts a dependency
    # cycle where main's prod really is; a PR against `evil` is judged under evil's `.fluxwarden.yaml`: green.
    evil, head = evil_branch(origin, 1)
    pull = fake.add_pull(REPO, head_sha=head, base_ref="evil", base_sha=evil, head_ref="pr-1", author="alice")
    opened = pr_payload(pull.number, head, evil)
    opened["pull_request"]["base"]["ref"] = "evil"

    async with start() as h:
        await h.deliver("pull_request", opened)
        await h.settle(timeout=120)
        assert h.states(head) == ["pending", "success"]  # judged against evil, where prod is clean
        assert "(vs evil)" in fake.statuses_for(REPO, head)[0].description

        # Retarget to main: GitHub changes the base, then delivers `edited` with `changes.base`.
        pull.base_ref, pull.base_sha = "main", origin.main
        await h.deliver("pull_request", _retarget_payload(pull.number, head, "evil", evil, origin.main))
        # At once (before the new run has rendered anything), the head's prod status is no longer green.
        marked = lambda: any("judged against evil; the PR now targets main" in s.description for s in fake.statuses_for(REPO, head))  # noqa: E731
        assert await wait_for(marked, timeout=10)
        await h.settle(timeout=120)

    states = h.states(head)
    assert states[-1] == "failure", states  # against main, the head adds a dependency cycle to prod
    after = states[states.index("success") + 1:]
    assert after[0] == "pending" and "success" not in after, states
    newest = fake.statuses_for(REPO, head)[0]
    assert newest.description.endswith("(vs main)")
    [comment] = h.comments(pull.number)
    assert "Judged against `main`." in comment.body and "`dependency-cycle`" in comment.body


async def test_a_run_that_finishes_after_the_retarget_does_not_write_its_verdict(start, origin: Origin, fake) -> None:
    # The PR is retargeted on GitHub while its run against the old base is under way, and the `edited`
    # delivery is lost: the finishing run re-reads the PR and writes pending, never its old-base green.
    head = origin.pull(2, {"apps/app.yaml": dump({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "app", "namespace": "default"}, "data": {"greeting": "hi"}})})
    origin.publish(origin.main, "refs/heads/release")
    pull = fake.add_pull(REPO, head_sha=head, base_ref="release", base_sha=origin.main, head_ref="pr-2", author="alice")
    opened = pr_payload(pull.number, head, origin.main)
    opened["pull_request"]["base"]["ref"] = "release"
    async with start() as h:
        pull.base_ref = "main"  # retargeted before the run writes its result
        await h.deliver("pull_request", opened)
        await h.settle(timeout=120)
        await asyncio.sleep(0)
    states = h.states(head)
    assert "success" not in states and states[-1] == "pending", states
    assert "judged against release; the PR now targets main" in fake.statuses_for(REPO, head)[0].description
