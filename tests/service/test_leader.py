"""Leader election (bot/service/leader.py) on a Lease (bot/adapters/lease.py) served by the fake API server, with a controlled clock.

Every test asserts the one safety property after every step: never two leaders. `is_leader` reads the clock
itself, so a replica that stopped renewing (dead, partitioned, hung) stops counting as leader at its renew
deadline even if its loop never runs again.
"""

from __future__ import annotations

import asyncio
import json
import random
import re
import time
from pathlib import Path
from typing import Any, AsyncIterator

import pytest
from aiohttp.test_utils import TestClient, TestServer

from bot.engine.core.errors import ConfigError
from bot.adapters.kube import ClusterAccess
from bot.adapters.lease import KubeLeaseStore, LeaseRecord, lease_body, micro_time, record_from_lease
from bot.service.leader import LeaderElector, lease_namespace, replica_identity
from bot.service.settings import load_service_config
from bot.engine.chatops.settings import LeaderElection
from tests.fakes.kube import FakeKube

NS, NAME = "fluxwarden", "fluxwarden-leader"
LEASE_PATH = rf"/namespaces/{NS}/leases"


class Clock:
    """Monotonic seconds under the test's control; the wall clock is a fixed epoch plus them."""

    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t

    def wall(self) -> float:
        return 1_790_000_000.0 + self.t

    def advance(self, seconds: float) -> None:
        self.t += seconds


class Cluster:
    """The fake API server, the clock, and the electors under test."""

    def __init__(self, fake: FakeKube, kubeconfig: Path) -> None:
        self.fake = fake
        self.kubeconfig = kubeconfig
        self.clock = Clock()
        self.electors: list[LeaderElector] = []
        self.events: list[tuple[float, str, str]] = []

    def elector(self, name: str, *, lease: int = 15, renew: float = 10.0, retry: float = 2.0, timeout: float = 5.0) -> LeaderElector:
        store = KubeLeaseStore(ClusterAccess(kubeconfig=self.kubeconfig, timeout=timeout), NS, NAME)
        identity = f"{name}-{name[0] * 5}"
        elector = LeaderElector(
            store, identity, lease_seconds=lease, renew_seconds=renew, retry_seconds=retry,
            on_started=lambda: self.events.append((self.clock.t, identity, "started")),
            on_stopped=lambda: self.events.append((self.clock.t, identity, "stopped")),
            clock=self.clock.wall, monotonic=self.clock, rng=random.Random(7),
        )
        self.electors.append(elector)
        return elector

    def leaders(self) -> list[str]:
        found = [e.identity for e in self.electors if e.is_leader]
        assert len(found) <= 1, f"two leaders at t={self.clock.t}: {found}"
        return found

    async def round(self, *electors: LeaderElector, advance: float = 0.0) -> list[str]:
        """Advance the clock, then one step of each elector, checking the invariant before and after each."""
        self.clock.advance(advance)
        self.leaders()
        for e in electors:
            await e.step()
            self.leaders()
        return self.leaders()

    def lease(self) -> dict[str, Any]:
        found = self.fake.lease(NS, NAME)
        assert found is not None
        return found


@pytest.fixture
async def cluster(tmp_path: Path) -> AsyncIterator[Cluster]:
    async with FakeKube() as fake:
        c = Cluster(fake, fake.kubeconfig(tmp_path / "kubeconfig"))
        try:
            yield c
        finally:
            for e in c.electors:
                await e.store.close()


async def test_one_acquires_the_other_waits(cluster: Cluster) -> None:
    a, b = cluster.elector("alpha"), cluster.elector("bravo")
    assert await cluster.round(a, b) == [a.identity]
    assert b.observed_holder == a.identity
    lease = cluster.lease()
    assert lease["spec"]["holderIdentity"] == a.identity and lease["spec"]["leaseDurationSeconds"] == 15
    assert lease["spec"]["leaseTransitions"] == 0
    created = lease["spec"]["acquireTime"]
    for _ in range(30):  # a minute of renewals: b never gets it
        assert await cluster.round(a, b, advance=2.0) == [a.identity]
    lease = cluster.lease()
    assert lease["spec"]["acquireTime"] == created, "renewals keep acquireTime"
    assert lease["spec"]["renewTime"] == micro_time(_utc(cluster.clock.wall()))
    assert [(who, what) for _, who, what in cluster.events] == [(a.identity, "started")]


