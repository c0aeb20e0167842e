"""The Lease adapter: get, create and replace one `coordination.k8s.io/v1` Lease, the leader-election lock.

It writes exactly one object, the Lease bot/service/leader.py elects on, in the service's own namespace
(RBAC: the Role `fluxwarden-leader-election` in deploy/rbac.yaml: create; get/update on the Lease's name).
It talks to the API server through `KubeClient.request` (bot/adapters/kube.py: kubeconfig or in-cluster
service account, scrubbed errors); the connection is opened on first use and kept for the elector's lifetime
(re-opened after an authentication or connection failure, so a rotated token is picked up). Writes are
optimistic: `replace` sends the `resourceVersion` it read and a 409 becomes `LeaseConflict`. Times are written
as MicroTime with exactly six fractional digits (`2026-01-02T15:04:05.000000Z`), which is what the API server parses.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any
from urllib.parse import quote

from bot.adapters.kube import ClusterAccess, KubeApiError, KubeClient, KubeUnauthorized, KubeUnreachable

LEASE_API = "coordination.k8s.io/v1"
LEASE_RBAC = "the service account needs the Role fluxwarden-leader-election (deploy/rbac.yaml)"


class LeaseConflict(Exception):
    """409: the Lease changed since it was read (or was created by someone else first)."""


@dataclass(frozen=True)
class LeaseRecord:
    """The spec of a leader-election Lease (client-go's LeaderElectionRecord)."""

    holder: str  # holderIdentity; "" when released
    lease_seconds: int  # leaseDurationSeconds
    acquire_time: datetime | None = None
    renew_time: datetime | None = None
    transitions: int = 0  # leaseTransitions: how often the holder changed


def micro_time(value: datetime | None) -> str | None:
    """A MicroTime (RFC 3339, UTC, exactly microseconds) as the API server expects it."""
    if value is None:
        return None
    return value.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def parse_time(value: Any) -> datetime | None:
    if not isinstance(value, str) or not value:
        return None
    try:
        parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=timezone.utc)


def record_from_lease(body: dict[str, Any]) -> LeaseRecord:
    spec = body.get("spec") or {}
    try:
        seconds = int(spec.get("leaseDurationSeconds") or 0)
        transitions = int(spec.get("leaseTransitions") or 0)
    except (TypeError, ValueError):
        seconds, transitions = 0, 0
    return LeaseRecord(
        holder=str(spec.get("holderIdentity") or ""),
        lease_seconds=seconds,
        acquire_time=parse_time(spec.get("acquireTime")),
        renew_time=parse_time(spec.get("renewTime")),
        transitions=transitions,
    )


def lease_body(namespace: str, name: str, record: LeaseRecord, resource_version: str | None = None) -> dict[str, Any]:
    metadata: dict[str, Any] = {"name": name, "namespace": namespace, "labels": {"app.kubernetes.io/name": "fluxwarden"}}
    if resource_version is not None:
        metadata["resourceVersion"] = resource_version
    return {
        "apiVersion": LEASE_API,
        "kind": "Lease",
        "metadata": metadata,
        "spec": {
            "holderIdentity": record.holder,
            "leaseDurationSeconds": int(record.lease_seconds),
            "acquireTime": micro_time(record.acquire_time),
            "renewTime": micro_time(record.renew_time),
            "leaseTransitions": int(record.transitions),
        },
    }


class KubeLeaseStore:
    """A `bot.service.leader.LeaseStore` on the Kubernetes API: one Lease `namespace/name`."""

    def __init__(self, access: ClusterAccess, namespace: str, name: str) -> None:
        self.access = access
        self.namespace = namespace
        self.name = name
        self._kube: KubeClient | None = None
        self._what = f"the Lease {namespace}/{name}"
        self._collection = f"/apis/{LEASE_API}/namespaces/{quote(namespace, safe='')}/leases"
        self._item = f"{self._collection}/{quote(name, safe='')}"

    def __repr__(self) -> str:
        return f"KubeLeaseStore({self.namespace}/{self.name} via {self.access.describe()})"

    async def close(self) -> None:
        if self._kube is not None:
            kube, self._kube = self._kube, None
            await kube.close()

    async def _request(self, method: str, path: str, body: dict[str, Any] | None = None, answers: tuple[int, ...] = (404, 409)) -> tuple[int, Any]:
        """`(status, body)` for a success or one of `answers`; the connection is dropped after a failure a new one may cure."""
        if self._kube is None:
            kube = KubeClient(self.access)
            await kube.open()  # KubeConfigError when the kubeconfig / service account cannot be loaded
            self._kube = kube
        try:
            return await self._kube.request(method, path, self._what, body=body, answers=answers, rbac=LEASE_RBAC)
        except (KubeUnauthorized, KubeUnreachable):
            await self.close()
            raise

    def _conflict(self, body: Any, doing: str) -> LeaseConflict:
        reason = body.get("reason") if isinstance(body, dict) else None
        return LeaseConflict(f"{doing} {self._what}: {reason or 'Conflict'}")

    async def get(self) -> tuple[LeaseRecord, str] | None:
        status, body = await self._request("GET", self._item, answers=(404,))
        if status == 404:
            return None
        if not isinstance(body, dict):
            raise KubeApiError(f"{self.access.describe()}: {self._what} is not an object")
        return record_from_lease(body), str((body.get("metadata") or {}).get("resourceVersion") or "")

    async def create(self, record: LeaseRecord) -> str:
        status, body = await self._request("POST", self._collection, lease_body(self.namespace, self.name, record))
        if status == 404:
            raise KubeApiError(f"{self.access.describe()}: cannot create the Lease: namespace {self.namespace} or {LEASE_API} not found")
        if status == 409:
            raise self._conflict(body, "creating")
        return _resource_version(body)

    async def replace(self, record: LeaseRecord, resource_version: str) -> str:
        status, body = await self._request("PUT", self._item, lease_body(self.namespace, self.name, record, resource_version or None))
        if status == 404:
            raise LeaseConflict(f"{self._what} was deleted")
        if status == 409:
            raise self._conflict(body, "replacing")
        return _resource_version(body)


def _resource_version(body: Any) -> str:
    return str(((body if isinstance(body, dict) else {}).get("metadata") or {}).get("resourceVersion") or "")
