"""The Lease adapter: get, create and replace one `coordination.k8s.io/v1` Lease through kubernetes-asyncio.

Fluxwarden has two Kubernetes adapters, the only modules that import kubernetes-asyncio:

* `bot/adapters/kube.py` reads the clusters a PR is checked against (live merge preconditions) and never writes;
* this module writes exactly one object: the leader-election Lease (bot/service/leader.py) in the service's own
  namespace. RBAC: the Role `fluxwarden-leader-election` in deploy/rbac.yaml (create; get/update on the
  Lease's name).

The connection (kubeconfig or in-cluster service account, scrubbed errors) is bot/adapters/kube.py's `KubeClient`; it
is opened on first use and kept for the elector's lifetime (re-opened after an authentication or connection
failure, so a rotated token is picked up). Writes are optimistic: `replace` sends the `resourceVersion` it
read and a 409 becomes `LeaseConflict`. Times are written as MicroTime with exactly six fractional digits
(`2026-01-02T15:04:05.000000Z`), which is what the API server parses.
"""

from __future__ import annotations

import asyncio
from datetime import datetime, timezone
from typing import Any
from urllib.parse import quote

import aiohttp
from kubernetes_asyncio.client.exceptions import ApiException
from kubernetes_asyncio.config import ConfigException

from bot.adapters.kube import (
    ClusterAccess,
    KubeApiError,
    KubeClient,
    KubeError,
    KubeForbidden,
    KubeTimeout,
    KubeUnauthorized,
    KubeUnreachable,
    _scrub,
)
from bot.service.leader import LeaseConflict, LeaseRecord

LEASE_API = "coordination.k8s.io/v1"


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


class _NotFound(Exception):
    pass


class KubeLeaseStore:
    """A `bot.leader.LeaseStore` on the Kubernetes API: one Lease `namespace/name`."""

    def __init__(self, access: ClusterAccess, namespace: str, name: str) -> None:
        self.access = access
        self.namespace = namespace
        self.name = name
        self._kube: KubeClient | None = None
        self._collection = f"/apis/{LEASE_API}/namespaces/{quote(namespace, safe='')}/leases"
        self._item = f"{self._collection}/{quote(name, safe='')}"

    def __repr__(self) -> str:
        return f"KubeLeaseStore({self.namespace}/{self.name} via {self.access.describe()})"

    async def _client(self) -> KubeClient:
        if self._kube is None:
            kube = KubeClient(self.access)
            await kube.__aenter__()  # KubeConfigError when the kubeconfig / service account cannot be loaded
            self._kube = kube
        return self._kube

    async def close(self) -> None:
        if self._kube is not None:
            kube, self._kube = self._kube, None
            await kube.__aexit__(None, None, None)

    async def _request(self, method: str, path: str, what: str, body: dict[str, Any] | None = None) -> Any:
        kube = await self._client()
        assert kube._client is not None
        where = f"{self.access.describe()} ({kube._host})"
        headers = {"Accept": "application/json"}
        if body is not None:
            headers["Content-Type"] = "application/json"
        try:
            return await kube._client.call_api(
                path,
                method,
                header_params=headers,
                body=body,
                response_types_map={200: "object", 201: "object"},
                auth_settings=["BearerToken"],
                _return_http_data_only=True,
                _preload_content=True,
                _request_timeout=self.access.timeout,
            )
        except ApiException as exc:
            status = exc.status or 0
            if status == 404:
                raise _NotFound(path) from None
            if status == 409:
                raise LeaseConflict(f"{what}: {_scrub(exc.reason or 'Conflict')}") from None
            if status == 401:
                await self.close()
                raise KubeUnauthorized(f"{where} rejected the credential (401 Unauthorized) while trying to {what}") from None
            if status == 403:
                raise KubeForbidden(
                    f"{where} forbids {what} (403 Forbidden): the service account needs the Role "
                    "fluxwarden-leader-election (deploy/rbac.yaml)"
                ) from None
            raise KubeApiError(f"{where}: {what} failed with HTTP {status} {_scrub(exc.reason or '')}".rstrip()) from None
        except (asyncio.TimeoutError, TimeoutError):
            await self.close()
            raise KubeTimeout(f"{where} did not answer within {self.access.timeout:g}s while trying to {what}") from None
        except aiohttp.ClientError as exc:
            await self.close()
            raise KubeUnreachable(f"cannot reach the API server of the {where}: {type(exc).__name__}") from None
        except ConfigException as exc:
            await self.close()
            raise KubeUnauthorized(f"{where}: no usable credential ({_scrub(str(exc))})") from None
        except (ValueError, TypeError) as exc:
            raise KubeApiError(f"{where}: unreadable answer while trying to {what} ({type(exc).__name__})") from None

    async def get(self) -> tuple[LeaseRecord, str] | None:
        try:
            body = await self._request("GET", self._item, f"read the Lease {self.namespace}/{self.name}")
        except _NotFound:
            return None
        if not isinstance(body, dict):
            raise KubeApiError(f"{self.access.describe()}: the Lease {self.namespace}/{self.name} is not an object")
        return record_from_lease(body), str((body.get("metadata") or {}).get("resourceVersion") or "")

    async def create(self, record: LeaseRecord) -> str:
        try:
            body = await self._request("POST", self._collection, f"create the Lease {self.namespace}/{self.name}", lease_body(self.namespace, self.name, record))
        except _NotFound:
            raise KubeApiError(f"{self.access.describe()}: cannot create the Lease: namespace {self.namespace} or {LEASE_API} not found") from None
        return str(((body or {}).get("metadata") or {}).get("resourceVersion") or "")

    async def replace(self, record: LeaseRecord, resource_version: str) -> str:
        try:
            body = await self._request(
                "PUT", self._item, f"update the Lease {self.namespace}/{self.name}", lease_body(self.namespace, self.name, record, resource_version or None)
            )
        except _NotFound:
            raise LeaseConflict(f"the Lease {self.namespace}/{self.name} was deleted") from None
        return str(((body or {}).get("metadata") or {}).get("resourceVersion") or "")


__all__ = ["KubeLeaseStore", "KubeError", "lease_body", "micro_time", "record_from_lease"]