async def test_dead_leader_is_replaced_after_the_lease_expires(cluster: Cluster) -> None:
    a, b = cluster.elector("alpha"), cluster.elector("bravo")
    await cluster.round(a, b)
    await cluster.round(a, b, advance=2.0)
    last_renewal = cluster.clock.t
    # a dies: it never runs again (no release, no step-down callback).
    timeline = []
    while not b.is_leader:
        timeline.append((cluster.clock.t - last_renewal, tuple(cluster.leaders())))
        await cluster.round(b, advance=2.0)
        assert cluster.clock.t - last_renewal < 60
    takeover = cluster.clock.t - last_renewal
    # a stopped counting as leader at its renew deadline (10 s), b took over after the lease (15 s) at its next retry.
    assert (8.0, (a.identity,)) in timeline and (10.0, ()) in timeline and (14.0, ()) in timeline
    assert 15.0 <= takeover <= 15.0 + 2.0, takeover
    assert cluster.lease()["spec"]["holderIdentity"] == b.identity
    assert cluster.lease()["spec"]["leaseTransitions"] == 1
    print(f"\nFIGURE dead leader takeover (lease 15 s, renew 10 s, retry 2 s): {takeover:g} s after its last renewal; "
          f"leaderless for {takeover - 10.0:g} s")
    # A replica started now does not take it from b, nor does a coming back to life.
    c = cluster.elector("charlie")
    for _ in range(20):
        assert await cluster.round(b, c, a, advance=2.0) == [b.identity]
    assert (a.identity, "stopped") in [(w, e) for _, w, e in cluster.events]  # a saw b's record on its first step back


async def test_newcomer_waits_a_full_lease_before_taking_an_orphaned_one(cluster: Cluster) -> None:
    a = cluster.elector("alpha")
    await cluster.round(a)
    cluster.clock.advance(3600)  # a died an hour ago, its renewTime is long past
    b = cluster.elector("bravo")
    first_seen = cluster.clock.t
    assert await cluster.round(b) == []
    while not b.is_leader:
        await cluster.round(b, advance=2.0)
    # Expiry is measured on b's own clock from when it first saw the record (client-go's observedTime):
    # immune to clock skew, at the price of one lease duration after a start.
    assert 15.0 <= cluster.clock.t - first_seen <= 17.0


async def test_create_race_is_a_conflict_for_the_loser(cluster: Cluster) -> None:
    a, b = cluster.elector("alpha"), cluster.elector("bravo")
    read = b.store.get

    async def get_then_let_a_win() -> Any:
        found = await read()
        assert found is None
        await a.step()  # a creates the Lease between b's read and b's create
        return found

    b.store.get = get_then_let_a_win  # type: ignore[method-assign]
    assert await b.step() is False
    assert cluster.leaders() == [a.identity]
    assert ("POST", f"/apis/coordination.k8s.io/v1/namespaces/{NS}/leases", 409) in cluster.fake.requests


async def test_update_race_is_a_conflict_for_the_loser(cluster: Cluster) -> None:
    a, b, c = cluster.elector("alpha"), cluster.elector("bravo"), cluster.elector("charlie")
    await cluster.round(c)
    await c.stop()  # released: free for whoever writes first
    read = b.store.get

    async def get_then_let_a_win() -> Any:
        found = await read()
        await a.step()  # a replaces the Lease with the resourceVersion b also read
        return found

    b.store.get = get_then_let_a_win  # type: ignore[method-assign]
    assert await b.step() is False
    assert cluster.leaders() == [a.identity]
    assert ("PUT", f"/apis/coordination.k8s.io/v1/namespaces/{NS}/leases/{NAME}", 409) in cluster.fake.requests
    b.store.get = read  # type: ignore[method-assign]
    assert await cluster.round(a, b, advance=2.0) == [a.identity]


async def test_leader_survives_a_conflicting_write_within_its_deadline(cluster: Cluster) -> None:
    a, b = cluster.elector("alpha"), cluster.elector("bravo")
    await cluster.round(a, b)
    read = a.store.get

    async def get_then_someone_touches_it() -> Any:
        found = await read()
        with cluster.fake.lock:  # e.g. `kubectl annotate lease`: a new resourceVersion
            stored = cluster.fake.objects[("coordination.k8s.io", "leases", NS, NAME)]
            stored["metadata"]["resourceVersion"] = "999999"
        return found

    a.store.get = get_then_someone_touches_it  # type: ignore[method-assign]
    assert await cluster.round(a, b, advance=2.0) == [a.identity]  # the renewal lost (409), but the deadline is not reached
    a.store.get = read  # type: ignore[method-assign]
    assert await cluster.round(a, b, advance=2.0) == [a.identity]  # renewed on the fresh resourceVersion
    assert [r for r in cluster.fake.requests if r[0] == "PUT" and r[2] == 409]


