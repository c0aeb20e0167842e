"""Leader election on a Kubernetes `coordination.k8s.io/v1` Lease, with client-go's leaderelection semantics.

Every replica runs a `LeaderElector`; at most one of them is the leader at any time, and only the leader
runs scheduled jobs (the drift job, the sweep of abandoned prechecks). Webhooks are served by every replica.

The rules (k8s.io/client-go/tools/leaderelection, in this order each `retry_seconds`):

* **Acquire** when there is no Lease (create it), when its `holderIdentity` is empty (released), or when it
  has expired: the record has not changed for `leaseDurationSeconds`, measured on *this* replica's monotonic
  clock from the moment it first saw that record (client-go's `observedTime`). With synchronised clocks
  that is `renewTime + leaseDurationSeconds < now`; measuring locally makes it immune to clock skew between
  nodes, at the price that a replica that has just started waits one full lease duration before it may take
  an orphaned Lease.
* **Renew** while held: `renewTime` is rewritten every `retry_seconds` (no jitter while leading).
* **Step down** when no renewal succeeded for `renew_seconds` (`renewDeadline`), or at once when the Lease
  shows another holder. `is_leader` checks the deadline against the clock itself, so a hung API call cannot
  keep a stale leader: it is False from `last successful renewal attempt start + renew_seconds` on.
  As `renew_seconds < lease_seconds`, the old leader has stopped before anyone else may acquire.
* **Optimistic concurrency**: every write carries the `resourceVersion` that was read; a concurrent writer
  makes it 409 (`LeaseConflict`) and this round is lost — never two leaders.
* **Release on shutdown** (`stop()`): the holder clears `holderIdentity` (and sets `leaseDurationSeconds: 1`),
  so another replica takes over at its next retry instead of after the lease expires.
* Candidates retry with jitter: `retry_seconds * (1 + uniform(0, 1.2))` (client-go's `JitterFactor`).

The Lease itself is read and written by a `LeaseStore`; bot/adapters/lease.py's `KubeLeaseStore` is the
Kubernetes one (this module imports no client library). Errors other than a conflict are `InfraError`s: the
round is lost, and the loop goes on. Why not `kubernetes_asyncio.leaderelection`: DESIGN.md, "Leader election".
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import os
import random
import secrets
import socket
import string
import time
from dataclasses import replace
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Protocol

from bot.adapters.kube import ClusterAccess
from bot.adapters.lease import KubeLeaseStore, LeaseConflict, LeaseRecord
from bot.engine.core.errors import ConfigError, InfraError

if TYPE_CHECKING:
    from bot.engine.chatops.settings import LeaderElection

log = logging.getLogger(__name__)

JITTER_FACTOR = 1.2  # client-go's leaderelection JitterFactor
SERVICE_ACCOUNT_NAMESPACE = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")
_SUFFIX_ALPHABET = string.ascii_lowercase + string.digits


class LeaseStore(Protocol):
    """Reads and writes one Lease; `bot.adapters.lease.KubeLeaseStore` is the Kubernetes one."""

    async def get(self) -> tuple[LeaseRecord, str] | None:
        """The record and its resourceVersion; None when there is no Lease."""

    async def create(self, record: LeaseRecord) -> str:
        """Create the Lease; LeaseConflict when it exists. Returns the new resourceVersion."""

    async def replace(self, record: LeaseRecord, resource_version: str) -> str:
        """Replace the Lease if it is still at `resource_version`, else LeaseConflict."""

    async def close(self) -> None: ...


def replica_identity(env: dict[str, str] | None = None, rng: random.Random | None = None) -> str:
    """`<pod name or hostname>-<5 random chars>`: unique per process, so a restarted container is a new holder."""
    env = dict(os.environ) if env is None else env
    base = (env.get("POD_NAME") or socket.gethostname() or "fluxwarden").strip().lower()
    base = "".join(c if c.isalnum() or c in "-." else "-" for c in base).strip("-.")[:57] or "fluxwarden"
    pick = rng.choice if rng is not None else secrets.choice
    return f"{base}-{''.join(pick(_SUFFIX_ALPHABET) for _ in range(5))}"


def lease_namespace(configured: str | None, env: dict[str, str] | None = None, *, in_cluster: bool = False,
                    service_account_file: Path = SERVICE_ACCOUNT_NAMESPACE) -> str:
    """Where the Lease lives: the config, else `$POD_NAMESPACE`, else (in-cluster) the service account's namespace."""
    env = dict(os.environ) if env is None else env
    if configured:
        return configured
    if env.get("POD_NAMESPACE"):
        return env["POD_NAMESPACE"]
    if in_cluster:
        try:
            namespace = service_account_file.read_text(encoding="utf-8").strip()
        except OSError:
            namespace = ""
        if namespace:
            return namespace
    raise ConfigError(
        "leader_election: no namespace for the Lease: set leader_election.namespace "
        "(or FLUXWARDEN_LEADER_ELECTION_NAMESPACE / POD_NAMESPACE), or run in-cluster"
    )


