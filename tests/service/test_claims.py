"""Cross-replica run claims (bot/service/claims.py): GitHub's statuses decide which replica runs a precheck.

Unit tests of the claim rules on synthetic statuses; the runner with an in-memory GitHub (release at
shutdown, superseded heads); and whole replicas — two `build_service` instances with leader election on a
fake API server, sharing one fake GitHub — receiving the same delivery, or starting together next to a
pending status.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, AsyncIterator, Callable

import pytest
from aiohttp.test_utils import TestClient, TestServer

from bot.engine.core.errors import UserError
from bot.adapters.github import GitHubAdapter, GitHubAuth
from bot.engine.chatops.github_models import StatusInfo
from bot.service.metrics import new_metrics
from bot.service.runs import RunQueue
from handlers.precheck_runs import PrecheckRuns
from bot.service.app import Service, build_service
from bot.service.settings import ServiceConfig
from bot.engine.chatops.settings import ClusterPolicy, LeaderElection, RepoPolicy
from bot.service.claims import UNTAGGED, Claims, parse_claim, pod_of
from handlers.precheck import Precheck, PrecheckPlan, error_state, running_state
from tests.fakes.context import MemoryGit, MemoryGitHub, pull_info
from tests.fakes.github import FakeGitHub
from tests.fakes.kube import FakeKube
from tests.service.test_app import BOT_TOKEN, REPO, SECRET, Origin, payload, sign

NOW = 1_790_000_000.0
TTL = 960.0
PROD = "fluxwarden/prod"


def st(state: str, description: str, age: float, context: str = PROD) -> StatusInfo:
    return StatusInfo(state=state, context=context, description=description, created_at=NOW - age, creator="fluxwarden-bot")


def claims(replica: str = "alpha-aaaaa", pod: str | None = None) -> Claims:
    return Claims(github=None, replica=replica, ttl=TTL, pod=pod, clock=lambda: NOW)  # type: ignore[arg-type]


# ---------------------------------------------------------------------------------------- the rules


def test_owner_is_the_oldest_live_claim_of_the_pending_episode() -> None:
    c = claims()
    assert c.owner([], PROD) is None and not c.abandoned([], PROD)
    assert c.owner([st("pending", "running [fw:bravo-bbbbb]", 5)], PROD) == "bravo-bbbbb"
    # Two replicas raced: both claims are live, the first written (the older, lower in the list) owns it.
    raced = [st("pending", "running [fw:bravo-bbbbb]", 1), st("pending", "running [fw:charlie-ccccc]", 1)]
    assert c.owner(raced, PROD) == "charlie-ccccc"
    # A finished run ends the episode: claims below it are history.
    assert c.owner([st("pending", "x [fw:bravo-bbbbb]", 1), st("success", "ok", 2), st("pending", "x [fw:charlie-ccccc]", 3)], PROD) == "bravo-bbbbb"
    assert c.owner([st("success", "ok", 2), st("pending", "x [fw:charlie-ccccc]", 3)], PROD) is None
    # Other contexts do not count.
    assert c.owner([st("pending", "x [fw:bravo-bbbbb]", 1, "fluxwarden/dev")], PROD) is None


def test_stale_released_and_dead_process_claims_are_abandoned() -> None:
    c = claims()
    stale = [st("pending", "running [fw:bravo-bbbbb]", TTL + 1)]
    assert c.owner(stale, PROD) is None and c.abandoned(stale, PROD)
    fresh = [st("pending", "running [fw:bravo-bbbbb]", TTL - 1)]
    assert c.owner(fresh, PROD) == "bravo-bbbbb" and not c.abandoned(fresh, PROD)
    released = [st("pending", "interrupted [fw:bravo-bbbbb:released]", 1), st("pending", "running [fw:bravo-bbbbb]", 30)]
    assert c.owner(released, PROD) is None and c.abandoned(released, PROD)
    # A release voids that replica's claims only.
    assert c.owner([st("pending", "i [fw:bravo-bbbbb:released]", 1), st("pending", "r [fw:charlie-ccccc]", 9)], PROD) == "charlie-ccccc"
    # An earlier process of this very pod is gone (a pod runs one Fluxwarden).
    mine = claims("fluxwarden-7d9c5b-x2kq9-new01", pod="fluxwarden-7d9c5b-x2kq9")
    earlier = [st("pending", "running [fw:fluxwarden-7d9c5b-x2kq9-old01]", 5)]
    assert mine.owner(earlier, PROD) is None and mine.abandoned(earlier, PROD)
    other_pod = [st("pending", "running [fw:fluxwarden-7d9c5b-zzzzz-old01]", 5)]
    assert mine.owner(other_pod, PROD) == "fluxwarden-7d9c5b-zzzzz-old01"
    assert claims("fluxwarden-7d9c5b-x2kq9-new01").owner(earlier, PROD) is not None, "pod unknown: no such inference"
    # Untagged pending (a Fluxwarden without claims): live while fresh.
    assert c.owner([st("pending", "precheck of prod running", 5)], PROD) == UNTAGGED
    assert c.abandoned([st("pending", "precheck of prod running", TTL + 5)], PROD)
    assert not c.abandoned([st("success", "fine", TTL + 5)], PROD)


def test_tags_fit_githubs_140_characters_and_parse_back() -> None:
    c = claims("fluxwarden-7d9c5b-x2kq9-a1b2c")
    tagged = c.tag("precheck of " + "x" * 200 + " running")
    assert len(tagged) <= 140 and tagged.endswith(" [fw:fluxwarden-7d9c5b-x2kq9-a1b2c]")
    claim = parse_claim(st("pending", tagged, 3), NOW)
    assert (claim.replica, claim.released, claim.age) == ("fluxwarden-7d9c5b-x2kq9-a1b2c", False, 3)
    assert parse_claim(st("pending", c.tag("stopped", released=True), 0), NOW).released
    assert pod_of("fluxwarden-7d9c5b-x2kq9-a1b2c") == "fluxwarden-7d9c5b-x2kq9"
    with pytest.raises(ValueError):
        Claims(github=None, replica="Not Valid", ttl=1)  # type: ignore[arg-type]


# ---------------------------------------------------------------------------------------- the runner


PLAN = PrecheckPlan(repo=REPO, number=7, head_sha="a" * 40, base_ref="main", clone_url="x", clusters=("prod",), trigger="test")


def memory_github(head: str) -> MemoryGitHub:
    """PR 7 at `head`, no statuses yet."""
    return MemoryGitHub(pulls={7: pull_info(head_sha=head)})


def runner(github: MemoryGitHub, tmp_path: Path, reviewer: Callable[..., Any], replica: str = "alpha-aaaaa") -> PrecheckRuns:
    """The runs of one replica whose reviews `reviewer` does (blocking, in the review thread, as review_repository)."""
    metrics = new_metrics()
    git = MemoryGit(refs={"refs/pull/7/head": PLAN.head_sha})
    precheck = Precheck(github=github, git=git, live=None, metrics=metrics, cache_dir=tmp_path, reviewer=reviewer)
    return PrecheckRuns(precheck, RunQueue(2, 10), metrics, claims=Claims(github, replica, ttl=TTL))


async def test_a_run_claimed_elsewhere_writes_nothing(tmp_path: Path) -> None:
    github = memory_github(PLAN.head_sha)
    github.set_status(REPO, PLAN.head_sha, PROD, "pending", "precheck of prod running [fw:bravo-bbbbb]")

    reviewed: list[str] = []

    def review(*_: Any, **__: Any) -> Any:
        reviewed.append("ran")
        raise AssertionError("must not run")

    r = runner(github, tmp_path, review)
    r.schedule(PLAN)
    await r.queue.drain(5)
    assert len(github.status_list[PLAN.head_sha]) == 1 and github.comments == {} and reviewed == []


async def test_shutdown_mid_run_releases_the_claim(tmp_path: Path) -> None:
    github = memory_github(PLAN.head_sha)
    started, released = threading.Event(), threading.Event()

    def review(*_: Any, **__: Any) -> Any:
        started.set()
        released.wait(10)  # not done before the replica is stopped
        raise UserError("stopped")

    r = runner(github, tmp_path, review)
    r.schedule(PLAN)
    assert await asyncio.to_thread(started.wait, 5)
    statuses = github.status_list[PLAN.head_sha]
    assert [s.description for s in statuses] == ["precheck of prod running [fw:alpha-aaaaa]"]
    assert list(github.comments.values()) == [list(running_state(PLAN, "prod").comment)]
    await r.queue.close()  # what the server's cleanup does on SIGTERM
    assert statuses[0].description.endswith("[fw:alpha-aaaaa:released]") and statuses[0].state == "pending"
    assert Claims(github, "bravo-bbbbb", ttl=TTL).abandoned(statuses, PROD), "another replica may re-run it at once"
    released.set()  # the review thread ends (the service kills its builds at shutdown)


async def test_a_superseded_run_leaves_the_comment_to_the_new_head(tmp_path: Path) -> None:
    github = memory_github("b" * 40)  # a newer push, run by another replica

    def review(*_: Any, **__: Any) -> Any:
        raise UserError("the repository is broken")

    r = runner(github, tmp_path, review)
    r.schedule(PLAN)
    await r.queue.drain(5)
    assert github.states(PLAN.head_sha) == ["pending"] and list(github.comments.values()) == [list(running_state(PLAN, "prod").comment)]
    github.pulls[7] = pull_info(head_sha=PLAN.head_sha)  # the same again, head unchanged: the result is written
    github.status_list.clear()
    r.schedule(PLAN)
    await r.queue.drain(5)
    assert github.states(PLAN.head_sha) == ["pending", "failure"]
    assert github.reply(7, "fluxwarden:precheck:prod") == error_state("prod", "the repository is broken", infrastructure=False).comment[0]


# ---------------------------------------------------------------------------------------- whole replicas


class Replicas:
    def __init__(self, fake: FakeGitHub, origin: Origin, services: dict[str, Service], clients: dict[str, TestClient]) -> None:
        self.fake, self.origin, self.services, self.clients = fake, origin, services, clients

    async def deliver(self, name: str, event: str, data: dict[str, Any], delivery: str) -> int:
        body = json.dumps(data).encode()
        response = await self.clients[name].post("/webhook", data=body, headers={
            "X-GitHub-Event": event, "X-GitHub-Delivery": delivery, "X-Hub-Signature-256": sign(body), "Content-Type": "application/json",
        })
        return response.status

    async def settle(self) -> None:
        await asyncio.gather(*(s.webhook.settle(timeout=120) for s in self.services.values()))

    def history(self, context: str) -> list[StatusInfo]:
        """Oldest first."""
        return [s for s in reversed(self.fake.statuses_for(REPO, self.origin.head)) if s.context == context]

    def runs(self, cluster: str) -> dict[str, float]:
        out = {}
        for name, service in self.services.items():
            total = 0.0
            for metric in service.bot.metrics.registry.collect():
                if metric.name == "fluxwarden_runs":
                    total += sum(s.value for s in metric.samples if s.name.endswith("_total") and s.labels.get("cluster") == cluster)
            out[name] = total
        return out

    def precheck_posts(self, cluster: str) -> list[Any]:
        return [e for e in self.fake.find_effects("POST", r"/issues/7/comments$") if e.json["body"].startswith(f"<!-- fluxwarden:precheck:{cluster} -->")]


@asynccontextmanager
async def replicas(tmp_path: Path, names: tuple[str, ...], *, setup: Callable[[FakeGitHub, Origin], None] | None = None,
                   sweep: float = 0, together: bool = False) -> AsyncIterator[Replicas]:
    origin = Origin(tmp_path)
    async with FakeKube() as kube, FakeGitHub() as fake:
        fake.add_user("fluxwarden-bot", token=BOT_TOKEN, type="Bot")
        repo = fake.add_repo(REPO, clone_url=str(origin.bare))
        repo.next_number = 7
        fake.add_pull(REPO, head_sha=origin.head, base_sha=origin.main, head_ref="feat/cdi-tier-order", author="alice")
        fake.set_permission(REPO, "alice", "write")
        if setup is not None:
            setup(fake, origin)
        kubeconfig = kube.kubeconfig(tmp_path / "kubeconfig")
        services = {}
        for name in names:
            election = LeaderElection(
                enabled=True, namespace="fluxwarden", kubeconfig=str(kubeconfig), identity=f"{name}-{name[0] * 5}",
                lease_seconds=2, renew_seconds=1.0, retry_seconds=0.2, sweep_seconds=sweep,
            )
            config = ServiceConfig(
                webhook_secret=SECRET,
                github=GitHubAuth(token=BOT_TOKEN, api_url=fake.base_url),
                repos=(RepoPolicy(REPO, clusters=(ClusterPolicy("dev"), ClusterPolicy("prod")), clone_url=str(origin.bare)),),
                cache_dir=tmp_path / f"cache-{name}",
                leader_election=election,
            )
            services[name] = build_service(config, github=GitHubAdapter(config.github, min_write_interval=0, backoff=0.05, bot_login="fluxwarden-bot"))
        clients = {name: TestClient(TestServer(s.app())) for name, s in services.items()}
        try:
            if together:
                await asyncio.gather(*(c.start_server() for c in clients.values()))
            else:
                for c in clients.values():
                    await c.start_server()
            yield Replicas(fake, origin, services, clients)
        finally:
            for c in clients.values():
                await c.close()


async def test_two_replicas_receiving_the_same_delivery_run_it_once(tmp_path: Path) -> None:
    async with replicas(tmp_path, ("alpha", "bravo")) as r:
        data = payload("pull_request.opened", head=r.origin.head, base=r.origin.main)
        assert await asyncio.gather(r.deliver("alpha", "pull_request", data, "d-1"), r.deliver("bravo", "pull_request", data, "d-1")) == [202, 202]
        await r.settle()
        for cluster in ("dev", "prod"):
            history = r.history(f"fluxwarden/{cluster}")
            states = [s.state for s in history]
            assert states.count("success") == 1 and states[-1] == "success", states
            # The loser of a race wrote its claim and nothing else; usually it saw the winner's claim first.
            assert 1 <= states.count("pending") <= 2, states
            assert sum(r.runs(cluster).values()) == 1, r.runs(cluster)
            [post] = r.precheck_posts(cluster)
            [comment] = [c for c in r.fake.issue_comments(REPO, 7) if c.body.startswith(f"<!-- fluxwarden:precheck:{cluster} -->")]
            assert len(r.fake.find_effects("PATCH", rf"/issues/comments/{comment.id}$")) == 1
            assert "### ⏳" in post.json["body"] and "is running" not in comment.body


async def test_a_delivery_to_a_second_replica_while_the_first_runs_writes_nothing(tmp_path: Path) -> None:
    async with replicas(tmp_path, ("alpha", "bravo")) as r:
        data = payload("pull_request.opened", head=r.origin.head, base=r.origin.main)
        assert await r.deliver("alpha", "pull_request", data, "d-1") == 202
        deadline = time.monotonic() + 30
        while not all(any("[fw:alpha-aaaaa]" in s.description for s in r.history(f"fluxwarden/{c}")) for c in ("dev", "prod")):
            assert time.monotonic() < deadline
            await asyncio.sleep(0.01)
        assert await r.deliver("bravo", "pull_request", data, "d-1") == 202  # a redelivery, to the other replica
        await r.settle()
        for cluster in ("dev", "prod"):
            assert [s.state for s in r.history(f"fluxwarden/{cluster}")] == ["pending", "success"]
            assert not [s for s in r.history(f"fluxwarden/{cluster}") if "bravo" in s.description]
            assert r.runs(cluster) == {"alpha": 1, "bravo": 0}
            assert len(r.precheck_posts(cluster)) == 1


def _pending(description: str, age: float) -> Callable[[FakeGitHub, Origin], None]:
    def setup(fake: FakeGitHub, origin: Origin) -> None:
        fake.add_status(REPO, origin.head, state="pending", context=PROD, description=description, creator="fluxwarden-bot", created_at=time.time() - age)

    return setup


async def test_a_stale_pending_status_is_rerun_at_start(tmp_path: Path) -> None:
    async with replicas(tmp_path, ("alpha",), setup=_pending("precheck of prod running [fw:gone-zzzzz]", 7200)) as r:
        await r.settle()
        assert [s.state for s in r.history(PROD)] == ["pending", "pending", "success"]
        assert r.history("fluxwarden/dev") == []
        [comment] = [c for c in r.fake.issue_comments(REPO, 7) if c.body.startswith("<!-- fluxwarden:precheck:prod -->")]
        assert "is running" not in comment.body


async def test_a_live_claim_of_another_replica_is_not_rerun_at_start(tmp_path: Path) -> None:
    async with replicas(tmp_path, ("alpha",), setup=_pending("precheck of prod running [fw:busy-bbbbb]", 30)) as r:
        await r.settle()
        assert [s.state for s in r.history(PROD)] == ["pending"]
        assert r.fake.issue_comments(REPO, 7) == []


async def test_a_released_claim_is_rerun_at_start(tmp_path: Path) -> None:
    def setup(fake: FakeGitHub, origin: Origin) -> None:
        _pending("precheck of prod running [fw:old-ooooo]", 60)(fake, origin)
        _pending("precheck of prod interrupted (replica stopped); re-run pending [fw:old-ooooo:released]", 50)(fake, origin)

    async with replicas(tmp_path, ("alpha",), setup=setup) as r:
        await r.settle()
        assert [s.state for s in r.history(PROD)][-1] == "success"
        assert r.runs("prod") == {"alpha": 1}


async def test_two_replicas_starting_together_rerun_a_stale_pending_once(tmp_path: Path) -> None:
    async with replicas(tmp_path, ("alpha", "bravo"), setup=_pending("precheck of prod running [fw:gone-zzzzz]", 7200), together=True) as r:
        await r.settle()
        states = [s.state for s in r.history(PROD)]
        assert states.count("success") == 1 and states[-1] == "success", states
        assert sum(r.runs("prod").values()) == 1, r.runs("prod")
        assert len(r.precheck_posts("prod")) == 1


async def test_the_leader_sweeps_up_what_a_stopped_replica_released(tmp_path: Path) -> None:
    async with replicas(tmp_path, ("alpha",), sweep=0.3) as r:
        await r.settle()
        deadline = time.monotonic() + 10
        while not r.services["alpha"].is_leader:
            assert time.monotonic() < deadline
            await asyncio.sleep(0.02)
        # A replica that is gone now had claimed prod, and released it when it was stopped.
        _pending("precheck of prod running [fw:old-ooooo]", 20)(r.fake, r.origin)
        _pending("precheck of prod interrupted (replica stopped); re-run pending [fw:old-ooooo:released]", 1)(r.fake, r.origin)
        released = time.monotonic()
        while not [s for s in r.history(PROD) if s.state == "success"]:
            assert time.monotonic() - released < 60
            await asyncio.sleep(0.05)
        await r.settle()
        assert r.runs("prod") == {"alpha": 1}
        [comment] = [c for c in r.fake.issue_comments(REPO, 7) if c.body.startswith("<!-- fluxwarden:precheck:prod -->")]
        posts = r.precheck_posts("prod")
        assert "a replica left the status pending" in posts[0].json["body"]
        print(f"\nFIGURE sweep re-run of a released claim (sweep 0.3 s): success {time.monotonic() - released:.2f} s after the release")