async def test_release_on_shutdown_hands_over_at_once(cluster: Cluster) -> None:
    a, b = cluster.elector("alpha"), cluster.elector("bravo")
    await cluster.round(a, b)
    await cluster.round(a, b, advance=2.0)
    await a.stop()
    assert cluster.leaders() == []
    spec = cluster.lease()["spec"]
    assert spec["holderIdentity"] == "" and spec["leaseDurationSeconds"] == 1
    assert await cluster.round(b) == [b.identity]  # no wait for the lease to expire
    assert cluster.lease()["spec"]["leaseTransitions"] == 1
    assert [(w, e) for _, w, e in cluster.events] == [(a.identity, "started"), (a.identity, "stopped"), (b.identity, "started")]


async def test_a_stolen_lease_stops_the_leader_at_once(cluster: Cluster) -> None:
    a = cluster.elector("alpha")
    await cluster.round(a)
    with cluster.fake.lock:  # someone else writes itself in (e.g. an operator forcing a hand-over)
        stored = cluster.fake.objects[("coordination.k8s.io", "leases", NS, NAME)]
        stored["spec"]["holderIdentity"] = "intruder-zzzzz"
        stored["metadata"]["resourceVersion"] = "5000"
    assert await cluster.round(a, advance=2.0) == []
    assert [(w, e) for _, w, e in cluster.events] == [(a.identity, "started"), (a.identity, "stopped")]


async def test_api_down_means_no_leader_never_two(cluster: Cluster) -> None:
    a, b = cluster.elector("alpha"), cluster.elector("bravo")
    await cluster.round(a, b)
    cluster.fake.inject(LEASE_PATH, status=503, times=None)
    outage_started = cluster.clock.t
    seen = []
    for _ in range(30):  # a minute without the API server
        leaders = tuple(await cluster.round(a, b, advance=2.0))
        seen.append((cluster.clock.t - outage_started, leaders))
    assert seen[3] == (8.0, (a.identity,))  # a keeps leading until its renew deadline...
    assert all(leaders == () for t, leaders in seen if t >= 10.0)  # ...then nobody does
    assert (cluster.events[-1][1], cluster.events[-1][2]) == (a.identity, "stopped")
    cluster.fake.clear_faults()
    leaders = await cluster.round(b, a, advance=2.0)  # the API is back: the unchanged record has expired
    assert len(leaders) == 1
    for _ in range(10):
        assert await cluster.round(a, b, advance=2.0) == leaders


async def test_api_down_from_the_start_elects_nobody(cluster: Cluster) -> None:
    cluster.fake.inject(LEASE_PATH, status=500, times=None)
    a, b = cluster.elector("alpha"), cluster.elector("bravo")
    for _ in range(20):
        assert await cluster.round(a, b, advance=2.0) == []
    assert cluster.fake.lease(NS, NAME) is None


async def test_a_hung_renewal_does_not_keep_a_stale_leader(cluster: Cluster) -> None:
    a = cluster.elector("alpha", timeout=5.0)
    await cluster.round(a)
    cluster.fake.inject(LEASE_PATH, delay=0.5, times=1)
    renewal = asyncio.ensure_future(a.step())
    await asyncio.sleep(0.1)
    assert a.is_leader
    cluster.clock.advance(10.0)  # the renew deadline passes while the request hangs
    assert not a.is_leader
    await renewal


async def test_forbidden_is_a_clear_failure_not_a_leader(cluster: Cluster, caplog: pytest.LogCaptureFixture) -> None:
    cluster.fake.inject(LEASE_PATH, status=403, times=None)
    a = cluster.elector("alpha")
    assert await cluster.round(a) == []
    assert "fluxwarden-leader-election" in caplog.text and cluster.fake.token not in caplog.text


async def test_lease_wire_format() -> None:
    when = _utc(1_790_000_000.0)
    body = lease_body(NS, NAME, LeaseRecord("pod-abcde", 15, acquire_time=when, renew_time=when, transitions=3), "42")
    assert body["spec"]["renewTime"] == "2026-09-21T14:13:20.000000Z"  # six fractional digits even at .0
    assert body["metadata"]["resourceVersion"] == "42"
    assert record_from_lease(json.loads(json.dumps(body))) == LeaseRecord("pod-abcde", 15, when, when, 3)
    assert record_from_lease({"spec": {"leaseDurationSeconds": "x"}}) == LeaseRecord("", 0)