Callback = Callable[[], Any]


class LeaderElector:
    """One replica's candidacy: `start()` it, read `is_leader`, `await stop()` to release the Lease."""

    def __init__(
        self,
        store: LeaseStore,
        identity: str,
        *,
        lease_seconds: int = 15,
        renew_seconds: float = 10.0,
        retry_seconds: float = 2.0,
        on_started: Callback | None = None,
        on_stopped: Callback | None = None,
        clock: Callable[[], float] = time.time,  # wall clock: the timestamps written into the Lease
        monotonic: Callable[[], float] = time.monotonic,  # deadlines and expiry
        sleep: Callable[[float], Any] | None = None,  # tests: a virtual sleep
        rng: random.Random | None = None,
    ) -> None:
        if not identity:
            raise ValueError("a leader election identity must not be empty")
        if not lease_seconds > renew_seconds:
            raise ValueError("lease_seconds must be greater than renew_seconds")
        if not renew_seconds > JITTER_FACTOR * retry_seconds > 0:
            raise ValueError(f"renew_seconds must be greater than {JITTER_FACTOR} × retry_seconds (> 0)")
        self.store = store
        self.identity = identity
        self.lease_seconds = int(lease_seconds)
        self.renew_seconds = float(renew_seconds)
        self.retry_seconds = float(retry_seconds)
        self.on_started = on_started
        self.on_stopped = on_stopped
        self._clock = clock
        self._monotonic = monotonic
        self._sleep = sleep
        self._rng = rng or random.Random()
        self._leading = False
        self._renewed_at = float("-inf")  # monotonic start of the last successful acquire/renew
        self._observed: LeaseRecord | None = None
        self._observed_at = float("-inf")  # monotonic time the observed record was first seen
        self._task: asyncio.Task[None] | None = None
        self._stopping: asyncio.Event | None = None
        self.transitions = 0  # leadership gained by this elector (tests, metrics)

    # ------------------------------------------------------------------ state

    @property
    def is_leader(self) -> bool:
        """Leading, and the last successful renewal is younger than the renew deadline."""
        return self._leading and self._monotonic() < self._renewed_at + self.renew_seconds

    @property
    def observed_holder(self) -> str | None:
        """The holder of the Lease as last read (None before the first read)."""
        return self._observed.holder if self._observed is not None else None

    # ------------------------------------------------------------------ one round

    async def step(self) -> bool:
        """One round: try to acquire or renew; start or stop leading accordingly. Returns `is_leader`."""
        started = self._monotonic()
        outcome = await self._try_acquire_or_renew(started)
        if outcome == "held":
            if not self._leading:
                self._leading = True
                self._renewed_at = started
                self.transitions += 1
                log.info("leader election: %s acquired the lease", self.identity)
                await self._call(self.on_started, "on_started")
            else:
                self._renewed_at = started
        elif self._leading:
            if outcome == "other":
                await self._step_down(f"the lease is held by {self.observed_holder}")
            elif self._monotonic() >= self._renewed_at + self.renew_seconds:
                await self._step_down(f"no renewal for {self.renew_seconds:g}s (renew deadline)")
        return self.is_leader

    async def _try_acquire_or_renew(self, now: float) -> str:
        """`held` (we hold it now), `other` (someone else does), or `failed` (API trouble, a conflict)."""
        wall = datetime.fromtimestamp(self._clock(), tz=timezone.utc)
        desired = LeaseRecord(self.identity, self.lease_seconds, acquire_time=wall, renew_time=wall)
        try:
            found = await self.store.get()
        except (InfraError, LeaseConflict) as exc:
            log.warning("leader election: cannot read the lease: %s", exc)
            return "failed"
        if found is None:
            try:
                await self.store.create(desired)
            except LeaseConflict:
                return "failed"  # another replica created it first
            except InfraError as exc:
                log.warning("leader election: cannot create the lease: %s", exc)
                return "failed"
            self._observe(desired, now)
            return "held"
        record, version = found
        if record != self._observed:
            self._observe(record, now)
        if record.holder and record.holder != self.identity and now < self._observed_at + max(record.lease_seconds, 1):
            return "other"
        if record.holder == self.identity:
            desired = replace(desired, acquire_time=record.acquire_time or wall, transitions=record.transitions)
        else:
            desired = replace(desired, transitions=record.transitions + 1)
        try:
            await self.store.replace(desired, version)
        except LeaseConflict:
            return "failed"
        except InfraError as exc:
            log.warning("leader election: cannot %s the lease: %s", "renew" if record.holder == self.identity else "acquire", exc)
            return "failed"
        self._observe(desired, now)
        return "held"

    def _observe(self, record: LeaseRecord, now: float) -> None:
        self._observed = record
        self._observed_at = now

    async def _step_down(self, why: str, *, expected: bool = False) -> None:
        self._leading = False
        self._renewed_at = float("-inf")
        log.log(logging.INFO if expected else logging.WARNING, "leader election: %s stops leading: %s", self.identity, why)
        await self._call(self.on_stopped, "on_stopped")

    async def _call(self, callback: Callback | None, name: str) -> None:
        if callback is None:
            return
        try:
            result = callback()
            if inspect.isawaitable(result):
                await result
        except Exception:  # a callback's bug must not end the election loop
            log.exception("leader election: %s callback failed", name)

    # ------------------------------------------------------------------ the loop

    def start(self) -> asyncio.Task[None]:
        """Run the election on the current loop until `stop()`."""
        if self._task is None or self._task.done():
            self._stopping = asyncio.Event()
            self._task = asyncio.get_running_loop().create_task(self.run(), name=f"leader election {self.identity}")
        return self._task

    async def run(self) -> None:
        if self._stopping is None:
            self._stopping = asyncio.Event()
        while not self._stopping.is_set():
            try:
                await self.step()
            except Exception:  # never let one bad round end the candidacy
                log.exception("leader election round failed")
            delay = self.retry_seconds if self._leading else self.retry_seconds * (1 + self._rng.uniform(0, JITTER_FACTOR))
            if self._sleep is not None:
                await self._sleep(delay)
                continue
            try:
                await asyncio.wait_for(self._stopping.wait(), timeout=delay)
            except asyncio.TimeoutError:
                pass

    async def stop(self, *, release: bool = True) -> None:
        """Stop the loop; when leading, step down and (by default) release the Lease for an immediate hand-over."""
        if self._stopping is not None:
            self._stopping.set()
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except (asyncio.CancelledError, Exception):
                pass
            self._task = None
        was_leading = self._leading
        if was_leading:
            await self._step_down("shutting down", expected=True)
        if release and was_leading:
            await self.release()
        try:
            await self.store.close()
        except Exception:  # pragma: no cover - closing must not fail a shutdown
            log.exception("leader election: closing the lease client failed")

    async def release(self) -> bool:
        """Clear `holderIdentity` if we still hold the Lease (client-go's ReleaseOnCancel)."""
        try:
            found = await self.store.get()
            if found is None or found[0].holder != self.identity:
                return False
            record, version = found
            wall = datetime.fromtimestamp(self._clock(), tz=timezone.utc)
            await self.store.replace(LeaseRecord("", 1, acquire_time=wall, renew_time=wall, transitions=record.transitions), version)
        except (LeaseConflict, InfraError) as exc:
            log.warning("leader election: could not release the lease: %s", exc)
            return False
        log.info("leader election: %s released the lease", self.identity)
        return True


def build_elector(config: "LeaderElection", identity: str, *, on_started: Callback | None = None, on_stopped: Callback | None = None,
                  env: dict[str, str] | None = None) -> LeaderElector:
    """The service's elector: a Kubernetes Lease store (bot/adapters/lease.py) from the `leader_election` config."""
    in_cluster = config.in_cluster or not config.kubeconfig
    access = ClusterAccess(
        kubeconfig=Path(config.kubeconfig) if config.kubeconfig else None,
        context=config.context,
        in_cluster=in_cluster,
        timeout=max(1.0, min(15.0, config.renew_seconds / 2)),  # a hung call must not outlive the renew deadline
    )
    namespace = lease_namespace(config.namespace, env, in_cluster=in_cluster)
    store = KubeLeaseStore(access, namespace, config.name)
    return LeaderElector(
        store, identity,
        lease_seconds=config.lease_seconds, renew_seconds=config.renew_seconds, retry_seconds=config.retry_seconds,
        on_started=on_started, on_stopped=on_stopped,
    )