# ---------------------------------------------------------------------------------------- real time


async def test_real_time_hand_over_figures(tmp_path: Path) -> None:
    """The loop itself, on the real clock: release hands over within a jittered retry; a crash within the lease."""
    async with FakeKube() as fake:
        kubeconfig = fake.kubeconfig(tmp_path / "kubeconfig")

        def make(name: str) -> LeaderElector:
            store = KubeLeaseStore(ClusterAccess(kubeconfig=kubeconfig, timeout=1.0), NS, NAME)
            return LeaderElector(store, f"{name}-{name[0] * 5}", lease_seconds=1, renew_seconds=0.6, retry_seconds=0.1)

        electors = [make("alpha"), make("bravo"), make("charlie")]
        violations: list[float] = []
        stop_monitor = asyncio.Event()

        async def monitor() -> None:
            while not stop_monitor.is_set():
                if sum(e.is_leader for e in electors) > 1:
                    violations.append(time.monotonic())
                await asyncio.sleep(0.005)

        async def leader(*, besides: LeaderElector | None = None, timeout: float = 5.0) -> LeaderElector:
            deadline = time.monotonic() + timeout
            while time.monotonic() < deadline:
                found = [e for e in electors if e.is_leader and e is not besides]
                if found:
                    return found[0]
                await asyncio.sleep(0.005)
            raise AssertionError("no leader")

        watcher = asyncio.ensure_future(monitor())
        try:
            for e in electors:
                e.start()
            first = await leader()
            started = time.monotonic()
            await first.stop()  # graceful: release
            second = await leader()
            released_handover = time.monotonic() - started
            assert second is not first
            started = time.monotonic()
            assert second._task is not None
            second._task.cancel()  # crash: no release, no step-down; only the clock ends its leadership
            await asyncio.gather(second._task, return_exceptions=True)
            third = await leader(besides=second)
            crash_handover = time.monotonic() - started
            assert third not in (first, second)
        finally:
            stop_monitor.set()
            await watcher
            for e in electors:
                await e.stop()
        assert violations == []
        # Released: the next (jittered) retry of a candidate, ≤ 0.22 s plus the API round trips. Crashed: the
        # lease (1 s) after the candidates last saw a renewal, plus a retry. Bounds are loose for loaded CI.
        assert released_handover < 0.8 and released_handover < crash_handover, (released_handover, crash_handover)
        assert 0.6 <= crash_handover < 2.5, crash_handover
        print(f"\nFIGURE real-time hand-over (lease 1 s, renew 0.6 s, retry 0.1 s): released {released_handover:.3f} s, "
              f"crashed {crash_handover:.3f} s")


# ---------------------------------------------------------------------------------------- config and wiring


def test_config_defaults_env_and_validation(tmp_path: Path) -> None:
    base = {"FLUXWARDEN_WEBHOOK_SECRET": "s", "FLUXWARDEN_GITHUB_TOKEN": "t"}
    assert load_service_config(None, base).leader_election == LeaderElection()
    path = tmp_path / "c.yaml"
    path.write_text("leader_election: {enabled: true, namespace: ops, lease_seconds: 30, renew_seconds: 20, retry_seconds: 4}\n")
    config = load_service_config(path, base).leader_election
    assert (config.enabled, config.namespace, config.lease_seconds, config.renew_seconds, config.retry_seconds) == (True, "ops", 30, 20.0, 4.0)
    env = {**base, "FLUXWARDEN_LEADER_ELECTION": "false", "FLUXWARDEN_LEADER_ELECTION_NAME": "other", "FLUXWARDEN_LEADER_ELECTION_SWEEP_SECONDS": "0"}
    config = load_service_config(path, env).leader_election
    assert (config.enabled, config.name, config.sweep_seconds) == (False, "other", 0.0)
    for bad, message in (
        ("{lease_seconds: 10, renew_seconds: 10}", "greater than renew_seconds"),
        ("{renew_seconds: 2, retry_seconds: 2}", "1.2 × retry_seconds"),
        ("{retry_seconds: 0}", "retry_seconds > 0"),
        ("{context: x}", "`context` needs `kubeconfig`"),
        ("{kubeconfig: /k, in_cluster: true}", "either `kubeconfig` or `in_cluster`"),
        ("{enabled: maybe}", "true or false"),
        ("{lease_seconds: soon}", "must be a number"),
        ("{leader: x}", "unknown key(s) in leader_election: leader"),
        ("[1]", "must be a mapping"),
    ):
        path.write_text(f"leader_election: {bad}\n")
        with pytest.raises(ConfigError, match=re.escape(message)):
            load_service_config(path, base)


def test_namespace_and_identity(tmp_path: Path) -> None:
    sa = tmp_path / "namespace"
    sa.write_text("from-sa\n")
    assert lease_namespace("cfg", {"POD_NAMESPACE": "env"}, in_cluster=True, service_account_file=sa) == "cfg"
    assert lease_namespace(None, {"POD_NAMESPACE": "env"}, in_cluster=True, service_account_file=sa) == "env"
    assert lease_namespace(None, {}, in_cluster=True, service_account_file=sa) == "from-sa"
    with pytest.raises(ConfigError, match="no namespace for the Lease"):
        lease_namespace(None, {}, in_cluster=False, service_account_file=sa)
    with pytest.raises(ConfigError):
        lease_namespace(None, {}, in_cluster=True, service_account_file=tmp_path / "missing")
    one = replica_identity({"POD_NAME": "fluxwarden-7d9c5b-x2kq9"}, random.Random(1))
    two = replica_identity({"POD_NAME": "fluxwarden-7d9c5b-x2kq9"}, random.Random(2))
    assert one.startswith("fluxwarden-7d9c5b-x2kq9-") and len(one) == len("fluxwarden-7d9c5b-x2kq9") + 6 and one != two
    assert replica_identity({"POD_NAME": "Weird_Host!"}, random.Random(1)).startswith("weird-host-")


def _utc(epoch: float):
    from datetime import datetime, timezone

    return datetime.fromtimestamp(epoch, tz=timezone.utc)


async def test_service_replicas_elect_one_leader_and_stay_ready(tmp_path: Path) -> None:
    from bot.adapters.github import GitHubAdapter, GitHubAuth
    from bot.service.app import build_service
    from bot.service.settings import ServiceConfig
    from tests.fakes.github import FakeGitHub

    token = "ghs_" + "c" * 36
    async with FakeKube() as kube, FakeGitHub() as github:
        github.add_user("fluxwarden-bot", token=token, type="Bot")
        kubeconfig = kube.kubeconfig(tmp_path / "kubeconfig")

        def replica(name: str) -> Any:
            election = LeaderElection(
                enabled=True, namespace=NS, lease_seconds=2, renew_seconds=1.0, retry_seconds=0.2, sweep_seconds=0,
                kubeconfig=str(kubeconfig), identity=f"{name}-{name[0] * 5}",
            )
            config = ServiceConfig(webhook_secret=b"s", github=GitHubAuth(token=token, api_url=github.base_url), cache_dir=tmp_path / name, leader_election=election)
            return build_service(config, github=GitHubAdapter(config.github, min_write_interval=0, bot_login="fluxwarden-bot"))

        a, b = replica("alpha"), replica("bravo")
        async with TestClient(TestServer(a.app())) as ca:
            async with TestClient(TestServer(b.app())) as cb:
                deadline = time.monotonic() + 10
                while not (a.is_leader or b.is_leader) and time.monotonic() < deadline:
                    await asyncio.sleep(0.02)
                assert a.is_leader != b.is_leader
                for client in (ca, cb):  # the follower is as ready as the leader
                    ready = await client.get("/readyz")
                    assert ready.status == 200 and "leader" not in (await ready.json())["checks"]
                leader, follower = (a, b) if a.is_leader else (b, a)
                assert kube.lease(NS, NAME)["spec"]["holderIdentity"] == leader.leader.identity
            # bravo's server shut down: if it led, it released the Lease and alpha takes over at once.
            if leader is b:
                deadline = time.monotonic() + 2
                while not a.is_leader and time.monotonic() < deadline:
                    await asyncio.sleep(0.02)
                assert a.is_leader
            else:
                assert a.is_leader and not b.is_leader
        assert not a.is_leader and kube.lease(NS, NAME)["spec"]["holderIdentity"] == ""


def test_single_replica_is_always_the_leader(tmp_path: Path) -> None:
    from bot.adapters.github import GitHubAuth
    from bot.service.app import build_service
    from bot.service.settings import ServiceConfig

    service = build_service(ServiceConfig(webhook_secret=b"s", github=GitHubAuth(token="t" * 12), cache_dir=tmp_path))
    assert service.leader is None and service.is_leader and service.bot.claims is None
